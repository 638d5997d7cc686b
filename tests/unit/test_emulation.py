"""Tool-call emulation: instruction, history rewrite, TOOL_CALL parser, grammar, early stop."""

from __future__ import annotations

import copy
import json
import random
import re

import pytest

from skippy.engine.chat.emulation import (
    EarlyStop,
    build_grammar,
    build_instruction,
    rewrite_history,
    tool_signature,
)
from skippy.engine.chat.formats.base import new_call_id
from skippy.engine.chat.formats.emulated import EmulatedToolParser
from skippy.engine.errors import InvalidRequest
from tests.support import compiles_in_llama_cpp, gbnf_matches

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather\nfor a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"enum": ["c", "f"]}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"]}}}
NOW = {"type": "function", "function": {"name": "now", "description": "Current time."}}
SEARCH = {"name": "search", "description": "Search the web.",
          "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
TOOLS = [WEATHER, NOW, SEARCH]
ALLOWED = {"get_weather", "now", "search"}


# -- instruction --------------------------------------------------------------

def test_tool_signature():
    assert tool_signature(WEATHER) == '{city: string, days?: integer, unit?: "c" | "f", tags?: string[]}'
    assert tool_signature(NOW) == "{}"
    assert tool_signature(SEARCH) == "{q: string}"


def test_instruction_lists_tools():
    text = build_instruction(TOOLS, "auto")
    assert 'TOOL_CALL {"name": "<tool name>", "arguments":' in text
    assert ('- get_weather: Get the weather for a city. Arguments: '
            '{city: string, days?: integer, unit?: "c" | "f", tags?: string[]}') in text
    assert "- now: Current time. Arguments: {}" in text
    assert "- search: Search the web. Arguments: {q: string}" in text
    assert "several" in text and "answer normally" in text
    assert "at most one" in build_instruction(TOOLS, "auto", parallel_tool_calls=False)
    assert "must call at least one" in build_instruction(TOOLS, "required")


def test_instruction_named_choice_lists_only_that_tool():
    text = build_instruction(TOOLS, {"type": "function", "function": {"name": "search"}})
    assert "- search:" in text and "get_weather" not in text and "must call the tool search" in text
    assert build_instruction(TOOLS, "none") == "" and build_instruction([], "auto") == ""
    with pytest.raises(InvalidRequest):
        build_instruction(TOOLS, {"type": "function", "function": {"name": "nope"}})


# -- history rewrite ----------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
    {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
    {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
    {"role": "tool", "tool_call_id": "call_b", "name": "get_weather", "content": "25C"},
    {"role": "system", "content": "Answer in one line."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_c", "type": "function", "function": {"name": "now", "arguments": ""}}]},
    {"role": "tool", "tool_call_id": "call_c", "content": "noon"},
]


def test_rewrite_history_full_conversation():
    before = copy.deepcopy(CONVERSATION)
    out = rewrite_history(CONVERSATION, TOOLS, "auto", requires_alternation=False)
    assert CONVERSATION == before  # input untouched
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "user", "system", "assistant", "user"]
    assert out[0]["content"].startswith("You are terse.\n\nYou can call tools.")
    assert out[1]["content"] == "Weather in Paris and Rome?"
    assert out[2]["content"] == ('Checking.\nTOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                                 'TOOL_CALL {"name": "get_weather", "arguments": {"city": "Rome"}}')
    assert out[3]["content"] == "Tool result for get_weather (call_a): 18C"
    assert out[4]["content"] == "Tool result for get_weather (call_b): 25C"
    assert out[5] == {"role": "system", "content": "Answer in one line."}
    assert out[6]["content"] == 'TOOL_CALL {"name": "now", "arguments": {}}'
    assert out[7]["content"] == "Tool result for now (call_c): noon"
    assert all("tool_calls" not in m and "tool_call_id" not in m for m in out)


def test_rewrite_history_alternation_and_inserted_system():
    out = rewrite_history(CONVERSATION[1:], TOOLS, "auto", requires_alternation=True)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert out[0]["content"].startswith("You can call tools.")
    assert out[3]["content"] == ("Tool result for get_weather (call_a): 18C\n\n"
                                 "Tool result for get_weather (call_b): 25C\n\nSystem: Answer in one line.")


def test_rewrite_history_errors():
    msgs = [{"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(InvalidRequest, match=r"messages\[1\]") as info:
        rewrite_history(msgs, TOOLS, "auto", requires_alternation=False)
    assert info.value.message == ("messages[1]: content part of type 'image_url' is not supported with emulated tool "
                                  "calls (this model's template handles text only)")
    assert info.value.param == "messages[1].content"
    bad = [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "now", "arguments": "{oops"}}]}]
    with pytest.raises(InvalidRequest, match=r"messages\[0\]\.tool_calls\[0\]"):
        rewrite_history(bad, TOOLS, "auto", requires_alternation=False)


# -- parser ---------------------------------------------------------------------

def _ids():
    n = iter(range(1000))
    return lambda: f"call_{next(n):024x}"


def parse(text, chunks=None, allowed=ALLOWED, parallel=True, id_factory=None, withhold=False):
    """Parse ``text`` fed in ``chunks`` (default: whole) and check the StreamParser invariant."""
    p = EmulatedToolParser(allowed, parallel, id_factory=id_factory or _ids(), withhold=withhold)
    deltas = []
    for c in chunks if chunks is not None else [text]:
        deltas += p.feed(c)
    last, msg = p.finish()
    deltas += last
    assert "".join(d.content for d in deltas) == msg.content
    assert "".join(d.reasoning_content for d in deltas) == msg.reasoning_content
    calls: dict[int, list] = {}
    for d in deltas:
        for tc in d.tool_calls:
            if tc.id is not None:
                assert tc.index not in calls and tc.index == len(calls)
                calls[tc.index] = [tc.id, tc.name, tc.arguments]
            else:
                calls[tc.index][2] += tc.arguments
    assert [tuple(calls[i]) for i in sorted(calls)] == [(c.id, c.name, c.arguments) for c in msg.tool_calls]
    return msg, deltas


def splits(text):
    """Whole, one char at a time, and a few random splits."""
    yield [text]
    yield list(text)
    rng = random.Random(len(text))
    for _ in range(5):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8))))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


CASES = {
    "mid_line": ('Let me check. TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}',
                 "Let me check.", [("get_weather", '{"city": "Paris"}')]),
    "colon": ('TOOL_CALL: {"name": "now", "arguments": {}}', "", [("now", "{}")]),
    "nested": ('TOOL_CALL {"name": "search", "arguments": {"q": "a {b} \\"}\\" c", '
               '"opts": {"deep": [1, {"x": null}]}}}\n'
               "done", "done", [("search", '{"q": "a {b} \\"}\\" c", "opts": {"deep": [1, {"x": null}]}}')]),
    "two_calls": ('TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                  'TOOL_CALL {"arguments": {"city": "Rome", "days": 2}, "name": "get_weather"}',
                  "", [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Rome", "days": 2}')]),
    "no_arguments_key": ('TOOL_CALL {"name": "now"}', "", [("now", "{}")]),
    "disallowed": ('Hi TOOL_CALL {"name": "rm_rf", "arguments": {"p": "/"}} bye',
                   'Hi TOOL_CALL {"name": "rm_rf", "arguments": {"p": "/"}} bye', []),
    "malformed": ("TOOL_CALL {name: now}", "TOOL_CALL {name: now}", []),
    "not_a_call": ("Use TOOL_CALLS wisely, TOOL_", "Use TOOL_CALLS wisely, TOOL_", []),
    "think_fake_call": ('<think>maybe TOOL_CALL {"name": "now", "arguments": {}}</think>\n\nIt is noon.',
                        "It is noon.", []),
    "think_unterminated": ("<think>hmm TOOL_CALL {", "", []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_parser_cases_any_split(name):
    text, content, calls = CASES[name]
    whole, _ = parse(text)
    assert whole.content == content
    assert [(c.name, c.arguments) for c in whole.tool_calls] == calls
    for args in (json.loads(c.arguments) for c in whole.tool_calls):
        assert isinstance(args, dict)
    for chunks in splits(text):
        msg, _ = parse(text, chunks)
        assert msg == whole


def test_think_reasoning():
    assert parse(CASES["think_fake_call"][0])[0].reasoning_content == 'maybe TOOL_CALL {"name": "now", "arguments": {}}'
    assert parse("<think>hmm TOOL_CALL {")[0].reasoning_content == "hmm TOOL_CALL {"


def test_parallel_false_keeps_first_call():
    msg, _ = parse(CASES["two_calls"][0], parallel=False)
    assert [c.arguments for c in msg.tool_calls] == ['{"city": "Paris"}']
    assert msg.content == ""


def test_ids_minted_once_and_shared():
    msg, deltas = parse(CASES["two_calls"][0], list(CASES["two_calls"][0]), id_factory=None)
    streamed = [tc.id for d in deltas for tc in d.tool_calls if tc.id]
    assert streamed == [c.id for c in msg.tool_calls]
    msg, deltas = parse(CASES["two_calls"][0], id_factory=new_call_id)
    assert all(re.fullmatch(r"call_[0-9a-f]{24,}", c.id) for c in msg.tool_calls)
    assert len({c.id for c in msg.tool_calls}) == 2


def test_marker_never_streamed_as_content():
    text = 'Sure thing.\nTOOL_CALL {"name": "now", "arguments": {}}\n'
    p = EmulatedToolParser(ALLOWED, True)
    streamed = ""
    for ch in text:
        for d in p.feed(ch):
            streamed += d.content
            assert "T" not in streamed[len("Sure thing."):]
    assert streamed == "Sure thing."
    held = EmulatedToolParser(ALLOWED, True)
    assert "".join(d.content for d in held.feed("Ok. TOOL_CA")) == "Ok."


def test_arguments_stream_before_object_closes():
    p = EmulatedToolParser(ALLOWED, True, id_factory=_ids())
    deltas = []
    for ch in 'TOOL_CALL {"name": "get_weather", "arguments": {"city": "Par':
        deltas += p.feed(ch)
    calls = [tc for d in deltas for tc in d.tool_calls]
    assert calls[0].name == "get_weather" and calls[0].id == f"call_{0:024x}"
    assert "".join(tc.arguments for tc in calls) == '{"city": "Par'
    deltas = p.feed('is", "days": 3}}')
    assert "".join(tc.arguments for d in deltas for tc in d.tool_calls) == 'is", "days": 3}'


@pytest.mark.parametrize("text,args,content", [
    # truncated (max_tokens): closed at the last safe cut, still valid JSON
    ('TOOL_CALL {"name": "search", "arguments": {"q": "cats an', '{"q": "cats an"}', ""),
    ('TOOL_CALL {"name": "search", "arguments": {"q": "x", "n": 1', '{"q": "x", "n": 1}', ""),
    ('TOOL_CALL {"name": "search", "arguments": {"q": "x", "lim', '{"q": "x"}', ""),
    # malformed after announcement: kept, rest of the line dropped
    ('TOOL_CALL {"name": "search", "arguments": {"q": "x", "n": tru x}}\nafter', '{"q": "x"}', "after"),
])
def test_announced_call_that_breaks(text, args, content):
    for chunks in splits(text):
        msg, _ = parse(text, chunks)
        assert [(c.name, c.arguments) for c in msg.tool_calls] == [("search", args)]
        assert msg.content == content
        json.loads(args)


# -- withhold (what the server uses) ---------------------------------------------

@pytest.mark.parametrize("text,content", [
    # cut off by max_tokens: dropped, its text withheld
    ('Sure. TOOL_CALL {"name": "search", "arguments": {"q": "cats an', "Sure."),
    ('TOOL_CALL {"name": "search", "arguments": {"q": "x", "n": 1', ""),
    ('TOOL_CALL {"name": "sea', ""),
    ("TOOL_CALL", ""),
    ("Sure. TOOL_CA", "Sure."),
    # malformed: the rest of its line is dropped
    ('TOOL_CALL {"name": "search", "arguments": {"q": "x", "n": tru x}}\nafter', "after"),
    # a tool not allowed: dropped too
    ('TOOL_CALL {"name": "rm_rf", "arguments": {}}\nok', "ok"),
])
def test_withheld_incomplete_calls_never_reach_content_or_tool_calls(text, content):
    for chunks in splits(text):
        msg, deltas = parse(text, chunks, withhold=True)
        assert msg.tool_calls == () and not any(d.tool_calls for d in deltas)
        assert msg.content == content


def test_withheld_call_is_announced_whole_when_it_closes():
    text = 'Ok. TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}\nTOOL_CALL {"name": "now"}'
    for chunks in splits(text):
        p = EmulatedToolParser(ALLOWED, True, id_factory=_ids(), withhold=True)
        fragments = []
        for c in chunks:
            fragments += [tc for d in p.feed(c) for tc in d.tool_calls]
        last, msg = p.finish()
        fragments += [tc for d in last for tc in d.tool_calls]
        # one delta per call, carrying its id, name and whole arguments
        assert [(f.name, f.arguments) for f in fragments] == [("get_weather", '{"city": "Paris"}'), ("now", "{}")]
        assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", '{"city": "Paris"}'),
                                                                   ("now", "{}")]
        assert msg.content == "Ok."


def test_withheld_with_no_allowed_tools_strips_every_call_line():
    text = 'It is sunny.\nTOOL_CALL {"name": "get_weather", "arguments": {"city": "London"}}\nBye.'
    for chunks in splits(text):
        msg, _ = parse(text, chunks, allowed=set(), parallel=False, withhold=True)
        assert msg.tool_calls == () and "TOOL_CALL" not in msg.content and msg.content.startswith("It is sunny.")


# -- early stop -----------------------------------------------------------------

def _stop_at(es, text):
    for i, ch in enumerate(text):
        if es.feed(ch):
            return i, text[:es.keep]
    return None, None


def test_early_stop_single_call():
    text = 'Ok.\nTOOL_CALL {"name": "now", "arguments": {}}\nTOOL_CALL {"name": "now"}'
    i, kept = _stop_at(EarlyStop(ALLOWED, parallel_tool_calls=False), text)
    assert kept == 'Ok.\nTOOL_CALL {"name": "now", "arguments": {}}' and i == len(kept) - 1


def test_early_stop_parallel():
    text = ('TOOL_CALL {"name": "now", "arguments": {}}\n\nTOOL_CALL {"name": "search", "arguments": {"q": "x"}}\n'
            "The answer")
    i, kept = _stop_at(EarlyStop(ALLOWED), text)
    assert kept == text[:-len("The answer")] and text[i] == "h"
    assert _stop_at(EarlyStop(ALLOWED), "TOOL_CALL is a word\nmore text") == (None, None)
    think = '<think>x</think>TOOL_CALL {"name": "now"} tail'
    assert _stop_at(EarlyStop(ALLOWED, False), think)[1] == '<think>x</think>TOOL_CALL {"name": "now"}'


# -- grammar ----------------------------------------------------------------------

def test_grammar_auto_is_lazy_and_matches_lines():
    pytest.importorskip("llama_cpp.llama_grammar")
    g = build_grammar(TOOLS, "auto", parallel_tool_calls=True)
    assert g.lazy and g.trigger_words == ("TOOL_CALL",)
    good = ['TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
            'TOOL_CALL: {"name": "get_weather", "arguments": {"city": "Rome", "unit": "c", "tags": ["a"]}}\n',
            'TOOL_CALL {"name": "now", "arguments": {}}\n'
            'TOOL_CALL {"name": "search", "arguments": {"q": "x"}}']
    bad = ['TOOL_CALL {"name": "get_weather", "arguments": {"days": 3}}',         # city required
           'TOOL_CALL {"name": "get_weather", "arguments": {"city": 5}}',         # wrong type
           'TOOL_CALL {"name": "rm", "arguments": {}}',                           # unknown tool
           'TOOL_CALL {"name": "search", "arguments": {"q": "a\nb"}}',            # raw newline
           'TOOL_CALL {"name": "now", "arguments": {}} trailing',
           'TOOL_CALL {"name": "now", "arguments": {"anything": [1, true]}}']  # no parameters: an empty list
    for line in good:
        assert gbnf_matches(g.gbnf, line), line
        msg, _ = parse(line)
        assert len(msg.tool_calls) == line.count("TOOL_CALL")
    for line in bad:
        assert not gbnf_matches(g.gbnf, line), line


def test_grammar_forced_and_single():
    pytest.importorskip("llama_cpp.llama_grammar")
    g = build_grammar(TOOLS, {"type": "function", "function": {"name": "search"}}, parallel_tool_calls=False)
    assert not g.lazy and g.trigger_words == ()
    assert gbnf_matches(g.gbnf, 'TOOL_CALL {"name": "search", "arguments": {"q": "x"}}\n')
    assert not gbnf_matches(g.gbnf, 'TOOL_CALL {"name": "now", "arguments": {}}')
    assert not gbnf_matches(g.gbnf, 'TOOL_CALL {"name": "search", "arguments": {"q": "x"}}\n'
                                    'TOOL_CALL {"name": "search", "arguments": {"q": "y"}}')
    assert build_grammar(TOOLS, "required").lazy is False
    assert build_grammar(TOOLS, "none") is None and build_grammar([], "auto") is None


def test_grammar_bad_schema_is_400():
    pytest.importorskip("llama_cpp.llama_grammar")
    bad_ref = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}}
    with pytest.raises(InvalidRequest, match=r"tools\[1\]"):
        build_grammar([NOW, bad_ref], "auto")
    not_object = {"type": "function", "function": {"name": "g", "parameters": {"type": "string"}}}
    with pytest.raises(InvalidRequest):
        build_grammar([not_object], "required")


def test_grammar_compiles_in_llama_cpp():
    pytest.importorskip("llama_cpp.llama_grammar")
    for choice, parallel in (("auto", True), ("required", False), ({"function": {"name": "get_weather"}}, True)):
        assert compiles_in_llama_cpp(build_grammar(TOOLS, choice, parallel).gbnf)
    lazy = build_grammar(TOOLS, "auto")
    assert lazy.trigger_patterns == (r"[\s\S]*?(TOOL_CALL)[\s\S]*",)
    assert compiles_in_llama_cpp(lazy.gbnf, lazy.trigger_patterns)
    assert not compiles_in_llama_cpp('root ::= "unterminated')


#: a tool's parameters as Claude Code's ``Workflow`` and MCP servers write them: properties that constrain nothing
ANY_ARGS = {"type": "function", "function": {"name": "run", "parameters": {
    "type": "object", "required": ["script", "args"], "properties": {
        "script": {"type": "string"},
        "args": {"description": "Optional input value exposed to the script as the global `args`"},
        "flag": True, "meta": {"title": "Meta", "default": {"k": 1}, "examples": [1]}, "obj": {},
        "odd": {"not": {"type": "string"}}, "cond": {"if": {"type": "string"}, "then": {"minLength": 2}}}}}}


def test_a_property_that_constrains_nothing_takes_any_json_value():
    """JSON Schema's "any value" (``true``, or only annotations) is accepted, as Anthropic and OpenAI accept it,
    and the grammar lets the model write any JSON value there (llama.cpp's converter refused it, and read ``{}``
    as any object); ``not`` and ``if``/``then`` are left unenforced, or refused for a ``strict`` tool."""
    pytest.importorskip("llama_cpp.llama_grammar")
    g = build_grammar([ANY_ARGS], "required")
    assert compiles_in_llama_cpp(g.gbnf)
    for value in ('"text"', "3", "[1, {\"a\": null}]", "{\"k\": [true]}", "null"):
        for key in ("args", "flag", "meta", "obj", "odd", "cond"):
            extra = "" if key == "args" else f', "{key}": {value}'
            line = f'TOOL_CALL {{"name": "run", "arguments": {{"script": "s", "args": {value}{extra}}}}}\n'
            assert gbnf_matches(g.gbnf, line), line
    assert not gbnf_matches(g.gbnf, 'TOOL_CALL {"name": "run", "arguments": {"script": "s"}}\n')  # args required
    strict = {"type": "function", "function": {**ANY_ARGS["function"], "strict": True}}
    with pytest.raises(InvalidRequest, match="'not'") as err:
        build_grammar([strict], "required")
    assert err.value.param == "tools[0].function.parameters" and "Error(" not in err.value.message


def test_gbnf_depth_counts_groups_outside_literals_classes_and_comments():
    from skippy.engine.sampling.grammar import gbnf_depth

    assert gbnf_depth('root ::= "a"') == 0
    assert gbnf_depth('root ::= ("(" [(] (a (b))) # ((((\nx ::= "\\"(" ( [\\]( ] )') == 3
    assert gbnf_depth("root ::= " + "(" * 1500 + '"a"' + ")?" * 1500) == 1500


def test_a_huge_length_bound_is_left_unenforced_not_written_out():
    """maxLength 524288 (Claude Code's Workflow script) was half a million nested groups, which crashed llama.cpp's
    parser: bounds above MAX_REPETITION_BOUND are left unenforced; smaller ones still hold."""
    pytest.importorskip("llama_cpp.llama_grammar")
    from skippy.engine.sampling.grammar import MAX_GBNF_DEPTH, gbnf_depth

    tool = {"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "required": ["script", "tag"], "properties": {
            "script": {"type": "string", "maxLength": 524288},
            "tag": {"type": "string", "maxLength": 3},
            "items": {"type": "array", "items": {"type": "integer"}, "minItems": 100000}}}}}
    g = build_grammar([tool], "required")
    assert len(g.gbnf) < 20000 and gbnf_depth(g.gbnf) < MAX_GBNF_DEPTH and compiles_in_llama_cpp(g.gbnf)
    long_script = "x" * 300  # past the unenforced bound's cap, within the model's reach
    call = '{"name": "run", "arguments": {"script": "' + long_script + '", "tag": "ab"}}'
    assert gbnf_matches(g.gbnf, f"TOOL_CALL {call}\n")
    assert not gbnf_matches(g.gbnf, 'TOOL_CALL {"name": "run", "arguments": {"script": "x", "tag": "abcd"}}\n')


def test_emulated_tools_on_a_prompt_that_opens_thinking_read_the_reasoning_first():
    """DeepSeek R1's generation prompt opens ``<think>\\n`` and its template has no tools (emulated): the text up
    to ``</think>`` is reasoning (it was content, the tag with it), and a forced call's grammar lets the model
    think and close the block first (it forced TOOL_CALL inside the block, which then was reasoning). With
    ``reasoning_format: none`` nothing changes."""
    from skippy.engine.chat.prepare import make_output_parser, render_chat
    from skippy.engine.protocols.openai.types import ChatCompletionRequest
    from tests.support import check_invariant, fixture_template

    tmpl = fixture_template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    call = 'TOOL_CALL {"name": "f", "arguments": {}}'

    def rendered(**fields):
        return render_chat(tmpl, ChatCompletionRequest(messages=[{"role": "user", "content": "Hi"}], tools=tools,
                                                       **fields))

    def parse(plan, text):
        parser = make_output_parser(plan)
        deltas = [d for c in text for d in parser.feed(c)]
        tail, msg = parser.finish()
        check_invariant(deltas + tail, msg)
        return msg

    auto = rendered()
    assert auto.plan.emulated and auto.plan.thinking_forced_open
    msg = parse(auto.plan, "Let me think.\n</think>\n\nHello.")
    assert (msg.reasoning_content, msg.content, msg.tool_calls) == ("Let me think.", "Hello.", ())
    msg = parse(auto.plan, f"Hmm.</think>\n{call}\n")
    assert msg.reasoning_content == "Hmm." and [c.name for c in msg.tool_calls] == ["f"] and not msg.content
    forced = rendered(tool_choice="required").plan
    assert compiles_in_llama_cpp(forced.grammar)
    assert gbnf_matches(forced.grammar, f"Hmm, a call.\n</think>\n\n{call}")
    assert gbnf_matches(forced.grammar, f"</think>{call}\n") and not gbnf_matches(forced.grammar, call)
    assert [c.name for c in parse(forced, f"Hmm.\n</think>\n\n{call}").tool_calls] == ["f"]
    from skippy.engine.chat.emulation import EarlyStop
    from skippy.engine.chat.prepare import emulated_thinking_open

    stop = EarlyStop({"f"}, parallel_tool_calls=False, thinking_forced_open=emulated_thinking_open(auto.plan))
    assert not stop.feed(f"A call: {call}\n")  # written in the reasoning: not a call, no stop
    assert stop.feed(f"</think>\n{call}\n")
    raw = rendered(tool_choice="required", reasoning_format="none").plan
    assert gbnf_matches(raw.grammar, call) and [c.name for c in parse(raw, call).tool_calls] == ["f"]
