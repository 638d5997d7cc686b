"""The step contract between :class:`~skippy.engine.scheduling.core.SchedulerCore` and the decode thread.

One step is three calls::

    step = core.plan()                            # a StepPlan: the batch, what to sample and score
    result = execute(runtime, step)               # a StepResult (skippy.engine.scheduling.decode)
    outputs = core.update(step, result)           # tokens, finishes, hook parks

:class:`StepPlan` says what the decode thread runs: one ``llama_decode`` batch (or a multi-step
run of them), a :class:`SampleTask` per batch output to sample, a :class:`ScoreTask` per prompt
position to score, an embedding batch, the context checkpoints to save. :class:`StepResult` is what
came back, one named field per kind of task, each in its plan's order. Both are frozen: the plan is
built on the scheduler's task and read on the decode thread; the result goes the other way.
"""

from __future__ import annotations

import attrs

from skippy.engine.lora import LoraSet
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.batch import BatchPlan
from skippy.engine.scheduling.embed import EmbedBatch, EmbedResult
from skippy.engine.scheduling.events import Output, TokenEvent


@attrs.frozen
class SampleTask:
    """What to compute at one batch output: the sampler, and which extras the request asked for.

    ``draft``: speculative tokens placed after the sampled position at batch
    indices ``index + 1 ..`` (each with logits); :func:`~skippy.engine.scheduling.decode.verify_draft`
    samples them in order while they match. ``steps``: tokens the sequence may sample in a multi-step
    run (:attr:`StepPlan.steps`; the last one would finish it by ``max_tokens`` or the context);
    ``ends``: the token ids that end it (end of generation, the request's ``stop_token_ids``),
    after which the run decodes it no more. ``forced``: the token this position takes instead of a
    sampled one (the reasoning budget's closing tag): nothing is sampled, the sampler accepts it
    (:meth:`Runtime.accept`), so a grammar follows the text the sequence really holds.
    ``backend``: llama.cpp's sampler chain picked the token in
    the decode graph (:meth:`Runtime.sampled_token`; a sequence without logprobs, signals or speculation,
    whose slot has its chain attached). ``post_probs``: the logprob and alternatives are those of the
    distribution the token was drawn from (after the sampler chain: llama-server's ``post_sampling_probs``),
    not of the raw logits.
    """

    rid: int
    index: int
    sampler: object
    top_logprobs: int | None  # None: no logprobs; else how many alternatives (0..20)
    signals: bool
    draft: tuple[int, ...] = ()
    steps: int = 1
    ends: frozenset[int] = frozenset()
    backend: bool = False
    forced: int | None = None
    post_probs: bool = False


@attrs.frozen
class ScoreTask:
    """A prompt position to score (``prompt_logprobs``): the logprob of ``token``, the prompt's next
    token, from the logits at batch ``index``, with ``top_logprobs`` alternatives."""

    rid: int
    index: int
    token: int
    top_logprobs: int


@attrs.frozen
class StepPlan:
    """One planned step: the batch (``None``: nothing to decode), what to sample from it, which
    prompt positions to score, the outputs admission produced (finishes of requests whose
    sampler llama.cpp refused), the embedding batch to run after it (``None``: none), and the
    context checkpoints to save after the decode (``saves``: (rid, slot) of sequences whose
    prefill reaches their ``checkpoint_at`` in this batch).

    ``steps`` > 1 makes it a multi-step run (vLLM's ``num_scheduler_steps``): a decode-only
    batch whose sequences :func:`~skippy.engine.scheduling.decode.execute` decodes up to ``steps`` times
    back to back on the decode thread, each time with the tokens it just sampled, so the loop's thread
    handoffs, events and socket writes are paid once per run instead of once per token; ``until_finish``:
    the run ends once a sequence finishes (requests wait for its slot). ``samplers``: (slot, parameters)
    pairs to apply before the decode, attaching the backend sampler chain of those parameters to a slot, or
    detaching it (``None``) (:meth:`Runtime.set_backend_sampler`). ``lora``: the LoRA adapter set every
    sequence of the batch runs with, applied to the context before the decode (:meth:`Runtime.set_lora`; one
    set per step: llama.cpp applies adapters per context); ``None`` for a runtime without adapters (nothing to
    apply)."""

    batch: BatchPlan | None
    samples: tuple[SampleTask, ...] = ()
    outputs: tuple[Output, ...] = ()
    scores: tuple[ScoreTask, ...] = ()
    embed: EmbedBatch | None = None
    saves: tuple[tuple[int, int], ...] = ()
    steps: int = 1
    until_finish: bool = False
    samplers: tuple[tuple[int, SamplingParams | None], ...] = ()
    lora: LoraSet | None = None

    @property
    def empty(self) -> bool:
        """Nothing to run on the decode thread."""
        return self.batch is None and self.embed is None


@attrs.frozen(eq=False)
class StepResult:
    """What the decode thread got for a :class:`StepPlan`, each field in the order of the plan's.

    ``tokens``: per :attr:`StepPlan.samples` entry, the tokens sampled for it, in order: one, or for a
    task with a ``draft`` every token its verification sampled (1 + the matched draft tokens), or in a
    multi-step run the tokens of each decode it stayed in (1 .. ``task.steps``). ``scores``: per
    :attr:`StepPlan.scores` entry, the scored prompt token with its logprob and alternatives.
    ``embedded``: the embedding batch's :class:`EmbedResult` (``None``: the plan had none). ``saved``: per
    :attr:`StepPlan.saves` entry, the slot's state after the decode (``None``: the runtime could not
    copy it). ``decodes``: ``llama_decode`` calls made (0: no batch; more than 1: a multi-step run).
    """

    tokens: tuple[tuple[TokenEvent, ...], ...] = ()
    scores: tuple[TokenEvent, ...] = ()
    embedded: EmbedResult | None = None
    saved: tuple[bytes | bytearray | None, ...] = ()
    decodes: int = 0


__all__ = ["SampleTask", "ScoreTask", "StepPlan", "StepResult"]
