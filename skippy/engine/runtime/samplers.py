"""Sampler chains: one sequence's sampling state (:class:`LlamaSampler`: llama.cpp's chain, a GBNF
grammar, an llguidance matcher, end-of-generation suppression) and the runtime's sampling methods
(:class:`SamplerMixin`), in llama.cpp ``common_sampler``'s order.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import llama_cpp
import numpy as np

from skippy.engine.runtime.base import NO_TOKEN, BatchEntry, ModelMeta
from skippy.engine.runtime.vocab import LLG_LIMITS, LlamaVocab
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.sampling.vector import SeqSampler, chain_probs, sample_rows, vectorizable

if TYPE_CHECKING:
    from llguidance import LLMatcher

    from skippy.engine.runtime.decode import BatchColumns

log = logging.getLogger("skippy.runtime")


def _penalized(params: SamplingParams) -> bool:
    """``params`` asks for a repetition, frequency or presence penalty over a window (llama.cpp's penalties
    sampler, which counts the tokens its chain accepts)."""
    return params.penalty_last_n != 0 and (params.repeat_penalty != 1.0 or params.frequency_penalty != 0.0
                                           or params.presence_penalty != 0.0)


#: the backend greedy chain's parameters, and a sampled chain with every sampler a backend may run
_GREEDY = SamplingParams(temperature=0.0)
_PROBE = SamplingParams(seed=1, repeat_penalty=1.1, logit_bias=((0, 1.0),))


class LlamaSampler:
    """One sequence's sampling state: the llama.cpp chain, a GBNF grammar sampler kept apart,
    an llguidance matcher (``constraint``), and the end-of-generation suppression of
    ``ignore_eos`` / ``min_tokens`` (token ids, numpy int array, or ``None``)."""

    __slots__ = ("chain", "grammar", "matcher", "suppress", "suppress_until", "n_sampled", "stop_id", "greedy")

    def __init__(self, chain: object, grammar: object | None, matcher: LLMatcher | None,
                 suppress: np.ndarray | None, suppress_until: int, stop_id: int, greedy: bool = False) -> None:
        self.greedy = greedy  # the chain ends in llama.cpp's greedy sampler (SamplingParams.greedy)
        self.chain = chain
        self.grammar = grammar
        self.matcher = matcher
        self.suppress = suppress
        self.suppress_until = suppress_until  # -1: always (ignore_eos)
        self.n_sampled = 0
        self.stop_id = stop_id  # the end-of-generation token a finished constraint produces

    def suppressed(self) -> np.ndarray | None:
        if self.suppress is None or (0 <= self.suppress_until < self.n_sampled):  # n_sampled counts this one
            return None
        return self.suppress


class SamplerMixin:
    """:class:`~skippy.engine.runtime.llama.LlamaRuntime`'s samplers: a sequence's sampler
    (vectorized, or llama.cpp's chain with a grammar or constraint kept apart), sampling a row of the
    last decode, and the chains llama.cpp runs inside its decode graph (backend sampling)."""

    _ctx: Any
    _n_vocab: int
    _cand: np.ndarray
    _ids: np.ndarray
    _backend: dict[int, object]
    _accepting: set[int]
    _retired: list[object]
    _batch_columns: BatchColumns
    _rows: dict[int, int]
    meta: ModelMeta
    vocab: LlamaVocab
    vector_sampling: bool
    _check_output: Callable[[int], None]
    logits: Callable[[int], np.ndarray]
    decode: Callable[[Sequence[BatchEntry]], None]
    seq_rm: Callable[..., bool]

    # -- sampling -----------------------------------------------------------
    def new_sampler(self, params: SamplingParams) -> object:
        """The sampler of one sequence: a :class:`~skippy.engine.sampling.vector.SeqSampler`
        (sampled with the step's other rows by ``sample_rows``) when ``vector_sampling`` is on and
        the request needs nothing beyond the common chain (:func:`vectorizable`); else a
        :class:`LlamaSampler`: llama.cpp's chain, plus a grammar or constraint kept apart.

        Chain order is llama.cpp ``common_sampler``'s (see
        :mod:`skippy.engine.sampling.params`). A GBNF grammar is checked the
        way ``common_sampler`` does it: sample from the chain first and test
        only the chosen token; only when the grammar rejects it, apply the
        grammar to the whole vocabulary and sample again. An llguidance
        ``constraint`` is applied as a token mask before the chain (as vLLM
        does). Raises ``ValueError`` when llama.cpp rejects the grammar or
        llguidance the constraint.
        """
        if self.vector_sampling and vectorizable(params):
            return SeqSampler(params, self.meta.eog_ids)
        matcher = None
        if params.constraint is not None:
            from llguidance import LLMatcher

            matcher = LLMatcher(self.vocab.lltokenizer(), params.constraint.grammar, log_level=0,
                                limits=LLG_LIMITS())
            if matcher.is_error():
                raise ValueError(f"the constraint in {params.constraint.param} does not compile")
        grammar = None
        if params.grammar:
            grammar = self.vocab.grammar_sampler(params.grammar, params.grammar_lazy_patterns)
            if not grammar:
                raise ValueError("llama.cpp rejected the grammar")
        chain = self._chain(params)
        eog = sorted(self.meta.eog_ids)
        suppress, until = None, 0
        if params.ignore_eos:
            suppress, until = np.array(eog, dtype=np.int64), -1
        elif params.min_tokens > 0:
            suppress = np.array(sorted(set(eog) | params.stop_token_ids), dtype=np.int64)
            until = params.min_tokens
        stop_id = self.meta.eos_id if self.meta.eos_id in self.meta.eog_ids else (eog[0] if eog else 0)
        return LlamaSampler(chain, grammar, matcher, suppress, until, stop_id, params.greedy)

    def _chain(self, params: SamplingParams) -> object:
        sparams = llama_cpp.llama_sampler_chain_default_params()
        sparams.no_perf = True
        chain = llama_cpp.llama_sampler_chain_init(sparams)

        def add(s: object) -> None:
            llama_cpp.llama_sampler_chain_add(chain, s)

        if params.logit_bias:
            biases = [llama_cpp.llama_logit_bias(token=tok, bias=bias) for tok, bias in params.logit_bias]
            bias_arr = (llama_cpp.llama_logit_bias * len(biases))(*biases)
            add(llama_cpp.llama_sampler_init_logit_bias(self._n_vocab, len(biases), bias_arr))
        if _penalized(params):
            add(llama_cpp.llama_sampler_init_penalties(self._n_vocab, params.penalty_last_n, params.repeat_penalty,
                                                       params.frequency_penalty, params.presence_penalty))
        if params.dry_multiplier > 0.0 and params.dry_penalty_last_n != 0:
            breakers = [b.encode() for b in params.dry_sequence_breakers]
            breaker_arr = (ctypes.c_char_p * len(breakers))(*breakers)
            add(llama_cpp.llama_sampler_init_dry(self.vocab._vocab, params.dry_multiplier, params.dry_base,
                                                 params.dry_allowed_length, params.dry_penalty_last_n,
                                                 breaker_arr, len(breakers)))
        keep = max(1, params.min_keep)
        if params.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        elif params.mirostat == 1:
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_mirostat(self._n_vocab, params.seed, params.mirostat_tau,
                                                      params.mirostat_eta, 100))
        elif params.mirostat == 2:
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_mirostat_v2(params.seed, params.mirostat_tau, params.mirostat_eta))
        else:
            if params.top_n_sigma > 0.0:
                add(llama_cpp.llama_sampler_init_top_n_sigma(params.top_n_sigma))
            if params.top_k > 0:  # at most the vocabulary (the graph's top-k asserts it; the host's clamps)
                add(llama_cpp.llama_sampler_init_top_k(min(params.top_k, self._n_vocab)))
            if params.typical_p < 1.0:
                add(llama_cpp.llama_sampler_init_typical(params.typical_p, keep))
            add(llama_cpp.llama_sampler_init_top_p(params.top_p, keep))
            add(llama_cpp.llama_sampler_init_min_p(params.min_p, keep))
            if params.infill:
                add(llama_cpp.llama_sampler_init_infill(self.vocab._vocab))
            if params.xtc_probability > 0.0 and params.xtc_threshold <= 0.5:
                add(llama_cpp.llama_sampler_init_xtc(params.xtc_probability, params.xtc_threshold, keep,
                                                     params.seed))
            if params.dynatemp_range > 0.0:
                add(llama_cpp.llama_sampler_init_temp_ext(params.temperature, params.dynatemp_range,
                                                          params.dynatemp_exponent))
            else:
                add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_dist(params.seed))
        return chain

    def _candidates(self, index: int) -> tuple[np.ndarray, llama_cpp.llama_token_data_array]:
        cand = self._cand
        cand["id"] = self._ids
        cand["logit"] = self.logits(index)
        cand["p"] = 0.0
        cur = llama_cpp.llama_token_data_array(
            data=cand.ctypes.data_as(llama_cpp.llama_token_data_p), size=self._n_vocab, selected=-1, sorted=False)
        return cand, cur

    def _mask(self, s: LlamaSampler, logits: np.ndarray) -> bool:
        """The token mask before the chain: the constraint's allowed tokens, then end-of-generation
        suppression unless it would leave nothing (a finished constraint allows only those). True when the
        constraint is at a dead end: it allows only end of generation but does not accept the text so far
        (llguidance's answer where its grammar allows no token: a regex that matches nothing)."""
        if s.matcher is not None:
            bits = np.frombuffer(s.matcher.compute_bitmask(), dtype=np.uint8)
            allowed = np.unpackbits(bits, bitorder="little")[: self._n_vocab].astype(bool)
            n_allowed = int(allowed.sum())  # a dead end is rare: the cheap test first
            eog = self.meta.eog_ids
            if n_allowed <= len(eog) and not s.matcher.is_accepting() and n_allowed == int(allowed[list(eog)].sum()):
                return True
            logits[~allowed] = -np.inf
        ids = s.suppressed()
        if ids is not None:
            kept = logits[ids].copy()
            logits[ids] = -np.inf
            if not np.isfinite(logits).any():
                logits[ids] = kept
        return False

    def sample(self, sampler: object, index: int) -> int:
        self._check_output(index)
        if isinstance(sampler, SeqSampler):
            return sample_rows(self.logits(index)[None, :], [sampler])[0]
        return self._sample_chain(cast(LlamaSampler, sampler), index)  # new_sampler made it

    def sample_probs(self, sampler: object, index: int) -> tuple[int, np.ndarray, np.ndarray]:
        """:meth:`sample`, and the distribution the token was drawn from: ``(token, ids, probabilities)``, the
        candidates the chain kept by probability descending (llama-server's ``post_sampling_probs``): the
        vectorized chain's :func:`~skippy.engine.sampling.vector.chain_probs`, or the softmax of the logits
        llama.cpp's chain left (temperature applied). A greedy chain gives its token at probability 1; a
        constraint that allows no token (:data:`NO_TOKEN`) gives no candidates."""
        self._check_output(index)
        if isinstance(sampler, SeqSampler):
            row = self.logits(index)
            ids, p = chain_probs(row, sampler)
            return sample_rows(row[None, :], [sampler])[0], ids, p
        s = cast(LlamaSampler, sampler)
        kept: list[np.ndarray] = []
        token = self._sample_chain(s, index, kept)
        if token == NO_TOKEN:
            return token, np.empty(0, np.intp), np.empty(0)
        if s.greedy or not kept:  # greedy, or a finished constraint's end of generation
            return token, np.array([token], np.intp), np.ones(1)
        ids, logits = kept
        with np.errstate(invalid="ignore", over="ignore"):
            w = np.exp(logits.astype(np.float64) - logits.max())
        w[~np.isfinite(w)] = 0.0
        total = w.sum()
        p = w / total if total > 0 else np.zeros(len(w))
        order = np.argsort(-p, kind="stable")
        return token, ids[order].astype(np.intp), p[order]

    def _sample_chain(self, s: LlamaSampler, index: int, kept: list[np.ndarray] | None = None) -> int:
        """Sample (and accept) with llama.cpp's chain, its grammar and constraint kept apart (see
        :meth:`new_sampler`). ``kept``, when given, gets the ids and logits of the candidates the chain left
        after its last sampler (nothing for a finished constraint's end of generation)."""
        s.n_sampled += 1
        if s.matcher is not None and s.matcher.is_stopped():  # complete: only end of generation is left
            return NO_TOKEN if s.matcher.is_error() else s.stop_id  # broken: it allowed no token
        if kept is None and s.grammar is None and s.matcher is None and s.suppressed() is None:
            sampled: int = llama_cpp.llama_sampler_sample(s.chain, self._ctx, index)
            return sampled
        cand, cur = self._candidates(index)
        if self._mask(s, cand["logit"]):
            return NO_TOKEN
        llama_cpp.llama_sampler_apply(s.chain, ctypes.byref(cur))
        token = int(cur.data[cur.selected].id)  # from cur.data: a sampler may move it past dropped candidates (XTC)
        if s.grammar is not None:
            one = llama_cpp.llama_token_data(id=token, logit=1.0, p=0.0)
            single = llama_cpp.llama_token_data_array(data=ctypes.pointer(one), size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(s.grammar, ctypes.byref(single))
            if single.data[0].logit == float("-inf"):
                cand, cur = self._candidates(index)
                llama_cpp.llama_sampler_apply(s.grammar, ctypes.byref(cur))
                if self._mask(s, cand["logit"]):
                    return NO_TOKEN
                llama_cpp.llama_sampler_apply(s.chain, ctypes.byref(cur))
                token = int(cur.data[cur.selected].id)
        if cur.data[cur.selected].logit == -np.inf:  # the grammar or constraint, with logit_bias, allows no token
            return NO_TOKEN
        if kept is not None:
            left = np.ctypeslib.as_array(cur.data, shape=(cur.size,)) if cur.size else cand[:0]
            kept += [np.array(left["id"]), np.array(left["logit"])]
        if s.grammar is not None:
            llama_cpp.llama_sampler_accept(s.grammar, token)
        if s.matcher is not None:
            s.matcher.consume_token(token)
        llama_cpp.llama_sampler_accept(s.chain, token)
        return token

    def accept(self, sampler: object, token: int) -> None:
        """Advance ``sampler`` by ``token``, which it did not sample (the reasoning budget forced it):
        penalties count it, and its grammar and constraint read it where they allow it there (a
        grammar that does not is left where it was: llama.cpp aborts on accepting a token its
        grammar rejects)."""
        if isinstance(sampler, SeqSampler):
            sampler.accept(token)
            return
        s = cast(LlamaSampler, sampler)
        s.n_sampled += 1
        if s.grammar is not None:
            one = llama_cpp.llama_token_data(id=token, logit=1.0, p=0.0)
            single = llama_cpp.llama_token_data_array(data=ctypes.pointer(one), size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(s.grammar, ctypes.byref(single))
            if single.data[0].logit != float("-inf"):
                llama_cpp.llama_sampler_accept(s.grammar, token)
        if s.matcher is not None and not s.matcher.is_stopped() and s.matcher.validate_tokens([token]) == 1:
            s.matcher.consume_token(token)
        llama_cpp.llama_sampler_accept(s.chain, token)

    def _probe_backend_sampling(self) -> tuple[bool, bool]:
        """Whether llama.cpp runs a greedy chain in the decode graph here, and whether it samples a whole
        sampled chain there (logit bias, penalties, top_k, top_p, min_p, temperature, dist: one decode of
        one token in sequence 0 with such a chain attached must give a sampled token; a backend lacking an
        op of one of them leaves the token to the host). Sequence 0 is left empty and detached."""
        try:
            self.set_backend_sampler(0, _GREEDY)
        except RuntimeError as exc:
            log.info("backend sampling off: %s", exc)
            return False, False
        sampled = False
        try:
            self.set_backend_sampler(0, _PROBE)
            self.decode([BatchEntry(0, 0, 0, True)])
            sampled = llama_cpp.llama_get_sampled_token_ith(self._ctx, 0) >= 0
        except (RuntimeError, ValueError) as exc:
            log.info("backend sampling of sampled chains off: %s", exc)
        finally:
            self.set_backend_sampler(0, None)
            self.seq_rm(0)
        if not sampled:
            log.info("backend sampling: greedy chains only (llama.cpp left a sampled chain's token to the host)")
        return True, sampled

    def set_backend_sampler(self, seq_id: int, params: SamplingParams | None) -> None:
        """Attach the chain of ``params`` to ``seq_id`` in the decode graph, or detach it (``None``; see
        :meth:`Runtime.set_backend_sampler`). A fresh chain per attachment (llama.cpp initializes a chain's
        backend part once; a sampled chain holds its request's random stream); a detached one is freed after
        the next decode, whose graph no longer holds it. A chain with state (a ``dist`` or a penalty) is
        advanced by each token :meth:`sampled_tokens` reads."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        if params is None and seq_id not in self._backend:
            return
        if seq_id in self._backend:
            self._retired.append(self._backend.pop(seq_id))
            self._accepting.discard(seq_id)
        chain = None if params is None else self._chain(params)
        if not llama_cpp.llama_set_sampler(self._ctx, seq_id, chain):
            if chain is not None:
                llama_cpp.llama_sampler_free(chain)
            raise RuntimeError("llama.cpp cannot run this sampler chain in the decode graph on this backend")
        if params is not None:
            self._backend[seq_id] = chain
            if not params.greedy or _penalized(params):
                self._accepting.add(seq_id)

    def sampled_token(self, index: int) -> int:
        return self.sampled_tokens([index])[0]

    def sampled_tokens(self, indices: Sequence[int]) -> list[int]:
        if not indices:
            return []
        if not self._rows.keys() >= set(indices):
            bad = next(i for i in indices if i not in self._rows)
            raise IndexError(f"batch index {bad} has no logits in the last decode")
        get, ctx = llama_cpp.llama_get_sampled_token_ith, self._ctx
        tokens = [get(ctx, i) for i in indices]
        if min(tokens) < 0:
            raise RuntimeError(f"no backend-sampled token at batch index {indices[tokens.index(min(tokens))]}")
        if self._accepting:  # the chain's random stream and penalty window take the token, as on the host
            seq, accept, backend = self._batch_columns.seq, llama_cpp.llama_sampler_accept, self._backend
            for i, t in zip(indices, tokens, strict=True):
                if seq[i] in self._accepting:
                    accept(backend[seq[i]], t)
        return tokens

    def sampler_error(self, sampler: object) -> str | None:
        matcher = getattr(sampler, "matcher", None)  # a LlamaSampler's constraint
        if matcher is None or not matcher.is_error():
            return None
        error = str(matcher.get_error()).replace("<non-verbose/>", "").strip()
        return None if not error or "NoExtensionBias" in error else error  # that one: the text matches nothing

    def free_sampler(self, sampler: object) -> None:
        if isinstance(sampler, SeqSampler):
            return
        s = cast(LlamaSampler, sampler)  # new_sampler made it: a SeqSampler or a LlamaSampler
        llama_cpp.llama_sampler_free(s.chain)
        if s.grammar is not None:
            llama_cpp.llama_sampler_free(s.grammar)
        s.matcher = None
