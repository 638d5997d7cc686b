"""Host sampling per decode step: skippy's vectorized chain against llama.cpp's chain per sequence.

After each decode llama-server samples every slot's row in turn through ``common_sampler`` (the
vocabulary copied into ``llama_token_data``, then the chain). skippy samples all rows of the step at
once (:func:`skippy.engine.sampling.vector.sample_rows`). On a CPU build this is a small share of a
step; on a GPU, where a 64-sequence decode of a small model takes a few milliseconds, it is a large
one (the per-step overhead goal of the GPU issue: at most 10% of the step at B = 64).

The rows are real: the model's logits after ``B`` different prompts (``--model``, default SmolLM2-135M;
Gemma 3 270M has a 262144-token vocabulary). Per B and chain, the median ms per step of ``--reps``
(after a warm-up) of:

- ``skippy``: ``sample_rows`` over the ``(B, n_vocab)`` rows, each sequence with its own sampler;
- ``llama.cpp``: per row, the logits copied into a ``llama_token_data`` array and the same chain
  applied (``llama_sampler_apply``), as ``common_sampler_sample`` does, one row after another;

and their ratio (below 1: skippy spends less). Then ``--loop`` (B = the largest level): the scheduler's whole
host loop per decode (plan, a multi-step run of ``--scheduler-steps``, sampling, update) for B sequences of the
model, with ``llama_decode`` skipped once every sequence decodes (the logits stay those of the last real decode),
so what is left is what the host adds to each step however fast the device is; greedy and default once more
with ``--backend-sampling`` (the chain in the decode graph: no logits read on the host, each token read and
accepted by its chain; the graph's own sampling time is part of the decode there, so these rows are the host's
share only). Then, with ``--loop`` too, the other share: the median ``llama_decode`` of B one-token sequences and
the host sampling after it, greedy and default, with the chains on the host and in the decode graph.

Chains: ``greedy`` (temperature 0), ``default``
(llama-server's defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05), ``ignore_eos``
(greedy with the end-of-generation tokens suppressed: llama-server's ``-inf`` logit bias), ``top_p``
(top_k 0, top_p 0.9: the whole vocabulary sorted). Nothing else runs; all samples go to
``sampling-<time>.json`` in ``--out`` (``bench/out``).

    python bench/bench_sampling.py [--model NAME|PATH] [--levels 1,16,64] [--reps 30] [--loop]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics as st
import sys
import time
from pathlib import Path

import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skippy.engine.runtime.base import BatchEntry  # noqa: E402
from skippy.engine.runtime.llama import LlamaRuntime  # noqa: E402
from skippy.engine.sampling.params import SamplingParams  # noqa: E402
from skippy.engine.sampling.vector import SeqSampler, sample_rows  # noqa: E402
from skippy.engine.scheduling.config import SchedulerConfig  # noqa: E402
from skippy.engine.scheduling.core import SchedulerCore  # noqa: E402
from skippy.engine.scheduling.decode import execute  # noqa: E402
from skippy.engine.scheduling.events import SeqRequest  # noqa: E402
from skippy.models import DEFAULT_MODEL, ensure_model  # noqa: E402

OUT = Path(__file__).parent / "out"
CHAINS = {
    "greedy": {"temperature": 0.0},
    "default": {},
    "ignore_eos": {"temperature": 0.0, "ignore_eos": True},
    "top_p": {"top_k": 0, "top_p": 0.9},
}


def real_logits(rt: LlamaRuntime, n: int) -> np.ndarray:
    """``(n, n_vocab)`` float32 logits of ``rt``'s model: the last row after each of ``n`` different short
    prompts (sequences ``0..n-1``)."""
    rows = []
    for s in range(n):
        prompt = rt.vocab.tokenize(f"Write a story about the number {s * 37 + 11} and a", add_special=True,
                                   parse_special=False)
        rt.decode([BatchEntry(t, i, s, i == len(prompt) - 1) for i, t in enumerate(prompt)])
        rows.append(np.array(rt.logits(len(prompt) - 1), dtype=np.float32))
    return np.stack(rows)


def llama_chain(rt: LlamaRuntime, p: SamplingParams) -> object:
    """llama.cpp's chain for ``p`` as ``common_sampler`` builds it (the runtime's own, :meth:`_chain`), after a
    ``-inf`` logit bias on the end-of-generation tokens for ``ignore_eos`` (llama-server's way)."""
    inner = rt._chain(p)
    if not p.ignore_eos:
        return inner
    eog = rt.meta.eog_ids
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    biases = (llama_cpp.llama_logit_bias * len(eog))(*[llama_cpp.llama_logit_bias(token=t, bias=float("-inf"))
                                                      for t in eog])
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_logit_bias(rt.meta.n_vocab, len(eog), biases))
    llama_cpp.llama_sampler_chain_add(chain, inner)  # a chain is a sampler: freed with the outer one
    return chain


def time_llama(x: np.ndarray, chains: list[object], reps: int) -> list[float]:
    """ms per step: every row copied into ``llama_token_data`` and its chain applied, one row after another."""
    n, v = x.shape
    dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
    cand = np.zeros(v, dtype=dtype)
    ids = np.arange(v, dtype=np.int32)
    out = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        for i in range(n):
            cand["id"] = ids
            cand["logit"] = x[i]
            cand["p"] = 0.0
            cur = llama_cpp.llama_token_data_array(data=cand.ctypes.data_as(llama_cpp.llama_token_data_p), size=v,
                                                   selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(chains[i], ctypes.byref(cur))
            llama_cpp.llama_sampler_accept(chains[i], int(cand["id"][cur.selected]))
        out.append((time.perf_counter() - t0) * 1e3)
    return out[1:]


def time_skippy(x: np.ndarray, samplers: list[SeqSampler], reps: int) -> list[float]:
    """ms per step of :func:`sample_rows` over all rows."""
    out = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        sample_rows(x, samplers)
        out.append((time.perf_counter() - t0) * 1e3)
    return out[1:]


def time_loop(model: str, b: int, kw: dict, steps: int, threads: int, decodes: int = 400,
              backend: bool = False) -> float:
    """ms of host work per decode: ``b`` sequences through :class:`SchedulerCore` and :func:`execute`, with
    ``llama_decode`` skipped after a few real steps (the last logits sampled again each time; with
    ``backend``, llama.cpp's chain attached to the slots, whose last tokens are read again: the graph's
    sampling cost is in the decode, not here)."""
    rt = LlamaRuntime(model, n_ctx_seq=1024, n_seq_max=b, n_threads=threads, backend_sampling=backend)
    core = SchedulerCore(rt, SchedulerConfig(step_tokens=2048, max_queue=b, scheduler_steps=steps,
                                             prefix_cache=False, prompt_cache=None))
    for i in range(b):  # no end of generation: the fixed logits would end a sequence at once or never
        core.add(SeqRequest(i + 1, [1, 100 + i, 200 + i, 300], SamplingParams(seed=i + 1, **kw), 1 << 30))

    def step() -> None:
        plan = core.plan()
        core.update(plan, execute(rt, plan))

    for _ in range(4):
        step()
    n = 0

    def skip(entries: object) -> None:
        nonlocal n
        n += 1

    rt.decode = skip  # type: ignore[method-assign]
    t0 = time.perf_counter()
    while n < decodes:
        step()
    ms = (time.perf_counter() - t0) * 1e3 / n
    rt.close()
    return ms



def time_graph(model: str, b: int, kw: dict, threads: int, backend: bool, decodes: int = 24) -> tuple[float, float]:
    """Median ms of one ``llama_decode`` of ``b`` sequences (one token each) and of sampling its outputs after
    it: on the host (:func:`sample_rows` over the logit rows) or, with ``backend``, llama.cpp's chain of ``kw``
    attached to every sequence (sampled inside the decode; the host reads and accepts the tokens). What backend
    sampling moves into the decode is the difference of the decode times."""
    rt = LlamaRuntime(model, n_ctx_seq=256, n_seq_max=b, n_threads=threads, backend_sampling=backend)
    params = [SamplingParams(seed=i + 1, **kw) for i in range(b)]
    for s in range(b):
        rt.decode([BatchEntry(100 + s + j, j, s, j == 9) for j in range(10)])
        if backend:
            rt.set_backend_sampler(s, params[s])
    samplers = [SeqSampler(p, tuple(rt.meta.eog_ids)) for p in params]
    toks, dec, smp = [300] * b, [], []
    for k in range(decodes + 2):
        t0 = time.perf_counter()
        rt.decode([BatchEntry(toks[s], 10 + k, s, True) for s in range(b)])
        t1 = time.perf_counter()
        toks = rt.sampled_tokens(range(b)) if backend else sample_rows(rt.output_logits(range(b)), samplers)
        t2 = time.perf_counter()
        if k >= 2:  # the first decodes reserve the graph
            dec.append((t1 - t0) * 1e3)
            smp.append((t2 - t1) * 1e3)
    rt.close()
    return st.median(dec), st.median(smp)

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a catalogue name or a GGUF path")
    ap.add_argument("--levels", default="1,16,64", help="sequences per step (B), comma-separated")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads for the prompts' decode")
    ap.add_argument("--loop", action="store_true", help="also time the scheduler's host loop per decode")
    ap.add_argument("--scheduler-steps", type=int, default=8, help="decodes per multi-step run in --loop")
    ap.add_argument("--out", type=Path, default=OUT, help="the folder of the JSON (default bench/out)")
    a = ap.parse_args()
    levels = [int(b) for b in a.levels.split(",")]
    model = a.model if Path(a.model).is_file() else str(ensure_model(a.model))
    rt = LlamaRuntime(model, n_ctx_seq=256, n_seq_max=max(levels), n_threads=a.threads)
    x_all = real_logits(rt, max(levels))
    eog = tuple(rt.meta.eog_ids)
    v = x_all.shape[1]
    results = []
    print(f"{Path(model).name}, n_vocab {v}, median of {a.reps} steps (ms per step)\n")
    print("| chain | B | skippy | llama.cpp per row | skippy / llama.cpp |")
    print("|---|---:|---:|---:|---:|")
    for name, kw in CHAINS.items():
        for b in levels:
            x = np.ascontiguousarray(x_all[:b])
            params = [SamplingParams(seed=i + 1, **kw) for i in range(b)]
            chains = [llama_chain(rt, p) for p in params]
            ours = time_skippy(x, [SeqSampler(p, eog) for p in params], a.reps)
            theirs = time_llama(x, chains, a.reps)
            for c in chains:
                llama_cpp.llama_sampler_free(c)
            s, t = st.median(ours), st.median(theirs)
            results.append({"chain": name, "B": b, "skippy_ms": ours, "llama_ms": theirs})
            print(f"| {name} | {b} | {s:.3f} | {t:.3f} | {s / t:.2f} |")
    rt.close()
    loop: dict[str, float] = {}
    graph: dict[str, dict[str, float]] = {}
    if a.loop:
        b = max(levels)
        print(f"\nscheduler host loop, B = {b}, decode skipped, {a.scheduler_steps} decodes per run\n")
        print("| chain | ms per decode |")
        print("|---|---:|")
        for name, kw in [*CHAINS.items(), ("greedy, --backend-sampling", CHAINS["greedy"]),
                         ("default, --backend-sampling", CHAINS["default"])]:
            loop[name] = time_loop(model, b, kw, a.scheduler_steps, a.threads, backend="backend" in name)
            print(f"| {name} | {loop[name]:.3f} |")
        print(f"\nsampling in the decode graph (--backend-sampling), B = {b}: median ms per decode of {b} tokens\n")
        print("| chain | where | llama_decode | host sampling | sum |")
        print("|---|---|---:|---:|---:|")
        for name in ("greedy", "default"):
            for backend in (False, True):
                d, smp = time_graph(model, b, CHAINS[name], a.threads, backend)
                where = "graph" if backend else "host"
                graph[f"{name}, {where}"] = {"decode_ms": d, "sample_ms": smp}
                print(f"| {name} | {where} | {d:.3f} | {smp:.3f} | {d + smp:.3f} |")
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"sampling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"model": Path(model).name, "n_vocab": v, "levels": levels, "results": results,
                                "loop_ms": loop, "graph": graph}))
    print(f"\nsamples: {path}")


if __name__ == "__main__":
    main()
