"""GBNF grammars for forced tool calls (sans-IO).

Tool argument schemas become GBNF with llama-cpp-python's port of llama.cpp's
json-schema-to-grammar (``llama_cpp.llama_grammar.SchemaConverter``), embedded
in the call syntax of the chat format (lazy for emulated ``auto`` calls); the
grammar is then enforced by llama.cpp's grammar sampler. Anything the
converter cannot express is refused with :class:`InvalidRequest` (400):
fail closed, never silently unconstrained. Integer bounds, which the port
ignores, are enforced here (:func:`integer_range_gbnf`). Request-level structured output
(``response_format``, ``json_schema``, ``guided_*``) is compiled by
llguidance instead: :mod:`skippy.engine.sampling.constraints`.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from skippy.engine.errors import InvalidRequest

#: Strings without control characters (so a JSON call stays on one line).
_JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


def schema_converter() -> Any:
    """A fresh llama.cpp json-schema-to-grammar converter, its literals escaped as llama.cpp's C++ converter
    escapes them (the Python port leaves a backslash as it is: an ``enum`` or ``const`` value holding ``"`` or
    ``\\`` made a grammar llama.cpp refused, or a backslash sequence it read as an escape), and an integer's
    numeric bounds enforced (:func:`integer_bounds`, :func:`integer_range_gbnf`; the port ignores them)."""
    from llama_cpp.llama_grammar import RESERVED_NAMES as _RESERVED
    from llama_cpp.llama_grammar import SchemaConverter

    conv = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    conv._format_literal = gbnf_literal  # type: ignore[method-assign]  # the port escapes too little
    visit: Any = conv.visit

    def visit_bounded(schema: Any, name: str) -> str:
        """The converter's ``visit``, but an integer with numeric bounds gets :func:`integer_range_gbnf`
        (the port ignores them; its own recursion comes back here)."""
        if isinstance(schema, dict) and schema.get("type") == "integer" \
                and not any(k in schema for k in ("$ref", "oneOf", "anyOf", "const", "enum")) \
                and (bounds := integer_bounds(schema)) != (None, None):
            rule: str = conv._add_rule(name + "-" if name in _RESERVED else name or "root",
                                       f"{integer_range_gbnf(*bounds)} space")
            return rule
        named: str = visit(schema, name)
        return named

    conv.visit = visit_bounded  # type: ignore[method-assign]
    return conv


def gbnf_literal(s: str) -> str:
    """``s`` as a GBNF string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"'


#: Numeric keywords of JSON Schema validation (draft 2020-12, section 6.2; ``multipleOf`` besides the bounds).
_NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
#: How many digits the grammar lets an integer have on a side without a bound: the converter's own
#: ``integer`` rule's 16 (or the other bound's digits, when it has more).
_FREE_INT_DIGITS = 16
#: The most digits an integer bound may have (a larger one is a 400): the grammar of a bound nests one group
#: per digit.
MAX_INT_BOUND_DIGITS = 100


def _bound(value: Any) -> int | float | None:
    """A bound keyword's value when it is a finite number (``true``/``false``, strings... are no bound)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The inclusive ``(low, high)`` an integer schema's numeric bounds allow (``None``: unbounded that side).

    Reads JSON Schema validation's numeric keywords (draft 2020-12, section 6.2): ``minimum`` and
    ``maximum`` (inclusive), ``exclusiveMinimum`` and ``exclusiveMaximum`` as numbers (draft 6 on), and
    draft 4's boolean ``exclusiveMinimum`` / ``exclusiveMaximum``, which make ``minimum`` / ``maximum``
    exclusive. A fractional bound is rounded inward (``minimum: 1.5`` is 2); every bound given applies, the
    tightest wins. ``multipleOf`` is not read."""
    low: int | None = None
    high: int | None = None

    def tighter(old: int | None, new: int, pick: Any) -> int:
        return new if old is None else pick(old, new)

    minimum, maximum = _bound(schema.get("minimum")), _bound(schema.get("maximum"))
    ex_min, ex_max = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if minimum is not None:
        low = math.floor(minimum) + 1 if ex_min is True else math.ceil(minimum)
    if maximum is not None:
        high = math.ceil(maximum) - 1 if ex_max is True else math.floor(maximum)
    if (e := _bound(ex_min)) is not None:
        low = tighter(low, math.floor(e) + 1, max)
    if (e := _bound(ex_max)) is not None:
        high = tighter(high, math.ceil(e) - 1, min)
    return low, high


def _seq(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _alt(alts: list[str]) -> str:
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def _digit(lo: int, hi: int) -> str:
    return f'"{lo}"' if lo == hi else f"[{lo}-{hi}]"


def _any_digits(lo: int, hi: int | None = None) -> str:
    """``lo`` to ``hi`` (default ``lo``) digits, any."""
    hi = lo if hi is None else hi
    if hi == 0:
        return ""
    return "[0-9]" if lo == hi == 1 else f"[0-9]{{{lo}}}" if lo == hi else f"[0-9]{{{lo},{hi}}}"


def _at_least(s: str) -> str:
    """GBNF of the ``len(s)``-digit strings (leading zeros allowed) at or above ``s``."""
    if not s.strip("0"):
        return _any_digits(len(s))
    d, rest = int(s[0]), s[1:]
    alts = [_seq(_digit(d, d), _at_least(rest))]
    if d < 9:
        alts.append(_seq(_digit(d + 1, 9), _any_digits(len(rest))))
    return _alt(alts)


def _at_most(s: str) -> str:
    """GBNF of the ``len(s)``-digit strings (leading zeros allowed) at or below ``s``."""
    if not s.strip("9"):
        return _any_digits(len(s))
    d, rest = int(s[0]), s[1:]
    alts = [_seq(_digit(d, d), _at_most(rest))]
    if d > 0:
        alts.insert(0, _seq(_digit(0, d - 1), _any_digits(len(rest))))
    return _alt(alts)


def _same_length(a: str, b: str) -> str:
    """GBNF of the digit strings of ``len(a) == len(b)`` digits from ``a`` to ``b`` (``a <= b``): their
    common prefix, then at the first digit that differs, ``a``'s digit followed by what is at least the rest
    of ``a``, the digits between followed by anything, ``b``'s digit followed by what is at most the rest
    of ``b`` (an end of ``a`` of zeros or of ``b`` of nines joins the middle class)."""
    i = next((k for k in range(len(a)) if a[k] != b[k]), len(a))
    prefix = f'"{a[:i]}"' if i else ""
    if i == len(a):
        return prefix
    x, y, ra, rb = int(a[i]), int(b[i]), a[i + 1:], b[i + 1:]
    lo = x if not ra.strip("0") else x + 1
    hi = y if not rb.strip("9") else y - 1
    alts = []
    if lo != x:
        alts.append(_seq(_digit(x, x), _at_least(ra)))
    if lo <= hi:
        alts.append(_seq(_digit(lo, hi), _any_digits(len(ra))))
    if hi != y:
        alts.append(_seq(_digit(y, y), _at_most(rb)))
    return _seq(prefix, _alt(alts))


def _naturals(a: int, b: int) -> str:
    """GBNF of the integers ``a`` to ``b`` (``0 <= a <= b``) in decimal, without leading zeros."""
    sa, sb = str(a), str(b)
    if len(sa) == len(sb):
        return _same_length(sa, sb)
    # a's length from a on, every number of the lengths between, b's length up to b; a first or last
    # length that holds all its numbers joins the lengths between
    first_full, last_full = a > 0 and not sa[1:].strip("0") and sa[0] == "1", not sb.strip("9")
    shortest, longest = len(sa) + (not first_full), len(sb) - (not last_full)
    alts = [] if first_full else [_same_length(sa, "9" * len(sa))]
    if shortest <= longest:
        alts.append(_seq("[1-9]", _any_digits(shortest - 1, longest - 1)))
    if not last_full:
        alts.append(_same_length("1" + "0" * (len(sb) - 1), sb))
    return _alt(alts)


def integer_range_gbnf(low: int | None, high: int | None) -> str:
    """GBNF (a rule's body, no trailing ``space``) of the JSON integers from ``low`` to ``high`` inclusive
    (``None``: unbounded that side), for JSON Schema's numeric bounds (:func:`integer_bounds`).

    llama-cpp-python's converter ignores the bounds; llama.cpp's C++ json-schema-to-grammar enforces them
    digit by digit, and so does this: numbers of fewer digits than a bound are free, those of as many
    digits are held digit by digit (:func:`_same_length`), negatives are ``-`` and a magnitude in range.
    Each number is written once, without leading zeros or ``-0``. An unbounded side stops at 16 digits
    (the converter's ``integer``) or the other bound's length. Raises ``ValueError`` when ``low > high``
    or a bound has more than :data:`MAX_INT_BOUND_DIGITS` digits."""
    for b in (low, high):
        if b is not None and len(str(abs(b))) > MAX_INT_BOUND_DIGITS:
            raise ValueError(f"a bound of more than {MAX_INT_BOUND_DIGITS} digits")
    width = max([_FREE_INT_DIGITS] + [len(str(abs(b))) for b in (low, high) if b is not None])
    lo = -(10 ** width - 1) if low is None else low
    hi = 10 ** width - 1 if high is None else high
    if lo > hi:
        raise ValueError(f"no integer is at least {lo} and at most {hi}")
    alts = []
    if lo < 0:  # the negatives: "-" and a magnitude from max(1, -hi) to -lo
        alts.append(_seq('"-"', _naturals(max(1, -hi), -lo)))
    if hi >= 0:
        alts.append(_naturals(max(0, lo), hi))
    return _alt(alts)


#: Length and item bounds the converter writes out as one nested optional group per allowed repetition
_REPETITION_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems")
#: The largest such bound enforced: a larger one is left unenforced (Claude Code's ``Workflow`` script has
#: ``maxLength: 524288``, half a million nested groups, which crashed llama.cpp's parser; the token limit
#: bounds a generation long before such a bound would).
MAX_REPETITION_BOUND = 256
#: The deepest nesting of groups a GBNF grammar may have (:func:`gbnf_depth`): llama.cpp's parser recurses
#: once per level and overflowed the stack at 100,000 levels (a segmentation fault of the whole server); it
#: gives up by itself past about 2,000.
MAX_GBNF_DEPTH = 1000


#: what :func:`gbnf_depth` skips: string literals, character classes (escapes inside both) and comments
_GBNF_OPAQUE = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|#[^\n]*')
_GBNF_PARENS = re.compile(r"[()]")


def gbnf_depth(gbnf: str) -> int:
    """The deepest nesting of parentheses in ``gbnf``, outside string literals, character classes and
    comments (0.5 ms for a 24 KB grammar of 24 tools: literals and classes go in one regex pass, only the
    parentheses are counted in Python)."""
    parens = _GBNF_PARENS.findall(_GBNF_OPAQUE.sub("", gbnf))
    return max(accumulate(1 if p == "(" else -1 for p in parens), default=0)


def require_gbnf_depth(gbnf: str, param: str) -> None:
    """Raise :class:`InvalidRequest` naming ``param`` when ``gbnf`` nests deeper than :data:`MAX_GBNF_DEPTH`
    (llama.cpp's parser would overflow its stack)."""
    if (depth := gbnf_depth(gbnf)) > MAX_GBNF_DEPTH:
        raise InvalidRequest(f"the grammar nests groups {depth} levels deep; at most {MAX_GBNF_DEPTH} are taken",
                             param=param)


#: shorthand classes of a regular expression, written out (``\s``: a space only, the one blank a JSON string
#: holds unescaped)
_SHORTHANDS = {"d": "0-9", "w": "0-9A-Za-z_", "s": " "}
#: JSON's two-character escapes of control characters a pattern may name
_JSON_ESCAPES = {"n": "\\\\n", "t": "\\\\t", "r": "\\\\r", "\n": "\\\\n", "\t": "\\\\t", "\r": "\\\\r"}


def json_pattern(pattern: str) -> str:
    """A JSON schema ``pattern`` rewritten for llama-cpp-python's converter, which writes a regular expression
    out as GBNF inside a JSON string but reads only part of the syntax: ``\\d``, ``\\w``, ``\\s`` (and ``\\D``,
    ``\\W``, ``\\S``) become classes; an escaped character that is no metacharacter (``\\.``, ``\\-``,
    ``\\/``) becomes that character, ``\\.`` a one-character class; and what a JSON string must escape is
    matched in its escaped form (a ``"`` as ``\\"``, a newline, tab or carriage return, written or as
    ``\\n``, as ``\\n``), so the value the call's JSON decodes to is the one the pattern describes. Inside a
    class, shorthands are written out and other escapes become ``\\x`` hex escapes."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            i += 2
            lower = e.lower()
            if lower in _SHORTHANDS:
                body = _SHORTHANDS[lower] if lower != "s" or e == "s" else " \\t\\r\\n"
                if in_class:
                    out.append(body if e.islower() else "")  # a negated shorthand in a class: left out
                else:
                    out.append(f"[{body}]" if e.islower() else f"[^{body}]")
            elif e in _JSON_ESCAPES:
                out.append(_JSON_ESCAPES[e] if not in_class else "")
            elif e in ('"', "\\") and not in_class:  # JSON writes both escaped: \" and \\
                out.append('\\\\"' if e == '"' else "\\\\\\\\")
            elif in_class:
                out.append(f"\\x{ord(e):02X}" if ord(e) < 128 else e)
            elif e in ".^$":
                out.append(f"[\\x{ord(e):02X}]")  # a class: the converter reads no escaped . ^ $
            elif e in "[](){}|*+?":
                out.append("\\" + e)
            else:
                out.append(e)  # \- \/ \: ...: the character itself
            continue
        if in_class:
            in_class = c != "]" or out[-1] in ("[", "[^")
            out.append(c)
        elif c == "[":
            in_class = True
            negated = i + 1 < n and pattern[i + 1] == "^"
            out.append("[^" if negated else "[")
            i += 2 if negated else 1
            continue
        elif c == '"':
            out.append('\\\\"')
        elif c in "\n\t\r":
            out.append(_JSON_ESCAPES[c])
        else:
            out.append(c)
        i += 1
    return "".join(out)


def prepare_schema(schema: Any, *, strict: bool, param: str) -> Any:
    """Make numeric and length bounds enforceable before conversion (returns a new schema).

    An integer's ``minimum``, ``maximum``, ``exclusiveMinimum`` and ``exclusiveMaximum`` are enforced by
    :func:`schema_converter` (:func:`integer_range_gbnf`); bounds no integer fits, or one of more than
    :data:`MAX_INT_BOUND_DIGITS` digits, are a 400 (:class:`InvalidRequest`). A ``type`` list keeps its
    bounds on its ``integer`` and ``number`` branches (``anyOf``: the converter reads a list as bare types).
    A ``number``'s bounds are left unenforced, also with ``strict`` (OpenAI accepts them in strict schemas
    and openai-agents makes every tool strict); ``multipleOf`` is unenforced too, and refused with ``strict``.
    A length or item bound above :data:`MAX_REPETITION_BOUND` is left unenforced; a lower bound above its
    upper one (``minLength`` > ``maxLength``, ``minItems`` > ``maxItems``) is a 400: no value fits.
    """
    if isinstance(schema, list):
        return [prepare_schema(s, strict=strict, param=param) for s in schema]
    if not isinstance(schema, dict):
        return schema
    for low, high in (("minLength", "maxLength"), ("minItems", "maxItems")):
        if isinstance(schema.get(low), int) and isinstance(schema.get(high), int) and schema[low] > schema[high]:
            raise InvalidRequest(f"{param}: {low} {schema[low]} is above {high} {schema[high]}: no value fits",
                                 param=param)
    out = {k: prepare_schema(v, strict=strict, param=param) for k, v in schema.items()
           if not (k in _REPETITION_BOUNDS and isinstance(v, int) and v > MAX_REPETITION_BOUND)}
    if isinstance(out.get("pattern"), str) and out.get("type") == "string":
        out["pattern"] = json_pattern(out["pattern"])
    if not any(k in out for k in _NUMERIC_BOUNDS):
        return out
    if strict and "multipleOf" in out:
        raise InvalidRequest("strict schema uses multipleOf, which the grammar cannot enforce", param=param)
    kinds = out.get("type")
    if isinstance(kinds, list) and not any(k in out for k in ("anyOf", "oneOf")):
        numeric = {k: v for k, v in out.items() if k in _NUMERIC_BOUNDS}
        rest = {k: v for k, v in out.items() if k not in _NUMERIC_BOUNDS and k != "type"}
        branches = [prepare_schema({"type": t, **(numeric if t in ("integer", "number") else {})},
                                   strict=strict, param=param) for t in kinds]
        return {**rest, "anyOf": branches}
    if kinds == "integer":
        try:
            integer_range_gbnf(*integer_bounds(out))
        except ValueError as exc:
            raise InvalidRequest(f"{param}: integer bounds: {exc}", param=param) from None
    return out


#: keywords the converter builds a value's rule from; a schema with none of them allows any JSON value
_SHAPING = frozenset(("type", "$ref", "anyOf", "oneOf", "allOf", "const", "enum", "properties", "additionalProperties",
                      "items", "prefixItems", "pattern", "format", "minLength", "maxLength", "minItems", "maxItems",
                      "required"))
#: keywords whose value is one subschema, a list of them, or a map of names to them
_ONE, _LIST, _MAP = ("items", "additionalProperties", "contains", "propertyNames"), \
    ("anyOf", "oneOf", "allOf", "prefixItems"), ("properties", "$defs", "definitions", "patternProperties")
#: conditions the grammar cannot express (left unenforced, or refused when ``strict``)
_CONDITIONS = ("not", "if", "then", "else")


def any_value_schemas(schema: Any, *, strict: bool, param: str) -> Any:
    """``schema`` (a tool's parameters) with what llama.cpp's converter cannot read made explicit (a new schema):
    a subschema that constrains nothing (``true``, or only annotations such as ``description``: JSON Schema's
    "any value", as Anthropic and OpenAI accept it in tools; MCP tools have them) becomes the converter's
    ``value`` rule (any JSON value: it read ``{}`` as any object and refused the rest); ``not`` and
    ``if``/``then``/``else`` are left unenforced, or refused with ``strict`` (:class:`InvalidRequest`).
    The top level is the arguments object; ``default``, ``const``, ``enum`` and ``examples`` are data, never
    rewritten."""

    def walk(s: Any, top: bool = False) -> Any:
        if s is True:
            return {"type": "value"}
        if not isinstance(s, dict):
            return s
        out = dict(s)
        for key in _CONDITIONS:
            if key in out:
                if strict:
                    raise InvalidRequest(f"strict schema uses {key!r}, which the grammar cannot enforce", param=param)
                del out[key]
        for key in _ONE:
            if isinstance(out.get(key), dict) or (out.get(key) is True and key != "additionalProperties"):
                out[key] = walk(out[key])
        for key in _LIST:
            if isinstance(out.get(key), list):
                out[key] = [walk(x) for x in out[key]]
        for key in _MAP:
            if isinstance(out.get(key), dict):
                out[key] = {k: walk(v) for k, v in out[key].items()}
        if isinstance(out.get("items"), list):  # the old tuple form
            out["items"] = [walk(x) for x in out["items"]]
        if not top and not any(k in out for k in _SHAPING):
            out["type"] = "value"
        return out

    return walk(schema, top=True)


def _tool_schemas(conv: Any, tools: list[dict[str, Any]],
                  chosen: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """``(name, resolved parameters schema, where)`` of each chosen tool; raises :class:`InvalidRequest`
    naming ``tools[i]`` for a nameless tool or a parameters schema that is not an object."""
    index = {id(t): i for i, t in enumerate(tools)}
    out = []
    for tool in chosen:
        i = index.get(id(tool), 0)
        function = tool.get("function")
        fn = function if isinstance(function, dict) else tool
        name = fn.get("name")
        where = f"tools[{i}].function.parameters"
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"tools[{i}]: a tool needs a name", param=f"tools[{i}].function.name")
        schema = fn.get("parameters", fn.get("input_schema"))
        # no parameters: an empty parameter list, as OpenAI defines it (llama.cpp's converter reads a bare
        # {"type": "object"} as any object, and a small model then invents arguments)
        strict = bool(fn.get("strict"))
        schema = any_value_schemas(prepare_schema(schema, strict=strict, param=where), strict=strict, param=where) \
            if isinstance(schema, dict) else {"type": "object", "properties": {}}
        if schema.get("type", "object") != "object":
            raise InvalidRequest(f"{where}: the arguments schema must describe an object", param=where)
        try:
            schema = conv.resolve_refs(schema, f"tool{i}")
        except Exception as exc:
            raise InvalidRequest(f"{where}: cannot turn this JSON schema into a grammar: {_why(exc)}",
                                 param=where) from None
        out.append((name, schema, where))
    return out


def _why(exc: Exception) -> str:
    """What the converter said: its own message (``Unrecognized schema: ...``), not a Python error's repr."""
    said = str(exc)
    return said if isinstance(exc, (AssertionError, ValueError)) and said else \
        "it uses a construct the grammar converter does not support"


def _visit(conv: Any, schema: Any, rule: str, where: str) -> str:
    try:
        gbnf: str = conv.visit(schema, rule)
        return gbnf
    except Exception as exc:
        raise InvalidRequest(f"{where}: cannot turn this JSON schema into a grammar: {_why(exc)}",
                             param=where) from None


def _fix_chars(conv: Any) -> None:
    if "char" in conv._rules:
        conv._rules["char"] = _JSON_CHAR


def tool_call_rules(conv: Any, tools: list[dict[str, Any]], chosen: list[dict[str, Any]], *,
                    args_key: str = "arguments", name_key: str = "name") -> list[str]:
    """Add one rule per chosen tool, ``{"<name_key>": "<tool>", "<args_key>": <its parameters schema>}``.

    Returns the rule names. Raises :class:`InvalidRequest` naming ``tools[i]``
    for a nameless tool or a parameters schema that is not an object or
    cannot be converted.
    """
    rules = []
    for name, schema, where in _tool_schemas(conv, tools, chosen):
        args_rule = _visit(conv, schema, f"{name}-args", where)
        rules.append(conv._add_rule(
            f"{name}-call",
            r'"{" space ' + gbnf_literal(json.dumps(name_key)) + r' space ":" space '
            + gbnf_literal(json.dumps(name, ensure_ascii=False))
            + r' space "," space ' + gbnf_literal(json.dumps(args_key)) + r' space ":" space ' + args_rule
            + r' "}"'))
    _fix_chars(conv)
    return rules


#: Native formats whose calls are one JSON object each: (prefix, separator, suffix, arguments key).
NATIVE_CALL_SHAPES: dict[str, tuple[str, str, str, str]] = {
    "hermes_2_pro": ("<tool_call>\n", "\n</tool_call>\n<tool_call>\n", "\n</tool_call>", "arguments"),
    "llama3_json": ("", "", "", "parameters"),
    "mistral_nemo": ("[TOOL_CALLS][", ", ", "]", "arguments"),
    "generic": ('{"tool_calls": [', ", ", "]}", "arguments"),
    "granite": ("<|tool_call|>[", ", ", "]", "arguments"),
    "nemotron_v2": ("<TOOLCALL>[", ", ", "]</TOOLCALL>", "arguments"),
    "gigachat3": ("function call<|role_sep|>\n", "", "", "arguments"),
    "gigachat3_1": ("<|function_call|>", "", "", "arguments"),
    "command_r_plus": ("Action:\n```json\n[", ", ", "]\n```", "parameters"),
    "firefunction_v2": (" functools[", ", ", "]", "arguments"),
    "apriel": ("<tool_calls>[", ", ", "]</tool_calls>", "arguments"),
}
#: the key naming the tool in a call object, where it is not ``name``
_NAME_KEYS = {"command_r_plus": "tool_name"}

#: text without a closing tag (``</``): a string value of the XML formats
_XML_TEXT = r'( [^<] | "<" [^/] )*'
#: Harmony: an optional analysis message before the call
_HARMONY_ANALYSIS = r'( "<|channel|>analysis<|message|>" ( [^<] | "<" [^|] )* "<|end|><|start|>assistant" )?'
#: Solar Open: an optional reasoning message before the calls
_SOLAR_THINK = r'( "<|think|>" ( [^<] | "<" [^|] )* "<|end|><|begin|>assistant" )?'
#: Muse Glimmer: an optional reasoning message (to ``self``) before the calls
_GLIMMER_ANALYSIS = r'( " to=self<|message|>" ( [^<] | "<" [^|] )* "<|eom|><|start|>assistant" )?'


def json_types(schema: Any) -> list[str]:
    """The JSON types a schema's ``type`` names (a string or a list of them; none when absent)."""
    t = schema.get("type") if isinstance(schema, dict) else None
    return [t] if isinstance(t, str) else [x for x in t if isinstance(x, str)] if isinstance(t, list) else []


def is_string_param(schema: Any) -> bool:
    """True when a parameter's schema says its value is text (``"string"``, maybe nullable): the XML formats
    write it raw, in the grammar and in their parsers alike."""
    types = [t for t in json_types(schema) if t != "null"]
    return bool(types) and all(t == "string" for t in types)


def _raw_value(schema: dict[str, Any], text: str) -> str:
    """The rule of a raw text value (an XML format's ``string`` parameter) under its schema: its ``const`` or
    ``enum`` strings as literals; with ``minLength``/``maxLength``, that many characters other than ``<`` (the
    run is counted in characters, so a bounded value cannot hold one); else ``text``, any text without the
    format's closing marker. ``pattern`` and ``format`` are left unenforced, as llama.cpp leaves them for
    these formats."""
    choices = [schema["const"]] if "const" in schema else schema.get("enum")
    strings = [c for c in choices if isinstance(c, str)] if isinstance(choices, list) else []
    if strings:
        if isinstance(choices, list) and None in choices and "null" in json_types(schema):  # null: the word null
            strings.append("null")
        return "(" + " | ".join(gbnf_literal(c) for c in strings) + ")"
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    lo = lo if isinstance(lo, int) and lo > 0 else 0
    hi = hi if isinstance(hi, int) and hi >= lo else None
    if lo == 0 and hi is None:
        return text
    char = _TEXT_CHAR.get(text, "[^<]")
    return f"{char}{{{lo},{'' if hi is None else hi}}}"


def _params(conv: Any, name: str, schema: dict[str, Any], where: str, item: Any, sep: str, *,
            raw_strings: bool = True, text: str = _XML_TEXT) -> str:
    """GBNF of an object's properties as a sequence of ``item(key, value_rule, raw)`` pieces: the required
    ones in schema order, then any of the optional ones in schema order, ``sep`` between. With
    ``raw_strings`` a ``string`` value is raw text (XML formats: the rule ``text``, by default text
    without ``</``) and ``raw`` is true for it, else every value is JSON."""
    properties = schema.get("properties")
    props = properties if isinstance(properties, dict) else {}
    required = [k for k in props if k in set(schema.get("required") or ())]
    optional = [k for k in props if k not in required]

    def piece(key: str) -> str:
        sub = props[key] if isinstance(props[key], dict) else {}
        raw = raw_strings and is_string_param(sub)
        value = _raw_value(sub, text) if raw else _visit(conv, sub, f"{name}-{key}", where)
        added: str = conv._add_rule(f"{name}-{key}-param", item(key, value, raw))
        return added

    req = [piece(k) for k in required]
    opt = [piece(k) for k in optional]
    glue = f" {gbnf_literal(sep)} " if sep else " "
    body = glue.join(req)
    if opt:
        # any subsequence of the optional ones, in order: opt_i followed by a tail of later ones
        tails = []
        for i in range(len(opt)):
            tails.append(opt[i] + "".join(f" ({gbnf_literal(sep) + ' ' if sep else ''}{o})?" for o in opt[i + 1:]))
        lead = f"{gbnf_literal(sep)} " if (sep and req) else ""
        body = (body + " " if body else "") + f"({lead}({' | '.join(tails)}))?"
    return body or '""'


def _qwen_param(key: str, value: str, raw: bool) -> str:
    return f"{gbnf_literal(f'<parameter={key}>' + chr(10))} {value} {gbnf_literal(chr(10) + '</parameter>' + chr(10))}"


def _seed_param(key: str, value: str, raw: bool) -> str:
    """Seed-OSS's value is flush against its tags (a newline there would be the value's)."""
    return f"{gbnf_literal(f'<parameter={key}>')} {value} {gbnf_literal('</parameter>' + chr(10))}"


def _glm_param(key: str, value: str, raw: bool) -> str:
    return (f"{gbnf_literal(f'<arg_key>{key}</arg_key>' + chr(10) + '<arg_value>')} {value} "
            f"{gbnf_literal('</arg_value>' + chr(10))}")


def _hy3_param(key: str, value: str, raw: bool) -> str:
    return (f"{gbnf_literal(f'<arg_key:opensource>{key}</arg_key:opensource>' + chr(10) + '<arg_value:opensource>')} "
            f"{value} {gbnf_literal('</arg_value:opensource>' + chr(10))}")


def _py_kwarg(key: str, value: str, raw: bool) -> str:
    return f"{gbnf_literal(key + '=')} {value}"


def _minimax_param(key: str, value: str, raw: bool) -> str:
    tag = f'<parameter name="{key}">'
    return f"{gbnf_literal(tag)} {value} {gbnf_literal('</parameter>' + chr(10))}"


def _dsml_param(key: str, value: str, raw: bool) -> str:
    tag = f'<｜DSML｜parameter name="{key}" string="{"true" if raw else "false"}">'
    return f"{gbnf_literal(tag)} {value} {gbnf_literal('</｜DSML｜parameter>' + chr(10))}"


def _kimi_k3_param(schema: dict[str, Any]) -> Any:
    """Kimi K3's argument tag names the value's JSON type (``integer`` is ``number``, as its template's
    ``xtml_type`` writes it)."""
    props = schema.get("properties")

    def item(key: str, value: str, raw: bool) -> str:
        sub = props.get(key) if isinstance(props, dict) else None
        kind = sub.get("type") if isinstance(sub, dict) else None
        kind = "number" if kind == "integer" else kind
        if raw or kind not in ("string", "number", "boolean", "null", "object", "array"):
            kind = "string" if raw else "object"
        tag = f'<|open|>argument key="{key}" type="{kind}"<|sep|>'
        return f"{gbnf_literal(tag)} {value} {gbnf_literal('<|close|>argument<|sep|>')}"
    return item


#: MiniMax M3's namespace token, before every tag of its calls
_M3 = "]<]minimax[>["
#: a MiniMax M3 text value: no ``<`` or ``]`` (either could start a nested tag or the namespace token)
_M3_TEXT = r"[^<\]]*"


def _minimax_m3_param(key: str, value: str, raw: bool) -> str:
    return f"{gbnf_literal(f'{_M3}<{key}>')} {value} {gbnf_literal(f'{_M3}</{key}>')}"


def _atem_param(key: str, value: str, raw: bool) -> str:
    tag = f'<atem:parameter name="{key}">'
    return f"{gbnf_literal(tag)} {value} {gbnf_literal('</atem:parameter>' + chr(10))}"


def _minicpm_param(key: str, value: str, raw: bool) -> str:
    tag = f'<param name="{key}">'
    return f"{gbnf_literal(tag)} {value} {gbnf_literal('</param>')}"


#: text without a ``<|`` (a string value of Kimi K3, whose tags all start so)
_KIMI_TEXT = r'( [^<] | "<" [^|] )*'

#: one character of a bounded raw text value (:func:`_raw_value`), per format's text rule
_TEXT_CHAR = {_XML_TEXT: "[^<]", _KIMI_TEXT: "[^<]", _M3_TEXT: r"[^<\]]"}


def _gemma_param(key: str, value: str, raw: bool) -> str:
    """Gemma 4's ``key:value``, a text value quoted by ``<|"|>``."""
    quote = gbnf_literal('<|"|>')
    return f"{gbnf_literal(key + ':')} {quote} {value} {quote}" if raw else f"{gbnf_literal(key + ':')} {value}"


def _call_rules(conv: Any, chat_format: str, tools: list[dict[str, Any]], chosen: list[dict[str, Any]]) -> list[str]:
    """One rule per chosen tool: the whole call in ``chat_format``'s own syntax."""
    rules = []
    for name, schema, where in _tool_schemas(conv, tools, chosen):
        lit = gbnf_literal
        if chat_format in ("qwen3_coder", "seed_oss"):
            tag = "seed:tool_call" if chat_format == "seed_oss" else "tool_call"
            params = _params(conv, name, schema, where, _seed_param if chat_format == "seed_oss" else _qwen_param, "")
            body = (f"{lit(f'<{tag}>' + chr(10) + f'<function={name}>' + chr(10))} {params} "
                    f"{lit('</function>' + chr(10) + f'</{tag}>')}")
        elif chat_format in ("glm_4_5", "ling_3"):
            body = (f"{lit(f'<tool_call>{name}' + chr(10))} {_params(conv, name, schema, where, _glm_param, '')} "
                    f"{lit('</tool_call>')}")
        elif chat_format == "hy3":
            body = (f"{lit(f'<tool_call:opensource>{name}<tool_sep:opensource>' + chr(10))} "
                    f"{_params(conv, name, schema, where, _hy3_param, '')} {lit('</tool_call:opensource>' + chr(10))}")
        elif chat_format == "minimax_m2":
            params = _params(conv, name, schema, where, _minimax_param, "")
            body = f"{lit(f'<invoke name={chr(34)}{name}{chr(34)}>{chr(10)}')} {params} {lit('</invoke>' + chr(10))}"
        elif chat_format in ("deepseek_v3_2", "deepseek_v4"):
            params = _params(conv, name, schema, where, _dsml_param, "")
            body = f"{lit(f'<｜DSML｜invoke name={chr(34)}{name}{chr(34)}>' + chr(10))} {params} " \
                   f"{lit('</｜DSML｜invoke>' + chr(10))}"
        elif chat_format == "kimi_k3":
            params = _params(conv, name, schema, where, _kimi_k3_param(schema), "", text=_KIMI_TEXT)
            call = f'<|open|>call tool="{name}" index="'
            body = f"{lit(call)} [0-9]+ {lit(chr(34) + '<|sep|>')} {params} {lit('<|close|>call<|sep|>')}"
        elif chat_format == "minimax_m3":
            params = _params(conv, name, schema, where, _minimax_m3_param, "", text=_M3_TEXT)
            body = f"{lit(f'{_M3}<invoke name={chr(34)}{name}{chr(34)}>')} {params} {lit(f'{_M3}</invoke>{chr(10)}')}"
        elif chat_format == "muse_glimmer":  # a message to the tool, its call in ATEM tags
            params = _params(conv, name, schema, where, _atem_param, "")
            head = f' to={name}<|message|><atem:function_calls>\n<atem:invoke name="{name}">\n'
            body = f"{lit(head)} {params} {lit('</atem:invoke>' + chr(10) + '</atem:function_calls>')}"
        elif chat_format == "minicpm5":
            params = _params(conv, name, schema, where, _minicpm_param, "")
            body = f"{lit(f'<function name={chr(34)}{name}{chr(34)}>')} {params} {lit('</function>')}"
        elif chat_format == "gemma4":
            params = _params(conv, name, schema, where, _gemma_param, ",", text=_KIMI_TEXT)
            body = f"{lit(f'<|tool_call>call:{name}{chr(123)}')} {params} {lit(chr(125) + '<tool_call|>')}"
        elif chat_format == "lfm2":
            params = _params(conv, name, schema, where, _py_kwarg, ", ", raw_strings=False)
            body = f"{lit(name + '(')} {params} {lit(')')}"
        else:
            args = _visit(conv, schema, f"{name}-args", where)
            if chat_format == "kimi_k2":
                body = (f"{lit(f'<|tool_call_begin|>functions.{name}:')} [0-9]+ {lit('<|tool_call_argument_begin|>')} "
                        f"{args} {lit('<|tool_call_end|>')}")
            elif chat_format == "solar_open":  # the model's own call id: 10 lowercase letters and digits
                body = (f"{lit('<|tool_call:begin|>')} [a-z0-9]{{10}} "
                        f"{lit(f'<|tool_call:name|>{name}<|tool_call:args|>')} {args} {lit('<|tool_call:end|>')}")
            elif chat_format == "apertus":
                body = f'"{{" {lit(json.dumps(name, ensure_ascii=False))} ": " {args} "}}"'
            elif chat_format == "command_r7b":  # the model's own call counter, then the name and parameters
                body = (f'{lit(chr(123) + chr(34) + "tool_call_id" + chr(34) + ": " + chr(34))} [0-9]+ '
                        f'{lit(chr(34) + ", " + chr(34) + "tool_name" + chr(34) + ": " + json.dumps(name))} '
                        f'{lit(", " + chr(34) + "parameters" + chr(34) + ": ")} {args} "}}"')
            elif chat_format == "functionary_v3_1":
                body = f"{lit(f'<function={name}>')} {args} {lit('</function>')}"
            elif chat_format == "functionary_v3_2":  # the prompt ends with the first call's >>>
                body = f"{lit(name + chr(10))} {args}"
            elif chat_format == "mistral_small_3_2":
                body = f"{lit(f'[TOOL_CALLS]{name}[ARGS]')} {args}"
            else:  # gpt_oss
                body = f"{lit(f'<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>')} {args}"
        rules.append(conv._add_rule(f"{name}-call", body))
    _fix_chars(conv)
    return rules


#: Formats whose calls are not one JSON object: (prefix, separator, suffix) around the calls of :func:`_call_rules`.
NATIVE_CALL_WRAPPERS: dict[str, tuple[str, str, str]] = {
    "qwen3_coder": ("", "\n", ""),
    "seed_oss": ("", "\n", ""),
    "glm_4_5": ("", "", ""),
    "ling_3": ("", "", ""),
    "hy3": ("<tool_calls:opensource>\n", "", "</tool_calls:opensource>"),
    "minimax_m2": ("<minimax:tool_call>\n", "", "</minimax:tool_call>"),
    "deepseek_v3_2": ("<｜DSML｜function_calls>\n", "", "</｜DSML｜function_calls>"),
    "deepseek_v4": ("<｜DSML｜tool_calls>\n", "", "</｜DSML｜tool_calls>"),
    "kimi_k3": ("<|open|>tools<|sep|>", "", "<|close|>tools<|sep|>"),
    "minicpm5": ("", "\n", ""),
    "muse_glimmer": ("", "<|eom|><|start|>assistant", ""),  # one message per call
    "gemma4": ("", "", ""),
    "minimax_m3": (f"{_M3}<tool_call>\n", "", f"{_M3}</tool_call>"),
    "lfm2": ("<|tool_call_start|>[", ", ", "]<|tool_call_end|>"),
    "kimi_k2": ("<|tool_calls_section_begin|>", "", "<|tool_calls_section_end|>"),
    "solar_open": ("<|tool_calls|>", "", "<|calls|>"),
    "apertus": ("<|tools_prefix|>[", ", ", "]<|tools_suffix|>"),
    "mistral_small_3_2": ("", "", ""),
    "command_r7b": ("<|START_ACTION|>[", ", ", "]<|END_ACTION|>"),
    "functionary_v3_1": ("", "", ""),
    "functionary_v3_2": ("", ">>>", ""),
    "gpt_oss": ("", "", ""),  # one call per message: generation ends at <|call|>
}


def _class_char(c: str) -> str:
    """``c`` escaped for a GBNF character class."""
    return "\\" + c if c in "\\[]^-" else c


def _text_without(pair: str) -> str:
    """GBNF of text in which the two characters ``pair`` never follow each other (reasoning before a closing
    phrase that starts with them: Apriel 1.6's ``[BEGIN FINAL RESPONSE]``, Mistral's ``[/THINK]``), so the
    phrase can only end the text, never be part of it."""
    a, b = (_class_char(c) for c in pair)
    return f"( [^{a}] | {gbnf_literal(pair[0])} [^{b}] )*"


def after_thinking(gbnf: str, think_close: str) -> str:
    """``gbnf`` (a grammar whose start rule is ``root``) behind free reasoning text and ``think_close``: for a
    forced call on a prompt that opened a thinking block (an emulated ``TOOL_CALL`` on DeepSeek R1's
    ``<think>\\n``), so the model thinks first and closes the block, as :func:`native_tool_grammar`'s
    ``think_close`` does for the native formats. The text cannot hold ``</`` (it ends at the tag)."""
    lines = [("call-root ::=" + line[len("root ::="):]) if line.startswith("root ::=") else line
             for line in gbnf.splitlines()]
    return "\n".join([f"root ::= think-text {gbnf_literal(think_close)} [ \\t\\n]* call-root",
                      f"think-text ::= {_XML_TEXT}", *lines]) + "\n"


def _think_text(think_close: str, avoid: tuple[str, ...]) -> str:
    """GBNF of the reasoning text before ``think_close`` in a forced call's grammar: text that cannot start the
    closing tag, nor any of the ``avoid`` openers that start with ``<`` (a call's opener that ends the thinking
    where the parser reads it: reasoning that held one would end there, the rest of it content)."""
    if think_close.startswith("<|"):  # Kimi K3's tags all start so
        return _KIMI_TEXT
    if not think_close.startswith("<"):
        return _text_without(think_close[:2])
    seconds = "".join(dict.fromkeys(o[1] for o in ("</", *avoid) if len(o) > 1 and o[0] == "<"))
    return f'( [^<] | "<" [^{"".join(_class_char(c) for c in seconds)}] )*'


def native_tool_grammar(chat_format: str, tools: list[dict[str, Any]], chosen: list[dict[str, Any]], *, parallel: bool,
                        think_close: str | None = None, think_avoid: tuple[str, ...] = ()) -> str:
    """GBNF forcing one (or, with ``parallel``, several) calls in ``chat_format``'s own syntax.

    Used for ``tool_choice: "required"`` or a named tool. Raises
    :class:`InvalidRequest` for formats whose call syntax has no grammar here.
    For the XML formats (Qwen3-Coder, Seed-OSS, GLM) the required parameters
    come first in schema order, then any optional ones in schema order, and
    a string value is raw text that may not contain ``</``, held to its
    ``enum``/``const`` and length bounds (:func:`_raw_value`). gpt-oss may write one
    ``analysis`` message first; its calls are one per message, so one. Muse Glimmer may write one message to
    ``self`` (its reasoning) first, then a message to each tool; Solar Open one reasoning message
    (``<|think|>...<|end|><|begin|>assistant``) first, and its call ids are 10 lowercase letters and digits,
    the form its template asks for (and its parser keeps).
    ``think_close``: the prompt left a thinking block open (QwQ, GLM 4.7,
    Nemotron): the model first ends its reasoning (text without ``</``, nor the ``think_avoid`` openers:
    :func:`_think_text`) with this tag, then calls.
    """
    conv = schema_converter()
    if chat_format in NATIVE_CALL_SHAPES:
        prefix, sep, suffix, args_key = NATIVE_CALL_SHAPES[chat_format]
        if chat_format in ("llama3_json", "gigachat3", "gigachat3_1"):
            parallel = False  # one JSON call per message (Llama 3.x; GigaChat's template renders one)
        call = " | ".join(tool_call_rules(conv, tools, chosen, args_key=args_key,
                                          name_key=_NAME_KEYS.get(chat_format, "name")))
    elif chat_format in NATIVE_CALL_WRAPPERS:
        prefix, sep, suffix = NATIVE_CALL_WRAPPERS[chat_format]
        if chat_format == "gpt_oss":
            parallel = False
        call = " | ".join(_call_rules(conv, chat_format, tools, chosen))
    else:
        raise InvalidRequest(f"tool_choice 'required' or a named tool cannot be enforced for chat format "
                             f"{chat_format!r}; use tool_choice 'auto'", param="tool_choice")
    body = f"({call})" + (f" ({gbnf_literal(sep)} ({call}))*" if parallel else "")
    if chat_format == "gpt_oss":
        body = f"{_HARMONY_ANALYSIS} {body}"
    elif chat_format == "muse_glimmer":
        body = f"{_GLIMMER_ANALYSIS} {body}"
    root = f"{gbnf_literal(prefix)} {body} {gbnf_literal(suffix)}"
    if chat_format == "solar_open":  # its reasoning is a message before the calls' message
        root = f"{_SOLAR_THINK} {root}"
    if think_close:  # reasoning text that cannot start the closing tag
        root = f"{_think_text(think_close, think_avoid)} {gbnf_literal(think_close)} [ \\t\\n]* {root}"
    conv._add_rule("root", root.replace('"" ', ""))
    grammar: str = conv.format_grammar()
    return grammar
