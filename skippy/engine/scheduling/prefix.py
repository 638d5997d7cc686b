"""Prefix-cache index (sans-IO): which KV sequence shares the longest token prefix.

The decode scheduler keeps the KV of finished sequences resident in their
slots (least recently used first out) and asks this index, at admission,
for the sequence (resident or running) whose cached tokens share the
longest prefix with the new prompt. It then reuses that slot in place, or
copies the sequence into a free slot (the whole sequence, then
``llama_memory_seq_rm`` of the tail: with a non-unified KV cache llama.cpp
only copies whole streams, so a short source goes through its state; with a
unified one, ``llama_memory_seq_cp`` of the prefix alone, which shares its cells),
and prefills only the rest.

Each entry is tagged with the LoRA adapter set its KV was computed under (:data:`~skippy.engine.lora.LoraSet`):
the same tokens under other adapters have other KV values, so a prompt matches only entries of its own set.
"""

from __future__ import annotations

import array
import bisect
import collections
from collections.abc import Callable, Iterable, Sequence

import attrs

from skippy.engine.lora import NO_LORA, LoraSet

#: Shorter shared prefixes are not worth a copy.
MIN_REUSE = 16

#: Prompt tokens always prefilled, even when cached: the last one's logits give the first
#: sampled token. One, as llama-server and vLLM recompute (a 2-token batch costs about 1.8x a
#: 1-token step on 2 CPU cores; 16 cached prompts starting together with 1- and 2-token tails
#: cost two passes over the weights instead of one).
MIN_TAIL = 1

#: The tail that keeps a cached prompt's greedy output equal to a cold run's: llama.cpp computes
#: a sequence's lone token in a batch with other kernels than two or more (measured on CPU: the
#: first token's logits moved by up to 0.4). It holds only with flash attention off (the flash
#: kernel rounds a long prefill differently from a short tail anyway), so the engine uses it there.
EXACT_TAIL = 2


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    # compare in blocks first: prompts share long prefixes
    step = 64
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def longest_prefix_among(tokens: list[int], ordered: Sequence[list[int]]) -> int:
    """The longest common prefix of ``tokens`` with any list of ``ordered`` (ascending lexicographic order).

    Two :func:`common_prefix_len` calls and a bisection (``O(log n)`` list comparisons) instead of ``n``
    prefix scans: the longest is with a neighbour of ``tokens``' insertion point, since for lists
    ``a <= b <= c``, ``lcp(a, c) = min(lcp(a, b), lcp(b, c))``. 0 when ``ordered`` is empty.
    """
    i = bisect.bisect_left(ordered, tokens)
    below = common_prefix_len(tokens, ordered[i - 1]) if i else 0
    return max(below, common_prefix_len(tokens, ordered[i])) if i < len(ordered) else below


def pack(tokens: Sequence[int]) -> bytes:
    """``tokens`` as bytes, 4 a token (C ``int``): what :func:`common_prefix_packed` compares."""
    return array.array("i", tokens).tobytes()


def common_prefix_packed(a: bytes, b: bytes) -> int:
    """:func:`common_prefix_len` of two token lists packed by :func:`pack`, in tokens.

    Comparisons of bytes (``memcmp``) in a bisection for the first differing token, instead of comparing
    Python ints one by one: ~3 µs for two 4000-token prompts that share all but their tails, against ~23.
    """
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n // 4
    lo, hi = 0, n // 4  # tokens before lo are equal; the first differing one is before hi
    while hi - lo > 8:
        mid = (lo + hi) // 2
        if a[4 * lo:4 * mid] == b[4 * lo:4 * mid]:
            lo = mid
        else:
            hi = mid
    while a[4 * lo:4 * lo + 4] == b[4 * lo:4 * lo + 4]:
        lo += 1
    return lo


@attrs.frozen
class Match:
    """The best source for a prompt: ``slot`` holds ``n`` reusable tokens; ``resident`` if idle."""

    slot: int
    n: int
    resident: bool


class PrefixIndex:
    """Resident (finished) sequences by slot, in LRU order, with their KV token lists."""

    def __init__(self, min_tail: int = MIN_TAIL) -> None:
        #: prompt tokens never reused (see :data:`MIN_TAIL`)
        self.min_tail = min_tail
        self._resident: collections.OrderedDict[int, list[int]] = collections.OrderedDict()
        self._packed: dict[int, bytes] = {}  # the resident tokens, packed (:func:`pack`)
        self._keys: dict[int, str | None] = {}
        self._loras: dict[int, LoraSet] = {}

    def __len__(self) -> int:
        return len(self._resident)

    @property
    def cells(self) -> int:
        """KV cells held by resident sequences."""
        return sum(len(t) for t in self._resident.values())

    def keep(self, slot: int, tokens: list[int], key: str | None = None, lora: LoraSet = NO_LORA) -> None:
        """Remember that ``slot`` holds ``tokens`` (most recently used), tagged with a ``prompt_cache_key`` and
        the LoRA adapter set ``lora`` its KV was computed under."""
        self._resident[slot] = tokens
        self._packed[slot] = pack(tokens)
        self._keys[slot] = key
        self._loras[slot] = lora
        self._resident.move_to_end(slot)

    def lora(self, slot: int) -> LoraSet:
        """The LoRA adapter set of the entry in ``slot`` (``()`` when it holds none)."""
        return self._loras.get(slot, NO_LORA)

    def resident(self, slot: int) -> list[int] | None:
        """The tokens resident in ``slot``, or ``None`` when it holds no entry."""
        return self._resident.get(slot)

    def take(self, slot: int) -> list[int]:
        """Remove ``slot`` from the index (it is reused or evicted); returns its tokens."""
        self._keys.pop(slot, None)
        self._loras.pop(slot, None)
        self._packed.pop(slot, None)
        return self._resident.pop(slot)

    def items(self) -> list[tuple[int, list[int]]]:
        """(slot, tokens) of every resident entry, least recently used first."""
        return list(self._resident.items())

    def touch(self, slot: int) -> None:
        self._resident.move_to_end(slot)

    def lru(self, key: str | None = None, claim: Callable[[int], int] | None = None) -> int | None:
        """The resident slot to evict, or ``None``: the least recently used one of the
        same ``prompt_cache_key`` group when there is one (a group replaces its own
        entries before it displaces other groups'), else the least recently used.

        ``claim(slot)``, when given, is how many of a resident entry's tokens a waiting request
        could reuse: the entry least claimed goes first (ties least recently used first), so an
        eviction does not destroy the prefix the next request in the queue needs.
        """
        slots = list(self._resident)
        if key is not None:
            same = [slot for slot in slots if self._keys.get(slot) == key]
            slots = same or slots
        if not slots:
            return None
        return min(slots, key=claim) if claim is not None else slots[0]

    def best(self, prompt: Sequence[int], running: Iterable[tuple[int, Sequence[int] | bytes, int]] = (),
             min_reuse: int = MIN_REUSE, usable: Callable[[int, int], bool] | None = None,
             claim: Callable[[int], int] | None = None, lora: LoraSet = NO_LORA) -> Match | None:
        """The resident or running sequence sharing the longest prefix (>= ``min_reuse``) with ``prompt``.

        Only resident entries of the LoRA adapter set ``lora`` are candidates (the caller gives only running
        sequences of that set).

        ``running`` gives (slot, tokens, n) of sequences decoding now, whose first ``n``
        tokens are in the KV cache and reusable (``tokens`` a list, or bytes from :func:`pack`, compared
        faster). At most ``len(prompt) - min_tail`` tokens are reused (see :data:`MIN_TAIL`). ``usable(slot, n)``,
        when given, says whether the KV cache of ``slot`` can still serve its first ``n`` tokens (a sliding-window
        cache may have overwritten cells a trimmed sequence needs); a candidate it refuses is passed over.
        Among resident candidates that share equally long prefixes, the one with the smallest
        ``claim(slot)`` (what other waiting requests could reuse of it, see :meth:`lru`) is
        chosen: the chosen resident entry is reused in place when no slot is free, and a request
        that shares only a common system prompt must not take the entry that holds another
        waiting request's whole prompt.
        """
        best: Match | None = None
        limit = len(prompt) - self.min_tail
        packed = pack(prompt)
        candidates = [(slot, min(common_prefix_packed(self._packed[slot], packed), limit), True)
                      for slot in self._resident if self._loras.get(slot, NO_LORA) == lora]
        candidates += [(slot, min(common_prefix_packed(tokens, packed) if isinstance(tokens, bytes)
                                  else common_prefix_len(tokens, prompt), limit, n_kv), False)
                       for slot, tokens, n_kv in running]
        best_claim = 0
        for slot, n, resident in candidates:
            if n < min_reuse or (usable is not None and not usable(slot, n)):
                continue
            if best is None or n > best.n:
                best = Match(slot, n, resident)
                best_claim = claim(slot) if claim is not None and resident else 0
            elif claim is not None and resident and best.resident and n == best.n:
                c = claim(slot)
                if c < best_claim:
                    best, best_claim = Match(slot, n, resident), c
        return best
