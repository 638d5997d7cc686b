"""Embeddings benchmark: ``skippy serve --embeddings`` vs llama-cpp-python's ``create_embedding``, in one run.

Default model (SmolLM2-135M-Instruct), mean pooling, all cores' threads:

1. throughput, inputs/s at batch 1, 16 and 64: llama-cpp-python's ``Llama(embedding=True)``
   ``create_embedding`` (flash attention on, as the server's ``auto``; one ``llama_decode`` per batch of
   inputs, in-process), then ``POST /v1/embeddings`` with the same inputs to ``skippy serve --embeddings
   --pooling mean``, one request at a time (HTTP, JSON floats, L2 normalization included); llama-cpp-python
   runs again after the server stopped, so drift shows as spread. Inputs are distinct sentences of
   about 16 tokens.
2. decode ITL of running streams while embedding batches run vs without: ``STREAMS`` greedy chat
   streams (max_tokens ``N``) alone, then the same streams while a client keeps sending 64-input
   embedding requests from the streams' first token to their end. ITL (gap between consecutive
   content chunks, as in bench_decode.py) p50 / p99 / max, the streams' aggregate tok/s, and the
   embedding inputs/s the server gave meanwhile. The scheduler cuts each embedding batch to what the
   step budget (``--step-tokens``) leaves, so ITL grows by about one such batch per step.

Each measurement runs REPS times; tables show medians. "other CPU" is the CPU (in cores) that
processes other than this one and its server used meanwhile (see bench_decode.py: above ~0.1 the
numbers are not reliable on a shared machine). Samples go to bench/out/embeddings-<time>.json.
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

from skippy.models import DEFAULT_MODEL, ensure_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decode  # noqa: E402
from bench_decode import SUBJECTS, cpu_snapshot, other_cpu, stream_one, wait_healthy  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import free_port  # noqa: E402

BATCHES, REPS, STREAMS, N = (1, 16, 64), 3, 4, 64
THREADS = os.cpu_count() or 1
OUT = Path(__file__).parent / "out"
#: 64 distinct sentences (about 16 tokens each)
TEXTS = [f"Document {i}: a short note about {SUBJECTS[i % 16]}, filed under topic number {i // 16}."
         for i in range(64)]
#: inputs embedded per measurement at each batch size (requests = INPUTS // batch)
INPUTS = 64


def llama_cpp_python_arm(model: str) -> dict[int, list[float]]:
    """inputs/s of ``create_embedding`` per batch size, REPS samples each (a warm-up first)."""
    import llama_cpp

    llm = llama_cpp.Llama(model, embedding=True, n_ctx=512, n_batch=512, n_threads=THREADS, n_threads_batch=THREADS,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, flash_attn=True, verbose=False)
    try:
        llm.create_embedding(TEXTS[:16])
        out: dict[int, list[float]] = {b: [] for b in BATCHES}
        for _ in range(REPS):
            for b in BATCHES:
                t0 = time.perf_counter()
                for k in range(INPUTS // b):
                    llm.create_embedding(TEXTS[k * b:(k + 1) * b])
                out[b].append(INPUTS / (time.perf_counter() - t0))
        return out
    finally:
        llm.close()


async def embed(client: httpx.AsyncClient, texts: list[str]) -> None:
    r = await client.post("/v1/embeddings", json={"model": "m", "input": texts})
    if r.status_code != 200 or len(r.json()["data"]) != len(texts):
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")


async def skippy_throughput(client: httpx.AsyncClient, pids: list[int]) -> tuple[dict[int, list[float]], float]:
    """inputs/s of sequential ``/v1/embeddings`` requests per batch size, REPS samples each; max other CPU."""
    out: dict[int, list[float]] = {b: [] for b in BATCHES}
    worst = 0.0
    for _ in range(REPS):
        for b in BATCHES:
            a, t0 = cpu_snapshot(pids), time.perf_counter()
            for k in range(INPUTS // b):
                await embed(client, TEXTS[k * b:(k + 1) * b])
            out[b].append(INPUTS / (time.perf_counter() - t0))
            worst = max(worst, other_cpu(a, cpu_snapshot(pids)))
    return out, worst


async def streams_wave(client: httpx.AsyncClient, pids: list[int], with_embeddings: bool) -> dict:
    """STREAMS concurrent chat streams; with ``with_embeddings``, 64-input embedding requests one after the
    other from the streams' first token until the last stream ends."""
    results: list[dict] = [{}] * STREAMS
    started, done = trio.Event(), trio.Event()
    embedded, t_end = 0, 0.0

    async def one(i: int) -> None:
        results[i] = await stream_one(client, bench_decode.PROMPTS[i])

    async def streams() -> None:
        nonlocal t_end
        async with trio.open_nursery() as inner:
            for i in range(STREAMS):
                inner.start_soon(one, i)
        t_end = time.perf_counter()
        done.set()

    async def embedder() -> None:
        nonlocal embedded
        await started.wait()
        while not done.is_set():
            await embed(client, TEXTS)
            embedded += len(TEXTS)

    async def predicted() -> float:
        text = (await client.get("/metrics")).text
        return float(text.split("\nllamacpp:tokens_predicted_total ", 1)[1].split("\n", 1)[0])

    async def first_tokens(before: float) -> None:  # every stream prefilled: embeddings start beside decoding
        while await predicted() < before + STREAMS and not done.is_set():
            await trio.sleep(0.02)
        started.set()

    before = await predicted()
    a = cpu_snapshot(pids)
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(streams)
        if with_embeddings:
            nursery.start_soon(embedder)
            nursery.start_soon(first_tokens, before)
    wall, streams_wall = time.perf_counter() - t0, t_end - t0
    itl = [x for r in results for x in r["itl"]]
    return {"embeddings": with_embeddings, "wall": wall, "itl": itl,
            "aggregate": sum(r["tokens"] for r in results) / streams_wall, "embedded_inputs": embedded,
            "embed_inputs_per_s": embedded / wall, "other_cpu": other_cpu(a, cpu_snapshot(pids))}


def skippy_cmd(model: str, port: int, step_tokens: int) -> list[str]:
    return [str(Path(sys.executable).parent / "skippy"), "serve", "--model", model, "--port", str(port),
            "--parallel", str(max(STREAMS, 4)), "--n-ctx", "1024", "--threads", str(THREADS), "--embeddings",
            "--pooling", "mean", "--step-tokens", str(step_tokens)]


async def skippy_arm(model: str, log_path: Path, step_tokens: int) -> dict:
    port = free_port()
    with open(log_path, "wb") as log:
        async with trio.open_nursery() as nursery:
            proc = await nursery.start(partial(trio.run_process, skippy_cmd(model, port, step_tokens), stdout=log,
                                               stderr=subprocess.STDOUT, check=False))
            try:
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
                    await wait_healthy(client, proc, log_path)
                    pids = [os.getpid(), proc.pid]
                    await embed(client, TEXTS[:16])  # warm-up
                    throughput, worst = await skippy_throughput(client, pids)
                    print(f"skippy throughput: {', '.join(f'b{b} {st.median(v):.1f}' for b, v in throughput.items())} "
                          f"inputs/s, other CPU {worst:.2f}", flush=True)
                    waves = []
                    for rep in range(REPS):
                        for with_embeddings in (False, True):
                            waves.append(w := await streams_wave(client, pids, with_embeddings))
                            print(f"rep {rep + 1} streams {'+ embeddings' if with_embeddings else 'alone'}: "
                                  f"ITL p50 {1e3 * st.median(w['itl']):.0f} ms, {w['aggregate']:.1f} tok/s, "
                                  f"{w['embed_inputs_per_s']:.1f} embedding inputs/s, other CPU {w['other_cpu']:.2f}",
                                  flush=True)
                    return {"throughput": throughput, "throughput_other_cpu": worst, "waves": waves}
            finally:
                nursery.cancel_scope.cancel()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    global REPS, STREAMS, N
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--streams", type=int, default=STREAMS, help="chat streams of the ITL waves")
    ap.add_argument("--max-tokens", type=int, default=N, help="max_tokens of each stream")
    ap.add_argument("--step-tokens", type=int, default=256, help="server --step-tokens (the step budget)")
    args = ap.parse_args()
    REPS, STREAMS, N = args.reps, args.streams, args.max_tokens
    bench_decode.N = N
    OUT.mkdir(exist_ok=True)
    model = str(ensure_model(DEFAULT_MODEL))
    pids = [os.getpid()]
    a = cpu_snapshot(pids)
    lcp = llama_cpp_python_arm(model)
    lcp_other = other_cpu(a, cpu_snapshot(pids))
    print(f"llama-cpp-python: {', '.join(f'b{b} {st.median(v):.1f}' for b, v in lcp.items())} inputs/s, "
          f"other CPU {lcp_other:.2f}", flush=True)
    sk = trio.run(skippy_arm, model, OUT / "server-embeddings.log", args.step_tokens)
    a = cpu_snapshot(pids)
    for b, v in llama_cpp_python_arm(model).items():  # again after the server stopped
        lcp[b] += v
    lcp_other = max(lcp_other, other_cpu(a, cpu_snapshot(pids)))

    print(f"\nthroughput ({THREADS} threads; one request at a time; medians of {REPS} (skippy) and {2 * REPS} "
          "(llama-cpp-python) runs)\n")
    print("| batch | llama-cpp-python create_embedding inputs/s | skippy /v1/embeddings inputs/s "
          "| skippy / llama-cpp-python |")
    print("|---:|---:|---:|---:|")
    rows = {}
    for b in BATCHES:
        ref, ours = st.median(lcp[b]), st.median(sk["throughput"][b])
        rows[b] = {"llama_cpp_python": ref, "skippy": ours, "ratio": ours / ref}
        print(f"| {b} | {ref:.1f} | {ours:.1f} | {ours / ref:.2f} |")

    print(f"\ndecode ITL of {STREAMS} greedy streams (max_tokens {N}, --step-tokens {args.step_tokens}), "
          f"alone vs while 64-input embedding requests run (medians over {REPS} waves)\n")
    print("| streams | ITL p50 ms | ITL p99 ms | ITL max ms | aggregate tok/s | embedding inputs/s meanwhile "
          "| other CPU (max) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    itl = {}
    for with_embeddings in (False, True):
        ws = [w for w in sk["waves"] if w["embeddings"] is with_embeddings]
        all_itl = [x for w in ws for x in w["itl"]]
        itl[with_embeddings] = {"p50": st.median(all_itl), "p99": pct(all_itl, 0.99), "max": max(all_itl),
                                "aggregate": st.median(w["aggregate"] for w in ws),
                                "embed": st.median(w["embed_inputs_per_s"] for w in ws),
                                "other_cpu": max(w["other_cpu"] for w in ws)}
        v = itl[with_embeddings]
        print(f"| {'+ embeddings' if with_embeddings else 'alone'} | {1e3 * v['p50']:.0f} | {1e3 * v['p99']:.0f} "
              f"| {1e3 * v['max']:.0f} | {v['aggregate']:.1f} | {v['embed']:.1f} | {v['other_cpu']:.2f} |")
    on, off = itl[True], itl[False]
    print("\n| measure | value |\n|---|---:|")
    for name, value in (("ITL p50, with / without embeddings", on["p50"] / off["p50"]),
                        ("ITL p99, with / without embeddings", on["p99"] / off["p99"]),
                        ("stream aggregate tok/s, with / without embeddings", on["aggregate"] / off["aggregate"]),
                        ("embedding inputs/s beside streams / alone at batch 64",
                         on["embed"] / rows[64]["skippy"])):
        print(f"| {name} | {value:.2f} |")
    worst = max([lcp_other, sk["throughput_other_cpu"]] + [w["other_cpu"] for w in sk["waves"]])
    if worst > 0.1:
        print(f"\nwarning: other processes used up to {worst:.2f} cores during the run; numbers are not reliable")
    path = OUT / f"embeddings-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"threads": THREADS, "reps": REPS, "streams": STREAMS, "n": N,
                                "step_tokens": args.step_tokens, "llama_cpp_python": lcp, "skippy": sk,
                                "throughput": rows, "itl": {str(k): v for k, v in itl.items()}}, indent=1))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
