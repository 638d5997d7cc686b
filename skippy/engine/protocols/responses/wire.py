"""The Responses API wire model: the ``response`` object, its output items and stream events.

Output items ``message`` (``output_text``), ``function_call`` (``call_id``,
``name``, ``namespace``, ``arguments``), ``custom_tool_call`` (``call_id``, ``name``, ``input``: a ``custom``
tool's raw text), ``reasoning`` (the chat message's
``reasoning_content`` as ``reasoning_text``); stream events carry a
``sequence_number`` from 0. Encoding rules are
:class:`~skippy.engine.protocols.base.WireStruct`'s.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from skippy.engine.protocols.base import WireStruct

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
    ``arguments`` a JSON object as text. A call to a function of a ``namespace`` tool names the function in
    ``name`` and its namespace in ``namespace`` (OpenAI's ``ResponseFunctionToolCall``); absent otherwise."""

    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    call_id: str
    name: str
    namespace: str | UnsetType = UNSET
    arguments: str


class ResponseCustomToolCall(WireStruct, kw_only=True, tag_field="type", tag="custom_tool_call"):
    """Output item ``custom_tool_call``: a call of a ``custom`` tool, whose ``input`` is the model's text as it
    is (OpenAI's ``ResponseCustomToolCall``; no ``status`` there); the ``custom_tool_call_output`` answering it
    names its ``call_id``. ``namespace`` as on :class:`ResponseFunctionCall`."""

    id: str
    call_id: str
    name: str
    namespace: str | UnsetType = UNSET
    input: str


class ResponseReasoningItem(WireStruct, kw_only=True, tag_field="type", tag="reasoning"):
    """Output item ``reasoning``: ``content`` holds the reasoning text; ``summary`` is always empty."""

    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    summary: list[Any] = msgspec.field(default_factory=list)
    content: list[ResponseReasoningText]


ResponseOutputItem = ResponseOutputMessage | ResponseFunctionCall | ResponseCustomToolCall | ResponseReasoningItem


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

    ``status``: ``queued`` (a ``background`` response not started), ``in_progress`` (stream snapshots, a
    running background response), ``completed``, ``incomplete`` (``incomplete_details.reason``:
    ``max_output_tokens``), ``failed`` (``error``) or ``cancelled`` (``POST /v1/responses/{id}/cancel``).
    ``created_at`` / ``completed_at``: Unix seconds (``completed_at`` only on a ``completed`` response, as
    OpenAI's: ``null`` while it runs and when it ends ``incomplete``, ``failed`` or ``cancelled``).
    The request's settings are echoed (``tools``, ``tool_choice``, ``text``,
    ``metadata``...); ``usage`` is ``null`` until the end.
    """

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
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
    ``item_id``, ``output_index``, ``delta`` / ``arguments``; ``response.custom_tool_call_input.delta`` /
    ``.done``: ``item_id``, ``output_index``, ``delta`` / ``input``.
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
    input: str | UnsetType = UNSET
    logprobs: list[Any] | UnsetType = UNSET


class ResponseDeleted(WireStruct, kw_only=True):
    """``DELETE /v1/responses/{id}``: ``{"id", "object": "response", "deleted": true}`` (OpenAI)."""

    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class ResponseItemList(WireStruct, kw_only=True):
    """``GET /v1/responses/{id}/input_items``: one page of a stored response's input items (OpenAI's list:
    ``data`` in ``order``, ``first_id`` / ``last_id`` of the page, ``null`` when it is empty; ``has_more``:
    a next page follows, asked for with ``after=last_id``). Each item has an ``id``, a ``type`` and
    message content as a list of parts."""

    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


#: the wire Structs of this API (for the OpenAPI components)
RESPONSES: tuple[type[WireStruct], ...] = (ResponseObject, ResponseStreamEvent, ResponseDeleted, ResponseItemList)
