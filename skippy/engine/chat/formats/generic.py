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
"""

from __future__ import annotations

import json
from typing import Any

from skippy.engine.chat.formats.base import Delta
from skippy.engine.chat.formats.core import JSON_DECODER, ToolScanner, ToolSyntax, scan_json


class GenericScanner(ToolScanner):
    """Holds a leading JSON object until complete, then interprets it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.decided = False

    def feed(self, text: str, final: bool = False) -> list[Delta]:
        if self.decided:
            return super().feed(text, final)
        self.buf += text
        j = len(self.buf) - len(self.buf.lstrip())
        if j == len(self.buf) and not final:
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
