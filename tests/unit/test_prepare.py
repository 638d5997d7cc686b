"""render_chat (sans-IO): reasoning_effort, assistant prefill, tool defaults and validation, with real templates."""

from __future__ import annotations

import os
import random

import attrs
import pytest

from skippy.engine.chat.formats.emulated import EmulatedToolParser
from skippy.engine.chat.history import fold_leading_system
from skippy.engine.chat.prepare import PreparedTemplate, common_prefix_chars, make_output_parser, render_chat
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message
from skippy.engine.sampling.constraints import constraint_from_request
from tests.paths import CHAT_TEMPLATES
from tests.support import ByteVocab

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [Message("user", "Weather in Paris?")]


def _tmpl(name: str | None = None) -> PreparedTemplate:
    source = CHATML if name is None else (CHAT_TEMPLATES / name).read_text(encoding="utf-8")
    return PreparedTemplate.build(source, bos_token="<s>", eos_token="</s>")


def _render(tmpl: PreparedTemplate, **fields):
    return render_chat(tmpl, ChatCompletionRequest(**{"messages": ASK, **fields}))


def test_reasoning_effort_reaches_gpt_oss_template() -> None:
    tmpl = _tmpl("openai-gpt-oss-120b.jinja")
    assert "Reasoning: high" in _render(tmpl, reasoning_effort="high").prompt
    assert "Reasoning: low" in _render(tmpl, reasoning_effort="low").prompt
    assert "Reasoning: medium" in _render(tmpl).prompt  # the template's default


def test_reasoning_effort_none_turns_thinking_off_for_qwen3() -> None:
    tmpl = _tmpl("Qwen-Qwen3-0.6B.jinja")
    off = "<think>\n\n</think>\n\n"
    assert _render(tmpl, reasoning_effort="none").prompt.endswith(off)
    assert _render(tmpl, reasoning_effort="minimal").prompt.endswith(off)
    assert not _render(tmpl, reasoning_effort="medium").prompt.endswith(off)
    # explicit request fields win over what reasoning_effort implies
    assert not _render(tmpl, reasoning_effort="none", enable_thinking=True).prompt.endswith(off)
    assert not _render(tmpl, reasoning_effort="none",
                       chat_template_kwargs={"enable_thinking": True}).prompt.endswith(off)
    with pytest.raises(InvalidRequest) as info:
        _render(tmpl, reasoning_effort="max")
    assert info.value.param == "reasoning_effort"


def test_assistant_prefill_continues_the_last_message() -> None:
    tmpl = _tmpl()
    messages = [*ASK, Message("assistant", "It is")]
    prefilled = render_chat(tmpl, ChatCompletionRequest(messages=messages)).prompt
    assert prefilled == "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\nIt is"
    closed = render_chat(tmpl, ChatCompletionRequest(messages=messages, continue_final_message=False)).prompt
    assert closed.endswith("It is<|im_end|>\n<|im_start|>assistant\n")
    no_prompt = render_chat(tmpl, ChatCompletionRequest(messages=messages, add_generation_prompt=False)).prompt
    assert no_prompt.endswith("It is<|im_end|>\n")
    explicit = render_chat(tmpl, ChatCompletionRequest(messages=messages, continue_final_message=True,
                                                       add_generation_prompt=False)).prompt
    assert explicit == prefilled
    # a text-parts assistant message continues too
    parts = [*ASK, Message("assistant", [{"type": "text", "text": "It "}, {"type": "text", "text": "is"}])]
    assert render_chat(tmpl, ChatCompletionRequest(messages=parts)).prompt == prefilled
    # ... but only text parts: a bare string (which the history takes as text) is not continued
    odd = [*ASK, Message("assistant", [{"type": "text", "text": "It "}, "is"])]
    with pytest.raises(InvalidRequest) as info:
        render_chat(tmpl, ChatCompletionRequest(messages=odd))
    assert info.value.message == "messages[1].content: an assistant message to continue may hold text parts only"
    assert info.value.param == "messages[1].content"


def test_parallel_tool_calls_default_follows_the_template() -> None:
    emulated = _render(_tmpl(), tools=[WEATHER], tool_choice="required").plan
    assert emulated.emulated and not emulated.parallel_tool_calls
    assert _render(_tmpl(), tools=[WEATHER], tool_choice="required", parallel_tool_calls=True).plan.parallel_tool_calls
    qwen = _tmpl("Qwen-Qwen2.5-7B-Instruct.jinja")
    assert qwen.caps.supports_parallel_tool_calls
    assert _render(qwen, tools=[WEATHER]).plan.parallel_tool_calls
    mistral = _tmpl("mistralai-Mistral-Nemo-Instruct-2407.jinja")
    assert _render(mistral, tools=[WEATHER]).plan.parallel_tool_calls == mistral.caps.supports_parallel_tool_calls


@pytest.mark.parametrize("fields", [
    {"tools": [WEATHER], "tool_choice": "none"},  # tools declared, none may be called
    {"messages": [*ASK, Message("assistant", None, tool_calls=[{
        "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]),
        Message("tool", "sunny", tool_call_id="call_1")]},  # no tools, a rewritten tool history
], ids=["tool_choice_none", "no_tools_tool_history"])
def test_where_no_call_may_be_made_tool_call_text_is_content(fields) -> None:
    """Issue 35.11: the model copies the TOOL_CALL convention although no call may be made; its text is the reply."""
    plan = _render(_tmpl(), **fields).plan
    assert not plan.emulated and not plan.allowed_tools
    parser = make_output_parser(plan)
    assert not isinstance(parser, EmulatedToolParser)
    text = 'TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}'
    deltas = parser.feed(text[:20]) + parser.feed(text[20:])
    tail, msg = parser.finish()
    assert msg.content == text and msg.tool_calls == ()
    assert "".join(d.content or "" for d in [*deltas, *tail]) == text


def test_named_tool_choice_is_one_call_whatever_parallel_tool_calls_says() -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    qwen = _tmpl("Qwen-Qwen2.5-7B-Instruct.jinja")
    for tmpl in (_tmpl(), qwen):
        for parallel in (None, True):
            plan = _render(tmpl, tools=[WEATHER], tool_choice=named, parallel_tool_calls=parallel).plan
            assert not plan.parallel_tool_calls, (tmpl.caps.chat_format, parallel)
    assert _render(qwen, tools=[WEATHER], tool_choice="required").plan.parallel_tool_calls  # the template's default


def test_tool_choice_any_is_mistrals_name_for_required() -> None:
    for tmpl in (_tmpl(), _tmpl("Qwen-Qwen2.5-7B-Instruct.jinja")):
        required = _render(tmpl, tools=[WEATHER], tool_choice="required").plan
        assert _render(tmpl, tools=[WEATHER], tool_choice="any").plan == required and required.grammar


def test_a_template_without_a_system_role_gets_it_in_the_first_user_message() -> None:
    """Gemma 2 raises "System role not supported": llama.cpp's polyfill puts the system text before the first
    user message's (llama-server's /apply-template gives this prompt); the tool emulation's instruction, a
    system message, reaches the model the same way instead of a 400."""
    gemma = _tmpl("google-gemma-2-2b-it.jinja")
    prompt = _render(gemma, messages=[Message("system", "Be brief."), Message("user", "hi")]).prompt
    assert prompt == "<s><start_of_turn>user\nBe brief.\nhi<end_of_turn>\n<start_of_turn>model\n"
    prompt = _render(gemma, tools=[WEATHER]).prompt
    assert prompt.startswith("<s><start_of_turn>user\nYou can call tools.")
    assert prompt.endswith("Weather in Paris?<end_of_turn>\n<start_of_turn>model\n")
    prompt = _render(gemma, messages=[Message("system", "A"), Message("developer", "B"),  # none begins it
                                      Message("assistant", "yo"), Message("user", "hi")]).prompt
    assert prompt.startswith("<s><start_of_turn>user\nA\nB<end_of_turn>\n<start_of_turn>model\nyo<end_of_turn>")


def test_fold_leading_system_keeps_parts_and_leaves_other_conversations() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    folded = fold_leading_system([{"role": "system", "content": "S"}, {"role": "user", "content": [image]}])
    assert folded == [{"role": "user", "content": [{"type": "text", "text": "S"}, image]}]
    assert fold_leading_system([{"role": "user", "content": "u"}, {"role": "system", "content": "S"}]) is None
    assert fold_leading_system([{"role": "system", "content": "S"}]) == [{"role": "user", "content": "S"}]


@pytest.mark.parametrize("fields, param", [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"required": "x"}}}]},
     "tools[0].function.parameters.required"),
    ({"messages": [Message("user", None)]}, "messages[0].content"),
    ({"messages": [Message("system", None), *ASK]}, "messages[0].content"),
    ({"messages": [Message("wizard", "x")]}, "messages[0].role"),
    ({"messages": ASK, "continue_final_message": True}, "continue_final_message"),
])
def test_validation_names_the_field(fields: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        _render(_tmpl(), **fields)
    assert info.value.param == param


# -- the cache boundary (issue 21): history without the generation prompt ----------------------------

@pytest.mark.parametrize("name", [None, "LFM2.5-Instruct.jinja", "ibm-granite-granite-4.0.jinja",
                                  "Qwen-Qwen3-0.6B.jinja"])
def test_history_boundary_is_where_the_generation_prompt_starts(name: str | None) -> None:
    """The plan records how much of the prompt is the conversation without the generation prompt, and the
    next turn's prompt starts with that text (so a checkpoint saved there serves it); off unless asked."""
    tmpl = _tmpl(name)
    turn1 = [Message("system", "Be brief."), Message("user", "Name a colour.")]
    turn2 = turn1 + [Message("assistant", "Blue."), Message("user", "Another one?")]
    req1 = ChatCompletionRequest(messages=turn1)
    assert render_chat(tmpl, req1).plan.history_chars is None
    r1 = render_chat(tmpl, req1, history_boundary=True)
    r2 = render_chat(tmpl, ChatCompletionRequest(messages=turn2), history_boundary=True)
    k = r1.plan.history_chars
    assert k is not None and 0 < k < len(r1.prompt) and "Name a colour." in r1.prompt[:k]
    assert r2.prompt.startswith(r1.prompt[:k])
    assert r2.plan.history_chars > len(r1.prompt) and "Another one?" in r2.prompt[:r2.plan.history_chars]
    if name is None:
        assert r1.prompt[k:] == "<|im_start|>assistant\n"


def test_history_boundary_of_a_continued_message_ends_before_it() -> None:
    req = ChatCompletionRequest(messages=[Message("user", "Count to three."), Message("assistant", "One, two")])
    r = render_chat(_tmpl(), req, history_boundary=True)
    assert r.prompt[r.plan.history_chars:] == "<|im_start|>assistant\nOne, two"


def test_common_prefix_chars_is_os_path_commonprefix_s_length() -> None:
    rnd = random.Random(5)
    for _ in range(3000):
        base = "".join(rnd.choice("ab\u00e9") for _ in range(rnd.choice([0, 1, 4095, 4096, 4097, 9000])))
        a = base + "".join(rnd.choice("ab") for _ in range(rnd.randint(0, 5)))
        b = base + "".join(rnd.choice("ab") for _ in range(rnd.randint(0, 5)))
        b = b[:rnd.randint(0, len(b))] if rnd.random() < 0.3 else b
        assert common_prefix_chars(a, b) == len(os.path.commonprefix([a, b])) == common_prefix_chars(b, a)


ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
JSON_ANSWER = {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}}}


@pytest.mark.parametrize("name,close", [
    ("Qwen3.5-4B.jinja", "</think>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "</think>"),
    ("Kimi-K3.jinja", "<|close|>think<|sep|>"),
])
@pytest.mark.parametrize("fields", [
    JSON_ANSWER,
    {"response_format": {"type": "json_object", "schema": ANSWER}},
    {"json_schema": ANSWER},  # llama-server's field, which llama.cpp puts behind the reasoning too
    {"structured_outputs": {"json": ANSWER}},
])
def test_a_constraint_shapes_the_answer_after_the_block_the_prompt_opens(name, close, fields) -> None:
    plan = _render(_tmpl(name), **fields).plan
    assert plan.thinking_forced_open
    c = plan.constraint
    assert c.think_close == close  # the answer after the family's closing tag, as the forced tool call's
    assert attrs.evolve(c, think_close="") == constraint_from_request(ChatCompletionRequest(
        messages=ASK, **fields)).constraint  # the request's own constraint, behind the reasoning
    vocab = ByteVocab()  # the tag as text here; the engine writes it in the model's tokens (test_after_reasoning_*)
    g = c.after((close,)).grammar
    assert vocab.accepts(g, f'The user wants 4 as JSON.\n{close}\n\n{{"answer": 4}}')
    n = len(f"So 4.{close}")
    assert vocab.refused_at(g, f'So 4.{close}{{"answer": "four"}}') == n + len('{"answer": ')
    assert vocab.refused_at(g, f"So 4.{close}4") == n
    assert not vocab.accepts(g, '{"answer": 4}')  # JSON with no closing tag is reasoning still


@pytest.mark.parametrize("name,fields", [
    (None, {}),  # ChatML: no thinking block
    ("ByteDance-Seed-OSS.jinja", {}),  # thinks, but its generation prompt opens no block
    ("Qwen-Qwen3-0.6B.jinja", {}),
    ("Qwen3.5-4B.jinja", {"enable_thinking": False}),  # the template closes the block itself
    ("Qwen3.5-4B.jinja", {"reasoning_format": "none"}),  # llama.cpp: the grammar from the first token
    ("Qwen3.5-4B.jinja", {"messages": [*ASK, Message("assistant", "{")]}),  # a prefill: the block closed first
])
def test_a_constraint_outside_an_open_block_is_the_requests_own(name, fields) -> None:
    request = ChatCompletionRequest(**{"messages": ASK, **JSON_ANSWER, **fields})
    plan = render_chat(_tmpl(name), request).plan
    assert plan.constraint == constraint_from_request(request).constraint
    assert plan.constraint.think_close == ""


def test_the_grammar_field_and_a_forced_tool_call_stay_as_they_were() -> None:
    tmpl = _tmpl("Qwen3.5-4B.jinja")
    lark = '%llguidance {}\nstart: "a"'  # llama-server's grammar field is the whole output, as llama.cpp takes it
    assert _render(tmpl, grammar=lark).plan.constraint == constraint_from_request(
        ChatCompletionRequest(messages=ASK, grammar=lark)).constraint
    assert _render(tmpl, grammar='root ::= "a"').plan.grammar == 'root ::= "a"'
    forced = _render(tmpl, tools=[WEATHER], tool_choice="required", **JSON_ANSWER).plan  # the call wins
    assert forced.constraint is None and "</think>" in forced.grammar
