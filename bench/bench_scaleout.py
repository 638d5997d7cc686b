"""Scale-out benchmark (issue 20): replicas behind HAProxy, and a model split over llama.cpp RPC workers.

Arms, all on 127.0.0.1 with the same GGUF, started here:
  1 replica      ``skippy serve --parallel P --n-ctx N --threads T`` (T: all cores)
  2 replicas     two such servers with ``--threads T/2`` each (the same cores in total) behind HAProxy
                 running deploy/haproxy.cfg (its addresses and ports replaced by loopback ones);
                 each request sends its own ``X-Session-Id``, so the router spreads them
  local          ``skippy serve`` single-stream (one request at a time)
  RPC split      the same server with ``--rpc`` on two ``skippy rpc-worker --threads T/2`` processes:
                 every layer on a worker, activations over loopback TCP

Workloads:
  burst   ``--clients`` (default 64) short streaming-free chat requests at once (greedy, ``--max-tokens``);
          reported: aggregate completion tok/s (tokens / wall time of the burst), p50/p99 latency,
          failed requests. ``--reps`` bursts per arm, alternated (ABAB) so drift hits both.
  single  ``--single-reps`` requests one after another, each ``--single-tokens`` tokens; reported:
          decode tok/s as the server times it (``timings.predicted_per_second``, median).

The ratios (2 replicas / 1 replica, RPC split / local) are in one table. On a 2-core machine
expect no gain from replicas (both share the same two cores) and a loss from the RPC split
(every token crosses two TCP hops): the table is for machines with more cores or GPUs; on a
shared machine the numbers are indicative only.

Needs haproxy (``apt-get install haproxy``) and llama-cpp-python built with ``GGML_RPC``
(``make venv``). Usage: ``.venv/bin/python bench/bench_scaleout.py [--quick]``; writes
bench/out/scaleout-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support import free_port  # noqa: E402

OUT = ROOT / "bench" / "out"


class Proc:
    """A subprocess with its log in bench/out; ``stop()`` ends it."""

    def __init__(self, name: str, argv: list[str], stamp: str) -> None:
        OUT.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = OUT / f"scaleout-{stamp}-{name}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def serve(name: str, port: int, args: list[str], stamp: str) -> Proc:
    return Proc(name, [sys.executable, "-m", "skippy", "serve", "--host", "127.0.0.1", "--port", str(port),
                       *args], stamp)


def wait_http(url: str, proc: Proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"{proc.name} exited: see {proc.log_path}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name} not ready: see {proc.log_path}")


def wait_rpc(endpoint: str, proc: Proc, timeout: float = 60) -> None:
    from skippy.engine.runtime.backends import rpc_hello

    deadline = time.monotonic() + timeout
    while True:
        try:
            rpc_hello(endpoint, timeout=2)
            return
        except ConnectionError:
            if proc.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{proc.name} not ready: see {proc.log_path}") from None
            time.sleep(0.2)


def router_config(replicas: dict[str, int], port: int, stats_port: int) -> str:
    text = (ROOT / "deploy" / "haproxy.cfg").read_text(encoding="utf-8")
    servers = re.findall(r"^    server (\S+) \S+ check$", text, flags=re.M)
    for name, p in zip(servers, replicas.values(), strict=True):
        text = text.replace(f"server {name} {name}:8080 check", f"server {name} 127.0.0.1:{p} check")
    text = text.replace("    log stdout format raw local0 info\n", "")  # no per-request log lines in the bench
    return text.replace("bind :8080", f"bind 127.0.0.1:{port}").replace("bind :8404", f"bind 127.0.0.1:{stats_port}")


QUESTIONS = ["What is the capital of France?", "Name three fruits.", "Write a haiku about snow.",
             "What is 12 times 7?", "Give a synonym for happy.", "What colour is the sky?",
             "Explain rain in one sentence.", "Name a planet."]


async def one(client: httpx.AsyncClient, i: int, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    try:
        r = await client.post("/v1/chat/completions", headers={"X-Session-Id": f"session-{i}"}, json={
            "model": "m", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)] + f" (#{i})"}]})
        ok = r.status_code == 200
        tokens = r.json()["usage"]["completion_tokens"] if ok else 0
    except httpx.HTTPError:
        ok, tokens = False, 0
    return {"ok": ok, "tokens": tokens, "latency": time.perf_counter() - t0}


async def burst(base_url: str, clients: int, max_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(client, i, max_tokens) for i in range(clients)))
        wall = time.perf_counter() - t0
    lat = sorted(r["latency"] for r in results)
    return {"wall_s": wall, "tokens": sum(r["tokens"] for r in results), "failed": sum(not r["ok"] for r in results),
            "tok_s": sum(r["tokens"] for r in results) / wall, "p50_s": lat[len(lat) // 2],
            "p99_s": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def single(base_url: str, reps: int, max_tokens: int) -> dict:
    speeds = []
    for i in range(reps):
        r = httpx.post(base_url + "/v1/chat/completions", timeout=600, json={
            "model": "m", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"Tell me a long story about a lighthouse keeper ({i})."}]})
        r.raise_for_status()
        speeds.append(r.json()["timings"]["predicted_per_second"])
    return {"tok_s": statistics.median(speeds), "runs": speeds}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2, help="bursts per arm (alternated)")
    ap.add_argument("--single-reps", type=int, default=3)
    ap.add_argument("--single-tokens", type=int, default=128)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="one burst per arm, two single-stream runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.single_reps = 1, 2
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(haproxy):
        sys.exit("haproxy is not installed (apt-get install haproxy)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    cores = os.cpu_count() or 2
    half = max(1, cores // 2)
    base = ["--parallel", str(args.parallel), "--n-ctx", str(args.n_ctx)]
    procs: list[Proc] = []
    results: dict = {"machine": {"cores": cores, "loadavg_before": os.getloadavg()}, "args": vars(args)}
    try:
        # -- replicas ---------------------------------------------------------------------------------------
        p1, r1, r2 = free_port(), free_port(), free_port()
        procs += [serve("one-replica", p1, [*base, "--threads", str(cores)], stamp),
                  serve("replica-1", r1, [*base, "--threads", str(half)], stamp),
                  serve("replica-2", r2, [*base, "--threads", str(half)], stamp)]
        for proc, port in zip(procs, (p1, r1, r2), strict=True):
            wait_http(f"http://127.0.0.1:{port}/health", proc)
        rp, sp = free_port(), free_port()
        cfg = OUT / f"scaleout-{stamp}-haproxy.cfg"
        cfg.write_text(router_config({"replica-1": r1, "replica-2": r2}, rp, sp), encoding="utf-8")
        router = Proc("haproxy", [haproxy, "-db", "-f", str(cfg)], stamp)
        procs.append(router)
        wait_http(f"http://127.0.0.1:{rp}/health", router)
        time.sleep(3)  # both replicas UP (rise 2 x inter 1 s)
        arms = {"1 replica": f"http://127.0.0.1:{p1}", "2 replicas + haproxy": f"http://127.0.0.1:{rp}"}
        bursts: dict[str, list[dict]] = {a: [] for a in arms}
        for rep in range(args.reps):
            order = list(arms) if rep % 2 == 0 else list(reversed(arms))
            for arm in order:
                res = asyncio.run(burst(arms[arm], args.clients, args.max_tokens))
                bursts[arm].append(res)
                print(f"burst {arm}: {res['tok_s']:.1f} tok/s, p50 {res['p50_s']:.2f} s, failed {res['failed']}",
                      flush=True)
        results["burst"] = bursts
        for p in procs:
            p.stop()
        procs.clear()

        # -- RPC split vs local, single stream --------------------------------------------------------------
        local_port, split_port = free_port(), free_port()
        w1, w2 = free_port(), free_port()
        workers = [Proc(f"rpc-worker-{i}", [sys.executable, "-m", "skippy", "rpc-worker", "--port", str(p),
                                            "--threads", str(half)], stamp) for i, p in enumerate((w1, w2))]
        procs += workers
        for w, p in zip(workers, (w1, w2), strict=True):
            wait_rpc(f"127.0.0.1:{p}", w)
        local = serve("local", local_port, [*base, "--threads", str(cores)], stamp)
        split = serve("rpc-split", split_port, [*base, "--threads", str(cores), "--rpc",
                                                f"127.0.0.1:{w1},127.0.0.1:{w2}"], stamp)
        procs += [local, split]
        wait_http(f"http://127.0.0.1:{local_port}/health", local)
        wait_http(f"http://127.0.0.1:{split_port}/health", split)
        singles = {"local": single(f"http://127.0.0.1:{local_port}", args.single_reps, args.single_tokens),
                   "RPC split (2 workers)": single(f"http://127.0.0.1:{split_port}", args.single_reps,
                                                   args.single_tokens)}
        results["single"] = singles
    finally:
        for p in procs:
            p.stop()

    def med(arm: str, key: str) -> float:
        return statistics.median(b[key] for b in bursts[arm])

    one_r, two_r = "1 replica", "2 replicas + haproxy"
    c = args.clients
    rows = [
        (f"c{c} burst: aggregate tok/s", f"{med(one_r, 'tok_s'):.1f}", f"{med(two_r, 'tok_s'):.1f}",
         f"{med(two_r, 'tok_s') / med(one_r, 'tok_s'):.2f}"),
        (f"c{c} burst: p50 latency (s)", f"{med(one_r, 'p50_s'):.2f}", f"{med(two_r, 'p50_s'):.2f}",
         f"{med(two_r, 'p50_s') / med(one_r, 'p50_s'):.2f}"),
        (f"c{c} burst: failed requests", str(sum(b["failed"] for b in bursts[one_r])),
         str(sum(b["failed"] for b in bursts[two_r])), ""),
        ("single stream: decode tok/s", f"{singles['local']['tok_s']:.1f}",
         f"{singles['RPC split (2 workers)']['tok_s']:.1f}",
         f"{singles['RPC split (2 workers)']['tok_s'] / singles['local']['tok_s']:.2f}"),
    ]
    table = ["| measure | baseline (1 replica / local) | scale-out (2 replicas + haproxy / RPC split) | ratio |",
             "|---|---|---|---|", *(f"| {' | '.join(r)} |" for r in rows)]
    results["machine"]["loadavg_after"] = os.getloadavg()
    load = results["machine"]["loadavg_before"][0]
    print(f"\nscale-out on {cores} cores, 1-min load average {load:.1f} before the run (above ~0.5 the machine "
          f"was shared and llama.cpp's spinning threads make every number noisy: indicative only); "
          f"{args.reps} burst(s) per arm, {args.single_reps} single-stream run(s)\n")
    print("\n".join(table))
    out = OUT / f"scaleout-{stamp}.json"
    out.write_text(json.dumps({**results, "table": table}, indent=1), encoding="utf-8")
    print(f"\n{out}")


if __name__ == "__main__":
    main()
