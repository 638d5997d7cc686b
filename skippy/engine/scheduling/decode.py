"""The decode thread's half of a step: ``llama_decode``, then sampling every output (sans-IO, blocking).

:func:`execute` runs one :class:`~skippy.engine.scheduling.step.StepPlan` on the runtime and returns
its :class:`~skippy.engine.scheduling.step.StepResult`; it is the only code that decodes, and it runs on
the decode thread while the scheduler's task waits (nothing here touches the scheduler core).

- **Sampling** (:func:`sample_step`, right after ``llama_decode``): sequences whose sampler is a
  :class:`~skippy.engine.sampling.vector.SeqSampler` are sampled together by
  :func:`~skippy.engine.sampling.vector.sample_rows` on the step's ``llama_get_logits`` rows; the others
  (a grammar) through ``runtime.sample`` (llama.cpp's chain), one by one; a task with ``backend`` set
  reads the token llama.cpp's sampler chain picked inside the decode (``runtime.sampled_token``).
  Logprobs, ``top_logprobs``, entropy and margin come from the raw logits of all rows that ask for them
  at once (one log-softmax pass over those rows: :func:`row_stats`).
- **Draft verification** (:func:`verify_draft`): a speculative draft is sampled in order while it matches.
- **Multi-step runs** (:func:`run_steps`): a decode-only batch decoded again with the tokens just sampled,
  up to ``StepPlan.steps`` times; each later decode's batch is a
  :class:`~skippy.engine.runtime.base.NextTokens` (columns, no entry per sequence), and a run of plain
  greedy or backend-sampled (greedy or sampled) sequences is sampled a column at a time (:func:`_run_plain`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from skippy.engine.hooks.signals import logprobs_top, token_logprob
from skippy.engine.runtime.base import NO_TOKEN, NextTokens, Runtime
from skippy.engine.sampling.vector import SeqSampler, sample_rows
from skippy.engine.scheduling.embed import EmbedResult
from skippy.engine.scheduling.events import TokenEvent, TopLogprob, plain_event
from skippy.engine.scheduling.step import SampleTask, StepPlan, StepResult

log = logging.getLogger("skippy.scheduler")


def execute(runtime: Runtime, step: StepPlan, marks: list[float] | None = None,
            interrupt: Callable[[], bool] | None = None) -> StepResult:
    """Run ``step`` on ``runtime``: one ``llama_decode``, then sample every output; then the embedding batch.

    Blocking; runs on the decode thread. The batch's images (``step.batch.media``) are decoded first, each
    into its sequence (:meth:`Runtime.decode_media`). The :class:`StepResult` holds, per ``step.samples``
    entry, the tokens sampled for it (see :func:`sample_step`: the vectorized chain for most sequences,
    llama.cpp's for a grammar; logprobs and signals from the raw logits when asked, ``None`` when a row has
    no finite maximum, so one sequence's NaN logits never fail the others): one, or for a task with a
    ``draft`` what :func:`verify_draft` returns; per ``step.scores`` entry the scored prompt token, its
    logprob and alternatives; when the step has an embedding batch, its :class:`EmbedResult`
    (:meth:`Runtime.embed`'s vectors, or its error: a failed embedding batch fails only its requests); per
    ``step.saves`` entry the slot's state after the decode (:meth:`Runtime.state_seq_get_data`; ``None``
    when it fails, which costs only the checkpoint). Raises ``RuntimeError`` when llama.cpp refuses the
    decode batch (or a ``step.samplers`` change, applied before it). The step's LoRA adapter set
    (``step.lora``) is applied to the context before anything is decoded (:meth:`Runtime.set_lora`).
    A multi-step run (``step.steps`` > 1, see :func:`run_steps`) gives per sample the tokens of each of
    its decodes, in order; ``interrupt()`` is asked between its decodes (true: end the run, an input waits).
    ``marks``, when given, gets ``time.perf_counter()`` at the start and the end of ``llama_decode``
    and at the end of sampling (when the step has a batch; once per decode of a multi-step run),
    then at the start and the end of the embedding batch (when it has one); for the step-time metrics.
    """
    tokens: Sequence[tuple[TokenEvent, ...]] = ()
    scores: tuple[TokenEvent, ...] = ()
    decodes = 0
    for slot, params in step.samplers:
        runtime.set_backend_sampler(slot, params)
    if step.batch is not None and step.lora is not None:  # the batch's adapter set (per context)
        runtime.set_lora(step.lora)
    if step.batch is not None and step.batch.media:
        for span, seq_id in step.batch.media:  # images first: each is its own llama_decode of embeddings
            runtime.decode_media(span, seq_id)
    if step.batch is not None and step.batch.entries:
        if marks is not None:
            marks.append(time.perf_counter())
            runtime.decode(step.batch.entries)
            marks.append(time.perf_counter())
        else:
            runtime.decode(step.batch.entries)
        decodes = 1
        scores = tuple(_score(runtime.logits(task.index), task.token, task.top_logprobs) for task in step.scores)
        first = sample_step(runtime, step.samples)
        tokens = [verify_draft(runtime, task, ev) if task.draft else (ev,)
                  for task, ev in zip(step.samples, first, strict=True)]
        if marks is not None:
            marks.append(time.perf_counter())
        if step.steps > 1:
            tokens, decodes = run_steps(runtime, step, first, marks, interrupt)
    embedded = None
    if step.embed is not None:
        if marks is not None:
            marks.append(time.perf_counter())
        try:
            embedded = EmbedResult(runtime.embed([item.tokens for item in step.embed.items]))
        except (ValueError, RuntimeError) as exc:
            embedded = EmbedResult(None, str(exc))
        if marks is not None:
            marks.append(time.perf_counter())
    saved: list[bytes | bytearray | None] = []
    for _, slot in step.saves:
        try:
            saved.append(runtime.state_seq_get_data(slot))
        except (ValueError, RuntimeError) as exc:
            log.warning("context checkpoint of slot %d failed: %s", slot, exc)
            saved.append(None)
    return StepResult(tuple(tokens), scores, embedded, tuple(saved), decodes)


def run_steps(runtime: Runtime, step: StepPlan, first: Sequence[TokenEvent], marks: list[float] | None = None,
              interrupt: Callable[[], bool] | None = None) -> tuple[list[tuple[TokenEvent, ...]], int]:
    """The rest of a multi-step run, after its first decode sampled ``first`` (one event per sample).

    Each later decode takes, for every sequence still in the run, the token it sampled last, at
    the next position (the batch in the first one's order, as the steps of single-step planning
    would have it); a sequence leaves the run once it sampled one of its ``ends`` (or ``NO_TOKEN``) or its
    ``steps`` tokens. The run stops after ``step.steps`` decodes, when no sequence is left, when
    one finished and ``step.until_finish``, or when ``interrupt()`` is true. Returns per sample
    the tuple of its tokens, in order (the core applies them as if each had come from a step
    of its own: :meth:`SchedulerCore.update`), and the decodes made, the first one included.
    When every sample is :func:`_plain`, :func:`_run_plain` does the same on arrays.
    """
    if all(map(_plain, step.samples)):
        return _run_plain(runtime, step, first, marks, interrupt)
    runs = [[ev] for ev in first]
    samples = step.samples
    entries = step.batch.entries  # type: ignore[union-attr]
    at = [entries[task.index] for task in samples]  # each sequence's entry in the first decode
    live = [j for j, task in enumerate(samples)
            if task.steps > 1 and first[j].token not in task.ends and first[j].token != NO_TOKEN]
    tasks: list[SampleTask] = []  # the live sequences' tasks at their indices in the next batch
    seqs: list[int] = []
    pos = np.empty(0, np.int64)
    decodes = 1
    for k in range(1, step.steps):
        if not live or (step.until_finish and len(live) < len(samples)) or (interrupt is not None and interrupt()):
            break
        if len(tasks) != len(live):  # the batch changed (at the start, or a sequence left)
            tasks = [attrs.evolve(samples[j], index=i) for i, j in enumerate(live)]
            seqs = [at[j].seq_id for j in live]
            pos = np.fromiter((at[j].pos for j in live), np.int64, len(live))
        last = np.fromiter((runs[j][-1].token for j in live), np.int64, len(live))
        if marks is not None:
            marks.append(time.perf_counter())
        runtime.decode(NextTokens(last, pos + k, seqs))
        decodes += 1
        if marks is not None:
            marks.append(time.perf_counter())
        events = sample_step(runtime, tasks)
        if marks is not None:
            marks.append(time.perf_counter())
        left = []
        for j, ev in zip(live, events, strict=True):
            runs[j].append(ev)
            if len(runs[j]) < samples[j].steps and ev.token not in samples[j].ends and ev.token != NO_TOKEN:
                left.append(j)
        live = left
    return [tuple(r) for r in runs], decodes


def _plain(task: SampleTask) -> bool:
    """``task`` takes the argmax of its raw logits (plain greedy) or the token llama.cpp's backend chain picked,
    and nothing else: no logprobs, signals, draft or forced token."""
    return (task.top_logprobs is None and not task.signals and not task.draft and task.forced is None
            and (task.backend or (isinstance(task.sampler, SeqSampler) and task.sampler.plain_greedy)))


def _run_plain(runtime: Runtime, step: StepPlan, first: Sequence[TokenEvent], marks: list[float] | None,
               interrupt: Callable[[], bool] | None) -> tuple[list[tuple[TokenEvent, ...]], int]:
    """:func:`run_steps` for a run whose every sequence is :func:`_plain`, a column at a time: each decode's
    batch is :class:`NextTokens` of the live sequences' last tokens (no entry made per sequence), its tokens
    the argmax of the logit rows in one call (or read from the backend sampler), the run's ends and limits
    checked on arrays; the samplers accept each sequence's tokens and the events are made once, at the end
    (:func:`plain_event`). The same tokens, decodes and ends as the general loop."""
    samples = step.samples
    n = len(samples)
    entries = step.batch.entries  # type: ignore[union-attr]
    at = [entries[task.index] for task in samples]
    pos0 = np.fromiter((e.pos for e in at), np.int64, n)
    seq_ids = [e.seq_id for e in at]
    limits = np.fromiter((task.steps for task in samples), np.int64, n)
    ends = samples[0].ends
    shared = all(task.ends == ends for task in samples)
    end_ids = np.fromiter(ends, np.int64, len(ends))
    backend = [task.backend for task in samples]
    toks = np.empty((step.steps, n), np.int64)  # toks[k, j]: sequence j's token from the run's decode k
    toks[0] = [ev.token for ev in first]
    counts = np.ones(n, np.int64)
    ended = np.fromiter((ev.token in task.ends for ev, task in zip(first, samples, strict=True)), np.bool_, n)
    live = np.flatnonzero((limits > 1) & ~ended)
    seqs: list[int] = []
    picks: list[int] = []  # rows of the live batch sampled by argmax
    picked: list[int] = []  # and those read from the backend sampler
    decodes = 1
    for k in range(1, step.steps):
        m = live.size
        if not m or (step.until_finish and m < n) or (interrupt is not None and interrupt()):
            break
        if len(seqs) != m:  # the batch changed (at the start, or a sequence left)
            rows = live.tolist()
            seqs = [seq_ids[j] for j in rows]
            picks = [i for i, j in enumerate(rows) if not backend[j]]
            picked = [i for i, j in enumerate(rows) if backend[j]]
        if marks is not None:
            marks.append(time.perf_counter())
        runtime.decode(NextTokens(toks[k - 1, live], pos0[live] + k, seqs))
        decodes += 1
        if marks is not None:
            marks.append(time.perf_counter())
        new = np.empty(m, np.int64)
        if picks:
            new[picks] = runtime.output_logits(picks).argmax(axis=1)
        if picked:
            new[picked] = runtime.sampled_tokens(picked)
        if marks is not None:
            marks.append(time.perf_counter())
        toks[k, live] = new
        counts[live] += 1
        if shared:
            ended = (new[:, None] == end_ids).any(axis=1)  # a few ids: cheaper than np.isin's sort
        else:
            ended = np.fromiter((t in samples[j].ends for t, j in zip(new.tolist(), live.tolist(), strict=True)),
                                np.bool_, m)
        go_on = ~ended & (counts[live] < limits[live])
        if not go_on.all():
            live = live[go_on]
    runs = []
    for ev, task, col, c in zip(first, samples, toks[:decodes].T.tolist(), counts.tolist(), strict=True):
        later = col[1:c]
        task.sampler.accept_many(later)  # type: ignore[attr-defined]  # a SeqSampler (_plain)
        runs.append((ev, *map(plain_event, later)))
    return runs, decodes


def _score(raw: Any, token: int, n_top: int) -> TokenEvent:
    """``token``'s logprob (and ``n_top`` alternatives) under the logits ``raw``; ``None`` when not finite."""
    try:
        top = logprobs_top(raw, n_top) if n_top else ((), ())
        return TokenEvent(token, token_logprob(raw, token),
                          tuple(TopLogprob(int(t), float(v)) for t, v in zip(*top, strict=True)))
    except ValueError:
        return TokenEvent(token)


def sample_at(runtime: Runtime, task: SampleTask, index: int) -> TokenEvent:
    """Sample (and accept into ``task.sampler``) one token at batch ``index``, with the extras ``task`` asks for."""
    return sample_step(runtime, [attrs.evolve(task, index=index)])[0]


def verify_draft(runtime: Runtime, task: SampleTask, first: TokenEvent,
                 sample: Callable[[Runtime, SampleTask, int], TokenEvent] = sample_at) -> tuple[TokenEvent, ...]:
    """Verify ``task.draft`` given ``first``, the token sampled at ``task.index``: the accepted tokens.

    While the last sampled token equals the next draft token, the logits at the
    next index (computed after that very token) are sampled too, with the
    sequence's own sampler; the first token that differs (the correction), or
    the token after a wholly accepted draft (the bonus), ends the list. So every
    token is drawn from the distribution it would have been drawn from without
    speculation (the draft only decided where logits were computed: this is
    speculative sampling's rejection rule for a draft that proposes one token
    with probability 1, accept with probability ``p(draft)``, else sample from
    ``p`` without it), and the sampler accepts exactly the returned tokens.
    Returns 1 + (matched draft tokens) events.
    """
    out = [first]
    for i, tok in enumerate(task.draft):
        if out[-1].token != tok:
            break
        out.append(sample(runtime, task, task.index + 1 + i))
    return tuple(out)


def sample_step(runtime: Runtime, tasks: Sequence[SampleTask]) -> list[TokenEvent]:
    """One :class:`TokenEvent` per task, in order, from the last decode's logits.

    Raw-logit extras (``logprob``, ``top_logprobs``, ``entropy``, ``margin``) are ``None`` / empty
    for a row without a finite maximum (NaN or ``+inf`` logits), so one sequence's bad
    logits never fail the others.
    """
    n = len(tasks)
    if n == 0:
        return []
    if any(s.forced is not None for s in tasks):  # the budget's forced tokens: accepted, not sampled
        out_f: list[TokenEvent | None] = [None] * n
        left = []
        for j, s in enumerate(tasks):
            if s.forced is not None:
                runtime.accept(s.sampler, s.forced)
                out_f[j] = TokenEvent(s.forced, None, (), None, None)
            else:
                left.append(j)
        for j, ev in zip(left, sample_step(runtime, [tasks[j] for j in left]), strict=True):
            out_f[j] = ev
        return [ev for ev in out_f if ev is not None]
    if any(s.backend for s in tasks):  # picked in the decode graph; their raw logits may not be there
        out: list[TokenEvent] = [None] * n  # type: ignore[list-item]
        picked = [j for j, s in enumerate(tasks) if s.backend]
        rest = [j for j, s in enumerate(tasks) if not s.backend]
        for j, t in zip(picked, runtime.sampled_tokens([tasks[j].index for j in picked]), strict=True):
            tasks[j].sampler.accept(t)  # type: ignore[attr-defined]
            out[j] = plain_event(t)
        for j, ev in zip(rest, sample_step(runtime, [tasks[j] for j in rest]), strict=True):
            out[j] = ev
        return out
    if any(s.post_probs for s in tasks):  # the distribution each was drawn from: row by row (rare)
        out_p: list[TokenEvent] = [None] * n  # type: ignore[list-item]
        rest = [j for j, s in enumerate(tasks) if not s.post_probs]
        for j, s in enumerate(tasks):
            if s.post_probs:
                out_p[j] = _post_event(runtime, s)
        for j, ev in zip(rest, sample_step(runtime, [tasks[j] for j in rest]), strict=True):
            out_p[j] = ev
        return out_p
    vec = [j for j, s in enumerate(tasks) if isinstance(s.sampler, SeqSampler)]
    extra = [j for j, s in enumerate(tasks) if s.top_logprobs is not None or s.signals]
    rows = runtime.output_logits([s.index for s in tasks]) if vec or extra else None
    tokens = [0] * n
    if vec:
        assert rows is not None
        picked = sample_rows(rows if len(vec) == n else rows[vec], [tasks[j].sampler for j in vec])  # type: ignore[misc]
        for j, t in zip(vec, picked, strict=True):
            tokens[j] = t
    if len(vec) < n:
        done = set(vec)
        for j, s in enumerate(tasks):
            if j not in done:
                tokens[j] = runtime.sample(s.sampler, s.index)
    if not extra:
        return [TokenEvent(t, None, (), None, None) for t in tokens]
    assert rows is not None
    sub = rows if len(extra) == n else rows[extra]
    stats = row_stats(sub, [tokens[j] for j in extra], [tasks[j].top_logprobs or 0 for j in extra],
                      any(tasks[j].signals for j in extra))
    out = [TokenEvent(t, None, (), None, None) for t in tokens]
    for jj, j in enumerate(extra):
        task = tasks[j]
        lp, top, entropy, margin = stats[jj]
        out[j] = TokenEvent(tokens[j], lp if task.top_logprobs is not None else None,
                            top if task.top_logprobs else (), entropy if task.signals else None,
                            margin if task.signals else None)
    return out


def _post_event(runtime: Runtime, task: SampleTask) -> TokenEvent:
    """Sample ``task``'s token with the distribution it was drawn from (llama-server's ``post_sampling_probs``,
    :meth:`Runtime.sample_probs`): the event's logprob is the log of the token's probability there (1 when the
    chain kept no distribution for it, as llama-server's default), its alternatives the ``top_logprobs`` most
    likely candidates, up to the first of probability 0 (llama-server leaves those out). Entropy and margin
    stay those of the raw logits (the hook signals)."""
    token, ids, p = runtime.sample_probs(task.sampler, task.index)
    entropy = margin = None
    if task.signals:
        _, _, entropy, margin = row_stats(runtime.output_logits([task.index]), [token], [0], True)[0]
    if token == NO_TOKEN:
        return TokenEvent(token, None, (), entropy, margin)
    hit = np.flatnonzero(ids == token)
    prob = float(p[hit[0]]) if hit.size else 1.0
    top: list[TopLogprob] = []
    for t, q in zip(ids[:task.top_logprobs or 0].tolist(), p[:task.top_logprobs or 0].tolist(), strict=True):
        if q <= 0.0:
            break
        top.append(TopLogprob(t, math.log(q)))
    return TokenEvent(token, math.log(prob) if prob > 0.0 else -math.inf, tuple(top), entropy, margin)


def row_stats(x: np.ndarray, tokens: Sequence[int], top_k: Sequence[int], signals: bool
              ) -> list[tuple[float | None, tuple[TopLogprob, ...], float | None, float | None]]:
    """Per row of raw logits ``x`` (float32, ``(m, n_vocab)``): the logprob of ``tokens[i]``, its
    ``top_k[i]`` most likely tokens (logprob descending, ties by id), and entropy and margin in
    nats (see :mod:`skippy.engine.hooks.signals`; computed only when ``signals``). ``None`` /
    ``()`` for a row without a finite maximum.
    """
    m, v = x.shape
    res: list[tuple[float | None, tuple[TopLogprob, ...], float | None, float | None]] = [(None, (), None, None)] * m
    with np.errstate(invalid="ignore", over="ignore"):
        mx = x.max(axis=1)
        finite = np.isfinite(mx)
        if not finite.all():
            ok = np.flatnonzero(finite)
            if ok.size == 0:
                return res
            x, mx = x[ok], mx[ok]
        else:
            ok = np.arange(m)
        z = x - mx[:, None]
        e = np.exp(z)
        s = e.sum(axis=1, dtype=np.float64)
        lse = np.log(s) + mx.astype(np.float64)
        entropy = margin = None
        if signals:
            ez = np.einsum("ij,ij->i", e, np.where(e > 0, z, np.float32(0)), dtype=np.float64)
            entropy = np.maximum(0.0, np.log(s) - ez / s)
            z[np.arange(len(ok)), z.argmax(axis=1)] = -np.inf
            margin = 0.0 - z.max(axis=1).astype(np.float64)
    ok_list = ok.tolist()
    toks = np.array([tokens[i] for i in ok_list], dtype=np.intp)
    lps = (x[np.arange(len(ok_list)), toks].astype(np.float64) - lse).tolist()
    kmax = max((top_k[i] for i in ok_list), default=0)
    kmax = min(kmax, v)
    top_ids = top_vals = None
    if kmax:
        part = np.argpartition(x, v - kmax, axis=1)[:, v - kmax:]
        top_ids, top_vals = part, np.take_along_axis(x, part, axis=1)
    for jj, i in enumerate(ok_list):
        top: tuple[TopLogprob, ...] = ()
        k = min(top_k[i], v)
        if k and top_ids is not None:
            ids, vals = top_ids[jj], top_vals[jj]  # type: ignore[index]
            o = np.lexsort((ids, -vals))[:k]
            lvals = vals[o].astype(np.float64) - lse[jj]
            top = tuple(TopLogprob(int(t), float(lp)) for t, lp in zip(ids[o].tolist(), lvals.tolist(), strict=True))
        ent = float(entropy[jj]) if entropy is not None else None
        mar = float(margin[jj]) if margin is not None else None
        if ent is not None and not (np.isfinite(ent) and mar >= 0.0):  # type: ignore[operator]
            ent = mar = None
        res[i] = (lps[jj], top, ent, mar)
    return res

__all__ = ["execute", "row_stats", "run_steps", "sample_at", "sample_step", "verify_draft"]
