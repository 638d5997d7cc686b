"""Responses input items as Chat Completions messages (sans-IO).

:func:`chat_messages` turns ``instructions`` and the input items (this request's, after those of its
``previous_response_id`` conversation) into chat messages: ``message`` items (a string, or ``input_text``
parts; ``input_image`` and ``input_file`` parts in user messages), ``function_call`` items (consecutive ones
are one assistant message's ``tool_calls``; a namespaced one under
:func:`~skippy.engine.protocols.responses.tools.namespaced_name`),
``custom_tool_call`` items (its ``input`` as the one argument of the function the model sees for the tool),
``function_call_output`` and ``custom_tool_call_output`` items (a string, or ``input_text`` and
``input_image`` parts: a tool's screenshot) as ``tool`` messages, and ``reasoning`` items as the next
assistant message's ``reasoning_content``.
:func:`image_params` names each image part as the Responses request does, for errors.
"""

from __future__ import annotations

import json
import re

import attrs

from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.protocols.openai.types import ContentPart, Message
from skippy.engine.protocols.responses.tools import CUSTOM_INPUT, namespaced_name
from skippy.engine.protocols.responses.types import ResponseInputContent, ResponseInputItem

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})

#: an assistant message's parts: OpenAI's output message holds ``output_text`` and ``refusal`` parts, and a client
#: that replays a conversation sends them back as they came
_ASSISTANT_PARTS = _TEXT_PARTS | {"refusal"}


_MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})


_USER_PARTS = _TEXT_PARTS | {"input_image", "input_file"}

#: ``detail`` of an ``input_image`` part (OpenAI's ``ImageDetail``): accepted, not acted on (libmtmd resizes every
#: image to the projector's input size)
IMAGE_DETAILS = frozenset({"auto", "low", "high", "original"})


def _text(part: ResponseInputContent, where: str, kinds: frozenset[str] = _TEXT_PARTS) -> str:
    if part.type not in kinds:
        also = f" ({part.type} parts are read in user messages and tool call outputs)" \
            if part.type in ("input_image", "input_file") else \
            " (refusal parts are read in assistant messages)" if part.type == "refusal" else ""
        raise InvalidRequest(f"{where}.type {part.type!r} is not supported here (this server reads "
                             f"{', '.join(sorted(kinds))} parts){also}", param=f"{where}.type")
    if part.type == "refusal":  # the model's refusal is what it said: its text
        if part.refusal is None:
            raise InvalidRequest(f"{where}.refusal is required for a refusal part", param=f"{where}.refusal")
        return part.refusal
    if part.text is None:
        raise InvalidRequest(f"{where}.text is required", param=f"{where}.text")
    return part.text


def _texts(parts: list[ResponseInputContent], param: str, kinds: frozenset[str] = _TEXT_PARTS) -> list[str]:
    return [_text(part, f"{param}[{j}]", kinds) for j, part in enumerate(parts)]


def image_part(part: ResponseInputContent, where: str) -> ContentPart:
    """An ``input_image`` part as chat's ``image_url`` part (``detail`` kept), whose data URL the chat path
    reads (:func:`~skippy.engine.chat.images.extract_images`: base64 ``data:`` URLs only, the limits). 400
    naming ``where.<field>`` for a ``file_id`` (this server has no Files API), a missing ``image_url``, or a
    ``detail`` that is none of :data:`IMAGE_DETAILS`."""
    if part.file_id is not None:
        raise InvalidRequest(f"{where}.file_id: images by file id are not supported (this server has no Files "
                             "API); send the image inline: image_url with a base64 data URL "
                             "(data:image/png;base64,...)", param=f"{where}.file_id")
    if part.image_url is None:
        raise InvalidRequest(f"{where}.image_url is required (a base64 data URL: data:image/png;base64,...)",
                             param=f"{where}.image_url")
    if part.detail is not None and part.detail not in IMAGE_DETAILS:
        raise InvalidRequest(f"{where}.detail must be one of {sorted(IMAGE_DETAILS)}, got {part.detail!r}",
                             param=f"{where}.detail")
    image = {"url": part.image_url} if part.detail is None else {"url": part.image_url, "detail": part.detail}
    return ContentPart(type="image_url", image_url=image)


def file_part(part: ResponseInputContent, where: str) -> ContentPart:
    """An ``input_file`` part as chat's ``file`` part (``file_data``: a base64 data URL, ``filename``), whose
    document the chat path reads (:mod:`skippy.engine.chat.documents`: PDFs and text files). 400 naming
    ``where.<field>`` for a ``file_id`` (this server has no Files API), a ``file_url`` (not fetched), a missing
    ``file_data``."""
    if part.file_id is not None:
        raise InvalidRequest(f"{where}.file_id: files by id are not supported (this server has no Files API); send "
                             "the file inline: file_data with a base64 data URL (data:application/pdf;base64,...)",
                             param=f"{where}.file_id")
    if part.file_url is not None:
        raise InvalidRequest(f"{where}.file_url: file URLs are not fetched by this server; send the file inline: "
                             "file_data with a base64 data URL", param=f"{where}.file_url")
    if part.file_data is None:
        raise InvalidRequest(f"{where}.file_data is required (a base64 data URL: data:application/pdf;base64,...)",
                             param=f"{where}.file_data")
    file = {"file_data": part.file_data} if part.filename is None else \
        {"file_data": part.file_data, "filename": part.filename}
    return ContentPart(type="file", file=file)


def _user_parts(parts: list[ResponseInputContent], param: str) -> list[ContentPart]:
    return [image_part(part, f"{param}[{j}]") if part.type == "input_image"
            else file_part(part, f"{param}[{j}]") if part.type == "input_file"
            else ContentPart(type="text", text=_text(part, f"{param}[{j}]", _USER_PARTS))
            for j, part in enumerate(parts)]


def _kind(item: ResponseInputItem) -> str | None:
    return item.type if item.type is not None else ("message" if item.role is not None else None)


def _reasoning_text(item: ResponseInputItem, param: str) -> str:
    if isinstance(item.content, list) and item.content:
        return "".join(_texts(item.content, f"{param}.content", frozenset({"reasoning_text"})))
    return "\n".join(_texts(item.summary or [], f"{param}.summary", frozenset({"summary_text"})))


#: the input item types :func:`chat_messages` takes, as its errors list them
_ITEM_TYPES = ("message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, "
               "reasoning")


#: a chat message (and tool call) as an engine error names it: ``messages[3].tool_calls[0]: function.`` or
#: ``messages[3].tool_calls[0].function.``, ``messages[3].content``, ``messages[3]``
_CHAT_NAME = re.compile(r"messages\[(\d+)\]"
                        r"(?:\.tool_calls\[(\d+)\](\.function\.|: function\.)?|(\.content)(\[\d+\])?)?")


@attrs.define
class MessageNames:
    """The Responses name of each chat message :func:`chat_messages` made, for errors: ``messages`` (per
    message: ``instructions``, ``input[i]``, or ``previous_response_id`` for a stored item), ``fields`` (per
    message: where its content came from, ``content`` or a tool output's ``output``), ``calls`` (message and
    tool call index -> the ``function_call`` or ``custom_tool_call`` item)."""

    messages: list[str] = attrs.Factory(list)
    fields: list[str] = attrs.Factory(list)
    calls: dict[tuple[int, int], str] = attrs.Factory(dict)

    def _name(self, m: re.Match[str]) -> str:
        i = int(m[1])
        if i >= len(self.messages):
            return m[0]
        if m[2] is not None:
            call = self.calls.get((i, int(m[2])))
            if call is None:
                return m[0]
            return call + ("." if m[3] else "")  # function.arguments -> the item's own arguments
        if m[4] and self.messages[i].startswith("input["):  # a tool output's content is its item's output
            return f"{self.messages[i]}.{self.fields[i]}{m[5] or ''}"
        return self.messages[i]  # instructions, or a stored item: the field as a whole

    def rename(self, exc: EngineError) -> EngineError:
        """``exc`` with the chat messages its message and ``param`` name (``messages[3].tool_calls[0]``)
        written as the Responses items they came from (``input[2]``), in place; returned for ``raise``."""
        exc.message = _CHAT_NAME.sub(self._name, exc.message)
        exc.args = (exc.message,)
        if exc.param is not None:
            exc.param = _CHAT_NAME.sub(self._name, exc.param)
        return exc


def chat_messages(instructions: str | None, items: list[ResponseInputItem] | tuple[ResponseInputItem, ...],
                  *, first: int = 0, names: MessageNames | None = None) -> list[Message]:
    """Chat messages for ``instructions`` and the input ``items`` (see the module table).

    ``first``: the index of ``items[0]`` in the request's ``input`` (errors name
    ``input[first + i]``: items before it came from the store). Raises
    :class:`InvalidRequest` (400) naming ``input[i].<field>`` for an unknown
    item type, a missing field, a content part that is not text, or a ``function_call_output`` /
    ``custom_tool_call_output`` of this request whose ``call_id`` no earlier ``function_call`` or
    ``custom_tool_call`` has (in ``input`` or the stored conversation): ``input[i].call_id``, with OpenAI's
    message ("No tool call found for function call output with call_id ..."). ``names``: filled with each
    message's Responses name (:class:`MessageNames`).
    """
    messages: list[Message] = [Message(role="system", content=instructions)] if instructions is not None else []
    names = names if names is not None else MessageNames()
    if instructions is not None:
        names.messages.append("instructions")
        names.fields.append("content")
    param = ""  # the item being read
    reasoning = ""  # a reasoning item's text, for the next assistant message
    call_ids: set[str] = set()  # the call_id of every tool call so far (stored and this request's)

    def assistant() -> Message:
        """The assistant message a function call joins: the last one, unless a tool result or a user turn
        came after it."""
        nonlocal reasoning
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant" and not reasoning:
            return last
        add(Message(role="assistant", content=None, reasoning_content=reasoning or None))
        reasoning = ""
        return messages[-1]

    def add(message: Message, field: str = "content") -> None:
        messages.append(message)
        names.messages.append(param)
        names.fields.append(field)

    for i, item in enumerate(items):
        param = f"input[{i - first}]" if i >= first else "previous_response_id"
        kind = _kind(item)
        if kind == "message":
            if item.role not in _MESSAGE_ROLES:
                raise InvalidRequest(f"{param}.role must be one of {sorted(_MESSAGE_ROLES)}, got {item.role!r}",
                                     param=f"{param}.role")
            if item.content is None:
                raise InvalidRequest(f"{param}.content is required (a string or a list of input_text or "
                                     "input_image parts)", param=f"{param}.content")
            if item.role == "assistant":
                text = item.content if isinstance(item.content, str) else "".join(
                    _texts(item.content, f"{param}.content", _ASSISTANT_PARTS))
                add(Message(role="assistant", content=text, reasoning_content=reasoning or None))
                reasoning = ""
            else:
                content: str | list[ContentPart] = (
                    item.content if isinstance(item.content, str)
                    else _user_parts(item.content, f"{param}.content") if item.role == "user"
                    else [ContentPart(type="text", text=t) for t in _texts(item.content, f"{param}.content")])
                add(Message(role=item.role, content=content))
        elif kind in ("function_call", "custom_tool_call"):
            for field in ("call_id", "name", "arguments" if kind == "function_call" else "input"):
                if getattr(item, field) is None:
                    raise InvalidRequest(f"{param}.{field} is required for a {kind} item", param=f"{param}.{field}")
            call_ids.add(item.call_id)  # type: ignore[arg-type]  # checked above
            message = assistant()
            name = item.name if item.namespace is None else namespaced_name(item.namespace, item.name or "")
            # a custom tool's input is the one string argument of the function the model sees for it
            arguments = item.arguments if kind == "function_call" else \
                json.dumps({CUSTOM_INPUT: item.input}, ensure_ascii=False)
            names.calls[len(messages) - 1, len(message.tool_calls or [])] = param
            message.tool_calls = (message.tool_calls or []) + [
                {"id": item.call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if item.call_id is None:
                raise InvalidRequest(f"{param}.call_id is required for a {kind} item", param=f"{param}.call_id")
            if i >= first and item.call_id not in call_ids:  # OpenAI's 400 (stored items were checked when sent)
                raise InvalidRequest(f"No tool call found for {kind.replace('_', ' ')} with call_id {item.call_id!r}: "
                                     f"{param}.call_id must be the call_id of a function_call or custom_tool_call "
                                     "earlier in input or in the previous_response_id conversation",
                                     param=f"{param}.call_id")
            if item.output is None:
                raise InvalidRequest(f"{param}.output is required (a string or a list of input_text and input_image "
                                     "parts)",
                                     param=f"{param}.output")
            output: str | list[ContentPart] = (
                item.output if isinstance(item.output, str)
                else _user_parts(item.output, f"{param}.output")
                if any(p.type in ("input_image", "input_file") for p in item.output)
                else "".join(_texts(item.output, f"{param}.output")))
            add(Message(role="tool", content=output, tool_call_id=item.call_id), "output")
        elif kind == "reasoning":
            reasoning += _reasoning_text(item, param)
        elif kind is None:
            raise InvalidRequest(f"{param} needs a type ({_ITEM_TYPES}) or a role", param=f"{param}.type")
        else:
            raise InvalidRequest(f"{param}.type {kind!r} is not supported (this server takes {_ITEM_TYPES} items)",
                                 param=f"{param}.type")
    return messages


def file_params(items: list[ResponseInputItem] | tuple[ResponseInputItem, ...], *, first: int = 0) -> tuple[str, ...]:
    """:func:`image_params` for ``input_file`` parts (which become chat ``file`` parts)."""
    return image_params(items, first=first, part_type="input_file")


def image_params(items: list[ResponseInputItem] | tuple[ResponseInputItem, ...], *, first: int = 0,
                 part_type: str = "input_image") -> tuple[str, ...]:
    """The Responses name of each ``input_image`` part (or ``part_type`` part) of ``items``, in the order
    :func:`chat_messages` puts
    them in the chat messages (user messages and tool outputs carry images there):
    ``input[i].content[j]`` or ``input[i].output[j]``, counted from ``first`` as there; ``previous_response_id``
    for an image of a stored item."""
    out = []
    for i, item in enumerate(items):
        kind = _kind(item)
        field, parts = ("content", item.content) if kind == "message" and item.role == "user" else \
            ("output", item.output) if kind in ("function_call_output", "custom_tool_call_output") else ("", None)
        if not isinstance(parts, list):
            continue
        out += [f"input[{i - first}].{field}[{j}]" if i >= first else "previous_response_id"
                for j, part in enumerate(parts) if part.type == part_type]
    return tuple(out)


def input_items(value: str | list[ResponseInputItem] | None) -> list[ResponseInputItem]:
    if value is None:
        return []
    if isinstance(value, str):
        return [ResponseInputItem(type="message", role="user", content=value)]
    return list(value)
