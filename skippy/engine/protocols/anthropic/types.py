"""Request Structs of the Anthropic Messages API (``POST /v1/messages`` and ``/v1/messages/count_tokens``).

Field names and block types are Anthropic's (``anthropic-version: 2023-06-01``):
content blocks are tagged by ``type`` (``text``, ``image``, ``tool_use``,
``tool_result``, ``thinking``, ``redacted_thinking``), ``tool_choice`` and
``thinking`` likewise. Decoding (:func:`skippy.engine.protocols.base.decode_request`)
checks types and required fields (400 naming the path, e.g.
``$.messages[0].content[0].type``); what a translation cannot carry (a
file by id, a server tool) is refused by
:func:`skippy.engine.protocols.anthropic.translate.to_chat_request`. Unknown fields are
ignored as on the OpenAI routes (named in ``X-Skippy-Ignored-Fields``);
``cache_control`` is accepted everywhere and ignored (the prefix cache is automatic).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# -- content blocks ---------------------------------------------------------------------------------


class TextBlockParam(msgspec.Struct, tag="text", tag_field="type", kw_only=True, omit_defaults=True):
    """``{"type": "text", "text": ...}``; ``citations`` are accepted and ignored."""

    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[Any] | None = None


class ImageBlockParam(msgspec.Struct, tag="image", tag_field="type", kw_only=True, omit_defaults=True):
    """``{"type": "image", "source": {...}}``: a ``base64`` source (``media_type``, ``data``) becomes a chat
    ``image_url`` part; a ``url`` or ``file`` source is refused (400) by the translation."""

    source: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class DocumentBlockParam(msgspec.Struct, tag="document", tag_field="type", kw_only=True, omit_defaults=True):
    """``{"type": "document", "source": {...}, "title": ..., "context": ...}``: a ``base64`` PDF or text file
    becomes a chat ``file`` part, a ``text`` or ``content`` source its text (see
    :func:`~skippy.engine.protocols.anthropic.translate.document_parts`); ``citations`` is accepted and
    ignored (no citations are produced)."""

    source: dict[str, Any]
    title: str | None = None
    context: str | None = None
    citations: Any = None
    cache_control: dict[str, Any] | None = None


class ToolUseBlockParam(msgspec.Struct, tag="tool_use", tag_field="type", kw_only=True, omit_defaults=True):
    """An assistant's earlier tool call: ``id`` (``toolu_...``), tool ``name``, ``input`` object."""

    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlockParam(msgspec.Struct, tag="tool_result", tag_field="type", kw_only=True, omit_defaults=True):
    """The result of tool call ``tool_use_id`` in a user message: a string or text blocks; ``is_error``
    marks a failed call."""

    tool_use_id: str
    content: str | list[TextBlockParam | ImageBlockParam | DocumentBlockParam] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


class ThinkingBlockParam(msgspec.Struct, tag="thinking", tag_field="type", kw_only=True, omit_defaults=True):
    """An assistant's earlier reasoning; ``signature`` is accepted and not checked."""

    thinking: str
    signature: str | None = None


class RedactedThinkingBlockParam(msgspec.Struct, tag="redacted_thinking", tag_field="type", kw_only=True,
                                 omit_defaults=True):
    """Encrypted reasoning from Anthropic's servers: accepted and dropped (nothing here can read it)."""

    data: str


ContentBlockParam = (TextBlockParam | ImageBlockParam | DocumentBlockParam | ToolUseBlockParam | ToolResultBlockParam
                     | ThinkingBlockParam | RedactedThinkingBlockParam)


class MessageParam(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One turn: ``role`` ``user`` or ``assistant``; ``content`` a string or a list of blocks. ``system``: a
    system message at its place in the conversation (Anthropic's ``mid-conversation-system`` beta, which
    Claude Code sends for a non-Claude model name): a string or text blocks."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlockParam]


# -- tools, tool_choice, thinking, metadata ---------------------------------------------------------


class ToolParam(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A client tool: ``name``, ``description``, ``input_schema`` (a JSON schema object).

    ``type`` is ``custom`` or absent; Anthropic's ``bash_...`` and ``text_editor_...`` client tools have no
    ``input_schema`` (the translation gives the model their documented one); server tools (``web_search_...``,
    ``web_fetch_...``, ``code_execution_...``) are left out; other types are refused (400). Other fields
    (``max_characters``, ``max_uses``...) are ignored.
    """

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoiceAuto(msgspec.Struct, tag="auto", tag_field="type", kw_only=True, omit_defaults=True):
    """The model decides (OpenAI ``"auto"``)."""

    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(msgspec.Struct, tag="any", tag_field="type", kw_only=True, omit_defaults=True):
    """Some tool must be called (OpenAI ``"required"``)."""

    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(msgspec.Struct, tag="tool", tag_field="type", kw_only=True, omit_defaults=True):
    """Tool ``name`` must be called (OpenAI ``{"type": "function", "function": {"name": ...}}``)."""

    name: str
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(msgspec.Struct, tag="none", tag_field="type", kw_only=True, omit_defaults=True):
    """No tool may be called (OpenAI ``"none"``)."""


ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class ThinkingEnabled(msgspec.Struct, tag="enabled", tag_field="type", kw_only=True, omit_defaults=True):
    """Extended thinking on (the template's ``enable_thinking: true``); ``budget_tokens`` >= 1024 and below
    ``max_tokens`` (Anthropic's rules); ``display`` is accepted and ignored."""

    budget_tokens: int
    display: str | None = None


class ThinkingAdaptive(msgspec.Struct, tag="adaptive", tag_field="type", kw_only=True, omit_defaults=True):
    """The model decides when to think: ``enable_thinking: true`` (a reasoning template thinks when it does)."""

    display: str | None = None


class ThinkingBetweenTools(msgspec.Struct, tag="between_tools", tag_field="type", kw_only=True):
    """Thinking between tool calls: ``enable_thinking: true``."""


class ThinkingDisabled(msgspec.Struct, tag="disabled", tag_field="type", kw_only=True):
    """Extended thinking off (``enable_thinking: false``)."""


ThinkingConfig = ThinkingEnabled | ThinkingAdaptive | ThinkingBetweenTools | ThinkingDisabled


class JSONOutputFormat(msgspec.Struct, tag="json_schema", tag_field="type", kw_only=True):
    """``output_config.format``: the reply's text is JSON matching ``schema`` (OpenAI ``response_format``
    ``json_schema``, enforced by the same constraint)."""

    schema: dict[str, Any]


class OutputConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``output_config``: ``effort`` (``low`` ... ``max``) -> OpenAI ``reasoning_effort`` (``max`` ->
    ``xhigh``), ``format`` -> a JSON schema constraint."""

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JSONOutputFormat | None = None


class Metadata(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``metadata.user_id``: an opaque end-user id (OpenAI ``user``)."""

    user_id: str | None = None


# -- bodies -----------------------------------------------------------------------------------------


class CountTokensRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``POST /v1/messages/count_tokens`` body: what shapes the prompt (``model``, ``system``, ``messages``,
    ``tools``, ``tool_choice``, ``thinking``, ``output_config``). ``system``: a string or text blocks;
    ``cache_control`` (automatic prompt caching) is accepted and ignored. ``output_format`` is the
    structured-outputs beta's name (``structured-outputs-2025-11-13``, which CrewAI and older SDKs'
    ``beta.messages.parse`` send) for ``output_config.format``."""

    model: str | None = None
    messages: list[MessageParam]
    system: str | list[TextBlockParam] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    output_format: JSONOutputFormat | None = None
    cache_control: dict[str, Any] | None = None


class MessagesRequest(CountTokensRequest, kw_only=True, omit_defaults=True):
    """``POST /v1/messages`` body (Anthropic Messages): ``max_tokens`` is required.

    ``stop_sequences`` (at most 16), ``temperature``, ``top_p``, ``top_k``
    are passed to the sampler (the SDKs of late 2026 no longer send the last three;
    ``extra_body`` does); ``stream`` asks for server-sent events;
    ``metadata.user_id`` becomes OpenAI's ``user`` (the hook policy sees it). ``thread`` (the message-threads
    beta: the server keeps the conversation, a turn sends only its new messages) is refused with Anthropic's
    ``thread_unsupported_request``, on which the SDKs' threads and tool runner go on without one.
    ``mesh_hooks`` (skippy's, as on chat): run the hook policy and consultation for this request (``false``
    keeps them off, with ``model: "auto"`` and ``--hooks-default-on`` too).
    """

    max_tokens: int
    thread: Any = None
    mesh_hooks: bool | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: Metadata | None = None
