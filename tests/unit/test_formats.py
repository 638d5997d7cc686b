"""Chat-format parsers: known outputs per format, split-invariance, specific cases."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from skippy.engine.chat.formats import FORMATS, REASONING_FORMATS, make_parser
from skippy.engine.chat.formats.base import Delta, ParsedMessage, ToolCall
from tests.support import check_invariant, text_splits

ALLOWED = {"get_weather", "f", "run", "now"}


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def run(fmt: str, pieces, **kw) -> tuple[list[Delta], ParsedMessage]:
    kw.setdefault("allowed_tools", ALLOWED)
    parser = make_parser(fmt, id_factory=ids(), **kw)
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += parser.feed(piece)
    tail, msg = parser.finish()
    return deltas + tail, msg




WEATHER = ToolCall("call_0", "get_weather", '{"city": "Paris"}')
#: parameter schemas of the test tools: XML formats type their text values by them
SCHEMAS = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}},
           "run": {"type": "object", "properties": {"cmd": {"type": "string"}, "n": {"type": "integer"},
                                                    "opts": {"type": "object"}}}}
F_EMPTY = ToolCall("call_1", "f", "{}")

# (format, kwargs, output text, expected message)
KNOWN = [
    ("content_only", {}, "Hello <tool_call> world\n", ParsedMessage(content="Hello <tool_call> world\n")),
    ("hermes_2_pro", {}, 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
     '</tool_call>\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
     ParsedMessage(content="Let me check.", tool_calls=(WEATHER, F_EMPTY))),
    ("hermes_2_pro", {}, '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", '
     '"arguments": {"city": "Paris"}}\n</tool_call>',
     ParsedMessage(reasoning_content="The user wants weather.", tool_calls=(WEATHER,))),
    ("llama3_json", {}, '{"name": "get_weather", "parameters": {"city": "Paris"}}',
     ParsedMessage(tool_calls=(WEATHER,))),
    ("llama3_json", {}, '<|python_tag|>{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}',
     ParsedMessage(tool_calls=(WEATHER,))),
    ("llama3_json", {}, 'Paris is {"warm": true}.', ParsedMessage(content='Paris is {"warm": true}.')),
    ("mistral_nemo", {}, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}, '
     '{"name": "f", "arguments": {}, "id": "abc123deg"}]', ParsedMessage(tool_calls=(WEATHER, F_EMPTY))),
    ("mistral_small_3_2", {}, 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]f[ARGS]{}',
     ParsedMessage(content="Sure.", tool_calls=(WEATHER, F_EMPTY))),
    ("deepseek_r1", {"thinking_forced_open": True},
     'Need weather.\n</think>\n\nChecking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function'
     '<｜tool▁sep｜>get_weather\n'
     '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n'
     '```json\n{}\n```'
     '<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("deepseek_v3_1", {}, '<think>hm</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
     '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     ParsedMessage(reasoning_content="hm", tool_calls=(WEATHER,))),
    ("functionary_v3_2", {}, 'all\nLet me check.>>>get_weather\n{"city": "Paris"}>>>f\n{}',
     ParsedMessage(content="Let me check.", tool_calls=(WEATHER, F_EMPTY))),
    ("functionary_v3_2", {}, "all\nJust text.", ParsedMessage(content="Just text.")),
    ("command_r7b", {}, '<|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", '
     '"tool_name": "get_weather", "parameters": {"city": "Paris"}},\n    {"tool_call_id": "1", "tool_name": "f", '
     '"parameters": {}}\n]<|END_ACTION|>', ParsedMessage(reasoning_content="plan", tool_calls=(WEATHER, F_EMPTY))),
    ("command_r7b", {}, "<|START_RESPONSE|>Hi there<|END_RESPONSE|>", ParsedMessage(content="Hi there")),
    ("generic", {}, '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "0"}]}',
     ParsedMessage(tool_calls=(WEATHER,))),
    ("generic", {}, '{"response": "It is sunny."}', ParsedMessage(content="It is sunny.")),
    ("generic", {}, "Plain answer.", ParsedMessage(content="Plain answer.")),
    # ---- current families (issue 18): each family's real output syntax
    ("gpt_oss", {}, "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
     ParsedMessage(reasoning_content="Need the weather.", tool_calls=(WEATHER,))),
    ("gpt_oss", {}, "<|channel|>analysis<|message|>Two calls.<|end|><|start|>assistant to=functions.get_weather"
     '<|channel|>commentary json<|message|>{"city": "Paris"}<|call|><|start|>assistant<|channel|>commentary '
     "to=functions.f<|message|>{}<|call|>",
     ParsedMessage(reasoning_content="Two calls.", tool_calls=(WEATHER, F_EMPTY))),
    ("gpt_oss", {}, "<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>commentary<|message|>"
     "Preamble. <|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
     ParsedMessage(content="Preamble. Hello!", reasoning_content="Greet.")),
    ("gpt_oss", {}, "Just text, no channels.", ParsedMessage(content="Just text, no channels.")),
    ("qwen3_coder", {"tool_schemas": SCHEMAS}, "Let me check.\n\n<tool_call>\n<function=get_weather>\n"
     "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n"
     "</function>\n</tool_call>", ParsedMessage(content="Let me check.", tool_calls=(WEATHER, F_EMPTY))),
    ("qwen3_coder", {"tool_schemas": SCHEMAS, "thinking_forced_open": True},  # Nemotron 3 Nano: <think> forced open
     "Need weather.\n</think>\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -l\n\necho \"a<b\"\n"
     "</parameter>\n<parameter=n>\n3\n</parameter>\n<parameter=opts>\n{\"x\": [1, true]}\n</parameter>\n"
     "</function>\n</tool_call>",
     ParsedMessage(reasoning_content="Need weather.", tool_calls=(
         ToolCall("call_0", "run", '{"cmd": "ls -l\\n\\necho \\"a<b\\"", "n": 3, "opts": {"x": [1, true]}}'),))),
    ("seed_oss", {"tool_schemas": SCHEMAS}, "<seed:think>Need weather.</seed:think>Checking.\n\n<seed:tool_call>\n"
     "<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>",
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER,))),
    ("glm_4_5", {"tool_schemas": SCHEMAS}, "<think>Need weather.</think>\nChecking.\n<tool_call>get_weather\n"
     "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call><tool_call>f\n</tool_call>",
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("glm_4_5", {"tool_schemas": SCHEMAS, "thinking_forced_open": True},  # GLM 4.7: no newlines, <think> forced open
     "Need weather.</think><tool_call>run<arg_key>n</arg_key><arg_value>3</arg_value><arg_key>cmd</arg_key>"
     "<arg_value>42</arg_value></tool_call>",
     ParsedMessage(reasoning_content="Need weather.",
                   tool_calls=(ToolCall("call_0", "run", '{"n": 3, "cmd": "42"}'),))),
    ("ling_3", {"tool_schemas": SCHEMAS, "thinking_forced_open": True},
     "Need weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
     "</tool_call>", ParsedMessage(reasoning_content="Need weather.", tool_calls=(WEATHER,))),
    ("kimi_k2", {}, "<think>Need weather.</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>"
     'functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>'
     "functions.f:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(
         ToolCall("functions.get_weather:0", "get_weather", '{"city": "Paris"}'),
         ToolCall("functions.f:1", "f", "{}")))),
    ("granite", {}, '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", '
     '"arguments": {}}]', ParsedMessage(tool_calls=(WEATHER, F_EMPTY))),
    ("granite", {}, "<think>Greet.</think><response>Hello!</response>",
     ParsedMessage(content="Hello!", reasoning_content="Greet.")),
    ("nemotron_v2", {"thinking_forced_open": True}, 'Need weather.\n</think>\n\n<TOOLCALL>[{"name": "get_weather", '
     '"arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]</TOOLCALL>',
     ParsedMessage(reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("apertus", {}, '<|inner_prefix|>Need weather.<|inner_suffix|>Checking.<|tools_prefix|>[{"get_weather": '
     '{"city": "Paris"}}, {"f": {}}]<|tools_suffix|>',
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("lfm2", {}, "<think>Need weather.</think>Checking.<|tool_call_start|>[get_weather(city='Paris'), f()]"
     "<|tool_call_end|>",
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("lfm2", {}, '<|tool_call_start|>[run(n=3, flags=[true, null], cmd="a\\"b")]<|tool_call_end|>Done.',
     ParsedMessage(content="Done.", tool_calls=(ToolCall("call_0", "run", '{"n": 3, "flags": [true, null], '
                                                           '"cmd": "a\\"b"}'),))),
    ("mistral_small_3_2", {}, '[THINK]Need weather.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER,))),
    # issue 41: MiniMax M2, DeepSeek V3.2 / V4 (DSML), Kimi K3, MiniCPM5
    ("minimax_m2", {"tool_schemas": SCHEMAS, "thinking_forced_open": True},
     'Need weather.\n</think>\n\nChecking.\n<minimax:tool_call>\n<invoke name="get_weather">\n'
     '<parameter name="city">Paris</parameter>\n</invoke>\n<invoke name="f">\n</invoke>\n</minimax:tool_call>',
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("deepseek_v3_2", {}, '<think>Need weather.</think>Checking.\n\n<｜DSML｜function_calls>\n'
     '<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
     '</｜DSML｜invoke>\n<｜DSML｜invoke name="f">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("deepseek_v4", {}, '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="run">\n'
     '<｜DSML｜parameter name="cmd" string="true">a<b "c"\nd</｜DSML｜parameter>\n'
     '<｜DSML｜parameter name="n" string="false">3</｜DSML｜parameter>\n'
     '<｜DSML｜parameter name="opts" string="false">{"x": [1, true]}</｜DSML｜parameter>\n'
     "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
     ParsedMessage(tool_calls=(
         ToolCall("call_0", "run", '{"cmd": "a<b \\"c\\"\\nd", "n": 3, "opts": {"x": [1, true]}}'),))),
    ("kimi_k3", {"thinking_forced_open": True},
     "Need weather.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|><|open|>tools<|sep|>"
     '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris'
     '<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool="f" index="2"<|sep|><|close|>call<|sep|>'
     "<|close|>tools<|sep|>",
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("kimi_k3", {}, '<|open|>response<|sep|>Hello!<|close|>response<|sep|>', ParsedMessage(content="Hello!")),
    ("gigachat3", {}, 'Checking.<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": '
     '{"city": "Paris"}}', ParsedMessage(content="Checking.", tool_calls=(WEATHER,))),
    ("gigachat3", {}, "A function call is a request.<|message_sep|>",
     ParsedMessage(content="A function call is a request.")),
    ("gigachat3_1", {}, '<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}',
     ParsedMessage(tool_calls=(WEATHER,))),
    ("gemma4", {}, '<|channel>thought\nNeed weather.<channel|>Checking.<|tool_call>call:get_weather{city:<|"|>Paris'
     '<|"|>}<tool_call|><|tool_call>call:f{}<tool_call|>',
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    # a thinking block after the reply is reasoning too; a stray <|channel> before one and a <channel|> no block
    # opened are dropped (llama.cpp's Gemma 4 parser)
    ("gemma4", {}, "<|channel><|channel>thought\nFirst.<channel|>Hi <|channel>thought\nthen.<channel|> there."
     "<channel|>",
     ParsedMessage(content="Hi there.", reasoning_content="First.then.")),
    ("gemma4", {}, '<|tool_call>call:run{cmd:<|"|>a "b"\n<|"|>,n:3,opts:{x:[1,true]}}<tool_call|>',
     ParsedMessage(tool_calls=(
         ToolCall("call_0", "run", '{"cmd": "a \\"b\\"\\n", "n": 3, "opts": {"x": [1, true]}}'),))),
    # the closing marker's text inside a string value does not end the call (a forced call's grammar allows it)
    ("gemma4", {}, '<|tool_call>call:run{cmd:<|"|>x}<tool_call|>y<|"|>}<tool_call|>',
     ParsedMessage(tool_calls=(ToolCall("call_0", "run", '{"cmd": "x}<tool_call|>y"}'),))),
    ("minimax_m3", {"tool_schemas": SCHEMAS}, "</mm:think>Checking.]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke "
     'name="run">]<]minimax[>[<cmd>ls</b>]<]minimax[>[</cmd>]<]minimax[>[<n>3]<]minimax[>[</n>]<]minimax[>[<opts>'
     "]<]minimax[>[<x>]<]minimax[>[<item>1]<]minimax[>[</item>]<]minimax[>[<item>true]<]minimax[>[</item>"
     "]<]minimax[>[</x>]<]minimax[>[</opts>]<]minimax[>[</invoke>\n]<]minimax[>[<invoke name=\"f\">"
     "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
     ParsedMessage(content="Checking.", tool_calls=(
         ToolCall("call_0", "run", '{"cmd": "ls</b>", "n": 3, "opts": {"x": [1, true]}}'),
         ToolCall("call_1", "f", "{}")))),
    ("minicpm5", {"tool_schemas": SCHEMAS}, 'Checking.\n<function name="get_weather"><param name="city">'
     '<![CDATA[Paris]]></param></function>\n<function name="f"></function>',
     ParsedMessage(content="Checking.", tool_calls=(WEATHER, F_EMPTY))),
    # ---- families llama.cpp's test-chat.cpp parses with their own syntax
    ("command_r_plus", {}, 'I will look it up.\nAction:\n```json\n[\n    {\n        "tool_name": "get_weather",\n'
     '        "parameters": {"city": "Paris"}\n    },\n    {"tool_name": "f", "parameters": {}}\n]\n```',
     ParsedMessage(content="I will look it up.", tool_calls=(WEATHER, F_EMPTY))),
    ("command_r_plus", {}, "<|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>", ParsedMessage(content="Hi there")),
    ("command_r_plus", {}, "Action: take a walk.", ParsedMessage(content="Action: take a walk.")),
    ("command_r_plus", {}, 'Action:\n```json\n[{"tool_name": "directly-answer", "parameters": {}}]\n```',
     ParsedMessage(content='Action:\n```json\n[{"tool_name": "directly-answer", "parameters": {}}]\n```')),
    ("functionary_v3_1", {}, 'Let me check.<function=get_weather>{"city": "Paris"}</function>\n<function=f>{}'
     '</function>', ParsedMessage(content="Let me check.", tool_calls=(WEATHER, F_EMPTY))),
    ("functionary_v3_1", {}, "Write <function=name> then the JSON.",
     ParsedMessage(content="Write <function=name> then the JSON.")),
    ("firefunction_v2", {}, ' functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", '
     '"arguments": {}}]', ParsedMessage(tool_calls=(WEATHER, F_EMPTY))),
    ("firefunction_v2", {}, "import functools\nfunctools.reduce(add, [1, 2])",
     ParsedMessage(content="import functools\nfunctools.reduce(add, [1, 2])")),
    ("apriel", {}, '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1"}, {"name": "f", '
     '"arguments": {}, "id": "a2"}]</tool_calls>', ParsedMessage(tool_calls=(WEATHER, F_EMPTY))),
    ("apriel", {"thinking_forced_open": True, "thinking_opener": "Here are my reasoning steps:\n"},
     'Need weather.\n[BEGIN FINAL RESPONSE]\nChecking.\n<tool_calls>[{"name": "get_weather", "arguments": '
     '{"city": "Paris"}}]</tool_calls>', ParsedMessage(content="Checking.", reasoning_content="Here are my reasoning "
                                                      "steps:\nNeed weather.", tool_calls=(WEATHER,))),
    ("muse_glimmer", {"tool_schemas": SCHEMAS}, " to=self<|message|>Need weather.<|eom|><|start|>assistant to=user"
     "<|message|>Checking.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>\n"
     '<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n'
     "</atem:function_calls><|eom|><|start|>assistant to=f<|message|><atem:function_calls>\n"
     '<atem:invoke name="f">\n</atem:invoke>\n</atem:function_calls><|eot|>',
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    ("muse_glimmer", {}, " to=user<|message|>Write <atem:function_calls> to call.<|eot|>",
     ParsedMessage(content="Write <atem:function_calls> to call.")),
    ("muse_glimmer", {}, "No header at all.", ParsedMessage(content="No header at all.")),
    # ---- families of the shared fixtures (break-it report C, section 3)
    ("hy3", {"tool_schemas": SCHEMAS, "thinking_forced_open": True, "thinking_opener": "<think:opensource>"},
     "Need weather.</think:opensource>Checking.<tool_calls:opensource>\n<tool_call:opensource>get_weather"
     "<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris"
     "</arg_value:opensource>\n</tool_call:opensource>\n<tool_call:opensource>f<tool_sep:opensource>\n"
     "</tool_call:opensource>\n</tool_calls:opensource>",
     ParsedMessage(content="Checking.", reasoning_content="Need weather.", tool_calls=(WEATHER, F_EMPTY))),
    # the form other servers read too: a JSON object after the separator, maybe ended by <end_of_tool_call...>
    ("hy3", {"tool_schemas": SCHEMAS}, "<tool_calls:opensource>\n<tool_call:opensource>run<tool_sep:opensource>\n"
     '{"cmd": "ls", "n": 3}<end_of_tool_call:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n'
     "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n"
     "</tool_call:opensource>\n</tool_calls:opensource>",
     ParsedMessage(tool_calls=(ToolCall("call_0", "run", '{"cmd": "ls", "n": 3}'),
                               ToolCall("call_1", "get_weather", '{"city": "Paris"}')))),
    ("hy3", {}, "Write <tool_call:opensource> and <arg_key>x</arg_key>.",
     ParsedMessage(content="Write <tool_call:opensource> and <arg_key>x</arg_key>.")),
    ("solar_open", {}, '<|think|>Need weather.<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>a1b2c3d4e5'
     '<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Paris"}<|tool_call:end|><|tool_call:begin|>x'
     "<|tool_call:name|>f<|tool_call:args|>{}<|tool_call:end|><|calls|>",
     ParsedMessage(reasoning_content="Need weather.", tool_calls=(
         ToolCall("a1b2c3d4e5", "get_weather", '{"city": "Paris"}'), ToolCall("call_0", "f", "{}")))),
    ("solar_open", {}, "<|think|>Hm.<|end|><|begin|>assistant<|content|>Use <|tool_calls|> to call.<|end|>",
     ParsedMessage(content="Use <|tool_calls|> to call.", reasoning_content="Hm.")),
]


def test_every_format_has_a_known_output():
    assert set(FORMATS) == {k[0] for k in KNOWN}


@pytest.mark.parametrize("fmt,kw,text,expected", KNOWN, ids=[f"{k[0]}-{i}" for i, k in enumerate(KNOWN)])
def test_known_output_any_split(fmt, kw, text, expected):
    for pieces in text_splits(text):
        deltas, msg = run(fmt, pieces, **kw)
        assert msg == expected, pieces
        check_invariant(deltas, msg)


@pytest.mark.parametrize("fmt,kw,text,expected", KNOWN, ids=[f"{k[0]}-{i}" for i, k in enumerate(KNOWN)])
def test_tools_off_everything_is_content(fmt, kw, text, expected):
    for pieces in ([text], list(text)):
        deltas, msg = run(fmt, pieces, allowed_tools=None, **kw)
        assert msg.tool_calls == ()
        check_invariant(deltas, msg)
        assert msg.reasoning_content == expected.reasoning_content


@pytest.mark.parametrize("reasoning_format", REASONING_FORMATS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_prefixes_of_every_known_output_keep_invariant(fmt, reasoning_format):
    # truncated generations (max_tokens) must still give consistent deltas
    for f, kw, text, _ in KNOWN:
        if f != fmt:
            continue
        for cut in range(0, len(text), 7):
            for pieces in ([text[:cut]], list(text[:cut])):
                deltas, msg = run(fmt, pieces, reasoning_format=reasoning_format, **kw)
                check_invariant(deltas, msg)
            assert run(fmt, [text[:cut]], reasoning_format=reasoning_format, **kw)[1] == \
                run(fmt, list(text[:cut]), reasoning_format=reasoning_format, **kw)[1]


def test_qwen25_two_tool_calls_empty_content():
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
    for pieces in text_splits(text):
        deltas, msg = run("hermes_2_pro", pieces)
        assert msg.content == ""
        assert [c.arguments for c in msg.tool_calls] == ['{"city": "Paris"}', '{"city": "Rome"}']
        assert [c.id for c in msg.tool_calls] == ["call_0", "call_1"]
        check_invariant(deltas, msg)


def test_unbalanced_braces_in_argument_string():
    args = '{"cmd": "mkdir -p a/{b,c"}'
    text = f'<tool_call>\n{{"name": "run", "arguments": {args}}}\n</tool_call>'
    for pieces in text_splits(text):
        deltas, msg = run("hermes_2_pro", pieces)
        assert msg.tool_calls == (ToolCall("call_0", "run", args),)
        streamed = "".join(tc.arguments for d in deltas for tc in d.tool_calls)
        assert streamed == args
        assert json.loads(streamed) == {"cmd": "mkdir -p a/{b,c"}


def test_escaped_quotes_and_unicode_arguments_byte_for_byte():
    args = '{"q": "say \\"hi\\" }{ \\u00e9 é \\\\", "n": [1, 2.5e3, null, true]}'
    text = f'[TOOL_CALLS]run[ARGS]{args} trailing'
    for pieces in text_splits(text):
        deltas, msg = run("mistral_small_3_2", pieces)
        assert msg.tool_calls[0].arguments == args
        assert msg.content == "trailing"
        check_invariant(deltas, msg)


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "now"}\n</tool_call>',
])
def test_tool_without_parameters_gets_empty_object(text):
    for pieces in text_splits(text):
        deltas, msg = run("hermes_2_pro", pieces)
        assert msg.tool_calls == (ToolCall("call_0", "now", "{}"),)
        check_invariant(deltas, msg)


def test_qwen3_first_delta_is_reasoning_and_think_never_in_content():
    text = "<think>\nLet me think.\n</think>\n\nThe answer is 4."
    deltas, msg = run("hermes_2_pro", list(text))
    assert deltas[0].reasoning_content and not deltas[0].content
    assert all("<think>" not in d.content and "</think>" not in d.content for d in deltas)
    assert msg == ParsedMessage(content="The answer is 4.", reasoning_content="Let me think.")


def test_reasoning_format_none_keeps_think_in_content():
    text = "<think>\nhmm\n</think>\n\nAnswer."
    for pieces in text_splits(text):
        deltas, msg = run("hermes_2_pro", pieces, reasoning_format="none")
        assert msg == ParsedMessage(content=text)
        check_invariant(deltas, msg)


def test_reasoning_format_none_begins_with_the_thinking_tag_the_prompt_opened():
    """As llama.cpp, which parses the generation prompt and the output as one text; Kimi K3's parser drops it."""
    text = "hmm\n</think>\n\nAnswer."
    for pieces in [*text_splits(text), []]:
        deltas, msg = run("hermes_2_pro", pieces, reasoning_format="none", thinking_forced_open=True,
                          thinking_opener="<think>\n")
        assert msg == ParsedMessage(content="<think>\n" + "".join(pieces))
        check_invariant(deltas, msg)
        assert run("hermes_2_pro", pieces, thinking_forced_open=True, thinking_opener="<think>\n")[1] == \
            (ParsedMessage(content="Answer.", reasoning_content="hmm") if pieces else ParsedMessage())
    assert run("kimi_k3", ["hmm"], reasoning_format="none", thinking_forced_open=True,
               thinking_opener="<|open|>think<|sep|>")[1] == ParsedMessage(content="hmm")
    # GLM 4.x keeps it (llama.cpp's generic parser); Ling 3, of the same call syntax, drops it (its own parser)
    assert run("glm_4_5", ["hmm"], reasoning_format="none", thinking_forced_open=True,
               thinking_opener="<think>")[1] == ParsedMessage(content="<think>hmm")
    assert run("ling_3", ["hmm"], reasoning_format="none", thinking_forced_open=True,
               thinking_opener="<think>")[1] == ParsedMessage(content="hmm")


def test_a_prefilled_reasoning_begins_the_reasoning_content():
    """A continued reasoning (the prompt ends inside its block, after it): read before the output, as llama.cpp
    parses the generation prompt and the output as one text; with ``none`` it is content after the opener;
    gpt-oss reads the analysis channel the prompt opened from the text."""
    text = " more\n</think>\n\nAnswer."
    kw = {"thinking_forced_open": True, "thinking_opener": "<think>\n", "prefill_reasoning": "I'm thinking"}
    for pieces in [*text_splits(text), []]:
        deltas, msg = run("hermes_2_pro", pieces, **kw)
        assert msg == (ParsedMessage(content="Answer.", reasoning_content="I'm thinking more") if pieces
                       else ParsedMessage(reasoning_content="I'm thinking"))
        check_invariant(deltas, msg)
        assert deltas[0].reasoning_content.startswith("I'm thinking")
        assert run("hermes_2_pro", pieces, reasoning_format="none", **kw)[1] == \
            ParsedMessage(content="<think>\nI'm thinking" + "".join(pieces))
        assert run("hermes_2_pro", pieces, reasoning_format="hidden", **kw)[1] == \
            ParsedMessage(content="Answer." if pieces else "")
    harmony = " more<|end|><|start|>assistant<|channel|>final<|message|>Answer."
    for pieces in text_splits(harmony):
        deltas, msg = run("gpt_oss", pieces, thinking_forced_open=True, prefill_reasoning="I'm thinking",
                          thinking_opener="<|channel|>analysis<|message|>")
        assert msg == ParsedMessage(content="Answer.", reasoning_content="I'm thinking more")
        check_invariant(deltas, msg)


def test_reasoning_format_legacy_and_hidden():
    text = "<think>hmm</think>Answer."
    for pieces in text_splits(text):
        assert run("content_only", pieces, reasoning_format="deepseek-legacy")[1] == \
            ParsedMessage(content=text, reasoning_content="hmm")
        assert run("content_only", pieces, reasoning_format="hidden")[1] == ParsedMessage(content="Answer.")
        assert run("content_only", pieces, reasoning_format="deepseek")[1] == \
            ParsedMessage(content="Answer.", reasoning_content="hmm")
    # the prompt opened the block (R1 distills, Qwen 3.5): legacy content begins with its opener, as "none"'s does
    # (it had the closing tag only)
    opened = "I reason.\n</think>\n\nAnswer."
    for pieces in text_splits(opened):
        deltas, msg = run("deepseek_r1", pieces, reasoning_format="deepseek-legacy", thinking_forced_open=True,
                          thinking_opener="<think>\n")
        assert msg == ParsedMessage(content="<think>\n" + opened, reasoning_content="I reason.")
        check_invariant(deltas, msg)


def test_thinking_forced_open_reasoning_then_content():
    text = "I should greet.\n</think>\n\nHello!"
    for pieces in text_splits(text):
        deltas, msg = run("deepseek_r1", pieces, thinking_forced_open=True)
        assert msg == ParsedMessage(content="Hello!", reasoning_content="I should greet.")
        assert deltas[0].reasoning_content
        check_invariant(deltas, msg)
    # unclosed forced-open reasoning (cut by max_tokens) is all reasoning
    assert run("deepseek_r1", ["still thinking"], thinking_forced_open=True)[1] == \
        ParsedMessage(reasoning_content="still thinking")


def test_parallel_false_keeps_one_call():
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>')
    for pieces in text_splits(text):
        deltas, msg = run("hermes_2_pro", pieces, parallel_tool_calls=False)
        assert msg == ParsedMessage(tool_calls=(WEATHER,))
        check_invariant(deltas, msg)


def test_disallowed_names_stay_content():
    text = 'Hi <tool_call>\n{"name": "rm_rf", "arguments": {"path": "/"}}\n</tool_call>'
    for pieces in text_splits(text):
        deltas, msg = run("hermes_2_pro", pieces, allowed_tools={"get_weather"})
        assert msg == ParsedMessage(content=text)
        check_invariant(deltas, msg)
    text = '[TOOL_CALLS]rm_rf[ARGS]{"path": "/"}'
    assert run("mistral_small_3_2", [text], allowed_tools={"f"})[1] == ParsedMessage(content=text)


def test_tool_call_delta_shape():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    deltas, _ = run("hermes_2_pro", list(text))
    tcs = [tc for d in deltas for tc in d.tool_calls]
    assert (tcs[0].index, tcs[0].id, tcs[0].name, tcs[0].arguments) == (0, "call_0", "get_weather", "")
    assert len(tcs) > 2 and all(tc.id is None and tc.name is None and tc.arguments for tc in tcs[1:])


def test_marker_prefix_is_held_back_not_emitted():
    parser = make_parser("hermes_2_pro", allowed_tools=ALLOWED, id_factory=ids())
    assert [d.content for d in parser.feed("Hi <tool_")] == ["Hi"]
    assert parser.feed("ca") == []
    deltas = parser.feed("ke> ok")
    assert "".join(d.content for d in deltas) == " <tool_cake> ok"


def test_malformed_arguments_end_at_longest_valid_prefix():
    text = '<tool_call>\n{"name": "run", "arguments": {"a": tru, "b": 1}}\n</tool_call>after'
    results = {run("hermes_2_pro", pieces)[1] for pieces in text_splits(text)}
    assert len(results) == 1
    msg = results.pop()
    assert msg.tool_calls[0].arguments == '{"a": tru'
    assert msg.content == "after"


def test_unknown_format_or_reasoning_format_raises():
    with pytest.raises(ValueError):
        make_parser("nope", allowed_tools=None)
    with pytest.raises(ValueError):
        make_parser("hermes_2_pro", reasoning_format="nope", allowed_tools=None)


def test_ids_default_factory_minted_once_per_call():
    parser = make_parser("hermes_2_pro", allowed_tools=ALLOWED)
    deltas = parser.feed('<tool_call>{"name": "now", "arguments": {}}</tool_call>')
    _, msg = parser.finish()
    first = [tc for d in deltas for tc in d.tool_calls if tc.id]
    assert [tc.id for tc in first] == [msg.tool_calls[0].id]
    assert msg.tool_calls[0].id.startswith("call_")


def test_fuzz_mixed_fragments_split_invariant():
    """Random mixtures of format fragments: never raises, same message for any split."""
    rng = random.Random(7)
    frags = ["<think>", "</think>", "\n", " ", "{", "}", '"', "\\", "[TOOL_CALLS]", "<tool_call>",
             "</tool_call>", ">>>", "all\n", "[ARGS]", "<|channel|>", "<|message|>", "<|end|>", "<|start|>",
             " to=functions.f", "<function=f>", "<parameter=", "</parameter>", "<arg_key>", "</arg_value>",
             "<|tool_call_start|>", "[f(", ")]", "<|tool_call_begin|>", "functions.f:0"]
    for _, _, text, _ in KNOWN:
        for _ in range(4):
            a = rng.randrange(len(text))
            frags.append(text[a:rng.randrange(a, len(text) + 1)])
    for _ in range(1500):
        text = "".join(rng.choice(frags) for _ in range(rng.randint(1, 8)))
        fmt = rng.choice(FORMATS)
        kw = dict(reasoning_format=rng.choice(REASONING_FORMATS), thinking_forced_open=rng.random() < 0.3,
                  parallel_tool_calls=rng.random() < 0.7)
        results = []
        for pieces in ([text], list(text)):
            deltas, msg = run(fmt, pieces, **kw)
            check_invariant(deltas, msg)
            results.append(msg)
        assert results[0] == results[1], (fmt, kw, text)


GLIMMER_CALL = (" to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"{}\">\n"
                '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls>')


def test_muse_glimmer_reasoning_formats():
    """A message to ``self`` is reasoning; ``none`` keeps it raw in content, ``hidden`` drops it."""
    text = " to=self<|message|>Hm.<|eom|><|start|>assistant to=user<|message|>Hi.<|eot|>"
    for pieces in text_splits(text):
        assert run("muse_glimmer", pieces)[1] == ParsedMessage(content="Hi.", reasoning_content="Hm.")
        assert run("muse_glimmer", pieces, reasoning_format="none")[1] == \
            ParsedMessage(content=" to=self<|message|>Hm.<|eom|>Hi.")
        assert run("muse_glimmer", pieces, reasoning_format="hidden")[1] == ParsedMessage(content="Hi.")


def test_muse_glimmer_call_of_a_tool_not_allowed_is_content_and_parallel_false_keeps_one():
    text = GLIMMER_CALL.format("rm_rf")
    for pieces in text_splits(text):
        assert run("muse_glimmer", pieces)[1] == ParsedMessage(content=text[text.index("<atem:"):])
    two = GLIMMER_CALL.format("get_weather") + "<|eom|><|start|>assistant" + GLIMMER_CALL.format("get_weather")
    for pieces in text_splits(two):
        msg = run("muse_glimmer", pieces, parallel_tool_calls=False)[1]
        assert [c.name for c in msg.tool_calls] == ["get_weather"] and msg.content == ""
        assert len(run("muse_glimmer", pieces)[1].tool_calls) == 2
