"""Gemma 4 tool-call format: one ``<|tool_call>`` block per call, arguments in Gemma's own object notation.

Output shape (reasoning in a ``thought`` channel where thinking is on)::

    <|channel>thought
    Look it up.<channel|>Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>

The notation is JSON with bare keys and strings quoted by ``<|"|>`` (the template's ``format_argument``);
JSON's own quoted strings are read too. A call is held back until ``<tool_call|>`` outside a
``<|"|>`` string (or the end of the output), then converted and sent whole, as LFM2's are; a block that
does not parse, or names a tool the request does not allow, is content verbatim.
"""

from __future__ import annotations

import json
import re
from typing import Any

from skippy.engine.chat.formats.core import JSON_DECODER, ToolSyntax
from skippy.engine.chat.formats.whole import SectionScanner

_QUOTE = '<|"|>'
_HEADER = re.compile(r"\s*call:(?P<name>[^\s{}<>]+)\s*(?=\{)")
_BARE = re.compile(r"[^\s,:{}\[\]<>\"]+")
_WORDS = {"true": True, "false": False, "null": None}


class _Reader:
    """A recursive-descent reader of one value in Gemma's notation; raises ``ValueError`` on bad text."""

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def _ws(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def _eat(self, ch: str) -> bool:
        self._ws()
        if self.text.startswith(ch, self.i):
            self.i += len(ch)
            return True
        return False

    def value(self) -> Any:
        self._ws()
        t, i = self.text, self.i
        if t.startswith(_QUOTE, i):
            end = t.find(_QUOTE, i + len(_QUOTE))
            if end < 0:
                raise ValueError("unterminated string")
            self.i = end + len(_QUOTE)
            return t[i + len(_QUOTE):end]
        if t.startswith('"', i):
            value, self.i = JSON_DECODER.raw_decode(t, i)
            return value
        if self._eat("{"):
            obj: dict[str, Any] = {}
            if self._eat("}"):
                return obj
            while True:
                key = self.key()
                if not self._eat(":"):
                    raise ValueError("expected ':'")
                obj[key] = self.value()
                if self._eat("}"):
                    return obj
                if not self._eat(","):
                    raise ValueError("expected ',' or '}'")
        if self._eat("["):
            items: list[Any] = []
            if self._eat("]"):
                return items
            while True:
                items.append(self.value())
                if self._eat("]"):
                    return items
                if not self._eat(","):
                    raise ValueError("expected ',' or ']'")
        m = _BARE.match(t, i)
        if m is None:
            raise ValueError("expected a value")
        self.i = m.end()
        word = m.group()
        if word in _WORDS:
            return _WORDS[word]
        return json.loads(word)  # a number (ValueError otherwise)

    def key(self) -> str:
        self._ws()
        if self.text.startswith(_QUOTE, self.i) or self.text.startswith('"', self.i):
            key = self.value()
            if not isinstance(key, str):
                raise ValueError("a key must be text")
            return key
        m = _BARE.match(self.text, self.i)
        if m is None:
            raise ValueError("expected a key")
        self.i = m.end()
        return m.group()


def parse_gemma_object(text: str) -> dict[str, Any] | None:
    """``{city:<|"|>Paris<|"|>,days:2}`` -> ``{"city": "Paris", "days": 2}``; ``None`` unless ``text`` is
    exactly one object in the notation (surrounding space allowed)."""
    reader = _Reader(text)
    try:
        value = reader.value()
        reader._ws()
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and reader.i == len(text) else None


class GemmaScanner(SectionScanner):
    """A ``<|tool_call>`` block: ``call:NAME`` and one object in the notation."""

    def close_at(self, buf: str, pos: int) -> int:
        """The ``<tool_call|>`` that ends the block: one outside a ``<|"|>`` string (a value may hold the
        marker's text, as a forced call's grammar allows any text there); -1 while a string is still open."""
        close = self.syntax.close
        assert close is not None
        while True:
            i, q = buf.find(close, pos), buf.find(_QUOTE, pos)
            if q < 0 or 0 <= i < q:
                return i
            end = buf.find(_QUOTE, q + len(_QUOTE))
            if end < 0:
                return -1
            pos = end + len(_QUOTE)

    def calls(self, section: str) -> list[tuple[str, dict[str, Any]]] | None:
        m = _HEADER.match(section)
        args = parse_gemma_object(section[m.end():]) if m is not None else None
        return [(m.group("name"), args)] if m is not None and args is not None else None


GEMMA4 = ToolSyntax(
    name="gemma4",
    opens=("<|tool_call>",),
    close="<tool_call|>",
    scanner=GemmaScanner,
    think_tags=("<|channel>thought", "<channel|>"),
    think_channel="<|channel>",
    reasoning_opener="<|channel>thought\n",  # llama.cpp's gemma4 parser
    markers=('<|"|>',),
)
