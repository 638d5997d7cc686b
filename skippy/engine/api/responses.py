"""OpenAI Responses API (``POST /v1/responses``) as a translation onto Chat Completions (sans-IO).

Nothing here generates: :func:`prepare` turns a Responses request (and the
conversation of its ``previous_response_id``) into the
:class:`~skippy.engine.types.ChatCompletionRequest` the engine already
serves, so templates, tool emulation, formats, hooks and the scheduler are
the chat route's; :meth:`Turn.from_chat` turns the ``chat.completion`` into
a Responses ``response`` object and :class:`ResponseEvents` turns the
``chat.completion.chunk`` stream into the Responses event stream. The
:class:`ResponseStore` keeps stored responses (``store: true``, OpenAI's
default) in a bounded LRU so a follow-up sends only its new items.

Shapes follow the OpenAI Responses API as the ``openai`` Python package
types it (``openai.types.responses``): input items ``message`` (a string or
``input_text`` parts), ``function_call``, ``function_call_output``,
``reasoning``; output items ``message`` (``output_text``),
``function_call`` (``call_id``, ``name``, ``arguments``), ``reasoning``
(the chat message's ``reasoning_content`` as ``reasoning_text``); stream
events with ``sequence_number`` from 0. What the translation maps:

============================== ==========================================
Responses                      Chat Completions
============================== ==========================================
``instructions``               a first ``system`` message (not carried
                               over by ``previous_response_id``, as OpenAI)
``input`` items                ``messages`` (consecutive ``function_call``
                               items are one assistant message's
                               ``tool_calls``; ``reasoning`` becomes the next
                               assistant message's ``reasoning_content``)
``tools`` (``function`` only)  ``tools`` (``{"type": "function", "function": ...}``)
``tool_choice``                ``tool_choice`` (``allowed_tools`` narrows ``tools``)
``text.format``                ``response_format``
``max_output_tokens``          ``max_completion_tokens``
``reasoning.effort``           ``reasoning_effort``
finish ``length``              ``status: "incomplete"``,
                               ``incomplete_details.reason: "max_output_tokens"``
============================== ==========================================
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Any, Literal

import attrs
import msgspec
from msgspec import UNSET, UnsetType

from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.output import wire
from skippy.engine.output.wire import WireStruct
from skippy.engine.types import (
    ChatCompletionRequest,
    ContentPart,
    JsonSchemaFormat,
    Message,
    ResponseFormat,
    StreamOptions,
)

# -- request ----------------------------------------------------------------------------------------


class ResponseInputContent(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One content part of an input item: ``input_text`` / ``output_text`` (``text``) in messages,
    ``reasoning_text`` / ``summary_text`` in reasoning items. Other types (``input_image``,
    ``input_file``, ``refusal``...) are refused with 400 (this server reads text)."""

    type: str
    text: str | None = None


class ResponseInputItem(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One item of ``input`` (OpenAI ``ResponseInputItemParam``), all types in one Struct.

    ``type`` ``message`` (or absent, with a ``role``): ``role`` and ``content``;
    ``function_call``: ``call_id``, ``name``, ``arguments``; ``function_call_output``:
    ``call_id``, ``output``; ``reasoning``: ``content`` (``reasoning_text``) or ``summary``
    (``summary_text``). Which fields a type needs is checked by :func:`prepare` (400 naming
    ``input[i].<field>``).
    """

    type: str | None = None
    id: str | None = None
    role: str | None = None
    content: str | list[ResponseInputContent] | None = None
    status: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ResponseInputContent] | None = None
    summary: list[ResponseInputContent] | None = None
    encrypted_content: str | None = None


class ResponseTool(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One entry of ``tools``: only ``type: "function"`` (``name``, ``description``, ``parameters``,
    ``strict``) is served; OpenAI's hosted tools (``web_search``, ``file_search``, ``mcp``...) get 400."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


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
    ``previous_response_id`` (bounded: ``--responses-store-size``).
    ``previous_response_id``: continue that stored response's conversation
    (its input and output items come first; its ``instructions`` do not).
    ``metadata``: up to 16 string pairs (keys up to 64 characters, values
    up to 512), echoed. ``include``, ``truncation`` (``disabled``, or
    ``auto`` which never has to drop anything that fits), ``prompt_cache_key``
    and ``user`` are accepted; ``background: true`` gets 400.
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


# -- response (wire) ---------------------------------------------------------------------------------


class ResponseOutputText(WireStruct, kw_only=True, tag_field="type", tag="output_text"):
    """An ``output_text`` part of a ``message`` item (no annotations or logprobs are produced)."""

    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class ResponseReasoningText(WireStruct, kw_only=True, tag_field="type", tag="reasoning_text"):
    """A ``reasoning_text`` part of a ``reasoning`` item: the model's reasoning (chat ``reasoning_content``)."""

    text: str


class ResponseOutputMessage(WireStruct, kw_only=True, tag_field="type", tag="message"):
    """Output item ``message``: the assistant's text."""

    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[ResponseOutputText]


class ResponseFunctionCall(WireStruct, kw_only=True, tag_field="type", tag="function_call"):
    """Output item ``function_call``: ``call_id`` is what the ``function_call_output`` answering it names;
    ``arguments`` a JSON object as text."""

    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    call_id: str
    name: str
    arguments: str


class ResponseReasoningItem(WireStruct, kw_only=True, tag_field="type", tag="reasoning"):
    """Output item ``reasoning``: ``content`` holds the reasoning text; ``summary`` is always empty."""

    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    summary: list[Any] = msgspec.field(default_factory=list)
    content: list[ResponseReasoningText]


ResponseOutputItem = ResponseOutputMessage | ResponseFunctionCall | ResponseReasoningItem


class ResponseInputTokensDetails(WireStruct, kw_only=True):
    """``usage.input_tokens_details``: ``cached_tokens`` input tokens came from the prefix cache,
    ``cache_write_tokens`` were prefilled this time (what the prefix cache keeps, when it is on)."""

    cached_tokens: int = 0
    cache_write_tokens: int = 0


class ResponseOutputTokensDetails(WireStruct, kw_only=True):
    """``usage.output_tokens_details``: ``reasoning_tokens`` of the output were reasoning (counted by
    tokenizing the reasoning text)."""

    reasoning_tokens: int = 0


class ResponseUsage(WireStruct, kw_only=True):
    """OpenAI Responses ``usage`` (tokens)."""

    input_tokens: int
    input_tokens_details: ResponseInputTokensDetails
    output_tokens: int
    output_tokens_details: ResponseOutputTokensDetails
    total_tokens: int


class ResponseIncompleteDetails(WireStruct, kw_only=True):
    """Why a response is ``incomplete``: ``max_output_tokens`` (or the context was full)."""

    reason: str


class ResponseError(WireStruct, kw_only=True):
    """The error of a ``failed`` response (``code``: one of OpenAI's, see :meth:`ResponseEvents.failed`)."""

    code: str
    message: str


class ResponseReasoningEcho(WireStruct, kw_only=True):
    """The request's ``reasoning``, echoed."""

    effort: str | None = None
    summary: str | None = None


class ResponseObject(WireStruct, kw_only=True):
    """OpenAI Responses ``response`` object: the reply of ``POST /v1/responses`` (and ``GET``), and the
    ``response`` of the lifecycle stream events.

    ``status``: ``in_progress`` (stream snapshots), ``completed``,
    ``incomplete`` (``incomplete_details.reason``: ``max_output_tokens``) or
    ``failed`` (``error``). ``created_at`` / ``completed_at``: Unix seconds.
    The request's settings are echoed (``tools``, ``tool_choice``, ``text``,
    ``metadata``...); ``usage`` is ``null`` until the end.
    """

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: ResponseIncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[ResponseOutputItem]
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: ResponseReasoningEcho = msgspec.field(default_factory=ResponseReasoningEcho)
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = msgspec.field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    background: bool = False


class ResponseStreamEvent(WireStruct, kw_only=True):
    """One event of a streamed response (SSE ``event: <type>``, ``data``: this object).

    ``type`` and ``sequence_number`` (0, 1, 2... per response) are always
    there; the other fields are those of the event type, as OpenAI sends them:
    ``response.created`` / ``.in_progress`` / ``.completed`` / ``.incomplete`` /
    ``.failed``: ``response``; ``response.output_item.added`` / ``.done``:
    ``output_index``, ``item``; ``response.content_part.added`` / ``.done``:
    ``item_id``, ``output_index``, ``content_index``, ``part``;
    ``response.output_text.delta`` / ``.done``: ``item_id``, ``output_index``,
    ``content_index``, ``delta`` / ``text``, ``logprobs``;
    ``response.reasoning_text.delta`` / ``.done``: the same without
    ``logprobs``; ``response.function_call_arguments.delta`` / ``.done``:
    ``item_id``, ``output_index``, ``delta`` / ``arguments``.
    """

    type: str
    sequence_number: int
    response: ResponseObject | UnsetType = UNSET
    output_index: int | UnsetType = UNSET
    item_id: str | UnsetType = UNSET
    content_index: int | UnsetType = UNSET
    item: ResponseOutputItem | UnsetType = UNSET
    part: ResponseOutputText | ResponseReasoningText | UnsetType = UNSET
    delta: str | UnsetType = UNSET
    text: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET
    logprobs: list[Any] | UnsetType = UNSET


class ResponseDeleted(WireStruct, kw_only=True):
    """``DELETE /v1/responses/{id}``: ``{"id", "object": "response", "deleted": true}`` (OpenAI)."""

    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


#: the wire Structs of this API (for the OpenAPI components)
RESPONSES: tuple[type[WireStruct], ...] = (ResponseObject, ResponseStreamEvent, ResponseDeleted)


class ResponseNotFound(EngineError):
    """404: no stored response has this id (never stored, deleted, or evicted from the LRU store)."""

    status = 404
    type = "invalid_request_error"
    code = "response_not_found"


# -- ids --------------------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    """``resp_`` / ``msg_`` / ``fc_`` / ``rs_`` + 48 random hex chars (OpenAI's id shapes)."""
    return f"{prefix}_{secrets.token_hex(24)}"


# -- the store --------------------------------------------------------------------------------------

@attrs.frozen
class StoredResponse:
    """A stored response and its whole conversation as input items (``items``: the previous responses'
    items, this request's input, this response's output), what a ``previous_response_id`` continues."""

    response: ResponseObject
    items: tuple[ResponseInputItem, ...]


class ResponseStore:
    """Stored responses by id, least recently used evicted past ``max_size`` (0: nothing is stored).

    Bounded where OpenAI keeps responses for 30 days: a server in memory
    keeps the last ``max_size`` (``--responses-store-size``). Items are
    shared between a response and its follow-ups (a tuple of references),
    so a long conversation is not copied per turn. Not thread-safe: one
    event loop owns it.
    """

    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self.max_size = max_size
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, stored: StoredResponse) -> None:
        """Keep ``stored`` (the most recently used), evicting the least recently used past ``max_size``."""
        if self.max_size == 0:
            return
        self._entries[stored.response.id] = stored
        self._entries.move_to_end(stored.response.id)
        while len(self._entries) > self.max_size:
            self._entries.popitem(last=False)

    def get(self, response_id: str, *, param: str | None = None) -> StoredResponse:
        """The stored response (now the most recently used); raises :class:`ResponseNotFound` (404,
        naming ``param``) when there is none."""
        stored = self._entries.get(response_id)
        if stored is None:
            raise ResponseNotFound(f"Response with id {response_id!r} not found (never stored, deleted, or "
                                   f"evicted: this server keeps the last {self.max_size}, --responses-store-size)",
                                   param=param)
        self._entries.move_to_end(response_id)
        return stored

    def delete(self, response_id: str) -> None:
        """Forget a stored response; raises :class:`ResponseNotFound` (404) when there is none."""
        if self._entries.pop(response_id, None) is None:
            raise ResponseNotFound(f"Response with id {response_id!r} not found")


# -- request -> chat request ---------------------------------------------------------------------------

#: OpenAI's ``metadata`` limits: pairs, key and value characters
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})


def _texts(parts: list[ResponseInputContent], param: str, kinds: frozenset[str] = _TEXT_PARTS) -> list[str]:
    out = []
    for j, part in enumerate(parts):
        if part.type not in kinds:
            raise InvalidRequest(f"{param}[{j}].type {part.type!r} is not supported here (this server reads "
                                 f"{', '.join(sorted(kinds))} parts)", param=f"{param}[{j}].type")
        if part.text is None:
            raise InvalidRequest(f"{param}[{j}].text is required", param=f"{param}[{j}].text")
        out.append(part.text)
    return out


def _reasoning_text(item: ResponseInputItem, param: str) -> str:
    if isinstance(item.content, list) and item.content:
        return "".join(_texts(item.content, f"{param}.content", frozenset({"reasoning_text"})))
    return "\n".join(_texts(item.summary or [], f"{param}.summary", frozenset({"summary_text"})))


def chat_messages(instructions: str | None, items: list[ResponseInputItem] | tuple[ResponseInputItem, ...],
                  *, first: int = 0) -> list[Message]:
    """Chat messages for ``instructions`` and the input ``items`` (see the module table).

    ``first``: the index of ``items[0]`` in the request's ``input`` (errors name
    ``input[first + i]``: items before it came from the store). Raises
    :class:`InvalidRequest` (400) naming ``input[i].<field>`` for an unknown
    item type, a missing field, or a content part that is not text.
    """
    messages: list[Message] = [Message(role="system", content=instructions)] if instructions is not None else []
    reasoning = ""  # a reasoning item's text, for the next assistant message

    def assistant() -> Message:
        """The assistant message a function call joins: the last one, unless a tool result or a user turn
        came after it."""
        nonlocal reasoning
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant" and not reasoning:
            return last
        messages.append(Message(role="assistant", content=None, reasoning_content=reasoning or None))
        reasoning = ""
        return messages[-1]

    for i, item in enumerate(items):
        param = f"input[{i - first}]" if i >= first else "previous_response_id"
        kind = item.type if item.type is not None else ("message" if item.role is not None else None)
        if kind == "message":
            if item.role not in _MESSAGE_ROLES:
                raise InvalidRequest(f"{param}.role must be one of {sorted(_MESSAGE_ROLES)}, got {item.role!r}",
                                     param=f"{param}.role")
            if item.content is None:
                raise InvalidRequest(f"{param}.content is required (a string or a list of input_text parts)",
                                     param=f"{param}.content")
            if item.role == "assistant":
                text = item.content if isinstance(item.content, str) else "".join(
                    _texts(item.content, f"{param}.content"))
                messages.append(Message(role="assistant", content=text, reasoning_content=reasoning or None))
                reasoning = ""
            else:
                content: str | list[ContentPart] = item.content if isinstance(item.content, str) else [
                    ContentPart(type="text", text=t) for t in _texts(item.content, f"{param}.content")]
                messages.append(Message(role=item.role, content=content))
        elif kind == "function_call":
            for field in ("call_id", "name", "arguments"):
                if getattr(item, field) is None:
                    raise InvalidRequest(f"{param}.{field} is required for a function_call item",
                                         param=f"{param}.{field}")
            message = assistant()
            message.tool_calls = (message.tool_calls or []) + [
                {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}]
        elif kind == "function_call_output":
            if item.call_id is None:
                raise InvalidRequest(f"{param}.call_id is required for a function_call_output item",
                                     param=f"{param}.call_id")
            if item.output is None:
                raise InvalidRequest(f"{param}.output is required (a string or a list of input_text parts)",
                                     param=f"{param}.output")
            output = item.output if isinstance(item.output, str) else "".join(_texts(item.output, f"{param}.output"))
            messages.append(Message(role="tool", content=output, tool_call_id=item.call_id))
        elif kind == "reasoning":
            reasoning += _reasoning_text(item, param)
        elif kind is None:
            raise InvalidRequest(f"{param} needs a type (message, function_call, function_call_output, reasoning) "
                                 "or a role", param=f"{param}.type")
        else:
            raise InvalidRequest(f"{param}.type {kind!r} is not supported (this server takes message, "
                                 "function_call, function_call_output and reasoning items)", param=f"{param}.type")
    return messages


def _input_items(value: str | list[ResponseInputItem] | None) -> list[ResponseInputItem]:
    if value is None:
        return []
    if isinstance(value, str):
        return [ResponseInputItem(type="message", role="user", content=value)]
    return list(value)


def _chat_tools(tools: list[ResponseTool] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.type != "function":
            raise InvalidRequest(f"tools[{i}].type {tool.type!r} is not supported: this server runs function "
                                 "tools only", param=f"tools[{i}].type")
        if not tool.name:
            raise InvalidRequest(f"tools[{i}].name is required for a function tool", param=f"tools[{i}].name")
        fn: dict[str, Any] = {"name": tool.name}
        for key in ("description", "parameters", "strict"):
            if getattr(tool, key) is not None:
                fn[key] = getattr(tool, key)
        out.append({"type": "function", "function": fn})
    return out


def _chat_tool_choice(choice: str | dict[str, Any] | None,
                      tools: list[dict[str, Any]] | None) -> tuple[Any, list[dict[str, Any]] | None]:
    """Chat's ``tool_choice`` and ``tools``: a named function -> chat's named form; ``allowed_tools``
    keeps only the listed function tools, with ``mode`` ``auto`` or ``required``."""
    if choice is None or isinstance(choice, str):
        return choice, tools
    kind = choice.get("type")
    if kind == "function":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("tool_choice.name is required for a function tool choice", param="tool_choice")
        return {"type": "function", "function": {"name": name}}, tools
    if kind == "allowed_tools":
        mode, listed = choice.get("mode", "auto"), choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(listed, list):
            raise InvalidRequest("tool_choice allowed_tools needs mode 'auto' or 'required' and a list of tools",
                                 param="tool_choice")
        names = set()
        for t in listed:
            if not (isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str)):
                raise InvalidRequest("tool_choice allowed_tools lists function tools only ({\"type\": "
                                     "\"function\", \"name\": ...})", param="tool_choice")
            names.add(t["name"])
        return mode, [t for t in tools or [] if t["function"]["name"] in names]
    raise InvalidRequest(f"tool_choice type {kind!r} is not supported (use 'auto', 'none', 'required', "
                         "{\"type\": \"function\", \"name\": ...} or allowed_tools)", param="tool_choice")


def _response_format(text: ResponseTextConfig | None) -> ResponseFormat | None:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    if fmt.type == "json_schema":
        if fmt.schema is None:
            raise InvalidRequest("text.format.schema is required for json_schema", param="text.format.schema")
        return ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(
            name=fmt.name, schema=fmt.schema, strict=fmt.strict, description=fmt.description))
    raise InvalidRequest(f"text.format.type must be 'text', 'json_object' or 'json_schema', got {fmt.type!r}",
                         param="text.format.type")


def _check_metadata(metadata: dict[str, str] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequest(f"metadata has {len(metadata)} pairs; at most {MAX_METADATA_PAIRS}", param="metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
            raise InvalidRequest(f"metadata keys are at most {MAX_METADATA_KEY} characters and values at most "
                                 f"{MAX_METADATA_VALUE}", param="metadata")


#: chat request fields (as errors name them) -> the Responses field they came from
_PARAMS = (("messages", "input"), ("response_format", "text.format"), ("json_schema", "text.format"),
           ("reasoning_effort", "reasoning.effort"), ("max_completion_tokens", "max_output_tokens"),
           ("max_tokens", "max_output_tokens"))


def responses_param(param: str | None) -> str | None:
    """A chat request's field name (as an engine error names it) as the Responses field it came from:
    ``messages[3].content`` -> ``input``, ``tools[0].function.name`` -> ``tools[0].name``,
    ``response_format`` -> ``text.format``, ``max_completion_tokens`` -> ``max_output_tokens``."""
    if param is None:
        return None
    for chat, ours in _PARAMS:
        if param == chat or param.startswith(chat + "[") or param.startswith(chat + "."):
            return ours
    if param.startswith("tools[") and ".function." in param:
        return param.replace(".function.", ".", 1)
    return param


def rename_params(exc: EngineError) -> EngineError:
    """``exc`` with its ``param`` renamed by :func:`responses_param` (in place; returned for ``raise``)."""
    exc.param = responses_param(exc.param)
    return exc


@attrs.frozen
class Turn:
    """One Responses request, translated: ``chat`` is what the engine serves.

    ``history``: the items of the ``previous_response_id`` conversation;
    ``input``: this request's items; ``id`` / ``created_at`` (Unix seconds) /
    ``model``: the response's.
    """

    request: ResponsesRequest
    id: str
    created_at: int
    model: str
    history: tuple[ResponseInputItem, ...]
    input: tuple[ResponseInputItem, ...]
    chat: ChatCompletionRequest

    # -- results -----------------------------------------------------------------------------------
    def response(self, output: list[Any], status: str, *, usage: ResponseUsage | None = None,
                 error: ResponseError | None = None) -> ResponseObject:
        """The ``response`` object with this request's settings echoed."""
        req = self.request
        fmt = req.text.format if req.text is not None and req.text.format is not None else None
        text: dict[str, Any] = {"format": msgspec.to_builtins(fmt) if fmt is not None else {"type": "text"}}
        if req.text is not None and req.text.verbosity is not None:
            text["verbosity"] = req.text.verbosity
        done = status in ("completed", "incomplete")
        return ResponseObject(
            id=self.id, created_at=self.created_at, status=status,  # type: ignore[arg-type]
            completed_at=int(time.time()) if done else None, error=error,
            incomplete_details=ResponseIncompleteDetails(reason="max_output_tokens") if status == "incomplete"
            else None,
            instructions=req.instructions, max_output_tokens=req.max_output_tokens, model=self.model, output=output,
            parallel_tool_calls=req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
            previous_response_id=req.previous_response_id,
            reasoning=ResponseReasoningEcho(effort=req.reasoning.effort if req.reasoning else None,
                                            summary=req.reasoning.summary if req.reasoning else None),
            store=req.store, temperature=req.temperature, text=text,
            tool_choice=req.tool_choice if req.tool_choice is not None else "auto",
            tools=msgspec.to_builtins(req.tools or []), top_p=req.top_p, truncation=req.truncation or "disabled",
            usage=usage, user=req.user, metadata=dict(req.metadata or {}))

    def from_chat(self, completion: wire.ChatCompletion, *, reasoning_tokens: int = 0) -> ResponseObject:
        """The ``response`` for a non-streamed ``chat.completion`` (its one choice)."""
        choice = completion.choices[0]
        m = choice.message
        calls = [(tc.id, tc.function.name, tc.function.arguments)
                 for tc in (m.tool_calls if m.tool_calls is not UNSET else [])]
        reasoning = m.reasoning_content if m.reasoning_content is not UNSET else ""
        status = finish_status(choice.finish_reason)
        output: list[Any] = []
        if reasoning:
            output.append(ResponseReasoningItem(id=new_id("rs"), status="completed",
                                                content=[ResponseReasoningText(text=reasoning)]))
        if m.content or not calls:
            output.append(ResponseOutputMessage(id=new_id("msg"), status="completed",
                                                content=[ResponseOutputText(text=m.content or "")]))
        output += [ResponseFunctionCall(id=new_id("fc"), status="completed", call_id=cid, name=name,
                                        arguments=args) for cid, name, args in calls]
        if status == "incomplete":
            output[-1] = msgspec.structs.replace(output[-1], status="incomplete")
        return self.response(output, status, usage=response_usage(completion.usage, reasoning_tokens))

    def stored(self, response: ResponseObject) -> StoredResponse:
        """What the store keeps: the response and its conversation (history, input, output as input items)."""
        return StoredResponse(response, self.history + self.input + tuple(as_input(response.output)))


def prepare(req: ResponsesRequest, previous: StoredResponse | None, *, model: str,
            response_id: str | None = None, created_at: int | None = None) -> Turn:
    """Translate ``req`` (continuing ``previous``, the stored ``previous_response_id``) into a :class:`Turn`.

    Raises :class:`InvalidRequest` (400) naming the Responses field: an
    empty conversation (``input``), an unsupported item or part, a tool that
    is not a function (``tools[i].type``), a ``tool_choice`` or ``text.format``
    of another kind, ``metadata`` over OpenAI's limits, ``background: true``,
    ``max_output_tokens`` below 1. The chat path validates the rest (and
    its errors are renamed with :func:`rename_params`).
    """
    if req.background:
        raise InvalidRequest("background responses are not supported by this server", param="background")
    if req.max_output_tokens is not None and req.max_output_tokens < 1:
        raise InvalidRequest(f"max_output_tokens must be at least 1, got {req.max_output_tokens}",
                             param="max_output_tokens")
    if req.truncation not in (None, "auto", "disabled"):
        raise InvalidRequest(f"truncation must be 'auto' or 'disabled', got {req.truncation!r}", param="truncation")
    _check_metadata(req.metadata)
    history = previous.items if previous is not None else ()
    items = tuple(_input_items(req.input))
    messages = chat_messages(req.instructions, history + items, first=len(history))
    if not any(m.role != "system" for m in messages):
        raise InvalidRequest("input must hold at least one item (a string or a list of items)", param="input")
    tools = _chat_tools(req.tools)
    tool_choice, tools = _chat_tool_choice(req.tool_choice, tools)
    try:
        chat = ChatCompletionRequest(
            model=req.model, messages=messages, stream=req.stream,
            stream_options=StreamOptions(include_usage=True) if req.stream else None,
            max_completion_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p,
            user=req.user, response_format=_response_format(req.text), tools=tools, tool_choice=tool_choice,
            parallel_tool_calls=req.parallel_tool_calls,
            reasoning_effort=req.reasoning.effort if req.reasoning is not None else None,
            prompt_cache_key=req.prompt_cache_key)
    except EngineError as exc:
        raise rename_params(exc) from None
    return Turn(request=req, id=response_id or new_id("resp"),
                created_at=int(time.time()) if created_at is None else created_at, model=model,
                history=history, input=items, chat=chat)


# -- chat result -> response ---------------------------------------------------------------------------

def finish_status(finish_reason: str | None) -> str:
    """``incomplete`` for chat's ``length`` (``max_output_tokens`` or the context), else ``completed``
    (``stop``, ``tool_calls``, a hook policy's stop reason)."""
    return "incomplete" if finish_reason == "length" else "completed"


def response_usage(usage: wire.Usage, reasoning_tokens: int = 0) -> ResponseUsage:
    """Chat ``usage`` as Responses ``usage`` (``prompt_tokens`` -> ``input_tokens``...)."""
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=ResponseInputTokensDetails(
            cached_tokens=usage.prompt_tokens_details.cached_tokens,
            cache_write_tokens=usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens),
        output_tokens=usage.completion_tokens,
        output_tokens_details=ResponseOutputTokensDetails(reasoning_tokens=reasoning_tokens),
        total_tokens=usage.prompt_tokens + usage.completion_tokens)


def as_input(output: list[Any]) -> list[ResponseInputItem]:
    """Output items as the input items a follow-up turn would send back (what the store keeps)."""
    items = []
    for item in output:
        if isinstance(item, ResponseOutputMessage):
            items.append(ResponseInputItem(type="message", role="assistant", content="".join(
                p.text for p in item.content)))
        elif isinstance(item, ResponseFunctionCall):
            items.append(ResponseInputItem(type="function_call", call_id=item.call_id, name=item.name,
                                           arguments=item.arguments))
        elif isinstance(item, ResponseReasoningItem):
            items.append(ResponseInputItem(type="reasoning", content=[
                ResponseInputContent(type="reasoning_text", text=p.text) for p in item.content]))
    return items


@attrs.define
class _Item:
    """An output item being streamed: ``kind`` ``message`` / ``reasoning`` / ``function_call``; ``text`` its
    text or arguments so far; ``tool_index`` the chat delta's ``tool_calls[].index``."""

    kind: str
    id: str
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""
    tool_index: int = -1
    status: str = "in_progress"

    def wire(self) -> Any:
        if self.kind == "message":
            return ResponseOutputMessage(id=self.id, status=self.status,  # type: ignore[arg-type]
                                         content=[ResponseOutputText(text=self.text)] if self.status != "in_progress"
                                         else [])
        if self.kind == "reasoning":
            return ResponseReasoningItem(id=self.id, status=self.status,  # type: ignore[arg-type]
                                         content=[ResponseReasoningText(text=self.text)]
                                         if self.status != "in_progress" else [])
        return ResponseFunctionCall(id=self.id, status=self.status, call_id=self.call_id,  # type: ignore[arg-type]
                                    name=self.name, arguments=self.text)


class ResponseEvents:
    """The Responses event stream of one :class:`Turn`, from its ``chat.completion.chunk`` stream.

    :meth:`start`: ``response.created``, ``response.in_progress``.
    :meth:`feed` (each chunk): an item's ``response.output_item.added`` (and
    ``response.content_part.added`` for text) when its first delta comes,
    then ``response.output_text.delta`` / ``response.reasoning_text.delta`` /
    ``response.function_call_arguments.delta``; an item is closed (its
    ``.done`` events, then ``response.output_item.done``) when another one
    starts or the choice finishes. :meth:`finish` (the usage chunk):
    ``response.completed`` or ``response.incomplete``, with the whole
    response (:attr:`final`). :meth:`failed`: ``response.failed``.
    ``sequence_number`` counts every event from 0. The output items are the
    ones :meth:`Turn.from_chat` builds for the same text, in the order the
    deltas came (OpenAI's order).
    """

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.items: list[_Item] = []
        self.finish_reason: str | None = None
        self.final: ResponseObject | None = None
        self._seq = 0
        self._open: _Item | None = None

    @property
    def reasoning_text(self) -> str:
        """The reasoning text so far (to count its tokens for ``usage``)."""
        return "".join(i.text for i in self.items if i.kind == "reasoning")

    def _event(self, type_: str, **fields: Any) -> ResponseStreamEvent:
        event = ResponseStreamEvent(type=type_, sequence_number=self._seq, **fields)
        self._seq += 1
        return event

    def _snapshot(self, status: str, **extra: Any) -> ResponseObject:
        return self.turn.response([i.wire() for i in self.items], status, **extra)

    def start(self) -> list[ResponseStreamEvent]:
        """The first events: ``response.created`` and ``response.in_progress``."""
        return [self._event("response.created", response=self._snapshot("in_progress")),
                self._event("response.in_progress", response=self._snapshot("in_progress"))]

    def _part(self, item: _Item) -> ResponseOutputText | ResponseReasoningText:
        return ResponseOutputText(text=item.text) if item.kind == "message" else ResponseReasoningText(text=item.text)

    def _add(self, kind: str, **fields: Any) -> list[ResponseStreamEvent]:
        out = self._close()
        item = _Item(kind, new_id({"message": "msg", "reasoning": "rs", "function_call": "fc"}[kind]),
                     len(self.items), **fields)
        self.items.append(item)
        self._open = item
        out.append(self._event("response.output_item.added", output_index=item.index, item=item.wire()))
        if kind != "function_call":
            out.append(self._event("response.content_part.added", item_id=item.id, output_index=item.index,
                                   content_index=0, part=self._part(item)))
        return out

    def _close(self, status: str = "completed") -> list[ResponseStreamEvent]:
        item, self._open = self._open, None
        if item is None:
            return []
        item.status = status
        common = {"item_id": item.id, "output_index": item.index}
        if item.kind == "function_call":
            out = [self._event("response.function_call_arguments.done", arguments=item.text, **common)]
        else:
            done = "response.output_text.done" if item.kind == "message" else "response.reasoning_text.done"
            extra = {"logprobs": []} if item.kind == "message" else {}
            out = [self._event(done, content_index=0, text=item.text, **common, **extra),
                   self._event("response.content_part.done", content_index=0, part=self._part(item), **common)]
        out.append(self._event("response.output_item.done", output_index=item.index, item=item.wire()))
        return out

    def _text(self, kind: str, text: str) -> list[ResponseStreamEvent]:
        out = [] if self._open is not None and self._open.kind == kind else self._add(kind)
        item = self._open
        assert item is not None
        item.text += text
        common = {"item_id": item.id, "output_index": item.index, "content_index": 0, "delta": text}
        if kind == "message":
            out.append(self._event("response.output_text.delta", logprobs=[], **common))
        else:
            out.append(self._event("response.reasoning_text.delta", **common))
        return out

    def _tool(self, tc: wire.ToolCallDelta) -> list[ResponseStreamEvent]:
        out: list[ResponseStreamEvent] = []
        name = tc.function.name if tc.function.name is not UNSET else ""
        if tc.id is not UNSET:  # a call's first fragment
            out += self._add("function_call", call_id=tc.id, name=name, tool_index=tc.index)
        item = next((i for i in reversed(self.items) if i.kind == "function_call" and i.tool_index == tc.index),
                    None)
        if item is None:  # a fragment of a call that never started: not sent by any chat format
            return out
        if name and not item.name:
            item.name = name
        if tc.function.arguments:
            item.text += tc.function.arguments
            out.append(self._event("response.function_call_arguments.delta", item_id=item.id,
                                   output_index=item.index, delta=tc.function.arguments))
        return out

    def feed(self, chunk: wire.ChatCompletionChunk) -> list[ResponseStreamEvent]:
        """The events of one chat chunk (none for the role chunk); the finish chunk closes the last item
        (``incomplete`` when the finish is ``length``; an empty ``message`` when nothing was output, as
        :meth:`Turn.from_chat`)."""
        out: list[ResponseStreamEvent] = []
        for choice in chunk.choices:
            d = choice.delta
            if d.reasoning_content:
                out += self._text("reasoning", d.reasoning_content)
            if d.content:
                out += self._text("message", d.content)
            for tc in d.tool_calls if d.tool_calls is not UNSET else []:
                out += self._tool(tc)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                if not any(i.kind != "reasoning" for i in self.items):
                    out += self._add("message")
                out += self._close(finish_status(choice.finish_reason))
        return out

    def finish(self, usage: wire.Usage, *, reasoning_tokens: int = 0) -> list[ResponseStreamEvent]:
        """The last event: ``response.completed`` (or ``response.incomplete``) with the whole response."""
        out = self._close()
        status = finish_status(self.finish_reason)
        self.final = self._snapshot(status, usage=response_usage(usage, reasoning_tokens))
        out.append(self._event(f"response.{status}", response=self.final))
        return out

    def failed(self, exc: EngineError) -> ResponseStreamEvent:
        """``response.failed`` for an error after the stream started (deadline, shutdown, a runtime
        failure). ``error.code`` is one of OpenAI's: ``rate_limit_exceeded`` (429), ``invalid_prompt``
        (another 4xx), ``server_error`` (5xx: 503 shutdown, 504 deadline...); the message ends with our
        envelope's code in parentheses (e.g. ``(request_timeout)``)."""
        self._open = None
        code = ("rate_limit_exceeded" if exc.status == 429 else "invalid_prompt" if 400 <= exc.status < 500
                else "server_error")
        message = f"{exc.message} ({exc.code})" if exc.code else exc.message
        return self._event("response.failed", response=self._snapshot(
            "failed", error=ResponseError(code=code, message=message)))
