"""The DecodeScheduler actor's own bookkeeping, over the fake runtime of test_scheduler_core (no model)."""

from __future__ import annotations

import math

import trio

from skippy.actors.scheduler import DecodeScheduler
from skippy.engine.scheduling.events import FinishEvent, TokenEvent
from tests.unit.test_scheduler_core import FakeRuntime, req


async def test_waiting_counts_queued_requests_not_other_inbox_messages() -> None:
    sched = DecodeScheduler(FakeRuntime(n_seq_max=1), max_queue=2)
    send, _recv = trio.open_memory_channel(math.inf)
    sched.submit(req(1, [51] * 4), send)
    sched.cancel(1)
    sched.cancel(7)
    assert sched.stats().n_waiting == 1  # the cancels in the inbox are not requests waiting for a slot
    sched.submit(req(2, [52] * 4), send)
    assert sched.stats().n_waiting == 2


async def test_the_loop_serves_a_request_and_frees_its_slot() -> None:
    sched = DecodeScheduler(FakeRuntime(n_seq_max=1))
    send, recv = trio.open_memory_channel(math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sched.run)
        sched.submit(req(1, [51] * 4, max_tokens=3), send)
        events = []
        with trio.fail_after(10):
            async for ev in recv:
                events.append(ev)
                if isinstance(ev, FinishEvent):
                    break
        nursery.cancel_scope.cancel()
    assert [type(e) for e in events] == [TokenEvent] * 3 + [FinishEvent] and events[-1].reason == "length"
    st = sched.stats()
    assert (st.n_running, st.n_waiting, st.tokens_predicted_total) == (0, 0, 3)
