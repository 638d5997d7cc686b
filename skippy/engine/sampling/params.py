"""Sampling parameters: validated once per request, applied by the runtime.

Defaults follow llama-server: temperature 0.8, top_k 40, top_p 0.95,
min_p 0.05, repeat_penalty 1.0 (off), penalty window 64 tokens. A
temperature of 0 means greedy decoding. The llama.cpp sampler chain order
is: logit_bias -> penalties -> top_k -> top_p -> min_p -> temperature ->
dist(seed) (llama.cpp ``common_sampler`` order).
"""

from __future__ import annotations

import random

import attrs

from skippy.engine.errors import InvalidRequest
from skippy.engine.types import SamplingFields

MAX_TOP_LOGPROBS = 20


@attrs.frozen
class SamplingParams:
    """What the decode scheduler needs to build a sequence's sampler.

    ``logit_bias`` maps token id -> additive bias (OpenAI range -100..100).
    ``grammar`` is GBNF (root rule ``root``), lazy from the first match of
    ``grammar_lazy_patterns`` when those are given. ``seed`` is always set (a random
    one when the request gives none), so the same seed and request reproduce the same output.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    penalty_last_n: int = 64
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    grammar: str | None = None
    grammar_lazy_patterns: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def _check(cond: bool, message: str, param: str) -> None:
    if not cond:
        raise InvalidRequest(message, param=param)


def sampling_from_request(req: SamplingFields, *, n_vocab: int, logprobs: bool = False,
                          top_logprobs: int = 0) -> SamplingParams:
    """Validate the sampling fields of ``req`` and build :class:`SamplingParams`.

    Raises :class:`InvalidRequest` (400, ``param`` set) for out-of-range
    values or a ``logit_bias`` key that is not a token id of this vocabulary.
    (``n`` is the engine's: one generation per choice, each with these parameters.)
    """
    t = 0.8 if req.temperature is None else req.temperature
    _check(0.0 <= t <= 100.0, "temperature must be in [0, 100]", "temperature")
    top_p = 0.95 if req.top_p is None else req.top_p
    _check(0.0 < top_p <= 1.0, "top_p must be in (0, 1]", "top_p")
    top_k = 40 if req.top_k is None else req.top_k
    _check(top_k >= 0, "top_k must be >= 0", "top_k")
    min_p = 0.05 if req.min_p is None else req.min_p
    _check(0.0 <= min_p <= 1.0, "min_p must be in [0, 1]", "min_p")
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(req, name)
        _check(v is None or -2.0 <= v <= 2.0, f"{name} must be in [-2, 2]", name)
    rp = 1.0 if req.repeat_penalty is None else req.repeat_penalty
    _check(rp > 0.0, "repeat_penalty must be > 0", "repeat_penalty")
    bias: list[tuple[int, float]] = []
    for key, value in (req.logit_bias or {}).items():
        try:
            tok = int(key)
        except ValueError:
            tok = -1
        _check(0 <= tok < n_vocab, f"logit_bias key {key!r} is not a token id (0..{n_vocab - 1})", "logit_bias")
        _check(-100.0 <= value <= 100.0, "logit_bias values must be in [-100, 100]", "logit_bias")
        bias.append((tok, float(value)))
    _check(0 <= top_logprobs <= MAX_TOP_LOGPROBS, f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]", "top_logprobs")
    seed = req.seed if req.seed is not None else random.getrandbits(32)
    return SamplingParams(
        temperature=t, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed & 0xFFFFFFFF,
        presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
        repeat_penalty=rp, logit_bias=tuple(bias), logprobs=logprobs, top_logprobs=top_logprobs,
    )
