"""Decode benchmark: raw llama.cpp vs ``skippy serve``, in one run.

Default model (SmolLM2-135M-Instruct), greedy, N=128 output tokens, all cores' threads:

1. raw: llama.cpp low-level decode without the server (``LlamaRuntime``: prefill
   the chat prompt, then one ``llama_decode`` + greedy sample per token, one
   sequence), and raw batched: the 16 prompts of the largest level prefilled one
   by one, then decoded together, one batch per step (the ceiling for the
   server's c16 aggregate). Run before the server starts and again after it stops.
2. server single stream: ``skippy serve --parallel 16`` as a subprocess; one
   streaming chat request (temperature 0, max_tokens 128,
   ``stream_options.include_usage``). This is the concurrency-1 wave of 3.
3. aggregate output tok/s at concurrency 1, 4 and 16: each client streams a
   different prompt; aggregate = total completion tokens / wall time of the wave.
4. the same waves against llama-server (the peer; ``-np 16 -c 4096*16``, its defaults
   otherwise; bench/peer.py), when ``make bench-peer`` has built it; skipped otherwise.

Names (as in vLLM's and llama.cpp's benchmarks):
  TTFT  time to first token: request sent -> first content chunk.
  ITL   inter-token latency: gap between consecutive content chunks.
  TPOT  time per output token after the first: (last - first chunk) / (tokens - 1).
  decode tok/s = 1 / TPOT (raw: the same definition over its 128 tokens).
Each measurement runs REPS times (levels interleaved); tables show medians.
"other CPU" is the CPU time (in cores) that processes other than this one and
its server used meanwhile: llama.cpp's spinning threads collapse (10-50x) when
another CPU-heavy process shares the 2 cores, so a value above ~0.1 voids a run.
All samples go to bench/out/decode-<time>.json, the server log to bench/out/server.log.

Per-step overhead: after each wave the server's ``/metrics`` step-time histograms
(``skippy:decode_seconds``, ``skippy:step_overhead_seconds`` and its parts
``skippy:step_sample_seconds``, ``skippy:step_reader_wait_seconds`` and ``skippy:step_handoff_seconds``)
are read, and a table gives per B (concurrent streams) the decode and overhead p50/p99 (interpolated
in the histogram buckets, as Prometheus' ``histogram_quantile``), then the overhead's mean parts:
sampling, the reader wait (waiting for request tasks, not computing), the handoff (the step crossing
between the trio thread and the decode thread: waiting for the GIL or a core) and the loop's own work
(the rest: events, scheduling), and the overhead share of the step time.
``--levels 1,16,64 --parallel 64 --quick`` measures just that (no raw baseline, one rep);
``--temperature 0.8`` exercises the sampled chain.

For the GPU run (bench/gpu/run.sh): ``--model PATH``, ``--out DIR``, ``--skippy-args`` / ``--peer-args`` (extra
flags of both servers, e.g. ``-ngl 99``), ``--variant NAME=ARGS`` (another skippy arm with extra flags, e.g.
``skippy-bs=--backend-sampling``; repeatable) and ``--no-raw`` (no in-process llama.cpp baseline: each skippy arm
against llama-server only, the ratios in one table and ``decode-<time>.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics as st
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from skippy.engine.chat.templates import ChatTemplate
from skippy.engine.runtime.base import BatchEntry
from skippy.engine.runtime.llama import LlamaRuntime
from skippy.engine.sampling.params import SamplingParams
from skippy.models import DEFAULT_MODEL, ensure_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from peer import llama_server_binary, llama_server_cmd  # noqa: E402

from tests.support import free_port  # noqa: E402

N, REPS, LEVELS, PARALLEL, N_CTX = 128, 3, (1, 4, 16), 16, 4096
THREADS = os.cpu_count() or 1
OUT = Path(__file__).parent / "out"
SUBJECTS = ["a dragon", "a lighthouse keeper", "a robot chef", "a lost city", "a time traveller", "a pirate queen",
            "a haunted library", "a desert caravan", "a clockmaker", "a mountain village", "a space station",
            "a talking cat", "a winter festival", "a sunken ship", "a young wizard", "a forest spirit"]
PROMPTS = [f"{verb} about {s}." for verb in ("Write a long story", "Tell a tale", "Write a poem", "Describe a day")
           for s in SUBJECTS]  # 64 distinct prompts
TEMPERATURE = 0.0
STEP_METRICS = ("skippy:decode_seconds", "skippy:step_overhead_seconds", "skippy:step_sample_seconds",
                "skippy:step_reader_wait_seconds", "skippy:step_handoff_seconds")


async def step_histograms(client: httpx.AsyncClient) -> dict[str, dict]:
    """The step-time histograms of ``/metrics``: {name: {"buckets": [(le, cumulative count)], "sum", "count"}}."""
    text = (await client.get("/metrics")).text
    out: dict[str, dict] = {m: {"buckets": [], "sum": 0.0, "count": 0.0} for m in STEP_METRICS}
    for line in text.splitlines():
        for m in STEP_METRICS:
            if line.startswith(m + "_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                out[m]["buckets"].append((float(le), float(line.rsplit(" ", 1)[1])))
            elif line.startswith(m + "_sum "):
                out[m]["sum"] = float(line.rsplit(" ", 1)[1])
            elif line.startswith(m + "_count "):
                out[m]["count"] = float(line.rsplit(" ", 1)[1])
    return out


def hist_delta(a: dict, b: dict) -> dict:
    """Histogram ``b`` minus ``a`` (the observations between two scrapes)."""
    return {"buckets": [(le, cb - ca) for (le, cb), (_, ca) in zip(b["buckets"], a["buckets"], strict=True)],
            "sum": b["sum"] - a["sum"], "count": b["count"] - a["count"]}


def quantile(h: dict, q: float) -> float:
    """``q``-quantile (seconds) by linear interpolation inside the bucket (Prometheus ``histogram_quantile``)."""
    total = h["count"]
    if total <= 0:
        return float("nan")
    rank, lo, prev = q * total, 0.0, 0.0
    for le, c in h["buckets"]:
        if c >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((rank - prev) / (c - prev) if c > prev else 0.0)
        lo, prev = le, c
    return lo


def cpu_snapshot(pids: list[int]) -> tuple[float, float, float]:
    """(wall s, machine busy CPU s, CPU s of ``pids``) from /proc (Linux)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    own = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            own += sum(int(x) for x in fh.read().rsplit(")", 1)[1].split()[11:13])  # utime, stime
    hz = os.sysconf("SC_CLK_TCK")
    return time.monotonic(), (sum(f) - f[3] - f[4]) / hz, own / hz


def other_cpu(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """Cores used by other processes between snapshots ``a`` and ``b``."""
    return max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0])


def raw_decode_tps(rt: LlamaRuntime, prompt: list[int]) -> float:
    """Prefill ``prompt`` in sequence 0, greedy-decode N tokens; returns (N-1) / (t_last - t_first)."""
    rt.seq_rm(0)
    rt.decode([BatchEntry(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    sampler = rt.new_sampler(SamplingParams(temperature=0.0))
    tok, t_first = rt.sample(sampler, len(prompt) - 1), time.perf_counter()
    for k in range(N - 1):
        rt.decode([BatchEntry(tok, len(prompt) + k, 0, True)])
        tok = rt.sample(sampler, 0)
    dt = time.perf_counter() - t_first
    rt.free_sampler(sampler)
    return (N - 1) / dt


def raw_batched_tps(rt: LlamaRuntime, prompts: list[list[int]]) -> float:
    """Prefill each prompt in its own sequence, then greedy-decode N tokens for all of them in one
    batch per step (sequences in slot order); aggregate tok/s over the whole wall time, as the
    server's waves count it."""
    samplers = [rt.new_sampler(SamplingParams(temperature=0.0)) for _ in prompts]
    t0 = time.perf_counter()
    toks = []
    for s, p in enumerate(prompts):
        rt.seq_rm(s)
        rt.decode([BatchEntry(t, i, s, i == len(p) - 1) for i, t in enumerate(p)])
        toks.append(rt.sample(samplers[s], len(p) - 1))
    for k in range(N - 1):
        rt.decode([BatchEntry(toks[s], len(p) + k, s, True) for s, p in enumerate(prompts)])
        toks = [rt.sample(samplers[s], s) for s in range(len(prompts))]
    dt = time.perf_counter() - t0
    for sampler in samplers:
        rt.free_sampler(sampler)
    return N * len(prompts) / dt


def raw_baseline(model: str) -> list[dict]:
    """REPS runs of raw single-sequence decode and raw batched decode of the largest level's prompts."""
    rt = LlamaRuntime(model, n_ctx_seq=4096, n_seq_max=LEVELS[-1], n_threads=THREADS)
    try:
        m = rt.meta
        tmpl = ChatTemplate(m.chat_template, bos_token=m.bos_token, eos_token=m.eos_token)
        prompts = [rt.vocab.tokenize(tmpl.render([{"role": "user", "content": p}]), add_special=True,
                                     parse_special=True)
                   for p in PROMPTS[:LEVELS[-1]]]
        raw_decode_tps(rt, prompts[0])  # warm-up
        out = []
        for _ in range(REPS):
            a = cpu_snapshot([os.getpid()])
            tps = raw_decode_tps(rt, prompts[0])
            tps_batched = raw_batched_tps(rt, prompts)
            out.append({"tps": tps, "tps_batched": tps_batched, "other_cpu": other_cpu(a, cpu_snapshot([os.getpid()]))})
        return out
    finally:
        rt.close()


async def stream_one(client: httpx.AsyncClient, prompt: str) -> dict:
    """One streaming chat request: TTFT, TPOT, ITLs (seconds) and completion tokens from usage."""
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": TEMPERATURE, "max_tokens": N,
            "stream": True, "stream_options": {"include_usage": True}}
    t0, times, usage = time.perf_counter(), [], None
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code} for {prompt!r}: {(await r.aread()).decode()}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"error event in the stream for {prompt!r}: {line}")
            if any(c["delta"].get("content") for c in chunk["choices"]):
                times.append(time.perf_counter() - t0)
            usage = chunk.get("usage") or usage
    if usage is None or not times:
        raise RuntimeError(f"stream for {prompt!r} ended without usage or content (usage={usage})")
    n = usage["completion_tokens"]
    return {"tokens": n, "ttft": times[0], "tpot": (times[-1] - times[0]) / max(1, n - 1),
            "itl": [b - a for a, b in zip(times, times[1:], strict=False)]}


async def wave(client: httpx.AsyncClient, c: int, pids: list[int], steps: bool = True) -> dict:
    """``c`` concurrent streams (prompts 0..c-1); aggregate = completion tokens / wall time."""
    results: list[dict] = [{}] * c

    async def one(i: int) -> None:
        results[i] = await stream_one(client, PROMPTS[i])

    h0 = await step_histograms(client) if steps else None
    a = cpu_snapshot(pids)
    async with trio.open_nursery() as nursery:
        for i in range(c):
            nursery.start_soon(one, i)
    b = cpu_snapshot(pids)
    h1 = await step_histograms(client) if steps else None
    hists = {m: hist_delta(h0[m], h1[m]) for m in STEP_METRICS} if h0 is not None and h1 is not None else None
    return {"c": c, "wall": b[0] - a[0], "aggregate": sum(r["tokens"] for r in results) / (b[0] - a[0]),
            "other_cpu": other_cpu(a, b), "requests": results, "steps": hists}


async def wait_healthy(client: httpx.AsyncClient, proc: trio.Process, log: Path) -> None:
    """Poll ``/health`` until 200 (503 while the model loads); fail if the server exits or 180 s pass."""
    with trio.fail_after(180):
        while proc.returncode is None:
            try:
                if (await client.get("/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await trio.sleep(0.2)
    raise RuntimeError(f"server exited with {proc.returncode}; see {log}")


def skippy_cmd(model: str, port: int, extra: list[str] | None = None) -> list[str]:
    return [str(Path(sys.executable).parent / "skippy"), "serve", "--model", model, "--port", str(port),
            "--parallel", str(PARALLEL), "--n-ctx", str(N_CTX), "--threads", str(THREADS), *(extra or [])]


async def server_waves(name: str, cmd_for_port, log_path: Path, steps: bool = True) -> list[dict]:
    """REPS rounds of the LEVELS waves against the server ``cmd_for_port(port)`` starts (warm-up first)."""
    port = free_port()
    cmd = cmd_for_port(port)
    with open(log_path, "wb") as log:
        async with trio.open_nursery() as nursery:
            proc = await nursery.start(partial(trio.run_process, cmd, stdout=log, stderr=subprocess.STDOUT,
                                               check=False))
            try:
                # a new connection per request: llama-server's HTTP library drops kept-alive connections
                # between requests ("Server disconnected without sending a response")
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600,
                                             limits=httpx.Limits(max_keepalive_connections=0)) as client:
                    await wait_healthy(client, proc, log_path)
                    pids = [os.getpid(), proc.pid]
                    await wave(client, 2, pids, steps)  # warm-up
                    waves = []
                    for rep in range(REPS):
                        for c in LEVELS:
                            waves.append(w := await wave(client, c, pids, steps))
                            print(f"{name} rep {rep + 1} c={c}: {w['aggregate']:.1f} tok/s aggregate, "
                                  f"{w['wall']:.1f} s, other CPU {w['other_cpu']:.2f}", flush=True)
                    return waves
            finally:
                nursery.cancel_scope.cancel()  # run_process sends SIGTERM (SIGKILL after 5 s)


def overhead_table(waves: list[dict]) -> None:
    """Per B: decode and step-overhead p50/p99 (ms); the overhead's mean parts (ms): sampling, reader wait,
    thread handoff and the loop's own work (the rest), per gap between two decodes (a multi-step run's reader
    wait and handoff come once per run); the overhead share of the step time."""
    print("\n| B | decode p50 ms | decode p99 ms | overhead p50 ms | overhead p99 ms | sampling mean ms "
          "| reader wait mean ms | handoff mean ms | loop work mean ms | overhead share |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in LEVELS:
        hs = [w["steps"] for w in waves if w["c"] == c]
        merged = {m: {"buckets": [(le, sum(h[m]["buckets"][i][1] for h in hs))
                                  for i, (le, _) in enumerate(hs[0][m]["buckets"])],
                      "sum": sum(h[m]["sum"] for h in hs), "count": sum(h[m]["count"] for h in hs)}
                  for m in STEP_METRICS}
        dec, ovh = merged["skippy:decode_seconds"], merged["skippy:step_overhead_seconds"]
        smp, wait = merged["skippy:step_sample_seconds"], merged["skippy:step_reader_wait_seconds"]
        hand = merged["skippy:step_handoff_seconds"]
        # per gap between two decodes: a multi-step run's one reader wait and handoff are spread over its gaps
        mean = {k: 1e3 * h["sum"] / max(1.0, h["count"] if k in ("ovh", "smp") else ovh["count"])
                for k, h in (("ovh", ovh), ("smp", smp), ("wait", wait), ("hand", hand))}
        loop = mean["ovh"] - mean["smp"] - mean["wait"] - mean["hand"]
        share = ovh["sum"] / (ovh["sum"] + dec["sum"]) if dec["sum"] else float("nan")
        print(f"| {c} | {1e3 * quantile(dec, 0.5):.2f} | {1e3 * quantile(dec, 0.99):.2f} "
              f"| {1e3 * quantile(ovh, 0.5):.2f} | {1e3 * quantile(ovh, 0.99):.2f} | {mean['smp']:.2f} "
              f"| {mean['wait']:.2f} | {mean['hand']:.2f} | {loop:.2f} | {100 * share:.1f}% |")


def summarize_levels(waves: list[dict]) -> dict[int, dict]:
    """Per concurrency level: medians over the REPS waves (aggregate, TTFT, ITL, TPOT) and the max other CPU."""
    levels = {}
    for c in LEVELS:
        ws = [w for w in waves if w["c"] == c]
        reqs = [r for w in ws for r in w["requests"]]
        levels[c] = {"aggregate": st.median(w["aggregate"] for w in ws),
                     "ttft_ms": 1e3 * st.median(r["ttft"] for r in reqs),
                     "itl_ms": 1e3 * st.median(x for r in reqs for x in r["itl"]),
                     "tpot_ms": 1e3 * st.median(r["tpot"] for r in reqs), "tokens": st.mean(r["tokens"] for r in reqs),
                     "single_tps": st.median(1 / w["requests"][0]["tpot"] for w in ws) if c == 1 else None,
                     "other_cpu": max(w["other_cpu"] for w in ws)}
    return levels


def met(ok: bool) -> str:
    return "yes" if ok else "NO"


def overhead_share(waves: list[dict], c: int) -> float | None:
    """The step overhead's share of the step time (overhead / (overhead + decode)) over the waves at ``c``."""
    hs = [w["steps"] for w in waves if w["c"] == c and w.get("steps")]
    dec = sum(h["skippy:decode_seconds"]["sum"] for h in hs)
    ovh = sum(h["skippy:step_overhead_seconds"]["sum"] for h in hs)
    return ovh / (ovh + dec) if dec else None


def peer_only(args: argparse.Namespace, model: str) -> None:
    """``--no-raw``: each skippy arm (``--skippy-args``, then each ``--variant``) and llama-server, the same waves;
    a table of ratios against llama-server (the issue-14 targets) and decode-<time>.json."""
    base = args.skippy_args.split()
    arms_args = {"skippy": base}
    for spec in args.variant:
        name, _, extra = spec.partition("=")
        if not name or name in arms_args:
            sys.exit(f"--variant {spec!r}: expected a new NAME=ARGS")
        arms_args[name] = base + extra.split()
    arms: dict[str, list[dict]] = {}
    errors: dict[str, str] = {}
    for name, extra in arms_args.items():
        try:
            arms[name] = trio.run(server_waves, name, partial(skippy_cmd, model, extra=extra), OUT / f"{name}.log")
        except Exception as e:  # the others still run; the JSON says what failed
            errors[name] = repr(e)
            print(f"{name} failed: {e!r}", flush=True)
    binary = llama_server_binary()
    if binary is not None:
        try:
            arms["llama-server"] = trio.run(server_waves, "llama-server", lambda port: llama_server_cmd(
                binary, model, host="127.0.0.1", port=port, parallel=PARALLEL, n_ctx=N_CTX, threads=THREADS,
                extra=args.peer_args.split()), OUT / "llama-server.log", False)
        except Exception as e:
            errors["llama-server"] = repr(e)
            print(f"llama-server failed: {e!r}", flush=True)
    else:
        print("no llama-server built (make bench-peer): no peer ratios", flush=True)
    summary = {name: summarize_levels(waves) for name, waves in arms.items()}
    peer = summary.get("llama-server")
    print("\n| server | concurrency | aggregate tok/s | TTFT p50 ms | TPOT p50 ms | vs llama-server tok/s "
          "| vs llama-server TTFT | overhead share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, lv in summary.items():
        for c, v in lv.items():
            r = f"{v['aggregate'] / peer[c]['aggregate']:.2f}" if peer and name != "llama-server" else ""
            rt = f"{v['ttft_ms'] / peer[c]['ttft_ms']:.2f}" if peer and name != "llama-server" else ""
            share = overhead_share(arms[name], c) if name != "llama-server" else None
            print(f"| {name} | {c} | {v['aggregate']:.1f} | {v['ttft_ms']:.1f} | {v['tpot_ms']:.2f} | {r} | {rt} "
                  f"| {'' if share is None else f'{100 * share:.1f}%'} |")
    for name in arms_args:
        if name in arms:
            print(f"\n{name}:")
            overhead_table(arms[name])
    path = OUT / f"decode-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({
        "model": model, "n": N, "reps": REPS, "threads": THREADS, "parallel": PARALLEL, "n_ctx": N_CTX,
        "levels_run": LEVELS, "arms_args": arms_args, "peer_args": args.peer_args.split(), "errors": errors,
        "levels": summary, "overhead_share": {name: {c: overhead_share(ws, c) for c in LEVELS}
                                              for name, ws in arms.items() if name != "llama-server"},
        "waves": arms}, indent=1))
    print(f"\nresults: {path}")
    if errors:
        sys.exit(f"failed arms: {', '.join(errors)}")


def main() -> None:
    global LEVELS, PARALLEL, REPS, TEMPERATURE, N_CTX, N, OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrency levels (comma-separated)")
    ap.add_argument("--parallel", type=int, default=PARALLEL, help="server --parallel (llama-server -np)")
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--temperature", type=float, default=TEMPERATURE)
    ap.add_argument("--max-tokens", type=int, default=N, help="max_tokens of each request (N)")
    ap.add_argument("--n-ctx", type=int, default=N_CTX, help="server --n-ctx (per sequence)")
    ap.add_argument("--quick", action="store_true",
                    help="no raw llama.cpp baseline and no llama-server; only skippy's waves and step times")
    ap.add_argument("--model", default=None, help="GGUF path (default: the cached SmolLM2-135M-Instruct)")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the JSON and the server logs")
    ap.add_argument("--skippy-args", default="", help="extra `skippy serve` flags (one string, split on spaces)")
    ap.add_argument("--peer-args", default="", help="extra llama-server flags (one string, split on spaces)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="another skippy arm: --skippy-args plus ARGS (split on spaces); repeatable")
    ap.add_argument("--no-raw", action="store_true",
                    help="no raw llama.cpp baseline: the skippy arms against llama-server only")
    args = ap.parse_args()
    LEVELS = tuple(int(x) for x in args.levels.split(","))
    PARALLEL, REPS, TEMPERATURE = max(args.parallel, max(LEVELS)), args.reps, args.temperature
    N_CTX, N = args.n_ctx, args.max_tokens
    OUT = args.out
    OUT.mkdir(parents=True, exist_ok=True)
    model = args.model or str(ensure_model(DEFAULT_MODEL))
    if args.no_raw:
        peer_only(args, model)
        return
    if args.quick:
        waves = trio.run(server_waves, "skippy", partial(skippy_cmd, model), OUT / "server.log")
        overhead_table(waves)
        path = OUT / f"overhead-{time.strftime('%Y%m%d-%H%M%S')}.json"
        path.write_text(json.dumps({"levels": LEVELS, "temperature": TEMPERATURE, "waves": waves}, indent=1))
        print(f"\nresults: {path}")
        return
    raw = raw_baseline(model)
    arms = {"skippy": trio.run(server_waves, "skippy", partial(skippy_cmd, model), OUT / "server.log")}
    binary = llama_server_binary()
    if binary is not None:
        arms["llama-server"] = trio.run(server_waves, "llama-server", lambda port: llama_server_cmd(
            binary, model, host="127.0.0.1", port=port, parallel=PARALLEL, n_ctx=N_CTX, threads=THREADS),
            OUT / "llama-server.log", False)  # no skippy step-time histograms there
    else:
        print("no llama-server built (make bench-peer): the peer columns are skipped", flush=True)
    raw += raw_baseline(model)  # again after the servers stopped: drift shows as spread
    summary = {name: summarize_levels(waves) for name, waves in arms.items()}
    levels, peer = summary["skippy"], summary.get("llama-server")
    raw_tps = st.median(r["tps"] for r in raw)
    single = levels[1]["single_tps"]
    ratio, scale = single / raw_tps, levels[LEVELS[-1]]["aggregate"] / levels[1]["aggregate"]
    raw_batched = st.median(r["tps_batched"] for r in raw)
    batched_ratio = levels[LEVELS[-1]]["aggregate"] / raw_batched
    runs = ", ".join(f"{r['tps']:.1f}" for r in raw)
    print(f"\nraw decode tok/s per run: {runs} ({THREADS} threads; "
          f"max other CPU {max(r['other_cpu'] for r in raw):.2f} cores)\n")
    print("| server | concurrency | aggregate tok/s | TTFT p50 ms | ITL p50 ms | TPOT p50 ms "
          "| completion tokens (mean) | other CPU (max) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, lv in summary.items():
        for c, v in lv.items():
            print(f"| {name} | {c} | {v['aggregate']:.1f} | {v['ttft_ms']:.0f} | {v['itl_ms']:.1f} "
                  f"| {v['tpot_ms']:.1f} | {v['tokens']:.0f} | {v['other_cpu']:.2f} |")
    rows = [("raw decode tok/s (llama.cpp, 1 sequence)", f"{raw_tps:.1f}", "", ""),
            ("server single-stream decode tok/s (1/TPOT)", f"{single:.1f}", "", ""),
            ("server single-stream TTFT ms", f"{levels[1]['ttft_ms']:.0f}", "", ""),
            ("server / raw", f"{ratio:.2f}", ">= 0.95", met(ratio >= 0.95)),
            (f"aggregate c{LEVELS[-1]} / c1", f"{scale:.2f}", ">= 1.6", met(scale >= 1.6)),
            (f"raw batched decode tok/s (llama.cpp, {LEVELS[-1]} sequences, prefill included)", f"{raw_batched:.1f}",
             "", ""),
            (f"raw batched c{LEVELS[-1]} / raw c1 (what llama.cpp allows)", f"{raw_batched / raw_tps:.2f}", "", ""),
            (f"server c{LEVELS[-1]} aggregate / raw batched", f"{batched_ratio:.2f}", "(info)", "")]
    if peer is not None:
        r_tps = single / peer[1]["single_tps"]
        r_ttft = levels[1]["ttft_ms"] / peer[1]["ttft_ms"]
        rows += [("llama-server single-stream decode tok/s (1/TPOT)", f"{peer[1]['single_tps']:.1f}", "", ""),
                 ("single-stream tok/s, skippy / llama-server", f"{r_tps:.2f}", ">= 1.0", met(r_tps >= 1.0)),
                 ("single-stream TTFT, skippy / llama-server", f"{r_ttft:.2f}", "<= 1.0", met(r_ttft <= 1.0))]
        for c in LEVELS[1:]:
            r = levels[c]["aggregate"] / peer[c]["aggregate"]
            target = 1.2 if c >= 16 else 1.0
            rows.append((f"aggregate c{c} tok/s, skippy / llama-server", f"{r:.2f}", f">= {target}",
                         met(r >= target)))
    print("\n| measure | value | target | met |\n|---|---:|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    overhead_table(arms["skippy"])
    if max([r["other_cpu"] for r in raw] + [w["other_cpu"] for ws in arms.values() for w in ws]) > 0.1:
        print("\nwarning: other processes used CPU during the run (see 'other CPU'); numbers are not reliable")
    path = OUT / f"decode-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"n": N, "reps": REPS, "threads": THREADS, "parallel": PARALLEL, "n_ctx": N_CTX,
                                "raw": raw, "levels": summary, "waves": arms, "summary": {
                                    "raw_tps": raw_tps, "single_tps": single, "server_over_raw": ratio,
                                    "c16_over_c1": scale, "raw_batched_tps": raw_batched,
                                    "server_over_raw_batched": batched_ratio, "rows": rows}},
                              indent=1))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
