"""``/v1/messages`` and ``/v1/messages/count_tokens``: Anthropic Messages, a translation onto the chat
path (:mod:`skippy.engine.protocols.anthropic`), with Anthropic's SSE events and error shape.
"""

from __future__ import annotations

from typing import Any

from quart import Response

from skippy.actors.streams import ReplyStream
from skippy.engine.errors import EngineError
from skippy.engine.protocols.anthropic import translate as anthropic
from skippy.engine.protocols.anthropic import wire as anthropic_wire
from skippy.engine.protocols.anthropic.types import CountTokensRequest, MessagesRequest
from skippy.http.context import current, shared
from skippy.http.replies import (
    json_response,
    sse,
)
from skippy.http.routes.base import (
    SseFormat,
    TranslatedStream,
    check_limits,
    completion_tokens,
    log,
    read_body,
    stream,
    unless_gone,
)

# -- Anthropic Messages: a translation onto the chat path (skippy.engine.protocols.anthropic) ---------------------

#: the paths whose answers, errors included, are in Anthropic's shapes
ANTHROPIC_PATH = "/v1/messages"


def is_anthropic_path(path: str) -> bool:
    """``/v1/messages`` and everything under it (their errors are Anthropic envelopes)."""
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


def _anthropic_event(event: Any) -> bytes:
    """One Anthropic SSE event: ``event: <type>`` and ``data: <json>``."""
    return b"event: " + type(event).__struct_config__.tag.encode() + b"\n" + sse(event)


def _anthropic_error(exc: EngineError) -> bytes:
    return _anthropic_event(anthropic.error_for(exc.status, exc.message)[1])


ANTHROPIC_SSE = SseFormat(
    event=_anthropic_event, error=_anthropic_error, ping=_anthropic_event(anthropic_wire.PingEvent()), done=None)


async def messages() -> Response:
    """Anthropic ``POST /v1/messages``: the body becomes a chat request (one generation path), the chat
    completion (or its chunk stream) becomes an Anthropic ``message`` (or its events)."""
    app, ctx = shared(), current()
    req = await read_body(MessagesRequest, ctx)
    chat = anthropic.to_chat_request(req)
    if left := anthropic.server_tools(req):  # one line per request: tools the model will not see
        log.warning("POST /v1/messages: left out server tool(s) %s: they run on Anthropic's servers, so the model "
                    "does not see them", ", ".join(left))
    check_limits(app.settings, req.messages, chat)
    eng, chat = await app.routed(chat)  # model "auto": the chosen model's id, hooks on
    stops = req.stop_sequences
    if req.stream:
        async def start() -> ReplyStream[Any]:
            try:
                chunks = await eng.chat_stream(chat)
            except EngineError as exc:
                raise anthropic.restate_error(exc, req, chat) from None
            # the engine has counted the prompt by now (the trace is filled when the sequence is submitted)
            return TranslatedStream(chunks, anthropic.MessageStream(input_tokens=ctx.trace.prompt_tokens,
                                                                  stop_sequences=stops))
        return await stream(app, ctx, start, ANTHROPIC_SSE)
    try:
        result = await unless_gone(app, ctx, eng.chat(chat))
    except EngineError as exc:
        raise anthropic.restate_error(exc, req, chat) from None
    ctx.tokens = completion_tokens(result)
    return json_response(anthropic.to_message(result, stops))


async def count_tokens() -> Response:
    """Anthropic ``POST /v1/messages/count_tokens``: the prompt ``/v1/messages`` would prefill, in tokens."""
    app, ctx = shared(), current()
    req = await read_body(CountTokensRequest, ctx)
    chat = anthropic.to_chat_request(req)
    check_limits(app.settings, req.messages, chat)
    eng, chat = await app.routed(chat)
    try:
        n = await app.guarded(ctx.deadline, eng.input_tokens(chat))
    except EngineError as exc:
        raise anthropic.restate_error(exc, req, chat) from None
    return json_response(anthropic_wire.MessageTokensCount(input_tokens=n))
