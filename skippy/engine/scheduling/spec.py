"""Prompt-lookup speculative decoding (vLLM's ``ngram`` method), sans-IO.

A decoding sequence drafts up to ``k`` tokens by matching its last n-gram
(the pending token included, ``n`` from :data:`NGRAM_MAX` down to
:data:`NGRAM_MIN`) against its own earlier text, prompt and output alike: the
draft is what followed the most recent earlier occurrence. The scheduler puts
the pending token and the draft in one batch with logits at each position and
verifies them (:func:`skippy.engine.scheduling.decode.verify_draft`): the
sequence's own sampler runs at the first position, then at the next one for as
long as the sampled token equals the draft token there; every sampled token is
emitted and the KV cache is trimmed past the accepted prefix.

:class:`NgramDrafter` keeps an incremental index (n-gram -> where its
continuation starts), so a step costs ``O(NGRAM_MAX - NGRAM_MIN + 1)`` dict
operations per sequence whatever its length. :class:`SpecState` tracks one
sequence's acceptance and backs off when drafts keep failing: a rejected draft
costs batch tokens, so normal chat must not pay for copy-heavy requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from skippy.engine.errors import InvalidRequest

#: Longest n-gram matched (vLLM's ``prompt_lookup_max``; its docs use 4).
NGRAM_MAX = 4
#: Shortest n-gram matched (vLLM's ``prompt_lookup_min``); unigram matches are mostly noise.
NGRAM_MIN = 2
#: Most draft tokens per step a request or the server may ask for.
MAX_DRAFT = 16
#: Draft tokens per step when a request turns speculation on (``"speculative": true``) and the
#: server's ``--spec-ngram`` is 0 (vLLM's examples use ``num_speculative_tokens=5``).
DEFAULT_DRAFT = 5
#: Acceptance (accepted / drafted tokens over the recent drafts) below which drafting backs off. A
#: draft token costs a share of a one-token decode step (on 2 CPU cores about 0.4: 16 sequences'
#: tokens decode in ~7.5x the time of one), and a draft pays only when more than that share of its
#: tokens is accepted.
MIN_ACCEPTANCE = 0.5
#: Drafted tokens the acceptance is judged over before deciding.
WINDOW_TOKENS = 16
#: Steps without drafting after the first low-acceptance window; doubles on each further one.
BACKOFF_FIRST = 16
#: Longest backoff (steps).
BACKOFF_MAX = 512


def requested_draft(value: bool | int | None, default: int) -> int | None:
    """Draft tokens per step that a request's ``speculative`` field asks for.

    ``None`` (absent): the server's ``--spec-ngram`` (returns ``None``);
    ``false`` or ``0``: off; ``true``: the server's ``default`` when it is on,
    else :data:`DEFAULT_DRAFT`; an int ``1..MAX_DRAFT``: that many. Raises
    :class:`InvalidRequest` (400, ``param="speculative"``) for another int.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return (default or DEFAULT_DRAFT) if value else 0
    if not 0 <= value <= MAX_DRAFT:
        raise InvalidRequest(f"speculative must be a boolean or an integer in [0, {MAX_DRAFT}]", param="speculative")
    return value


class NgramDrafter:
    """Incremental n-gram index over one sequence's tokens (prompt, then accepted output).

    :meth:`extend` indexes tokens as they are appended (``tokens`` only ever
    grows); :meth:`propose` returns up to ``k`` tokens that followed the most
    recent earlier occurrence of the sequence's last n-gram.
    """

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX) -> None:
        assert 1 <= n_min <= n_max
        self.n_min, self.n_max = n_min, n_max
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> start of its (latest) continuation
        self._n = 0  # tokens indexed
        self._src = -1  # where the last draft was copied from ...
        self._at = 0  # ... and the text's length (pending token included) then

    def extend(self, tokens: Sequence[int]) -> None:
        """Index ``tokens[self._n:]``: every n-gram ending at each new position maps to the position after it."""
        index, lo, hi = self._index, self.n_min, self.n_max
        for end in range(self._n + 1, len(tokens) + 1):  # the n-gram tokens[end - n:end] continues at end
            for n in range(lo, min(hi, end) + 1):
                index[tuple(tokens[end - n:end])] = end
        self._n = max(self._n, len(tokens))

    def propose(self, tokens: Sequence[int], last: int, k: int, stop: frozenset[int] = frozenset()) -> tuple[int, ...]:
        """Up to ``k`` draft tokens to follow ``tokens + [last]``; ``()`` when no n-gram matches.

        ``tokens`` is the sequence's text so far (indexed with :meth:`extend`
        first), ``last`` its pending token. The longest n-gram (``n_max`` down to
        ``n_min``) of ``tokens + [last]`` that occurred earlier wins; its latest
        occurrence's continuation is the draft, cut before any token of ``stop``
        (end-of-generation ids: a sequence never drafts past its end). While the
        text keeps copying the source of the previous draft (its last ``n_max``
        tokens still equal the source's, advanced as far as the text grew), the
        draft continues from there instead: a repeated phrase of a copied text
        must not jump to another occurrence.
        """
        self.extend(tokens)
        n_tok = len(tokens)
        n = self.n_max
        follow = self._src + (n_tok + 1 - self._at)
        if self._src >= 0 and n <= follow < n_tok and tokens[follow - 1] == last \
                and tokens[follow - n:follow - 1] == tokens[n_tok - n + 1:]:
            return self._cut(tokens, follow, n_tok, last, k, stop)
        for n in range(min(self.n_max, n_tok + 1), self.n_min - 1, -1):
            start = self._index.get((*tokens[n_tok - n + 1:], last) if n > 1 else (last,))
            if start is None:
                continue
            draft = self._cut(tokens, start, n_tok, last, k, stop)
            if draft:
                return draft
        return ()

    def _cut(self, tokens: Sequence[int], start: int, n_tok: int, last: int, k: int,
             stop: frozenset[int]) -> tuple[int, ...]:
        """The draft from ``start``: up to ``k`` tokens, before any ``stop`` token; remembered as the copy source."""
        draft = list(tokens[start:start + k])
        if len(draft) < k and start + len(draft) == n_tok:  # the continuation runs into the end: `last` follows
            draft.append(last)
        for i, t in enumerate(draft):
            if t in stop:
                del draft[i:]
                break
        if draft:
            self._src, self._at = start, n_tok + 1
        return tuple(draft[:k])


@attrs.define
class SpecState:
    """Speculation state of one sequence: ``k`` draft tokens at most per step, its drafter, counters.

    ``n`` is the current draft length (transformers' "heuristic" schedule for
    assisted generation: +2 after a wholly accepted draft, -1 otherwise,
    within ``1..k``). ``drafted`` / ``accepted`` count tokens over the sequence's life;
    :meth:`record` keeps a window of the recent drafts and, when fewer than
    :data:`MIN_ACCEPTANCE` of their tokens were accepted, pauses drafting for
    a backoff that doubles each time (from :data:`BACKOFF_FIRST` to
    :data:`BACKOFF_MAX` steps) and resets after a window that pays.
    """

    k: int
    n: int = attrs.field(default=attrs.Factory(lambda self: self.k, takes_self=True))
    drafter: NgramDrafter = attrs.field(factory=NgramDrafter)
    drafted: int = 0
    accepted: int = 0
    skip: int = 0  # steps left without drafting
    backoff: int = BACKOFF_FIRST
    _win_drafted: int = 0
    _win_accepted: int = 0

    def ready(self) -> bool:
        """Whether to draft at this step (counts a paused step down)."""
        if self.skip > 0:
            self.skip -= 1
            return False
        return True

    def record(self, drafted: int, accepted: int) -> None:
        """One verified draft: ``drafted`` tokens proposed, ``accepted`` of them matched."""
        self.drafted += drafted
        self.accepted += accepted
        self.n = min(self.k, self.n + 2) if accepted == drafted else max(1, self.n - 1)
        self._win_drafted += drafted
        self._win_accepted += accepted
        if self._win_drafted < WINDOW_TOKENS:
            return
        if self._win_accepted < MIN_ACCEPTANCE * self._win_drafted:
            self.skip = self.backoff
            self.backoff = min(self.backoff * 2, BACKOFF_MAX)
        else:
            self.backoff = BACKOFF_FIRST
        self._win_drafted = self._win_accepted = 0
