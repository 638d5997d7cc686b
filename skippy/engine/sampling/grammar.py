"""GBNF grammars for forced tool calls (sans-IO).

Tool argument schemas become GBNF with llama-cpp-python's port of llama.cpp's
json-schema-to-grammar (``llama_cpp.llama_grammar.SchemaConverter``), embedded
in the call syntax of the chat format (lazy for emulated ``auto`` calls); the
grammar is then enforced by llama.cpp's grammar sampler. Anything the
converter cannot express is refused with :class:`InvalidRequest` (400):
fail closed, never silently unconstrained. Request-level structured output
(``response_format``, ``json_schema``, ``guided_*``) is compiled by
llguidance instead: :mod:`skippy.engine.sampling.constraints`.
"""

from __future__ import annotations

import json
from typing import Any

from skippy.engine.errors import InvalidRequest

#: Strings without control characters (so a JSON call stays on one line).
_JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


def schema_converter() -> Any:
    """A fresh llama.cpp json-schema-to-grammar converter."""
    from llama_cpp.llama_grammar import SchemaConverter

    return SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def gbnf_literal(s: str) -> str:
    """``s`` as a GBNF string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"'


#: Numeric keywords the converter ignores (integer ranges are rewritten to enums instead).
_NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_MAX_ENUM_RANGE = 4096


def prepare_schema(schema: Any, *, strict: bool, param: str) -> Any:
    """Make numeric bounds enforceable before conversion (returns a new schema).

    llama-cpp-python's converter ignores ``minimum``/``maximum``. An integer
    with both bounds spanning at most 4096 values becomes an ``enum`` of
    them, which the grammar enforces exactly. Other numeric bounds cannot be
    enforced: with ``strict`` (OpenAI structured outputs) they are refused
    with :class:`InvalidRequest`, otherwise they are left unenforced.
    """
    if isinstance(schema, list):
        return [prepare_schema(s, strict=strict, param=param) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: prepare_schema(v, strict=strict, param=param) for k, v in schema.items()}
    if not any(k in out for k in _NUMERIC_BOUNDS):
        return out
    lo, hi = out.get("minimum"), out.get("maximum")
    if out.get("type") == "integer" and isinstance(lo, int) and isinstance(hi, int) \
            and 0 <= hi - lo < _MAX_ENUM_RANGE and not any(k in out for k in _NUMERIC_BOUNDS[2:]):
        rest = {k: v for k, v in out.items() if k not in _NUMERIC_BOUNDS and k != "type"}
        return {**rest, "enum": list(range(lo, hi + 1))}
    if strict:
        keys = sorted(k for k in _NUMERIC_BOUNDS if k in out)
        raise InvalidRequest(f"strict schema uses {', '.join(keys)}, which the grammar cannot enforce "
                             "(only integer ranges with both minimum and maximum are supported)", param=param)
    return out


def tool_call_rules(conv: Any, tools: list[dict], chosen: list[dict], *, args_key: str = "arguments") -> list[str]:
    """Add one rule per chosen tool, ``{"name": "<tool>", "<args_key>": <its parameters schema>}``.

    Returns the rule names. Raises :class:`InvalidRequest` naming ``tools[i]``
    for a nameless tool or a parameters schema that is not an object or
    cannot be converted.
    """
    index = {id(t): i for i, t in enumerate(tools)}
    rules = []
    for tool in chosen:
        i = index.get(id(tool), 0)
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = fn.get("name")
        where = f"tools[{i}].function.parameters"
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"tools[{i}]: a tool needs a name", param=f"tools[{i}].function.name")
        schema = fn.get("parameters", fn.get("input_schema"))
        schema = prepare_schema(schema, strict=bool(fn.get("strict")), param=where) \
            if isinstance(schema, dict) else {"type": "object"}
        if schema.get("type", "object") != "object":
            raise InvalidRequest(f"{where}: the arguments schema must describe an object", param=where)
        try:
            schema = conv.resolve_refs(schema, f"tool{i}")
            args_rule = conv.visit(schema, f"{name}-args")
        except Exception as exc:
            raise InvalidRequest(f"{where}: cannot turn this JSON schema into a grammar: {exc!r}",
                                 param=where) from None
        rules.append(conv._add_rule(
            f"{name}-call",
            r'"{" space "\"name\"" space ":" space ' + gbnf_literal(json.dumps(name, ensure_ascii=False))
            + r' space "," space ' + gbnf_literal(json.dumps(args_key)) + r' space ":" space ' + args_rule
            + r' "}"'))
    if "char" in conv._rules:
        conv._rules["char"] = _JSON_CHAR
    return rules


#: Native formats whose calls a grammar can force: (prefix, separator, suffix, arguments key).
NATIVE_CALL_SHAPES: dict[str, tuple[str, str, str, str]] = {
    "hermes_2_pro": ("<tool_call>\n", "\n</tool_call>\n<tool_call>\n", "\n</tool_call>", "arguments"),
    "llama3_json": ("", "", "", "parameters"),
    "mistral_nemo": ("[TOOL_CALLS][", ", ", "]", "arguments"),
    "generic": ('{"tool_calls": [', ", ", "]}", "arguments"),
}


def native_tool_grammar(chat_format: str, tools: list[dict], chosen: list[dict], *, parallel: bool) -> str:
    """GBNF forcing one (or, with ``parallel``, several) calls in ``chat_format``'s own syntax.

    Used for ``tool_choice: "required"`` or a named tool. Raises
    :class:`InvalidRequest` for formats whose call syntax has no grammar here.
    """
    shape = NATIVE_CALL_SHAPES.get(chat_format)
    if shape is None:
        raise InvalidRequest(f"tool_choice 'required' or a named tool cannot be enforced for chat format "
                             f"{chat_format!r}; use tool_choice 'auto'", param="tool_choice")
    prefix, sep, suffix, args_key = shape
    if chat_format == "llama3_json":
        parallel = False  # Llama 3.x emits one JSON call per message
    conv = schema_converter()
    call = " | ".join(tool_call_rules(conv, tools, chosen, args_key=args_key))
    body = f"({call})" + (f" ({gbnf_literal(sep)} ({call}))*" if parallel else "")
    conv._add_rule("root", f"{gbnf_literal(prefix)} {body} {gbnf_literal(suffix)}".replace('"" ', ""))
    return conv.format_grammar()
