"""``/v1/responses``: OpenAI Responses translated onto the chat path
(:mod:`skippy.engine.protocols.responses`), stored responses by id.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs
from quart import Response

from skippy.actors.streams import ReplyStream
from skippy.engine.errors import EngineError
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.responses import translate as rapi
from skippy.engine.protocols.responses import wire as rwire
from skippy.engine.protocols.responses.types import ResponsesRequest
from skippy.engine.routing import AUTO, is_auto
from skippy.http.context import Shared, current, shared
from skippy.http.replies import (
    json_response,
    sse_event,
)
from skippy.http.routes.base import (
    SseFormat,
    check_limits,
    completion_tokens,
    read_body,
    stream,
    unless_gone,
)

# -- /v1/responses: OpenAI Responses translated onto the chat path (skippy.engine.protocols.responses.translate) ------

async def _reasoning_tokens(eng: Any, text: str) -> int:
    """Tokens of the reasoning text (``usage.output_tokens_details.reasoning_tokens``)."""
    return len(await eng.tokenizer.tokenize(text, add_special=False, parse_special=False)) if text else 0


class _ResponseStream:
    """The Responses events of one streamed turn over the engine's chat chunks; the response is stored
    when it ends (``store``).

    Cancel-safe like the chat stream (``stream`` cancels a wait for a keep-alive ping): a cancelled
    :meth:`__anext__` loses nothing, the events of a chunk wait in ``pending``, the usage chunk in ``usage``.
    """

    def __init__(self, app: Shared, eng: Any, turn: rapi.Turn, events: rapi.ResponseEvents,
                 chunks: ReplyStream[openai_wire.ChatCompletionChunk]) -> None:
        self.app, self.eng, self.turn, self.events, self.chunks = app, eng, turn, events, chunks
        self.pending = deque(events.start())
        self.usage: openai_wire.Usage | None = None
        self.ended = False

    def __aiter__(self) -> _ResponseStream:
        return self

    async def __anext__(self) -> rwire.ResponseStreamEvent:
        while not self.pending:
            if self.ended:
                raise StopAsyncIteration
            if self.usage is None:
                chunk = await self.chunks.__anext__()
                if chunk.usage is wire.UNSET:
                    self.pending.extend(self.events.feed(chunk))
                    continue
                self.usage = chunk.usage
            n = await _reasoning_tokens(self.eng, self.events.reasoning_text)
            self.pending.extend(self.events.finish(self.usage, reasoning_tokens=n))
            self.ended = True
            if self.turn.request.store and self.events.final is not None:
                self.app.responses.put(self.turn.stored(self.events.final))
        return self.pending.popleft()

    async def aclose(self) -> None:
        await self.chunks.aclose()


def _response_event(event: rwire.ResponseStreamEvent) -> bytes:
    return sse_event(event.type, event)


async def responses_create() -> Response:
    app, ctx = shared(), current()
    req = await read_body(ResponsesRequest, ctx)
    previous = (app.responses.get(req.previous_response_id, param="previous_response_id")
                if req.previous_response_id is not None else None)
    if is_auto(req.model):  # the chosen model depends on the translated request (its tools)
        turn = rapi.prepare(req, previous, model=AUTO)
        eng, chat = await app.routed(turn.chat)
        turn = attrs.evolve(turn, model=eng.reply_model(chat.model), chat=chat)
    else:
        eng = await app.engine_for(req.model)
        turn = rapi.prepare(req, previous, model=eng.reply_model(req.model))
    try:
        check_limits(app.settings, turn.chat.messages, turn.chat)
        if req.stream:
            events = rapi.ResponseEvents(turn)

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
    message = result.choices[0].message
    reasoning = message.reasoning_content if message.reasoning_content is not wire.UNSET else ""
    response = turn.from_chat(result, reasoning_tokens=await _reasoning_tokens(eng, reasoning))
    if req.store:
        app.responses.put(turn.stored(response))
    return json_response(response)


async def responses_get(response_id: str) -> Response:
    return json_response(shared().responses.get(response_id, param="response_id").response)


async def responses_delete(response_id: str) -> Response:
    shared().responses.delete(response_id)
    return json_response(rwire.ResponseDeleted(id=response_id))
