"""The DecodeScheduler actor: the only code that touches the llama.cpp context.

Every rule of a request's life (admission, prefix reuse, prefill budget,
hook parking and injection, finish) is :class:`~skippy.engine.scheduling.core.SchedulerCore`'s,
a sans-IO state machine. This actor only moves messages around it, one step
at a time (vLLM v1's ``EngineCore.step()``)::

    drain the inbox -> core.plan() -> execute() on the decode thread -> core.update() -> send events

Its inbox takes :data:`SchedulerMsg`: :class:`Submit`, :class:`SubmitEmbeddings`, :class:`Cancel`,
hook verdicts (:class:`~skippy.actors.hooks.HookVerdict`) and llama-server slot
actions (:class:`SlotAction`: save / restore / erase a slot's KV, run between steps). Embedding
batches run on the same decode thread, on the runtime's embedding context, as part of the step the
core plans (never from another task). Token and finish
events go to each request's unbounded event channel with ``send_nowait``, so
the loop never blocks on a slow reader; a request whose channel is closed
(its client went away) is cancelled and its KV cells are freed. A parked
sequence's :class:`~skippy.actors.hooks.HookCall` goes to the HookEvaluator
with this actor's inbox as the reply channel; the other sequences keep
decoding meanwhile. A parked sequence cancelled (its client gone) has its call
cancelled with it (:class:`~skippy.actors.hooks.HookCancel`).

Ownership: the core (and through it the runtime's KV and sampler calls) is
touched only by this actor's task; the decode thread runs
:func:`~skippy.engine.scheduling.decode.execute` while the task awaits it, and
inputs that arrive meanwhile wait in the inbox until the step is applied.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Protocol, assert_never

import attrs
import trio

from skippy.actors.base import Actor, DedicatedThread
from skippy.actors.hooks import HookCall, HookCancel, HookMsg, HookVerdict
from skippy.actors.metrics import StepTimes
from skippy.engine.errors import InvalidRequest, QueueFull, SlotBusy, SlotFileError
from skippy.engine.hooks.policy import NO_ACTION
from skippy.engine.runtime.base import Runtime
from skippy.engine.scheduling.config import SchedulerConfig
from skippy.engine.scheduling.core import SchedulerCore, SlotInfo
from skippy.engine.scheduling.decode import execute
from skippy.engine.scheduling.events import (
    EmbeddingsEvent,
    EmbedRequest,
    FinishEvent,
    HookRequest,
    Output,
    SchedulerStats,
    SeqEvent,
    SeqRequest,
)
from skippy.engine.scheduling.step import StepPlan, StepResult

log = logging.getLogger("skippy.scheduler")

#: Seconds the loop waits at most, before a decode step, for the request tasks it just sent
#: tokens to: llama.cpp's worker threads spin on barriers, and Python work running beside them
#: on the same cores stalls the whole step. Bounded, so a reader stuck on a slow socket (or an
#: embedding program's busy task) cannot stall decoding.
IDLE_WAIT = 0.005

#: Seconds the loop waits at most, when a request reaches it idle, for the requests the engine is
#: still preparing (template, tokenizer: :meth:`DecodeScheduler.incoming`), so that a burst starts as
#: one batch: on 2 CPU cores the first request's lone step ran while the other 15 of a 16-client
#: burst were tokenized, and they joined a step later (llama-server's C++ threads tokenize a burst
#: before its first step); with a 20 ms bound 5 of 16 still came a step late in one trace.
#: Bounded, so a request prepared slowly (a long prompt, a hook) delays the first by this much at
#: most; a request that arrives alone does not wait.
ADMIT_WAIT = 0.05

#: Once no request is being prepared, the loop goes on gathering while the next one arrives within
#: this many seconds (a burst's later requests may still be in their HTTP parsing).
ADMIT_GAP = 0.003

#: Seconds a request that reaches the idle loop with none announced waits at most for the tasks that can
#: run to announce one (:meth:`DecodeScheduler._settle`): a burst's other connections, whose bytes are
#: read, announce theirs in their HTTP parsing. Bounded apart from :data:`ADMIT_WAIT`, so that a task that
#: keeps running (an embedding program's own work) delays the first step of a lone request by this much
#: at most.
ADMIT_SETTLE = 0.005

#: Seconds the loop waits idle, with nothing arriving, before it copies resident prompts to the host prompt
#: cache (:meth:`DecodeScheduler._save_while_idle`). A save is one llama.cpp call that cannot stop (about
#: 23 KB a token on SmolLM2: 27 ms for a 1950-token prompt here, a multiple of that for bigger models), and
#: a request that arrives meanwhile waits for it: an editor plugin's completions, one per cursor move, paid
#: it in every request. A client in the middle of a session (the next completion, an agent's next turn after
#: a tool) comes back within this and mostly extends or reuses its own resident prompt, which needs no saved
#: copy; a server quiet this long is likely to stay so for a save.
IDLE_SAVE_DELAY = 1.0


class EventSink(Protocol):
    """Where a request's events go: a trio memory send channel (unbounded: the loop never blocks on a
    reader), or anything with the two methods the loop uses (the facade's per-choice view of one shared
    channel). ``statistics().tasks_waiting_receive`` tells the loop a reader waits for the next event."""

    def send_nowait(self, value: SeqEvent, /) -> None: ...

    def statistics(self) -> trio.MemoryChannelStatistics: ...


@attrs.frozen
class Submit:
    """Admit ``request``; its events go to ``events`` (an unbounded send channel)."""

    request: SeqRequest
    events: EventSink


@attrs.frozen
class SubmitEmbeddings:
    """Embed ``request``'s inputs; its one :class:`EmbeddingsEvent` goes to ``events``."""

    request: EmbedRequest
    events: EventSink


@attrs.frozen
class Cancel:
    """Stop request ``rid`` (any phase)."""

    rid: int


@attrs.frozen
class SlotAction:
    """A llama-server slot action on idle slot ``slot``: ``save`` (its KV and tokens to the file ``path``),
    ``restore`` (from ``path``) or ``erase``. The reply dict (llama-server's shape), or the
    :class:`~skippy.engine.errors.EngineError` to raise, goes to ``reply``."""

    action: str
    slot: int
    path: str | None
    reply: trio.MemorySendChannel[Any]


#: What the scheduler's inbox takes.
SchedulerMsg = Submit | SubmitEmbeddings | Cancel | HookVerdict | SlotAction


class DecodeScheduler(Actor[SchedulerMsg]):
    """Continuous-batching decode loop over one :class:`Runtime`.

    ``config`` (a :class:`~skippy.engine.scheduling.config.SchedulerConfig`) configures the
    :class:`SchedulerCore`; a multi-step run ends early when a message reaches the inbox;
    ``hooks`` is the HookEvaluator's inbox (send side) or ``None``.
    """

    def __init__(self, runtime: Runtime, config: SchedulerConfig, *,
                 hooks: trio.MemorySendChannel[HookMsg] | None = None) -> None:
        super().__init__()
        self.runtime = runtime
        self.hooks = hooks
        self.core = SchedulerCore(runtime, config, hooks=hooks is not None)
        self._events: dict[int, EventSink] = {}
        self.step_times = StepTimes()
        self._unread = 0  # Submit and SubmitEmbeddings messages in the inbox (not yet added to the core)
        self._unread_embeds = 0  # of them, SubmitEmbeddings
        self._incoming = 0  # requests the engine is preparing (see incoming())
        self._slot_actions: list[SlotAction] = []  # run between steps, file I/O on the decode thread
        self._batches: _RunBatches | None = None  # trio's run batches, watched while the loop is idle

    # -- client side (called from request tasks, same trio thread) ---------------
    def submit(self, request: SeqRequest, events: EventSink) -> None:
        """Queue ``request``; its events go to ``events`` (unbounded: the loop never blocks on a reader).

        Raises :class:`QueueFull` when ``max_queue`` requests wait (embedding requests count too).
        """
        if self._n_queued() >= self.core.max_queue:
            raise QueueFull(f"the queue is full ({self.core.max_queue} requests waiting); retry later")
        self._send.send_nowait(Submit(request, events))
        self._unread += 1
        if self._batches is not None:
            self._batches.ignore(trio.lowlevel.current_task())

    def submit_embeddings(self, request: EmbedRequest, events: EventSink) -> None:
        """Queue an embedding request; its :class:`EmbeddingsEvent` goes to ``events``. Raises
        :class:`QueueFull` when ``max_queue`` requests wait (generation and embedding requests together)."""
        if self._n_queued() >= self.core.max_queue:
            raise QueueFull(f"the queue is full ({self.core.max_queue} requests waiting); retry later")
        self._send.send_nowait(SubmitEmbeddings(request, events))
        self._unread += 1
        self._unread_embeds += 1

    def incoming(self, n: int) -> None:
        """``n`` more requests (or fewer, when negative) are being prepared for :meth:`submit` (their template and
        tokenizer work): an idle loop that receives a request waits for them, at most :data:`ADMIT_WAIT`."""
        self._incoming += n

    def cancel(self, rid: int) -> None:
        """Stop request ``rid`` at the next step (no-op when already finished)."""
        try:
            self._send.send_nowait(Cancel(rid))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def slot_action(self, action: str, slot: int, path: str | None = None) -> dict[str, Any]:
        """Run a llama-server slot action (see :class:`SlotAction`) between two decode steps.

        Returns llama-server's reply dict. Raises :class:`SlotBusy` (409) while a request runs in
        ``slot``, :class:`InvalidRequest` (400) for a restore from a file that is not a sequence state
        of this model or does not fit.
        """
        send, recv = trio.open_memory_channel[Any](1)
        self._send.send_nowait(SlotAction(action, slot, path, send))
        result = await recv.receive()
        if isinstance(result, BaseException):
            raise result
        return result

    def seq_info(self, rid: int) -> tuple[int, int]:
        """``(slot, cached prompt tokens)`` of running request ``rid`` (``(-1, 0)`` when not running)."""
        slot = self.core.slot(rid)
        return (slot, self.core.cached(rid)) if slot is not None else (-1, 0)

    def slots(self) -> tuple[SlotInfo, ...]:
        """Every slot's state (a snapshot; llama-server ``GET /slots``)."""
        return self.core.slots()

    def stats(self) -> SchedulerStats:
        """A snapshot of the queue, slots and counters (requests still in the inbox count as waiting)."""
        return attrs.evolve(self.core.stats(), n_waiting=self._n_waiting())

    def _pending(self) -> bool:
        """A message waits in the inbox (asked from the decode thread between a multi-step run's decodes:
        it only reads the channel's buffer length)."""
        return self._send.statistics().current_buffer_used > 0

    def _n_waiting(self) -> int:
        return self.core.n_waiting + self._unread  # queued requests; cancels and verdicts in the inbox are not

    def _n_queued(self) -> int:
        """What ``max_queue`` bounds: requests waiting for a slot that no running sequence holds (those in the inbox
        included), and embedding requests not answered yet (:meth:`SchedulerCore.n_queued`)."""
        return self.core.n_queued(self._unread - self._unread_embeds, self._unread_embeds)

    # -- the actor ---------------------------------------------------------------
    async def run(self) -> None:
        """The scheduler task; runs until cancelled, then finishes every sequence as cancelled."""
        decode_thread = DedicatedThread("skippy-decode")  # every llama_decode on one OS thread
        readers: list[EventSink] = []
        run = 1  # decodes in the last step (a multi-step run's), whose tokens the readers write
        times = self.step_times
        last_end: float | None = None  # end of the last llama_decode; None after waiting for an input
        try:
            while True:
                if self._slot_actions:
                    await self._run_slot_actions(decode_thread)
                if self.core.idle:
                    last_end = None
                    await self._wait_and_gather(decode_thread)
                self._drain_inbox()
                if self._slot_actions:
                    await self._run_slot_actions(decode_thread)
                step = self.core.plan()
                self._deliver(step.outputs)
                if step.empty:  # nothing admitted yet can decode (all parked): wait for an input
                    last_end = None
                    self._handle(await self._inbox.receive())
                    continue
                t_wait = time.perf_counter()
                if self.core.config.reader_wait:
                    await _let_readers_run(readers, IDLE_WAIT * run)
                submitted = time.perf_counter()
                waited = submitted - t_wait
                try:
                    result, marks = await decode_thread.run_sync(_execute_timed, self.runtime, step, self._pending)
                except Exception as exc:  # llama.cpp refused the batch: fail these sequences, keep serving
                    log.exception("decode step failed")
                    self._deliver(self.core.fail(str(exc)))
                    last_end = None
                    continue
                decoded = step.batch is not None and bool(step.batch.entries)  # not an image-only step
                last_end = times.step(marks, last_end, waited, decoded=decoded,
                                      embedded=step.embed is not None, submitted=submitted,
                                      resumed=time.perf_counter())
                readers = self._deliver(self.core.update(step, result))
                run = max(result.decodes, 1)  # decodes whose tokens the readers now write
        finally:
            decode_thread.close()
            self._deliver(self.core.close())
            while True:  # requests submitted but not yet read from the inbox end too
                try:
                    msg = self._inbox.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                if isinstance(msg, Submit):
                    self._unread -= 1
                    _send(msg.events, FinishEvent("cancelled", len(msg.request.prompt), 0, 0.0, 0.0))
                elif isinstance(msg, SubmitEmbeddings):
                    self._unread -= 1
                    self._unread_embeds -= 1
                    _send(msg.events, EmbeddingsEvent(None, 0, "cancelled"))

    async def _idle_receive(self, decode_thread: DedicatedThread) -> SchedulerMsg:
        """The next inbox message, waited for idle; when resident entries need saving
        (:meth:`SchedulerCore.idle_saves`) and nothing arrives or is being prepared within
        :data:`IDLE_SAVE_DELAY`, they are saved meanwhile (:meth:`_save_while_idle`)."""
        saves = self.core.idle_saves()
        if saves:
            with trio.move_on_after(IDLE_SAVE_DELAY):
                return await self._inbox.receive()
            if self._incoming <= 0:
                await self._save_while_idle(decode_thread, saves)
        return await self._inbox.receive()

    async def _save_while_idle(self, decode_thread: DedicatedThread, saves: list[tuple[int, list[int]]]) -> None:
        """Copy ``saves``, the resident entries the host prompt cache lacks (:meth:`SchedulerCore.idle_saves`),
        into it, one at a time on the decode thread, until one is done or an input arrives (a message in the
        inbox, a request being prepared): a save then costs no request its time, as it would inside a plan."""
        for slot, tokens in saves:
            if self._pending() or self._incoming > 0:
                return
            if not self.core.needs_idle_save(slot, tokens):  # an earlier save of this loop holds it now
                continue
            try:
                data = await decode_thread.run_sync(self.runtime.state_seq_get_data, slot)
            except (ValueError, RuntimeError) as exc:
                log.warning("prompt cache: the state of slot %d could not be saved: %s", slot, exc)
                continue
            self.core.add_idle_save(slot, tokens, data)

    async def _wait_and_gather(self, decode_thread: DedicatedThread) -> None:
        """Idle: wait for an inbox message (:meth:`_idle_receive`), handle it, then :meth:`_gather_burst`; trio's
        run batches are watched from the start (:class:`_RunBatches`), so a request's task, made runnable by its
        submit, is known as such."""
        self._batches = batches = _RunBatches()
        trio.lowlevel.add_instrument(batches)
        try:
            self._handle(await self._idle_receive(decode_thread))
            await self._gather_burst(batches)
        finally:
            trio.lowlevel.remove_instrument(batches)
            self._batches = None

    async def _gather_burst(self, batches: _RunBatches) -> None:
        """While requests are being prepared and slots would stay free, handle inbox messages, for at most
        :data:`ADMIT_WAIT` seconds; once none is being prepared, go on while another arrives within
        :data:`ADMIT_GAP` (the rest of the burst is still in its HTTP parsing).

        When none is being prepared yet, the tasks that can run first run until one announces a request or
        none is left to run but those that submitted one (:meth:`_settle`); a lone request waits for that only
        (one round of the loop and its I/O poll, tens of microseconds), not for its own task to send the
        response's headers: they go out while its first step decodes."""
        with trio.move_on_after(ADMIT_WAIT):
            if self._incoming <= 0 and not self._unread and not await self._settle(batches):
                return
            while self.core.n_waiting < self.core.n_slots:
                if self._incoming > 0:
                    self._handle(await self._inbox.receive())
                    continue
                with trio.move_on_after(ADMIT_GAP) as gap:
                    self._handle(await self._inbox.receive())
                if gap.cancelled_caught:
                    return

    async def _settle(self, batches: _RunBatches) -> bool:
        """Let the tasks that can run now run, one checkpoint of this task at a time, until a request is
        announced (:meth:`incoming`, :meth:`submit`: True), or this task ran alone in a round of trio's
        loop but for the tasks that submitted since the loop woke (False: every other task is blocked and
        the round's I/O poll woke none: nothing else is on its way; a task that submitted is only starting
        its response), or :data:`ADMIT_SETTLE` passed (False).

        A local condition in place of trio's test helper ``wait_all_tasks_blocked`` (unbounded but
        for :data:`ADMIT_WAIT`): the size of each run batch is read by a :class:`_RunBatches` instrument
        installed while the loop is idle."""
        with trio.move_on_after(ADMIT_SETTLE):
            while True:
                await trio.sleep(0)
                if self._incoming > 0 or self._unread:
                    return True
                if batches.size <= 1:  # the round that resumed this task ran nothing else (but submitters)
                    return False
        return self._incoming > 0 or self._unread > 0

    def _drain_inbox(self) -> None:
        while True:
            try:
                msg = self._inbox.receive_nowait()
            except trio.WouldBlock:
                return
            self._handle(msg)

    def _handle(self, msg: SchedulerMsg) -> None:
        match msg:
            case Submit(request, events):
                self._unread -= 1
                try:
                    self.core.add(request)
                except QueueFull as exc:  # submit() checked; only a race with the inbox lands here
                    _send(events, FinishEvent("error", len(request.prompt), 0, 0.0, 0.0, error=str(exc)))
                    return
                self._events[request.rid] = events
            case SubmitEmbeddings(request, events):
                self._unread -= 1
                self._unread_embeds -= 1
                try:
                    self.core.add_embedding(request)
                except (QueueFull, ValueError) as exc:  # submit_embeddings() checked; a race or a bad input
                    _send(events, EmbeddingsEvent(None, 0, str(exc)))
                    return
                self._events[request.rid] = events
            case Cancel(rid):
                self._deliver(self._cancel(rid))
                self._events.pop(rid, None)
            case HookVerdict(ticket, outcome):
                self._deliver(self.core.on_verdict(ticket, outcome))
            case SlotAction():
                self._slot_actions.append(msg)
            case _:
                assert_never(msg)

    async def _run_slot_actions(self, decode_thread: DedicatedThread) -> None:
        """Run the queued slot actions: the core's slot bookkeeping here, the state file on the decode thread
        (no step is in flight: the loop is between steps)."""
        actions, self._slot_actions = self._slot_actions, []
        for act in actions:
            try:
                result: Any = await self._slot_action(act, decode_thread)
            except Exception as exc:  # noqa: BLE001 - the caller raises it
                result = exc
            try:
                act.reply.send_nowait(result)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _slot_action(self, act: SlotAction, decode_thread: DedicatedThread) -> dict[str, Any]:
        core, slot = self.core, act.slot
        if core.slot_busy(slot):
            raise SlotBusy(f"slot {slot} is processing a request; retry when it is idle", param="id_slot")
        t0 = time.perf_counter()
        if act.action == "save":
            tokens = core.slot_tokens(slot)
            try:
                n = await decode_thread.run_sync(self.runtime.state_seq_save, act.path, slot, tokens)
            except OSError as exc:
                if act.path is not None and os.path.isdir(act.path):
                    raise InvalidRequest("filename names a folder in --slot-save-path, not a file",
                                         param="filename") from None
                raise SlotFileError(f"the slot file could not be written: {exc}") from None
            return {"id_slot": slot, "filename": act.path, "n_saved": len(tokens), "n_written": n,
                    "timings": {"save_ms": (time.perf_counter() - t0) * 1000.0}}
        if act.action == "restore":
            core.erase_slot(slot)
            n, tokens = await decode_thread.run_sync(self.runtime.state_seq_load, act.path, slot)
            core.adopt_slot(slot, tokens)
            if not n:
                raise InvalidRequest("Unable to restore slot, no available space in KV cache or invalid slot "
                                     "save file", param="filename")
            return {"id_slot": slot, "filename": act.path, "n_restored": len(tokens), "n_read": n,
                    "timings": {"restore_ms": (time.perf_counter() - t0) * 1000.0}}
        assert act.action == "erase", act.action
        return {"id_slot": slot, "n_erased": core.erase_slot(slot)}

    def _deliver(self, outputs: list[Output] | tuple[Output, ...]) -> list[EventSink]:
        """Send each output where it goes; returns the event channels whose reader was waiting for it.

        A closed event channel (the client left) cancels its sequence; a hook call
        that cannot be sent (the evaluator is gone) counts as no action.
        """
        readers = []
        last = None  # a run's events of a sequence come one after another: its reader is looked at once
        for rid, ev in outputs:
            if isinstance(ev, HookRequest):
                try:
                    assert self.hooks is not None
                    self.hooks.send_nowait(HookCall(rid, ev.event, ev.request, ev.payload, self._send))
                except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    readers += self._deliver(self.core.on_verdict(rid, NO_ACTION))
                continue
            events = self._events.get(rid)
            if events is None:
                continue
            if isinstance(ev, (FinishEvent, EmbeddingsEvent)):
                del self._events[rid]
            if events is not last:
                last = events
                if events.statistics().tasks_waiting_receive:
                    readers.append(events)
            if not _send(events, ev) and not isinstance(ev, (FinishEvent, EmbeddingsEvent)):
                self._events.pop(rid, None)
                self._cancel(rid)  # its finish event has nowhere to go
        return readers

    def _cancel(self, rid: int) -> list[Output]:
        """Cancel ``rid`` in the core; a sequence parked on a hook call has that call cancelled too
        (:class:`HookCancel`: a consultation's peer requests end with it, counted ``cancelled``)."""
        parked = self.core.is_parked(rid)
        outputs = self.core.cancel(rid)
        if parked and self.hooks is not None:
            try:
                self.hooks.send_nowait(HookCancel(rid))
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the evaluator is gone: nothing runs for it
        return outputs


def _execute_timed(runtime: Runtime, step: StepPlan, interrupt: Any) -> tuple[StepResult, list[float]]:
    """:func:`execute` on the decode thread, with its ``perf_counter`` marks (decode start, decode end,
    sampling end, for each decode of a multi-step run; embedding batch start and end)."""
    marks: list[float] = []
    result = execute(runtime, step, marks, interrupt if step.steps > 1 else None)
    return result, marks


class _RunBatches(trio.abc.Instrument):
    """``size``: the tasks in trio's latest run batch (those runnable after its I/O poll), read as each
    batch starts (``after_io_wait``), less the ignored ones (:meth:`ignore`) known to be among them (made runnable
    after they were ignored and not run since: ignored tasks are undercounted, never others)."""

    def __init__(self) -> None:
        self.size = 2  # unknown until the first batch
        self._ignore: set[trio.lowlevel.Task] = set()
        self._ready: set[trio.lowlevel.Task] = set()  # ignored tasks runnable now

    def ignore(self, task: trio.lowlevel.Task) -> None:
        """Leave ``task`` out of ``size`` from now on (it submitted a request: what it does next is its response)."""
        self._ignore.add(task)

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if task in self._ignore:
            self._ready.add(task)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._ready.discard(task)

    def after_io_wait(self, timeout: float) -> None:
        self.size = trio.lowlevel.current_statistics().tasks_runnable - len(self._ready)


def _send(events: EventSink, ev: SeqEvent) -> bool:
    try:
        events.send_nowait(ev)
        return True
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return False


async def _let_readers_run(readers: list[EventSink], limit: float = IDLE_WAIT) -> None:
    """Before the next decode, let the request tasks that were waiting for the last step's events
    turn them into bytes on the wire: wait (at most ``limit`` seconds: :data:`IDLE_WAIT` per decode
    whose tokens they got, a multi-step run's several) until each is back waiting
    on its channel, or until no other task can run."""
    if not readers:
        return
    with trio.move_on_after(limit):
        while True:
            await trio.sleep(0)
            readers = [ch for ch in readers if _busy(ch)]
            if not readers or not trio.lowlevel.current_statistics().tasks_runnable:
                return


def _busy(ch: EventSink) -> bool:
    """The reader of ``ch`` is still at work: not back waiting on it, and the channel is open."""
    stats = ch.statistics()
    return not stats.tasks_waiting_receive and stats.open_receive_channels > 0 and stats.open_send_channels > 0


__all__ = ["Cancel", "DecodeScheduler", "IDLE_WAIT", "SchedulerMsg", "SlotAction", "Submit", "SubmitEmbeddings"]
