"""CORS (Fetch standard, "CORS protocol"): preflight answers and the headers of every response.

What it does, with ``--cors-origins`` (``ServerSettings.cors_origins``: exact
origins, ``*`` for any, or llama-server's keyword ``localhost`` for any
``http(s)://localhost``, ``127.0.0.1`` or ``[::1]`` origin on any port):

- A preflight (``OPTIONS`` with ``Origin`` and
  ``Access-Control-Request-Method``) to any path is answered before
  authentication (browsers send no key on preflight): 200 with an empty body,
  as llama-server, with ``Access-Control-Allow-Origin`` (the origin),
  ``Access-Control-Allow-Credentials: true``,
  ``Access-Control-Allow-Methods: GET, POST, OPTIONS``,
  ``Access-Control-Allow-Headers`` (the requested ones, or
  ``authorization, content-type, x-api-key``), ``Access-Control-Max-Age: 600`` and
  ``Vary: Origin, Access-Control-Request-Method, Access-Control-Request-Headers``;
  a 403 envelope (``cors_origin_not_allowed`` / ``cors_method_not_allowed``)
  for an origin or method not allowed, also when CORS is off; 400 for
  ``Access-Control-Request-Headers`` that are not HTTP header names.
- Every response to a request with an ``Origin`` (errors included, so a
  browser can read a 401 or a 429) gets ``Vary: Origin`` and, for an
  allowed origin, ``Access-Control-Allow-Origin`` (the origin, also when
  ``*`` is configured: llama-server echoes it so that credentialed requests
  work), ``Access-Control-Allow-Credentials: true`` and
  ``Access-Control-Expose-Headers`` (:data:`EXPOSE_HEADERS`: every response header of ours a client
  reads, ``Retry-After`` to ``X-Skippy-Max-Tokens-Clamped``).
- Without ``--cors-origins`` no response carries a CORS header.

Where we differ from llama-server on purpose: CORS is off by default
(llama-server allows any origin: any web page a user visits could then drive
the local model), and a preflight from an origin that is not allowed gets a
403 envelope naming the origin and the flag (llama-server answers 200 without
``Access-Control-Allow-Origin``; the browser blocks the request either way,
and the 403 tells a person with curl or the network tab why).
Allowed headers are echoed rather than ``*``, which browsers do not treat as
a wildcard for credentialed requests.

Why not quart-cors (0.8.0, checked against it): it never refuses a
preflight: a disallowed origin or method only gets a response without CORS
headers (the route's own automatic ``OPTIONS`` answer, 200 with ``Allow``),
where we answer a 403 envelope, and it does not check
``Access-Control-Request-Headers`` (we answer 400 when malformed). It
answers preflights to unknown paths with 404 (we answer every path), omits
``Vary: Origin`` when the allowed origin is ``*`` and never varies on the
request method and headers, has no ``localhost`` keyword, and with
``allow_headers=["*"]`` sends an empty ``Access-Control-Allow-Headers`` when
none were requested. Keeping those would leave only the two response headers
to the library, so the ~50 lines stay here.
"""

from __future__ import annotations

import re

from quart import Request, Response

from skippy.http.replies import error_response
from skippy.http.settings import ServerSettings

ALLOW_METHODS = ("GET", "POST", "DELETE", "OPTIONS")  # DELETE: /v1/responses/{id}
MAX_AGE = 600  # seconds a browser may cache a preflight answer
EXPOSE_HEADERS = ", ".join(("Retry-After", "WWW-Authenticate", "X-Request-Id", "X-Should-Retry",
                            "X-Skippy-Ignored-Fields", "X-Skippy-Max-Tokens-Clamped"))
_DEFAULT_ALLOW_HEADERS = "authorization, content-type, x-api-key"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def preflight(request: Request, settings: ServerSettings) -> Response | None:
    """The answer to ``request`` if it is a CORS preflight, else ``None``.

    A preflight is ``OPTIONS`` with both ``Origin`` and ``Access-Control-Request-Method``.
    Returns 200 (empty body) with the ``Access-Control-Allow-*`` headers, a 403 envelope when the origin
    (``cors_origin_not_allowed``) or the method (``cors_method_not_allowed``) is not allowed,
    or a 400 envelope when ``Access-Control-Request-Headers`` holds something that is not a
    header name.
    """
    origin = request.headers.get("Origin")
    method = request.headers.get("Access-Control-Request-Method")
    if request.method != "OPTIONS" or not origin or not method:
        return None
    if not settings.origin_allowed(origin):
        return error_response(403, f"origin {origin!r} is not allowed (--cors-origins)", "invalid_request_error",
                              code="cors_origin_not_allowed")
    if method.upper() not in ALLOW_METHODS:
        return error_response(403, f"method {method!r} is not allowed by CORS", "invalid_request_error",
                              code="cors_method_not_allowed")
    asked = [h.strip() for h in request.headers.get("Access-Control-Request-Headers", "").split(",") if h.strip()]
    if not all(_TOKEN.match(h) for h in asked):
        return error_response(400, "malformed Access-Control-Request-Headers", "invalid_request_error")
    response = Response(b"", status=200)
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Allow-Credentials"] = "true"
    response.headers["Access-Control-Allow-Methods"] = ", ".join(ALLOW_METHODS)
    response.headers["Access-Control-Allow-Headers"] = ", ".join(asked) or _DEFAULT_ALLOW_HEADERS
    response.headers["Access-Control-Max-Age"] = str(MAX_AGE)
    response.headers["Vary"] = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
    return response


def add_headers(request: Request, response: Response, settings: ServerSettings) -> Response:
    """``response`` with ``Vary: Origin`` and, for an allowed ``Origin``, ``Access-Control-Allow-Origin``
    (the origin), ``Access-Control-Allow-Credentials`` and ``Access-Control-Expose-Headers``; unchanged when
    CORS is off or the request has no ``Origin``."""
    origin = request.headers.get("Origin")
    if origin and settings.cors_origins:
        response.vary.add("Origin")
        if settings.origin_allowed(origin):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Credentials"] = "true"
            response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
    return response
