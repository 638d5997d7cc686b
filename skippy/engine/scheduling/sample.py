"""Sampling a decoded step: every output's token, logprobs and signals, from one logits view.

:func:`sample_step` runs on the decode thread right after ``llama_decode``. Sequences whose
sampler is a :class:`~skippy.engine.sampling.vector.SeqSampler` are sampled together by
:func:`~skippy.engine.sampling.vector.sample_rows` on the step's ``llama_get_logits`` rows;
the others (a grammar) through ``runtime.sample`` (llama.cpp's chain), one by one; a spec with ``backend``
set reads the token llama.cpp's greedy sampler picked inside the decode (``runtime.sampled_token``). Logprobs,
``top_logprobs``, entropy and margin come from the raw logits of all rows that ask for them
at once (one log-softmax pass over those rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from skippy.engine.runtime.base import Runtime
from skippy.engine.sampling.vector import SeqSampler, sample_rows
from skippy.engine.scheduling.events import TokenEvent, TopLogprob

if TYPE_CHECKING:
    from skippy.engine.scheduling.core import SampleSpec

__all__ = ["sample_step", "row_stats"]


def sample_step(runtime: Runtime, specs: Sequence[SampleSpec]) -> list[TokenEvent]:
    """One :class:`TokenEvent` per spec, in order, from the last decode's logits.

    Raw-logit extras (``logprob``, ``top_logprobs``, ``entropy``, ``margin``) are ``None`` / empty
    for a row without a finite maximum (NaN or ``+inf`` logits), so one sequence's bad
    logits never fail the others.
    """
    n = len(specs)
    if n == 0:
        return []
    if any(s.backend for s in specs):  # picked in the decode graph; their raw logits may not be there
        out: list[TokenEvent] = [None] * n  # type: ignore[list-item]
        rest = []
        for j, s in enumerate(specs):
            if s.backend:
                t = runtime.sampled_token(s.index)
                s.sampler.accept(t)  # type: ignore[attr-defined]
                out[j] = TokenEvent(t, None, (), None, None)
            else:
                rest.append(j)
        for j, ev in zip(rest, sample_step(runtime, [specs[j] for j in rest]), strict=True):
            out[j] = ev
        return out
    vec = [j for j, s in enumerate(specs) if isinstance(s.sampler, SeqSampler)]
    extra = [j for j, s in enumerate(specs) if s.top_logprobs is not None or s.signals]
    rows = runtime.output_logits([s.index for s in specs]) if vec or extra else None
    tokens = [0] * n
    if vec:
        assert rows is not None
        picked = sample_rows(rows if len(vec) == n else rows[vec], [specs[j].sampler for j in vec])  # type: ignore[misc]
        for j, t in zip(vec, picked, strict=True):
            tokens[j] = t
    if len(vec) < n:
        done = set(vec)
        for j, s in enumerate(specs):
            if j not in done:
                tokens[j] = runtime.sample(s.sampler, s.index)
    if not extra:
        return [TokenEvent(t, None, (), None, None) for t in tokens]
    assert rows is not None
    sub = rows if len(extra) == n else rows[extra]
    stats = row_stats(sub, [tokens[j] for j in extra], [specs[j].top_logprobs or 0 for j in extra],
                      any(specs[j].signals for j in extra))
    out = [TokenEvent(t, None, (), None, None) for t in tokens]
    for jj, j in enumerate(extra):
        spec = specs[j]
        lp, top, entropy, margin = stats[jj]
        out[j] = TokenEvent(tokens[j], lp if spec.top_logprobs is not None else None,
                            top if spec.top_logprobs else (), entropy if spec.signals else None,
                            margin if spec.signals else None)
    return out


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
