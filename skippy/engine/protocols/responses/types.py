"""Request types of the OpenAI Responses API (``POST /v1/responses``), as msgspec Structs.

Shapes follow the ``openai`` Python package's ``openai.types.responses``: input
items ``message`` (a string or ``input_text`` / ``input_image`` parts), ``function_call``,
``function_call_output``, ``custom_tool_call``, ``custom_tool_call_output``, ``reasoning``; ``tools``
(``function``, ``custom`` and ``namespace``),
``text.format``, ``reasoning``. :mod:`.translate` maps them onto a chat request.
"""

from __future__ import annotations

from typing import Any

import msgspec

# -- request ----------------------------------------------------------------------------------------


class ResponseInputContent(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One content part of an input item: ``input_text`` / ``output_text`` (``text``) in messages,
    ``input_image`` (``image_url``: a base64 data URL; ``detail`` accepted, not acted on; ``file_id``
    refused) and ``input_file`` (``file_data``: a base64 data URL of a PDF or text file, ``filename``;
    ``file_id`` and ``file_url`` refused) in user messages and tool outputs, ``reasoning_text`` /
    ``summary_text`` in reasoning items, ``refusal`` (``refusal``: the text of a model's refusal, as OpenAI's output
    message holds it) in assistant messages. Other types are refused with 400."""

    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class ResponseInputItem(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One item of ``input`` (OpenAI ``ResponseInputItemParam``), all types in one Struct.

    ``type`` ``message`` (or absent, with a ``role``): ``role`` and ``content``;
    ``function_call``: ``call_id``, ``name``, ``arguments``; ``function_call_output``:
    ``call_id``, ``output``; ``custom_tool_call``: ``call_id``, ``name``, ``input`` (the text the model
    wrote for a ``custom`` tool); ``custom_tool_call_output``: ``call_id``, ``output``; ``reasoning``:
    ``content`` (``reasoning_text``) or ``summary``
    (``summary_text``). ``namespace``: the namespace tool of a ``function_call``'s function (OpenAI's
    ``ResponseFunctionToolCall.namespace``; accepted on a ``function_call_output``, not needed there).
    Which fields a type needs is checked by :func:`prepare` (400 naming ``input[i].<field>``).
    """

    type: str | None = None
    id: str | None = None
    role: str | None = None
    content: str | list[ResponseInputContent] | None = None
    status: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    input: str | None = None
    namespace: str | None = None
    output: str | list[ResponseInputContent] | None = None
    summary: list[ResponseInputContent] | None = None
    encrypted_content: str | None = None


class ResponseTool(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One entry of ``tools``: ``type: "function"`` (``name``, ``description``, ``parameters``, ``strict``),
    ``type: "custom"`` (``name``, ``description``, ``format``: ``{"type": "text"}`` or ``{"type": "grammar",
    "syntax": "regex" | "lark", "definition": ...}``: the model writes the tool's input as text), or
    ``type: "namespace"`` (OpenAI's ``NamespaceTool``: ``name``, ``description`` and the function or custom
    ``tools`` it groups, each called as ``namespace``/``name``). OpenAI's hosted and built-in tools (``web_search``,
    ``file_search``, ``mcp``...: :data:`~skippy.engine.protocols.responses.tools.HOSTED_TOOL_TYPES`) are
    left out of what the model sees; other types get 400 (see :func:`.translate.prepare`). Fields of other
    tool types (``external_web_access``...) are ignored."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    format: dict[str, Any] | None = None
    tools: list[ResponseTool] | None = None


class ResponseTextFormat(msgspec.Struct, omit_defaults=True, kw_only=True):
    """``text.format``: ``text``, ``json_object`` or ``json_schema`` (``name``, ``schema``, ``strict``,
    ``description``; the schema is enforced with a grammar, as ``response_format`` on chat)."""

    type: str
    name: str | None = None
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class ResponseTextConfig(msgspec.Struct, omit_defaults=True, kw_only=True):
    """``text``: the output ``format`` (``verbosity`` is accepted and echoed, not acted on)."""

    format: ResponseTextFormat | None = None
    verbosity: str | None = None


class ResponseReasoningConfig(msgspec.Struct, omit_defaults=True, kw_only=True):
    """``reasoning``: ``effort`` reaches the template as chat's ``reasoning_effort``; ``summary`` is echoed
    (no summaries are written: the reasoning text itself is the ``reasoning`` item's ``content``)."""

    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(msgspec.Struct, omit_defaults=True, kw_only=True):
    """``POST /v1/responses`` body (OpenAI Responses ``ResponseCreateParams``).

    ``input``: a string (one user message) or a list of items
    (:class:`ResponseInputItem`). ``store`` (default ``true``, as OpenAI):
    keep the response for ``GET /v1/responses/{id}`` and as a
    ``previous_response_id`` (``--responses-store``; bounded by ``--responses-store-size`` and
    ``--responses-ttl``).
    ``previous_response_id``: continue that stored response's conversation
    (its input and output items come first; its ``instructions`` do not).
    ``metadata``: up to 16 string pairs (keys up to 64 characters, values
    up to 512), echoed. ``truncation``: ``disabled`` (the default: a conversation over the context is a 400), or
    ``auto`` (the first items of the conversation are dropped until it fits:
    :func:`~skippy.engine.protocols.responses.translate.truncation_search`). ``include``, ``prompt_cache_key``
    and ``user`` are accepted. ``background: true`` (with ``store``, without ``stream``): the reply is the
    ``queued`` response at once, generation goes on in the server, ``GET /v1/responses/{id}`` shows it
    ``completed`` when done and ``POST /v1/responses/{id}/cancel`` stops it. ``conversation`` (OpenAI's
    Conversations API: an id, or ``{"id": ...}``) is declared only to be refused (400): this server has no
    Conversations API, and ignoring it would lose the conversation's context. ``mesh_hooks`` (skippy's, as
    on chat): run the hook policy and consultation for this turn (``false`` keeps them off, with
    ``model: "auto"`` and ``--hooks-default-on`` too).
    """

    model: str | None = None
    input: str | list[ResponseInputItem] | None = None
    instructions: str | None = None
    tools: list[ResponseTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: ResponseTextConfig | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: ResponseReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    include: list[str] | None = None
    truncation: str | None = None
    prompt_cache_key: str | None = None
    user: str | None = None
    background: bool | None = None
    mesh_hooks: bool | None = None
    conversation: str | dict[str, Any] | None = None
