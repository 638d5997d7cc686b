"""The actor convention, written once.

An actor is one trio task (:meth:`Actor.run`) that owns its state and reads
typed messages from its own inbox, a trio memory channel
(``MemorySendChannel[M]``, as ``trio/_channel.py`` types them). Others hold
only the send side (:attr:`Actor.inbox`) and never touch the actor's state;
a message that needs an answer carries its own reply channel. The message
types of an actor form a union handled with ``match`` and ``assert_never``.

:class:`ThreadActor` is the actor for blocking work (tokenizing, template
rendering): each message's :meth:`~ThreadActor.handle` runs in a worker
thread (at most ``max_threads`` at once) and its ``outcome.Outcome`` (the
value or the exception) goes back on the message's ``reply`` channel, so
errors raised in the worker reach the requester unchanged.
"""

from __future__ import annotations

import math
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import outcome
import trio

M = TypeVar("M")
R = TypeVar("R")


class Actor(Generic[M]):
    """Base of every actor: a typed inbox of ``buffer`` messages (``math.inf``: never full).

    Subclasses implement :meth:`run`, the actor's task, started in a nursery
    (``nursery.start_soon(actor.run)``) and run until cancelled or until the
    inbox closes.
    """

    def __init__(self, buffer: float = math.inf) -> None:
        self._send, self._inbox = trio.open_memory_channel[M](buffer)

    @property
    def inbox(self) -> trio.MemorySendChannel[M]:
        """The send side of the inbox, for other actors and request tasks."""
        return self._send

    async def run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Reply(Protocol[R]):
    """A message to a :class:`ThreadActor`: anything with a ``reply`` send channel."""

    reply: trio.MemorySendChannel[outcome.Outcome[R]]


class ThreadActor(Actor[M]):
    """Serve messages concurrently, each in a worker thread (``trio.to_thread.run_sync``)."""

    def __init__(self, max_threads: int = 2) -> None:
        super().__init__(256)
        self._limiter = trio.CapacityLimiter(max_threads)

    def handle(self, msg: M) -> Any:  # pragma: no cover - abstract
        """Do the blocking work of ``msg`` (in a worker thread); return the answer or raise."""
        raise NotImplementedError

    async def run(self) -> None:
        """The actor's task: serve the inbox until cancelled."""
        async with trio.open_nursery() as nursery:
            async for msg in self._inbox:
                nursery.start_soon(self._serve, msg)

    async def _serve(self, msg: Any) -> None:
        result = await trio.to_thread.run_sync(outcome.capture, self.handle, msg, limiter=self._limiter)
        try:
            msg.reply.send_nowait(result)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the requester went away

    async def ask(self, make_msg: Callable[[trio.MemorySendChannel[Any]], M]) -> Any:
        """Send ``make_msg(reply_channel)`` and await the answer (re-raising the worker's error)."""
        send, recv = trio.open_memory_channel[outcome.Outcome[Any]](1)
        async with recv:
            await self._send.send(make_msg(send))
            result = await recv.receive()
        return result.unwrap()


class DedicatedThread:
    """One long-lived OS thread that runs blocking calls in order (``await run_sync(fn, *args)``).

    llama.cpp's CPU backend (built with OpenMP) keeps a thread team per
    calling thread; calling ``llama_decode`` from whichever thread trio's
    thread cache hands out leaves idle teams that compete for the cores:
    measured on 2 cores, a 16-sequence decode ran at 77-98 tok/s from
    changing threads and 123-130 tok/s from one persistent thread. The
    decode scheduler therefore runs every step on this thread.

    Not cancellable once submitted (like ``trio.to_thread.run_sync``): a
    cancelled caller waits for the call to finish, then sees ``Cancelled``
    at its next checkpoint. :meth:`close` ends the thread after queued calls. ``nice``: the thread's
    niceness, raised before its first call (0: the process's), so its work yields the cores to others.
    """

    def __init__(self, name: str, nice: int = 0) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._nice = nice
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        if self._nice:  # this thread's niceness (Linux: per thread); threads it starts (OpenMP's) inherit it
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
            except (AttributeError, OSError):
                pass
        while (job := self._jobs.get()) is not None:
            job()

    async def run_sync(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the thread; return its value or re-raise its exception."""
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()

        def job() -> None:
            result = outcome.capture(fn, *args)
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        self._jobs.put(job)
        return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    def close(self) -> None:
        """Stop the thread once the queued calls are done (does not wait)."""
        self._jobs.put(None)
