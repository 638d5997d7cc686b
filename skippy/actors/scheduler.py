"""The DecodeScheduler actor: the only code that touches the llama.cpp context.

It owns the context, the KV cache and the sequence slots. Its loop:

1. drain the inbox (:class:`Submit`, :class:`Cancel`) without blocking,
   or block on it when nothing is running;
2. free the slots of cancelled or finished sequences (``llama_memory_seq_rm``)
   and admit waiting requests into free slots, in arrival order;
3. plan one batch (:func:`skippy.engine.batch.plan_step`): one token per
   generating sequence plus prefill chunks within ``step_tokens``;
4. run ``llama_decode`` and the per-sequence samplers in one worker thread;
5. send each sequence's :class:`TokenEvent` (or :class:`FinishEvent`) to its
   request's unbounded event channel with ``send_nowait``, so the loop never
   blocks on a slow reader.

A request whose event channel is closed (the client went away) is dropped
at the next step and its KV cells are freed.
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

from skippy.engine.batch import SeqState, plan_step
from skippy.engine.errors import QueueFull
from skippy.engine.runtime.base import Runtime
from skippy.engine.sampling import SamplingParams

log = logging.getLogger("skippy.scheduler")


@attrs.frozen
class TopLogprob:
    token: int
    logprob: float


@attrs.frozen
class TokenEvent:
    """One sampled token; ``logprob``/``top`` only when the request asked for logprobs."""

    token: int
    logprob: float | None = None
    top: tuple[TopLogprob, ...] = ()


@attrs.frozen
class FinishEvent:
    """End of a sequence. ``reason``: ``stop`` (EOG), ``length``, ``cancelled`` or ``error``.

    Times are milliseconds; ``prompt_ms`` runs from admission to the first
    sampled token, ``predicted_ms`` from then to the end.
    """

    reason: str
    prompt_tokens: int
    completion_tokens: int
    prompt_ms: float
    predicted_ms: float
    error: str | None = None


@attrs.frozen
class Submit:
    """Admit a tokenized prompt. Events go to ``events`` (an unbounded send channel)."""

    rid: int
    prompt: list[int]
    params: SamplingParams
    max_tokens: int
    events: Any


@attrs.frozen
class Cancel:
    rid: int


@attrs.define(eq=False)
class _Req:
    submit: Submit
    seq: SeqState | None = None
    sampler: object = None
    t_admit: float = 0.0
    t_first: float = 0.0
    cancelled: bool = False


class DecodeScheduler:
    """Continuous-batching decode loop over one :class:`Runtime`.

    ``step_tokens`` bounds the tokens of one decode step (prefill chunks
    share it with the generating sequences); ``max_queue`` bounds the
    requests waiting for a slot (:class:`QueueFull` beyond it).
    """

    def __init__(self, runtime: Runtime, *, step_tokens: int | None = None, max_queue: int = 1024) -> None:
        self.runtime = runtime
        meta = runtime.meta
        self.n_slots = meta.n_seq_max
        self.step_tokens = min(step_tokens or meta.n_batch, meta.n_batch)
        self.max_queue = max_queue
        self._send, self._inbox = trio.open_memory_channel[Any](math.inf)
        self._free_slots = list(range(self.n_slots - 1, -1, -1))
        self._waiting: collections.deque[_Req] = collections.deque()
        self._running: dict[int, _Req] = {}
        self._by_rid: dict[int, _Req] = {}
        self.steps = 0

    # -- client side (called from request tasks, same trio thread) ---------------
    def submit(self, msg: Submit) -> None:
        """Queue a request; raises :class:`QueueFull` when ``max_queue`` requests wait."""
        if len(self._waiting) + self._inbox.statistics().current_buffer_used >= self.max_queue:
            raise QueueFull(f"the queue is full ({self.max_queue} requests waiting); retry later")
        self._send.send_nowait(msg)

    def cancel(self, rid: int) -> None:
        """Stop request ``rid`` at the next step (no-op when already finished)."""
        try:
            self._send.send_nowait(Cancel(rid))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    @property
    def n_running(self) -> int:
        """Sequences holding a slot (prefilling or generating)."""
        return len(self._running)

    @property
    def n_waiting(self) -> int:
        return len(self._waiting) + self._inbox.statistics().current_buffer_used

    # -- the actor ---------------------------------------------------------------
    async def run(self) -> None:
        """The scheduler task; runs until cancelled, then frees every sequence."""
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
                if plan is None:
                    await trio.sleep(0)
                    continue
                try:
                    results = await trio.to_thread.run_sync(self._step, plan)
                except Exception as exc:  # llama.cpp refused the batch: fail these sequences, keep serving
                    log.exception("decode step failed")
                    for rid in list(self._running):
                        self._finish(self._running[rid], "error", error=str(exc))
                    continue
                self.steps += 1
                for s, n in plan.advance:
                    s.n_past += n
                for s, ev in results:
                    self._on_token(self._running.get(s.rid), ev)
        finally:
            for req in list(self._running.values()):
                self._finish(req, "cancelled")
            for req in self._waiting:
                self._emit(req, self._finish_event(req, "cancelled"))
            self._waiting.clear()

    def _handle(self, msg: Submit | Cancel) -> None:
        if isinstance(msg, Submit):
            req = _Req(msg)
            self._by_rid[msg.rid] = req
            self._waiting.append(req)
        else:
            req = self._by_rid.get(msg.rid)
            if req is None:
                return
            if req.seq is None:
                self._waiting.remove(req)
                self._by_rid.pop(msg.rid, None)
            else:
                self._finish(req, "cancelled")

    def _admit(self) -> None:
        while self._waiting and self._free_slots:
            req = self._waiting.popleft()
            slot = self._free_slots.pop()
            sub = req.submit
            try:
                req.sampler = self.runtime.new_sampler(sub.params)
            except ValueError as exc:
                self._free_slots.append(slot)
                self._by_rid.pop(sub.rid, None)
                self._emit(req, self._finish_event(req, "error", error=str(exc)))
                continue
            req.seq = SeqState(rid=sub.rid, slot=slot, prompt=sub.prompt, max_tokens=sub.max_tokens)
            req.t_admit = time.perf_counter()
            self.runtime.seq_rm(slot)
            self._running[sub.rid] = req

    def _step(self, plan: Any) -> list[tuple[SeqState, TokenEvent]]:
        """Worker thread: decode the batch and sample every requested output."""
        rt = self.runtime
        rt.decode(plan.entries)
        out = []
        for s, i in plan.outputs:
            req = self._by_rid.get(s.rid)
            if req is None or req.sampler is None:
                continue
            params = req.submit.params
            if params.logprobs:
                raw = rt.logits(i)
                ev_lp = _logprobs(raw, params.top_logprobs)
            tok = rt.sample(req.sampler, i)
            if params.logprobs:
                lp, top = ev_lp
                out.append((s, TokenEvent(tok, float(lp[tok]), top)))
            else:
                out.append((s, TokenEvent(tok)))
        return out

    def _on_token(self, req: _Req | None, ev: TokenEvent) -> None:
        if req is None or req.cancelled:
            return
        s = req.seq
        now = time.perf_counter()
        if s.n_generated == 0:
            req.t_first = now
        meta = self.runtime.meta
        if ev.token in meta.eog_ids:
            self._finish(req, "stop")
            return
        s.n_generated += 1
        s.pending = ev.token
        if not self._emit(req, ev):
            self._finish(req, "cancelled")
            return
        if s.n_generated >= s.max_tokens or s.n_past + 1 >= meta.n_ctx_seq:
            self._finish(req, "length")

    def _emit(self, req: _Req, ev: Any) -> bool:
        try:
            req.submit.events.send_nowait(ev)
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False

    def _finish_event(self, req: _Req, reason: str, error: str | None = None) -> FinishEvent:
        now = time.perf_counter()
        t_first = req.t_first or now
        n_gen = req.seq.n_generated if req.seq else 0
        return FinishEvent(
            reason=reason, prompt_tokens=len(req.submit.prompt), completion_tokens=n_gen,
            prompt_ms=(t_first - req.t_admit) * 1000.0 if req.t_admit else 0.0,
            predicted_ms=(now - t_first) * 1000.0 if req.t_first else 0.0, error=error,
        )

    def _finish(self, req: _Req, reason: str, error: str | None = None) -> None:
        req.cancelled = True
        self._emit(req, self._finish_event(req, reason, error))
        rid = req.submit.rid
        self._running.pop(rid, None)
        self._by_rid.pop(rid, None)
        if req.sampler is not None:
            self.runtime.free_sampler(req.sampler)
            req.sampler = None
        if req.seq is not None:
            self.runtime.seq_rm(req.seq.slot)
            self._free_slots.append(req.seq.slot)


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
