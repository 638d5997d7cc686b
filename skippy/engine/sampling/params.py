"""Sampling parameters: validated once per request, applied by the runtime.

Defaults follow llama-server: temperature 0.8, top_k 40, top_p 0.95,
min_p 0.05, repeat_penalty 1.0 (off), penalty window 64 tokens, and the
other samplers off (typical_p 1.0, mirostat 0, dry_multiplier 0,
xtc_probability 0, top_n_sigma -1, dynatemp_range 0). A temperature of 0
or below means greedy decoding, as llama.cpp's temperature sampler does it: the
whole chain runs, then only the highest logit left is kept (:attr:`SamplingParams.greedy`).
The llama.cpp sampler chain order is llama.cpp
``common_sampler``'s: logit_bias -> penalties -> dry -> top_n_sigma -> top_k
-> typical_p -> top_p -> min_p (-> infill, when asked) -> xtc -> temperature (dynatemp) ->
dist(seed); with ``mirostat`` 1 or 2 the part after dry is temperature ->
mirostat instead (llama.cpp drops penalties and DRY there; we keep them
when asked for, since a client that sends them expects them applied).
"""

from __future__ import annotations

import math
import random
import re

import attrs

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import SamplingFields
from skippy.engine.sampling.constraints import Constraint

#: llama.cpp's default DRY sequence breakers (common_params_sampling).
DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")
MAX_DRY_SEQUENCE_BREAKERS = 64
MAX_STOP_TOKEN_IDS = 64

MAX_TOP_LOGPROBS = 20


@attrs.frozen
class SamplingParams:
    """What the decode scheduler needs to build a sequence's sampler.

    ``logit_bias`` maps token id -> additive bias (OpenAI range -100..100; ``-inf`` for llama-server's
    ``false``, never sampled).
    ``grammar`` is GBNF (root rule ``root``), lazy from the first match of
    ``grammar_lazy_patterns`` when those are given. ``constraint`` is an
    llguidance constraint the runtime applies as a token mask before the
    chain (never set together with ``grammar``). ``seed`` is always set (a random
    one when the request gives none, or gives llama.cpp's "random" ``LLAMA_DEFAULT_SEED``: -1 or 0xFFFFFFFF,
    as llama-server reads them), so the same seed and request reproduce the same output.

    End of generation (vLLM): ``ignore_eos`` keeps end-of-generation tokens
    from being sampled at all (llama-server's ``ignore_eos``); for the first
    ``min_tokens`` sampled tokens neither they nor ``stop_token_ids`` are
    sampled; a sampled token of ``stop_token_ids`` ends the sequence like an
    end-of-generation token (the scheduler checks it). A finished constraint
    still ends the sequence. ``penalty_last_n`` and ``dry_penalty_last_n`` are
    token counts (-1 already resolved to the sequence context). ``infill``: llama.cpp's infill
    sampler runs after ``min_p`` (llama-server's ``samplers`` naming ``infill``, as code-completion
    clients do: it merges candidates that are prefixes of one another and favours ending the fill).
    ``post_sampling_probs`` (with ``logprobs``): each token's probability and alternatives are those of the
    distribution the chain drew it from, not of the raw logits (llama-server's field of that name).
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
    constraint: Constraint | None = None
    typical_p: float = 1.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = DRY_SEQUENCE_BREAKERS
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    top_n_sigma: float = -1.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    min_keep: int = 0
    ignore_eos: bool = False
    min_tokens: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    infill: bool = False
    post_sampling_probs: bool = False

    @property
    def greedy(self) -> bool:
        """The chain takes the highest logit left after ``logit_bias``, penalties and DRY (llama.cpp's
        ``greedy``): a temperature of 0 or below, as llama.cpp's temperature sampler keeps only the highest
        logit it is given then, and no sampler before it that may remove that token (:attr:`moves_argmax`;
        ``mirostat`` runs none of them). ``top_k``, ``top_p``, ``min_p`` and ``top_n_sigma`` always keep the
        highest logit, so they cannot change what temperature 0 picks and are skipped."""
        return self.temperature <= 0.0 and (self.mirostat != 0 or not self.moves_argmax)

    @property
    def moves_argmax(self) -> bool:
        """A sampler before temperature that may drop the highest logit or change the logits (so temperature 0
        or below is no plain argmax; llama.cpp's chain runs them): ``typical_p`` < 1 (it keeps the tokens
        whose surprise is closest to the entropy), XTC (it removes every token above its threshold but the
        last), ``infill`` (it merges and rescales candidates), or a dynamic temperature (``dynatemp_range`` > 0:
        llama.cpp's ``temp_ext`` then samples at a temperature between 0 and the range)."""
        return (self.typical_p < 1.0 or (self.xtc_probability > 0.0 and self.xtc_threshold <= 0.5)
                or self.infill or self.dynatemp_range > 0.0)

    @property
    def extended(self) -> bool:
        """True when a sampler beyond penalties/top_k/top_p/min_p/temperature is on (they need llama.cpp's chain)."""
        return (self.typical_p < 1.0 or self.mirostat != 0 or self.dry_multiplier > 0.0
                or self.xtc_probability > 0.0 or self.top_n_sigma > 0.0 or self.dynatemp_range > 0.0
                or self.infill)


_TOKEN_ID = re.compile(r"[0-9]{1,10}")  # longer is no token id (and past 4300 digits int() raises)

#: llama.cpp's ``LLAMA_DEFAULT_SEED``: a request's seed of -1 (or this) asks for a random one, as in llama-server.
RANDOM_SEED = 0xFFFFFFFF


def _check(cond: bool, message: str, param: str) -> None:
    if not cond:
        raise InvalidRequest(message, param=param)


def _num(req: SamplingFields, name: str, default: float) -> float:
    """The request's value of ``name`` (``default`` when unset); 400 naming it when not finite."""
    v: float | None = getattr(req, name)
    if v is None:
        return default
    _check(math.isfinite(v), f"{name} must be a finite number", name)
    return v


def sampling_from_request(req: SamplingFields, *, n_vocab: int, logprobs: bool = False,
                          top_logprobs: int = 0, n_ctx: int = 0) -> SamplingParams:
    """Validate the sampling fields of ``req`` and build :class:`SamplingParams`.

    Raises :class:`InvalidRequest` (400, ``param`` set) for out-of-range
    values, a ``logit_bias`` key or ``stop_token_ids`` entry that is not a token id of
    this vocabulary, or ``min_tokens`` above ``max_tokens``. ``n_ctx`` (the
    sequence context, tokens) resolves ``repeat_last_n``/``dry_penalty_last_n``
    of -1 (llama-server: the whole context). Ranges follow llama-server's
    (llama.cpp ``common_params_sampling``) and vLLM's ``SamplingParams``.
    (``n`` is the engine's: one generation per choice, each with these parameters.)
    """
    t = 0.8 if req.temperature is None else req.temperature
    # llama-server takes any temperature: 0 or below is greedy (its chain's temperature sampler then keeps the
    # highest logit), on its OpenAI routes too
    _check(math.isfinite(t) and t <= 100.0, "temperature must be a finite number <= 100 (0 or below: greedy)",
           "temperature")
    top_p = 0.95 if req.top_p is None else req.top_p
    _check(0.0 <= top_p <= 1.0, "top_p must be in [0, 1]", "top_p")  # 0 keeps the top token (llama.cpp's min_keep)
    top_k = 40 if req.top_k is None else req.top_k
    _check(top_k >= 0, "top_k must be >= 0", "top_k")
    min_p = 0.05 if req.min_p is None else req.min_p
    _check(0.0 <= min_p <= 1.0, "min_p must be in [0, 1]", "min_p")
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(req, name)
        _check(v is None or -2.0 <= v <= 2.0, f"{name} must be in [-2, 2]", name)
    rp = 1.0 if req.repeat_penalty is None else req.repeat_penalty
    _check(rp > 0.0, "repeat_penalty must be > 0", "repeat_penalty")
    if req.repetition_penalty is not None:  # vLLM's name for the same multiplicative penalty
        v = _num(req, "repetition_penalty", 1.0)
        _check(0.0 < v <= 100.0, "repetition_penalty must be in (0, 100]", "repetition_penalty")
        _check(req.repeat_penalty is None or req.repeat_penalty == v,
               "repetition_penalty and repeat_penalty disagree; give one", "repetition_penalty")
        rp = v
    bias: list[tuple[int, float]] = []
    raw = req.logit_bias or {}
    pairs = list(raw.items()) if isinstance(raw, dict) else raw
    for pair in pairs:
        _check(len(pair) == 2, f"logit_bias entry {pair!r} is not a [token id, bias] pair", "logit_bias")
        key, value = pair
        # a key is a token id: an int, or ASCII digits (int() would also read " 12", "1_2" and other scripts' digits)
        tok = key if isinstance(key, int) and not isinstance(key, bool) else \
            int(key) if isinstance(key, str) and _TOKEN_ID.fullmatch(key) else -1
        _check(0 <= tok < n_vocab, f"logit_bias key {key!r} is not a token id (0..{n_vocab - 1})", "logit_bias")
        if value is False:  # llama-server's ban: never sampled
            bias.append((tok, float("-inf")))
            continue
        _check(not isinstance(value, bool) and -100.0 <= value <= 100.0,
               "logit_bias values must be in [-100, 100] (or false: never sampled)", "logit_bias")
        bias.append((tok, float(value)))
    _check(req.n_probs is None or 0 <= req.n_probs <= MAX_TOP_LOGPROBS,  # before top_logprobs, which it may set
           f"n_probs must be in [0, {MAX_TOP_LOGPROBS}]", "n_probs")
    _check(0 <= top_logprobs <= MAX_TOP_LOGPROBS, f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]", "top_logprobs")
    whole = max(n_ctx, 1)

    typical_p = _num(req, "typical_p", 1.0)
    _check(0.0 < typical_p <= 1.0, "typical_p must be in (0, 1] (1 = off)", "typical_p")
    mirostat = 0 if req.mirostat is None else req.mirostat
    _check(mirostat in (0, 1, 2), "mirostat must be 0 (off), 1 or 2", "mirostat")
    tau = _num(req, "mirostat_tau", 5.0)
    _check(0.0 <= tau <= 100.0, "mirostat_tau must be in [0, 100]", "mirostat_tau")
    eta = _num(req, "mirostat_eta", 0.1)
    _check(0.0 < eta <= 1.0, "mirostat_eta must be in (0, 1]", "mirostat_eta")
    dry_mult = _num(req, "dry_multiplier", 0.0)
    _check(0.0 <= dry_mult <= 100.0, "dry_multiplier must be in [0, 100] (0 = off)", "dry_multiplier")
    dry_base = _num(req, "dry_base", 1.75)
    _check(1.0 <= dry_base <= 100.0, "dry_base must be in [1, 100]", "dry_base")
    dry_len = 2 if req.dry_allowed_length is None else req.dry_allowed_length
    _check(0 <= dry_len <= 1 << 20, "dry_allowed_length must be >= 0", "dry_allowed_length")
    dry_last = -1 if req.dry_penalty_last_n is None else req.dry_penalty_last_n
    _check(-1 <= dry_last <= 1 << 24, "dry_penalty_last_n must be >= -1 (-1 = the whole context, 0 = off)",
           "dry_penalty_last_n")
    breakers = DRY_SEQUENCE_BREAKERS if req.dry_sequence_breakers is None else tuple(req.dry_sequence_breakers)
    _check(0 < len(breakers) <= MAX_DRY_SEQUENCE_BREAKERS and all(b and "\0" not in b for b in breakers),
           f"dry_sequence_breakers must be 1..{MAX_DRY_SEQUENCE_BREAKERS} non-empty strings", "dry_sequence_breakers")
    xtc_p = _num(req, "xtc_probability", 0.0)
    _check(0.0 <= xtc_p <= 1.0, "xtc_probability must be in [0, 1] (0 = off)", "xtc_probability")
    xtc_t = _num(req, "xtc_threshold", 0.1)
    _check(0.0 <= xtc_t <= 1.0, "xtc_threshold must be in [0, 1] (> 0.5 = off)", "xtc_threshold")
    sigma = _num(req, "top_n_sigma", -1.0)
    _check(sigma == -1.0 or 0.0 <= sigma <= 100.0, "top_n_sigma must be -1 (off) or in [0, 100]", "top_n_sigma")
    dyn_range = _num(req, "dynatemp_range", 0.0)
    _check(0.0 <= dyn_range <= 100.0, "dynatemp_range must be in [0, 100] (0 = off)", "dynatemp_range")
    dyn_exp = _num(req, "dynatemp_exponent", 1.0)
    _check(0.0 <= dyn_exp <= 100.0, "dynatemp_exponent must be in [0, 100]", "dynatemp_exponent")
    last_n = 64 if req.repeat_last_n is None else req.repeat_last_n
    _check(-1 <= last_n <= 1 << 24, "repeat_last_n must be >= -1 (-1 = the whole context, 0 = off)",
           "repeat_last_n")
    min_keep = 0 if req.min_keep is None else req.min_keep
    _check(0 <= min_keep <= n_vocab, f"min_keep must be in [0, {n_vocab}]", "min_keep")
    min_tokens = 0 if req.min_tokens is None else req.min_tokens
    _check(min_tokens >= 0, "min_tokens must be >= 0", "min_tokens")
    asked = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    _check(asked is None or asked >= 1, "max_tokens must be >= 1", "max_tokens")  # before min_tokens' rule
    _check(asked is None or min_tokens <= asked, "min_tokens must not exceed max_tokens", "min_tokens")
    stop_ids = req.stop_token_ids or []
    _check(len(stop_ids) <= MAX_STOP_TOKEN_IDS, f"stop_token_ids takes at most {MAX_STOP_TOKEN_IDS} ids",
           "stop_token_ids")
    for tok in stop_ids:
        _check(0 <= tok < n_vocab, f"stop_token_ids entry {tok} is not a token id (0..{n_vocab - 1})",
               "stop_token_ids")

    seed = req.seed if req.seed is not None and req.seed & RANDOM_SEED != RANDOM_SEED else random.getrandbits(32)
    return SamplingParams(
        temperature=t, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed & 0xFFFFFFFF,
        presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
        repeat_penalty=rp, penalty_last_n=whole if last_n == -1 else last_n,
        logit_bias=tuple(bias), logprobs=logprobs, top_logprobs=top_logprobs,
        typical_p=typical_p, mirostat=mirostat, mirostat_tau=tau, mirostat_eta=eta,
        dry_multiplier=dry_mult, dry_base=dry_base, dry_allowed_length=dry_len,
        dry_penalty_last_n=whole if dry_last == -1 else dry_last, dry_sequence_breakers=breakers,
        xtc_probability=xtc_p, xtc_threshold=xtc_t, top_n_sigma=sigma,
        dynatemp_range=dyn_range, dynatemp_exponent=dyn_exp, min_keep=min_keep,
        ignore_eos=req.ignore_eos, min_tokens=min_tokens, stop_token_ids=frozenset(stop_ids),
        post_sampling_probs=logprobs and req.post_sampling_probs,
    )
