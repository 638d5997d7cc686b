"""LoRA benchmark: what decoding several adapter sets at once costs (the scheduler's grouping, ``--lora``).

llama.cpp applies LoRA adapters to a whole context (``llama_set_adapters_lora``), so the scheduler decodes one
adapter set per step and goes round the sets (:mod:`skippy.engine.scheduling.core`); a change of set makes
llama.cpp reserve its compute graph again at the next decode. This measures, in-process (the real
:class:`~skippy.engine.runtime.llama.LlamaRuntime` and :class:`~skippy.engine.scheduling.core.SchedulerCore`,
no HTTP), on the default model with two random adapters written by :func:`tests.tiny_models.write_tiny_lora`
(4 layers' attention projections, rank 4):

1. ``switch``: one sequence decoding one token per ``llama_decode``, the set unchanged vs switched before
   every decode (ms per decode: the cost of one switch);
2. ``streams``: ``STREAMS`` greedy streams of ``TOKENS`` tokens each (``ignore_eos``), all on the base model,
   all on adapter A, or half on A and half on B (two interleaved sets), with ``--scheduler-steps`` 1 and 8:
   aggregate generated tok/s and the number of set switches.

Each configuration runs ``--reps`` times (median shown). Usage: ``python bench/bench_lora.py [--reps 3]``.
"""

from __future__ import annotations

import argparse
import statistics as st
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skippy.engine.runtime.base import BatchEntry  # noqa: E402
from skippy.engine.runtime.llama import LlamaRuntime  # noqa: E402
from skippy.engine.sampling.params import SamplingParams  # noqa: E402
from skippy.engine.scheduling.config import SchedulerConfig  # noqa: E402
from skippy.engine.scheduling.core import SchedulerCore  # noqa: E402
from skippy.engine.scheduling.decode import execute  # noqa: E402
from skippy.engine.scheduling.events import SeqRequest  # noqa: E402
from skippy.models import DEFAULT_MODEL, ensure_model  # noqa: E402
from tests.tiny_models import write_tiny_lora  # noqa: E402

STREAMS = 4
TOKENS = 64
A, B = ((0, 1.0),), ((1, 1.0),)
PROMPT = [1, 504, 3575, 282, 4649, 314, 2, 198] * 4  # 32 token ids


def switch_cost(rt: LlamaRuntime, n: int = 64) -> tuple[float, float]:
    """ms per one-token decode of one sequence: the set kept, then switched (A, B, A...) before every decode."""
    out = []
    for switching in (False, True):
        rt.seq_rm(0)
        rt.set_lora(A)
        rt.decode([BatchEntry(t, i, 0, i == len(PROMPT) - 1) for i, t in enumerate(PROMPT)])
        t0 = time.perf_counter()
        for i in range(n):
            if switching:
                rt.set_lora(B if i % 2 == 0 else A)
            rt.decode([BatchEntry(7, len(PROMPT) + i, 0, True)])
            rt.logits(0)
        out.append((time.perf_counter() - t0) * 1000 / n)
    rt.seq_rm(0)
    return out[0], out[1]


def streams(rt: LlamaRuntime, sets: list[tuple], steps: int) -> tuple[float, int]:
    """Aggregate tok/s of ``len(sets)`` greedy streams (stream i on ``sets[i]``) and the set switches made."""
    core = SchedulerCore(rt, SchedulerConfig(step_tokens=256, max_queue=64, prefix_cache=False,
                                             scheduler_steps=steps))
    for i, lora in enumerate(sets):
        params = SamplingParams(temperature=0.0, ignore_eos=True, seed=i)
        core.add(SeqRequest(i + 1, PROMPT + [10 + i], params, TOKENS, cache_prompt=False, lora=lora))
    switches, last, generated = 0, None, 0
    t0 = time.perf_counter()
    while not core.idle:
        plan = core.plan()
        if plan.empty:
            continue
        if plan.batch is not None and plan.lora != last:
            switches += last is not None
            last = plan.lora
        result = execute(rt, plan)
        generated += sum(len(t) for t in result.tokens)
        core.update(plan, result)
    return generated / (time.perf_counter() - t0), switches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    model = str(ensure_model(DEFAULT_MODEL))
    with tempfile.TemporaryDirectory() as d:
        adapters = (str(write_tiny_lora(Path(d) / "a.gguf", Path(model), layers=(0, 1, 2, 3), seed=1)),
                    str(write_tiny_lora(Path(d) / "b.gguf", Path(model), layers=(0, 1, 2, 3), seed=2)))
        rt = LlamaRuntime(model, n_ctx_seq=512, n_seq_max=STREAMS, lora=adapters)
        try:
            kept, switched = zip(*(switch_cost(rt) for _ in range(args.reps)), strict=True)
            print(f"one sequence, ms per 1-token decode: set kept {st.median(kept):.2f}, switched before every "
                  f"decode {st.median(switched):.2f} (one switch ~{st.median(switched) - st.median(kept):.2f} ms)")
            print(f"\n{STREAMS} greedy streams x {TOKENS} tokens, aggregate tok/s (median of {args.reps}):")
            print(f"{'sets':<24}{'steps':>6}{'tok/s':>9}{'switches':>10}")
            half = STREAMS // 2
            for name, sets in (("base model", [()] * STREAMS), ("all on A", [A] * STREAMS),
                               ("A and B interleaved", [A, B] * half)):
                for steps in (1, 8):
                    runs = [streams(rt, sets, steps) for _ in range(args.reps)]
                    print(f"{name:<24}{steps:>6}{st.median(r[0] for r in runs):>9.1f}"
                          f"{st.median(r[1] for r in runs):>10.0f}")
        finally:
            rt.close()


if __name__ == "__main__":
    main()
