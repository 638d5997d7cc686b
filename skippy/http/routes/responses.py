"""``/v1/responses``: OpenAI Responses translated onto the chat path
(:mod:`skippy.engine.protocols.responses`), stored responses by id (``--responses-store``), their
``input_items``, background responses and ``cancel``.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any

import attrs
import msgspec
import trio
from quart import Response, current_app, request

from skippy.actors.pool import Lease
from skippy.actors.store import StoreUnavailable
from skippy.actors.streams import ReplyStream
from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.responses import translate as rapi
from skippy.engine.protocols.responses import wire as rwire
from skippy.engine.protocols.responses.events import ResponseEvents
from skippy.engine.protocols.responses.store import (
    DEFAULT_LIST_LIMIT,
    UNFINISHED,
    StoredResponse,
    page_of_items,
    settled,
)
from skippy.engine.protocols.responses.types import ResponsesRequest
from skippy.engine.routing import AUTO, is_auto
from skippy.http.context import LEASES, Shared, current, shared
from skippy.http.replies import (
    json_response,
    sse_event,
)
from skippy.http.routes.base import (
    SseFormat,
    check_limits,
    completion_tokens,
    log,
    read_body,
    stream,
    unless_gone,
)

# -- /v1/responses: OpenAI Responses translated onto the chat path (skippy.engine.protocols.responses.translate) ------

async def _reasoning_tokens(eng: Any, text: str) -> int:
    """Tokens of the reasoning text (``usage.output_tokens_details.reasoning_tokens``)."""
    return len(await eng.tokenizer.tokenize(text, add_special=False, parse_special=False)) if text else 0


class _ResponseStream:
    """The Responses events of one streamed turn over the engine's chat chunks.

    A stored one (``store``) is visible from its start, as a background response is: its ``in_progress``
    response is stored before ``response.created`` is sent, and its end when it ends, before its last event
    is sent: ``completed`` / ``incomplete``, ``cancelled`` (:meth:`cancel`, or a client that went away
    before the end) or ``failed`` (the deadline, the server shutting down, a runtime failure), each with the
    output so far; the end is not stored over a response deleted meanwhile or cancelled through the store
    (another replica's ``/cancel``). One that a killed server left ``in_progress`` reads ``failed`` later
    (:func:`~skippy.engine.protocols.responses.store.settled`).

    Cancel-safe like the chat stream (``stream`` cancels a wait for a keep-alive ping): a cancelled
    :meth:`__anext__` loses nothing, the events of a chunk wait in ``pending``, the usage chunk in ``usage``.
    :meth:`cancel` (``POST /v1/responses/{id}/cancel``) ends it with the output so far, status ``cancelled``.
    """

    def __init__(self, app: Shared, eng: Any, turn: rapi.Turn, events: ResponseEvents,
                 chunks: ReplyStream[openai_wire.ChatCompletionChunk]) -> None:
        self.app, self.eng, self.turn, self.events, self.chunks = app, eng, turn, events, chunks
        self.pending = deque(events.start())
        self.usage: openai_wire.Usage | None = None
        self.ended = False
        self.cancel_requested = False
        self._reading: trio.CancelScope | None = None
        self._started = False  # its in_progress response stored (or tried: the store failed)
        self._start_stored = False  # the store holds its in_progress response
        self._end_stored = False  # its end stored (or nothing to store): done once
        app.running.add(turn.id, self.cancel)

    def __aiter__(self) -> _ResponseStream:
        return self

    def cancel(self) -> None:
        """Stop reading chunks; the stream ends with the output so far (``cancelled``)."""
        self.cancel_requested = True
        if self._reading is not None:
            self._reading.cancel()

    async def _next_chunk(self) -> openai_wire.ChatCompletionChunk | None:
        """The next chunk, ``None`` once :meth:`cancel` was called (the chunk stream is cancel-safe)."""
        with trio.CancelScope() as self._reading:
            if not self.cancel_requested:
                return await self.chunks.__anext__()
        self._reading = None
        return None

    async def __anext__(self) -> rwire.ResponseStreamEvent:
        if not self._started:  # before response.created: a client that sees the id can GET it
            self._started = True
            if self.turn.request.store:
                self._start_stored = await self.app.responses.put(
                    self.turn.stored(self.turn.response([], "in_progress")))
        while not self.pending:
            if self.ended:
                raise StopAsyncIteration
            if self.usage is None:
                chunk = await self._next_chunk()
                if chunk is None:  # cancelled
                    self.pending.append(self.events.cancelled())
                    await self._end()
                    break
                if chunk.usage is wire.UNSET:
                    self.pending.extend(self.events.feed(chunk))
                    continue
                self.usage = chunk.usage
            n = await _reasoning_tokens(self.eng, self.events.reasoning_text)
            self.pending.extend(self.events.finish(self.usage, reasoning_tokens=n))
            await self._end()
        return self.pending.popleft()

    async def _end(self) -> None:
        self.ended = True
        await self._store_end()

    async def _store_end(self) -> None:
        """Store the stream's end once (shielded: a client going away does not cut it), then tell
        ``running`` (a cancel waiting for it reads the end): :attr:`ResponseEvents.final`, or, for a stream
        that ended without an end of its own (the client went away), ``cancelled`` with the output so far."""
        if self._end_stored:
            return
        self._end_stored = True
        try:
            if self.turn.request.store and self._started:
                final = self.events.final
                if final is None:
                    self.events.cancelled()
                    final = self.events.final
                assert final is not None
                with trio.CancelScope(shield=True):
                    if self._start_stored:
                        await _store_end(self.app, self.turn, final)
                    else:
                        await self.app.responses.put(self.turn.stored(final))
        finally:
            self.app.running.done(self.turn.id)

    async def aclose(self) -> None:
        try:
            await self.chunks.aclose()
        finally:
            await self._store_end()


def _response_event(event: rwire.ResponseStreamEvent) -> bytes:
    return sse_event(event.type, event)


async def responses_create() -> Response:
    app, ctx = shared(), current()
    req = await read_body(ResponsesRequest, ctx)
    previous = (_settled(app, await app.responses.get(req.previous_response_id, param="previous_response_id"))
                if req.previous_response_id is not None else None)
    if previous is not None and previous.response.status in UNFINISHED:  # a failed one (settled) continues
        raise InvalidRequest(f"previous_response_id: response {previous.id!r} is {previous.response.status}; "
                             "continue it once it has finished (poll GET /v1/responses/{id})",
                             param="previous_response_id")
    if req.background and app.responses.store.max_size == 0:
        raise InvalidRequest("background: true needs a response store that keeps responses; this server keeps "
                             "none (--responses-store-size 0)", param="background")
    if is_auto(req.model):  # the chosen model depends on the translated request (its tools)
        turn = rapi.prepare(req, previous, model=AUTO)
        eng, chat = await app.routed(turn.chat)
        turn = attrs.evolve(turn, model=eng.reply_model(chat.model), chat=chat)
    else:
        eng = await app.engine_for(req.model)
        turn = rapi.prepare(req, previous, model=eng.reply_model(req.model))
    if turn.tools.ignored:  # one line per request: the client asked for tools the model will not see
        log.warning("POST /v1/responses: ignored hosted tool type(s) %s: this server runs function and custom tools "
                    "only, so the model does not see them (a tool_choice forcing one is refused)",
                    ", ".join(turn.tools.ignored))
    if turn.tools.unenforced:
        log.warning("POST /v1/responses: custom tool(s) %s have a Lark grammar: the model is shown it, the "
                    "grammar does not hold the input (a regex format does)", ", ".join(turn.tools.unenforced))
    try:
        check_limits(app.settings, turn.chat.messages, turn.chat)
        if req.truncation == "auto":
            turn = await _truncated(eng, turn)
        if req.background:
            return await _start_background(app, eng, turn)
        if req.stream:
            events = ResponseEvents(turn)

            async def start() -> ReplyStream[Any]:
                try:
                    return _ResponseStream(app, eng, turn, events, await eng.chat_stream(turn.chat))
                except EngineError as exc:
                    raise turn.rename(exc) from None

            return await stream(app, ctx, start, SseFormat(
                event=_response_event, error=lambda exc: _response_event(events.failed(exc)), done=None))
        result = await unless_gone(app, ctx, eng.chat(turn.chat))
    except EngineError as exc:
        raise turn.rename(exc) from None
    ctx.tokens = completion_tokens(result)
    response = await _from_chat(eng, turn, result)
    if req.store:
        await app.responses.put(turn.stored(response))
    return json_response(response)


async def _truncated(eng: Any, turn: rapi.Turn) -> rapi.Turn:
    """``truncation: "auto"``: ``turn`` with the fewest first items of its conversation dropped for it to fit the
    context (:func:`~skippy.engine.protocols.responses.translate.truncation_search`; each try's prompt rendered and
    tokenized as the chat path counts it, :meth:`~skippy.actors.engine.Engine.input_tokens`); ``turn`` itself
    when it fits. An error of a try names the items as that try has them."""
    cuts = rapi.truncation_cuts(turn.history + turn.input)
    if len(cuts) < 2:
        return turn
    search = rapi.truncation_search(cuts, eng.limits.n_ctx, turn.request.max_output_tokens)
    try:
        drop = next(search)
        while True:
            tried = turn.truncated(drop) if drop else turn
            try:
                n_prompt = await eng.input_tokens(tried.chat)
            except EngineError as exc:
                raise tried.rename(exc) from None
            drop = search.send(n_prompt)
    except StopIteration as done:
        drop = done.value
    if drop:
        log.info("POST /v1/responses: truncation auto dropped the first %d of %d items to fit the context (%d "
                 "tokens)", drop, len(turn.history) + len(turn.input), eng.limits.n_ctx)
    return turn.truncated(drop) if drop else turn


async def _from_chat(eng: Any, turn: rapi.Turn, result: openai_wire.ChatCompletion) -> rwire.ResponseObject:
    message = result.choices[0].message
    reasoning = message.reasoning_content if message.reasoning_content is not wire.UNSET else ""
    return turn.from_chat(result, reasoning_tokens=await _reasoning_tokens(eng, reasoning))


# -- background responses ---------------------------------------------------------------------------------

async def _start_background(app: Shared, eng: Any, turn: rapi.Turn) -> Response:
    """Store the ``queued`` response, start its generation in the app's nursery, answer it at once.

    The request is checked first as a foreground one would be (a model that cannot generate; the messages,
    tools and images rendered and tokenized, images not encoded), so bad input is a 400 now, not a ``failed``
    response later. The models the request holds (:data:`~skippy.http.context.LEASES`) pass to the
    generation, released when it ends.
    """
    eng.require_generation()
    await eng.input_tokens(turn.chat)
    queued = turn.response([], "queued")
    if not await app.responses.put(turn.stored(queued)):
        raise StoreUnavailable("background: the response store is unavailable, so the result could not be "
                               "fetched later; retry, or create the response without background")
    leases = LEASES.get()
    held = list(leases or ())
    if leases is not None:
        leases.clear()
    scope = trio.CancelScope()
    app.running.add(turn.id, scope.cancel)
    current_app.add_background_task(_run_background, app, eng, turn, scope, held)
    return json_response(queued)


async def _run_background(app: Shared, eng: Any, turn: rapi.Turn, scope: trio.CancelScope,
                          held: list[Lease]) -> None:
    """Generate a background response and store its end: ``completed`` / ``incomplete``, ``failed`` (an
    engine error, the server shutting down) or ``cancelled``; a response cancelled through the store
    (another replica's ``/cancel``) stays cancelled."""
    response: rwire.ResponseObject | None = None
    try:
        with scope:
            await app.responses.put(turn.stored(turn.response([], "in_progress")))
            try:
                timeout = app.settings.request_timeout
                with trio.fail_after(timeout) if timeout > 0 else contextlib.nullcontext():
                    response = await _from_chat(eng, turn, await eng.chat(turn.chat))
            except trio.TooSlowError:
                response = turn.response([], "failed", error=rwire.ResponseError(
                    code="server_error", message=f"the response took longer than --request-timeout {timeout:g} s"))
            except EngineError as exc:
                exc = turn.rename(exc)
                response = turn.response([], "failed", error=rwire.ResponseError(
                    code="server_error" if exc.status >= 500 else "invalid_prompt", message=exc.message))
        if scope.cancelled_caught:
            response = turn.response([], "cancelled")
    except trio.Cancelled:  # the server shuts down
        response = turn.response([], "failed", error=rwire.ResponseError(
            code="server_error", message="the server shut down before this background response finished"))
        raise
    finally:
        for lease in held:
            lease.release()
        with trio.CancelScope(shield=True):
            if response is not None:
                await _store_end(app, turn, response)
        app.running.done(turn.id)  # after the store: a cancel or delete waiting for it sees the end


async def _store_end(app: Shared, turn: rapi.Turn, response: rwire.ResponseObject) -> None:
    """Store a background or streamed response's end, unless it was deleted meanwhile or cancelled through
    the store (another replica's ``/cancel``)."""
    try:
        stored = await app.responses.get(turn.id)
    except EngineError:
        return  # deleted meanwhile (or the store cannot be read: it could not be written either)
    if response.status != "cancelled" and stored.response.status == "cancelled":
        return
    await app.responses.put(turn.stored(response))


def _settled(app: Shared, stored: StoredResponse) -> StoredResponse:
    """``stored`` as GET, cancel and ``previous_response_id`` read it (:func:`~.store.settled`): one left
    ``queued`` / ``in_progress`` by a server that stopped reads ``failed``."""
    return settled(stored, running=stored.id in app.running, timeout=app.settings.request_timeout, now=time.time())


# -- stored responses ---------------------------------------------------------------------------------------

async def responses_get(response_id: str) -> Response:
    """``GET /v1/responses/{id}``; ``?stream=true`` (resuming a background stream) is a 400: not served."""
    if request.args.get("stream", "").lower() in ("true", "1"):
        raise InvalidRequest("stream: resuming a response's event stream is not supported by this server; GET it "
                             "without stream (poll) instead", param="stream")
    app = shared()
    return json_response(_settled(app, await app.responses.get(response_id, param="response_id")).response)


async def responses_delete(response_id: str) -> Response:
    """``DELETE /v1/responses/{id}``: forget it; a response still generated on this server is stopped first."""
    app = shared()
    await app.running.stop(response_id)
    await app.responses.delete(response_id)
    return json_response(rwire.ResponseDeleted(id=response_id))


def _int_arg(name: str, default: int) -> int:
    value = request.args.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer, got {value!r}", param=name) from None


async def responses_input_items(response_id: str) -> Response:
    """``GET /v1/responses/{id}/input_items``: one page of the stored response's input items (the earlier
    turns' items and this request's input; ``after``, ``limit`` 1-100 (20), ``order`` ``asc`` / ``desc``
    (``desc``), OpenAI's list)."""
    stored = await shared().responses.get(response_id, param="response_id")
    page, more = page_of_items(stored, after=request.args.get("after"), limit=_int_arg("limit", DEFAULT_LIST_LIMIT),
                               order=request.args.get("order", "desc"))
    data = [rapi.listed_item(item) for item in page]
    return json_response(rwire.ResponseItemList(data=data, first_id=data[0]["id"] if data else None,
                                                last_id=data[-1]["id"] if data else None, has_more=more))


async def responses_cancel(response_id: str) -> Response:
    """``POST /v1/responses/{id}/cancel``: stop a background or streamed response (OpenAI cancels background
    ones only; a stream here too). Its stored status becomes ``cancelled`` with the output so far.

    A response running on this server is stopped; one ``queued`` or ``in_progress`` in the store but
    not running here (another replica's, or a server that stopped) is marked ``cancelled`` in the store.
    Cancelling a cancelled response returns it again; a finished one (``completed``, ``incomplete``,
    ``failed``) is a 400 naming its status; an unknown id a 404.
    """
    app = shared()
    if await app.running.stop(response_id):  # the generation stored its cancelled end: return that
        return json_response((await app.responses.get(response_id, param="response_id")).response)
    stored = _settled(app, await app.responses.get(response_id, param="response_id"))
    status = stored.response.status
    if status == "cancelled":
        return json_response(stored.response)
    if status not in ("queued", "in_progress"):
        raise InvalidRequest(f"Response {response_id!r} cannot be cancelled: its status is {status!r} "
                             "(only queued and in_progress responses can be)", param="response_id")
    response = msgspec.structs.replace(stored.response, status="cancelled")
    await app.responses.put(attrs.evolve(stored, response=response))
    return json_response(response)
