"""Where each sequence's KV lives: slots, the prefix cache, the host prompt cache and context checkpoints.

:class:`KVCacheManager` owns the KV side of :class:`~skippy.engine.scheduling.core.SchedulerCore`'s rules
(vLLM's ``KVCacheManager`` role beside its ``Scheduler``): which slot a new sequence gets and how much of
its prompt is already in that slot's KV (prefix reuse, a copy, a restored state), what a finished
sequence leaves resident, what is saved to host memory before it is overwritten, and llama-server's slot
actions. The core decides who runs; this class decides where their KV comes from and where it goes. Its
rules are the core module docstring's *Prefix reuse*, *Sliding-window models*, *Context checkpoints* and
*Slot order*; their unit tests are in ``tests/unit/test_scheduler_core.py``.

Every KV it hands out or keeps is tagged with the LoRA adapter set it was computed under
(``SeqRequest.lora``): resident entries, running sequences offered for copies, context checkpoints and
prompt-cache states serve only prompts of the same set (the same tokens under other adapters have other
KV values), and the heuristics that weigh what a waiting request or another sequence keeps of an entry
count only sequences of the entry's set.

Every count here is of KV cells (prompt indexes); a call that removes or copies KV from a prompt index
on converts it to the KV position there with the prompt's images (``SeqRequest.media``,
:func:`~skippy.engine.runtime.media.position`: after an M-RoPE image the position is smaller), and a
reused prefix never ends inside an image (:func:`~skippy.engine.runtime.media.span_start`: an image's
embeddings are decoded whole). The images of a prefix are the same in every prompt that shares it (the
same placeholder ids are the same image bytes), so the new request's spans give the positions of the KV
it reuses.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from skippy.engine.lora import NO_LORA, LoraSet
from skippy.engine.runtime.base import Runtime
from skippy.engine.runtime.media import MediaSpan, position, span_start
from skippy.engine.scheduling.checkpoint import CheckpointStore
from skippy.engine.scheduling.config import SchedulerConfig
from skippy.engine.scheduling.events import SchedulerCounters, SeqRequest
from skippy.engine.scheduling.prefix import MIN_REUSE, Match, PrefixIndex, common_prefix_len, longest_prefix_among
from skippy.engine.scheduling.request import Phase, RequestState

log = logging.getLogger("skippy.scheduler")

#: Most prompts the host-memory prompt cache holds (each admission compares its prompt with all).
PROMPT_CACHE_ENTRIES = 1024

#: A resident prompt that a new sequence overwrites (reused in place, or its slot evicted) keeping less
#: than this fraction of its tokens is saved to the host prompt cache first, or, with no prompt cache and a
#: free slot, copied there instead; one kept at least this much is just overwritten. The costs measured
#: on 2 CPU cores (SmolLM2-135M): prefilling a lost 9-token tail again 32-52 ms (a 9-token batch costs
#: about four 1-token steps), saving a 39-token state 0.3-5 ms (fresh pages cost more than the copy) and
#: restoring it ~0.2 ms; but saving a 905-token state to keep its 14 own tokens 12-80 ms, on the event
#: loop. (llama-server saves when less than half of its slot is kept, counting the generated tokens, so in
#: practice a short prompt with a different tail is saved there too.)
KEEP_FRACTION = 15 / 16


class KVCacheManager:
    """The KV slots of one runtime (``n_seq_max`` of them) and the caches over them.

    Invariants (the core and the tests rely on them):

    - **Every slot is in exactly one state**: *free* (its KV empty), *resident* (an entry of
      :attr:`prefix`, the prefix cache: its KV holds exactly the entry's tokens at positions
      ``0..len-1``) or *running* (the ``kv.slot`` of one running sequence of ``running``, the core's
      dict, which this class reads and never changes). :meth:`allocate` moves a free or resident slot
      to running; :meth:`release` moves it back to resident or free; :meth:`erase_slot` and
      :meth:`adopt_slot` move an idle slot between free and resident.
    - **Resident entries hold prefilled prompt tokens only** (a sequence's ``n_prefilled``, never
      generated or injected ones: their KV values differ in the last bits), and exist only with
      ``prefix_cache`` (off for recurrent and hybrid models, whose KV cannot be trimmed).
    - **At most one host-memory store**: :attr:`checkpoints` (context checkpoints, for recurrent,
      hybrid and sliding-window caches, with ``ctx_checkpoints`` > 0) or :attr:`prompt_cache`
      (resident prompts saved before their KV is overwritten, for attention models); :attr:`states`
      is whichever there is (``None``: neither).
    - **A reused KV still serves the prompt**: on a sliding-window cache (:attr:`swa_check`) a source
      is used only while its KV holds the window its first prefilled position needs
      (:meth:`_swa_keeps`); a trim that fails starts the sequence cold.
    - **Capacity**: at most ``n_seq_max`` sequences hold KV, each at most ``n_ctx_seq`` positions, so
      ``llama_decode`` never lacks cells (see :meth:`_take_slot`); no eviction beyond the slot rule.
    - **Lowest free slot first**, so running slots stay compact (llama.cpp decodes each run of
      consecutive sequence ids as one micro-batch).

    All KV calls (``seq_rm``, ``seq_cp``, ``seq_pos_min``, ``state_seq_get_data`` / ``set_data``) are
    made from the owner's thread between decodes; it adds to ``counters`` (prefix queries, checkpoints
    saved and restored). It reads the KV options of ``config`` (a
    :class:`~skippy.engine.scheduling.config.SchedulerConfig`): ``prefix_cache``, ``ctx_checkpoints``,
    ``checkpoint_budget``, ``prompt_cache`` and ``min_tail``. Not thread-safe.
    """

    def __init__(self, runtime: Runtime, running: Mapping[int, RequestState], counters: SchedulerCounters,
                 config: SchedulerConfig) -> None:
        prefix_cache, ctx_checkpoints, min_tail = config.prefix_cache, config.ctx_checkpoints, config.min_tail
        checkpoint_budget, prompt_cache = config.checkpoint_budget, config.prompt_cache
        self.runtime = runtime
        meta = runtime.meta
        self.n_slots = meta.n_seq_max
        self.prefix_cache = prefix_cache and not meta.is_recurrent
        self.min_tail = min_tail
        self.prefix = PrefixIndex(min_tail)
        #: a sliding-window cache that overwrites cells out of the window: reuse needs a check
        self.swa_check = meta.is_swa and not meta.swa_full
        #: context checkpoints, where a cached prefix cannot otherwise be reused
        self.checkpoints = CheckpointStore(ctx_checkpoints, checkpoint_budget) if (
            prefix_cache and ctx_checkpoints > 0 and (checkpoint_budget is None or checkpoint_budget > 0)
            and (meta.is_recurrent or self.swa_check)) else None
        #: llama-server's host-memory prompt cache, for attention models (checkpoints serve the others)
        self.prompt_cache = CheckpointStore(PROMPT_CACHE_ENTRIES, prompt_cache, PROMPT_CACHE_ENTRIES) if (
            self.prefix_cache and (prompt_cache is None or prompt_cache > 0) and self.checkpoints is None
            and not self.swa_check) else None
        #: idle saves (idle_saves) only with the KV cache in host memory: on a device (a GPU, an RPC worker)
        #: each state read crosses PCIe or the network, and a lost RPC worker aborts it in llama.cpp
        self._idle_saves = self.prompt_cache is not None and meta.kv_on_host
        #: whichever of the two stores this model has (the counters and stats are theirs)
        self.states = self.checkpoints if self.checkpoints is not None else self.prompt_cache
        #: llama-server's --cache-reuse (:meth:`_reuse_chunks`), with one KV stream per sequence only: in a
        #: unified cache a moved cell that another sequence shares would move for it too
        why = ("the prefix cache is off" if not self.prefix_cache else "this model's KV cannot shift"
               if not meta.can_shift else "with --kv-unified" if meta.kv_unified else "on a sliding-window cache"
               if self.swa_check else None)
        self.cache_reuse = config.cache_reuse if why is None else 0
        if config.cache_reuse > 0 and why is not None:
            log.warning("--cache-reuse %d is not applied: %s (cached prompt prefixes are still reused)",
                        config.cache_reuse, why)
        self._running = running
        self._counters = counters
        self._free_slots = set(range(self.n_slots))

    # -- reading -------------------------------------------------------------------
    @property
    def can_allocate(self) -> bool:
        """A slot is free, or a resident entry can be evicted for a new sequence."""
        return bool(self._free_slots or len(self.prefix))

    @property
    def cells(self) -> int:
        """KV cells the resident entries hold (their tokens)."""
        return self.prefix.cells

    def resident(self, slot: int) -> list[int] | None:
        """The tokens of the resident entry in ``slot`` (``None``: no entry there)."""
        return self.prefix.resident(slot)

    # -- admission and finish --------------------------------------------------------
    def allocate(self, req: SeqRequest, waiting: Iterable[SeqRequest] = ()) -> tuple[int, int] | None:
        """A slot for ``req`` (call only when :attr:`can_allocate`), and how many of its prompt tokens the
        slot's KV holds already; ``None``: not now, a sequence still prefilling will soon hold a longer
        prefix of its prompt than anything cached (the caller keeps it waiting).

        The prefix comes from the longest reusable source (a resident entry reused in place or copied, a
        running sequence copied: :meth:`_take_slot`), or from a context checkpoint or prompt-cache state
        restored into the slot when that holds more (:meth:`_restore`); with none, a free slot, else the
        least recently used entry is evicted. ``waiting``: the requests queued behind ``req``, in order (the
        next ``n_seq_max`` of them claim the entries they could reuse: :meth:`_claims`).
        """
        match = None
        lora, media = req.lora, req.media
        claim = self._claims(waiting) if self.prefix_cache and len(self.prefix) else None
        if self.prefix_cache and req.cache_prompt:
            if self._share_later(req.prompt, req.min_reuse, lora):  # copy the prefix once the running prefill holds it
                return None
            keeps = (lambda slot, n: self._swa_keeps(slot, position(media, n))) if self.swa_check else None
            match = self.prefix.best(req.prompt, ((s.kv.slot, s.packed_prompt, s.n_prefilled)  # type: ignore[union-attr]
                                                  for s in self._running.values() if s.request.lora == lora),
                                     req.min_reuse, keeps, claim, lora)
            if match is not None and media and (n := span_start(media, match.n)) < match.n:
                match = attrs.evolve(match, n=n) if n else None  # the image is decoded whole
        served = match.n if match is not None else 0  # prompt tokens the match's KV serves
        if (self.cache_reuse and req.cache_prompt and not media and served < len(req.prompt) - self.min_tail
                and (moved := self._best_reuse(req.prompt, lora))):
            if moved[1] > served:  # an entry whose chunks, moved, serve more than the longest prefix
                match, served = moved
        ckpt = None
        if req.cache_prompt and (self.prefix_cache or self.checkpoints is not None):
            self._counters.prefix_queries += 1
        n_ckpt = 0
        if self.checkpoints is not None and req.cache_prompt:
            ckpt = self.checkpoints.best(req.prompt, len(req.prompt) - self.min_tail, req.min_reuse, lora)
            n_ckpt = ckpt.n if ckpt is not None else 0
        elif self.prompt_cache is not None and req.cache_prompt:
            found = self.prompt_cache.best_prefix(req.prompt, len(req.prompt) - self.min_tail,
                                                  max(req.min_reuse, MIN_REUSE), lora)
            ckpt, n_ckpt = found if found is not None else (None, 0)
        if ckpt is not None and media:
            n_ckpt = span_start(media, n_ckpt)
        if ckpt is not None and (not n_ckpt or served >= n_ckpt):
            ckpt = None
        if ckpt is not None:
            return self._restore(ckpt, req.cache_key, claim, n_ckpt, req.prompt, lora, media)
        return self._take_slot(match, req.cache_key, claim, req.prompt, lora, media, served, req.save_replaced)

    def release(self, slot: int, prompt: list[int] | None = None, n_keep: int | None = None,
                key: str | None = None, lora: LoraSet = NO_LORA, media: Sequence[MediaSpan] = ()) -> None:
        """A sequence leaves ``slot``: its first ``n_keep`` ``prompt`` tokens (whose images are ``media``; cut
        back to an image's start when ``n_keep`` falls inside it) stay resident for later prompts
        of its LoRA set ``lora`` (in ``key``'s eviction group) when the prefix cache is on, the trim succeeds and, on a
        sliding-window cache, the trimmed KV still serves them; else (or with ``n_keep`` ``None``) the
        slot's KV is cleared and the slot is free."""
        if n_keep is not None and media:
            n_keep = span_start(media, n_keep) or None
        at = position(media, n_keep) if n_keep is not None else -1
        if (n_keep is not None and prompt is not None and self.prefix_cache and self.runtime.seq_rm(slot, at, -1)
                and (not self.swa_check or self._swa_keeps(slot, at))):
            self.prefix.keep(slot, prompt[:n_keep], key, lora)  # KV stays for later prompts
        else:
            self.runtime.seq_rm(slot)
            self._free_slots.add(slot)

    def trim(self, slot: int, n: int, media: Sequence[MediaSpan] = ()) -> None:
        """Remove the running sequence in ``slot``'s KV past its first ``n`` cells (a draft's rejected
        tokens; ``media``: its prompt's images)."""
        self.runtime.seq_rm(slot, position(media, n), -1)

    def checkpoint_at(self, req: SeqRequest, n_cached: int) -> int:
        """Where to save ``req``'s context checkpoint (0: nowhere): its boundary, when checkpoints are on,
        it may use the cache, the boundary leaves ``min_tail`` tokens and lies at least two tokens past what
        is cached (no lone-token chunk before it); on a sliding-window cache only when the sequence can
        outgrow the window (prompt + ``max_tokens`` > ``n_swa``), else its KV serves every prefix."""
        b = req.checkpoint_at
        if self.checkpoints is None or b is None or not req.cache_prompt:
            return 0
        if not max(req.min_reuse, 1) <= b <= len(req.prompt) - self.min_tail or b - n_cached < 2:
            return 0
        meta = self.runtime.meta
        if not meta.is_recurrent and len(req.prompt) + req.max_tokens <= meta.n_swa:
            return 0
        return b

    def keep_checkpoint(self, slot: int, tokens: Sequence[int], data: bytes | bytearray,
                        lora: LoraSet = NO_LORA) -> None:
        """Keep ``data``, ``slot``'s state saved right after the decode that prefilled ``tokens`` (a running
        sequence's prompt up to its ``checkpoint_at``, under the LoRA set ``lora``), as a context checkpoint."""
        if self.checkpoints is not None and self.checkpoints.add(slot, tokens, data, lora) is not None:
            self._counters.checkpoints_saved_total += 1

    # -- idle saves (the owner asks only while nothing waits or runs) -----------------
    def idle_saves(self) -> list[tuple[int, list[int]]]:
        """Resident entries to copy to the host prompt cache while the owner is idle, as ``(slot, tokens)``,
        least recently used (evicted next) first: those no state in the cache holds :data:`KEEP_FRACTION`
        of. Saved now, an entry evicted later under load needs no save then (on the event loop, inside a
        plan: a 905-token agent entry's 21 MB of fresh pages cost 12-86 ms, in the TTFT of the burst that
        evicted it). Empty without a prompt cache or with layers offloaded (the KV cache on a device)."""
        return [(slot, list(tokens)) for slot, tokens in self.prefix.items() if self.needs_idle_save(slot, tokens)]

    def needs_idle_save(self, slot: int, tokens: Sequence[int]) -> bool:
        """Idle saves are on, ``slot`` still holds the resident entry ``tokens``, long enough, and the prompt
        cache holds less than :data:`KEEP_FRACTION` of it."""
        return (self._idle_saves and self.prefix.resident(slot) == list(tokens) and len(tokens) >= MIN_REUSE
                and self._held_in_store(tokens, self.prefix.lora(slot)) < KEEP_FRACTION * len(tokens))

    def add_idle_save(self, slot: int, tokens: Sequence[int], data: bytes | bytearray) -> None:
        """Keep ``data``, the state of ``slot`` read for :meth:`idle_saves`, in the prompt cache (if ``slot``
        still holds ``tokens``)."""
        if (self.needs_idle_save(slot, tokens)
                and self.prompt_cache.add(slot, tokens, data, self.prefix.lora(slot)) is not None):  # type: ignore[union-attr]
            self._counters.checkpoints_saved_total += 1

    # -- slot state (llama-server POST /slots/{id}?action=save|restore|erase; idle slots only) --
    def slot_tokens(self, slot: int) -> list[int]:
        """The tokens whose KV an idle ``slot`` holds (its prefix-cache entry; empty when free)."""
        return list(self.prefix.resident(slot) or ())

    def erase_slot(self, slot: int) -> int:
        """Clear idle ``slot``'s KV and prefix-cache entry; returns how many tokens it held."""
        tokens = self.prefix.take(slot) if self.prefix.resident(slot) is not None else []
        self.runtime.seq_rm(slot)
        self._free_slots.add(slot)
        return len(tokens)

    def adopt_slot(self, slot: int, tokens: list[int]) -> None:
        """Idle, cleared ``slot``'s KV now holds ``tokens`` (a restored state file): offer them for prefix
        reuse (by prompts without LoRA adapters: a state file does not say which set computed it); with no
        tokens (a failed restore) or no prefix cache the slot is cleared and stays free."""
        if tokens and self.prefix_cache:
            self._free_slots.discard(slot)
            self.prefix.keep(slot, list(tokens))
        else:
            self.runtime.seq_rm(slot)

    # -- the rules -----------------------------------------------------------------
    def _restore(self, ckpt: Any, key: str | None, claim: Callable[[int], int] | None = None,
                 n: int | None = None, prompt: Sequence[int] = (), lora: LoraSet = NO_LORA,
                 media: Sequence[MediaSpan] = ()) -> tuple[int, int]:
        """A slot (free, else the least recently used entry's) with checkpoint ``ckpt``'s state restored, and
        the prompt tokens it holds (0 when the runtime refuses the state: the slot is then empty). ``n``: keep
        only the first ``n`` cells (a prompt-cache state, trimmed to the prefix the prompt, whose images are
        ``media``, shares)."""
        slot = self._pop_free_slot() if self._free_slots else self._evict(key, claim, prompt, lora)
        if not self.runtime.state_seq_set_data(slot, ckpt.data):
            log.warning("context checkpoint of %d tokens could not be restored into slot %d", ckpt.n, slot)
            return slot, 0
        n = ckpt.n if n is None else n
        if n < ckpt.n and not self.runtime.seq_rm(slot, position(media, n), -1):
            self.runtime.seq_rm(slot)
            return slot, 0
        self.states.touch(ckpt)  # type: ignore[union-attr]
        self._counters.checkpoints_restored_total += 1
        return slot, n

    def _share_later(self, prompt: Sequence[int], min_reuse: int = MIN_REUSE, lora: LoraSet = NO_LORA) -> bool:
        """True when a sequence of the LoRA set ``lora`` still prefilling shares a longer prefix with ``prompt``
        than it holds yet."""
        for s in self._running.values():
            kv = s.kv
            if s.phase is Phase.PREFILLING and kv is not None and s.request.lora == lora:
                n = min(common_prefix_len(kv.prompt, prompt), len(prompt) - self.min_tail)
                if n >= min_reuse and kv.n_past < n:
                    return True
        return False

    def _swa_keeps(self, slot: int, n: int) -> bool:
        """True when ``slot``'s KV cache still serves its first ``n`` tokens to a query at position ``n``.

        A model with sliding-window attention (``meta.n_swa`` > 0) and no full-size SWA cache
        (``meta.swa_full``) has its SWA layers overwrite the cells of positions that fell out of
        every query's window; llama.cpp keeps every position from ``llama_memory_seq_pos_min`` to
        the largest. The window of the first position prefilled after the prefix reaches back
        ``n_swa`` positions, so the prefix serves when the smallest position held is at most
        ``max(0, n - n_swa)``: llama-server's rule (``pos_min > pos_min_thold`` forces a full
        prompt re-processing). -1 (the SWA layers hold nothing: a trim went below the window)
        never serves.
        """
        pos_min = self.runtime.seq_pos_min(slot)
        return 0 <= pos_min <= max(0, n - self.runtime.meta.n_swa)

    def _pop_free_slot(self) -> int:
        """The lowest free slot: running sequences stay on few runs of consecutive ids, and
        llama.cpp decodes each run of consecutive sequence ids as one micro-batch."""
        slot = min(self._free_slots)
        self._free_slots.remove(slot)
        return slot

    def _claims(self, waiting: Iterable[SeqRequest]) -> Callable[[int], int]:
        """``claim(slot)``: the longest prefix that one of the next ``n_seq_max`` ``waiting`` requests (those a
        slot turnover admits next) could reuse of the resident entry in ``slot`` (those of the entry's LoRA
        set; memoized for this call). The prompts are sorted per LoRA set at the first call, so a claim costs a
        bisection and two prefix scans (:func:`longest_prefix_among`), not one scan per waiting request: a burst of
        requests sharing a system prompt ties every resident entry, and every tie asks its claim."""
        waiters = [r for r in itertools.islice(waiting, self.n_slots) if r.cache_prompt]
        memo: dict[int, int] = {}
        ordered: dict[LoraSet, list[list[int]]] = {}

        def claim(slot: int) -> int:
            if slot not in memo:
                if not ordered and waiters:
                    for r in waiters:
                        ordered.setdefault(r.lora, []).append(_as_list(r.prompt))
                    for prompts in ordered.values():
                        prompts.sort()
                tokens = _as_list(self.prefix.resident(slot) or [])
                memo[slot] = longest_prefix_among(tokens, ordered.get(self.prefix.lora(slot), []))
            return memo[slot]
        return claim

    def _evict(self, key: str | None, claim: Callable[[int], int] | None = None, prompt: Sequence[int] = (),
               lora: LoraSet = NO_LORA) -> int:
        """Free the least recently used resident entry (of ``key``'s group first; the least claimed by the
        waiting requests first, see :meth:`PrefixIndex.lru`); returns its slot. The entry goes to the host
        prompt cache unless ``prompt`` (the request taking the slot, under the LoRA set ``lora``: its KV will
        hold what they share when the sets are the same) or another sequence keeps :data:`KEEP_FRACTION` of
        it (:meth:`_save_prompt`)."""
        slot = self.prefix.lru(key, claim)
        assert slot is not None
        same = prompt and self.prefix.lora(slot) == lora
        self._save_prompt(slot, common_prefix_len(self.prefix.resident(slot) or [], prompt) if same else 0)
        self.prefix.take(slot)
        self.runtime.seq_rm(slot)
        return slot

    def _save_prompt(self, slot: int, keep: int = 0) -> None:
        """Before the resident entry in ``slot`` loses its KV past ``keep`` positions (evicted, or reused in
        place by a prompt sharing ``keep`` tokens), copy its state to the host-memory prompt cache (when
        there is one, the entry is long enough, the store does not hold it already, and less than
        :data:`KEEP_FRACTION` of it stays in the KV cache: neither ``keep`` nor the prefix another resident or
        running sequence shares with it covers that much; a 905-token entry of an agent burst shares 891
        with its 15 neighbours, and saving it to keep its 14 own tokens cost 66 ms of fresh pages)."""
        tokens, lora = self.prefix.resident(slot), self.prefix.lora(slot)
        store = self.prompt_cache
        if store is None or tokens is None or len(tokens) < MIN_REUSE or store.has(tokens, lora):
            return
        kept = KEEP_FRACTION * len(tokens)
        if max(keep, self._held_elsewhere(slot, tokens)) >= kept or self._held_in_store(tokens, lora) >= kept:
            return
        try:
            data = self.runtime.state_seq_get_data(slot)
        except (ValueError, RuntimeError) as exc:
            log.warning("prompt cache: the state of slot %d could not be saved: %s", slot, exc)
            return
        if store.add(slot, tokens, data, lora) is not None:
            self._counters.checkpoints_saved_total += 1

    def _held_in_store(self, tokens: Sequence[int], lora: LoraSet = NO_LORA) -> int:
        """The longest prefix of ``tokens`` a state of the LoRA set ``lora`` in the host prompt cache holds (0
        without one)."""
        store = self.prompt_cache
        found = store.best_prefix(tokens, len(tokens), lora=lora) if store is not None else None
        return found[1] if found is not None else 0

    def _held_elsewhere(self, slot: int, tokens: list[int]) -> int:
        """The longest prefix of ``tokens`` (the entry in ``slot``) that another resident entry or a running
        sequence of the entry's LoRA set holds (or will hold once prefilled) in its KV."""
        lora = self.prefix.lora(slot)
        others = [t for s, t in self.prefix.items() if s != slot and self.prefix.lora(s) == lora]
        others += [s.kv.prompt for s in self._running.values()
                   if s.kv is not None and s.kv.slot != slot and s.request.lora == lora]
        return max((common_prefix_len(tokens, t) for t in others), default=0)

    def _take_slot(self, match: Match | None, key: str | None = None, claim: Callable[[int], int] | None = None,
                   prompt: Sequence[int] = (), lora: LoraSet = NO_LORA,
                   media: Sequence[MediaSpan] = (), served: int = 0, save: bool = True) -> tuple[int, int]:
        """A slot for a new sequence (whose prompt's images are ``media``) and how many of its prompt tokens
        are already in its KV. ``served``: what a resident match serves once its chunks are moved
        (``--cache-reuse``), which counts as kept when weighing a copy against reusing the entry in place.
        ``save``: a resident entry reused in place may be saved first (:meth:`_save_prompt`; False:
        :attr:`SeqRequest.save_replaced`).

        A running match is copied into a free slot (:meth:`Runtime.seq_cp`), a resident one is
        reused in place unless :meth:`_in_place` says a copy pays. With one KV stream per
        sequence the whole source is copied (its state, or llama.cpp's whole stream) and its
        tail trimmed. With a unified KV cache (``meta.kv_unified``) only the matched prefix
        ``[0, n)`` is copied: the cells are shared, not duplicated, so the copy is nearly free.

        Capacity with a unified cache: it has ``n_ctx_seq x n_seq_max`` cells, and a cell is
        used by one or more sequences at the same position. Every sequence with KV (running,
        or resident in the prefix cache) holds a slot, so there are at most ``n_seq_max`` of
        them, and each holds at most ``n_ctx_seq`` positions (``0..n_ctx_seq-1``: a running
        sequence finishes with ``length`` before its next position reaches ``n_ctx_seq``, the
        runtime refuses a position >= ``n_ctx_seq``, and resident entries keep only a prefilled
        prompt). A shared prefix is counted once in the cells but once per sequence in this
        bound, so the cells in use never exceed ``sum(positions) <= n_ctx_seq x n_seq_max``; and
        llama.cpp finds free cells anywhere in the buffer (no contiguity, ``find_slot`` with
        ``cont=false``), so ``llama_decode`` never fails for want of a KV slot (it returns 1
        then). The same reasoning holds per stream when non-unified. No eviction beyond the
        slot rule is needed: resident entries only ever use cells a slot is entitled to.
        """
        rt = self.runtime
        if match is None:
            return (self._pop_free_slot() if self._free_slots else self._evict(key, claim, prompt, lora)), 0
        n = match.n
        at = position(media, n)
        source = self.prefix.resident(match.slot) if self.cache_reuse and match.resident and not media else None
        kept = max(n, served)
        # copy, keep the source
        if not match.resident or (self._free_slots and not self._in_place(match, claim, kept, save)):
            slot = self._pop_free_slot() if self._free_slots else self._evict(key, claim, prompt, lora)
            if rt.meta.kv_unified:  # the prefix only: shared cells, nothing to trim
                rt.seq_cp(match.slot, slot, at)
                if match.resident:
                    self.prefix.touch(match.slot)
                return slot, n
            rt.seq_cp(match.slot, slot)
            if match.resident:
                self.prefix.touch(match.slot)
        else:  # a resident source (no free slot, or a copy would not pay): reuse it in place
            slot = match.slot
            if save:
                self._save_prompt(slot, kept)
            self.prefix.take(slot)
        if source is not None:  # the slot holds the whole entry: move its chunks the prompt holds further on
            n = at = self._reuse_chunks(slot, source, prompt, n)
        if not rt.seq_rm(slot, at, -1):  # cannot trim: start cold
            rt.seq_rm(slot)
            n = 0
        return slot, n

    def _reuse_chunks(self, slot: int, cached: Sequence[int], prompt: Sequence[int], n: int) -> int:
        """llama-server's ``--cache-reuse``: ``slot``'s KV holds ``cached``, whose first ``n`` tokens the prompt
        shares; the runs :func:`chunk_moves` finds are moved into place (``seq_rm`` of the cells between,
        ``seq_add`` of the run). Returns the prompt tokens the slot's KV now holds, at positions ``0..n-1``;
        the cells past them are the caller's to trim. A moved key is rotated to its new position at the next
        decode; its values were computed after the cached context, not the new one, which llama-server
        accepts for this speed (an editor's file seen again with lines added or removed)."""
        moves, end = chunk_moves(cached, prompt, n, self.cache_reuse, len(prompt) - self.min_tail)
        for head_c, head_p, m in moves:
            self.runtime.seq_rm(slot, head_p, head_c)
            self.runtime.seq_add(slot, head_c, head_c + m, head_p - head_c)
        if end > n:  # counted as cached tokens by the core, as the prefix is
            log.debug("slot %d: --cache-reuse moved %d cached tokens (prefix %d -> %d)", slot, end - n, n, end)
        return end

    def _best_reuse(self, prompt: Sequence[int], lora: LoraSet) -> tuple[Match, int] | None:
        """With ``--cache-reuse``: the resident entry of the LoRA set ``lora`` whose KV serves most of ``prompt``
        once its chunks are moved (:func:`chunk_moves`; its shared prefix may be shorter than ``MIN_REUSE``, even
        empty: a ring of files whose oldest one was dropped), as a :class:`Match` on its shared prefix, and the
        tokens it serves in all; ``None`` when none serves any."""
        limit = len(prompt) - self.min_tail
        best: tuple[Match, int] | None = None
        for slot, tokens in self.prefix.items():
            if self.prefix.lora(slot) != lora or any(t < 0 for t in tokens):  # an image's placeholder ids
                continue
            n = min(common_prefix_len(tokens, prompt), limit)
            _, total = chunk_moves(tokens, prompt, n, self.cache_reuse, limit)
            if total > (best[1] if best is not None else 0):
                best = Match(slot, n, True), total
        return best

    def _in_place(self, match: Match, claim: Callable[[int], int] | None, kept: int = 0, save: bool = True) -> bool:
        """Whether a resident match is reused in its own slot although a slot is free.

        A copy into the free slot would keep the entry, but with one KV stream per sequence it costs
        the source's cells twice or the whole stream (:meth:`LlamaRuntime.seq_cp
        <skippy.engine.runtime.llama.LlamaRuntime.seq_cp>`: 0.6 ms for a 40-token entry of
        SmolLM2-135M, ~5 ms from half its 2048-cell stream on, GiBs for an 8B model). So, as in
        llama-server, the entry is reused in place when the new prompt (or another resident or
        running sequence) keeps nearly all of it (:data:`KEEP_FRACTION`: a chat's next turn, a
        repeated prompt, a long shared system prompt with a short question) or when there is a host
        prompt cache to save it first (its own cells only, see :meth:`_save_prompt`);
        ``kept``: what ``--cache-reuse`` keeps of it besides the prefix (its moved chunks);
        and not when a waiting request could reuse more of it (``claim``). With a unified KV
        cache the copy shares cells and is nearly free: always copied. ``save`` False (the new
        sequence does not keep what it replaces, :attr:`SeqRequest.save_replaced`): in place, as
        llama-server's ``/infill`` takes its slot.
        """
        if self.runtime.meta.kv_unified or (claim is not None and claim(match.slot) > match.n):
            return False
        tokens = self.prefix.resident(match.slot) or []
        if self.prompt_cache is not None or not save:
            return True
        return max(match.n, kept, self._held_elsewhere(match.slot, tokens)) >= KEEP_FRACTION * len(tokens)


def chunk_moves(cached: Sequence[int], prompt: Sequence[int], n: int, want: int, limit: int
                ) -> tuple[list[tuple[int, int, int]], int]:
    """llama-server's ``--cache-reuse`` plan (its ``n_cache_reuse`` loop) for a KV cache holding ``cached``, of which
    the prompt shares the first ``n`` tokens: past them, each run of at least ``want`` cached tokens that
    continues the prompt where its reused part ends is to move there; the cached tokens that do not are
    skipped. The prompt is reused up to ``limit`` tokens at most (its last ones are prefilled for the logits).

    Returns the moves, ``(cached index, prompt index, length)`` each, in order, and the prompt tokens the
    KV cache then holds (``n`` when nothing moves)."""
    moves: list[tuple[int, int, int]] = []
    head_c = head_p = n
    while head_c < len(cached) and head_p < limit:
        m = 0
        while head_c + m < len(cached) and head_p + m < limit and cached[head_c + m] == prompt[head_p + m]:
            m += 1
        if m < want:
            head_c += 1
            continue
        if head_c > head_p:
            moves.append((head_c, head_p, m))
        head_c += m
        head_p += m
    return moves, head_p


def _as_list(tokens: Sequence[int]) -> list[int]:
    """``tokens`` as a list (lists and tuples do not compare with each other)."""
    return tokens if isinstance(tokens, list) else list(tokens)
