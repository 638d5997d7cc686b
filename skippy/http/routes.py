"""The routes: one table (:data:`ROUTES`) that registers them on :data:`blueprint` and documents them.

Each :class:`Route` names its paths (the first is the one documented in
``/openapi.json``; the others are aliases, e.g. ``/chat/completions``
beside ``/v1/chat/completions`` as llama-server and vLLM accept), its
method, its handler, and for :mod:`skippy.http.openapi` its summary,
request body Struct, response Struct and content type. Public routes
(``secured=False``) need no API key.

Handlers are module-level and thin: decode the body into a msgspec Struct
(:func:`~skippy.engine.protocols.base.decode_request`, 400 on bad input), call the
:class:`~skippy.actors.engine.Engine` within the request's deadline and the
shutdown grace (:meth:`~skippy.http.context.Shared.guarded`), encode the
result. App-wide state comes from :func:`~skippy.http.context.shared`, the
request's own from :func:`~skippy.http.context.current`.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio
from quart import Blueprint, Response, request

from skippy.engine.errors import DeviceLost, EngineError, InvalidRequest, NotSupported
from skippy.engine.protocols.anthropic import translate as anthropic
from skippy.engine.protocols.anthropic import wire as anthropic_wire
from skippy.engine.protocols.anthropic.types import CountTokensRequest, MessagesRequest
from skippy.engine.protocols.base import decode_request, unknown_fields
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.llama_server.types import (
    ApplyTemplateRequest,
    DetokenizeRequest,
    InfillRequest,
    NativeCompletionRequest,
    SlotActionRequest,
    TokenizeRequest,
)
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    SamplingFields,
)
from skippy.engine.protocols.openai.wire import ErrorEnvelope
from skippy.engine.protocols.responses import translate as rapi
from skippy.engine.protocols.responses import wire as rwire
from skippy.engine.protocols.responses.types import ResponsesRequest
from skippy.http.context import RequestContext, Shared, ShuttingDown, current, shared
from skippy.http.logs import log_request
from skippy.http.replies import (
    SSE_DONE,
    SSE_PING,
    engine_error_response,
    error_response,
    json_response,
    sse,
    sse_event,
)
from skippy.http.settings import ServerSettings

log = logging.getLogger("skippy.http")

Handler = Callable[[], Awaitable[Response]]


@attrs.frozen
class Route:
    """One route of the table.

    ``paths``: the first is documented, the rest are aliases. ``method``:
    ``"GET"``, ``"POST"`` or ``"DELETE"``. ``body``: the request Struct the handler
    decodes (``None``: no body). ``response``: the Struct of a 200 answer
    (``None``: a free-form JSON object, or text for a non-JSON
    ``content_type``). ``sse``: with ``"stream": true`` the answer is
    ``text/event-stream`` whose events carry this Struct (or one of these Structs). ``secured``: needs the
    API key when keys are set. ``documented``: listed in ``/openapi.json``. ``shape``: the 200 body is one
    ``response`` (``"one"``), a list of them (``"list"``) or either (``"one-or-list"``). ``error``: the
    Struct of its error answers (OpenAI's envelope; Anthropic's on ``/v1/messages*``). Path parameters are
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
    secured: bool = True
    documented: bool = True
    shape: str = "one"
    error: type = openai_wire.ErrorEnvelope

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

def _field(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _completion_tokens(result: Any) -> int:
    """``usage.completion_tokens`` of a ``chat.completion`` / ``text_completion``."""
    return int(_field(_field(result, "usage"), "completion_tokens", 0))


# -- helpers of the handlers ------------------------------------------------------------------------

#: distinct unknown field names remembered for the once-per-field warning; past it new names are only
#: listed in the response header (a client sending random keys cannot grow the set without bound)
MAX_WARNED_FIELDS = 1024


async def _body(type_: type, ctx: RequestContext) -> Any:
    """The body decoded into ``type_`` (400 naming the field on bad input).

    Unknown top-level fields are ignored, as OpenAI clients and agent
    frameworks send vendor extensions, but never silently: each is named in
    the ``X-Skippy-Ignored-Fields`` response header and, the first time the
    server sees it, in a warning log line; with ``--strict-fields`` the
    first one is a 400 naming it (OpenAI refuses unknown fields).
    """
    data = await request.get_data(cache=False)  # 413 past MAX_CONTENT_LENGTH, even while streaming in
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


def _check_limits(settings: ServerSettings, messages: list[Any], req: SamplingFields | None = None) -> None:
    """400 ``array_above_max_length`` / ``string_above_max_length`` past the configured limits."""
    if len(messages) > settings.max_messages:
        raise InvalidRequest(f"messages has {len(messages)} entries; this server accepts at most "
                             f"{settings.max_messages} (--max-messages)", param="messages",
                             code="array_above_max_length")
    if req is None:
        return
    chat = isinstance(req, ChatCompletionRequest)
    if chat and req.tools is not None and len(req.tools) > settings.max_tools:
        raise InvalidRequest(f"tools has {len(req.tools)} entries; this server accepts at most "
                             f"{settings.max_tools} (--max-tools)", param="tools", code="array_above_max_length")
    so = req.structured_outputs
    for field, value, limit, flag in (
            ("chat_template", req.chat_template if chat else None, settings.max_chat_template_bytes,
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
    """How :func:`_stream` frames a stream: ``event(chunk)`` and ``error(exc)`` give an event's bytes, ``ping``
    is sent after ``--sse-ping-interval`` seconds without a chunk, ``done`` (if any) ends a complete stream.
    The default is OpenAI's: ``data:`` events, ``: ping`` comments, ``data: [DONE]``."""

    event: Callable[[Any], bytes] = sse
    error: Callable[[EngineError], bytes] = lambda exc: sse(ErrorEnvelope.of(exc))
    ping: bytes = SSE_PING
    done: bytes | None = SSE_DONE


OPENAI_SSE = SseFormat()
NATIVE_SSE = SseFormat(done=None)  # llama-server's native /completion stream ends without [DONE]


async def _stream(app: Shared, ctx: RequestContext, start: Callable[[], Awaitable[AsyncIterator[Any]]],
                  fmt: SseFormat = OPENAI_SSE) -> Response:
    """SSE response; the first chunk is pulled before the headers so request errors stay 4xx.

    Every wait for the next chunk runs in the request's :meth:`~skippy.http.context.Lifecycle.guard`:
    past the deadline (or the shutdown grace) the generation is cancelled, which frees its sequence,
    and the stream ends with a final error event instead of ``[DONE]``.

    ``frame`` encodes a chunk as an SSE event; ``fail`` makes the final event of an error (the
    error envelope); ``done`` ends a complete stream (``None``: nothing, as llama-server's native
    ``/completion`` stream and the Responses stream). The log line's ``tokens=`` is the completion
    tokens the engine generated (the request's trace), not the events sent.
    """
    chunks: AsyncIterator[Any] | None = None

    async def open_stream() -> Any:
        nonlocal chunks
        chunks = await start()
        return await chunks.__anext__()

    try:
        first = await app.guarded(ctx.deadline, open_stream())
    except BaseException:
        if chunks is not None:
            with trio.CancelScope(shield=True):
                await chunks.aclose()
        raise
    assert chunks is not None
    route, rule = f"{request.method} {request.path}", route_rule()  # the request context is gone while streaming
    lifecycle = app.lifecycle
    interval = app.settings.sse_ping_interval
    ping = object()
    ready = getattr(chunks, "ready_nowait", None)  # the chunks there without waiting, written together

    async def next_chunk() -> Any:
        """The next chunk, or ``ping`` when none came within ``--sse-ping-interval`` seconds (a queue wait or
        a long prefill). Cancelling the wait is safe: it waits on the sequence's memory channel."""
        if interval > 0:
            with trio.move_on_after(interval):
                return await chunks.__anext__()
            return ping
        return await chunks.__anext__()

    async def events() -> AsyncIterator[bytes]:
        status = 200
        code = reason = None
        disconnected = False
        try:
            yield fmt.event(first)
            while True:
                chunk = None
                with lifecycle.guard(ctx.deadline) as scope:
                    try:
                        chunk = await next_chunk()
                    except StopAsyncIteration:
                        pass
                if chunk is ping:
                    yield fmt.ping
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
        except trio.Cancelled:
            status = 499  # the client went away
            disconnected = True
            raise
        finally:
            await chunks.aclose()
            ctx.tokens = ctx.trace.completion_tokens  # tokens, not events (a burst of tokens can be one chunk)
            log_line(app, ctx, status, route, rule, code=code, reason=reason, disconnected=disconnected)

    response = Response(events(), status=200, mimetype="text/event-stream",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    response.timeout = None
    return response


async def _unless_gone(app: Shared, ctx: RequestContext, work: Awaitable[Any]) -> Any:
    """``app.guarded(ctx.deadline, work)``; a client that disconnects first (the handler is cancelled) gets
    the log line with status 499 and is counted as a disconnect, not as a 4xx (nginx's 499)."""
    try:
        return await app.guarded(ctx.deadline, work)
    except trio.Cancelled:
        log_line(app, ctx, 499, f"{request.method} {request.path}", route_rule(), disconnected=True)
        raise


# -- handlers ---------------------------------------------------------------------------------------

async def chat_completions() -> Response:
    app, ctx = shared(), current()
    req = await _body(ChatCompletionRequest, ctx)
    _check_limits(app.settings, req.messages, req)
    eng = await app.engine_for(req.model)
    if req.stream:
        return await _stream(app, ctx, lambda: eng.chat_stream(req))
    result = await _unless_gone(app, ctx, eng.chat(req))
    ctx.tokens = _completion_tokens(result)
    return json_response(result)


async def completions() -> Response:
    app, ctx = shared(), current()
    req = await _body(CompletionRequest, ctx)
    _check_limits(app.settings, [], req)
    eng = await app.engine_for(req.model)
    if req.stream:
        return await _stream(app, ctx, lambda: eng.completion_stream(req))
    result = await _unless_gone(app, ctx, eng.completion(req))
    ctx.tokens = _completion_tokens(result)
    return json_response(result)


async def infill() -> Response:
    app, ctx = shared(), current()
    req = await _body(InfillRequest, ctx)
    eng = await app.engine_for(req.model)
    if req.stream:
        return await _stream(app, ctx, lambda: eng.infill_stream(req))
    result = await _unless_gone(app, ctx, eng.infill(req))
    ctx.tokens = result.tokens_predicted or 0
    return json_response(result)


# -- /v1/responses: OpenAI Responses translated onto the chat path (skippy.engine.protocols.responses.translate) ------

async def _reasoning_tokens(eng: Any, text: str) -> int:
    """Tokens of the reasoning text (``usage.output_tokens_details.reasoning_tokens``)."""
    return len(await eng.tokenizer.tokenize(text, add_special=False, parse_special=False)) if text else 0


class _ResponseStream:
    """The Responses events of one streamed turn over the engine's chat chunks; the response is stored
    when it ends (``store``).

    Cancel-safe like the chat stream (``_stream`` cancels a wait for a keep-alive ping): a cancelled
    :meth:`__anext__` loses nothing, the events of a chunk wait in ``pending``, the usage chunk in ``usage``.
    """

    def __init__(self, app: Shared, eng: Any, turn: rapi.Turn, events: rapi.ResponseEvents,
                 chunks: AsyncIterator[openai_wire.ChatCompletionChunk]) -> None:
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
        await self.chunks.aclose()  # type: ignore[attr-defined]


def _response_event(event: rwire.ResponseStreamEvent) -> bytes:
    return sse_event(event.type, event)


async def responses_create() -> Response:
    app, ctx = shared(), current()
    req = await _body(ResponsesRequest, ctx)
    previous = (app.responses.get(req.previous_response_id, param="previous_response_id")
                if req.previous_response_id is not None else None)
    eng = await app.engine_for(req.model)
    turn = rapi.prepare(req, previous, model=eng.reply_model(req.model))
    try:
        _check_limits(app.settings, turn.chat.messages, turn.chat)
        if req.stream:
            events = rapi.ResponseEvents(turn)

            async def start() -> AsyncIterator[Any]:
                try:
                    return _ResponseStream(app, eng, turn, events, await eng.chat_stream(turn.chat))
                except EngineError as exc:
                    raise rapi.rename_params(exc) from None

            return await _stream(app, ctx, start, SseFormat(
                event=_response_event, error=lambda exc: _response_event(events.failed(exc)), done=None))
        result = await _unless_gone(app, ctx, eng.chat(turn.chat))
    except EngineError as exc:
        raise rapi.rename_params(exc) from None
    ctx.tokens = _completion_tokens(result)
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


async def embeddings() -> Response:
    app, ctx = shared(), current()
    req = await _body(EmbeddingRequest, ctx)
    eng = await app.engine_for(req.model)
    result = await _unless_gone(app, ctx, eng.embeddings(req))
    return json_response(result)


def _model(eng: Any, name: str) -> openai_wire.Model:
    meta = eng.meta
    return openai_wire.Model(id=name, created=eng.created, meta=openai_wire.ModelDetails(
        n_ctx=meta.n_ctx_seq, n_ctx_train=meta.n_ctx_train, n_vocab=meta.n_vocab, parallel=meta.n_seq_max))


async def completion_native() -> Response:
    """llama-server's native ``/completion``: one object for one prompt, a list for several; its SSE stream
    has no ``[DONE]`` (llama-server ends it with the ``stop: true`` chunk)."""
    app, ctx = shared(), current()
    req = await _body(NativeCompletionRequest, ctx)
    _check_limits(app.settings, [], req)
    eng = await app.engine_for(req.model)
    if req.stream:
        return await _stream(app, ctx, lambda: eng.completion_native_stream(req), NATIVE_SSE)
    results = await _unless_gone(app, ctx, eng.completion_native(req))
    ctx.tokens = sum(r.tokens_predicted for r in results)
    return json_response(results[0] if len(results) == 1 else results)  # llama-server: a list for several


async def slots() -> Response:
    """llama-server ``GET /slots``: 501 with ``--no-slots``; ``?fail_on_no_slot=1`` answers 503 when no slot
    is idle."""
    app = shared()
    if not app.settings.slots:
        raise NotSupported("This server does not support slots endpoint. Start it with `--slots`")
    states = (await app.engine_for(request.args.get("model"), required=False)).slots()
    if request.args.get("fail_on_no_slot") not in (None, "", "0", "false") and all(s.is_processing for s in states):
        return error_response(503, "no slot available", "unavailable_error", code="no_slot_available")
    return json_response(states)


#: a slot file name: no directory part, no hidden or parent names (llama.cpp fs_validate_filename's spirit)
_SLOT_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}")


async def slot_action(id_slot: str) -> Response:
    """llama-server ``POST /slots/{id}?action=save|restore|erase`` (``{"filename": ...}`` for save and restore,
    a plain name inside ``--slot-save-path``); 501 without ``--slot-save-path``."""
    app, ctx = shared(), current()
    save_dir = app.settings.slot_save_path
    if save_dir is None:
        raise NotSupported("This server does not support slots action. Start it with `--slot-save-path`")
    try:
        slot = int(id_slot)
    except ValueError:
        raise InvalidRequest("Invalid slot ID", param="id_slot") from None
    action = request.args.get("action", "")
    if action not in ("save", "restore", "erase"):
        raise InvalidRequest("Invalid action", param="action")
    path = None
    if action != "erase":
        body = await _body(SlotActionRequest, ctx)
        if not _SLOT_FILE.fullmatch(body.filename) or ".." in body.filename:
            raise InvalidRequest("Invalid filename", param="filename")
        directory = Path(save_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = str(directory / body.filename)
        if action == "restore" and not Path(path).is_file():
            raise InvalidRequest(f"Unable to restore slot: no file {body.filename!r} in the slot save path",
                                 param="filename")
    eng = await app.engine_for(request.args.get("model"), required=False)
    result = await _unless_gone(app, ctx, eng.slot_action(action, slot, path))
    if path is not None:
        result["filename"] = Path(path).name
    reply = {"save": wire.SlotSaved, "restore": wire.SlotRestored, "erase": wire.SlotErased}[action]
    return json_response(reply(**result))


async def props_change() -> Response:
    """llama-server ``POST /props``: 501 unless started with ``--props``; then ``{"success": true}`` (llama-server
    changes no property there either)."""
    app, ctx = shared(), current()
    if not app.settings.props:
        raise NotSupported("This server does not support changing global properties. Start it with `--props`")
    await _body(dict, ctx)  # a JSON object, as llama-server parses it
    return json_response({"success": True})


def _pool_model(pool: Any, model_id: str, name: str) -> openai_wire.Model:
    """A ``/v1/models`` entry of a model of several: its ``state`` and llama-server router mode's ``status``;
    ``meta`` while it is loaded."""
    state = pool.state(model_id)
    eng = pool.engine(model_id)
    entry = _model(eng, name) if eng is not None else openai_wire.Model(id=name, created=pool.created(model_id))
    error = pool.error(model_id)
    entry.state = state
    entry.status = openai_wire.ModelStatus(value="unloaded" if state == "failed" else state,
                                    failed=True if error else wire.UNSET, error=error or wire.UNSET)
    return entry


def _several(app: Shared) -> Any:
    """The pool whose models ``/v1/models`` lists with their state: when several models are served (and the
    server has started), or one that is unloaded (``--keep-alive``); else ``None``."""
    pool = app.state.pool
    if pool is None or not pool.ready.is_set() or (pool.single and pool.engine(pool.default) is not None):
        return None
    return pool


async def models() -> Response:
    """OpenAI ``GET /v1/models``: the served model under each of its names; with several models, each with its
    ``state`` (``loaded``, ``loading``, ``unloaded``, ``failed``) and llama-server router mode's ``status``."""
    app = shared()
    pool = _several(app)
    if pool is not None:
        return json_response(openai_wire.ModelList(data=[_pool_model(pool, i, name) for i in pool.ids()
                                                  for name in pool.model(i).listed]))
    eng = app.engine()
    return json_response(openai_wire.ModelList(data=[_model(eng, name) for name in eng.served_names]))


async def model(model_id: str) -> Response:
    app = shared()
    pool = _several(app)
    if pool is not None:
        found = pool.match(model_id)
        return json_response(_pool_model(pool, found, model_id if model_id in pool.model(found).listed else found))
    eng = app.engine()
    return json_response(_model(eng, eng.find_model(model_id)))


async def health() -> Response:
    """llama-server ``GET /health``: 503 while the (default) model loads, then 200 with slot counts (summed over
    the loaded models when several are served: 200 while any model is loaded or can load)."""
    app = shared()
    pool = app.state.pool
    if (app.state.engine is None) if pool is None else not pool.ready.is_set():
        return error_response(503, app.state.load_error or "Loading model", "unavailable_error", code="model_loading")
    if app.lifecycle.draining:
        return engine_error_response(ShuttingDown("the server is shutting down"))
    if pool is not None:
        if not pool.healthy():
            return error_response(503, "no model could be loaded: " + "; ".join(
                f"{i}: {pool.error(i)}" for i in pool.ids()), "unavailable_error", code="model_load_failed")
        totals = {"slots_idle": 0, "slots_processing": 0, "requests_waiting": 0}
        for _, eng in pool.loaded_engines():
            if problem := eng.device_problem():  # an RPC worker is gone: a supervisor must restart the set
                return engine_error_response(DeviceLost(problem))
            for key, value in eng.stats().items():
                totals[key] += value
        return json_response(wire.Health(**totals))
    engine = app.state.engine
    if engine is not None and (problem := engine.device_problem()):  # an RPC worker is gone: restart the set
        return engine_error_response(DeviceLost(problem))
    return json_response(wire.Health(**app.engine().stats()))


async def openapi_json() -> Response:
    return Response(shared().openapi, mimetype="application/json")


async def tokenize() -> Response:
    app, ctx = shared(), current()
    req = await _body(TokenizeRequest, ctx)
    eng = await app.engine_for(req.model or request.args.get("model"), required=False)
    tokens = await eng.tokenizer.tokenize(req.content, add_special=req.add_special, parse_special=req.parse_special)
    if req.with_pieces:
        out: list[int | wire.TokenPiece] = []
        for t in tokens:
            piece = eng.runtime.vocab.piece(t)
            try:
                out.append(wire.TokenPiece(id=t, piece=piece.decode("utf-8")))
            except UnicodeDecodeError:
                out.append(wire.TokenPiece(id=t, piece=list(piece)))
        return json_response(wire.TokenizeResponse(tokens=out))
    return json_response(wire.TokenizeResponse(tokens=list(tokens)))


async def detokenize() -> Response:
    app, ctx = shared(), current()
    req = await _body(DetokenizeRequest, ctx)
    eng = await app.engine_for(req.model or request.args.get("model"), required=False)
    try:
        content = await eng.tokenizer.detokenize(req.tokens)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="tokens") from exc
    return json_response(wire.DetokenizeResponse(content=content))


async def apply_template() -> Response:
    app, ctx = shared(), current()
    req = await _body(ApplyTemplateRequest, ctx)
    _check_limits(app.settings, req.messages, req)
    eng = await app.engine_for(req.model or request.args.get("model"), required=False)
    prompt = await app.guarded(ctx.deadline, eng.apply_template(req))
    return json_response(wire.ApplyTemplateResponse(prompt=prompt))


async def input_tokens() -> Response:
    """llama-server ``POST /v1/chat/completions/input_tokens``: a chat body -> ``{"input_tokens": N}``."""
    app, ctx = shared(), current()
    req = await _body(ChatCompletionRequest, ctx)
    _check_limits(app.settings, req.messages, req)
    eng = await app.engine_for(req.model)
    n = await _unless_gone(app, ctx, eng.input_tokens(req))
    return json_response(wire.InputTokens(input_tokens=n))


async def props() -> Response:
    eng = await shared().engine_for(request.args.get("model"), required=False)
    return json_response(eng.props())


async def metrics() -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    app = shared()
    if not app.settings.metrics:  # llama-server without --metrics
        return error_response(501, "the metrics endpoint is off on this server (started with --no-metrics)",
                              "not_supported_error", code="not_supported")
    pool = app.state.pool
    engine_metrics = (pool.metrics if pool is not None and not pool.single
                      else (await app.engine_for(None, required=False)).metrics)
    started = engine_metrics.registry.get_sample_value("process_start_time_seconds") or app.state.started
    return Response(engine_metrics.render(), mimetype=CONTENT_TYPE_LATEST.split(";")[0],
                    headers={"Content-Type": CONTENT_TYPE_LATEST, "Process-Start-Time-Unix": str(int(started))})


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


class _MessageEvents:
    """A chat chunk stream as Anthropic events (:class:`~skippy.engine.protocols.anthropic.translate.MessageStream`).

    Waiting for the next event may be cancelled (the ping timer of :func:`_stream`) without losing one:
    events are queued, and only the wait for the next chunk is cancelled (it waits on a memory channel).
    """

    def __init__(self, chunks: AsyncIterator[Any], translator: anthropic.MessageStream) -> None:
        self._chunks = chunks
        self._translator = translator
        self._ready: deque[Any] = deque()

    def __aiter__(self) -> _MessageEvents:
        return self

    async def __anext__(self) -> Any:
        while not self._ready:
            if self._translator.done:
                raise StopAsyncIteration
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                if not self._translator.done:  # no usage chunk: the stream was cut short
                    raise EngineError("the generation ended without its final chunk") from None
                raise
            self._ready.extend(self._translator.events(chunk))
        return self._ready.popleft()

    async def aclose(self) -> None:
        await self._chunks.aclose()  # type: ignore[attr-defined]


async def messages() -> Response:
    """Anthropic ``POST /v1/messages``: the body becomes a chat request (one generation path), the chat
    completion (or its chunk stream) becomes an Anthropic ``message`` (or its events)."""
    app, ctx = shared(), current()
    req = await _body(MessagesRequest, ctx)
    chat = anthropic.to_chat_request(req)
    _check_limits(app.settings, req.messages, chat)
    eng = await app.engine_for(req.model)
    stops = req.stop_sequences
    if req.stream:
        async def start() -> AsyncIterator[Any]:
            chunks = await eng.chat_stream(chat)
            # the engine has counted the prompt by now (the trace is filled when the sequence is submitted)
            return _MessageEvents(chunks, anthropic.MessageStream(input_tokens=ctx.trace.prompt_tokens,
                                                                  stop_sequences=stops))
        return await _stream(app, ctx, start, ANTHROPIC_SSE)
    result = await _unless_gone(app, ctx, eng.chat(chat))
    ctx.tokens = _completion_tokens(result)
    return json_response(anthropic.to_message(result, stops))


async def count_tokens() -> Response:
    """Anthropic ``POST /v1/messages/count_tokens``: the prompt ``/v1/messages`` would prefill, in tokens."""
    app, ctx = shared(), current()
    req = await _body(CountTokensRequest, ctx)
    chat = anthropic.to_chat_request(req)
    _check_limits(app.settings, req.messages, chat)
    eng = await app.engine_for(req.model)

    async def count() -> int:
        prompt = await eng.apply_template(chat)
        return len(await eng.tokenizer.tokenize(prompt, add_special=True, parse_special=True))

    n = await app.guarded(ctx.deadline, count())
    return json_response(anthropic_wire.MessageTokensCount(input_tokens=n))


# -- the table --------------------------------------------------------------------------------------

ROUTES: tuple[Route, ...] = (
    Route(("/v1/chat/completions", "/chat/completions"), "POST", chat_completions,
          "OpenAI Chat Completions (SSE when stream is true)", ChatCompletionRequest, openai_wire.ChatCompletion,
          sse=openai_wire.ChatCompletionChunk),
    Route(("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"), "POST", input_tokens,
          "llama-server token counting: the prompt tokens a chat request would use", ChatCompletionRequest,
          wire.InputTokens),
    Route(("/v1/completions",), "POST", completions,
          "OpenAI legacy Completions (SSE when stream is true)", CompletionRequest, openai_wire.TextCompletion,
          sse=openai_wire.TextCompletion),
    Route(("/v1/responses", "/responses"), "POST", responses_create,
          "OpenAI Responses, translated onto the chat path (SSE events when stream is true; stored by default)",
          ResponsesRequest, rwire.ResponseObject, sse=rwire.ResponseStreamEvent),
    Route(("/v1/responses/<response_id>", "/responses/<response_id>"), "GET", responses_get,
          "A stored response (404 when it was not stored, was deleted or was evicted)",
          response=rwire.ResponseObject),
    Route(("/v1/responses/<response_id>", "/responses/<response_id>"), "DELETE", responses_delete,
          "Forget a stored response (404 when there is none)", response=rwire.ResponseDeleted),
    Route(("/infill",), "POST", infill, "llama-server /infill: fill-in-the-middle with the model's FIM tokens "
          "(SSE when stream is true)", InfillRequest, wire.Infill, sse=wire.Infill),
    Route(("/v1/embeddings",), "POST", embeddings, "OpenAI Embeddings: L2-normalized vectors from the embedding "
          "context (501 unless the server runs with --embeddings)", EmbeddingRequest, openai_wire.EmbeddingList),
    Route(("/v1/models", "/models"), "GET", models, "The served model under each of its names (--alias)",
          response=openai_wire.ModelList),
    Route(("/v1/models/<path:model_id>", "/models/<path:model_id>"), "GET", model,
          "One served model by name (404 model_not_found for another)", response=openai_wire.Model),
    Route(("/completion", "/completions"), "POST", completion_native,
          "llama-server native completion (a list for several prompts; SSE without [DONE] when stream is true)",
          NativeCompletionRequest, wire.NativeCompletion, sse=wire.NativeCompletion, shape="one-or-list"),
    Route(("/slots",), "GET", slots, "llama-server per-slot state (501 with --no-slots)", response=wire.Slot,
          shape="list"),
    Route(("/slots/<id_slot>",), "POST", slot_action,
          "llama-server slot save / restore / erase (?action=; 501 without --slot-save-path)", SlotActionRequest),
    Route(("/props",), "POST", props_change, "llama-server POST /props (501 without --props)", documented=False),
    Route(("/health",), "GET", health, "Readiness and slot counts (503 while loading)", response=wire.Health,
          secured=False),
    Route(("/openapi.json",), "GET", openapi_json, "This OpenAPI document", documented=False),
    Route(("/tokenize",), "POST", tokenize, "llama-server /tokenize", TokenizeRequest, wire.TokenizeResponse),
    Route(("/detokenize",), "POST", detokenize, "llama-server /detokenize", DetokenizeRequest,
          wire.DetokenizeResponse),
    Route(("/apply-template",), "POST", apply_template, "llama-server /apply-template", ApplyTemplateRequest,
          wire.ApplyTemplateResponse),
    Route(("/props",), "GET", props, "llama-server /props"),
    Route(("/v1/messages",), "POST", messages, "Anthropic Messages (SSE events when stream is true)", MessagesRequest,
          anthropic_wire.AnthropicMessage, sse=anthropic_wire.STREAM_EVENTS, error=anthropic_wire.AnthropicError),
    Route(("/v1/messages/count_tokens",), "POST", count_tokens, "Anthropic Messages token counting",
          CountTokensRequest, anthropic_wire.MessageTokensCount, error=anthropic_wire.AnthropicError),
    Route(("/metrics",), "GET", metrics, "Prometheus metrics (text exposition format)", content_type="text/plain"),
)

PUBLIC_PATHS = frozenset(path for route in ROUTES if not route.secured for path in route.paths)

blueprint = Blueprint("skippy", __name__)
for _route in ROUTES:
    for _path in _route.paths:
        blueprint.add_url_rule(_path, view_func=_route.handler, methods=[_route.method])
