"""The DecodeScheduler actor: the only code that touches the llama.cpp context.

It owns the context, the KV cache and the sequence slots. Its loop:

1. drain the inbox (:class:`Submit`, :class:`Cancel`, hook verdicts)
   without blocking, or block on it when nothing can run;
2. free the slots of cancelled or finished sequences (``llama_memory_seq_rm``)
   and admit waiting requests into free slots, in arrival order;
3. plan one batch (:func:`skippy.engine.scheduling.batch.plan_step`): one token per
   generating sequence plus prefill chunks within ``step_tokens``;
4. run ``llama_decode`` and the per-sequence samplers in one worker thread;
5. send each sequence's :class:`TokenEvent` (or :class:`FinishEvent`) to its
   request's unbounded event channel with ``send_nowait``, so the loop never
   blocks on a slow reader.

A request whose event channel is closed (the client went away) is dropped
at the next step and its KV cells are freed.

Hooks (requests with ``hooks=True`` when a policy is loaded): after the
first sampled token (``after_prefill``) and whenever the signal window
fires (``mid_generation``), the sequence is *parked*: its sampled token is
held back, a :class:`~skippy.actors.hooks.HookCall` goes to the
HookEvaluator, and every other sequence keeps decoding. The verdict comes
back through this actor's inbox:

- no action: the held token is emitted and decoding resumes;
- ``Stop(reason)``: the held token is discarded; the request finishes with
  ``finish_reason = reason``;
- ``Inject(text)``: **the injection rule, decided here and only here** —
  the text is tokenized without special tokens, the held token is
  discarded, the injected tokens are appended to the sequence's KV
  (prefilled at the position where the hook fired), and decoding resumes
  after them. Injected tokens are never sent to the client; they are
  counted in ``FinishEvent.injected_tokens``.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from typing import Any

import attrs
import numpy as np
import trio
import trio.testing

from skippy.actors.base import DedicatedThread
from skippy.engine.scheduling.batch import SeqState, plan_step
from skippy.engine.errors import QueueFull
from skippy.engine.hooks.policy import Inject, Stop
from skippy.engine.scheduling.events import (FinishEvent, SchedulerStats, SeqEvent, SeqRequest, TokenEvent,
                                             TopLogprob)
from skippy.engine.scheduling.prefix import MIN_REUSE, MIN_TAIL, Match, PrefixIndex, common_prefix_len
from skippy.engine.runtime.base import Runtime
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.hooks.signals import GenerationSignals, PrefillSignals, SignalConfig, SignalWindow, token_signals

log = logging.getLogger("skippy.scheduler")


#: seconds the loop waits at most for the other tasks to go idle before a decode step
IDLE_WAIT = 0.005


@attrs.frozen
class Submit:
    """Admit ``request``; its events go to ``events`` (an unbounded send channel)."""

    request: SeqRequest
    events: trio.MemorySendChannel[SeqEvent]

    @property
    def rid(self) -> int:
        return self.request.rid


@attrs.frozen
class Cancel:
    rid: int


@attrs.define(eq=False)
class _Req:
    submit: SeqRequest
    events: Any = None
    seq: SeqState | None = None
    sampler: object = None
    t_admit: float = 0.0
    t_first: float = 0.0
    cancelled: bool = False
    window: SignalWindow | None = None
    held: TokenEvent | None = None  # sampled token held while parked on a hook
    injected: int = 0
    cached: int = 0  # prompt tokens reused from the prefix cache


class DecodeScheduler:
    """Continuous-batching decode loop over one :class:`Runtime`.

    ``step_tokens`` bounds the tokens of one decode step (prefill chunks
    share it with the generating sequences); ``max_queue`` bounds the
    requests waiting for a slot (:class:`QueueFull` beyond it).
    ``hooks`` is the HookEvaluator's inbox (send side) or ``None``;
    ``signal_config`` the signal window and firing rule. ``prefix_cache``
    keeps finished sequences' KV resident and reuses shared prompt prefixes
    (see :mod:`skippy.engine.scheduling.prefix`); it is off for recurrent and hybrid
    models, whose KV cannot be trimmed.
    """

    def __init__(self, runtime: Runtime, *, step_tokens: int | None = None, max_queue: int = 1024,
                 hooks: trio.MemorySendChannel | None = None, signal_config: SignalConfig | None = None,
                 prefix_cache: bool = True) -> None:
        self.runtime = runtime
        meta = runtime.meta
        self.n_slots = meta.n_seq_max
        self.step_tokens = min(step_tokens or meta.n_batch, meta.n_batch)
        self.max_queue = max_queue
        self.hooks = hooks
        self.signal_config = signal_config or SignalConfig()
        self._send, self._inbox = trio.open_memory_channel[Any](math.inf)
        self._free_slots = list(range(self.n_slots - 1, -1, -1))
        self._waiting: collections.deque[_Req] = collections.deque()
        self._running: dict[int, _Req] = {}
        self._by_rid: dict[int, _Req] = {}
        self.steps = 0
        self.n_parked = 0
        self.prefix = PrefixIndex()
        self.prefix_cache = prefix_cache and not meta.is_recurrent
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.cached_tokens_total = 0
        self.prompt_tokens_total = 0  # prompt tokens prefilled (cached ones excluded), however requests ended
        self.tokens_predicted_total = 0

    # -- client side (called from request tasks, same trio thread) ---------------
    def submit(self, request: SeqRequest, events: trio.MemorySendChannel[SeqEvent]) -> None:
        """Queue ``request``; its events go to ``events`` (unbounded: the loop never blocks on a reader).

        Raises :class:`QueueFull` when ``max_queue`` requests wait.
        """
        if len(self._waiting) + self._inbox.statistics().current_buffer_used >= self.max_queue:
            raise QueueFull(f"the queue is full ({self.max_queue} requests waiting); retry later")
        self._send.send_nowait(Submit(request, events))

    def stats(self) -> SchedulerStats:
        """A snapshot of the queue, slots and counters."""
        return SchedulerStats(
            n_slots=self.n_slots, n_running=self.n_running, n_waiting=self.n_waiting, n_parked=self.n_parked,
            kv_cells_used=self.kv_cells_used, steps=self.steps, prompt_tokens_total=self.prompt_tokens_total,
            tokens_predicted_total=self.tokens_predicted_total, prefix_queries=self.prefix_queries,
            prefix_hits=self.prefix_hits, cached_tokens_total=self.cached_tokens_total)

    def cancel(self, rid: int) -> None:
        """Stop request ``rid`` at the next step (no-op when already finished)."""
        try:
            self._send.send_nowait(Cancel(rid))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    @property
    def n_running(self) -> int:
        """Sequences holding a slot (prefilling, generating or parked)."""
        return len(self._running)

    @property
    def n_waiting(self) -> int:
        return len(self._waiting) + self._inbox.statistics().current_buffer_used

    @property
    def kv_cells_used(self) -> int:
        """KV cells holding tokens: running sequences plus resident prefix-cache entries."""
        return sum(r.seq.n_past for r in self._running.values()) + self.prefix.cells

    # -- the actor ---------------------------------------------------------------
    async def run(self) -> None:
        """The scheduler task; runs until cancelled, then frees every sequence."""
        decode_thread = DedicatedThread("skippy-decode")  # every llama_decode on one OS thread
        try:
            while True:
                if not self._running and not self._waiting:
                    self._handle(await self._inbox.receive())
                while True:
                    try:
                        self._handle(self._inbox.receive_nowait())
                    except trio.WouldBlock:
                        break
                self._admit()
                seqs = [r.seq for r in self._running.values()]
                plan = plan_step(seqs, max(self.step_tokens, len(seqs)))
                if plan is None:  # every running sequence is parked on a hook
                    self._handle(await self._inbox.receive())
                    continue
                # Let the request tasks turn the last step's tokens into bytes on the wire
                # first: llama.cpp's worker threads spin on barriers, and Python work running
                # beside them on the same cores stalls the whole decode step. Bounded, so a
                # task that never blocks (an embedding program's busy loop) cannot stall decoding.
                with trio.move_on_after(IDLE_WAIT):
                    await trio.testing.wait_all_tasks_blocked()
                try:
                    results = await decode_thread.run_sync(self._step, plan)
                except Exception as exc:  # llama.cpp refused the batch: fail these sequences, keep serving
                    log.exception("decode step failed")
                    for rid in list(self._running):
                        self._finish(self._running[rid], "error", error=str(exc))
                    continue
                self.steps += 1
                for s, n in plan.advance:
                    if s.n_past >= len(s.prompt):  # a generated token entered the KV cache
                        s.prompt.append(s.pending)
                    else:
                        self.prompt_tokens_total += n
                    s.n_past += n
                for s, ev in results:
                    self._on_token(self._running.get(s.rid), ev)
        finally:
            decode_thread.close()
            for req in list(self._running.values()):
                self._finish(req, "cancelled")
            for req in self._waiting:
                self._emit(req, self._finish_event(req, "cancelled"))
            self._waiting.clear()

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, Submit):
            req = _Req(msg.request, msg.events)
            self._by_rid[msg.rid] = req
            self._waiting.append(req)
        elif isinstance(msg, Cancel):
            req = self._by_rid.get(msg.rid)
            if req is None:
                return
            if req.seq is None:
                self._waiting.remove(req)
                self._by_rid.pop(msg.rid, None)
            else:
                self._finish(req, "cancelled")
        else:  # a HookVerdict
            self._on_verdict(msg)

    def _admit(self) -> None:
        """Start waiting requests in arrival order while a slot (free or cached) is there.

        A request whose prefix a running prefill will soon hold waits for it (and keeps its
        place), but does not hold back the requests behind it: those that share nothing with
        a running prefill start now. At most ``n_seq_max`` such waiters are looked past per step.
        """
        deferred: list[_Req] = []
        while self._waiting and (self._free_slots or len(self.prefix)):
            req = self._waiting.popleft()
            sub = req.submit
            match = None
            if self.prefix_cache and sub.cache_prompt:
                if self._share_later(sub.prompt):  # copy the prefix once the running prefill holds it
                    deferred.append(req)
                    if len(deferred) >= self.runtime.meta.n_seq_max:
                        break
                    continue
                self.prefix_queries += 1
                match = self.prefix.best(sub.prompt, ((r.seq.slot, r.seq.prompt, _prefilled(r))
                                                      for r in self._running.values()))
            slot, n_cached = self._take_slot(match, sub.cache_key)
            try:
                req.sampler = self.runtime.new_sampler(sub.params)
            except ValueError as exc:
                self.runtime.seq_rm(slot)
                self._free_slots.append(slot)
                self._by_rid.pop(sub.rid, None)
                self._emit(req, self._finish_event(req, "error", error=str(exc)))
                continue
            if n_cached:
                self.prefix_hits += 1
                self.cached_tokens_total += n_cached
            req.cached = n_cached
            req.seq = SeqState(rid=sub.rid, slot=slot, prompt=list(sub.prompt), max_tokens=sub.max_tokens,
                               n_past=n_cached)
            req.t_admit = time.perf_counter()
            if sub.hooks:
                req.window = SignalWindow(self.signal_config)
            self._running[sub.rid] = req
        self._waiting.extendleft(reversed(deferred))

    def _share_later(self, prompt: list[int]) -> bool:
        """True when a sequence still prefilling shares a longer prefix with ``prompt`` than it holds yet."""
        for r in self._running.values():
            s = r.seq
            if s.prefilling:
                n = min(common_prefix_len(s.prompt, prompt), len(prompt) - MIN_TAIL)
                if n >= MIN_REUSE and s.n_past < n:
                    return True
        return False

    def _pop_free_slot(self) -> int:
        """The lowest free slot: running sequences stay on few runs of consecutive ids, and
        llama.cpp decodes each run of consecutive sequence ids as one micro-batch."""
        slot = min(self._free_slots)
        self._free_slots.remove(slot)
        return slot

    def _take_slot(self, match: Match | None, key: str | None = None) -> tuple[int, int]:
        """A slot for a new sequence and how many of its prompt tokens are already in its KV."""
        rt = self.runtime
        if match is not None and (self._free_slots or not match.resident):  # copy the source, keep it for others
            if self._free_slots:
                slot = self._pop_free_slot()
            else:  # a running source and no free slot: the copy replaces the least recently used entry
                slot = self.prefix.lru(key)
                self.prefix.take(slot)
                rt.seq_rm(slot)
            rt.seq_cp(match.slot, slot)
            if match.resident:
                self.prefix.touch(match.slot)
            n = match.n
        elif match is not None:  # a resident source and no free slot: reuse it in place
            slot = match.slot
            self.prefix.take(slot)
            n = match.n
        elif self._free_slots:
            return self._pop_free_slot(), 0
        else:  # evict the least recently used resident sequence (of the same prompt_cache_key first)
            slot = self.prefix.lru(key)
            self.prefix.take(slot)
            rt.seq_rm(slot)
            return slot, 0
        if not rt.seq_rm(slot, n, -1):  # cannot trim: start cold
            rt.seq_rm(slot)
            n = 0
        return slot, n

    def _step(self, plan: Any) -> list[tuple[SeqState, TokenEvent]]:
        """Worker thread: decode the batch and sample every requested output."""
        rt = self.runtime
        rt.decode(plan.entries)
        out = []
        for s, i in plan.outputs:
            req = self._by_rid.get(s.rid)
            if req is None or req.sampler is None:
                continue
            sub = req.submit
            params = sub.params
            lp = top = entropy = margin = None
            if params.logprobs or sub.hooks or sub.signals:
                raw = rt.logits(i)
                if sub.hooks or sub.signals:
                    entropy, margin = token_signals(raw)
                if params.logprobs:
                    lp, top = _logprobs(raw, params.top_logprobs)
            tok = rt.sample(req.sampler, i)
            out.append((s, TokenEvent(tok, float(lp[tok]) if lp is not None else None, top or (),
                                      entropy, margin)))
        return out

    def _on_token(self, req: _Req | None, ev: TokenEvent) -> None:
        if req is None or req.cancelled:
            return
        s = req.seq
        if s.n_generated == 0 and not req.t_first:
            req.t_first = time.perf_counter()
        if ev.token in self.runtime.meta.eog_ids:
            self._finish(req, "stop")
            return
        if req.window is not None and self.hooks is not None:
            first = s.n_generated == 0 and req.injected == 0 and req.held is None
            req.window.push(ev.token, ev.entropy, ev.margin)
            n_decoded = s.n_generated + 1
            if first:
                self._park(req, ev, "after_prefill", PrefillSignals(ev.entropy, ev.margin, ev.token))
                return
            if req.window.should_fire(n_decoded):
                req.window.mark_fired(n_decoded)
                self._park(req, ev, "mid_generation", GenerationSignals(req.window.stats(), n_decoded))
                return
        self._accept(req, ev)

    def _accept(self, req: _Req, ev: TokenEvent) -> None:
        s = req.seq
        s.n_generated += 1
        self.tokens_predicted_total += 1
        s.pending = ev.token
        if not self._emit(req, ev):
            self._finish(req, "cancelled")
            return
        if s.n_generated >= s.max_tokens or s.n_past + 1 >= self.runtime.meta.n_ctx_seq:
            self._finish(req, "length")

    def _park(self, req: _Req, ev: TokenEvent, event: str, payload: Any) -> None:
        from skippy.actors.hooks import HookCall

        req.held = ev
        req.seq.pending = None
        self.n_parked += 1
        try:
            self.hooks.send_nowait(HookCall(req.submit.rid, event, req.submit.request, payload, self._send))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self._unpark(req)
            self._accept(req, ev)

    def _unpark(self, req: _Req) -> TokenEvent | None:
        held, req.held = req.held, None
        if held is not None:
            self.n_parked -= 1
        return held

    def _on_verdict(self, verdict: Any) -> None:
        req = self._running.get(verdict.ticket)
        if req is None or req.held is None:
            return  # finished or cancelled while parked
        held = self._unpark(req)
        outcome = verdict.outcome
        if isinstance(outcome, Stop):
            self._finish(req, outcome.reason, stopped_by_hook=True)
        elif isinstance(outcome, Inject):
            tokens = self.runtime.vocab.tokenize(outcome.text, add_special=False, parse_special=False)
            room = self.runtime.meta.n_ctx_seq - 1 - len(req.seq.prompt)
            if not tokens or len(tokens) > room:
                log.warning("hook injection of %d tokens does not fit (room %d); ignored", len(tokens), room)
                self._accept(req, held)
                return
            req.seq.prompt.extend(tokens)  # prefilled at the next steps; the held token is discarded
            req.injected += len(tokens)
        else:
            self._accept(req, held)

    def _emit(self, req: _Req, ev: Any) -> bool:
        try:
            req.events.send_nowait(ev)
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False

    def _finish_event(self, req: _Req, reason: str, error: str | None = None,
                      stopped_by_hook: bool = False) -> FinishEvent:
        now = time.perf_counter()
        t_first = req.t_first or now
        n_gen = req.seq.n_generated if req.seq else 0
        return FinishEvent(
            reason=reason, prompt_tokens=len(req.submit.prompt), completion_tokens=n_gen,
            prompt_ms=(t_first - req.t_admit) * 1000.0 if req.t_admit else 0.0,
            predicted_ms=(now - t_first) * 1000.0 if req.t_first else 0.0, error=error,
            injected_tokens=req.injected, stopped_by_hook=stopped_by_hook, cached_tokens=req.cached,
        )

    def _finish(self, req: _Req, reason: str, error: str | None = None, stopped_by_hook: bool = False) -> None:
        req.cancelled = True
        self._unpark(req)
        self._emit(req, self._finish_event(req, reason, error, stopped_by_hook))
        rid = req.submit.rid
        self._running.pop(rid, None)
        self._by_rid.pop(rid, None)
        if req.sampler is not None:
            self.runtime.free_sampler(req.sampler)
            req.sampler = None
        s = req.seq
        if s is not None:
            n_keep = _prefilled(req)
            if (self.prefix_cache and reason != "error" and n_keep >= MIN_REUSE
                    and self.runtime.seq_rm(s.slot, n_keep, -1)):
                self.prefix.keep(s.slot, s.prompt[:n_keep], req.submit.cache_key)  # KV stays for later prompts
            else:
                self.runtime.seq_rm(s.slot)
                self._free_slots.append(s.slot)


def _prefilled(req: _Req) -> int:
    """How many of ``req``'s KV tokens prefill computed: the prompt, not generated or injected text.

    Only these are offered for reuse. llama.cpp computes a token decoded alone (a generated
    token) with other kernels than a token inside a prefill batch, and the two KV values differ
    in their last bits (measured on CPU: a 32-token prefix decoded one token at a time moved the
    logits 600 tokens later by up to 0.3). Reusing generated tokens would make a cached prompt's
    greedy output differ from a cold run's; a prompt's tokens are prefilled alike on both paths.
    """
    return min(req.seq.n_past, len(req.submit.prompt)) if req.seq is not None else 0


def _logprobs(raw: np.ndarray, k: int) -> tuple[np.ndarray, tuple[TopLogprob, ...]]:
    """Log-softmax of raw logits and the top ``k`` (id, logprob), best first."""
    x = raw.astype(np.float64)
    m = x.max()
    lp = x - (m + np.log(np.exp(x - m).sum()))
    top: tuple[TopLogprob, ...] = ()
    if k:
        idx = np.argpartition(-lp, k)[:k]
        idx = idx[np.argsort(-lp[idx], kind="stable")]
        top = tuple(TopLogprob(int(t), float(lp[t])) for t in idx)
    return lp, top
