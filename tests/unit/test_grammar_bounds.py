"""Integer bounds in tool grammars (JSON Schema's ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``) against two oracles: llama.cpp's own grammar sampler (SmolLM2's vocabulary, loaded
vocabulary-only) decides what the GBNF takes, the ``jsonschema`` package what the schema allows."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from skippy.engine.chat.emulation import build_grammar
from skippy.engine.errors import InvalidRequest
from skippy.engine.sampling.grammar import native_tool_grammar, prepare_schema, schema_converter
from tests.support import LlamaGrammarOracle, VocabOnly

SMOLLM = os.path.expanduser("~/.cache/skippy/models/SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def oracle() -> Iterator[LlamaGrammarOracle]:
    if not os.path.exists(SMOLLM):
        pytest.skip("model not downloaded (make pull)")
    with VocabOnly(SMOLLM) as v:
        yield LlamaGrammarOracle(v)


def _gbnf(schema: dict[str, Any]) -> str:
    """The grammar of ``schema`` alone, made as a tool's parameters are."""
    conv = schema_converter()
    conv.visit(prepare_schema(schema, strict=True, param="x"), "")
    grammar: str = conv.format_grammar()
    return grammar


def _allowed(schema: dict[str, Any], n: int) -> bool:
    draft4 = any(isinstance(schema.get(k), bool) for k in ("exclusiveMinimum", "exclusiveMaximum"))
    validator = jsonschema.Draft4Validator if draft4 else jsonschema.Draft202012Validator
    return validator(schema).is_valid(n)


def _window(schema: dict[str, Any], width: int) -> list[int]:
    """The integers within ``width`` of each bound, of 0 and of the powers of ten near the bounds."""
    centres = {0}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        v = schema.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            centres.add(int(v))
            digits = len(str(abs(int(v))))
            centres |= {s * 10 ** d for s in (1, -1) for d in (digits - 1, digits)}
    return sorted({c + d for c in centres for d in range(-width, width + 1)})


def _check(oracle: LlamaGrammarOracle, schema: dict[str, Any], width: int) -> None:
    gbnf = _gbnf(schema)
    wrong = [n for n in _window(schema, width) if oracle.accepts(gbnf, str(n)) != _allowed(schema, n)]
    assert not wrong, f"{schema}: llama.cpp's grammar disagrees with the schema on {wrong[:10]}\n{gbnf}"


BOUNDS = [
    {"minimum": 1},
    {"minimum": 0},
    {"minimum": -7},
    {"minimum": 250},
    {"maximum": 3},
    {"maximum": 0},
    {"maximum": -42},
    {"maximum": 1000},
    {"exclusiveMinimum": 0},
    {"exclusiveMaximum": 100},
    {"exclusiveMinimum": -1.5},
    {"minimum": 1.5, "maximum": 9.5},
    {"minimum": 1, "maximum": 3},
    {"minimum": -5, "maximum": 17},
    {"minimum": -999, "maximum": -100},
    {"minimum": 123, "maximum": 4567},
    {"minimum": 99, "maximum": 1001},
    {"minimum": 0, "maximum": 10 ** 6},  # once an enum too large to write: left unenforced
    {"minimum": -(10 ** 9), "maximum": 12345},
    {"minimum": 5, "maximum": 5},
    {"exclusiveMinimum": 0, "exclusiveMaximum": 3},
    {"minimum": 0, "exclusiveMaximum": 10, "maximum": 20},  # the tightest bound wins
    {"minimum": 2, "exclusiveMinimum": True},  # draft 4: a boolean makes its bound exclusive
    {"maximum": 2, "exclusiveMaximum": True, "minimum": -2, "exclusiveMinimum": False},
]


@pytest.mark.parametrize("bounds", BOUNDS, ids=json.dumps)
def test_integer_bounds_are_exactly_what_llama_cpp_lets_through(oracle: LlamaGrammarOracle, bounds: dict) -> None:
    """Every integer near each bound is taken by llama.cpp's grammar sampler exactly when it satisfies the
    schema (the converter alone ignored every bound but small two-sided ranges)."""
    _check(oracle, {"type": "integer", **bounds}, width=150)


def test_random_integer_bounds_agree_with_llama_cpp(oracle: LlamaGrammarOracle) -> None:
    rng = random.Random(20240611)
    for _ in range(150):
        schema: dict[str, Any] = {"type": "integer"}
        for low, high in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if rng.random() < 0.75:
                schema[rng.choice((low, high))] = rng.choice((1, -1)) * int(10 ** rng.uniform(0, 7))
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum", schema.get("exclusiveMaximum"))
        if lo is not None and hi is not None and lo + 2 > hi:
            schema = {"type": "integer", "minimum": min(lo, hi), "maximum": max(lo, hi)}
        _check(oracle, schema, width=25)


def test_an_unbounded_side_stops_where_the_plain_integer_does(oracle: LlamaGrammarOracle) -> None:
    gbnf = _gbnf({"type": "integer", "minimum": 1})
    assert oracle.accepts(gbnf, "9" * 16) and not oracle.accepts(gbnf, "9" * 17)
    assert not oracle.accepts(gbnf, "01") and not oracle.accepts(gbnf, "-0")
    gbnf = _gbnf({"type": "integer", "maximum": -10 ** 20})
    assert oracle.accepts(gbnf, str(-10 ** 20)) and oracle.accepts(gbnf, "-" + "9" * 21)


STRICT = {"type": "function", "function": {"name": "get_forecast", "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["city", "days", "offset", "ratio"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
                   "offset": {"type": ["integer", "null"], "exclusiveMaximum": 0},
                   "ratio": {"type": "number", "minimum": 0, "maximum": 1}}}}}


def _call(days: int, offset: int | None, ratio: float = 0.5) -> dict[str, Any]:
    return {"city": "Paris", "days": days, "offset": offset, "ratio": ratio}


def test_a_strict_tool_with_bounds_is_taken_and_its_integers_held(oracle: LlamaGrammarOracle) -> None:
    """openai-agents makes every tool strict: ``Field(ge=1)`` is a one-sided ``minimum``, which OpenAI
    accepts; it was a 400 here. Integer bounds are enforced (a ``type`` list's too), a number's are not."""
    emulated = build_grammar([STRICT], "required")
    assert emulated is not None
    native = native_tool_grammar("hermes_2_pro", [STRICT], [STRICT], parallel=False)
    for gbnf, line in ((emulated.gbnf, 'TOOL_CALL {{"name": "get_forecast", "arguments": {}}}\n'),
                       (native, '<tool_call>\n{{"name": "get_forecast", "arguments": {}}}\n</tool_call>')):
        def takes(args: dict[str, Any], gbnf: str = gbnf, line: str = line) -> bool:
            return oracle.accepts(gbnf, line.format(json.dumps(args, separators=(", ", ": "))))

        assert takes(_call(3, -2)) and takes(_call(1, None)) and takes(_call(10, -1))
        assert not takes(_call(0, -2)) and not takes(_call(-3, -2))  # days >= 1
        assert not takes(_call(3, 0)) and not takes(_call(3, 5))  # offset < 0 (or null)
        assert takes(_call(3, -2, 7.5))  # a number's bounds: not enforced


@pytest.mark.parametrize("bounds", [{"minimum": 5, "maximum": 1}, {"exclusiveMinimum": 3, "exclusiveMaximum": 4},
                                    {"minimum": 10 ** 120}])
def test_integer_bounds_no_value_fits_are_a_400(bounds: dict) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer", **bounds}}, "required": ["x"]}}}
    for fmt in ("hermes_2_pro", "qwen3_coder"):
        with pytest.raises(InvalidRequest, match="integer bounds") as err:
            native_tool_grammar(fmt, [tool], [tool], parallel=False)
        assert err.value.param == "tools[0].function.parameters"


def test_a_strict_multiple_of_is_still_refused() -> None:
    """``multipleOf`` is not enforced: refused for a strict tool (fail closed), left out otherwise."""
    props = {"n": {"type": "integer", "minimum": 0, "multipleOf": 5}}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": props}}}
    assert build_grammar([tool], "required") is not None
    with pytest.raises(InvalidRequest, match="multipleOf"):
        build_grammar([{"type": "function", "function": {**tool["function"], "strict": True}}], "required")
