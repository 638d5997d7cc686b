"""Generic JSON tool-call format (llama.cpp "Generic"), for tool-capable templates
whose own call syntax matches none of the native formats.

The model answers with exactly one JSON object (a grammar usually enforces it)::

    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "0"}]}
    {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    {"response": "It is sunny."}

A reply that does not start with ``{`` is plain content. The object is held
back until it is complete (no partial streaming of this format); then calls
are emitted whole and ``response`` becomes content. An object naming a tool
the request does not allow, or of any other shape, is content verbatim.

:data:`GENERIC_ENVELOPE` reads the same objects where a request mixes tools with a JSON schema
(``response_format`` beside ``tool_choice: "auto"``, llama-server's generic handler for that mix): there
``response`` holds a value of the request's schema, any JSON value, and its JSON text as the model wrote
it becomes the content (:class:`EnvelopeScanner`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from skippy.engine.chat.formats.base import Delta
from skippy.engine.chat.formats.core import JSON_DECODER, ToolScanner, ToolSyntax, scan_json


class GenericScanner(ToolScanner):
    """Holds a leading JSON object until complete, then interprets it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.decided = False

    def _leading(self, text: str, final: bool) -> int | None:
        """Add ``text`` to the buffer; the index of its first non-space character (``len(buf)``: none, at the
        end), or ``None`` while only space came and more may."""
        self.buf += text
        j = len(self.buf) - len(self.buf.lstrip())
        return None if j == len(self.buf) and not final else j

    def feed(self, text: str, final: bool = False) -> list[Delta]:
        if self.decided:
            return super().feed(text, final)
        if (j := self._leading(text, final)) is None:
            return []
        if j < len(self.buf) and self.buf[j] == "{":
            status, end = scan_json(self.buf, j)
            if status == "partial" and not final:
                return []
            if status == "complete" and self._interpret(JSON_DECODER.decode(self.buf[j:end])):
                self.pos = end
        self.decided = True
        return super().feed("", final)

    def _interpret(self, obj: Any) -> bool:
        if not isinstance(obj, dict) or len(obj) != 1:
            return False
        if isinstance(obj.get("response"), str):
            self._content(obj["response"])
            return True
        calls = obj.get("tool_calls", [obj["tool_call"]] if "tool_call" in obj else None)
        if not isinstance(calls, list) or not calls:
            return False
        parsed = []
        for call in calls:
            if not isinstance(call, dict) or call.get("name") not in self.allowed:
                return False
            args = call.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = JSON_DECODER.decode(args)
                except ValueError:
                    return False
            if not isinstance(args, dict):
                return False
            parsed.append((call["name"], json.dumps(args, ensure_ascii=False)))
        for name, args in parsed:
            self._args(self._call_start(name), args)
        return True


GENERIC = ToolSyntax(name="generic", scanner=GenericScanner)

#: the opening of an envelope's answer, up to its value
_RESPONSE = re.compile(r'\{\s*"response"\s*:\s*')
#: the opening of an envelope's call(s)
_CALLS = re.compile(r'\{\s*"tool_calls?"\s*:')


class EnvelopeScanner(GenericScanner):
    """The reply of a request that mixes tools with a JSON schema: one envelope object (its grammar,
    :func:`~skippy.engine.sampling.constraints.tool_envelope`, allows nothing else). ``{"response": VALUE}``:
    the content is VALUE's JSON text as the model wrote it (the answer to the request's schema, an object,
    array, string or number alike: what ``response_format`` alone would have given), never read for tool
    calls, sent once the object is complete; ``{"tool_calls": [...]}`` / ``{"tool_call": {...}}``: each call
    sent whole as soon as it is (an allowed tool, object arguments). At the end of a reply that cut the
    object (``max_tokens``), an answer's text so far is the content (as a cut ``response_format`` reply is),
    and of the calls the whole ones stay and the cut one is dropped (a tiny model may list calls until its
    token limit); any other text is content verbatim."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen = 0  # calls of the envelope read so far (each one sent as it completes)

    def feed(self, text: str, final: bool = False) -> list[Delta]:
        if self.decided:
            return ToolScanner.feed(self, text, final)
        if (j := self._leading(text, final)) is None:
            return []
        if j < len(self.buf) and self.buf[j] == "{":
            status, end = scan_json(self.buf, j)
            calls = _CALLS.match(self.buf, j)
            if calls is not None:  # each call is sent once whole, as the formats that stream calls send them
                self._send(_whole_calls(self.buf, calls.end()))
            if status == "partial" and not final:
                out, self.out = self.out, []
                return out
            answer = _RESPONSE.match(self.buf, j)
            if status == "complete":
                obj = JSON_DECODER.decode(self.buf[j:end])
                if isinstance(obj, dict) and list(obj) == ["response"]:
                    self._content(self.buf[answer.end():end - 1].rstrip() if answer is not None
                                  else json.dumps(obj["response"], ensure_ascii=False))
                    self.pos = end
                elif self.ncalls or self._interpret(obj):
                    self.pos = end
            elif final and answer is not None:  # an answer the end cut: its text so far
                self._content(self.buf[answer.end():])
                self.pos = len(self.buf)
            elif final and calls is not None:  # calls the end cut: the whole ones were sent, the cut one is
                self.pos = len(self.buf)  # dropped, as every format drops a cut call
        self.decided = True
        return ToolScanner.feed(self, "", final)

    def _send(self, calls: list[Any]) -> None:
        """Send the calls of ``calls`` not sent yet that name an allowed tool with object arguments."""
        for call in calls[self.seen:]:
            self.seen += 1
            name = call.get("name") if isinstance(call, dict) else None
            args = call.get("arguments", {}) if isinstance(call, dict) else None
            if isinstance(args, str):
                try:
                    args = JSON_DECODER.decode(args)
                except ValueError:
                    args = None
            if name in self.allowed and isinstance(args, dict):
                self._args(self._call_start(name), json.dumps(args, ensure_ascii=False))


def _whole_calls(buf: str, pos: int) -> list[Any]:
    """The complete call objects of the ``tool_calls`` list (or the one ``tool_call`` object) that ``buf[pos:]``
    begins, up to where the text ends or stops being that list."""
    calls: list[Any] = []
    pos = len(buf) - len(buf[pos:].lstrip())
    listed = buf.startswith("[", pos)
    pos += listed
    while True:
        pos = len(buf) - len(buf[pos:].lstrip())
        if not buf.startswith("{", pos):
            return calls
        status, end = scan_json(buf, pos)
        if status != "complete":
            return calls
        calls.append(JSON_DECODER.decode(buf[pos:end]))
        pos = len(buf) - len(buf[end:].lstrip())
        if not listed or not buf.startswith(",", pos):
            return calls
        pos += 1


#: the reply of a request mixing tools with a JSON schema (:class:`EnvelopeScanner`); see :func:`envelope_syntax`
GENERIC_ENVELOPE = ToolSyntax(name="generic_envelope", scanner=EnvelopeScanner)


def envelope_syntax(native: ToolSyntax) -> ToolSyntax:
    """:data:`GENERIC_ENVELOPE` with the reasoning of the template's own format ``native`` (its thinking
    tags and how the generation prompt's opener is read), for a reply whose envelope follows a thinking
    block."""
    return attrs.evolve(GENERIC_ENVELOPE, think_tags=native.think_tags, think_channel=native.think_channel,
                        reasoning_opener=native.reasoning_opener, keeps_prompt_opener=native.keeps_prompt_opener,
                        opener_in_reasoning=native.opener_in_reasoning)
