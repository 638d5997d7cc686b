"""Raw cost of decode-step shapes on llama.cpp: what the scheduler's batch rules rest on.

One ``llama_decode`` per sample through ``LlamaRuntime`` (no server, nothing else running), median of
``--reps`` after a warm-up, for 16 sequences (``--parallel``) that each hold ``--ctx`` prompt tokens:

- ``uniform``: every sequence decodes one token (a pure decode step; the baseline of the ratios);
- ``tail 2``: one sequence prefills a 2-token tail beside the others' single tokens. llama.cpp's
  non-unified KV cache splits a batch into micro-batches that take as many tokens from each
  sequence of a run of consecutive ids (``split_equal``), so this costs a second pass: why a
  cached prompt's tail drips one token per step beside a decoding neighbour (``DRIP_TAIL``);
- ``tail 5``: the same with a 5-token chunk (a prompt that shares only a system prompt);
- ``slot gap``: 15 sequences with one slot free in the middle (two runs: two passes): why the lowest
  free slot is taken;
- ``x2``: every sequence with 2 tokens (a uniform prefill step: one pass, twice the tokens).

Then the same uniform step with the prefix shared by all sequences (``llama_memory_seq_cp``), per
sequence (one KV stream each, the default) against ``--kv-unified`` (one buffer whose cells the
sequences share), at ``--ctx`` and at ``--long-ctx`` tokens (the agent workload's prompt): the
measurement behind the KV default. Times in ms; "x uniform" is the ratio to the uniform step.

    python bench/bench_steps.py [--ctx 40] [--long-ctx 900] [--reps 15] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics as st
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skippy.engine.runtime.base import BatchEntry  # noqa: E402
from skippy.engine.runtime.llama import LlamaRuntime  # noqa: E402
from skippy.models import DEFAULT_MODEL, ensure_model  # noqa: E402


def runtime(model: str, n_seq: int, ctx: int, threads: int, *, unified: bool = False,
            shared: bool = False) -> tuple[LlamaRuntime, int]:
    """A runtime whose ``n_seq`` sequences hold ``ctx`` prompt tokens each (the same, copied, when ``shared``)
    plus 10 of their own; returns it and the next position."""
    rt = LlamaRuntime(model, n_ctx_seq=2048, n_seq_max=n_seq, n_threads=threads, kv_unified=unified)
    for s in range(1 if shared else n_seq):
        for i in range(0, ctx, 256):
            rt.decode([BatchEntry(100 + (j * 7 + s) % 5000, j, s, j == ctx - 1) for j in range(i, min(ctx, i + 256))])
    if shared:
        for s in range(1, n_seq):
            rt.seq_cp(0, s, ctx) if unified else rt.seq_cp(0, s)
    for s in range(n_seq):
        rt.decode([BatchEntry(300 + s + j, ctx + j, s, j == 9) for j in range(10)])
    return rt, ctx + 10


def timed(rt: LlamaRuntime, pos: int, shape: list[tuple[int, int]], reps: int) -> float:
    """Median ms of one decode of ``shape`` ((sequence, tokens) pairs) at ``pos``, trimmed after each run."""
    def once() -> float:
        entries = [BatchEntry(200 + j, pos + j, s, j == n - 1) for s, n in shape for j in range(n)]
        t0 = time.perf_counter()
        rt.decode(entries)
        dt = time.perf_counter() - t0
        for s, _ in shape:
            rt.seq_rm(s, pos, -1)
        return dt
    once()
    return 1e3 * st.median(once() for _ in range(reps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=40, help="prompt tokens per sequence (a short chat)")
    ap.add_argument("--long-ctx", type=int, default=900, help="a long shared prompt (the agent workload)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    model, n = str(ensure_model(DEFAULT_MODEL)), args.parallel
    rt, pos = runtime(model, n, args.ctx, args.threads)
    shapes = {
        "uniform": [(s, 1) for s in range(n)],
        "tail 2": [(s, 1) for s in range(n - 1)] + [(n - 1, 2)],
        "tail 5": [(s, 1) for s in range(n - 1)] + [(n - 1, 5)],
        "slot gap": [(s, 1) for s in range(n) if s != n // 2],
        "x2": [(s, 2) for s in range(n)],
    }
    ms = {name: timed(rt, pos, shape, args.reps) for name, shape in shapes.items()}
    rt.close()
    print(f"\n{n} sequences of {args.ctx} prompt tokens, {args.threads} threads, median of {args.reps}\n")
    print("| step shape | tokens | ms | x uniform |")
    print("|---|---:|---:|---:|")
    for name, shape in shapes.items():
        print(f"| {name} | {sum(k for _, k in shape)} | {ms[name]:.2f} | {ms[name] / ms['uniform']:.2f} |")
    print(f"\nuniform step, the prompt shared by all {n} sequences\n")
    print("| prompt tokens | per sequence ms | unified ms | unified / per sequence |")
    print("|---:|---:|---:|---:|")
    for ctx in (args.ctx, args.long_ctx):
        row = []
        for unified in (False, True):
            rt, pos = runtime(model, n, ctx, args.threads, unified=unified, shared=True)
            row.append(timed(rt, pos, shapes["uniform"], args.reps))
            rt.close()
        print(f"| {ctx} | {row[0]:.2f} | {row[1]:.2f} | {row[1] / row[0]:.2f} |")


if __name__ == "__main__":
    main()
