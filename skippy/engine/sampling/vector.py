"""llama.cpp's common sampler chain, vectorized over all outputs of a decode step (numpy, sans-IO).

The decode step leaves one logit row per sampled sequence (``llama_get_logits``:
shape ``(n_outputs, n_vocab)``, float32, rows in batch order). Sampling each row
through its own llama.cpp sampler chain costs a copy of the whole vocabulary into
``llama_token_data`` and a partial sort per sequence; :func:`sample_rows` does the
same chain for every row at once with a few numpy passes.

The chain and its semantics are llama.cpp's (``src/llama-sampler.cpp`` of the
llama.cpp that llama-cpp-python 0.3.36 vendors), in the order
:meth:`skippy.engine.runtime.llama.LlamaRuntime.new_sampler` builds it:

0. end-of-generation suppression (``ignore_eos``: always; ``min_tokens``: for the first
   ``min_tokens`` tokens, the request's ``stop_token_ids`` too): those tokens' logits are
   ``-inf``, unless that leaves no finite logit (then the row is left as it was), as
   :class:`~skippy.engine.runtime.llama.LlamaRuntime`'s mask before llama.cpp's chain does.
1. ``logit_bias``: ``logit += bias`` (float32).
2. ``penalties`` over the last ``penalty_last_n`` accepted tokens (0: off): a token
   seen ``c`` times gets ``logit *= repeat`` when ``logit <= 0`` else ``logit /= repeat``,
   then ``logit -= c * frequency + presence``.
3. greedy (``temperature <= 0``): the highest logit, lowest id on ties (llama.cpp's
   ``greedy`` keeps the first strict maximum; ``np.argmax`` returns the first maximum).
4. otherwise ``top_k`` (``k > 0``: the ``k`` highest, sorted), ``top_p`` (``p < 1``:
   softmax over what is left, the shortest sorted prefix whose float32 running sum
   reaches ``p``), ``min_p`` (``p > 0``: keep ``logit >= max + log p``),
   ``temp`` (``logit /= t``) and ``dist``: softmax, then the first token whose running
   double sum reaches ``sum * u`` with ``u = generate_canonical<double, 53>(mt19937)``.
   The order of that running sum is llama.cpp's: sorted by logit when ``top_k`` or
   ``top_p`` sorted the candidates, token id order otherwise.

The random stream is llama.cpp's too: a Mersenne Twister (numpy's ``MT19937``) seeded
like ``std::mt19937(seed)``, two 32-bit draws per sampled token, so a seeded request
picks the same tokens as llama.cpp's chain up to float rounding of ``expf`` (numpy's
float32 ``exp`` may differ by one ulp) and the order of exactly tied logits (which
llama.cpp's partial sort leaves unspecified). A grammar is not implemented here: such
requests keep llama.cpp's chain (see :func:`vectorizable`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from skippy.engine.sampling.params import SamplingParams

__all__ = ["SeqSampler", "chain_probs", "sample_rows", "vectorizable", "mt19937_state"]

#: Candidates for ``top_k``: the row's tokens fall into ``max(GROUPS, 8 * k)`` groups (token ``i`` in
#: group ``i mod`` their number); the ``k``-th highest of the groups' maxima is a lower bound of the
#: row's ``k``-th largest logit (``k`` distinct tokens reach it) and close to it, so the tokens at or
#: above it (``k`` and a few more) hold the top ``k`` exactly. Each pass runs over all rows at once.
GROUPS = 512

_F32 = np.float32


def vectorizable(params: SamplingParams) -> bool:
    """True when :func:`sample_rows` implements every sampler ``params`` asks for: no grammar or
    llguidance constraint, none of llama.cpp's extended samplers (typical, mirostat, DRY, XTC,
    top-n-sigma, dynamic temperature) and no ``min_keep``; those take llama.cpp's chain."""
    return not params.grammar and params.constraint is None and not params.extended and not params.min_keep


class _NoEntropy(np.random.bit_generator.ISeedSequence):
    """A seed sequence of zeros: ``MT19937(_NoEntropy())`` skips numpy's default seeding from the OS's
    entropy (a ``SeedSequence`` hashed into 624 words, ~50 us), as its state is replaced at once."""

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> Any:
        return np.zeros(n_words, dtype=dtype)


_NO_ENTROPY = _NoEntropy()


def mt19937_state(seed: int) -> np.random.MT19937:
    """A numpy ``MT19937`` in the state of C++ ``std::mt19937(seed)`` (``init_genrand``).

    ``seed`` is taken modulo 2**32 (llama.cpp's ``uint32_t`` seed). ~28 us a generator: numpy's legacy
    seeding (``init_genrand``, the call ``RandomState(seed)`` makes) on a generator made without entropy.
    """
    bitgen = np.random.MT19937(_NO_ENTROPY)  # type: ignore[arg-type]  # numpy takes any ISeedSequence; its stubs name SeedSequence
    bitgen._legacy_seeding(seed & 0xFFFFFFFF)
    return bitgen


class SeqSampler:
    """One sequence's state of the vectorized chain: its parameters, the tokens it accepted
    within the penalty window, and its random stream.

    ``params`` must be :func:`vectorizable` (else ``ValueError``). ``eog_ids``: the vocabulary's
    end-of-generation tokens, which ``ignore_eos`` and ``min_tokens`` suppress. The random stream starts at
    ``std::mt19937(params.seed)``, as llama.cpp's ``dist`` sampler does (llama.cpp's
    ``LLAMA_DEFAULT_SEED`` 0xFFFFFFFF, "random", is taken literally here: our seeds are
    always drawn before).
    """

    __slots__ = ("params", "greedy", "bias_ids", "bias", "penalty_last_n", "counts", "recent", "bitgen",
                 "_raw", "temperature", "top_k", "top_p", "min_p", "log_min_p", "sorted", "suppress",
                 "suppress_set", "suppress_until", "n_accepted")

    def __init__(self, params: SamplingParams, eog_ids: Collection[int] = ()) -> None:
        if not vectorizable(params):
            raise ValueError("a grammar needs llama.cpp's sampler chain")
        p = params
        self.params = p
        self.greedy = p.greedy
        self.bias_ids = np.array([t for t, _ in p.logit_bias], dtype=np.intp) if p.logit_bias else None
        self.bias = np.array([b for _, b in p.logit_bias], dtype=_F32) if p.logit_bias else None
        on = p.repeat_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0
        self.penalty_last_n = max(p.penalty_last_n, 0) if on else 0
        self.counts: dict[int, int] = {}
        self.recent: deque[int] = deque()
        self.bitgen = None if p.greedy else mt19937_state(p.seed)
        self._raw = None if self.bitgen is None else self.bitgen.random_raw
        self.temperature = _F32(p.temperature)
        self.top_k = p.top_k
        self.top_p = _F32(p.top_p)
        self.min_p = _F32(p.min_p)
        self.log_min_p = np.log(self.min_p) if p.min_p > 0 else _F32(-np.inf)
        self.sorted = p.top_k > 0 or p.top_p < 1.0  # llama.cpp sorts the candidates in top_k / top_p
        suppress: Collection[int] = ()
        self.suppress_until = -1  # suppressed while fewer tokens were accepted; -1: always (ignore_eos)
        if p.ignore_eos:
            suppress = eog_ids
        elif p.min_tokens > 0:
            suppress, self.suppress_until = set(eog_ids) | p.stop_token_ids, p.min_tokens
        self.suppress = np.array(sorted(suppress), dtype=np.intp) if suppress else None
        self.suppress_set = frozenset(suppress)
        self.n_accepted = 0

    @property
    def suppressing(self) -> bool:
        """End-of-generation tokens are suppressed for the next token (``ignore_eos``, or fewer than
        ``min_tokens`` accepted so far)."""
        return self.suppress is not None and (self.suppress_until < 0 or self.n_accepted < self.suppress_until)

    @property
    def plain_greedy(self) -> bool:
        """Greedy with nothing that ever changes a logit first (no suppression, logit bias or penalty): the
        argmax of the raw row, which llama.cpp's backend greedy sampler computes in the decode graph."""
        return self.greedy and self.suppress is None and self.bias_ids is None and not self.penalty_last_n

    @property
    def graph_exact(self) -> bool:
        """llama.cpp's chain in the decode graph (backend sampling) samples the tokens this one samples: no
        end-of-generation suppression, and for a sampled chain the same candidates in the same order at a
        precision that cannot tell them apart. So not: the seed 0xFFFFFFFF (llama.cpp's ``dist`` draws a
        random seed for it; ours is literal); ``min_p`` 1 (the graph keeps only logits above the maximum's
        threshold, none); ``top_k`` without ``top_p`` (the graph's top-k leaves its candidates unsorted, so
        the draw walks them in another order); and the whole vocabulary (``top_k`` 0, ``top_p`` 1, ``min_p``
        0: its float32 sum of 49k probabilities parts from ours)."""
        p = self.params
        if self.suppress is not None:
            return False
        if p.greedy:
            return True
        return ((p.seed & 0xFFFFFFFF) != 0xFFFFFFFF and p.min_p < 1.0
                and (p.top_p < 1.0 or (p.top_k == 0 and p.min_p > 0.0)))

    @property
    def modifies(self) -> bool:
        """The row's logits change before selection (suppression, a logit bias, or a penalty with history)."""
        return self.bias_ids is not None or bool(self.counts) or self.suppressing

    def uniform(self) -> float:
        """``std::uniform_real_distribution<double>(0, 1)`` on the stream (libstdc++'s
        ``generate_canonical<double, 53>``: two 32-bit draws, the first the low word)."""
        raw = self._raw
        assert raw is not None  # only a sampler that is not greedy draws, and it has a stream
        lo, hi = raw(2)
        u = (float(lo) + float(hi) * 4294967296.0) / 18446744073709551616.0
        return u if u < 1.0 else 0.9999999999999999

    def accept(self, token: int) -> None:
        """Record a token the sequence generated (llama.cpp ``llama_sampler_accept``): the
        penalty window slides and ``min_tokens`` counts it (``dist`` and the other samplers keep no
        history)."""
        self.n_accepted += 1
        n = self.penalty_last_n
        if not n:
            return
        counts = self.counts
        counts[token] = counts.get(token, 0) + 1
        recent = self.recent
        if len(recent) >= n:
            old = recent.popleft()
            c = counts[old] - 1
            if c:
                counts[old] = c
            else:
                del counts[old]
        recent.append(token)

    def accept_many(self, tokens: Sequence[int]) -> None:
        """:meth:`accept` each of ``tokens`` in order (without a penalty window, one count)."""
        if self.penalty_last_n:
            for t in tokens:
                self.accept(t)
        else:
            self.n_accepted += len(tokens)

    def apply_modifiers(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply end-of-generation suppression, logit bias, then penalties, to one float32 row in place
        (the runtime's mask, then llama.cpp's order). Returns the ids it may have changed and their
        values before (``row[ids] = values`` undoes it)."""
        penalized = None
        suppress = self.suppress if self.suppressing else None
        parts: list[np.ndarray] = []
        if suppress is not None:
            parts.append(suppress)
        if self.bias_ids is not None:
            parts.append(self.bias_ids)
        if self.counts:
            penalized = np.fromiter(self.counts.keys(), dtype=np.intp, count=len(self.counts))
            parts.append(penalized)
        touched = np.concatenate(parts) if parts else np.empty(0, dtype=np.intp)
        before = row[touched]
        if suppress is not None:
            ids = suppress
            kept = row[ids]
            row[ids] = -np.inf
            if not np.isfinite(row.max()) and not np.isfinite(row).any():  # max: no temporary array
                row[ids] = kept
        if self.bias_ids is not None:
            row[self.bias_ids] += self.bias
        if penalized is not None:
            p = self.params
            ids = penalized
            cnt = np.fromiter(self.counts.values(), dtype=_F32, count=len(self.counts))
            v = row[ids]
            rep = _F32(p.repeat_penalty)
            v = np.where(v <= 0, v * rep, v / rep)
            v -= cnt * _F32(p.frequency_penalty) + _F32(p.presence_penalty)
            row[ids] = v
        return touched, before


def sample_rows(logits: np.ndarray, samplers: Sequence[SeqSampler]) -> list[int]:
    """Sample one token per row of ``logits`` with each row's :class:`SeqSampler`, then accept it.

    Args:
        logits: float32, shape ``(n, n_vocab)``; row ``i`` belongs to ``samplers[i]``. Left as
            it was: suppression, a bias or a penalty changes a few logits of a writable array in
            place and puts them back before returning (a read-only array is copied first).
        samplers: ``n`` sequence states.

    Returns:
        ``n`` token ids (``0 <= id < n_vocab``). A row without a finite maximum (NaN or
        all ``-inf``) still gets a valid id (the first maximum as numpy orders NaN), never
        an exception, as llama.cpp's chain would.
    """
    n = len(samplers)
    if logits.ndim != 2 or logits.shape[0] != n:
        raise ValueError(f"logits of shape {logits.shape} for {n} samplers")
    if n == 0:
        return []
    x = logits
    mods: list[int] = []
    lazy: list[int] = []  # greedy rows whose only modifier is suppression: it matters when the argmax is suppressed
    for i, s in enumerate(samplers):
        if s.modifies:
            (lazy if s.greedy and s.bias_ids is None and not s.counts else mods).append(i)
    undo: list[tuple[int, np.ndarray, np.ndarray]] = []
    if mods and not logits.flags.writeable:
        x = np.array(logits, dtype=_F32)
    try:
        for i in mods:
            undo.append((i, *samplers[i].apply_modifiers(x[i])))
        out = _select(x, samplers)
    finally:
        if x is logits:
            for i, ids, before in reversed(undo):
                x[i, ids] = before
    for i in lazy:
        s = samplers[i]
        if out[i] in s.suppress_set:  # else suppressing leaves that first maximum where it is
            row = np.array(logits[i], dtype=_F32)
            s.apply_modifiers(row)
            out[i] = int(row.argmax())
    for s, t in zip(samplers, out, strict=True):
        s.accept(t)
    return out


def _select(x: np.ndarray, samplers: Sequence[SeqSampler]) -> list[int]:
    """The token of each row of ``x`` (modifiers applied): argmax for greedy rows, the chain for the rest."""
    n = len(samplers)
    out = [0] * n
    greedy = [i for i, s in enumerate(samplers) if s.greedy]
    if greedy:
        g = x.argmax(axis=1) if len(greedy) == n else x[greedy].argmax(axis=1)
        for i, t in zip(greedy, g.tolist(), strict=True):
            out[i] = t
    if len(greedy) < n:
        rows = [i for i, s in enumerate(samplers) if not s.greedy]
        toks = _sample_dist(x if len(rows) == n else x[rows], [samplers[i] for i in rows])
        for i, t in zip(rows, toks, strict=True):
            out[i] = t
    return out


def _candidates(x: np.ndarray, samplers: Sequence[SeqSampler],
                norms: dict[int, np.float32]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row, the candidate ``(ids, logits)`` that ``dist`` chooses among before ``top_p`` /
    ``min_p``, in llama.cpp's order: the top ``k`` sorted (``top_k > 0``), the sorted head of the
    vocabulary that ``top_p`` and ``min_p`` can keep (``top_k == 0`` and ``top_p < 1``: :func:`_nucleus`),
    every token sorted (``top_k >= n_vocab``), or the vocabulary in id order (then filtered by
    ``min_p`` here already, as llama.cpp's unsorted ``min_p`` does). ``norms`` gets the softmax
    normalizer of rows whose ``top_p`` runs on the unsorted vocabulary."""
    m, v = x.shape
    res: list[tuple[np.ndarray, np.ndarray]] = [None] * m  # type: ignore[list-item]
    # top_k rows, grouped by k: a threshold from the group maxima, then the exact top k above it (_top_k)
    by_k: dict[int, list[int]] = {}
    for j, s in enumerate(samplers):
        k = s.top_k
        if 0 < k < v:
            by_k.setdefault(k, []).append(j)
        elif s.sorted and k == 0:  # top_p < 1 over the whole vocabulary, sorted as far as top_p / min_p reach
            # llama.cpp's top_p normalizes the unsorted array: its float32 sum runs in id order
            with np.errstate(invalid="ignore", over="ignore"):
                norms[j] = np.cumsum(np.exp(x[j] - x[j].max()), dtype=_F32)[-1]
            res[j] = _nucleus(x[j], s, norms[j])
        elif s.sorted:  # top_k >= n_vocab: every token, sorted (top_p normalizes in that order)
            order = np.argsort(-x[j], kind="stable")
            res[j] = (order, x[j][order])
        else:  # id order; min_p filters here (llama.cpp's unsorted min_p)
            row = x[j]
            if s.min_p > 0:
                mx = row.max()
                ids = np.flatnonzero(row >= mx + s.log_min_p)
                if ids.size == 0:  # NaN row: llama.cpp's fallback keeps the whole vocabulary
                    ids = np.arange(v)
            else:
                ids = np.arange(v)
            res[j] = (ids, row[ids])
    for k, rows in by_k.items():
        for j, cand in zip(rows, _top_k(x if len(rows) == m else x[rows], k), strict=True):
            res[j] = cand
    return res


def _nucleus(row: np.ndarray, s: SeqSampler, norm: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The sorted head of ``row`` (logit descending, then id) that ``top_p`` (normalizer ``norm``) and
    ``min_p`` can keep: the candidates of a ``top_k == 0`` row, exactly as the whole vocabulary sorted
    would give them to :func:`_sample_dist`, without sorting it all.

    With ``min_p``: the tokens at or above ``max + log(min_p)`` (``min_p`` ends the sorted prefix at the
    first token below, whatever ``top_p`` kept). Without: the top 256, 2048, ... tokens until their float32
    running sum of ``exp(logit - max) / norm`` reaches ``top_p``, as :func:`_sample_dist` computes it.
    A NaN row is sorted whole.
    """
    v = row.shape[0]
    with np.errstate(invalid="ignore", over="ignore"):
        mx = row.max()
        if s.min_p > 0:
            ids = np.flatnonzero(row >= mx + s.log_min_p)
            if ids.size:
                return _head(row, ids, ids.size)
        elif np.isfinite(mx):
            k = 256
            while k < v // 2:
                ids, vals = _top_k(row[None, :], k)[0]
                if np.cumsum(np.exp(vals - vals[0]) / norm, dtype=_F32)[-1] >= s.top_p:
                    return ids, vals
                k *= 8
    order = np.argsort(-row, kind="stable")
    return order, row[order]


def _top_k(xs: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``k`` highest logits ``(ids, logits)`` of each row of ``xs`` (float32, ``(r, v)``, ``0 < k < v``),
    sorted by logit descending then id (llama.cpp leaves the order of ties unspecified).

    The candidates are the tokens at or above the ``k``-th highest group maximum (see :data:`GROUPS`),
    gathered into one ``(r, width)`` array padded with ``-inf`` (padding only follows rows whose every
    candidate is above ``-inf``; one row alone is not padded); a row with fewer than ``k`` candidates (NaN
    logits) takes its top ``k`` by ``argpartition``, NaN last.
    """
    r, v = xs.shape
    ng = min(v, max(GROUPS, 8 * k))
    per = v // ng
    with np.errstate(invalid="ignore"):
        gmax = xs[:, :ng * per].reshape(r, per, ng).max(axis=1)  # (r, ng); NaN propagates
        thr = np.partition(gmax, ng - k, axis=1)[:, ng - k]
        flat = np.flatnonzero(xs >= thr[:, None])
    if r == 1:  # one row: its candidates directly (the padded array's fixed costs would dominate)
        return [_head(xs[0], flat, k) if flat.size >= k else _top_k_direct(xs[0], k)]
    rows, cols = np.divmod(flat, v)
    counts = np.bincount(rows, minlength=r)
    starts = np.zeros(r + 1, dtype=np.intp)
    np.cumsum(counts, out=starts[1:])
    res: list[tuple[np.ndarray, np.ndarray]] = [None] * r  # type: ignore[list-item]
    width = int(counts.max()) if flat.size else 0
    if width >= k:
        off = np.arange(width)
        idx = np.minimum(starts[:-1, None] + off, flat.size - 1)
        cids = cols[idx]
        cvals = np.where(off < counts[:, None], np.take_along_axis(xs, cids, axis=1), -np.inf).astype(_F32)
        if width > k:
            sel = np.argpartition(cvals, width - k, axis=1)[:, width - k:]
            cids, cvals = np.take_along_axis(cids, sel, axis=1), np.take_along_axis(cvals, sel, axis=1)
        order = np.lexsort((cids, -cvals), axis=1)
        ids2, vals2 = np.take_along_axis(cids, order, axis=1), np.take_along_axis(cvals, order, axis=1)
        for j in range(r):
            res[j] = (ids2[j], vals2[j])
    for j in np.flatnonzero(counts < k).tolist():  # NaN thresholds: the row's top k directly
        res[j] = _top_k_direct(xs[j], k)
    return res


def _top_k_direct(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest logits of ``row`` by ``argpartition`` over all of it (NaN last), as :func:`_head`."""
    v = row.shape[0]
    return _head(row, np.sort(np.argpartition(row, v - k)[v - k:]), k)


def _head(row: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest logits of ``row`` among ``ids`` (ascending, at least ``k``, holding the row's top ``k``)
    as ``(ids, logits)``, sorted by logit descending then id."""
    vals = row[ids]
    if ids.size > k:
        part = np.argpartition(-vals, k - 1)[:k]
        part.sort()  # keep id order, so that equal logits sort by id below
        ids, vals = ids[part], vals[part]
    order = np.argsort(-vals, kind="stable")
    return ids[order], vals[order]


def _sample_dist(x: np.ndarray, samplers: Sequence[SeqSampler]) -> list[int]:
    """top_k -> top_p -> min_p -> temp -> dist for every row of ``x`` (see the module docstring)."""
    m = len(samplers)
    ids2, w, n = _weights(x, samplers)
    cum = np.cumsum(w, axis=1)
    total = cum[np.arange(m), n - 1]
    u = np.array([s.uniform() for s in samplers])
    pick = cum >= (total * u)[:, None]
    sel = np.where(pick.any(axis=1), pick.argmax(axis=1), n - 1)
    tokens: list[int] = ids2[np.arange(m), sel].tolist()
    return tokens


def chain_probs(row: np.ndarray, sampler: SeqSampler) -> tuple[np.ndarray, np.ndarray]:
    """The distribution ``sampler``'s chain draws its next token from, on the raw logits ``row`` (float32,
    ``(n_vocab,)``, left as it was): the candidates the chain keeps, ``(ids, probabilities)``, probability
    descending (ties by the chain's order), as llama.cpp's sampler leaves them after ``dist``
    (llama-server's ``post_sampling_probs``). A greedy chain keeps its one token at probability 1. Does not
    draw from the sampler's random stream nor accept anything: call it before :func:`sample_rows`."""
    x = np.array(row, dtype=_F32)[None, :]
    if sampler.modifies:
        sampler.apply_modifiers(x[0])
    if sampler.greedy:
        return np.array([int(x[0].argmax())], dtype=np.intp), np.ones(1)
    ids2, w, n = _weights(x, [sampler])
    k = int(n[0])
    ids, p = ids2[0, :k], w[0, :k]
    total = p.sum()
    p = p / total if total > 0 else np.full(k, 1.0 / k)
    order = np.argsort(-p, kind="stable")
    return ids[order], p[order]


def _weights(x: np.ndarray, samplers: Sequence[SeqSampler]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chain up to ``dist``'s draw for every row of ``x``: ``(ids, weights, n)``, where row ``i`` keeps its
    first ``n[i]`` candidates ``ids[i, :n[i]]`` (in the order ``dist`` walks them) with unnormalized float64
    weights ``weights[i]`` (``exp((logit - max) / temp)``; 0 past ``n[i]``)."""
    m = len(samplers)
    norms: dict[int, np.float32] = {}
    cands = _candidates(x, samplers, norms)
    size = np.fromiter((len(ids) for ids, _ in cands), dtype=np.intp, count=m)
    width = int(size.max())
    if (size == width).all():  # every row top_k with the same k (the default chain), or the whole vocabulary
        vals = np.stack([v for _, v in cands]).astype(_F32, copy=False)
        ids2 = np.stack([ids for ids, _ in cands]).astype(np.intp, copy=False)
    else:
        vals = np.full((m, width), -np.inf, dtype=_F32)
        ids2 = np.zeros((m, width), dtype=np.intp)
        for j, (ids, v) in enumerate(cands):
            vals[j, :len(v)] = v
            ids2[j, :len(ids)] = ids
    is_sorted = np.array([s.sorted for s in samplers])
    cols = np.arange(width)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        # the largest logit of each row: the first one when sorted (llama.cpp reads data[0] then)
        mx = np.where(is_sorted, vals[:, 0], vals.max(axis=1))
        n = size.copy()
        top_p = np.array([s.top_p for s in samplers], dtype=_F32)
        use_p = top_p < 1
        if use_p.any():  # softmax over the candidates (float32 sums), the shortest prefix reaching p
            e = np.exp(vals - mx[:, None])
            z = np.cumsum(e, axis=1, dtype=_F32)[:, -1]
            for j, norm in norms.items():
                z[j] = norm
            cum = np.cumsum(e / z[:, None], axis=1, dtype=_F32)
            reach = (cum >= top_p[:, None]) & (cols < size[:, None])
            n_p = np.where(reach.any(axis=1), reach.argmax(axis=1) + 1, size)
            n = np.where(use_p, np.minimum(n, n_p), n)
        log_min_p = np.array([s.log_min_p for s in samplers], dtype=_F32)
        use_m = (log_min_p > -np.inf) & is_sorted  # unsorted rows were filtered in _candidates
        if use_m.any():  # sorted: the first token always stays, then while logit >= max + log(min_p)
            keep = vals >= (mx + log_min_p)[:, None]
            keep[:, 0] = True
            n_m = np.where(keep.all(axis=1), width, (~keep).argmax(axis=1))
            n = np.where(use_m, np.minimum(n, n_m), n)
        temp = np.array([s.temperature for s in samplers], dtype=_F32)
        lt = vals / temp[:, None]
        lt[cols >= n[:, None]] = -np.inf
        lmax = np.where(is_sorted, lt[:, 0], lt.max(axis=1))
        w = np.exp(lt - lmax[:, None]).astype(np.float64)
        w[~np.isfinite(w)] = 0.0
    return ids2, w, n
