"""The ASGI layer in front of the Quart app: what is settled from the raw request target before Quart builds its
request (:func:`~skippy.http.app.create_app` wraps ``app.asgi_app`` in :func:`normalise`).

- A WebSocket request (``GET`` with ``Upgrade: websocket``: scanners, a misconfigured proxy) is served as the
  plain HTTP request it also is, its ``Upgrade`` ignored (RFC 9110 §7.8 lets a server ignore it; nginx without
  WebSocket proxying does the same): the server serves no WebSockets, so it answers as to any ``GET`` (404 for an
  unknown path, 405, 401 without a key...; never ``101``, which the client reads as a refused handshake), through
  the app's hooks and log line. The answer goes out through the ASGI WebSocket Denial Response extension
  (``websocket.http.response``); a server without it gets ``websocket.close`` (its 403). Quart dispatches such
  a request to its WebSocket handling, where the app's error handler failed outside a request context (500 and
  a traceback for an unknown path) and the hooks (API keys, CORS, draining, log line) never ran. (Over HTTP/1.1
  a handshake reaches the app as a plain ``GET`` already, :mod:`skippy.http.serve`; what comes here as a
  WebSocket request is HTTP/2's extended ``CONNECT``.)
- An absolute-form target (``GET http://host/v1/models``, RFC 9112 §3.2.2: what a client that takes the server
  for a proxy sends) is served by its path. One that does not parse (a malformed IPv6 host:
  ``GET http://[::1/health``) is answered 400 with an error envelope here, as nginx answers it; Quart would
  fail on it outside the app's error handlers (a 500 with an empty body and a traceback). So is a target in
  neither form (``GET v1/models``: no leading slash, no ``scheme://``), as nginx and llama-server answer it;
  Werkzeug's routing served it as ``/v1/models``.
- Repeated slashes in the path are merged (``/v1//chat/completions`` is served as ``/v1/chat/completions``), as
  nginx's ``merge_slashes`` (on by default) does: a client's ``base_url`` ending in ``/`` joined with
  ``/chat/completions`` reaches its route, and no redirect is answered (Werkzeug would answer 308 with an HTML page
  and a ``Location`` built from the client's ``Host`` header).
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import urlsplit

from skippy.engine.protocols.openai.wire import ErrorBody, ErrorEnvelope
from skippy.http.context import client_of, request_id_from
from skippy.http.logs import log_request
from skippy.http.replies import encode

#: the start of an absolute-form target: a scheme and ``://`` (RFC 9112 §3.2.2 with RFC 3986's scheme; nginx's
#: request-line parser wants the ``//`` too)
_ABSOLUTE = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://")
#: a run of slashes in a path, merged into one
_SLASHES = re.compile(r"//+")
_RAW_SLASHES = re.compile(rb"//+")
#: longest part of a malformed target quoted in its 400's message and log line
TARGET_QUOTED_MAX = 200

Scope = dict[str, Any]
#: the metrics' ``route`` label of an answer that matched no route (as :func:`~skippy.http.routes.base.route_rule`)
UNMATCHED = "unmatched"


def error_body(message: str, type_: str, code: str | None) -> bytes:
    """An OpenAI error envelope's bytes, for an answer sent without the app's replies."""
    return encode(ErrorEnvelope(error=ErrorBody(message=message, type=type_, code=code)))


def record_answer(metrics: Any, route: str, status: int, *, request_id: str, client: str | None, duration_ms: float,
                  code: str | None = None, reason: str | None = None, disconnected: bool = False) -> None:
    """The log line and the response counters of an answer made outside the app's routes (a malformed target
    here; a request hypercorn cannot parse, :mod:`skippy.http.serve`), as
    :func:`~skippy.http.routes.base.log_line` writes them for the app's answers: the ``route`` label is
    ``unmatched``, the method the request line's (``other`` when it is none). ``metrics``: the server's
    (:meth:`~skippy.http.context.Shared.metrics`; ``None`` while the model loads); ``route``: ``METHOD TARGET``,
    or what the client sent instead of a request line; ``disconnected``: the client went away first (counted as a
    disconnect, as the app counts one)."""
    if metrics is not None:
        metrics.response(499 if disconnected else status)
        if not disconnected:
            metrics.route_response(route.split(" ", 1)[0], UNMATCHED, status, code)
    log_request(route, status, tokens=0, duration_ms=duration_ms, request_id=request_id, client=client, code=code,
                reason=reason, disconnected=disconnected)


def origin_form(scope: Scope) -> Scope | None:
    """``scope`` with an absolute-form target (``http://host/path?q``) replaced by its path (``/`` when it has
    none; the query is already apart in ``query_string``); ``scope`` itself for an origin-form (``/...``) or
    asterisk-form (``*``) target. ``None`` for a target in none of these forms (``v1/models``), and when an
    absolute-form one does not parse (``urlsplit`` raises ``ValueError``: a malformed IPv6 host, a host that NFKC
    normalisation changes). The form is read from the target as sent (``raw_path``; ``%2Fv1`` is not ``/v1``)."""
    path = scope.get("path", "")
    raw = scope.get("raw_path")
    target = raw if isinstance(raw, bytes) else path.encode("utf-8", "surrogateescape")
    if target.startswith(b"/") or target == b"*":
        return scope
    if not _ABSOLUTE.match(target):
        return None
    try:
        form = {**scope, "path": urlsplit(path).path or "/"}
        if isinstance(raw, bytes):
            form["raw_path"] = urlsplit(raw).path or b"/"
    except ValueError:
        return None
    return form


def merged_slashes(scope: Scope) -> Scope:
    """``scope`` with each run of slashes in its ``path`` and ``raw_path`` merged into one (nginx's
    ``merge_slashes``); ``scope`` itself when there is none. A path not in origin form (``/...``) is left alone."""
    path = scope.get("path", "")
    if not path.startswith("/") or "//" not in path:
        return scope
    merged = {**scope, "path": _SLASHES.sub("/", path)}
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        merged["raw_path"] = _RAW_SLASHES.sub(b"/", raw)
    return merged


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _target(scope: Scope) -> str:
    """The request target as the client sent it: ``raw_path`` (else ``path``) and the query string."""
    raw = scope.get("raw_path")
    target = raw.decode("latin-1") if isinstance(raw, bytes) else scope.get("path", "")
    query = scope.get("query_string") or b""
    return target + ("?" + query.decode("latin-1") if query else "")


async def _bad_target(scope: Scope, send: Any, metrics: Any) -> None:
    """Answer 400 ``bad_request`` to a target that does not parse, closing the connection; its log line and
    counters as any request's (with its ``X-Request-Id``)."""
    t0 = time.perf_counter()
    target = _target(scope)[:TARGET_QUOTED_MAX]
    message = (f"malformed request target {target!r}: expected a path starting with '/' or an absolute URL "
               "(http://host/path)")
    rid = request_id_from(_header(scope, b"x-request-id"))
    body = error_body(message, "invalid_request_error", "bad_request")
    await send({"type": "http.response.start", "status": 400, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"), (b"x-request-id", rid.encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
    record_answer(metrics, f"{scope.get('method', 'GET')} {target}", 400, request_id=rid, client=client_of(scope),
                  duration_ms=(time.perf_counter() - t0) * 1000.0, code="bad_request", reason=message)


#: the ASGI extension through which a WebSocket request gets an HTTP answer (WebSocket Denial Response)
DENIAL = "websocket.http.response"


def as_http(scope: Scope, receive: Any, send: Any) -> tuple[Scope, Any, Any] | None:
    """A WebSocket request's ``scope``, ``receive`` and ``send`` as those of a plain ``GET`` request without a
    body (the handshake's ``websocket.connect`` becomes the empty body, ``websocket.disconnect`` the client's
    ``http.disconnect``; the answer goes out as ``websocket.http.response.*``). ``None`` when the server lacks
    the :data:`DENIAL` extension."""
    if DENIAL not in (scope.get("extensions") or {}):
        return None
    http = {**scope, "type": "http", "method": "GET", "extensions": {},
            "scheme": "https" if scope.get("scheme") == "wss" else "http"}
    connected = False

    async def http_receive() -> dict[str, Any]:
        nonlocal connected
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return {"type": "http.disconnect"}
            if message["type"] == "websocket.connect" and not connected:
                connected = True
                return {"type": "http.request", "body": b"", "more_body": False}

    refused = False  # hypercorn answered the handshake itself (its 400) and closed the stream

    async def http_send(message: dict[str, Any]) -> None:
        nonlocal refused
        kind = message["type"]
        if refused or kind not in ("http.response.start", "http.response.body"):
            return
        try:
            if kind == "http.response.start":
                await send({"type": f"{DENIAL}.start", "status": message["status"],
                            "headers": message.get("headers", [])})
            else:
                await send({"type": f"{DENIAL}.body", "body": message.get("body", b""),
                            "more_body": message.get("more_body", False)})
        except Exception:  # h11's LocalProtocolError: the answer has no stream left to go on (a traceback each)
            refused = True

    return http, http_receive, http_send


def normalise(asgi_app: Any, metrics: Any = lambda: None) -> Any:
    """``asgi_app`` behind the rules of this module, for HTTP and WebSocket requests (lifespan events pass
    unchanged). ``metrics()``: where the answers made here are counted (the app's
    :meth:`~skippy.http.context.Shared.metrics`)."""
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "websocket":
            plain = as_http(scope, receive, send)
            if plain is None:
                return await send({"type": "websocket.close", "code": 1000})
            scope, receive, send = plain
        if scope.get("type") == "http":
            form = origin_form(scope)
            if form is None:
                return await _bad_target(scope, send, metrics())
            scope = merged_slashes(form)
        await asgi_app(scope, receive, send)

    return app
