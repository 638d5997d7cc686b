"""JSON replies, OpenAI error envelopes and server-sent events.

Every error the HTTP layer sends is an OpenAI envelope
``{"error": {"message", "type", "param", "code"}}``; 429 and 503 carry
``Retry-After`` (seconds).
"""

from __future__ import annotations

from typing import Any

import msgspec
from quart import Response

from skippy.engine.errors import EngineError
from skippy.engine.protocols.openai.wire import ErrorBody, ErrorEnvelope

_json = msgspec.json.Encoder()


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``body`` (anything msgspec encodes: dicts, lists, Structs) as an ``application/json`` response."""
    return Response(_json.encode(body), status=status, headers=headers, mimetype="application/json")


def error_response(status: int, message: str, type_: str, code: str | None = None, param: str | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """An OpenAI error envelope with HTTP ``status``."""
    return json_response(ErrorEnvelope(error=ErrorBody(message=message, type=type_, param=param, code=code)), status,
                         headers)


def engine_error_response(exc: EngineError) -> Response:
    """``exc`` as its envelope and status; 429 and 503 add ``Retry-After`` (``exc.retry_after``, default 1 s)."""
    headers = {"Retry-After": str(getattr(exc, "retry_after", 1))} if exc.status in (429, 503) else None
    return json_response(ErrorEnvelope.of(exc), exc.status, headers)


def sse(obj: Any) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    return b"data: " + _json.encode(obj) + b"\n\n"


def sse_event(name: str, obj: Any) -> bytes:
    """One named server-sent event: ``event: <name>``, ``data: <json>`` and a blank line (the OpenAI
    Responses stream names each event after its ``type``)."""
    return b"event: " + name.encode() + b"\ndata: " + _json.encode(obj) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"  # OpenAI's end-of-stream event
SSE_PING = b": ping\n\n"  # an SSE comment: clients ignore it, proxies see traffic (keep-alive)


def encode(obj: Any) -> bytes:
    """``obj`` as JSON bytes (the encoder the replies use)."""
    return _json.encode(obj)
