"""The OpenAPI 3.1 description served at ``/openapi.json``.

Generated with ``msgspec.json.schema_components`` from the same Structs the
server uses: the request Structs the routes decode
(:mod:`skippy.engine.protocols.openai.types`) and the wire Structs the engine builds and the
routes encode (:mod:`skippy.engine.protocols.openai.wire`: OpenAI ``chat.completion``,
``chat.completion.chunk``, ``text_completion``, llama-server ``/tokenize``...).
A response field is ``required`` unless the server may leave it out.
Every route may answer with an OpenAI error envelope (the ``default``
response). Streaming responses are ``text/event-stream``; each ``data``
event is a ``ChatCompletionChunk`` / ``TextCompletion`` (see the
components), an ``ErrorEnvelope``, or ``[DONE]``; ``/v1/responses``
streams named events (``event: response.created``...) whose ``data`` is a
``ResponseStreamEvent`` (:mod:`skippy.engine.protocols.responses.translate`), with no
``[DONE]``, and reports a late error as ``response.failed``.
The Anthropic routes
``/v1/messages*`` answer with :mod:`skippy.engine.protocols.anthropic.wire` Structs:
an ``AnthropicMessage``, stream events named by their ``type``, and
``AnthropicError`` envelopes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from skippy.engine.chat.prepare import ROLES
from skippy.engine.protocols.anthropic import wire as anthropic_wire
from skippy.engine.protocols.anthropic.types import CountTokensRequest, MessagesRequest
from skippy.engine.protocols.llama_server import wire as llama_wire
from skippy.engine.protocols.llama_server.types import (
    ApplyTemplateRequest,
    DetokenizeRequest,
    NativeCompletionRequest,
    SlotActionRequest,
    TokenizeRequest,
)
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from skippy.engine.protocols.openai.wire import ErrorEnvelope
from skippy.engine.protocols.responses import wire as responses_wire
from skippy.engine.protocols.responses.types import ResponsesRequest
from skippy.http.routes import ROUTES

_REQUESTS: list[type] = [ChatCompletionRequest, CompletionRequest, NativeCompletionRequest, TokenizeRequest,
                         DetokenizeRequest, ApplyTemplateRequest, SlotActionRequest, ResponsesRequest,
                         EmbeddingRequest]
_REQUESTS += [MessagesRequest, CountTokensRequest]  # Anthropic Messages
_RESPONSES: list[type] = (list(wire.RESPONSES) + list(llama_wire.RESPONSES) + list(responses_wire.RESPONSES)
              + list(anthropic_wire.RESPONSES))
# the body, reply and error Structs the route table names that the lists above do not (Ollama's model routes)
_REQUESTS += [r.body for r in ROUTES if isinstance(r.body, type) and r.body not in _REQUESTS]
_RESPONSES += [t for r in ROUTES for t in (r.response, r.error) if isinstance(t, type) and t not in _RESPONSES]
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
        body: dict[str, Any] = _ref(route.response) if route.response is not None else {"type": "object"}
        if route.shape == "list":
            body = {"type": "array", "items": body}
        elif route.shape == "native":  # response_fields keeps only the fields asked for: any object then
            fields = {"type": "object", "description": "with response_fields: the fields asked for, each under "
                                                       "its path (none of them when the answer has none)"}
            body = {"anyOf": [body, {"type": "array", "items": body}, fields, {"type": "array", "items": fields}]}
        content = _json(body)
    else:
        content = {route.content_type: {"schema": {"type": "string"}}}
    if route.sse is not None:
        # x-sse-data: what each event's ``data`` decodes to (OpenAPI 3.1 has no item schema for SSE)
        events = route.sse if isinstance(route.sse, tuple) else (route.sse,)
        data = [_ref(t) for t in events] + ([_ref(route.error)] if route.error not in events else [])
        content["text/event-stream"] = {"schema": _SSE_EVENT, "x-sse-data": {"oneOf": data}}
    if route.ndjson is not None:
        # x-ndjson-line: what each line decodes to (OpenAPI 3.1 has no item schema for a line stream either)
        content["application/x-ndjson"] = {"schema": {"type": "string"},
                                           "x-ndjson-line": {"oneOf": [_ref(route.ndjson), _ref(route.error)]}}
    envelope = ("OpenAI error envelope" if route.error is ErrorEnvelope else
                "Anthropic error envelope" if route.error is anthropic_wire.AnthropicError else
                f"error body ({route.error.__name__})")
    op: dict[str, Any] = {
        "summary": route.summary,
        "responses": {"200": {"description": "OK", "content": content},
                      "default": {"description": envelope, "content": _json(_ref(route.error))}},
    }
    params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
              for name in route.path_params]
    if route.handler.__name__ == "slot_action":
        params.append({"name": "action", "in": "query", "required": True,
                       "schema": {"type": "string", "enum": ["save", "restore", "erase"]}})
    if params:
        op["parameters"] = params
    if route.body is not None:
        body = _ref(route.body)
        op["requestBody"] = {"required": route.body is not SlotActionRequest,
                             "content": _json({"type": "array", "items": body} if route.body_list else body)}
    if not route.secured:
        op["security"] = []
    return op


def _paths() -> dict[str, Any]:
    """``paths`` from the route table (its documented routes, first path of each)."""
    paths: dict[str, Any] = {}
    for route in ROUTES:
        if route.documented:
            paths.setdefault(route.openapi_path, {})[route.method.lower()] = _operation(route)
    return paths


def _wire_structs() -> list[type[msgspec.Struct]]:
    """Every wire Struct: :mod:`~skippy.engine.protocols.openai.wire`'s and the other APIs' (subclasses anywhere)."""
    found: list[type[msgspec.Struct]] = []
    todo = list(wire.WireStruct.__subclasses__())
    while todo:
        t = todo.pop()
        found.append(t)
        todo += t.__subclasses__()
    return found


def _refine(components: dict[str, Any]) -> None:
    """Constraints beyond what msgspec derives from the Struct types.

    Requests: message roles, at least one message. Responses: every field
    that is always encoded is ``required`` (msgspec marks only fields without
    a default; ours with a default are still always sent, e.g. ``logprobs:
    null``), only :data:`msgspec.UNSET` ones may be missing.
    """
    for struct in _wire_structs():
        schema = components.get(struct.__name__)
        if schema is not None:
            tag = struct.__struct_config__.tag_field  # a tagged Struct's tag (``type``) is always encoded
            required = ([tag] if tag else []) + [f.encode_name for f in msgspec.structs.fields(struct)
                                                 if f.default is not msgspec.UNSET]
            if required:  # msgspec's own (fields without a default) stay
                schema["required"] = list(dict.fromkeys(schema.get("required", []) + required))
    message = components.get("Message", {}).get("properties", {})
    if "role" in message:
        message["role"] = {"type": "string", "enum": sorted(ROLES)}
    for name in ("ChatCompletionRequest", "ApplyTemplateRequest", "MessagesRequest", "CountTokensRequest"):
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
