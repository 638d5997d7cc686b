"""The HTTP face: a Quart-Trio app with OpenAI-compatible routes.

Thin by design: parse the body into a msgspec Struct, call the
:class:`~skippy.actors.engine.Engine`, encode the result. Every error is an
OpenAI envelope ``{"error": {"message", "type", "param", "code"}}`` (on the
Anthropic routes ``/v1/messages*``, Anthropic's ``{"type": "error", "error":
{"type", "message"}}``); user input only ever produces 4xx.

:func:`create_app` builds the app: the routes (the table
:data:`skippy.http.routes.ROUTES`: ``POST /v1/chat/completions``,
``POST /v1/completions``, ``GET /v1/models``, ``GET /health``,
``POST /tokenize``, ``POST /detokenize``, ``POST /apply-template`` (the last
three in llama-server's shapes), ``GET /props``, ``GET /metrics`` and
``GET /openapi.json``; Anthropic's ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``) as one blueprint, the web playground (``GET /`` and its
files, :mod:`skippy.http.webui`; left out with ``--no-webui``), and the hooks
below, which apply to every request, unknown paths included.

Hardening (:class:`~skippy.http.settings.ServerSettings`): API keys
(``Authorization: Bearer KEY`` or ``X-Api-Key: KEY``, as llama-server) on
every route but ``/health`` and the playground's page and files (401 envelope with ``WWW-Authenticate``), CORS
with preflight (:mod:`skippy.http.cors`), body and field limits (413 / 400), a body that stops arriving for
``--body-timeout`` seconds (408; :func:`~skippy.http.routes.base.body_bytes`), a per-request deadline (504
before the response headers, a final SSE error event after them), and graceful shutdown
(:class:`~skippy.http.context.Lifecycle`): new requests get 503 while
running ones finish, and what still runs when the grace period ends is
cancelled with a final SSE error event (503 before headers).

Each request's hooks run in this order: :func:`_start` (the request's
:class:`~skippy.actors.trace.RequestTrace` for the engine, deadline,
preflight, API key, draining) before the handler; after it
:func:`_no_retry` (``X-Should-Retry: false`` on answers a retry cannot change),
:func:`_anthropic_errors` (Anthropic's error envelope on ``/v1/messages*``), :func:`_ollama_errors` (Ollama's
``{"error": ...}`` on ``/api/*``), :func:`_log`
(``X-Request-Id`` header, the log line and response counters), then
:func:`_cors`, :func:`_max_tokens_clamped`, :func:`_ignored_fields`, then
:func:`_close_if_body_unread` (Quart runs ``after_request`` functions in reverse
order of registration).
"""

from __future__ import annotations

import json
import logging

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from skippy.actors.store import StoreClient
from skippy.actors.trace import TRACE
from skippy.engine.errors import EngineError
from skippy.engine.protocols.anthropic.translate import error_for
from skippy.http import cors, webui
from skippy.http.asgi import normalise
from skippy.http.context import (
    EXTENSION,
    AppState,
    Lifecycle,
    RequestTimeout,
    Shared,
    ShuttingDown,
    SkippyRequest,
    current,
    shared,
)
from skippy.http.openapi import openapi_document
from skippy.http.replies import encode, engine_error_response, error_response
from skippy.http.routes import PUBLIC_PATHS, blueprint
from skippy.http.routes.anthropic import is_anthropic_path
from skippy.http.routes.base import is_anthropic_models_call, log_line, route_rule
from skippy.http.routes.ollama import error_body as ollama_error_body
from skippy.http.routes.ollama import is_ollama_path
from skippy.http.settings import ServerSettings

__all__ = ["AppState", "Lifecycle", "RequestTimeout", "ShuttingDown", "create_app"]

log = logging.getLogger("skippy.http")


def create_app(state: AppState, settings: ServerSettings | None = None,
               responses: StoreClient | None = None) -> QuartTrio:
    """The app over ``state`` with the limits, keys and CORS origins of ``settings``.

    ``responses``: the store of ``/v1/responses`` (``skippy serve`` opens ``--responses-store``); without
    one, a ``memory:`` store bounded by ``settings``.

    ``state`` and ``settings`` are stored once as ``app.extensions["skippy"]``
    (:class:`~skippy.http.context.Shared`); the ASGI app counts its running
    requests in ``state.lifecycle.running``, behind :func:`skippy.http.asgi.normalise` (a WebSocket
    request answered as a plain ``GET``; an absolute-form target served by its path, 400 when it does not
    parse; repeated slashes in a path merged, as nginx's ``merge_slashes``).
    """
    settings = settings or ServerSettings()
    app = QuartTrio("skippy")
    app.request_class = SkippyRequest
    # BODY_TIMEOUT: none in Quart, whose timeout spans the whole body; read_body (routes/base.py) times out
    # between reads (--body-timeout), and enforces MAX_CONTENT_LENGTH itself as it iterates the body
    app.config.update(MAX_CONTENT_LENGTH=settings.max_body_bytes, RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None,
                      PROVIDE_AUTOMATIC_OPTIONS=True)
    openapi = encode(openapi_document(auth=settings.auth_required))
    app.extensions[EXTENSION] = shared_state = (Shared(state, settings, openapi) if responses is None
                                                else Shared(state, settings, openapi, responses))
    app.asgi_app = normalise(state.lifecycle.count_requests(app.asgi_app),  # type: ignore[method-assign]
                             shared_state.metrics)
    app.before_request(_start)
    app.after_request(_close_if_body_unread)
    app.after_request(_ignored_fields)
    app.after_request(_max_tokens_clamped)
    app.after_request(_cors)
    app.after_request(_log)
    app.after_request(_anthropic_errors)
    app.after_request(_ollama_errors)
    app.after_request(_no_retry)
    app.register_error_handler(EngineError, _on_engine_error)
    app.register_error_handler(HTTPException, _on_http_error)
    app.register_error_handler(Exception, _on_unexpected)
    app.register_blueprint(blueprint)
    if settings.webui:
        app.register_blueprint(webui.blueprint)
    return app


def _unauthorized(settings: ServerSettings) -> Response | None:
    """401 unless the request carries one of the keys: ``Authorization: Bearer KEY`` (OpenAI) or
    ``X-Api-Key: KEY`` (Anthropic's header, which llama-server accepts too; a ``Bearer`` prefix is allowed)."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip() and settings.key_accepted(token.strip()):
        return None
    x_api_key = request.headers.get("X-Api-Key", "").strip()
    if x_api_key[:7].lower() == "bearer ":
        x_api_key = x_api_key[7:].strip()
    if x_api_key and settings.key_accepted(x_api_key):
        return None
    message = ("Incorrect API key provided." if header or x_api_key else
               "You didn't provide an API key. Send it in an Authorization header: Authorization: Bearer KEY "
               "(or X-Api-Key: KEY).")
    return error_response(401, message, "invalid_request_error", code="invalid_api_key",
                          headers={"WWW-Authenticate": 'Bearer realm="skippy"'})


async def _start() -> Response | None:
    """Set the deadline; answer a CORS preflight, a missing or wrong API key (401), or 503 while draining."""
    app = shared()
    settings = app.settings
    ctx = current()
    ctx.trace.t_start = trio.current_time()
    TRACE.set(ctx.trace)  # the engine fills it in (tokens, TTFT) for the log line; the reply id takes its id
    if settings.request_timeout > 0:
        ctx.deadline = trio.current_time() + settings.request_timeout
    preflight = cors.preflight(request, settings)
    if preflight is not None:
        return preflight
    if request.path in PUBLIC_PATHS or (request.method in ("GET", "HEAD") and webui.is_public(request.path)):
        return None
    if settings.auth_required:
        refused = _unauthorized(settings)
        if refused is not None:
            return refused
    if app.lifecycle.draining:
        return engine_error_response(ShuttingDown("the server is shutting down; retry on another instance"))
    return None


async def _close_if_body_unread(response: Response) -> Response:
    # A response sent before the request body was read (401, 404, 405, 413, 503...) closes the
    # connection: hypercorn 0.18 (h11) stops answering a keep-alive connection whose previous
    # request body arrived after its response.
    has_body = (request.content_length or 0) > 0 or "chunked" in request.headers.get("Transfer-Encoding", "")
    if has_body and not current().body_read:
        response.headers["Connection"] = "close"
    return response


#: longest ``X-Skippy-Ignored-Fields`` value in characters (nginx's default header buffer is 1 KiB)
IGNORED_FIELDS_HEADER_MAX = 1024


async def _ignored_fields(response: Response) -> Response:
    """``X-Skippy-Ignored-Fields: a, b``: the request's unknown top-level fields (see routes ``_body``).

    Names are JSON-escaped to ASCII (a header carries no control or non-ASCII characters), and the value
    ends with ``, ...`` past :data:`IGNORED_FIELDS_HEADER_MAX` characters.
    """
    ignored = current().ignored_fields
    if ignored:
        value = ", ".join(json.dumps(name)[1:-1] for name in ignored)
        if len(value) > IGNORED_FIELDS_HEADER_MAX:
            value = value[:IGNORED_FIELDS_HEADER_MAX].rsplit(", ", 1)[0] + ", ..."
        response.headers["X-Skippy-Ignored-Fields"] = value
    return response


async def _max_tokens_clamped(response: Response) -> Response:
    """``X-Skippy-Max-Tokens-Clamped: 32000 -> 1890``: the request's ``max_tokens`` (asked) and the room left
    in the context that it was clamped to (granted; the least over its prompts), when it was clamped
    (``--clamp-max-tokens``, the default; see the engine's :class:`~skippy.actors.trace.RequestTrace`)."""
    clamped = current().trace.max_tokens_clamped
    if clamped is not None:
        response.headers["X-Skippy-Max-Tokens-Clamped"] = f"{clamped[0]} -> {clamped[1]}"
    return response


#: error codes of 503 answers that a retry cannot change (the model's load failed; a restart is needed)
NO_RETRY_CODES = frozenset({"model_load_failed"})


async def _no_retry(response: Response) -> Response:
    """``X-Should-Retry: false`` on an answer that a retry cannot change, as OpenAI's API sends it: every 501
    (a route or feature this server was started without) and a 503 whose code is in :data:`NO_RETRY_CODES`.
    The OpenAI and Anthropic SDKs read the header before their status rules (which retry any 5xx). Runs
    before :func:`_anthropic_errors`, so it reads the OpenAI envelope's code."""
    status = response.status_code
    if status == 501 or (status == 503 and (await _error_of(response))[0] in NO_RETRY_CODES):
        response.headers["X-Should-Retry"] = "false"
    return response


async def _cors(response: Response) -> Response:
    return cors.add_headers(request, response, shared().settings)


_envelope = msgspec.json.Decoder()


async def _error_of(response: Response) -> tuple[str | None, str | None]:
    """The ``code`` (else ``type``) and ``message`` of an error response's envelope; ``(None, None)`` if it has none."""
    if response.status_code < 400 or response.mimetype != "application/json":
        return None, None
    try:
        error = _envelope.decode(await response.get_data())["error"]
        if isinstance(error, str):  # Ollama's {"error": "..."} on /api/*
            return None, error
        return (error.get("code") or error.get("type")), error.get("message")
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        return None, None


async def _log(response: Response) -> Response:
    ctx = current()
    response.headers["X-Request-Id"] = ctx.request_id
    if not getattr(response, "logs_itself", False):  # a stream (SSE or NDJSON) logs its line when it ends
        code, reason = await _error_of(response)
        log_line(shared(), ctx, response.status_code, f"{request.method} {request.path}", route_rule(),
                 code=code, reason=reason)
    return response


async def _anthropic_errors(response: Response) -> Response:
    """On ``/v1/messages*`` (and ``/v1/models*`` asked with ``anthropic-version``) an error answer becomes
    Anthropic's envelope ``{"type": "error", "error": {"type",
    "message"}}`` with Anthropic's status (:func:`~skippy.engine.protocols.anthropic.translate.error_for`: 503 -> 529
    ``overloaded_error``); every error on those paths, from the API key check to a body too large, goes
    through here. It runs before :func:`_log`, which so logs what the client got."""
    anthropic = is_anthropic_path(request.path) or is_anthropic_models_call()  # the SDKs' models.list too
    if response.status_code < 400 or not anthropic or response.mimetype != "application/json":
        return response
    code = None
    try:
        error = _envelope.decode(await response.get_data())["error"]
        message = str(error["message"])
        code = error.get("code")
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        message = response.status
    status, envelope = error_for(response.status_code, message, code if isinstance(code, str) else None)
    response.set_data(encode(envelope))
    response.status_code = status
    return response


async def _ollama_errors(response: Response) -> Response:
    """On ``/api/...`` (Ollama's routes) an error answer becomes Ollama's ``{"error": message}``, its status
    kept; every error there, from the API key check to an unknown route, goes through here. Runs before
    :func:`_log`."""
    if response.status_code < 400 or not is_ollama_path(request.path) or response.mimetype != "application/json":
        return response
    try:
        body = _envelope.decode(await response.get_data())
        message = str(body["error"]["message"]) if isinstance(body.get("error"), dict) else str(body["error"])
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        message = response.status
    response.set_data(ollama_error_body(message))
    return response


async def _on_engine_error(exc: EngineError) -> Response:
    return engine_error_response(exc)


async def _on_http_error(exc: HTTPException) -> Response:
    """Werkzeug's HTTP errors (404, 405, 408, 413...) as error envelopes. A 405 keeps Werkzeug's ``Allow``
    header, the route's methods (RFC 9110 §15.5.6: a 405 MUST carry it; the route's ``OPTIONS`` answer lists
    the same)."""
    status = exc.code or 500
    type_ = "invalid_request_error" if status < 500 else "server_error"
    if status == 413:
        message = f"request body too large (limit {shared().settings.max_body_bytes} bytes: --max-body-bytes)"
    elif status == 404:
        message = f"no route {request.method} {request.path}"
    else:
        message = exc.description or exc.name
    headers = None
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        headers = {"Allow": ", ".join(sorted(exc.valid_methods))}
    return error_response(status, message, type_, code=exc.name.lower().replace(" ", "_"), headers=headers)


async def _on_unexpected(exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.path)
    return error_response(500, f"internal error: {type(exc).__name__}", "server_error")
