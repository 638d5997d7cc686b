"""Tool-call formats of current families (issue 18), end to end on the sans-IO path, per family:

the fixture template is detected as its format and renders a tool conversation (assistant
tool_calls + tool result) through ``render_chat`` (what ``/apply-template`` runs); the format's
output parser turns the family's real output syntax into the right ``tool_calls`` (and reasoning),
whole and split at every character or in random chunks; and the forced-call grammar for
``tool_choice`` ``required``/named compiles in llama.cpp, accepts the family's syntax, and what it
accepts parses back into the call.
"""

from __future__ import annotations

import json

import pytest

from skippy.engine.chat.formats import SYNTAXES
from skippy.engine.chat.prepare import PreparedTemplate, make_output_parser, render_chat
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message
from skippy.engine.sampling.grammar import native_tool_grammar
from tests.support import (
    check_invariant,
    compiles_in_llama_cpp,
    fixture_template,
    gbnf_matches,
    parse_plan,
    text_splits,
)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name."},
        "days": {"type": "integer", "description": "How many days."}}}}}
CONVERSATION = [
    Message("user", "Weather in Paris?"),
    Message("assistant", "", tool_calls=[{"id": "functions.get_weather:0", "type": "function",
                                          "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]),
    Message("tool", "sunny, 21 C", tool_call_id="functions.get_weather:0"),
]
CALL = ("get_weather", {"city": "Paris", "days": 2})

# family fixture -> (format, the family's real output: [reasoning +] content + a call of CALL, reasoning, content)
FAMILIES = {
    "openai-gpt-oss-120b": ("gpt_oss", "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant"
                            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                            '{"city": "Paris", "days": 2}<|call|>', "Look it up.", ""),
    "Qwen3-Coder": ("qwen3_coder", "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                    "</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>", "", "Let me check."),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (
        "qwen3_coder", "Look it up.\n</think>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n", "Look it up.", ""),
    "GLM-4.6": ("glm_4_5", "<think>Look it up.</think>\nLet me check.\n<tool_call>get_weather\n"
                "<arg_key>city</arg_key>\n"
                "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
                "Look it up.", "Let me check."),
    "GLM-4.7-Flash": ("glm_4_5", "Look it up.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
                      "</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>", "Look it up.", ""),
    "moonshotai-Kimi-K2": ("kimi_k2", "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions."
                           'get_weather:1<|tool_call_argument_begin|>{"city": "Paris", "days": 2}<|tool_call_end|>'
                           "<|tool_calls_section_end|>", "", "Let me check."),
    "Kimi-K2-Instruct": ("kimi_k2", '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:1'
                         '<|tool_call_argument_begin|>{"city": "Paris", "days": 2}<|tool_call_end|>'
                         "<|tool_calls_section_end|>", "", ""),
    "Kimi-K2-Thinking": ("kimi_k2", "<think>Look it up.</think><|tool_calls_section_begin|><|tool_call_begin|>"
                         'functions.get_weather:1<|tool_call_argument_begin|>{"city": "Paris", "days": 2}'
                         "<|tool_call_end|><|tool_calls_section_end|>", "Look it up.", ""),
    "ibm-granite-granite-3.3-2B-Instruct": (
        "granite", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', "", ""),
    "ibm-granite-granite-4.0": ("hermes_2_pro", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                                '"days": 2}}\n</tool_call>', "", ""),
    "Apertus-8B-Instruct": ("apertus", '<|inner_prefix|>Look it up.<|inner_suffix|>Let me check.<|tools_prefix|>'
                            '[{"get_weather": {"city": "Paris", "days": 2}}]<|tools_suffix|>', "Look it up.",
                            "Let me check."),
    "ByteDance-Seed-OSS": ("seed_oss", "<seed:think>Look it up.</seed:think>\n\n<seed:tool_call>\n"
                           "<function=get_weather>"
                           "\n<parameter=city>Paris</parameter>\n<parameter=days>2</parameter>\n</function>\n"
                           "</seed:tool_call>", "Look it up.", ""),
    "NVIDIA-Nemotron-Nano-v2": ("nemotron_v2", 'Look it up.\n</think>\n\n<TOOLCALL>[{"name": "get_weather", '
                                '"arguments": {"city": "Paris", "days": 2}}]</TOOLCALL>', "Look it up.", ""),
    "LFM2-8B-A1B": ("lfm2", "<|tool_call_start|>[get_weather(city=\"Paris\", days=2)]<|tool_call_end|>", "", ""),
    "LFM2.5-8B-A1B": ("lfm2", "<think>Look it up.</think>Let me check.<|tool_call_start|>[get_weather(city='Paris', "
                      "days=2)]<|tool_call_end|>", "Look it up.", "Let me check."),
    "mistralai-Ministral-3-14B-Reasoning-2512": (
        "mistral_small_3_2", '[THINK]Look it up.[/THINK]Let me check.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", '
        '"days": 2}', "Look it up.", "Let me check."),
    # issue 41: the families agents run in late 2026
    "Qwen3.5-4B": ("qwen3_coder", "Look it up.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                   "Paris\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
                   "Look it up.", ""),
    "StepFun3.5-Flash": ("qwen3_coder", "Look it up.\n</think>\n<tool_call>\n<function=get_weather>\n"
                         "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
                         "</tool_call>", "Look it up.", ""),
    "inclusionai-ling-3.0-flash": ("ling_3", "Look it up.</think>\n<tool_call>get_weather\n<arg_key>city"
                                   "</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
                                   "Look it up.", ""),
    "MiniMax-M2": ("minimax_m2", 'Look it up.\n</think>\n\nLet me check.\n<minimax:tool_call>\n'
                   '<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                   '<parameter name="days">2</parameter>\n</invoke>\n'
                   "</minimax:tool_call>", "Look it up.", "Let me check."),
    "deepseek-ai-DeepSeek-V3.2": (
        "deepseek_v3_2", 'Look it up.</think>Let me check.\n\n<｜DSML｜function_calls>\n'
        '<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜function_calls>", "Look it up.", "Let me check."),
    "deepseek-ai-DeepSeek-V4": (
        "deepseek_v4", 'Look it up.</think>\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜tool_calls>", "Look it up.", ""),
    "deepseek-ai-DeepSeek-V4-Flash-0731": (
        "deepseek_v4", 'Look it up.</think>Let me check.\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜tool_calls>", "Look it up.", "Let me check."),
    "Kimi-K3": ("kimi_k3", "Look it up.<|close|>think<|sep|><|open|>response<|sep|>Let me check.<|close|>response"
                '<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
                '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
                '<|open|>argument key="days" type="number"<|sep|>2'
                "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>", "Look it up.", "Let me check."),
    "Cohere2MoE": ("command_r7b", "Look it up.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", "
                   '"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 2}}\n]<|END_ACTION|>',
                   "Look it up.", ""),
    "GigaChat3-10B-A1.8B": ("gigachat3", 'Let me check.<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": '
                            '"get_weather", "arguments": {"city": "Paris", "days": 2}}', "", "Let me check."),
    "GigaChat3.1-10B-A1.8B": ("gigachat3_1", '<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris", '
                              '"days": 2}}', "", ""),
    "google-gemma-4-31B-it": ("gemma4", "<|channel>thought\nLook it up.<channel|>Let me check.<|tool_call>call:"
                              'get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>', "Look it up.", "Let me check."),
    "google-gemma-4-31B-it-interleaved": ("gemma4", '<|tool_call>call:get_weather{days:2,city:<|"|>Paris<|"|>}'
                                          "<tool_call|>", "", ""),
    "MiniMax-M3": ("minimax_m3", "<mm:think>Look it up.</mm:think>Let me check.]<]minimax[>[<tool_call>\n"
                   ']<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>'
                   "]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
                   "Look it up.", "Let me check."),
    "openbmb-MiniCPM5-1B": ("minicpm5", 'Look it up.\n</think>\n\nLet me check.\n<function name="get_weather">'
                            '<param name="city"><![CDATA[Paris]]></param><param name="days">2</param></function>',
                            "Look it up.", "Let me check."),
    # families llama.cpp's test-chat.cpp parses with their own syntax
    "CohereForAI-c4ai-command-r-plus-tool_use": (
        "command_r_plus", 'Let me check.\nAction:\n```json\n[\n    {\n        "tool_name": "get_weather",\n'
        '        "parameters": {"city": "Paris", "days": 2}\n    }\n]```', "", "Let me check."),
    "meetkai-functionary-medium-v3.1": ("functionary_v3_1", '<function=get_weather>{"city": "Paris", "days": 2}'
                                        "</function>", "", ""),
    "meetkai-functionary-medium-v3.2": ("functionary_v3_2", 'get_weather\n{"city": "Paris", "days": 2}', "", ""),
    "fireworks-ai-llama-3-firefunction-v2": ("firefunction_v2", ' functools[{"name": "get_weather", "arguments": '
                                             '{"city": "Paris", "days": 2}}]', "", ""),
    "unsloth-Apriel-1.5": ("apriel", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", '
                           '"days": 2}}]</tool_calls>', "", ""),
    "Apriel-1.6-15b-Thinker-fixed": ("apriel", 'Look it up.\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{"name": '
                                     '"get_weather", "arguments": {"city": "Paris", "days": 2}}]</tool_calls>',
                                     "Here are my reasoning steps:\nLook it up.", ""),
    # families in the shared fixtures that had no parser (break-it report C, section 3): Hy3's default
    # reasoning_effort (no_think) closes the thinking block in the prompt; Solar Open's reasoning is a message
    "tencent-Hy3": ("hy3", "Let me check.<tool_calls:opensource>\n<tool_call:opensource>get_weather"
                    "<tool_sep:opensource>\n"
                    "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n"
                    "<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>2</arg_value:opensource>\n"
                    "</tool_call:opensource>\n</tool_calls:opensource>", "", "Let me check."),
    "upstage-Solar-Open-100B": ("solar_open", "<|think|>Look it up.<|end|><|begin|>assistant<|tool_calls|>"
                                "<|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>"
                                '{"city": "Paris", "days": 2}<|tool_call:end|><|calls|>', "Look it up.", ""),
    "muse-glimmer": ("muse_glimmer", " to=self<|message|>Look it up.<|eom|><|start|>assistant to=user<|message|>"
                     "Let me check.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>\n"
                     '<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n'
                     '<atem:parameter name="days">2</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>',
                     "Look it up.", "Let me check."),
}

def _tmpl(stem: str) -> PreparedTemplate:
    return fixture_template(stem)  # type: ignore[no-any-return]






@pytest.mark.parametrize("stem", sorted(FAMILIES))
def test_fixture_detected_and_renders_a_tool_conversation(stem):
    tmpl = _tmpl(stem)
    fmt = FAMILIES[stem][0]
    assert tmpl.caps.chat_format == fmt
    assert tmpl.caps.supports_tools
    rendered = render_chat(tmpl, ChatCompletionRequest(messages=CONVERSATION, tools=[WEATHER]))
    prompt = rendered.prompt
    assert "get_weather" in prompt and "Paris" in prompt and "sunny, 21 C" in prompt
    assert prompt.index("Weather in Paris?") < prompt.rindex("Paris") < prompt.index("sunny, 21 C")
    assert rendered.plan.chat_format == fmt and rendered.plan.allowed_tools == {"get_weather"}


@pytest.mark.parametrize("stem", sorted(FAMILIES))
def test_family_output_parses_to_the_call_streamed_and_not(stem):
    fmt, text, reasoning, content = FAMILIES[stem]
    tmpl = _tmpl(stem)
    plan = render_chat(tmpl, ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER])).plan
    results = set()
    for pieces in text_splits(text):
        deltas, msg = parse_plan(plan, pieces)
        check_invariant(deltas, msg)
        assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [CALL], pieces
        assert msg.reasoning_content == reasoning and msg.content == content
        results.add(msg)
    assert len(results) == 1
    if fmt == "kimi_k2":  # the model's own id is the OpenAI id (the template renders it back)
        assert results.pop().tool_calls[0].id == "functions.get_weather:1"
    if fmt == "solar_open":  # so is Solar Open's, of the form its template asks for
        assert results.pop().tool_calls[0].id == "a1b2c3d4e5"


@pytest.mark.parametrize("stem", sorted(FAMILIES))
@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
                         ids=["required", "named"])
def test_forced_call_grammar_accepts_the_family_syntax(stem, tool_choice):
    fmt, text, _, _ = FAMILIES[stem]
    plan = render_chat(_tmpl(stem), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER],
                                                          tool_choice=tool_choice)).plan
    assert plan.grammar is not None and not plan.grammar_lazy_patterns
    assert compiles_in_llama_cpp(plan.grammar)
    # what the grammar forces is the family's own syntax (the reasoning/content prefix is the model's choice)
    forced = FORCED[fmt]
    if plan.thinking_forced_open:  # the prompt opened the thinking block: the grammar has it closed first
        assert not gbnf_matches(plan.grammar, forced)
        forced = f"Look it up.\n{SYNTAXES[fmt].think_tags[1]}\n" + forced
    assert gbnf_matches(plan.grammar, forced), forced
    assert not gbnf_matches(plan.grammar, forced.replace("get_weather", "get_wrong"))
    deltas, msg = parse_plan(plan, list(forced))
    check_invariant(deltas, msg)
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [CALL]
    # (Apriel 1.6: the prompt's opening sentence begins the reasoning)
    opener = plan.thinking_opener.strip() + "\n" if SYNTAXES[fmt].opener_in_reasoning else ""
    assert msg.reasoning_content == (opener + "Look it up." if plan.thinking_forced_open else "")


# the shortest text each forced-call grammar accepts for CALL, in the family's syntax
FORCED = {
    "gpt_oss": '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
               '{"city": "Paris", "days": 2}',
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
                   "</parameter>\n</function>\n</tool_call>",
    "seed_oss": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>2"
                "</parameter>\n</function>\n</seed:tool_call>",
    "glm_4_5": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
               "<arg_key>days</arg_key>\n"
               "<arg_value>2</arg_value>\n</tool_call>",
    "ling_3": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
              "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
               '{"city": "Paris", "days": 2}<|tool_call_end|><|tool_calls_section_end|>',
    "granite": '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]',
    "hermes_2_pro": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>',
    "apertus": '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 2}}]<|tools_suffix|>',
    "nemotron_v2": '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]</TOOLCALL>',
    "lfm2": '<|tool_call_start|>[get_weather(city="Paris", days=2)]<|tool_call_end|>',
    "mistral_small_3_2": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}',
    "minimax_m2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                  '<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>',
    "deepseek_v3_2": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
                     '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
                     '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
                     "</｜DSML｜function_calls>",
    "deepseek_v4": '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                   '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
                   '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
                   "</｜DSML｜tool_calls>",
    "kimi_k3": '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" '
               'type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>2'
               "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
    "command_r7b": '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": '
                   '{"city": "Paris", "days": 2}}]<|END_ACTION|>',
    "gigachat3": 'function call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}',
    "gigachat3_1": '<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}',
    "gemma4": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>',
    "minimax_m3": ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris'
                  "]<]minimax[>[</city>]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[</invoke>\n"
                  "]<]minimax[>[</tool_call>",
    "minicpm5": '<function name="get_weather"><param name="city">Paris</param><param name="days">2</param></function>',
    "command_r_plus": 'Action:\n```json\n[{"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 2}}]'
                      '\n```',
    "functionary_v3_1": '<function=get_weather>{"city": "Paris", "days": 2}</function>',
    "functionary_v3_2": 'get_weather\n{"city": "Paris", "days": 2}',
    "firefunction_v2": ' functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]',
    "apriel": '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]</tool_calls>',
    "hy3": "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city"
           "</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n<arg_key:opensource>days"
           "</arg_key:opensource>\n<arg_value:opensource>2</arg_value:opensource>\n</tool_call:opensource>\n"
           "</tool_calls:opensource>",
    "solar_open": '<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>'
                  '{"city": "Paris", "days": 2}<|tool_call:end|><|calls|>',
    "muse_glimmer": ' to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n'
                    '<atem:parameter name="city">Paris</atem:parameter>\n<atem:parameter name="days">2'
                    "</atem:parameter>\n</atem:invoke>\n</atem:function_calls>",
}


@pytest.mark.parametrize("effort", ["high", "low"])
def test_hy3_reasoning_the_prompt_opened(effort):
    """Hy3's generation prompt opens ``<think:opensource>`` with ``reasoning_effort`` high or low (and closes it
    empty with its default, no_think): the output starts in reasoning, which its closing tag ends; a forced call
    closes it first."""
    tmpl = _tmpl("tencent-Hy3")
    req = ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER], reasoning_effort=effort)
    plan = render_chat(tmpl, req).plan
    assert plan.thinking_forced_open and plan.thinking_opener == "<think:opensource>"
    text = "Look it up.</think:opensource>" + FAMILIES["tencent-Hy3"][1]
    for pieces in text_splits(text):
        deltas, msg = parse_plan(plan, pieces)
        check_invariant(deltas, msg)
        assert (msg.reasoning_content, msg.content) == ("Look it up.", "Let me check.")
        assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [CALL]
    forced = render_chat(tmpl, ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER],
                                                     reasoning_effort=effort, tool_choice="required")).plan
    assert gbnf_matches(forced.grammar, "Look it up.\n</think:opensource>\n" + FORCED["hy3"])
    assert not gbnf_matches(forced.grammar, FORCED["hy3"])
    assert not render_chat(tmpl, ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER])).plan \
        .thinking_forced_open


def test_solar_open_grammar_allows_a_reasoning_message_first():
    plan = render_chat(_tmpl("upstage-Solar-Open-100B"), ChatCompletionRequest(
        messages=CONVERSATION[:1], tools=[WEATHER], tool_choice="required")).plan
    text = "<|think|>Need the weather.<|end|><|begin|>assistant" + FORCED["solar_open"]
    assert gbnf_matches(plan.grammar, text)
    assert not gbnf_matches(plan.grammar, FORCED["solar_open"].replace("a1b2c3d4e5", "A1B2"))
    _, msg = parse_plan(plan, [text])
    assert msg.reasoning_content == "Need the weather." and msg.tool_calls[0].name == "get_weather"


@pytest.mark.parametrize("text,content", [
    ("<|think|>Hm.<|end|><|begin|>assistant<|content|>It is sunny.", "It is sunny."),
    # reasoning_effort low: the prompt holds an empty reasoning message, the reply is the content message
    ("<|content|>It is <b>sunny</b>.<|end|>", "It is <b>sunny</b>."),
    # content, then the calls in a message of their own
    ("<|content|>Let me check.\n<|end|><|begin|>assistant" + FORCED["solar_open"], "Let me check."),
])
def test_solar_open_messages(text, content):
    plan = render_chat(_tmpl("upstage-Solar-Open-100B"), ChatCompletionRequest(
        messages=CONVERSATION[:1], tools=[WEATHER])).plan
    for pieces in text_splits(text):
        deltas, msg = parse_plan(plan, pieces)
        check_invariant(deltas, msg)
        assert msg.content == content and msg.reasoning_content == ("Hm." if "<|think|>" in text else "")
        assert len(msg.tool_calls) == ("<|calls|>" in text)


def test_solar_open_call_id_not_of_its_form_is_ours():
    plan = render_chat(_tmpl("upstage-Solar-Open-100B"), ChatCompletionRequest(
        messages=CONVERSATION[:1], tools=[WEATHER])).plan
    for model_id in ("0", "call one", "a1b2c3d4e5f6", "A1B2C3D4E5"):
        text = FORCED["solar_open"].replace("a1b2c3d4e5", model_id)
        _, msg = parse_plan(plan, [text])
        assert [(c.id, c.name) for c in msg.tool_calls] == [("call_0", "get_weather")], model_id


def test_gpt_oss_grammar_allows_an_analysis_message_first():
    plan = render_chat(_tmpl("openai-gpt-oss-120b"), ChatCompletionRequest(
        messages=CONVERSATION[:1], tools=[WEATHER], tool_choice="required")).plan
    text = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant" + FORCED["gpt_oss"]
    assert gbnf_matches(plan.grammar, text)
    _, msg = parse_plan(plan, [text])
    assert msg.reasoning_content == "Need the weather." and msg.tool_calls[0].name == "get_weather"


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm_4_5", "lfm2"])
def test_forced_grammar_optional_parameters_any_subset_in_order(fmt):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}}}}
    gbnf = native_tool_grammar(fmt, [tool], [tool], parallel=False)
    assert compiles_in_llama_cpp(gbnf)
    item = {"qwen3_coder": "<parameter={k}>\n1\n</parameter>\n", "glm_4_5": "<arg_key>{k}</arg_key>\n<arg_value>1"
            "</arg_value>\n", "lfm2": "{k}=1"}[fmt]
    sep = ", " if fmt == "lfm2" else ""
    wrap = {"qwen3_coder": "<tool_call>\n<function=f>\n{}</function>\n</tool_call>",
            "glm_4_5": "<tool_call>f\n{}</tool_call>", "lfm2": "<|tool_call_start|>[f({})]<|tool_call_end|>"}[fmt]
    for keys in ([], ["a"], ["b"], ["c"], ["a", "c"], ["b", "c"], ["a", "b", "c"]):
        assert gbnf_matches(gbnf, wrap.format(sep.join(item.format(k=k) for k in keys))), keys
    assert not gbnf_matches(gbnf, wrap.format(sep.join(item.format(k=k) for k in ["b", "a"])))


@pytest.mark.parametrize("fmt", ["qwen3_coder", "minimax_m2", "kimi_k3", "minimax_m3", "gemma4"])
def test_forced_grammar_raw_text_values_keep_enum_and_length(fmt):
    """A text parameter written raw (the XML-like formats) is held to its ``enum`` and its length bounds, as a
    JSON string is; an unbounded one takes any text up to the closing marker."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "code": {"type": "string", "minLength": 2, "maxLength": 5},
        "note": {"type": "string"}}, "required": ["unit", "code", "note"]}}}
    gbnf = native_tool_grammar(fmt, [tool], [tool], parallel=False)
    assert compiles_in_llama_cpp(gbnf)
    item = {"qwen3_coder": "<parameter={k}>\n{v}\n</parameter>\n",
            "minimax_m2": '<parameter name="{k}">{v}</parameter>\n',
            "kimi_k3": '<|open|>argument key="{k}" type="string"<|sep|>{v}<|close|>argument<|sep|>',
            "minimax_m3": "]<]minimax[>[<{k}>{v}]<]minimax[>[</{k}>",
            "gemma4": '{k}:<|"|>{v}<|"|>'}[fmt]
    wrap = {"qwen3_coder": "<tool_call>\n<function=f>\n{}</function>\n</tool_call>",
            "minimax_m2": '<minimax:tool_call>\n<invoke name="f">\n{}</invoke>\n</minimax:tool_call>',
            "kimi_k3": '<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|>{}<|close|>call<|sep|>'
                       "<|close|>tools<|sep|>",
            "minimax_m3": "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"f\">{}]<]minimax[>[</invoke>\n"
                          "]<]minimax[>[</tool_call>",
            "gemma4": "<|tool_call>call:f{{{}}}<tool_call|>"}[fmt]
    sep = "," if fmt == "gemma4" else ""

    def call(unit, code, note="a long free note"):
        return wrap.format(sep.join(item.format(k=k, v=v) for k, v in (("unit", unit), ("code", code),
                                                                        ("note", note))))
    assert gbnf_matches(gbnf, call("celsius", "ab")) and gbnf_matches(gbnf, call("fahrenheit", "abcde"))
    assert not gbnf_matches(gbnf, call("kelvin", "ab")), "a value outside the enum"
    assert not gbnf_matches(gbnf, call("celsius", "a")) and not gbnf_matches(gbnf, call("celsius", "abcdef"))


def test_xml_string_values_stream_before_the_closing_tag():
    plan = render_chat(_tmpl("Qwen3-Coder"), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER])).plan
    parser = make_output_parser(plan)
    parser.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar")
    deltas = parser.feed("is\n</param")
    assert "".join(tc.arguments for d in deltas for tc in d.tool_calls) == "is"  # "\n</param" held back
    deltas = parser.feed("eter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>")
    assert "".join(tc.arguments for d in deltas for tc in d.tool_calls) == '", "days": 2}'


def test_xml_values_typed_by_schema_unknown_keys_by_json():
    plan = render_chat(_tmpl("GLM-4.6"), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER])).plan
    text = ("<tool_call>get_weather<arg_key>city</arg_key><arg_value>123</arg_value><arg_key>days</arg_key>"
            "<arg_value>x</arg_value><arg_key>extra</arg_key><arg_value>[1, 2]</arg_value></tool_call>")
    _, msg = parse_plan(plan, [text])
    # city is a string by schema (kept as text), days is not valid JSON (kept as text), extra parses as JSON
    assert json.loads(msg.tool_calls[0].arguments) == {"city": "123", "days": "x", "extra": [1, 2]}


def test_harmony_builtin_recipient_is_dropped_and_disallowed_tool_stays_content():
    plan = render_chat(_tmpl("openai-gpt-oss-120b"), ChatCompletionRequest(
        messages=CONVERSATION[:1], tools=[WEATHER])).plan
    text = '<|channel|>commentary to=browser.search <|constrain|>json<|message|>{"q": "x"}<|call|>'
    for pieces in ([text], list(text)):  # a built-in tool's call: no client can run it (llama.cpp drops it)
        _, msg = parse_plan(plan, pieces)
        assert msg.tool_calls == () and msg.content == ""
    text = '<|channel|>commentary to=functions.rm_rf<|message|>{}<|call|>'
    assert parse_plan(plan, list(text))[1].content == text


def test_qwen3_coder_call_without_its_opener_only_where_the_model_does_not_think():
    """Qwen3-Coder (no thinking block) may leave out <tool_call>: <function=NAME> of an allowed tool opens
    the call (llama.cpp's workaround); another name stays text, and a thinking model's bare opener is text."""
    text = ("#include <functional>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
            "</tool_call>")
    req = ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER], enable_thinking=False)
    for pieces in ([text], list(text)):
        _, msg = parse_plan(render_chat(_tmpl("Qwen3-Coder"), req).plan, pieces)
        assert msg.content == "#include <functional>" and msg.tool_calls[0].name == "get_weather"
        _, msg = parse_plan(render_chat(_tmpl("Qwen3.5-4B"), req).plan, pieces)
        assert msg.tool_calls == () and msg.content == text


def test_harmony_reasoning_format_none_keeps_the_raw_analysis():
    from skippy.engine.chat.formats import make_parser
    text = "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi"
    parser = make_parser("gpt_oss", reasoning_format="none")
    parser.feed(text)
    _, msg = parser.finish()
    assert msg.reasoning_content == "" and msg.content == "<|channel|>analysis<|message|>hm<|end|>Hi"


def _two_calls(fmt: str) -> str:
    """FORCED[fmt]'s call twice, in the family's own parallel syntax."""
    from skippy.engine.sampling.grammar import NATIVE_CALL_SHAPES, NATIVE_CALL_WRAPPERS
    prefix, sep, suffix = NATIVE_CALL_SHAPES[fmt][:3] if fmt in NATIVE_CALL_SHAPES else NATIVE_CALL_WRAPPERS[fmt]
    forced = FORCED[fmt]
    call = forced[len(prefix):len(forced) - len(suffix)]
    return prefix + call + sep + call + suffix


@pytest.mark.parametrize("stem", sorted(FAMILIES))
def test_named_tool_choice_grammar_allows_exactly_one_call(stem):
    """Issue 35.15: a named tool choice is one call, then the turn ends (the grammar is complete: only an
    end-of-generation token may follow), whatever the template's parallel default."""
    fmt = FAMILIES[stem][0]
    named = {"type": "function", "function": {"name": "get_weather"}}
    for parallel in (None, True):
        plan = render_chat(_tmpl(stem), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER],
                                                              tool_choice=named, parallel_tool_calls=parallel)).plan
        close = f"Look it up.\n{SYNTAXES[fmt].think_tags[1]}\n" if plan.thinking_forced_open else ""
        assert gbnf_matches(plan.grammar, close + FORCED[fmt])
        assert not gbnf_matches(plan.grammar, close + _two_calls(fmt)), fmt
    # `required` without parallel calls: one call too; with them (where the family has a separator), two may follow
    one = render_chat(_tmpl(stem), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER],
                                                         tool_choice="required", parallel_tool_calls=False)).plan
    close = f"Look it up.\n{SYNTAXES[fmt].think_tags[1]}\n" if one.thinking_forced_open else ""
    assert not gbnf_matches(one.grammar, close + _two_calls(fmt))


@pytest.mark.parametrize("stem", sorted(FAMILIES))
def test_a_call_cut_by_the_token_limit_is_neither_reported_nor_content(stem):
    """Issue 35.15: the forced call's text cut anywhere (finish ``length``): no partial call in the message and
    none of its syntax in ``content``; a call is reported once its arguments are whole."""
    fmt = FAMILIES[stem][0]
    plan = render_chat(_tmpl(stem), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER],
                                                          tool_choice="required")).plan
    text = (f"Look it up.\n{SYNTAXES[fmt].think_tags[1]}\n" if plan.thinking_forced_open else "") + FORCED[fmt]
    for cut in range(1, len(text) + 1):
        parser = make_output_parser(plan)
        deltas = parser.feed(text[:cut])
        _, msg = parser.finish(truncated=True)
        assert msg.content == "", (cut, msg.content)
        assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] in ([], [CALL]), (cut, msg.tool_calls)
        assert not any(d.content for d in deltas), cut


@pytest.mark.parametrize("text", ["\n\n ", "It is", "It is sunny. ", "a < b"])
def test_a_truncated_reply_without_cut_syntax_ends_as_it_would_have(text):
    """Held text that is not the format's syntax (trailing space, a reply of space only) is given back at a
    ``length`` finish as at any other: only a cut marker or call is dropped."""
    plan = render_chat(_tmpl("Qwen-Qwen2.5-7B-Instruct"), ChatCompletionRequest(
        messages=CONVERSATION[:1], tools=[WEATHER])).plan
    results = []
    for truncated in (False, True):
        parser = make_output_parser(plan)
        deltas = parser.feed(text)
        tail, msg = parser.finish(truncated=truncated)
        assert "".join(d.content for d in deltas + tail) == msg.content
        results.append(msg)
    assert results[0] == results[1]
    parser = make_output_parser(plan)
    parser.feed(text + "<tool_ca")
    assert parser.finish(truncated=True)[1].content == parser_content(plan, text)


def parser_content(plan, text):
    parser = make_output_parser(plan)
    parser.feed(text)
    return parser.finish()[1].content


@pytest.mark.parametrize(("pattern", "good", "bad"), [
    (r"^\d{4}-\d{2}-\d{2}$", ["2024-01-31"], ["2024-1-31", "abcd-01-31"]),  # \d: the converter wrote "\d"
    (r"^[\w.-]+@[\w-]+\.[a-z]{2,}$", ["a.b-c@x-y.com"], ["a@b.c", "a b@x.com"]),
    (r"^\$\d+(\.\d{2})?$", ["$12.50", "$3"], ["12"]),  # escaped metacharacters: "\." was an invalid escape
    (r'^say "[a-z]{3}"$', ['say "abc"'], ["say abc"]),  # a quote: written unescaped, it broke the call's JSON
    (r"^line1\nline[0-9]$", ["line1\nline2"], ["line1 line2"]),  # a newline: matched as JSON's \n
    (r"^\S+\s\S+$", ["ab cd"], ["abcd"]),
    (r"^[a\-z]+$", ["a-z"], ["b"]),
    (r'^x\\y\"z[0-9]$', ['x\\y"z1'], ['xy"z1', 'x\\yz1']),  # an escaped backslash and quote
])
def test_tool_schema_patterns_hold_the_decoded_value(pattern: str, good: list[str], bad: list[str]) -> None:
    """A string ``pattern`` in a tool's parameters holds the value the call's JSON decodes to, for the regular
    expressions tool schemas use (llama-cpp-python's converter read few escapes, and llama.cpp refused the
    grammar: the request was a 400)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}, "required": ["x"]}}}
    gbnf = native_tool_grammar("hermes_2_pro", [tool], [tool], parallel=False)
    assert compiles_in_llama_cpp(gbnf)

    def call(value: str) -> str:
        return "<tool_call>\n" + json.dumps({"name": "f", "arguments": {"x": value}}) + "\n</tool_call>"
    assert all(gbnf_matches(gbnf, call(v)) for v in good)
    assert not any(gbnf_matches(gbnf, call(v)) for v in bad)


def test_a_nullable_string_enum_is_raw_text_held_to_the_enum_and_null_is_null() -> None:
    """Qwen3-Coder's XML: a ``["string", "null"]`` parameter is written raw, as the parser reads it (the grammar
    had let the model write a JSON value, which came back with its quotes inside the string); the word null is
    null."""
    tool = {"type": "function", "function": {"name": "pick", "parameters": {"type": "object", "properties": {
        "c": {"type": ["string", "null"], "enum": ["a", "b", None]}}, "required": ["c"]}}}
    plan = render_chat(_tmpl("Qwen3-Coder"), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[tool],
                                                                  tool_choice="required")).plan
    call = "<tool_call>\n<function=pick>\n<parameter=c>\n{}\n</parameter>\n</function>\n</tool_call>"
    assert gbnf_matches(plan.grammar, call.format("a")) and gbnf_matches(plan.grammar, call.format("null"))
    assert not gbnf_matches(plan.grammar, call.format('"a"')) and not gbnf_matches(plan.grammar, call.format("c"))
    for value, expected in (("a", "a"), ("null", None)):
        deltas, msg = parse_plan(plan, list(call.format(value)))
        check_invariant(deltas, msg)
        assert json.loads(msg.tool_calls[0].arguments) == {"c": expected}


@pytest.mark.parametrize("bounds", [{"minLength": 5, "maxLength": 2}, {"minItems": 3, "maxItems": 1}])
def test_bounds_no_value_fits_are_a_400(bounds: dict) -> None:
    kind = {"type": "string"} if "minLength" in bounds else {"type": "array", "items": {"type": "string"}}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {**kind, **bounds}}, "required": ["x"]}}}
    for fmt in ("hermes_2_pro", "qwen3_coder"):
        with pytest.raises(InvalidRequest, match="no value fits"):
            native_tool_grammar(fmt, [tool], [tool], parallel=False)


def test_an_enum_or_const_with_a_quote_or_backslash_is_held_to_its_value() -> None:
    """JSON-argument formats: an ``enum``/``const`` value holding ``"`` or ``\\`` compiles (it was a 400: the converter
    wrote the JSON string's backslashes unescaped into GBNF) and allows exactly its JSON form (``"C:\\temp"`` had
    come back with a tab)."""
    tool = {"type": "function", "function": {"name": "say", "parameters": {"type": "object", "properties": {
        "m": {"type": "string", "enum": ['say "hi"', "C:\\temp"]}, "k": {"const": "a\\\\b"}},
        "required": ["m", "k"]}}}
    gbnf = native_tool_grammar("hermes_2_pro", [tool], [tool], parallel=False)
    assert compiles_in_llama_cpp(gbnf)

    def call(m: str, k: str = "a\\\\b") -> str:
        return '<tool_call>\n{"name": "say", "arguments": ' + json.dumps({"m": m, "k": k}) + "}\n</tool_call>"

    assert gbnf_matches(gbnf, call('say "hi"')) and gbnf_matches(gbnf, call("C:\\temp"))
    assert not gbnf_matches(gbnf, call("C:\temp")) and not gbnf_matches(gbnf, call("say hi"))
    assert not gbnf_matches(gbnf, call("C:\\temp", k="a\\b"))


def test_a_tool_without_a_description_renders_on_a_template_that_reads_it() -> None:
    """OpenAI's ``description`` is optional; gpt-oss's template reads it unguarded (``"// " + tool.description``),
    which was a 400 for every request of a client that leaves it out. Templates get an empty one, as llama-server
    gives them."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["function"]["parameters"]}}
    for tool_choice in ("auto", "required"):
        rendered = render_chat(_tmpl("openai-gpt-oss-120b"), ChatCompletionRequest(
            messages=CONVERSATION, tools=[tool], tool_choice=tool_choice))
        assert "type get_weather" in rendered.prompt
    assert "description" not in tool["function"]


def test_parameters_without_descriptions_render_on_command_r_plus() -> None:
    """Command R+ prints each parameter's description unguarded (``'): ' + param_fields.description``): a tool
    whose parameters have none (most tools) was a 400 for every tool request. They get empty ones there."""
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = {"type": "function", "function": {"name": "get", "description": "d", "parameters": params}}
    for tool_choice in ("auto", "required", {"type": "function", "function": {"name": "get"}}):
        rendered = render_chat(_tmpl("CohereForAI-c4ai-command-r-plus-tool_use"), ChatCompletionRequest(
            messages=CONVERSATION[:1], tools=[tool], tool_choice=tool_choice))
        assert "city (str):" in rendered.prompt and rendered.plan.chat_format == "command_r_plus"
    assert "description" not in params["properties"]["city"]


def test_a_forced_call_with_response_format_is_the_call() -> None:
    """OpenAI takes ``response_format`` beside a forced ``tool_choice`` (it was a 400): the reply is the forced call,
    so the call's grammar is the one applied; ``response_format`` would shape text there is none of. Another
    constraint field (llama-server's ``grammar``) still conflicts with the call's grammar: a 400 naming it."""
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        plan = render_chat(_tmpl("Qwen-Qwen2.5-7B-Instruct"), ChatCompletionRequest(
            messages=CONVERSATION[:1], tools=[WEATHER], tool_choice=choice, response_format=fmt)).plan
        assert plan.constraint is None and gbnf_matches(plan.grammar, FORCED["hermes_2_pro"])
    with pytest.raises(InvalidRequest) as ei:
        render_chat(_tmpl("Qwen-Qwen2.5-7B-Instruct"), ChatCompletionRequest(
            messages=CONVERSATION[:1], tools=[WEATHER], tool_choice="required", grammar='root ::= "a"'))
    assert ei.value.param == "grammar"


def test_forced_call_after_open_reasoning_cannot_hold_the_closing_phrase():
    """Apriel 1.6's prompt opens the reasoning; a forced call's grammar ends it only at ``[BEGIN FINAL RESPONSE]``,
    which the reasoning text cannot hold (it could: a tiny model then wrote on after the phrase, the phrase
    forced by a reasoning budget, and never called)."""
    plan = render_chat(_tmpl("Apriel-1.6-15b-Thinker-fixed"), ChatCompletionRequest(
        messages=CONVERSATION[:1], tools=[WEATHER], tool_choice="required")).plan
    assert plan.thinking_forced_open
    close = "\n[BEGIN FINAL RESPONSE]\n"
    assert gbnf_matches(plan.grammar, "Look [it] up." + close + FORCED["apriel"])
    assert not gbnf_matches(plan.grammar, "Look it up." + close + "More." + close + FORCED["apriel"])


@pytest.mark.parametrize("stem", ["GLM-4.7-Flash", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "Qwen3.5-4B",
                                  "StepFun3.5-Flash", "deepseek-ai-DeepSeek-V4", "inclusionai-ling-3.0-flash"])
def test_forced_call_reasoning_cannot_hold_the_call_opener_that_ends_it(stem):
    """Where a call's opener ends the thinking the prompt opened (Qwen3.5 / Nemotron 3's ``<tool_call>``, GLM,
    Ling 3, DeepSeek V4), a forced call's reasoning cannot hold that opener: it could, and over HTTP a tiny model
    wrote ``<tool_call>\\n<function=example_function_name>...`` as its reasoning, which the parser read as the end
    of the reasoning, so the rest of it, its closing tag too, reached ``content`` beside the call."""
    fmt = FAMILIES[stem][0]
    syntax = SYNTAXES[fmt]
    assert syntax.calls_end_thinking
    plan = render_chat(_tmpl(stem), ChatCompletionRequest(messages=CONVERSATION[:1], tools=[WEATHER],
                                                          tool_choice="required")).plan
    assert plan.thinking_forced_open
    close = f"\n{syntax.think_tags[1]}\n"
    assert gbnf_matches(plan.grammar, "Look <it> up, a < b." + close + FORCED[fmt])
    for opener in syntax.opens:
        assert not gbnf_matches(plan.grammar, f"Look it up.\n{opener}\nx" + close + FORCED[fmt]), opener


@pytest.mark.parametrize("fmt,call", [
    ("hermes_2_pro", '<tool_call>\n{{"name": "f", "arguments": {{"a": {deep}}}}}\n</tool_call>'),
    ("generic", '{{"tool_call": {{"name": "f", "arguments": {{"a": {deep}}}}}}}'),
    ("llama3_json", '{{"name": "f", "parameters": {{"a": {deep}}}}}'),
    ("mistral_nemo", '[TOOL_CALLS][{{"name": "f", "arguments": {{"a": {deep}}}}}]'),
    ("qwen3_coder", '<tool_call>\n<function=f>\n<parameter=a>\n{deep}\n</parameter>\n</function>\n</tool_call>'),
])
def test_a_call_nested_past_the_recursion_limit_is_no_server_error(fmt: str, call: str) -> None:
    # a model under a grammar wrote a 1100-deep value: json's decoder raised RecursionError in the parser, a 500
    # after the whole generation and a torn stream; now it is malformed output, streamed and not alike
    from skippy.engine.chat.formats import make_parser

    text = call.format(deep="[" * 1100 + "]" * 1100)
    for step in (7, len(text)):
        parser = make_parser(fmt, allowed_tools={"f"}, tool_schemas={"f": {"type": "object", "properties": {
            "a": {"type": "array"}}}})
        for i in range(0, len(text), step):
            parser.feed(text[i:i + step])
        _, message = parser.finish()
        assert len(message.tool_calls) <= 1


def test_client_tool_arguments_nested_past_the_recursion_limit_are_a_400() -> None:
    from skippy.engine.chat.capabilities import TemplateCaps
    from skippy.engine.chat.emulation import rewrite_history
    from skippy.engine.chat.history import normalize_history

    deep = '{"a":' * 1000 + '"x"' + "}" * 1000
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": deep}}]},
        {"role": "tool", "tool_call_id": "1", "content": "ok"}]
    with pytest.raises(InvalidRequest, match="nested too deeply") as exc:
        normalize_history(history, TemplateCaps(supports_tools=True))
    assert exc.value.param == "messages[1].tool_calls[0].function.arguments"
    with pytest.raises(InvalidRequest, match="nested too deeply"):  # templates without tools (emulation)
        rewrite_history(history, [], "auto")
