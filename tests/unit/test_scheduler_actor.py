"""The DecodeScheduler actor's own bookkeeping, over the scheduler tests' fake runtime (tests.support; no model)."""

from __future__ import annotations

import math

import trio
import trio.testing

from skippy.actors.hooks import HookCall, HookCancel
from skippy.actors.metrics import StepTimes
from skippy.actors.scheduler import DecodeScheduler
from skippy.engine.scheduling.config import SchedulerConfig
from skippy.engine.scheduling.events import FinishEvent, SeqRequest, TokenEvent
from tests.support import FakeRuntime, req


async def _serve_one(sched: DecodeScheduler, request: SeqRequest) -> list[object]:
    """Run ``sched``'s loop until ``request`` finishes; its events, the finish last."""
    send, recv = trio.open_memory_channel(math.inf)
    events = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sched.run)
        sched.submit(request, send)
        with trio.fail_after(10):
            async for ev in recv:
                events.append(ev)
                if isinstance(ev, FinishEvent):
                    break
        nursery.cancel_scope.cancel()
    return events


async def test_waiting_counts_queued_requests_not_other_inbox_messages() -> None:
    sched = DecodeScheduler(FakeRuntime(n_seq_max=1), SchedulerConfig(max_queue=2))
    send, _recv = trio.open_memory_channel(math.inf)
    sched.submit(req(1, [51] * 4), send)
    sched.cancel(1)
    sched.cancel(7)
    assert sched.stats().n_waiting == 1  # the cancels in the inbox are not requests waiting for a slot
    sched.submit(req(2, [52] * 4), send)
    assert sched.stats().n_waiting == 2


async def test_the_loop_serves_a_request_and_frees_its_slot() -> None:
    sched = DecodeScheduler(FakeRuntime(n_seq_max=1), SchedulerConfig())
    events = await _serve_one(sched, req(1, [51] * 4, max_tokens=3))
    assert [type(e) for e in events] == [TokenEvent] * 3 + [FinishEvent] and events[-1].reason == "length"
    st = sched.stats()
    assert (st.n_running, st.n_waiting, st.tokens_predicted_total) == (0, 0, 3)


async def test_a_parked_sequence_cancelled_has_its_hook_call_cancelled() -> None:
    """A sequence parked on a hook call (a consultation) whose client went away: the sequence was cancelled but
    its call ran on (a peer generating for nobody). Now a :class:`HookCancel` of its ticket goes to the hooks."""
    hook_send, hook_recv = trio.open_memory_channel(math.inf)
    sched = DecodeScheduler(FakeRuntime(n_seq_max=1), SchedulerConfig(), hooks=hook_send)
    send, recv = trio.open_memory_channel(math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sched.run)
        sched.submit(req(1, [51] * 4, max_tokens=4, hooks=True, request="the request"), send)
        with trio.fail_after(10):
            call = await hook_recv.receive()
            assert isinstance(call, HookCall) and (call.ticket, call.event) == (1, "after_prefill")
            sched.cancel(1)
            assert await hook_recv.receive() == HookCancel(1)
            finish = await recv.receive()
        assert isinstance(finish, FinishEvent) and finish.reason == "cancelled"
        sched.cancel(1)  # no longer parked: nothing more goes to the hooks
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert hook_recv.statistics().current_buffer_used == 0


def test_step_times_split_the_overhead_into_its_parts() -> None:
    """The overhead of a step (last decode end -> this decode start) and its handoff part: the loop's
    submit -> decode start, plus the last step's sampling end -> loop resumed."""
    times = StepTimes()
    # step 1 (after idle): submitted 0.0, decode 0.1..0.2, sampling ends 0.25, loop resumes 0.26
    end = times.step([0.1, 0.2, 0.25], None, 0.0, submitted=0.0, resumed=0.26)
    assert end == 0.2
    # step 2: reader wait 0.01, submitted 0.30, decode 0.32..0.4, sampling ends 0.41, resumed 0.415
    end = times.step([0.32, 0.4, 0.41], end, 0.01, submitted=0.30, resumed=0.415)
    assert end == 0.4

    def observed(h: object) -> tuple[float, float]:
        samples = {s.name: s.value for m in h.collect() for s in m.samples}  # type: ignore[attr-defined]
        return samples[h._name + "_count"], samples[h._name + "_sum"]  # type: ignore[attr-defined]

    assert observed(times.decode)[0] == 2
    count, total = observed(times.overhead)
    assert count == 1 and math.isclose(total, 0.32 - 0.2)
    count, total = observed(times.handoff)  # (0.32 - 0.30) + (0.26 - 0.25)
    assert count == 1 and math.isclose(total, 0.03)
    # a step after the loop waited for an input records no overhead, and forgets the last resume
    times.step([1.1, 1.2, 1.21], None, 0.0, submitted=1.0, resumed=1.22)
    assert observed(times.handoff)[0] == 1


async def _first_batch_seqs(announce: bool, late: float | None = None, parsing: bool = False) -> set[int]:
    """Requests reach an idle loop with three slots: A, then B 5 ms later, announced as incoming (being
    prepared) when A arrives or not; with ``late``, C (never announced, as one still in its HTTP parsing)
    ``late`` seconds after B; with ``parsing``, B comes from a task that stays runnable until it submits
    (a burst's request in its HTTP parsing, its bytes read) instead of 5 ms later. The sequences of the
    first decode batch."""
    rt = FakeRuntime(n_seq_max=3)
    sched = DecodeScheduler(rt, SchedulerConfig())
    send, recv = trio.open_memory_channel(math.inf)

    async def parse_then_submit() -> None:
        for _ in range(20):
            await trio.sleep(0)
        sched.submit(req(2, [52] * 4, max_tokens=2), send)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sched.run)
        if announce:
            sched.incoming(1)
        sched.submit(req(1, [51] * 4, max_tokens=2), send)
        if parsing:
            nursery.start_soon(parse_then_submit)
        else:
            await trio.sleep(0.005)
            sched.submit(req(2, [52] * 4, max_tokens=2), send)
        if announce:
            sched.incoming(-1)
        if late is not None:
            await trio.sleep(late)
            sched.submit(req(3, [53] * 4, max_tokens=2), send)
        done = 0
        with trio.fail_after(10):
            async for ev in recv:
                done += isinstance(ev, FinishEvent)
                if done == (2 if late is None else 3):
                    break
        nursery.cancel_scope.cancel()
    return {e.seq_id for e in rt.batches[0]}


async def test_an_idle_loop_waits_for_announced_requests_so_a_burst_starts_as_one_batch() -> None:
    assert await _first_batch_seqs(announce=True) == {0, 1}
    assert await _first_batch_seqs(announce=False) == {0}  # nothing announced: the first request does not wait
    # once nothing is being prepared, a request within ADMIT_GAP still joins (a burst's HTTP parsing), a later
    # one does not
    assert await _first_batch_seqs(announce=True, late=0.0005) == {0, 1, 2}
    assert await _first_batch_seqs(announce=True, late=0.03) == {0, 1}
    # a request whose task can still run (its HTTP parsing) joins although nothing was announced yet
    assert await _first_batch_seqs(announce=False, parsing=True) == {0, 1}


async def test_a_task_that_keeps_running_does_not_hold_a_lone_requests_first_step(monkeypatch) -> None:
    """The idle loop lets runnable tasks announce their requests for ADMIT_SETTLE at most: a task of the
    embedding program that never blocks (and never submits) does not hold decoding for ADMIT_WAIT, which
    is made a minute here (the trio.testing.wait_all_tasks_blocked gather waited that long)."""
    monkeypatch.setattr("skippy.actors.scheduler.ADMIT_WAIT", 60.0)
    rt = FakeRuntime(n_seq_max=2)
    sched = DecodeScheduler(rt, SchedulerConfig())
    send, recv = trio.open_memory_channel(math.inf)

    async def busy() -> None:
        while True:
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sched.run)
        nursery.start_soon(busy)
        await trio.sleep(0.01)
        for rid in (1, 2):  # twice: the loop is idle again before the second request
            sched.submit(req(rid, [50 + rid] * 4, max_tokens=2), send)
            with trio.fail_after(10):
                async for ev in recv:
                    if isinstance(ev, FinishEvent):
                        break
        nursery.cancel_scope.cancel()
    assert len(rt.batches) >= 4


async def test_a_lone_requests_own_task_does_not_hold_its_first_step(monkeypatch) -> None:
    """The task that submitted goes on to start its response (headers, the role chunk) without blocking; the
    idle loop plans the first step meanwhile instead of waiting for it to block (here it never does, and
    ADMIT_SETTLE is made a minute), so on a host with cores to spare the headers go out while it decodes."""
    monkeypatch.setattr("skippy.actors.scheduler.ADMIT_SETTLE", 60.0)
    monkeypatch.setattr("skippy.actors.scheduler.ADMIT_WAIT", 60.0)
    rt = FakeRuntime(n_seq_max=2)
    sched = DecodeScheduler(rt, SchedulerConfig())
    send, recv = trio.open_memory_channel(math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sched.run)
        await trio.testing.wait_all_tasks_blocked()  # the loop is idle, waiting on its inbox
        sched.submit(req(1, [51] * 4, max_tokens=2), send)
        rounds = 0
        while not rt.batches and rounds < 2000:
            await trio.sleep(0)
            rounds += 1
        assert rt.batches, "the first step waited for the submitting task"
        with trio.fail_after(10):
            async for ev in recv:
                if isinstance(ev, FinishEvent):
                    break
        nursery.cancel_scope.cancel()


def _observed(h: object) -> tuple[float, float]:
    samples = {s.name: s.value for m in h.collect() for s in m.samples}  # type: ignore[attr-defined]
    return samples[h._name + "_count"], samples[h._name + "_sum"]  # type: ignore[attr-defined]


def test_step_times_record_every_decode_of_a_multi_step_run() -> None:
    """A run's marks hold (start, end, sampling end) per decode: each decode and sampling is observed, and
    the gaps inside the run count as overhead; the returned end is the last decode's."""
    times = StepTimes()
    end = times.step([0.1, 0.2, 0.21, 0.22, 0.3, 0.31, 0.33, 0.4, 0.41], None, 0.0, submitted=0.0, resumed=0.42)
    assert end == 0.4
    assert _observed(times.decode)[0] == 3 and _observed(times.sample)[0] == 3
    count, total = _observed(times.overhead)  # (0.22 - 0.2) + (0.33 - 0.3); none before the run (idle)
    assert count == 2 and math.isclose(total, 0.05)
    assert _observed(times.handoff)[0] == 0


async def test_ready_nowait_takes_what_is_there_and_defers_an_error() -> None:
    """The chunks of a multi-step run are written together: ``Rendered.ready_nowait`` returns every item
    available without waiting, and a generation error met there is raised by the next ``__anext__``."""
    from skippy.actors.streams import Rendered as _Rendered
    from skippy.engine.errors import EngineError

    class Events:
        def __init__(self, items: list) -> None:
            self.items = items

        def next_nowait(self):
            item = self.items.pop(0) if self.items else None
            if isinstance(item, Exception):
                raise item
            return item

        async def __anext__(self):
            raise AssertionError("ready_nowait must not wait")

    failed = EngineError("generation failed")
    rendered = _Rendered(Events([(0, "a"), (0, "b"), None, (0, "c")]), ["head"], lambda i, x: [x.upper()])
    assert rendered.ready_nowait() == ["head", "A", "B"]  # up to the first "nothing yet"
    assert rendered.ready_nowait() == ["C"]
    rendered = _Rendered(Events([(0, "a"), failed]), [], lambda i, x: [x])
    assert rendered.ready_nowait() == ["a"]
    try:
        await rendered.__anext__()
    except EngineError as exc:
        assert exc is failed
    else:
        raise AssertionError("the deferred error was not raised")


async def test_after_a_multi_step_run_the_readers_get_idle_wait_per_decode(monkeypatch) -> None:
    """The loop's wait for the readers of a run's tokens is IDLE_WAIT per decode of the run (they write all of
    its chunks), IDLE_WAIT after a single step."""
    from skippy.actors import scheduler as actor

    limits = []

    async def record(readers, limit=actor.IDLE_WAIT):
        limits.append(round(limit / actor.IDLE_WAIT))

    monkeypatch.setattr(actor, "_let_readers_run", record)
    sched = DecodeScheduler(FakeRuntime(n_seq_max=1), SchedulerConfig(scheduler_steps=4))
    await _serve_one(sched, req(1, [51] * 4, max_tokens=12))
    # before each plan: the prefill's (1), then the runs of 1, 1, 2, 4, 4 decodes (the last one finishes)
    assert limits == [1, 1, 1, 2, 4]


async def test_without_reader_wait_the_loop_decodes_while_the_readers_write(monkeypatch) -> None:
    """``reader_wait=False`` (--reader-wait off, or auto with the model on a GPU): the loop never waits for the
    readers before a decode, and the request still gets every token."""
    from skippy.actors import scheduler as actor

    calls = []

    async def record(readers, limit=actor.IDLE_WAIT):
        calls.append(limit)

    monkeypatch.setattr(actor, "_let_readers_run", record)
    sched = DecodeScheduler(FakeRuntime(n_seq_max=1), SchedulerConfig(scheduler_steps=4, reader_wait=False))
    events = await _serve_one(sched, req(1, [51] * 4, max_tokens=12))
    assert calls == [] and len(events) == 13 and events[-1].reason == "length"


async def _finish(recv: trio.MemoryReceiveChannel) -> None:
    async for ev in recv:
        if isinstance(ev, FinishEvent):
            return


async def test_an_idle_loop_saves_resident_entries_to_the_prompt_cache(monkeypatch) -> None:
    """Once the loop is idle, the finished request's resident entry is copied to the host prompt cache (on the
    decode thread), so a later eviction under load needs no save; with no prompt cache nothing is saved."""
    monkeypatch.setattr("skippy.actors.scheduler.IDLE_SAVE_DELAY", 0.01)
    for prompt_cache, saved in ((None, [(0, 40)]), (0, [])):
        rt = FakeRuntime(n_seq_max=2)
        sched = DecodeScheduler(rt, SchedulerConfig(prompt_cache=prompt_cache))
        send, recv = trio.open_memory_channel(math.inf)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sched.run)
            sched.submit(req(1, list(range(100, 140)), max_tokens=2), send)
            with trio.fail_after(10):
                async for ev in recv:
                    if isinstance(ev, FinishEvent):
                        break
                while rt.saved != saved:
                    await trio.sleep(0.01)
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        assert rt.saved == saved



async def test_the_idle_save_waits_for_a_quiet_loop_so_the_next_request_of_a_session_does_not_wait_for_it(
        monkeypatch) -> None:
    """A save cannot stop once begun: the loop saves only after :data:`IDLE_SAVE_DELAY` with nothing arriving.
    A request that comes within it (an editor plugin's next completion) runs with no save before it; once the
    loop stays quiet, both resident entries are saved."""
    monkeypatch.setattr("skippy.actors.scheduler.IDLE_SAVE_DELAY", 0.3)
    rt = FakeRuntime(n_seq_max=2)
    sched = DecodeScheduler(rt, SchedulerConfig(prompt_cache=None))
    send1, recv1 = trio.open_memory_channel(math.inf)
    send2, recv2 = trio.open_memory_channel(math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sched.run)
        with trio.fail_after(10):
            sched.submit(req(1, list(range(100, 140)), max_tokens=2), send1)
            await _finish(recv1)
            await trio.sleep(0.05)  # the loop is idle, well within the delay
            sched.submit(req(2, list(range(200, 240)), max_tokens=2), send2)
            await _finish(recv2)
            assert rt.saved == []  # no save ran between the two requests
            while len(rt.saved) < 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert sorted(rt.saved) == [(0, 40), (1, 40)]
