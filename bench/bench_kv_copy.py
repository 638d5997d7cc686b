"""KV copy between streams: llama.cpp's whole-stream copy vs a copy through the source's state.

With one KV stream per sequence (the default, no ``--kv-unified``) llama.cpp copies a sequence to
another stream only whole: ``llama_memory_seq_cp`` queues a copy of every layer's K and V tensors of
the stream (``n_ctx_seq`` cells), done inside the next ``llama_decode``. ``LlamaRuntime.seq_cp``
copies a source that uses at most ``STATE_COPY_FRACTION`` of its stream through its state instead
(``llama_state_seq_get_data_ext`` into a reused buffer, then ``..._set_data_ext``): its own cells,
twice. This prints, for sources of several lengths, what each costs: the time before the decode
(the state copy) plus what the next one-token decode of the destination takes beyond the same
decode with no copy pending.

    .venv/bin/python bench/bench_kv_copy.py [--model PATH] [--n-ctx 2048] [--reps 9]
"""

from __future__ import annotations

import argparse
import os
import statistics as st
import time

import llama_cpp

import skippy.engine.runtime.kv as kv_rt  # seq_cp reads STATE_COPY_FRACTION there
from skippy.engine.runtime.base import BatchEntry
from skippy.engine.runtime.llama import STATE_COPY_FRACTION, LlamaRuntime

TRIM = 40  # positions the destination keeps (a shared system prompt and some)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="GGUF path (default: the cached SmolLM2-135M-Instruct)")
    p.add_argument("--n-ctx", type=int, default=2048, help="cells per stream (the server's --n-ctx)")
    p.add_argument("--parallel", type=int, default=16, help="streams (the server's --parallel)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--lengths", default="40,150,300,600,905,1200,1500")
    args = p.parse_args()
    model = args.model
    if model is None:
        from skippy.models import DEFAULT_MODEL, ensure_model
        model = str(ensure_model(DEFAULT_MODEL))
    rt = LlamaRuntime(model, n_ctx_seq=args.n_ctx, n_seq_max=args.parallel, n_threads=args.threads)
    pc = time.perf_counter
    base_seq, cp_seq, state_seq = 1, 2, 3

    def decode_one(seq: int) -> float:
        t = pc()
        rt.decode([BatchEntry(42, TRIM, seq, True)])
        return pc() - t

    rt.decode([BatchEntry(7, i, base_seq, False) for i in range(TRIM)])
    print(f"model {os.path.basename(model)}, {args.n_ctx} cells per stream, {args.threads} threads, "
          f"median of {args.reps}; copy cost = time before the decode + the decode beyond a plain one (ms)")
    print("| source tokens | of stream | whole-stream copy | state copy | state / whole | seq_cp picks |")
    print("|---:|---:|---:|---:|---:|---|")
    for n in [int(x) for x in args.lengths.split(",") if x]:
        rt.seq_rm(0)
        for p0 in range(0, n, 512):
            rt.decode([BatchEntry(1000 + i % 500, i, 0, i == n - 1) for i in range(p0, min(n, p0 + 512))])
        whole, state = [], []
        for _ in range(args.reps + 1):  # the first of each is a warm-up
            rt.seq_rm(base_seq, TRIM, -1)
            plain = decode_one(base_seq)
            rt.seq_rm(cp_seq)
            t = pc()
            llama_cpp.llama_memory_seq_cp(rt._mem, 0, cp_seq, -1, -1)
            rt._copying.add(cp_seq)
            rt.seq_rm(cp_seq, TRIM, -1)
            whole.append(pc() - t + decode_one(cp_seq) - plain)
            rt.seq_rm(state_seq)
            t = pc()
            kv_rt.STATE_COPY_FRACTION = 1.0  # the state copy at every length, for the measurement
            assert rt._state_copy(0, state_seq)
            kv_rt.STATE_COPY_FRACTION = STATE_COPY_FRACTION
            rt.seq_rm(state_seq, TRIM, -1)
            state.append(pc() - t + decode_one(state_seq) - plain)
        w, s = 1e3 * st.median(whole[1:]), 1e3 * st.median(state[1:])
        pick = "state" if n <= STATE_COPY_FRACTION * args.n_ctx else "whole stream"
        print(f"| {n} | {n / args.n_ctx:.2f} | {w:.2f} | {s:.2f} | {s / w:.2f} | {pick} |")
    rt.close()


if __name__ == "__main__":
    main()
