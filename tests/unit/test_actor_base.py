"""DedicatedThread: every call on one OS thread, results and exceptions delivered to the caller."""

import threading

import pytest
import trio

from skippy.actors.base import DedicatedThread


async def test_calls_run_in_order_on_one_thread_and_errors_propagate() -> None:
    thread = DedicatedThread("test-dedicated")
    try:
        idents = [await thread.run_sync(threading.get_ident) for _ in range(5)]
        assert len(set(idents)) == 1 and idents[0] != threading.get_ident()
        assert await thread.run_sync(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            await thread.run_sync(lambda: 1 / 0)
        # a cancelled caller still waits for its running call (like trio.to_thread.run_sync)
        done = threading.Event()
        with trio.move_on_after(0.01):
            await thread.run_sync(lambda: (threading.Event().wait(0.2), done.set()))
        assert done.is_set()
    finally:
        thread.close()
