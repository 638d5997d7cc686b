"""A small base for actors that run blocking work in worker threads.

A message is an attrs object with a ``reply`` field (a trio memory send
channel). The actor reads its inbox, runs :meth:`ThreadActor.handle` for
each message in a worker thread (at most ``max_threads`` at once), and
sends back an ``outcome.Outcome`` (the value or the exception), so errors
raised in the worker reach the requester unchanged.
"""

from __future__ import annotations

from typing import Any

import outcome
import trio


class ThreadActor:
    """Serve messages concurrently, each in a worker thread."""

    def __init__(self, max_threads: int = 2) -> None:
        self._limiter = trio.CapacityLimiter(max_threads)
        self._send, self._inbox = trio.open_memory_channel[Any](256)

    def handle(self, msg: Any) -> Any:  # pragma: no cover - abstract
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

    async def ask(self, make_msg: Any) -> Any:
        """Send ``make_msg(reply_channel)`` and await the result (re-raising errors)."""
        send, recv = trio.open_memory_channel[Any](1)
        async with recv:
            await self._send.send(make_msg(send))
            result = await recv.receive()
        return result.unwrap()
