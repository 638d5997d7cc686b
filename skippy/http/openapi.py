"""The OpenAPI 3.1 description served at ``/openapi.json``.

Request schemas are generated from the msgspec request Structs the routes
decode (:mod:`skippy.engine.types`) with ``msgspec.json.schema_components``;
response schemas from the Structs below, which describe what the routes
return (OpenAI ``chat.completion`` / ``text_completion``, llama-server
``/tokenize``...). Every route may answer with an OpenAI error envelope
(the ``default`` response). Streaming responses are ``text/event-stream``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from skippy.engine.chat.prepare import ROLES
from skippy.engine.types import (ApplyTemplateRequest, ChatCompletionRequest, CompletionRequest, DetokenizeRequest,
                                 TokenizeRequest)


class ErrorBody(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEnvelope(msgspec.Struct):
    """OpenAI error envelope."""

    error: ErrorBody


class Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Timings(msgspec.Struct):
    """llama-server ``timings``: counts in tokens, times in milliseconds."""

    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float


class FunctionCall(msgspec.Struct):
    name: str
    arguments: str


class ToolCall(msgspec.Struct):
    id: str
    type: str
    function: FunctionCall


class AssistantMessage(msgspec.Struct):
    role: str
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(msgspec.Struct):
    index: int
    message: AssistantMessage
    logprobs: dict[str, Any] | None
    finish_reason: str


class ChatCompletion(msgspec.Struct):
    """OpenAI ``chat.completion``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None
    timings: Timings | None = None


class TextChoice(msgspec.Struct):
    index: int
    text: str
    logprobs: dict[str, Any] | None
    finish_reason: str


class TextCompletion(msgspec.Struct):
    """OpenAI ``text_completion``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage
    system_fingerprint: str | None = None
    timings: Timings | None = None


class Model(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str
    meta: dict[str, Any] | None = None


class ModelList(msgspec.Struct):
    object: str
    data: list[Model]


class Health(msgspec.Struct):
    """``/health`` when the model is loaded (llama-server shape)."""

    status: str
    slots_idle: int
    slots_processing: int
    requests_waiting: int


class TokenPiece(msgspec.Struct):
    id: int
    piece: str | list[int]


class TokenizeResponse(msgspec.Struct):
    tokens: list[int | TokenPiece]


class DetokenizeResponse(msgspec.Struct):
    content: str


class ApplyTemplateResponse(msgspec.Struct):
    prompt: str


_REQUESTS = [ChatCompletionRequest, CompletionRequest, TokenizeRequest, DetokenizeRequest, ApplyTemplateRequest]
_RESPONSES = [ErrorEnvelope, ChatCompletion, TextCompletion, ModelList, Health, TokenizeResponse,
              DetokenizeResponse, ApplyTemplateResponse]
_REF = "#/components/schemas/{name}"


def _ref(type_: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=type_.__name__)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


# One server-sent event (each ``data`` is a JSON chunk, an error envelope, or ``[DONE]``).
_SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer"}}}


def _operation(route: Any) -> dict[str, Any]:
    """The OpenAPI operation of one :class:`~skippy.http.routes.Route`."""
    if route.content_type == "application/json":
        content = _json(_ref(route.response) if route.response is not None else {"type": "object"})
    else:
        content = {route.content_type: {"schema": {"type": "string"}}}
    if route.sse:
        content["text/event-stream"] = {"schema": _SSE_EVENT}
    op: dict[str, Any] = {
        "summary": route.summary,
        "responses": {"200": {"description": "OK", "content": content},
                      "default": {"description": "OpenAI error envelope", "content": _json(_ref(ErrorEnvelope))}},
    }
    if route.body is not None:
        op["requestBody"] = {"required": True, "content": _json(_ref(route.body))}
    if not route.secured:
        op["security"] = []
    return op


def _paths() -> dict[str, Any]:
    """``paths`` from the route table (its documented routes, first path of each)."""
    from skippy.http.routes import ROUTES  # imported here: the table refers to this module's Structs

    paths: dict[str, Any] = {}
    for route in ROUTES:
        if route.documented:
            paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return paths


def _refine(components: dict[str, Any]) -> None:
    """Constraints the routes check beyond the Struct types (message roles, at least one message)."""
    message = components.get("Message", {}).get("properties", {})
    if "role" in message:
        message["role"] = {"type": "string", "enum": sorted(ROLES)}
    for name in ("ChatCompletionRequest", "ApplyTemplateRequest"):
        messages = components.get(name, {}).get("properties", {}).get("messages")
        if messages is not None:
            messages["minItems"] = 1


def openapi_document(*, auth: bool, version: str = "0.1.0") -> dict[str, Any]:
    """The OpenAPI 3.1 document; ``auth`` adds the bearer security scheme (all routes but ``/health``)."""
    _, components = msgspec.json.schema_components(_REQUESTS + _RESPONSES, ref_template=_REF)
    _refine(components)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "skippy-trio", "version": version,
                 "description": "OpenAI-compatible API (plus llama-server routes) served by skippy-trio."},
        "paths": _paths(),
        "components": {"schemas": components},
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
