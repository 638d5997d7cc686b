"""The Responses event stream of one turn, from its ``chat.completion.chunk`` stream (sans-IO).

:class:`ResponseEvents` turns each chunk into Responses stream events (``response.created`` ...
``response.completed``, with ``sequence_number`` from 0), the same items :meth:`Turn.from_chat
<skippy.engine.protocols.responses.translate.Turn.from_chat>` builds for the same text, in the order the
OpenAI Responses API streams them.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from msgspec import UNSET

from skippy.engine.errors import EngineError
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.responses.translate import (
    InputStream,
    Turn,
    custom_input,
    finish_status,
    new_id,
    response_usage,
)
from skippy.engine.protocols.responses.wire import (
    ResponseError,
    ResponseObject,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseReasoningText,
    ResponseStreamEvent,
)

#: the id prefix of each streamed item kind (OpenAI's shapes)
_ID_PREFIXES = {"message": "msg", "reasoning": "rs", "function_call": "fc", "custom_tool_call": "ctc"}
#: the item kinds of tool calls (no content parts)
_CALLS = ("function_call", "custom_tool_call")


@attrs.define
class _Item:
    """An output item being streamed: ``kind`` ``message`` / ``reasoning`` / ``function_call`` /
    ``custom_tool_call``; ``text`` its text or arguments so far; ``tool_index`` the chat delta's
    ``tool_calls[].index``."""

    kind: str
    id: str
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""
    tool_index: int = -1
    status: str = "in_progress"
    #: the chat tool call's name, mapped back by :meth:`Turn.function_call`
    turn: Turn | None = None
    #: a custom call's input streamed so far
    input: InputStream = attrs.field(factory=InputStream)
    #: a call the token limit cut: its fragments were streamed, but it is left out of the response (as the
    #: chat reply leaves it out)
    cut: bool = False

    @property
    def whole_call(self) -> bool:
        """A call whose arguments are one JSON object (a call the token limit cut has an unfinished one)."""
        try:
            return isinstance(json.loads(self.text, strict=False), dict)
        except (ValueError, RecursionError):
            return False

    def wire(self) -> Any:
        if self.kind == "message":
            return ResponseOutputMessage(id=self.id, status=self.status,  # type: ignore[arg-type]
                                         content=[ResponseOutputText(text=self.text)] if self.status != "in_progress"
                                         else [])
        if self.kind == "reasoning":
            return ResponseReasoningItem(id=self.id, status=self.status,  # type: ignore[arg-type]
                                         content=[ResponseReasoningText(text=self.text)]
                                         if self.status != "in_progress" else [])
        assert self.turn is not None
        return self.turn.function_call(id=self.id, status=self.status, call_id=self.call_id, name=self.name,
                                       arguments=self.text)


class ResponseEvents:
    """The Responses event stream of one :class:`Turn`, from its ``chat.completion.chunk`` stream.

    :meth:`start`: ``response.created``, ``response.in_progress``.
    :meth:`feed` (each chunk): an item's ``response.output_item.added`` (and
    ``response.content_part.added`` for text) when its first delta comes,
    then ``response.output_text.delta`` / ``response.reasoning_text.delta`` /
    ``response.function_call_arguments.delta``; an item is closed (its
    ``.done`` events, then ``response.output_item.done``) when another one
    starts or the choice finishes. A ``custom_tool_call``'s input comes in
    ``response.custom_tool_call_input.delta`` events as the model writes it (the
    JSON string argument of a function, decoded as it arrives:
    :class:`~.translate.InputStream`), then ``response.custom_tool_call_input.done``. :meth:`finish` (the usage chunk):
    ``response.completed`` or ``response.incomplete``, with the whole
    response (:attr:`final`). :meth:`failed`: ``response.failed`` (its response is :attr:`final` too).
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
        return self.turn.response([i.wire() for i in self.items if not i.cut], status, **extra)

    def start(self) -> list[ResponseStreamEvent]:
        """The first events: ``response.created`` and ``response.in_progress``."""
        return [self._event("response.created", response=self._snapshot("in_progress")),
                self._event("response.in_progress", response=self._snapshot("in_progress"))]

    def _part(self, item: _Item) -> ResponseOutputText | ResponseReasoningText:
        return ResponseOutputText(text=item.text) if item.kind == "message" else ResponseReasoningText(text=item.text)

    def _add(self, kind: str, **fields: Any) -> list[ResponseStreamEvent]:
        out = self._close()
        item = _Item(kind, new_id(_ID_PREFIXES[kind]), len(self.items), **fields)
        self.items.append(item)
        self._open = item
        out.append(self._event("response.output_item.added", output_index=item.index, item=item.wire()))
        if kind not in _CALLS:
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
        elif item.kind == "custom_tool_call":
            text, sent = custom_input(item.text), item.input.sent
            rest = text[len(sent):] if text.startswith(sent) else ""
            out = [self._event("response.custom_tool_call_input.delta", delta=rest, **common)] if rest else []
            out.append(self._event("response.custom_tool_call_input.done", input=text, **common))
        else:
            done = "response.output_text.done" if item.kind == "message" else "response.reasoning_text.done"
            extra: dict[str, list[Any]] = {"logprobs": []} if item.kind == "message" else {}
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
            kind = "custom_tool_call" if self.turn.is_custom(name) else "function_call"
            out += self._add(kind, call_id=tc.id, name=name, tool_index=tc.index, turn=self.turn)
        item = next((i for i in reversed(self.items) if i.kind in _CALLS and i.tool_index == tc.index), None)
        if item is None:  # a fragment of a call that never started: not sent by any chat format
            return out
        if name and not item.name:
            item.name = name
        if tc.function.arguments:
            item.text += tc.function.arguments
            if item.kind == "function_call":
                out.append(self._event("response.function_call_arguments.delta", item_id=item.id,
                                       output_index=item.index, delta=tc.function.arguments))
            elif text := item.input.more(item.text):
                out.append(self._event("response.custom_tool_call_input.delta", item_id=item.id,
                                       output_index=item.index, delta=text))
        return out

    def feed(self, chunk: wire.ChatCompletionChunk) -> list[ResponseStreamEvent]:
        """The events of one chat chunk (none for the role chunk); the finish chunk closes the last item
        (``incomplete`` when the finish is ``length``, but a whole call stays ``completed`` and a cut one, whose
        fragments were streamed, is left out of the final response; an empty ``message`` when nothing was
        output, as :meth:`Turn.from_chat`)."""
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
                status = finish_status(choice.finish_reason)
                if status == "incomplete" and self._open is not None and self._open.kind in _CALLS:
                    # the limit came during or after a call: a whole one stays completed, a cut one is left
                    # out of the response, as :meth:`Turn.from_chat` has them
                    self._open.cut = not self._open.whole_call
                    status = "incomplete" if self._open.cut else "completed"
                out += self._close(status)
        return out

    def finish(self, usage: wire.Usage, *, reasoning_tokens: int = 0) -> list[ResponseStreamEvent]:
        """The last event: ``response.completed`` (or ``response.incomplete``) with the whole response."""
        out = self._close()
        status = finish_status(self.finish_reason)
        self.final = self._snapshot(status, usage=response_usage(usage, reasoning_tokens))
        out.append(self._event(f"response.{status}", response=self.final))
        return out

    def cancelled(self) -> ResponseStreamEvent:
        """The last event of a stream cancelled by ``POST /v1/responses/{id}/cancel``: the open item closed
        ``incomplete``, then ``response.incomplete`` (OpenAI has no ``response.cancelled`` event) whose
        response (:attr:`final`, what is stored) has status ``cancelled`` and the output so far."""
        if self._open is not None:
            self._open.status = "incomplete"
            self._open = None
        self.final = self._snapshot("cancelled")
        return self._event("response.incomplete", response=self.final)

    def failed(self, exc: EngineError) -> ResponseStreamEvent:
        """``response.failed`` for an error after the stream started (deadline, shutdown, a runtime
        failure). ``error.code`` is one of OpenAI's: ``rate_limit_exceeded`` (429), ``invalid_prompt``
        (another 4xx), ``server_error`` (5xx: 503 shutdown, 504 deadline...); the message ends with our
        envelope's code in parentheses (e.g. ``(request_timeout)``). Its response, with the output so far, is
        :attr:`final` (what is stored)."""
        if self._open is not None:  # its text so far is kept, as a cancelled stream's
            self._open.status = "incomplete"
            self._open = None
        code = ("rate_limit_exceeded" if exc.status == 429 else "invalid_prompt" if 400 <= exc.status < 500
                else "server_error")
        message = f"{exc.message} ({exc.code})" if exc.code else exc.message
        self.final = self._snapshot("failed", error=ResponseError(code=code, message=message))
        return self._event("response.failed", response=self.final)
