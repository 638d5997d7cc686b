"""The HTTP face: a Quart-Trio app with OpenAI-compatible routes.

Thin by design: parse the body into a msgspec Struct, call the
:class:`~skippy.actors.engine.Engine`, encode the result. Every error is an
OpenAI envelope ``{"error": {"message", "type", "param", "code"}}``; user
input only ever produces 4xx.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /v1/models``, ``GET /health``, ``POST /tokenize``, ``POST /detokenize``,
``POST /apply-template`` (the last three in llama-server's shapes),
``GET /props`` and ``GET /openapi.json``.

Hardening (:class:`~skippy.http.settings.ServerSettings`): bearer API keys
on every route but ``/health`` (401 envelope), CORS with preflight, body
and field limits (413 / 400), a per-request deadline (504 before the
response headers, a final SSE error event after them), and graceful
shutdown (:class:`Lifecycle`): new requests get 503 while running ones
finish, and what still runs when the grace period ends is cancelled with a
final SSE error event (503 before headers).
"""

from __future__ import annotations

import logging
import math
import re
import time
from contextlib import contextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from skippy.actors.engine import Engine
from skippy.engine.errors import EngineError, InvalidRequest, ModelLoading
from skippy.engine.types import (ApplyTemplateRequest, ChatCompletionRequest, CompletionRequest, DetokenizeRequest,
                                 TokenizeRequest, decode_request)
from skippy.http.openapi import openapi_document
from skippy.http.settings import ServerSettings

log = logging.getLogger("skippy.http")
_json = msgspec.json.Encoder()


class RequestTimeout(EngineError):
    """504: the request ran past ``--request-timeout``; its generation was stopped."""

    status = 504
    type = "timeout_error"
    code = "request_timeout"


class ShuttingDown(EngineError):
    """503: the server is shutting down (new request, or one still running when the grace period ended)."""

    status = 503
    type = "unavailable_error"
    code = "server_shutting_down"


class Lifecycle:
    """Graceful shutdown shared by the routes.

    :meth:`drain` (first SIGINT/SIGTERM): new requests get 503, running ones
    go on. :meth:`expire` (grace period over, or a second signal): every
    running request's :meth:`guard` scope is cancelled, so its handler
    answers 503 or its stream ends with a final SSE error event.
    """

    def __init__(self) -> None:
        self.draining = False
        self.expired = False
        self._scopes: set[trio.CancelScope] = set()
        self._requests = 0

    def drain(self) -> None:
        self.draining = True

    def expire(self) -> None:
        self.draining = self.expired = True
        for scope in list(self._scopes):
            scope.cancel()

    @property
    def running(self) -> int:
        """HTTP requests in progress, from their arrival to the last byte of their response."""
        return self._requests

    def count_requests(self, asgi_app: Any) -> Any:
        """``asgi_app`` wrapped to count its HTTP requests in :attr:`running`.

        At the ASGI level a request spans its whole response, a stream's body
        included, and the count drops however it ends (done, failed,
        cancelled because the client went away).
        """
        async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                return await asgi_app(scope, receive, send)
            self._requests += 1
            try:
                await asgi_app(scope, receive, send)
            finally:
                self._requests -= 1

        return counted

    @contextmanager
    def guard(self, deadline: float) -> Iterator[trio.CancelScope]:
        """A cancel scope with the request's ``deadline`` (trio clock) that :meth:`expire` also cancels.

        Wrap only awaits in it, never a ``yield`` of an async generator.
        """
        with trio.CancelScope(deadline=deadline) as scope:
            if self.expired:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)


class AppState:
    """What the routes share: the engine once loaded (``None`` while loading), and the :class:`Lifecycle`."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.load_error: str | None = None
        self.lifecycle = Lifecycle()


def _response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_json.encode(body), status=status, headers=headers, mimetype="application/json")


def _error(status: int, message: str, type_: str, code: str | None = None, param: str | None = None,
           headers: dict[str, str] | None = None) -> Response:
    return _response({"error": {"message": message, "type": type_, "param": param, "code": code}}, status, headers)


def _engine_error(exc: EngineError) -> Response:
    headers = {"Retry-After": str(getattr(exc, "retry_after", 1))} if exc.status in (429, 503) else None
    return _response(exc.envelope(), exc.status, headers)


def _sse(obj: Any) -> bytes:
    return b"data: " + _json.encode(obj) + b"\n\n"


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)
_CORS_METHODS = "GET, POST, OPTIONS"


def create_app(state: AppState, settings: ServerSettings | None = None) -> QuartTrio:
    """Build the app over ``state`` with the limits, keys and CORS origins of ``settings``."""
    settings = settings or ServerSettings()
    max_body_bytes = settings.max_body_bytes
    lifecycle = state.lifecycle
    app = QuartTrio("skippy")
    app.asgi_app = lifecycle.count_requests(app.asgi_app)  # type: ignore[method-assign]
    app.config.update(MAX_CONTENT_LENGTH=max_body_bytes, RESPONSE_TIMEOUT=None, BODY_TIMEOUT=60,
                      PROVIDE_AUTOMATIC_OPTIONS=True)
    openapi = _json.encode(openapi_document(auth=settings.auth_required))

    def deadline() -> float:
        return getattr(request, "skippy_deadline", math.inf)

    def stopped() -> EngineError:
        """The error of a request whose guard scope was cancelled: shutdown or its deadline."""
        if lifecycle.expired:
            return ShuttingDown("the server shut down before this request finished")
        return RequestTimeout(f"the request did not finish within {settings.request_timeout:g} s "
                              "(--request-timeout); its generation was stopped")

    async def guarded(work: Awaitable[Any]) -> Any:
        """Await ``work`` within the request's deadline and the shutdown grace period."""
        with lifecycle.guard(deadline()) as scope:
            return await work
        raise stopped() if scope.cancelled_caught else AssertionError("unreachable")

    def check_limits(messages: list[Any], req: ChatCompletionRequest | None = None) -> None:
        """400 ``array_above_max_length`` / ``string_above_max_length`` past the configured limits."""
        if len(messages) > settings.max_messages:
            raise InvalidRequest(f"messages has {len(messages)} entries; this server accepts at most "
                                 f"{settings.max_messages} (--max-messages)", param="messages",
                                 code="array_above_max_length")
        if req is None:
            return
        if req.tools is not None and len(req.tools) > settings.max_tools:
            raise InvalidRequest(f"tools has {len(req.tools)} entries; this server accepts at most "
                                 f"{settings.max_tools} (--max-tools)", param="tools", code="array_above_max_length")
        for field, value, limit, flag in (
                ("chat_template", req.chat_template, settings.max_chat_template_bytes, "--max-chat-template-bytes"),
                ("grammar", req.grammar, settings.max_grammar_bytes, "--max-grammar-bytes")):
            if value is not None:
                size = len(value.encode("utf-8", "surrogatepass"))
                if size > limit:
                    raise InvalidRequest(f"{field} is {size} bytes; this server accepts at most {limit} ({flag})",
                                         param=field, code="string_above_max_length")

    def engine() -> Engine:
        if state.engine is None:
            raise ModelLoading(state.load_error or "the model is still loading; retry shortly")
        return state.engine

    async def body(type_: type) -> Any:
        data = await request.get_data(cache=False)  # 413 past MAX_CONTENT_LENGTH, even while streaming in
        request.skippy_body_read = True  # type: ignore[attr-defined]
        return decode_request(data, type_)

    def log_line(status: int, tokens: int, t0: float, route: str | None = None) -> None:
        if state.engine is not None:
            state.engine.metrics.response(status)
        log.info("%s %d tokens=%d %.1fms", route or f"{request.method} {request.path}", status, tokens,
                 (time.perf_counter() - t0) * 1000.0)

    def cors_preflight() -> Response | None:
        """Answer a CORS preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``)."""
        origin = request.headers.get("Origin")
        method = request.headers.get("Access-Control-Request-Method")
        if request.method != "OPTIONS" or not origin or not method:
            return None
        if not settings.origin_allowed(origin):
            return _error(403, f"origin {origin!r} is not allowed (--cors-origins)", "invalid_request_error",
                          code="cors_origin_not_allowed")
        if method.upper() not in _CORS_METHODS.split(", "):
            return _error(403, f"method {method!r} is not allowed by CORS", "invalid_request_error",
                          code="cors_method_not_allowed")
        asked = [h.strip() for h in request.headers.get("Access-Control-Request-Headers", "").split(",") if h.strip()]
        if not all(_TOKEN.match(h) for h in asked):
            return _error(400, "malformed Access-Control-Request-Headers", "invalid_request_error")
        response = Response(b"", status=204)
        del response.headers["Content-Type"]
        response.headers["Access-Control-Allow-Methods"] = _CORS_METHODS
        response.headers["Access-Control-Allow-Headers"] = ", ".join(asked) or "authorization, content-type"
        response.headers["Access-Control-Max-Age"] = "600"
        response.headers["Vary"] = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
        return response

    def unauthorized() -> Response | None:
        """401 unless the request carries ``Authorization: Bearer <one of the keys>``."""
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip() and settings.key_accepted(token.strip()):
            return None
        message = ("Incorrect API key provided." if header else
                   "You didn't provide an API key. Send it in an Authorization header: Authorization: Bearer KEY.")
        return _error(401, message, "invalid_request_error", code="invalid_api_key",
                      headers={"WWW-Authenticate": 'Bearer realm="skippy"'})

    @app.before_request
    async def _start_clock() -> Response | None:
        request.skippy_t0 = time.perf_counter()  # type: ignore[attr-defined]
        if settings.request_timeout > 0:
            request.skippy_deadline = trio.current_time() + settings.request_timeout  # type: ignore[attr-defined]
        preflight = cors_preflight()
        if preflight is not None:
            return preflight
        if request.path == "/health":
            return None
        if settings.auth_required:
            refused = unauthorized()
            if refused is not None:
                return refused
        if lifecycle.draining:
            return _engine_error(ShuttingDown("the server is shutting down; retry on another instance"))
        return None

    @app.after_request
    async def _close_if_body_unread(response: Response) -> Response:
        # A response sent before the request body was read (401, 404, 405, 413, 503...) closes the
        # connection: hypercorn 0.18 (h11) stops answering a keep-alive connection whose previous
        # request body arrived after its response.
        has_body = (request.content_length or 0) > 0 or "chunked" in request.headers.get("Transfer-Encoding", "")
        if has_body and not getattr(request, "skippy_body_read", False):
            response.headers["Connection"] = "close"
        return response

    @app.after_request
    async def _cors(response: Response) -> Response:
        origin = request.headers.get("Origin")
        if origin and settings.cors_origins:
            response.vary.add("Origin")
            if settings.origin_allowed(origin):
                response.headers["Access-Control-Allow-Origin"] = "*" if "*" in settings.cors_origins else origin
                response.headers["Access-Control-Expose-Headers"] = "Retry-After, WWW-Authenticate"
        return response

    @app.after_request
    async def _log(response: Response) -> Response:
        if response.mimetype != "text/event-stream":
            tokens = getattr(request, "skippy_tokens", 0)
            log_line(response.status_code, tokens, getattr(request, "skippy_t0", time.perf_counter()))
        return response

    @app.errorhandler(EngineError)
    async def _on_engine_error(exc: EngineError) -> Response:
        return _engine_error(exc)

    @app.errorhandler(HTTPException)
    async def _on_http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        type_ = "invalid_request_error" if status < 500 else "server_error"
        if status == 413:
            message = f"request body too large (limit {max_body_bytes} bytes)"
        elif status == 404:
            message = f"no route {request.method} {request.path}"
        else:
            message = exc.description or exc.name
        return _error(status, message, type_, code=exc.name.lower().replace(" ", "_"))

    @app.errorhandler(Exception)
    async def _on_unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _error(500, f"internal error: {type(exc).__name__}", "server_error")

    async def stream(start: Callable[[], Awaitable[AsyncIterator[dict[str, Any]]]], t0: float) -> Response:
        """SSE response; the first chunk is pulled before the headers so request errors stay 4xx.

        Every wait for the next chunk runs in the request's :meth:`Lifecycle.guard`: past the
        deadline (or the shutdown grace) the generation is cancelled, which frees its sequence,
        and the stream ends with a final error event instead of ``[DONE]``.
        """
        chunks: AsyncIterator[dict[str, Any]] | None = None

        async def open_stream() -> dict[str, Any]:
            nonlocal chunks
            chunks = await start()
            return await chunks.__anext__()

        try:
            first = await guarded(open_stream())
        except BaseException:
            if chunks is not None:
                with trio.CancelScope(shield=True):
                    await chunks.aclose()
            raise
        assert chunks is not None
        route = f"{request.method} {request.path}"  # the request context is gone while streaming
        until = deadline()

        async def events() -> AsyncIterator[bytes]:
            tokens = 0
            status = 200
            try:
                yield _sse(first)
                while True:
                    chunk = None
                    with lifecycle.guard(until) as scope:
                        try:
                            chunk = await chunks.__anext__()
                        except StopAsyncIteration:
                            pass
                    if scope.cancelled_caught:
                        error = stopped()
                        status = error.status
                        yield _sse(error.envelope())
                        return
                    if chunk is None:
                        break
                    tokens += sum(1 for c in chunk.get("choices", ()) if c.get("delta") or c.get("text"))
                    yield _sse(chunk)
                yield b"data: [DONE]\n\n"
            except EngineError as exc:
                status = exc.status
                yield _sse(exc.envelope())
            except trio.Cancelled:
                status = 499  # the client went away
                raise
            finally:
                await chunks.aclose()
                log_line(status, tokens, t0, route)

        response = Response(events(), status=200, mimetype="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        response.timeout = None
        return response

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions() -> Response:
        req = await body(ChatCompletionRequest)
        check_limits(req.messages, req)
        eng = engine()
        if req.stream:
            return await stream(lambda: eng.chat_stream(req), request.skippy_t0)  # type: ignore[attr-defined]
        result = await guarded(eng.chat(req))
        request.skippy_tokens = result["usage"]["completion_tokens"]  # type: ignore[attr-defined]
        return _response(result)

    @app.post("/v1/completions")
    @app.post("/completions")
    async def completions() -> Response:
        req = await body(CompletionRequest)
        eng = engine()
        if req.stream:
            return await stream(lambda: eng.completion_stream(req), request.skippy_t0)  # type: ignore[attr-defined]
        result = await guarded(eng.completion(req))
        request.skippy_tokens = result["usage"]["completion_tokens"]  # type: ignore[attr-defined]
        return _response(result)

    @app.get("/v1/models")
    @app.get("/models")
    async def models() -> Response:
        eng = engine()
        return _response({"object": "list", "data": [
            {"id": eng.model_id, "object": "model", "created": 0, "owned_by": "skippy-trio",
             "meta": {"n_ctx": eng.meta.n_ctx_seq, "n_ctx_train": eng.meta.n_ctx_train,
                      "n_vocab": eng.meta.n_vocab, "parallel": eng.meta.n_seq_max}}]})

    @app.get("/health")
    async def health() -> Response:
        if state.engine is None:
            return _error(503, state.load_error or "Loading model", "unavailable_error", code="model_loading")
        if lifecycle.draining:
            return _engine_error(ShuttingDown("the server is shutting down"))
        return _response({"status": "ok", **state.engine.stats()})

    @app.get("/openapi.json")
    async def openapi_json() -> Response:
        return Response(openapi, mimetype="application/json")

    @app.post("/tokenize")
    async def tokenize() -> Response:
        req = await body(TokenizeRequest)
        eng = engine()
        tokens = await eng.tokenizer.tokenize(req.content, add_special=req.add_special, parse_special=req.parse_special)
        if req.with_pieces:
            out = []
            for t in tokens:
                piece = eng.runtime.vocab.piece(t)
                try:
                    out.append({"id": t, "piece": piece.decode("utf-8")})
                except UnicodeDecodeError:
                    out.append({"id": t, "piece": list(piece)})
            return _response({"tokens": out})
        return _response({"tokens": tokens})

    @app.post("/detokenize")
    async def detokenize() -> Response:
        req = await body(DetokenizeRequest)
        eng = engine()
        try:
            content = await eng.tokenizer.detokenize(req.tokens)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="tokens") from exc
        return _response({"content": content})

    @app.post("/apply-template")
    async def apply_template() -> Response:
        req = await body(ApplyTemplateRequest)
        check_limits(req.messages)
        return _response({"prompt": await guarded(engine().apply_template(req.messages))})

    @app.get("/props")
    async def props() -> Response:
        return _response(engine().props())

    @app.get("/metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(engine().metrics.render(), mimetype=CONTENT_TYPE_LATEST.split(";")[0],
                        headers={"Content-Type": CONTENT_TYPE_LATEST})

    return app
