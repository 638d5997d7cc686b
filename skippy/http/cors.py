"""CORS (Fetch standard, "CORS protocol"): preflight answers and the headers of every response.

What it does, with ``--cors-origins`` (``ServerSettings.cors_origins``):

- A preflight (``OPTIONS`` with ``Origin`` and
  ``Access-Control-Request-Method``) to any path is answered before
  authentication (browsers send no key on preflight): 204 with
  ``Access-Control-Allow-Methods: GET, POST, OPTIONS``,
  ``Access-Control-Allow-Headers`` (the requested ones, or
  ``authorization, content-type``), ``Access-Control-Max-Age: 600`` and
  ``Vary: Origin, Access-Control-Request-Method, Access-Control-Request-Headers``;
  a 403 envelope (``cors_origin_not_allowed`` / ``cors_method_not_allowed``)
  for an origin or method not allowed, also when CORS is off; 400 for
  ``Access-Control-Request-Headers`` that are not HTTP header names.
- Every response to a request with an ``Origin`` (errors included, so a
  browser can read a 401 or a 429) gets ``Vary: Origin`` and, for an
  allowed origin, ``Access-Control-Allow-Origin`` (``*`` when ``*`` is
  configured, else the origin) and
  ``Access-Control-Expose-Headers: Retry-After, WWW-Authenticate``.
- Without ``--cors-origins`` no response carries a CORS header.

Why not quart-cors (0.8.0, checked against it): it never refuses a
preflight: a disallowed origin or method only gets a response without CORS
headers (the route's own automatic ``OPTIONS`` answer, 200 with ``Allow``),
where we answer a 403 envelope, and it does not check
``Access-Control-Request-Headers`` (we answer 400 when malformed). It
answers preflights to unknown paths with 404 (we answer every path), omits
``Vary: Origin`` when the allowed origin is ``*`` and never varies on the
request method and headers, and with ``allow_headers=["*"]`` sends an empty
``Access-Control-Allow-Headers`` when none were requested. With CORS off we
still answer preflights 403, which quart-cors (not installed on the app)
cannot do. Keeping those would leave only the two response headers to the
library, so the ~40 lines stay here.
"""

from __future__ import annotations

import re

from quart import Request, Response

from skippy.http.replies import error_response
from skippy.http.settings import ServerSettings

ALLOW_METHODS = ("GET", "POST", "OPTIONS")
MAX_AGE = 600  # seconds a browser may cache a preflight answer
EXPOSE_HEADERS = "Retry-After, WWW-Authenticate"
_DEFAULT_ALLOW_HEADERS = "authorization, content-type"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def preflight(request: Request, settings: ServerSettings) -> Response | None:
    """The answer to ``request`` if it is a CORS preflight, else ``None``.

    A preflight is ``OPTIONS`` with both ``Origin`` and ``Access-Control-Request-Method``.
    Returns 204 with the ``Access-Control-Allow-*`` headers, a 403 envelope when the origin
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
    response = Response(b"", status=204)
    del response.headers["Content-Type"]
    response.headers["Access-Control-Allow-Methods"] = ", ".join(ALLOW_METHODS)
    response.headers["Access-Control-Allow-Headers"] = ", ".join(asked) or _DEFAULT_ALLOW_HEADERS
    response.headers["Access-Control-Max-Age"] = str(MAX_AGE)
    response.headers["Vary"] = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
    return response


def add_headers(request: Request, response: Response, settings: ServerSettings) -> Response:
    """``response`` with ``Vary: Origin`` and, for an allowed ``Origin``, ``Access-Control-Allow-Origin``
    and ``Access-Control-Expose-Headers``; unchanged when CORS is off or the request has no ``Origin``."""
    origin = request.headers.get("Origin")
    if origin and settings.cors_origins:
        response.vary.add("Origin")
        if settings.origin_allowed(origin):
            response.headers["Access-Control-Allow-Origin"] = "*" if "*" in settings.cors_origins else origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
    return response
