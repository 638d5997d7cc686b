"""Speculative decoding benchmark: single-stream tok/s with and without prompt-lookup drafts.

Default model (SmolLM2-135M-Instruct), greedy, one ``skippy serve --spec-ngram K`` subprocess; each
request is sent twice per repetition, with ``"speculative": false`` (off) and without the field
(the server's ``--spec-ngram``, on), alternating which goes first, so both arms see the same load:

- copy-heavy: "repeat this report" over a ~1k-token input (rewrite / extract: the answer copies
  the prompt), max_tokens 256;
- normal chat: "write a long story about ...", max_tokens 256.

decode tok/s = 1 / TPOT, TPOT = (last - first content chunk) / (completion tokens - 1) of a streamed
reply (as bench_decode.py); e2e tok/s = completion tokens / request wall time. The table shows
medians over REPS and the on/off ratio (goal: >= 1.5x copy-heavy, >= 0.97x normal chat), the draft
tokens and their acceptance (``timings.draft_n`` / ``draft_n_accepted``), and whether the greedy
outputs of both arms were identical. Before the server starts, the raw cost of a verify batch is
measured on llama.cpp (``LlamaRuntime``, no server): the time of one ``llama_decode`` of 1..K+1 tokens
of one sequence after a 300-token prompt, as a multiple of the 1-token step. A draft pays only when
its tokens cost well under a step each (memory-bound decoding: large models, GPUs); on a CPU that is
compute-bound already at one token, a batch of n costs nearly n steps. "other CPU" is the CPU (in
cores) that processes other than this one and its server used meanwhile (see bench_decode.py);
above ~0.1 the numbers are noisy.
Samples go to bench/out/spec-<time>.json.

    python bench/bench_spec.py [--spec-ngram K] [--reps N] [--threads T]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics as st
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_decode import cpu_snapshot, other_cpu, wait_healthy  # noqa: E402

from skippy.engine.runtime.base import BatchEntry  # noqa: E402
from skippy.engine.runtime.llama import LlamaRuntime  # noqa: E402
from skippy.models import DEFAULT_MODEL, ensure_model  # noqa: E402

OUT = Path(__file__).parent / "out"
MAX_TOKENS = 256

_PLACES = ["the harbour", "the old mill", "the north field", "the river bridge", "the school", "the market square",
           "the orchard", "the quarry", "the chapel", "the train station", "the bakery", "the lighthouse",
           "the forest path", "the town hall", "the fishing pier", "the library"]
_WORK = ["repaired the roof", "cleared the drains", "painted the fence", "replaced two windows",
         "fixed the water pump", "rebuilt the stone wall", "checked the wiring", "mended the gate"]


def report() -> str:
    """A ~1k-token maintenance report: sixteen short paragraphs with distinct details."""
    paras = []
    for i, place in enumerate(_PLACES):
        paras.append(
            f"Visit {i + 1}: On day {3 + 2 * i} of the month the crew went to {place}. They {_WORK[i % 8]} and "
            f"{_WORK[(i + 3) % 8]}, which took {2 + i % 5} hours in total. The supervisor noted that {place} will "
            f"need another inspection in {4 + i % 6} weeks, and that the materials cost {120 + 15 * i} pounds.")
    return "\n\n".join(paras)


WORKLOADS = {
    "copy-heavy": "Repeat the following maintenance report exactly, word for word, without any comment:\n\n"
                  + report(),
    "normal chat": "Write a long story about a lighthouse keeper.",
}


async def one(client: httpx.AsyncClient, prompt: str, spec: bool) -> dict:
    body: dict = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": MAX_TOKENS,
                  "stream": True, "stream_options": {"include_usage": True}, "cache_prompt": False}
    if not spec:
        body["speculative"] = False
    t0, times, text, last = time.perf_counter(), [], [], None
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode()}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"error event in the stream: {line}")
            for c in chunk["choices"]:
                if c["delta"].get("content"):
                    times.append(time.perf_counter() - t0)
                    text.append(c["delta"]["content"])
            if chunk.get("usage"):
                last = chunk
    wall = time.perf_counter() - t0
    n = last["usage"]["completion_tokens"]
    timings = last.get("timings") or {}
    return {"tokens": n, "wall": wall, "ttft": times[0], "decode_tps": (n - 1) / (times[-1] - times[0]),
            "e2e_tps": n / wall, "text": "".join(text), "draft_n": timings.get("draft_n", 0),
            "draft_n_accepted": timings.get("draft_n_accepted", 0)}


async def run(model: str, k: int, reps: int, threads: int) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(Path(sys.executable).parent / "skippy"), "serve", "--model", model, "--port", str(port),
           "--parallel", "2", "--n-ctx", "2048", "--threads", str(threads), "--spec-ngram", str(k)]
    samples = []
    with open(OUT / "server-spec.log", "wb") as log:
        async with trio.open_nursery() as nursery:
            proc = await nursery.start(partial(trio.run_process, cmd, stdout=log, stderr=subprocess.STDOUT,
                                               check=False))
            try:
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=900) as client:
                    await wait_healthy(client, proc, OUT / "server-spec.log")
                    pids = [os.getpid(), proc.pid]
                    await one(client, "Say hello.", True)  # warm-up
                    for rep in range(reps):
                        for name, prompt in WORKLOADS.items():
                            for spec in ((False, True) if rep % 2 == 0 else (True, False)):
                                a = cpu_snapshot(pids)
                                r = await one(client, prompt, spec)
                                r.update(workload=name, spec=spec, rep=rep, other_cpu=other_cpu(a, cpu_snapshot(pids)))
                                samples.append(r)
                                print(f"rep {rep + 1} {name} spec={'on' if spec else 'off'}: {r['tokens']} tokens, "
                                      f"{r['decode_tps']:.1f} tok/s decode, {r['e2e_tps']:.1f} e2e, drafts "
                                      f"{r['draft_n_accepted']}/{r['draft_n']}, other CPU {r['other_cpu']:.2f}",
                                      flush=True)
            finally:
                nursery.cancel_scope.cancel()
    return samples


def verify_batch_cost(model: str, k: int, threads: int, reps: int = 12) -> dict[int, float]:
    """{n: median ms of one llama_decode of n tokens of one sequence} for n = 1..k+1 (a pending token
    plus n-1 draft tokens), after a 300-token prompt, with the server's flash attention default."""
    rt = LlamaRuntime(model, n_ctx_seq=2048, n_seq_max=1, n_threads=threads)
    try:
        prompt = list(range(100, 400))
        rt.decode([BatchEntry(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
        out = {}
        for n in range(1, k + 2):
            times = []
            for _ in range(reps):
                rt.seq_rm(0, len(prompt), -1)
                t0 = time.perf_counter()
                rt.decode([BatchEntry(500 + j, len(prompt) + j, 0, True) for j in range(n)])
                times.append(time.perf_counter() - t0)
            out[n] = 1e3 * st.median(times)
        return out
    finally:
        rt.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec-ngram", type=int, default=5, help="draft tokens per step of the 'on' arm")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    model = str(ensure_model(DEFAULT_MODEL))
    cost = verify_batch_cost(model, args.spec_ngram, args.threads)
    print("| tokens in the batch (1 pending + drafts) | " + " | ".join(str(n) for n in cost) + " |")
    print("|---|" + "---:|" * len(cost))
    print("| llama_decode ms | " + " | ".join(f"{ms:.2f}" for ms in cost.values()) + " |")
    print("| x the 1-token step | " + " | ".join(f"{ms / cost[1]:.2f}" for ms in cost.values()) + " |\n")
    samples = trio.run(run, model, args.spec_ngram, args.reps, args.threads)
    print(f"\n--spec-ngram {args.spec_ngram}, {args.reps} reps, {args.threads} threads, max_tokens {MAX_TOKENS}\n")
    print("| workload | off decode tok/s | on decode tok/s | ratio | off e2e tok/s | on e2e tok/s | ratio "
          "| accepted / drafted | same greedy output | goal | met | other CPU (max) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|")
    summary = {}
    for name, goal in (("copy-heavy", 1.5), ("normal chat", 0.97)):
        off = [s for s in samples if s["workload"] == name and not s["spec"]]
        on = [s for s in samples if s["workload"] == name and s["spec"]]
        d_off, d_on = st.median(s["decode_tps"] for s in off), st.median(s["decode_tps"] for s in on)
        e_off, e_on = st.median(s["e2e_tps"] for s in off), st.median(s["e2e_tps"] for s in on)
        acc, drafted = sum(s["draft_n_accepted"] for s in on), sum(s["draft_n"] for s in on)
        same = all(a["text"] == b["text"] for a, b in zip(off, on, strict=True))
        ratio = d_on / d_off
        load = max(s["other_cpu"] for s in off + on)
        summary[name] = {"off_decode_tps": d_off, "on_decode_tps": d_on, "ratio": ratio, "off_e2e_tps": e_off,
                         "on_e2e_tps": e_on, "accepted": acc, "drafted": drafted, "same_output": same,
                         "other_cpu": load}
        print(f"| {name} | {d_off:.1f} | {d_on:.1f} | {ratio:.2f}x | {e_off:.1f} | {e_on:.1f} | {e_on / e_off:.2f}x "
              f"| {acc} / {drafted} | {'yes' if same else 'NO'} | >= {goal}x | {'yes' if ratio >= goal else 'NO'} "
              f"| {load:.2f} |")
    if max(s["other_cpu"] for s in samples) > 0.1:
        print("\nwarning: other processes used CPU during the run (see 'other CPU'); numbers are not reliable")
    path = OUT / f"spec-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"spec_ngram": args.spec_ngram, "reps": args.reps, "threads": args.threads,
                                "max_tokens": MAX_TOKENS, "verify_batch_ms": cost, "summary": summary,
                                "samples": samples}, indent=1))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
