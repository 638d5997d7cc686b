"""MiniMax M3 tool-call format: nested XML, every tag after the ``]<]minimax[>[`` namespace token.

Output shape (reasoning in ``<mm:think>...</mm:think>``; with thinking off the reply starts after a bare
``</mm:think>``, which is dropped; ``NS`` stands for ``]<]minimax[>[``)::

    </mm:think>Let me check.NS<tool_call>
    NS<invoke name="get_weather">NS<city>ParisNS</city>NS<days>2NS</days>NS</invoke>
    NS</tool_call>

An argument is a tag named by its key. Its value is text, or child tags: ``<item>`` children make a list,
other children an object (the template's ``to_xml``). Text is typed by the tool's JSON schema as in the
other XML formats (:func:`~skippy.engine.chat.formats.xml.typed_value`: a ``string`` is the raw text,
anything else is parsed as JSON, falling back to the text). The section is held back until
``NS</tool_call>`` (or the end of the output), then its calls are sent whole; a section that does not
parse, or names a tool the request does not allow, is content verbatim.
"""

from __future__ import annotations

import re
from typing import Any

from skippy.engine.chat.formats.core import ToolSyntax
from skippy.engine.chat.formats.whole import SectionScanner
from skippy.engine.chat.formats.xml import typed_value

NS = "]<]minimax[>["
_INVOKE = re.compile(r'\s*<invoke name="(?P<name>[^"\n]+)">')
_OPEN = re.compile(r"<(?P<tag>[^\s<>/]+)>")


def _children(text: str) -> list[tuple[str, str]] | None:
    """``<a>..</a><b>..</b>`` -> ``[("a", inner), ("b", inner)]`` (same-name tags nest); ``None`` when
    ``text`` is not only such tags (space between them allowed)."""
    out: list[tuple[str, str]] = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return out
        m = _OPEN.match(text, i)
        if m is None:
            return None
        tag, depth, j = m.group("tag"), 1, m.end()
        opening, closing = f"<{tag}>", f"</{tag}>"
        while depth:
            c = text.find(closing, j)
            if c < 0:
                return None
            o = text.find(opening, j, c)
            if o >= 0:
                depth, j = depth + 1, o + len(opening)
            else:
                depth, j = depth - 1, c + len(closing)
        out.append((tag, text[m.end():j - len(closing)]))
        i = j


def _value(text: str, schema: Any) -> Any:
    """One argument's value: child tags -> a list or an object, else text typed by ``schema``."""
    kids = _children(text) if "<" in text else None
    if not kids:
        return typed_value(text, schema)
    sub = schema if isinstance(schema, dict) else {}
    if all(tag == "item" for tag, _ in kids):
        return [_value(inner, sub.get("items")) for _, inner in kids]
    props = sub.get("properties")
    return {tag: _value(inner, props.get(tag) if isinstance(props, dict) else None) for tag, inner in kids}


def parse_minimax_m3(section: str, schemas: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]] | None:
    """A call section's text (namespace tokens included) -> ``[(name, arguments)]``; ``None`` when it is
    not a list of ``<invoke>`` elements."""
    text, i = section.replace(NS, ""), 0
    calls: list[tuple[str, dict[str, Any]]] = []
    while True:
        m = _INVOKE.match(text, i)
        if m is None:
            return calls if calls and not text[i:].strip() else None
        end = text.find("</invoke>", m.end())
        if end < 0:
            return None
        kids = _children(text[m.end():end])
        if kids is None:
            return None
        props = schemas.get(m.group("name"), {}).get("properties")
        props = props if isinstance(props, dict) else {}
        calls.append((m.group("name"), {tag: _value(inner, props.get(tag)) for tag, inner in kids}))
        i = end + len("</invoke>")


class MinimaxM3Scanner(SectionScanner):
    """A ``NS<tool_call>`` section of ``<invoke>`` elements (:func:`parse_minimax_m3`)."""

    def calls(self, section: str) -> list[tuple[str, dict[str, Any]]] | None:
        return parse_minimax_m3(section, self.schemas)


MINIMAX_M3 = ToolSyntax(
    name="minimax_m3",
    opens=(NS + "<tool_call>",),
    close=NS + "</tool_call>",
    scanner=MinimaxM3Scanner,
    think_tags=("<mm:think>", "</mm:think>"),
    drop=("</mm:think>",),  # with thinking off the reply starts after a bare closing tag (the template says so)
    markers=("<tool_call>", "</tool_call>"),
)
