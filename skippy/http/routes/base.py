"""What every route module shares: the :class:`Route` row, body decoding and limits, the access-log
line, and the SSE stream plumbing (:func:`stream`: the first chunk awaited before the headers, keep-alive
pings, the error event of a stream that failed after its headers, cancellation when the client goes away).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import attrs
import trio
from quart import Response, request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.exceptions import RequestTimeout as BodyTimeout

from skippy.actors.streams import ReplyStream
from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.protocols.base import decode_request, unknown_fields
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    SamplingFields,
)
from skippy.engine.protocols.openai.wire import ErrorEnvelope
from skippy.http.context import SERVER_ANSWER, RequestContext, Shared, current, shared
from skippy.http.logs import log_request
from skippy.http.replies import (
    SSE_DONE,
    SSE_PING,
    sse,
)
from skippy.http.settings import ServerSettings

log = logging.getLogger("skippy.http")

T = TypeVar("T")


#: a handler takes the route's path parameters as keywords (``model_id=...``)
Handler = Callable[..., Awaitable[Response]]


@attrs.frozen
class Route:
    """One route of the table.

    ``paths``: the first is documented, the rest are aliases. ``method``:
    ``"GET"``, ``"POST"`` or ``"DELETE"``. ``body``: the request Struct the handler
    decodes (``None``: no body). ``response``: the Struct of a 200 answer
    (``None``: a free-form JSON object, or text for a non-JSON
    ``content_type``). ``sse``: with ``"stream": true`` the answer is
    ``text/event-stream`` whose events carry this Struct (or one of these Structs); ``ndjson``: the answer
    may be ``application/x-ndjson``, a line each of this Struct (Ollama's streams). ``secured``: needs the
    API key when keys are set. ``documented``: listed in ``/openapi.json``. ``shape``: the 200 body is one
    ``response`` (``"one"``), a list of them (``"list"``), or either, with llama-server's ``response_fields``
    too (``"native"``: an object of the fields asked for, or a list of them). ``error``: the
    Struct of its error answers (OpenAI's envelope; Anthropic's on ``/v1/messages*``). ``body_list``: the
    body is a JSON array of ``body`` (llama-server's ``POST /lora-adapters``). Path parameters are
    written ``<name>``.
    """

    paths: tuple[str, ...]
    method: str
    handler: Handler
    summary: str
    body: type | None = None
    response: type | None = None
    content_type: str = "application/json"
    sse: type | tuple[type, ...] | None = None
    ndjson: type | None = None
    secured: bool = True
    documented: bool = True
    shape: str = "one"
    error: type = openai_wire.ErrorEnvelope
    body_list: bool = False

    @property
    def path(self) -> str:
        """The documented path."""
        return self.paths[0]

    @property
    def openapi_path(self) -> str:
        """The documented path in OpenAPI's template syntax (``/v1/models/<path:model_id>`` ->
        ``/v1/models/{model_id}``)."""
        return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", self.path)

    @property
    def path_params(self) -> list[str]:
        """Names of the path's variables (``["model_id"]``)."""
        return re.findall(r"<(?:\w+:)?(\w+)>", self.path)


# -- what the log line counts, read from engine results (dicts or msgspec Structs) ------------------

def field(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def completion_tokens(result: Any) -> int:
    """``usage.completion_tokens`` of a ``chat.completion`` / ``text_completion``."""
    return int(field(field(result, "usage"), "completion_tokens", 0))


# -- helpers of the handlers ------------------------------------------------------------------------

#: distinct unknown field names remembered for the once-per-field warning; past it new names are only
#: listed in the response header (a client sending random keys cannot grow the set without bound)
MAX_WARNED_FIELDS = 1024


async def read_body(type_: type[T], ctx: RequestContext) -> T:
    """The body decoded into ``type_`` (400 naming the field on bad input; 400 for a compressed body), read by
    :func:`body_bytes` (408, 413, the deadline).

    Unknown top-level fields are ignored, as OpenAI clients and agent
    frameworks send vendor extensions, but never silently: each is named in
    the ``X-Skippy-Ignored-Fields`` response header and, the first time the
    server sees it, in a warning log line; with ``--strict-fields`` the
    first one is a 400 naming it (OpenAI refuses unknown fields).
    """
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", "identity"):  # no route decompresses (llama-server, vLLM neither): say so, not "bad JSON"
        raise InvalidRequest(f"Content-Encoding {coding!r} is not supported: send the request body uncompressed",
                             code="unsupported_content_encoding")
    data = await body_bytes(shared(), ctx)
    ctx.body_read = True
    req = decode_request(data, type_)
    unknown = unknown_fields(data, type_)
    if unknown:
        app = shared()
        if app.settings.strict_fields:
            raise InvalidRequest(f"unknown field {unknown[0]!r} (this server refuses unknown fields: "
                                 "--strict-fields)", param=unknown[0], code="unknown_field")
        ctx.ignored_fields = unknown
        warned = app.state.warned_fields
        new = [name for name in unknown if name not in warned][:MAX_WARNED_FIELDS - len(warned)]
        if new:
            warned.update(new)
            log.warning("%s %s: ignored unknown request field(s) %s (listed in the X-Skippy-Ignored-Fields "
                        "header; logged once per field; --strict-fields refuses them)", request.method,
                        request.path, ", ".join(repr(n) for n in new))
    return req


async def body_bytes(app: Shared, ctx: RequestContext) -> bytes:
    """The request body, read as it arrives.

    Raises Werkzeug's 408 when ``--body-timeout`` seconds pass without a byte (the time between two reads, as
    nginx's ``client_body_timeout`` and llama-server's read timeout: a slow upload that keeps arriving is not cut
    short), 413 past ``--max-body-bytes`` (declared in ``Content-Length`` or counted while it streams in: Quart's
    body enforces ``MAX_CONTENT_LENGTH`` only when awaited whole), and :meth:`Shared.stopped`'s error when the
    request's deadline (``--request-timeout``, over the whole request) or the shutdown grace ends first.
    """
    settings = app.settings
    idle = settings.body_timeout
    body = request.body
    data = bytearray()
    with app.lifecycle.guard(ctx.deadline) as scope:
        while True:
            with trio.move_on_after(idle) as wait:
                try:
                    chunk = await body.__anext__()  # what arrived since the last read (Quart buffers it)
                except StopAsyncIteration:
                    break
            if wait.cancelled_caught:
                raise BodyTimeout(f"the request body stopped arriving: no byte for {idle:g} s (--body-timeout)")
            data += chunk
            if len(data) > settings.max_body_bytes:
                raise RequestEntityTooLarge()
    if scope.cancelled_caught:
        raise app.stopped()
    return bytes(data)


def check_limits(settings: ServerSettings, messages: list[Any], req: SamplingFields | None = None) -> None:
    """400 ``array_above_max_length`` / ``string_above_max_length`` past the configured limits."""
    if len(messages) > settings.max_messages:
        raise InvalidRequest(f"messages has {len(messages)} entries; this server accepts at most "
                             f"{settings.max_messages} (--max-messages)", param="messages",
                             code="array_above_max_length")
    if req is None:
        return
    chat = req if isinstance(req, ChatCompletionRequest) else None
    if chat is not None and chat.tools is not None and len(chat.tools) > settings.max_tools:
        raise InvalidRequest(f"tools has {len(chat.tools)} entries; this server accepts at most "
                             f"{settings.max_tools} (--max-tools)", param="tools", code="array_above_max_length")
    so = req.structured_outputs
    for field, value, limit, flag in (
            ("chat_template", chat.chat_template if chat is not None else None, settings.max_chat_template_bytes,
             "--max-chat-template-bytes"),
            ("grammar", req.grammar, settings.max_grammar_bytes, "--max-grammar-bytes"),
            ("guided_grammar", req.guided_grammar, settings.max_grammar_bytes, "--max-grammar-bytes"),
            ("guided_regex", req.guided_regex, settings.max_grammar_bytes, "--max-grammar-bytes"),
            ("structured_outputs.grammar", so.grammar if so else None, settings.max_grammar_bytes,
             "--max-grammar-bytes"),
            ("structured_outputs.regex", so.regex if so else None, settings.max_grammar_bytes,
             "--max-grammar-bytes")):
        if isinstance(value, str):
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > limit:
                raise InvalidRequest(f"{field} is {size} bytes; this server accepts at most {limit} ({flag})",
                                     param=field, code="string_above_max_length")


def is_anthropic_client() -> bool:
    """The request carries ``anthropic-version``, which the Anthropic SDKs send with every call: ``/v1/models``
    then answers in Anthropic's shape, its errors in Anthropic's envelope."""
    return bool(request.headers.get("anthropic-version"))


def is_anthropic_models_call() -> bool:
    """``/v1/models*`` asked by an Anthropic client (:func:`is_anthropic_client`)."""
    return request.path.startswith("/v1/models") and is_anthropic_client()


def route_rule() -> str:
    """The current request's route pattern (``/slots/<int:id_slot>``), ``unmatched`` for an unknown path:
    the metrics' ``route`` label stays bounded whatever paths clients send."""
    rule = request.url_rule
    return rule.rule if rule is not None else "unmatched"


def log_line(app: Shared, ctx: RequestContext, status: int, route: str, rule: str, *, code: str | None = None,
             reason: str | None = None, disconnected: bool = False) -> None:
    """The request's log line (:func:`~skippy.http.logs.log_request`) and its response counters.

    ``route``: ``METHOD PATH``; ``rule``: the path pattern (:func:`route_rule`); ``code`` / ``reason``:
    the error envelope's of a 4xx/5xx; ``disconnected``: the client went away before the end (no
    per-route response is counted). Works once the request context is gone (streams).
    """
    ctx.logged = True
    metrics = app.metrics()
    if metrics is not None:
        metrics.response(status)
        if not disconnected:
            metrics.route_response(route.split(" ", 1)[0], rule, status, code if status >= 400 else None)
    log_request(route, status, tokens=ctx.tokens, duration_ms=(time.perf_counter() - ctx.t0) * 1000.0,
                request_id=ctx.request_id, client=ctx.client, trace=ctx.trace, code=code, reason=reason,
                disconnected=disconnected)


@attrs.frozen
class SseFormat:
    """How :func:`stream` frames a stream: ``event(chunk)`` and ``error(exc)`` give an event's bytes, ``ping``
    is sent after ``--sse-ping-interval`` seconds without a chunk (``None``: never), ``done`` (if any) ends a
    complete stream; ``media_type`` is the response's. The default is OpenAI's: ``data:`` events, ``: ping``
    comments, ``data: [DONE]``; Ollama's NDJSON is one JSON object a line, no pings, no end marker."""

    event: Callable[[Any], bytes] = sse
    error: Callable[[EngineError], bytes] = lambda exc: sse(ErrorEnvelope.of(exc))
    ping: bytes | None = SSE_PING
    done: bytes | None = SSE_DONE
    media_type: str = "text/event-stream"


OPENAI_SSE = SseFormat()


class Translator(Protocol):
    """A sans-IO stream translation (Anthropic's ``MessageStream``, Mistral's ``FimStream``): the events one engine
    chunk becomes, and whether the last event was made."""

    done: bool

    def events(self, chunk: Any) -> list[Any]: ...


class TranslatedStream:
    """An engine chunk stream as another API's events, through a :class:`Translator`.

    Waiting for the next event may be cancelled (the ping timer of :func:`stream`) without losing one:
    events are queued, and only the wait for the next chunk is cancelled (it waits on a memory channel).
    A stream that ends before the translator's last event (no usage chunk: the generation was cut short)
    raises :class:`~skippy.engine.errors.EngineError`, so :func:`stream` ends it with an error event.
    """

    def __init__(self, chunks: ReplyStream[Any], translator: Translator) -> None:
        self._chunks = chunks
        self._translator = translator
        self._ready: deque[Any] = deque()

    def __aiter__(self) -> TranslatedStream:
        return self

    async def __anext__(self) -> Any:
        while not self._ready:
            if self._translator.done:
                raise StopAsyncIteration
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                if not self._translator.done:
                    raise EngineError("the generation ended without its final chunk") from None
                raise
            self._ready.extend(self._translator.events(chunk))
        return self._ready.popleft()

    async def aclose(self) -> None:
        await self._chunks.aclose()


NATIVE_SSE = SseFormat(done=None)  # llama-server's native /completion stream ends without [DONE]


async def stream(app: Shared, ctx: RequestContext, start: Callable[[], Awaitable[ReplyStream[Any]]],
                  fmt: SseFormat = OPENAI_SSE) -> Response:
    """SSE response; the first chunk is pulled before the headers so request errors stay 4xx (errors in the
    request raise in ``start``; a first chunk that takes longer than ``--sse-ping-interval`` sends the headers
    with a keep-alive comment, and an error after that ends the stream with its error event).

    Every wait for the next chunk runs in the request's :meth:`~skippy.http.context.Lifecycle.guard`:
    past the deadline (or the shutdown grace) the generation is cancelled, which frees its sequence,
    and the stream ends with a final error event instead of ``[DONE]``. An unexpected exception (a bug) ends
    it with the error event of a 500, logged with its traceback, rather than cutting the body.

    ``frame`` encodes a chunk as an SSE event; ``fail`` makes the final event of an error (the
    error envelope); ``done`` ends a complete stream (``None``: nothing, as llama-server's native
    ``/completion`` stream and the Responses stream). The log line's ``tokens=`` is the completion
    tokens the engine generated (the request's trace), not the events sent.
    """
    chunks: ReplyStream[Any] | None = None
    interval = app.settings.sse_ping_interval if fmt.ping is not None else 0
    ping = object()

    async def next_chunk() -> Any:
        """The next chunk, or ``ping`` when none came within ``--sse-ping-interval`` seconds (a queue wait or
        a long prefill). Cancelling the wait is safe: it waits on the sequence's memory channel."""
        assert chunks is not None
        if interval > 0:
            with trio.move_on_after(interval):
                return await chunks.__anext__()
            return ping
        return await chunks.__anext__()

    async def open_stream() -> Any:
        """The first chunk; ``ping`` when the request was accepted (``start`` raised no request error) but no
        chunk came in time: the headers then go out with a keep-alive comment, so a client or proxy does not
        time out before the first token."""
        nonlocal chunks
        chunks = await start()
        return await next_chunk()

    try:
        first = await app.guarded(ctx.deadline, open_stream())
    except BaseException:  # a client that left before the first chunk is logged by the route's view (logs_if_gone)
        if chunks is not None:
            with trio.CancelScope(shield=True):
                await chunks.aclose()
        raise
    assert chunks is not None
    route, rule = f"{request.method} {request.path}", route_rule()  # the request context is gone while streaming
    lifecycle = app.lifecycle
    ready = getattr(chunks, "ready_nowait", None)  # the chunks there without waiting, written together

    async def events() -> AsyncIterator[bytes]:
        status = 200
        code = reason = None
        disconnected = False
        try:
            yield (fmt.ping or b"") if first is ping else fmt.event(first)
            while True:
                chunk = None
                with lifecycle.guard(ctx.deadline) as scope:
                    try:
                        chunk = await next_chunk()
                    except StopAsyncIteration:
                        pass
                if chunk is ping:
                    yield fmt.ping or b""
                    continue
                if scope.cancelled_caught:
                    error = app.stopped()
                    status, code, reason = error.status, error.code or error.type, str(error)
                    yield fmt.error(error)
                    return
                if chunk is None:
                    break
                batch = [chunk, *ready()] if ready is not None else [chunk]
                yield b"".join(map(fmt.event, batch))
            if fmt.done is not None:
                yield fmt.done
        except EngineError as exc:
            status, code, reason = exc.status, exc.code or exc.type, str(exc)
            yield fmt.error(exc)
        except Exception as exc:  # a bug: the stream still ends with an error event (as a 500 would be sent)
            log.exception("unhandled error in the stream of %s", route)
            error = EngineError(f"internal error: {type(exc).__name__}")
            status, code, reason = 500, error.type, str(error)
            yield fmt.error(error)
        except (trio.Cancelled, GeneratorExit):  # the client went away (GeneratorExit: while a send to a client
            # that stopped reading was blocked, the server closed the body)
            status = 499
            disconnected = True
            raise
        finally:
            await chunks.aclose()
            ctx.tokens = ctx.trace.completion_tokens  # tokens, not events (a burst of tokens can be one chunk)
            log_line(app, ctx, status, route, rule, code=code, reason=reason, disconnected=disconnected)

    response = Response(events(), status=200, mimetype=fmt.media_type,
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    response.timeout = None
    response.logs_itself = True  # type: ignore[attr-defined]  # its line comes when the stream ends (http.app._log)
    return response


def logs_if_gone(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``handler`` (a route's), whose request gets its log line (status 499) and counts as a client disconnect
    when it is cancelled before any line was written: the client went away while the handler waited (its
    model's load under ``--max-loaded``, the queue, a prefill, a non-streamed generation); the line's
    ``tokens=`` is what was generated by then. A stream's body, sent once the handler returned, logs its own
    line (:func:`stream`). When the HTTP server answered the request itself because its body broke HTTP/1.1's
    framing (a malformed chunk: :data:`~skippy.http.context.SERVER_ANSWER`), the line and counters are that
    answer's (400 and why), not a disconnect's."""
    @functools.wraps(handler)
    async def view(*args: Any, **kwargs: Any) -> Any:
        try:
            return await handler(*args, **kwargs)
        except trio.Cancelled:
            ctx = current()
            if not ctx.logged:
                ctx.tokens = ctx.trace.completion_tokens
                route = f"{request.method} {request.path}"
                state: dict[str, Any] = request.scope.get("state") or {}
                answered = state.get(SERVER_ANSWER)
                if answered is not None:
                    status, code, reason = answered
                    log_line(shared(), ctx, status, route, route_rule(), code=code, reason=reason)
                else:
                    log_line(shared(), ctx, 499, route, route_rule(), disconnected=True)
            raise

    return view


async def unless_gone(app: Shared, ctx: RequestContext, work: Awaitable[Any]) -> Any:
    """``app.guarded(ctx.deadline, work)``; a client that disconnects first (the handler is cancelled) gets
    the log line with status 499 and is counted as a disconnect, not as a 4xx (nginx's 499), from the route's
    view (:func:`logs_if_gone`)."""
    return await app.guarded(ctx.deadline, work)
