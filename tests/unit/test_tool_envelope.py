"""Tools beside a JSON schema (sans-IO): llama-server's generic envelope, the grammar that lets the model either call
a tool or answer in the schema, the prompt that says so, and the parser that reads the reply; and no reply
constrained otherwise is read for tool calls (a ``TOOL_CALL`` inside a constrained answer is its text)."""

from __future__ import annotations

import json

import attrs
import pytest

from skippy.engine.chat import emulation
from skippy.engine.chat.prepare import PreparedTemplate, render_chat
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message
from skippy.engine.sampling.constraints import constraint_from_request, json_constraint, tool_envelope
from tests.support import ByteVocab, check_invariant, fixture_template, parse_plan, text_splits

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": CITY}}
NOTE = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
FMT = {"type": "json_schema", "json_schema": {"name": "final_output", "schema": NOTE}}
ASK = [Message("user", "Weather in Paris?")]
MARKED = '{"note": "I will not use TOOL_CALL here, ok"}'  # an answer that holds the emulation's marker
CALLS = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
CALL = '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}'


def _chatml() -> PreparedTemplate:
    return PreparedTemplate.build(CHATML)


def _render(tmpl: PreparedTemplate, **fields):
    return render_chat(tmpl, ChatCompletionRequest(**{"messages": ASK, **fields}))






# -- the grammar ------------------------------------------------------------------------------------------

DEFS = {"type": "object", "properties": {"d": {"$ref": "#/$defs/D"}}, "required": ["d"],
        "$defs": {"D": {"type": "integer"}}}
TOOLS = [("get_weather", CITY, "tools[0].function.parameters"),
         ("ping", None, "tools[1].function.parameters"),  # no parameters: no arguments
         ("deep", {"type": "object", "properties": {"x": {"$ref": "#/$defs/D"}}, "required": ["x"],
                   "$defs": {"D": {"type": "string"}}}, "tools[2].function.parameters")]


def test_the_envelope_takes_calls_or_the_answer_and_nothing_else() -> None:
    """llama.cpp's ``common_chat_params_init_generic`` grammar: ``tool_calls`` (or one ``tool_call`` where calls
    are not parallel) of the allowed tools with their arguments' schemas, or ``response`` in the request's
    schema; each schema's ``$ref`` resolves in its own document (``D`` is an integer in the answer, a string
    in the tool)."""
    vocab = ByteVocab()
    answer = json_constraint(DEFS, "response_format")
    g = tool_envelope(answer, TOOLS, parallel=True)
    assert (g.kind, g.param, g.think_close) == ("json_schema", "response_format", "")
    assert vocab.accepts(g.grammar, '{"response": {"d": 4}}')
    assert vocab.accepts(g.grammar, '{\n  "tool_calls": [\n    {"name": "get_weather", "arguments": {"city": "P"}},'
                                    ' {"name": "ping", "arguments": {}}, {"name": "deep", "arguments": {"x": "s"}}]}')
    refused = {
        '{"response": {"d": "4"}}': len('{"response": {"d": '),  # the answer's schema holds
        '{"response": "text"}': len('{"response": '),
        '{"tool_calls": [{"name": "deep", "arguments": {"x": 4}}]}': len('{"tool_calls": [{"name": "deep", '
                                                                         '"arguments": {"x": '),
        '{"tool_calls": [{"name": "other", "arguments": {}}]}': len('{"tool_calls": [{"name": "'),
        '{"tool_calls": [{"name": "ping", "arguments": {"a": 1}}]}': len('{"tool_calls": [{"name": "ping", '
                                                                         '"arguments": {'),
        '{"tool_calls": []}': len('{"tool_calls": ['),  # at least one call
        '{"tool_call": {"name": "ping", "arguments": {}}}': len('{"tool_call'),  # parallel: the list
        'TOOL_CALL {"name": "ping", "arguments": {}}': 0,
        'Sure! {"response": {"d": 4}}': 0,
    }
    for text, at in refused.items():
        assert vocab.refused_at(g.grammar, text) == at, text
    one = tool_envelope(answer, TOOLS, parallel=False).grammar
    assert vocab.accepts(one, '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}')
    assert vocab.accepts(one, '{"response": {"d": 4}}')
    assert vocab.refused_at(one, CALLS) == len('{"tool_call')
    closed = tool_envelope(json_constraint(NOTE, "response_format"), TOOLS[:1], parallel=True).grammar
    assert vocab.refused_at(closed, '{"response": {"note": "a", "b": 1}}') == len('{"response": {"note": "a"')


def test_the_envelope_follows_an_open_thinking_block_and_names_a_bad_tool_schema() -> None:
    answer = json_constraint(NOTE, "response_format")
    g = tool_envelope(attrs.evolve(answer, think_close="</think>"), TOOLS, parallel=True)
    assert g.think_close == "</think>"
    assert ByteVocab().accepts(g.after(("</think>",)).grammar, f"Let me look.</think>\n{CALLS}")
    for schema, why in (({"type": "string"}, "must describe an object"),
                        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/nothing"}}}, "cannot be enforced"),
                        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)b"}}},
                         "cannot be enforced")):
        with pytest.raises(InvalidRequest, match=why) as ei:
            tool_envelope(answer, [("f", schema, "tools[3].function.parameters")], parallel=True)
        assert ei.value.param == "tools[3].function.parameters"
    # keywords llguidance does not implement are not enforced, never refused (a tool's schema was not before)
    tool_envelope(answer, [("f", {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "t")],
                  parallel=True)


# -- the plan and the prompt ------------------------------------------------------------------------------

@pytest.mark.parametrize("fields", [
    {"response_format": FMT},
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_object", "schema": NOTE}},
    {"json_schema": NOTE},  # llama-server's field: its json_schema too
    {"guided_json": NOTE},
])
@pytest.mark.parametrize("stem", [None, "Qwen-Qwen2.5-7B-Instruct"])  # emulated (ChatML), native (hermes)
def test_auto_tools_beside_a_json_schema_make_the_envelope(stem, fields) -> None:
    """It was the schema alone from the first token: the model could never call a tool (what an openai-agents
    ``Agent(tools=..., output_type=...)`` sends)."""
    tmpl = _chatml() if stem is None else fixture_template(stem)
    plan = _render(tmpl, tools=[WEATHER], **fields).plan
    assert plan.tool_envelope and not plan.emulated and plan.grammar is None
    assert plan.allowed_tools == {"get_weather"}
    vocab = ByteVocab()
    key = "tool_calls" if plan.parallel_tool_calls else "tool_call"
    assert plan.parallel_tool_calls == (stem is not None)  # the template's (llama-server's default)
    assert vocab.accepts(plan.constraint.grammar, CALLS if key == "tool_calls" else CALL)
    assert vocab.accepts(plan.constraint.grammar, '{"response": ' + MARKED + "}")
    assert not vocab.accepts(plan.constraint.grammar, MARKED)
    plain = constraint_from_request(ChatCompletionRequest(messages=ASK, **fields)).constraint
    assert plan.constraint.param == plain.param


def test_the_prompt_teaches_the_envelope() -> None:
    """A template with tools renders them and gets llama-server's sentence (after the system message it has); one
    without gets the envelope's own instruction, the history's calls written as envelopes, and no TOOL_CALL."""
    history = [Message("system", "Be brief."), *ASK,
               Message("assistant", "", tool_calls=[{"id": "call_1", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Paris"}'}}]),
               Message("tool", "sunny", tool_call_id="call_1")]
    native = _render(fixture_template("Qwen-Qwen2.5-7B-Instruct"), messages=history, tools=[WEATHER],
                     response_format=FMT).prompt
    assert "Be brief.\n\nRespond in JSON format, either with `tool_calls` (a request to call tools) or with " \
           "`response` reply to the user's request" in native
    assert '"name": "get_weather"' in native and "<tool_call>" in native  # the template's own tools and history
    emulated = _render(_chatml(), messages=history, tools=[WEATHER], response_format=FMT).prompt
    assert "TOOL_CALL" not in emulated
    assert "<|im_start|>system\nBe brief.\n\nYou can call tools. Respond in JSON format, either with `tool_call`" \
           in emulated
    assert '{"tool_call": {"name": "<tool name>", "arguments": {<arguments>}}}' in emulated
    assert '{"response": <your reply>}' in emulated and "- get_weather: Weather. Arguments: {city: string}" in emulated
    assert '<|im_start|>assistant\n{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}<|im_end|>' \
           in emulated
    assert "Tool result for get_weather (call_1): sunny" in emulated
    parallel = _render(_chatml(), tools=[WEATHER], response_format=FMT, parallel_tool_calls=True).prompt
    assert '{"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]} to call tools' in parallel


def test_add_system_joins_or_inserts_as_llama_cpp() -> None:
    assert emulation.add_system([{"role": "user", "content": "hi"}], "X") == [
        {"role": "system", "content": "X"}, {"role": "user", "content": "hi"}]
    msgs = [{"role": "system", "content": [{"type": "text", "text": "A"}]}]
    assert emulation.add_system(msgs, "X") == [{"role": "system", "content": [
        {"type": "text", "text": "A"}, {"type": "text", "text": "X"}]}]
    assert msgs == [{"role": "system", "content": [{"type": "text", "text": "A"}]}]  # unchanged


def test_an_open_thinking_block_comes_before_the_envelope() -> None:
    plan = _render(fixture_template("Qwen3.5-4B"), tools=[WEATHER], response_format=FMT).plan
    assert plan.thinking_forced_open and plan.tool_envelope and plan.constraint.think_close == "</think>"
    deltas, msg = parse_plan(plan, ["The user wants weather.\n</think>\n\n", CALLS])
    assert msg.reasoning_content == "The user wants weather." and msg.tool_calls[0].name == "get_weather"
    check_invariant(deltas, msg)


@pytest.mark.parametrize("stem", [None, "Qwen-Qwen2.5-7B-Instruct"])
def test_only_calls_the_model_may_choose_make_the_envelope(stem) -> None:
    """``auto``: the envelope; a forced call (``required`` or named) is the reply, as before; ``none``: the schema
    alone, as before."""
    tmpl = _chatml() if stem is None else fixture_template(stem)
    assert _render(tmpl, tools=[WEATHER], response_format=FMT, tool_choice="auto").plan.tool_envelope
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        plan = _render(tmpl, tools=[WEATHER], response_format=FMT, tool_choice=choice).plan
        assert not plan.tool_envelope and plan.constraint is None and plan.grammar is not None
    plan = _render(tmpl, tools=[WEATHER], response_format=FMT, tool_choice="none").plan
    assert not plan.tool_envelope and not plan.allowed_tools
    assert plan.constraint == constraint_from_request(ChatCompletionRequest(messages=ASK, response_format=FMT)) \
        .constraint


# -- the reply --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stem", [None, "Qwen-Qwen2.5-7B-Instruct"])
@pytest.mark.parametrize("text,content,calls", [
    ('{"response": ' + MARKED + "}", MARKED, 0),
    ('{\n  "response": {"note": "a\\nTOOL_CALL {\\"name\\": \\"get_weather\\"}"}\n}',
     '{"note": "a\\nTOOL_CALL {\\"name\\": \\"get_weather\\"}"}', 0),
    ('{"response": [1, 2.50, "x"]}', '[1, 2.50, "x"]', 0),  # the value's text as the model wrote it
    ('{"response": "TOOL_CALL"}', '"TOOL_CALL"', 0),  # a string schema's answer is its JSON text
    (CALLS, "", 1),
    (CALL, "", 1),
    ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
     '{"name": "get_weather", "arguments": {"city": "Rome"}}]}', "", 2),
])
def test_the_envelope_reads_back_as_calls_or_the_answer(stem, text, content, calls) -> None:
    """The answer's JSON text is the content, whole (no TOOL_CALL scanning: it was cut at the marker,
    ``{"note": "I will not use \\n}``), streamed as it is parsed whole, split anywhere."""
    tmpl = _chatml() if stem is None else fixture_template(stem)
    plan = _render(tmpl, tools=[WEATHER], response_format=FMT, parallel_tool_calls=True).plan
    for pieces in text_splits(text):
        deltas, msg = parse_plan(plan, pieces)
        check_invariant(deltas, msg)
        assert msg.content == content and len(msg.tool_calls) == calls
        assert all(c.name == "get_weather" and json.loads(c.arguments)["city"] for c in msg.tool_calls)


def test_a_cut_envelope_keeps_the_answer_so_far_and_drops_a_cut_call() -> None:
    plan = _render(_chatml(), tools=[WEATHER], response_format=FMT).plan
    for pieces in text_splits('{"response": {"note": "I will not use TOOL_CALL'):
        assert parse_plan(plan, pieces, truncated=True)[1].content == '{"note": "I will not use TOOL_CALL'
    for pieces in text_splits('{"tool_call": {"name": "get_weather", "arguments": {"ci'):
        msg = parse_plan(plan, pieces, truncated=True)[1]
        assert msg.content == "" and msg.tool_calls == ()
    # a tiny model lists calls until its token limit (Gemma 3 270M over HTTP): the whole ones are its calls
    plan = _render(_chatml(), tools=[WEATHER], response_format=FMT, parallel_tool_calls=True).plan
    for pieces in text_splits('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},\n'
                          '  {"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get_weather", "argu'):
        deltas, msg = parse_plan(plan, pieces, truncated=True)
        check_invariant(deltas, msg)
        assert msg.content == "" and [json.loads(c.arguments)["city"] for c in msg.tool_calls] == ["Paris", "Rome"]


def test_a_constrained_reply_is_never_read_for_calls() -> None:
    """Emulated tools: the TOOL_CALL parser ran over text a constraint shaped, where no call could be written (a
    regex or a choice beside auto tools holds from the first token), and cut it at the marker; nor is the
    schema's answer read for calls where none may be made (``tool_choice: "none"``)."""
    line = 'TOOL_CALL {"name": "get_weather", "arguments": {}}'
    for fields, text in (({"guided_regex": "[A-Za-z_ {}:,\"]+"}, line),
                         ({"guided_choice": [line, "no"]}, line),
                         ({"tool_choice": "none", "response_format": FMT}, MARKED)):
        plan = _render(_chatml(), tools=[WEATHER], **fields).plan
        assert not plan.emulated and not plan.allowed_tools and not plan.tool_envelope
        for pieces in text_splits(text):
            deltas, msg = parse_plan(plan, pieces)
            assert msg.content == text and msg.tool_calls == (), fields
            check_invariant(deltas, msg)
