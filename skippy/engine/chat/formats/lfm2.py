"""LFM2 / LFM2.5 tool-call format (Liquid AI): Python-style calls in a list.

Output shape (``<think>...</think>`` reasoning first where the model has it)::

    Let me check.<|tool_call_start|>[get_weather(city="Paris", days=2), now()]<|tool_call_end|>

Arguments are keyword arguments with Python or JSON literal values
(``true``/``false``/``null`` are accepted, as llama.cpp does). The section
is held back until ``<|tool_call_end|>`` (or the end of the output), then
parsed with Python's own ``ast`` (never evaluated); a section that does not
parse, or names a tool the request does not allow, is content verbatim.
"""

from __future__ import annotations

import ast
from typing import Any

from skippy.engine.chat.formats.core import ToolSyntax
from skippy.engine.chat.formats.whole import SectionScanner

_JSON_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        keys = [_literal(k) for k in node.keys if k is not None]  # all are (dict unpacking is None)
        if all(isinstance(k, str) for k in keys):
            return {k: _literal(v) for k, v in zip(keys, node.values, strict=True)}
    raise ValueError("not a literal")


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    raise ValueError("not a name")


def parse_pythonic_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """``[f(a=1), g()]`` (or one bare call) -> ``[(name, arguments)]``; ``None`` when it is not that."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        calls = tree.elts if isinstance(tree, ast.List) else [tree]
        out = []
        for call in calls:
            if not isinstance(call, ast.Call) or call.args:
                return None
            args = {}
            for kw in call.keywords:
                if kw.arg is None:
                    return None
                args[kw.arg] = _literal(kw.value)
            out.append((_name(call.func), args))
        return out or None
    except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError):
        return None


class PythonicScanner(SectionScanner):
    """LFM2's section: a Python list of calls (:func:`parse_pythonic_calls`)."""

    def calls(self, section: str) -> list[tuple[str, dict[str, Any]]] | None:
        return parse_pythonic_calls(section)


LFM2 = ToolSyntax(
    name="lfm2",
    opens=("<|tool_call_start|>",),
    close="<|tool_call_end|>",
    scanner=PythonicScanner,
)
