"""The HTTP face: a Quart-Trio app with OpenAI-compatible routes.

Thin by design: parse the body into a msgspec Struct, call the
:class:`~skippy.actors.engine.Engine`, encode the result. Every error is an
OpenAI envelope ``{"error": {"message", "type", "param", "code"}}``; user
input only ever produces 4xx.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /v1/models``, ``GET /health``, ``POST /tokenize``, ``POST /detokenize``,
``POST /apply-template`` (the last three in llama-server's shapes).
"""

from __future__ import annotations

import logging
import time
from typing import Any, AsyncIterator

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from skippy.actors.engine import Engine
from skippy.engine.errors import EngineError, InvalidRequest, ModelLoading
from skippy.engine.types import (ApplyTemplateRequest, ChatCompletionRequest, CompletionRequest, DetokenizeRequest,
                                 TokenizeRequest, decode_request)

log = logging.getLogger("skippy.http")
_json = msgspec.json.Encoder()


class AppState:
    """What the routes share: the engine once loaded (``None`` while loading)."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.load_error: str | None = None


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


def create_app(state: AppState, *, max_body_bytes: int = 4 * 1024 * 1024) -> QuartTrio:
    """Build the app over ``state``. ``max_body_bytes`` larger bodies get 413."""
    app = QuartTrio("skippy")
    app.config.update(MAX_CONTENT_LENGTH=max_body_bytes, RESPONSE_TIMEOUT=None, BODY_TIMEOUT=60,
                      PROVIDE_AUTOMATIC_OPTIONS=True)

    def engine() -> Engine:
        if state.engine is None:
            raise ModelLoading(state.load_error or "the model is still loading; retry shortly")
        return state.engine

    async def body(type_: type) -> Any:
        data = await request.get_data(cache=False)
        return decode_request(data, type_)

    def log_line(status: int, tokens: int, t0: float, route: str | None = None) -> None:
        log.info("%s %d tokens=%d %.1fms", route or f"{request.method} {request.path}", status, tokens,
                 (time.perf_counter() - t0) * 1000.0)

    @app.before_request
    async def _start_clock() -> None:
        request.skippy_t0 = time.perf_counter()  # type: ignore[attr-defined]

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

    async def stream(chunks: AsyncIterator[dict[str, Any]], t0: float) -> Response:
        """SSE response; the first chunk is pulled before the headers so request errors stay 4xx."""
        first = await chunks.__anext__()
        route = f"{request.method} {request.path}"  # the request context is gone while streaming

        async def events() -> AsyncIterator[bytes]:
            tokens = 0
            status = 200
            try:
                yield _sse(first)
                async for chunk in chunks:
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
        eng = engine()
        if req.stream:
            return await stream(await eng.chat_stream(req), request.skippy_t0)  # type: ignore[attr-defined]
        result = await eng.chat(req)
        request.skippy_tokens = result["usage"]["completion_tokens"]  # type: ignore[attr-defined]
        return _response(result)

    @app.post("/v1/completions")
    @app.post("/completions")
    async def completions() -> Response:
        req = await body(CompletionRequest)
        eng = engine()
        if req.stream:
            return await stream(await eng.completion_stream(req), request.skippy_t0)  # type: ignore[attr-defined]
        result = await eng.completion(req)
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
        return _response({"status": "ok", **state.engine.stats()})

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
        return _response({"prompt": await engine().apply_template(req.messages)})

    @app.get("/props")
    async def props() -> Response:
        return _response(engine().props())

    return app
