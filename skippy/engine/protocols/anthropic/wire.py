"""What ``/v1/messages`` sends: Anthropic's ``message``, its stream events, ``count_tokens`` and error objects.

msgspec Structs on :class:`~skippy.engine.protocols.base.WireStruct` (fields in
declaration order, ``/openapi.json`` built from them, a field that is
:data:`~msgspec.UNSET` is left out). Shapes follow Anthropic's Messages API:
a ``message`` with ``content`` blocks (``text``, ``tool_use``, ``thinking``),
``stop_reason`` / ``stop_sequence`` and ``usage``; the streaming events
``message_start``, ``content_block_start``, ``content_block_delta``
(``text_delta``, ``input_json_delta``, ``thinking_delta``), ``content_block_stop``,
``message_delta``, ``message_stop``, ``ping`` and ``error``, each sent as an
SSE event whose ``event:`` name is its ``type``. ``type`` is each Struct's msgspec tag
(``tag_field="type"``): it is encoded first, and it tells the members of a union apart.
"""

from __future__ import annotations

from typing import Any, Literal

from skippy.engine.protocols.base import UNSET, UnsetType, WireStruct

# -- content blocks ---------------------------------------------------------------------------------


class TextBlock(WireStruct, tag="text", tag_field="type", kw_only=True):
    """``{"type": "text", "text": ...}``."""

    text: str


class ToolUseBlock(WireStruct, tag="tool_use", tag_field="type", kw_only=True):
    """A tool call: ``id`` (``toolu_`` + hex), tool ``name``, ``input`` (the arguments object; ``{}`` at the
    start of a streamed block, whose arguments then come as ``input_json_delta`` events)."""

    id: str
    name: str
    input: dict[str, Any]


class ThinkingBlock(WireStruct, tag="thinking", tag_field="type", kw_only=True):
    """The model's reasoning (the chat format's ``reasoning_content``); ``signature`` is always ``""``:
    nothing here signs reasoning, and signatures sent back are not checked."""

    thinking: str
    signature: str = ""


ContentBlock = TextBlock | ToolUseBlock | ThinkingBlock


class AnthropicUsage(WireStruct, kw_only=True):
    """Anthropic ``usage`` in tokens: ``input_tokens`` are the prompt tokens prefilled for this request,
    ``cache_read_input_tokens`` those reused from the prefix cache (their sum is the prompt);
    ``cache_creation_input_tokens`` is always 0 (caching is automatic, nothing is billed for writing it)."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class AnthropicMessage(WireStruct, tag="message", tag_field="type", kw_only=True):
    """Anthropic ``message`` (the ``/v1/messages`` reply, and inside ``message_start``).

    ``stop_reason``: ``end_turn``, ``max_tokens``, ``stop_sequence`` or
    ``tool_use`` (``null`` in ``message_start``); ``stop_sequence``: the stop
    sequence that matched, else ``null``.
    """

    id: str
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: AnthropicUsage


class MessageTokensCount(WireStruct, kw_only=True):
    """``/v1/messages/count_tokens`` reply: the prompt's length in tokens, as ``/v1/messages`` would prefill it."""

    input_tokens: int


# -- models -----------------------------------------------------------------------------------------


class ModelInfo(WireStruct, tag="model", tag_field="type", kw_only=True):
    """Anthropic ``GET /v1/models`` entry: ``created_at`` is RFC 3339 (UTC)."""

    id: str
    display_name: str
    created_at: str


class ModelInfoList(WireStruct, kw_only=True):
    """Anthropic ``GET /v1/models``: one page of models (``has_more``: more follow ``last_id``)."""

    data: list[ModelInfo]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


# -- errors -----------------------------------------------------------------------------------------


class AnthropicErrorBody(WireStruct, kw_only=True):
    """Anthropic error object: ``type`` e.g. ``invalid_request_error``, ``authentication_error``,
    ``not_found_error``, ``request_too_large``, ``rate_limit_error``, ``api_error``, ``overloaded_error``;
    ``details`` only where Anthropic gives one (``{"error_code", ...}``: a refused message thread)."""

    type: str
    message: str
    details: dict[str, Any] | UnsetType = UNSET


class AnthropicError(WireStruct, tag="error", tag_field="type", kw_only=True):
    """Anthropic error envelope ``{"type": "error", "error": {"type", "message"}}``: every non-2xx answer of
    ``/v1/messages*``, and the ``error`` event that ends a stream which failed after its headers."""

    error: AnthropicErrorBody


# -- stream events ----------------------------------------------------------------------------------


class MessageStartEvent(WireStruct, tag="message_start", tag_field="type", kw_only=True):
    """The first event: the message with empty ``content`` and ``stop_reason: null``."""

    message: AnthropicMessage


class ContentBlockStartEvent(WireStruct, tag="content_block_start", tag_field="type", kw_only=True):
    """A new content block at ``index`` (0, 1, ...): ``text`` and ``thinking`` empty, ``tool_use`` with
    ``input: {}``."""

    index: int
    content_block: ContentBlock


class TextDelta(WireStruct, tag="text_delta", tag_field="type", kw_only=True):
    """Text to append to a ``text`` block."""

    text: str


class InputJSONDelta(WireStruct, tag="input_json_delta", tag_field="type", kw_only=True):
    """A fragment of a ``tool_use`` block's ``input`` as JSON text (the fragments joined are the object)."""

    partial_json: str


class ThinkingDelta(WireStruct, tag="thinking_delta", tag_field="type", kw_only=True):
    """Text to append to a ``thinking`` block."""

    thinking: str


class ContentBlockDeltaEvent(WireStruct, tag="content_block_delta", tag_field="type", kw_only=True):
    """A delta of the block at ``index``."""

    index: int
    delta: TextDelta | InputJSONDelta | ThinkingDelta


class ContentBlockStopEvent(WireStruct, tag="content_block_stop", tag_field="type", kw_only=True):
    """The block at ``index`` is complete."""

    index: int


class MessageDelta(WireStruct, kw_only=True):
    """The message's final ``stop_reason`` and ``stop_sequence``."""

    stop_reason: str | None
    stop_sequence: str | None = None


class MessageDeltaUsage(WireStruct, kw_only=True):
    """Cumulative usage at the end of a stream (replaces ``message_start``'s, which knew no cache hits yet)."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class MessageDeltaEvent(WireStruct, tag="message_delta", tag_field="type", kw_only=True):
    """After the last block: ``stop_reason``, ``stop_sequence`` and the usage."""

    delta: MessageDelta
    usage: MessageDeltaUsage


class MessageStopEvent(WireStruct, tag="message_stop", tag_field="type", kw_only=True):
    """The last event of a stream."""


class PingEvent(WireStruct, tag="ping", tag_field="type", kw_only=True):
    """A keep-alive event: one after ``message_start``, and one whenever no other came for
    ``--sse-ping-interval`` seconds."""


StreamEvent = (MessageStartEvent | ContentBlockStartEvent | ContentBlockDeltaEvent | ContentBlockStopEvent
               | MessageDeltaEvent | MessageStopEvent | PingEvent | AnthropicError)

#: every stream event Struct (each SSE event's ``data``; its ``event:`` name is the ``type``)
STREAM_EVENTS: tuple[type[WireStruct], ...] = (
    MessageStartEvent, ContentBlockStartEvent, ContentBlockDeltaEvent, ContentBlockStopEvent, MessageDeltaEvent,
    MessageStopEvent, PingEvent, AnthropicError)

#: every top-level object ``/v1/messages*`` sends (for the OpenAPI components)
RESPONSES: tuple[type[WireStruct], ...] = (AnthropicMessage, MessageTokensCount, *STREAM_EVENTS)

__all__ = [
    "RESPONSES", "STREAM_EVENTS", "AnthropicError", "AnthropicErrorBody", "AnthropicMessage",
    "AnthropicUsage", "ContentBlock", "ContentBlockDeltaEvent", "ContentBlockStartEvent", "ContentBlockStopEvent",
    "InputJSONDelta", "MessageDelta", "MessageDeltaEvent", "MessageDeltaUsage", "MessageStartEvent",
    "MessageStopEvent", "MessageTokensCount", "PingEvent", "StreamEvent", "TextBlock", "TextDelta", "ThinkingBlock",
    "ThinkingDelta", "ToolUseBlock",
]
