"""A request's events on their way out: the choices' shared channel, the event iterator that feeds
each choice's :class:`~skippy.engine.output.generation.Generation`, and its view as reply objects.

:class:`RequestEvents` only moves events (and observes the request's latency metrics and trace);
:class:`Rendered` maps its items to stream chunks; :class:`ReplyStream` is what the engine's
``*_stream`` methods return. The :class:`~skippy.actors.engine.Engine` facade makes them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs
import trio

from skippy.actors.trace import TRACE
from skippy.engine.errors import EngineError
from skippy.engine.output.generation import Done, Generation, GenerationError, Piece
from skippy.engine.scheduling.events import FinishEvent, HookEvent, SeqEvent

if TYPE_CHECKING:
    from skippy.actors.engine import Engine

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@attrs.frozen
class HookCtx:
    """Per-request hook settings: the request the policy sees, and the signal flags."""

    request: Any
    hooks: bool
    signals: bool


class ReplyStream(Protocol[T_co]):
    """What the ``*_stream`` methods return: an async iterator of reply objects (stream chunks) that can be
    closed; closing it before its end cancels the request's generations, and iteration ends there
    (``StopAsyncIteration``, as an async generator's after ``aclose()``), chunks already made or not."""

    def __aiter__(self) -> ReplyStream[T_co]: ...
    async def __anext__(self) -> T_co: ...
    async def aclose(self) -> None: ...


class ChoiceChannel:
    """Choice ``index``'s end of a request's shared event channel: what the scheduler sends it arrives
    as ``(index, event)``. The scheduler uses only ``send_nowait`` and ``statistics`` of a send channel."""

    def __init__(self, send: trio.MemorySendChannel[tuple[int, SeqEvent]], index: int) -> None:
        self._send = send
        self._index = index

    def send_nowait(self, event: SeqEvent) -> None:
        self._send.send_nowait((self._index, event))

    def statistics(self) -> trio.MemoryChannelStatistics:
        return self._send.statistics()


class RequestEvents:
    """One request's submitted sequences (its choices): their ``(choice, Piece | Done)`` items, as an async iterator.

    It only moves events: each ``(choice, SeqEvent)`` from the request's shared
    channel goes into that choice's :class:`Generation`; the items it returns
    come out. It cancels a choice's sequence when its generation asks (a stop
    string matched), and every unfinished one when it is closed before the end
    (the client went away), runs ``on_finish`` once per choice with the
    generation's :class:`FinishInfo`, and observes TTFT, ITL and end-to-end
    latency per choice (seconds, trio clock, from submission), and counts the tokens each generation
    accepts (``llamacpp:tokens_predicted_total``: the reply's, not those decoded after its stop string).
    Also observes queue wait and prefill time (from the scheduler's finish) and the finish
    reason, and fills in the :class:`RequestTrace` of the context it was made in (the first
    choice's tokens and times; completion tokens summed over the choices).

    Dropped without :meth:`aclose` (an embedder's ``break`` out of ``async
    for``), it closes itself when garbage-collected: the close is handed to the
    trio loop (``TrioToken.run_sync_soon``), as trio finalizes async generators.
    """

    def __init__(self, engine: Engine, gens: list[Generation], ctx: HookCtx | None,
                 recv: trio.MemoryReceiveChannel[tuple[int, SeqEvent]] | None,
                 send: trio.MemorySendChannel[tuple[int, SeqEvent]] | None = None,
                 dones: list[Done] | None = None) -> None:
        self._engine = engine
        self._gens = gens
        self._ctx = ctx
        self._recv = recv
        self._send = send
        self._ready: deque[tuple[int, Piece | Done]] = deque(enumerate(dones or []))
        self._reported = [dones is not None] * len(gens)  # on_finish already ran (a before_chat Stop)
        self._closed = False
        self._t_start = trio.current_time()
        self._t_last = [self._t_start] * len(gens)
        self._token = trio.lowlevel.current_trio_token()
        self._trace = TRACE.get()
        self._finish_counted = [False] * len(gens)
        if self._trace is not None:
            self._trace.prompt_tokens = len(gens[0].request.prompt)

    def __aiter__(self) -> RequestEvents:
        return self

    async def __anext__(self) -> tuple[int, Piece | Done]:
        if self._closed:  # closed: nothing more, not even items already taken (an async generator's aclose)
            raise StopAsyncIteration
        while not self._ready:
            if self._recv is None or all(gen.finished for gen in self._gens):
                raise StopAsyncIteration
            try:
                index, event = await self._recv.receive()
            except trio.EndOfChannel:  # no FinishEvent: the sequences are gone
                await self.aclose()
                raise StopAsyncIteration from None
            self._take(index, event)
        return self._ready.popleft()

    def next_nowait(self) -> tuple[int, Piece | Done] | None:
        """The next item if it is there without waiting (``None``: not yet, or the end); raises as
        ``__anext__`` does for a failed generation."""
        while not self._ready:
            if self._recv is None or self._closed or all(gen.finished for gen in self._gens):
                return None
            try:
                index, event = self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return None
            self._take(index, event)
        return self._ready.popleft()

    def _take(self, index: int, event: SeqEvent) -> None:
        item = self._feed(index, event)
        if item is not None:
            self._ready.append((index, item))

    def _feed(self, index: int, event: SeqEvent) -> Piece | Done | None:
        gen, metrics, trace = self._gens[index], self._engine.metrics, self._trace
        n, drafted = gen.completion_tokens, gen.draft_accepted
        if isinstance(event, HookEvent) and event.consult is not None and trace is not None:
            c = event.consult
            trace.consults.append((str(c.get("peer")), str(c.get("outcome")), c.get("latency_ms")))
        if isinstance(event, FinishEvent):
            metrics.queue_wait.observe(event.queue_ms / 1000.0)
            if event.prompt_ms > 0:
                metrics.prefill.observe(event.prompt_ms / 1000.0)
            if trace is not None:
                trace.prompt_tokens, trace.cached_tokens = event.prompt_tokens, event.cached_tokens
        try:
            item = gen.feed(event)
        except EngineError:
            self._finished(index, "error")
            self._report(index)
            raise
        if gen.completion_tokens != n:
            metrics.generated(gen.completion_tokens - n, gen.draft_accepted - drafted)
            now = trio.current_time()
            (metrics.itl if n else metrics.ttft).observe(now - self._t_last[index])
            self._t_last[index] = now
            if trace is not None:
                trace.completion_tokens += gen.completion_tokens - n
                if trace.t_first_token is None:
                    trace.t_first_token = now
        if gen.wants_cancel:
            self._engine.scheduler.cancel(gen.rid)  # its FinishEvent follows
        if isinstance(item, Done):
            metrics.finished(item.counts.completion_tokens, item.counts.predicted_ms)
            metrics.e2e.observe(trio.current_time() - self._t_start)
            self._finished(index, item.finish_reason)
            self._report(index)
        return item

    def _finished(self, index: int, reason: str) -> None:
        """Count a choice's finish (``skippy:finishes_total``) once, and tell the trace the first choice's."""
        if not self._finish_counted[index]:
            self._finish_counted[index] = True
            self._engine.metrics.finishes.labels(reason).inc()
            if self._trace is not None and index == 0:
                self._trace.finish_reason = reason

    def _report(self, index: int) -> None:
        if not self._reported[index]:
            self._reported[index] = True
            self._engine._on_finish(self._ctx, self._gens[index].finish_info)

    async def aclose(self) -> None:
        """Stop here: unfinished generations are cancelled (``on_finish`` says ``cancelled``)."""
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ready.clear()
        for index, gen in enumerate(self._gens):
            if not gen.finished:
                gen.abandon()
                self._finished(index, "cancelled")
                self._engine.scheduler.cancel(gen.rid)
            self._report(index)
        if self._recv is not None:
            self._recv.close()
        if self._send is not None:
            self._send.close()

    def __del__(self) -> None:
        if not self._closed:
            try:
                self._token.run_sync_soon(self._close)
            except trio.RunFinishedError:  # the engine's trio run is over: nothing left to free
                pass

    def rendered(self, head: list[T], render: Callable[[int, Piece | Done], list[T]]) -> Rendered[T]:
        """These items as reply objects: ``head`` first, then ``render(choice, item)`` for each item."""
        return Rendered(self, head, render)


class Rendered(Generic[T]):
    """An :class:`RequestEvents` mapped to reply objects (stream chunks); closing it closes the events and
    ends the iteration (the reply objects not yet read are dropped)."""

    def __init__(self, events: RequestEvents, head: list[T], render: Callable[[int, Piece | Done], list[T]]) -> None:
        self._events = events
        self._ready: deque[T] = deque(head)
        self._render = render
        self._error: EngineError | None = None  # met by ready_nowait, raised by the next __anext__
        self._closed = False

    def __aiter__(self) -> Rendered[T]:
        return self

    async def __anext__(self) -> T:
        if self._closed:
            raise StopAsyncIteration
        while not self._ready:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            self._ready.extend(self._render(*await self._events.__anext__()))
        return self._ready.popleft()

    def ready_nowait(self) -> list[T]:
        """Every reply object there is without waiting (the tokens of a multi-step run come together, and
        the HTTP layer writes them at once); a failed generation's error is raised by the next ``__anext__``."""
        out = list(self._ready)
        self._ready.clear()
        while self._error is None and not self._closed:
            try:
                item = self._events.next_nowait()
            except EngineError as exc:
                self._error = exc
                break
            if item is None:
                break
            out.extend(self._render(*item))
        return out

    async def aclose(self) -> None:
        self._closed = True
        self._ready.clear()
        self._error = None
        await self._events.aclose()


async def drain(events: RequestEvents) -> list[Done]:
    """Consume every choice to its :class:`Done` (the same parser as streaming gives the message)."""
    dones: dict[int, Done] = {}
    async with aclosing(events):
        async for index, item in events:
            if isinstance(item, Done):
                dones[index] = item
    if len(dones) != len(events._gens):
        raise GenerationError("generation ended without a result")
    return [dones[i] for i in range(len(dones))]
