"""Context checkpoints (sans-IO): sequence states saved at a conversation boundary, for models whose
KV cache cannot be trimmed back to a shorter prefix.

A recurrent model (Mamba, RWKV) keeps one state per sequence, not one entry per position, and a
hybrid one (LFM2, Granite 4, Nemotron-H, Qwen3-Next, Jamba) has such layers beside its attention
layers: neither can be rolled back to a prefix the way an attention KV cache is trimmed
(``llama_memory_seq_rm`` refuses). A sliding-window (iSWA) cache overwrites the cells of positions
that fell out of the window, so once a conversation is longer than the window a shorter prefix is
gone too. The only reusable points are states saved on purpose: llama-server's *context
checkpoints* (``--ctx-checkpoints``, ``--cache-ram``).

The scheduler stops a prompt's prefill at the boundary its request names (the conversation without
its generation prompt, :attr:`~skippy.engine.scheduling.events.SeqRequest.checkpoint_at`), copies
the sequence's state to host memory there (``llama_state_seq_get_data_ext``), and finishes the
prompt. A later prompt that starts with a checkpoint's tokens gets a slot with that state restored
(``llama_state_seq_set_data_ext``) and prefills only the rest. This store holds the checkpoints:
at most ``per_slot`` made by each slot and at most ``budget`` bytes in all, the least recently used
(made or restored) evicted first.

For attention models the same store is llama-server's host-memory *prompt cache* (``--cache-ram``):
a resident prompt whose KV is about to be overwritten (its slot evicted, or reused in place by a
prompt that shares only part of it) is saved first, and a later prompt sharing a longer prefix with
it than with anything resident gets it restored and trimmed to the shared part
(:meth:`CheckpointStore.best_prefix`).

Each state is tagged with the LoRA adapter set it was computed under (:data:`~skippy.engine.lora.LoraSet`);
a prompt is served only by states of its own set.
"""

from __future__ import annotations

import bisect
import collections
import itertools
from collections.abc import Iterator, Sequence

import attrs

from skippy.engine.lora import NO_LORA, LoraSet
from skippy.engine.scheduling.prefix import common_prefix_len

#: Greater than any token id: a token list's prefix followed by it sorts after every list with that prefix.
_ABOVE_ANY_TOKEN = 1 << 62


@attrs.frozen(eq=False)
class Checkpoint:
    """One saved sequence state: the KV (and recurrent) state after the prompt tokens ``tokens``
    (``n = len(tokens)`` positions), made by slot ``slot`` under the LoRA adapter set ``lora``; ``data`` is
    the runtime's opaque state."""

    id: int
    slot: int
    tokens: tuple[int, ...]
    data: bytes | bytearray
    lora: LoraSet = NO_LORA

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return len(self.data)


class CheckpointStore:
    """Checkpoints in least-recently-used order, bounded per slot and in bytes.

    ``per_slot``: most checkpoints made by one slot (llama-server's ``--ctx-checkpoints``, per
    slot; >= 1). ``budget``: most bytes of state data in all (``None``: no limit; llama-server's
    ``--cache-ram`` in MiB). ``max_entries``: most checkpoints in all (``None``: no limit). A
    checkpoint larger than the whole budget is not kept.
    """

    def __init__(self, per_slot: int, budget: int | None = None, max_entries: int | None = None) -> None:
        if per_slot < 1:
            raise ValueError("per_slot must be >= 1")
        self.per_slot = per_slot
        self.budget = budget
        self.max_entries = max_entries
        self._lru: collections.OrderedDict[int, Checkpoint] = collections.OrderedDict()
        self._by_tokens: dict[tuple[LoraSet, tuple[int, ...]], Checkpoint] = {}
        self._sorted: dict[LoraSet, list[tuple[tuple[int, ...], int]]] = {}  # each set's (tokens, id), in order
        self._used: dict[int, int] = {}  # id -> when last made or restored (a use counter)
        self._uses = itertools.count()
        self._ids = itertools.count()
        self.nbytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._lru)

    def __iter__(self) -> Iterator[Checkpoint]:
        return iter(list(self._lru.values()))

    def add(self, slot: int, tokens: Sequence[int], data: bytes | bytearray,
            lora: LoraSet = NO_LORA) -> Checkpoint | None:
        """Keep the state ``data`` of ``tokens``, made by ``slot`` under the LoRA set ``lora`` (most recently
        used); returns it, or ``None`` when it alone exceeds the budget. A checkpoint of the same tokens and
        set is replaced; then the oldest of ``slot``'s beyond ``per_slot``, then the oldest of all beyond the
        budget, are evicted."""
        tokens = tuple(tokens)
        if self.budget is not None and len(data) > self.budget:
            return None
        old = self._by_tokens.get((lora, tokens))
        if old is not None:
            self._drop(old, evicted=False)
        ckpt = Checkpoint(next(self._ids), slot, tokens, data, lora)
        self._lru[ckpt.id] = ckpt
        self._by_tokens[(lora, tokens)] = ckpt
        bisect.insort(self._sorted.setdefault(lora, []), (tokens, ckpt.id))
        self._used[ckpt.id] = next(self._uses)
        self.nbytes += ckpt.nbytes
        mine = [c for c in self._lru.values() if c.slot == slot]
        for old in mine[:max(0, len(mine) - self.per_slot)]:
            self._drop(old)
        while self.budget is not None and self.nbytes > self.budget:
            self._drop(next(iter(self._lru.values())))
        while self.max_entries is not None and len(self._lru) > self.max_entries:
            self._drop(next(iter(self._lru.values())))
        return ckpt

    def best(self, prompt: Sequence[int], limit: int, min_reuse: int = 1,
             lora: LoraSet = NO_LORA) -> Checkpoint | None:
        """The checkpoint of the LoRA set ``lora`` with the most tokens, ``min_reuse <= n <= limit``, whose
        tokens are a prefix of ``prompt``."""
        best: Checkpoint | None = None
        for c in self._lru.values():
            if (c.lora == lora and min_reuse <= c.n <= limit and (best is None or c.n > best.n)
                    and tuple(prompt[:c.n]) == c.tokens):
                best = c
        return best

    def has(self, tokens: Sequence[int], lora: LoraSet = NO_LORA) -> bool:
        """True when a state of exactly ``tokens`` under the LoRA set ``lora`` is held."""
        return (lora, tuple(tokens)) in self._by_tokens

    def best_prefix(self, prompt: Sequence[int], limit: int, min_reuse: int = 1,
                    lora: LoraSet = NO_LORA) -> tuple[Checkpoint, int] | None:
        """For states that can be trimmed (an attention KV cache): the checkpoint of the LoRA set ``lora``
        sharing the longest prefix with ``prompt`` and that length, at most ``limit``, at least
        ``min_reuse``; ``None`` when none does; of several sharing as much, the least recently used. Restored,
        it is trimmed to that length (``llama_memory_seq_rm``).

        A bisection of the set's token lists in lexicographic order, not a scan of every state (a prompt cache
        holds thousands): the longest shared prefix is with a neighbour of the prompt's place (for lists
        ``a <= b <= c``, ``lcp(a, c) = min(lcp(a, b), lcp(b, c))``), and the states sharing it are one run of
        that order."""
        ordered = self._sorted.get(lora)
        if not ordered:
            return None
        key = tuple(prompt)
        i = bisect.bisect_left(ordered, (key,))
        n = min(max(common_prefix_len(key, ordered[j][0]) for j in (i - 1, i) if 0 <= j < len(ordered)), limit)
        if n < min_reuse:
            return None
        head = key[:n]
        lo = bisect.bisect_left(ordered, (head,))
        hi = bisect.bisect_left(ordered, ((*head, _ABOVE_ANY_TOKEN),), lo)
        used = self._used
        return self._lru[min((ident for _, ident in ordered[lo:hi]), key=used.__getitem__)], n

    def touch(self, ckpt: Checkpoint) -> None:
        """``ckpt`` was restored: it is the most recently used."""
        if ckpt.id in self._lru:
            self._lru.move_to_end(ckpt.id)
            self._used[ckpt.id] = next(self._uses)

    def clear(self) -> None:
        for c in list(self._lru.values()):
            self._drop(c, evicted=False)

    def _drop(self, ckpt: Checkpoint, evicted: bool = True) -> None:
        del self._lru[ckpt.id]
        del self._used[ckpt.id]
        if self._by_tokens.get((ckpt.lora, ckpt.tokens)) is ckpt:
            del self._by_tokens[(ckpt.lora, ckpt.tokens)]
            ordered = self._sorted[ckpt.lora]
            del ordered[bisect.bisect_left(ordered, (ckpt.tokens, ckpt.id))]
            if not ordered:
                del self._sorted[ckpt.lora]
        self.nbytes -= ckpt.nbytes
        self.evicted += evicted
