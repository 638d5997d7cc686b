"""Template capabilities (probe rendering), format choice, and history normalisation."""

from __future__ import annotations

import copy

import attrs
import pytest

from skippy.engine.chat.capabilities import TemplateCaps, detect_caps, prompt_opens_thinking, thinking_opener
from skippy.engine.chat.formats import FORMATS
from skippy.engine.chat.history import normalize_history
from skippy.engine.chat.templates import ChatTemplate
from skippy.engine.errors import InvalidRequest
from tests.paths import CHAT_TEMPLATES

FIXTURES = CHAT_TEMPLATES
TEMPLATE_FILES = sorted(FIXTURES.glob("*.jinja"))

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name."}},
                   "required": ["city"]}}}
CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in"}, {"type": "text", "text": "Paris?"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "abc123def", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather", "content": "sunny"},
]


_CACHE: dict[str, tuple[ChatTemplate, TemplateCaps]] = {}


def load(name: str) -> tuple[ChatTemplate, TemplateCaps]:
    if name not in _CACHE:
        template = ChatTemplate((FIXTURES / name).read_text(), bos_token="<s>", eos_token="</s>")
        _CACHE[name] = template, detect_caps(template)
    return _CACHE[name]


def test_fixtures_present():
    assert len(TEMPLATE_FILES) >= 70


@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.stem)
def test_detect_caps_never_raises_and_renders_tools(path):
    template, caps = load(path.name)
    assert isinstance(caps, TemplateCaps)
    assert caps.chat_format in FORMATS
    if caps.thinking_forced_open:
        assert caps.supports_thinking
    if caps.supports_tools:
        prompt = template.render([{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])
        assert "get_weather" in prompt
        # a whole tool-call conversation, normalised as the engine does, also renders
        # (unless the template rejects the roles themselves, e.g. strict alternation)
        messages = normalize_history(CONVERSATION, caps)
        if not caps.supports_system_role:
            messages = messages[1:]
        prompt = template.render(messages, tools=[WEATHER])
        assert "get_weather" in prompt


EXPECTED_FORMATS = {
    "Qwen-Qwen2.5-7B-Instruct": "hermes_2_pro",
    "Qwen-Qwen3-0.6B": "hermes_2_pro",
    "Qwen-QwQ-32B": "hermes_2_pro",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes_2_pro",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes_2_pro",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3_json",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3_json",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3_json",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral_nemo",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral_small_3_2",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek_r1",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek_r1",
    "llama-cpp-deepseek-r1": "deepseek_r1",
    "deepseek-ai-DeepSeek-V3.1": "deepseek_v3_1",
    "meetkai-functionary-medium-v3.2": "functionary_v3_2",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command_r7b",
    "GLM-4.6": "glm_4_5",
    "GLM-4.7-Flash": "glm_4_5",
    "Qwen3-Coder": "qwen3_coder",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen3_coder",
    "ByteDance-Seed-OSS": "seed_oss",
    "openai-gpt-oss-120b": "gpt_oss",
    "moonshotai-Kimi-K2": "kimi_k2",
    "Kimi-K2-Instruct": "kimi_k2",
    "Kimi-K2-Thinking": "kimi_k2",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "ibm-granite-granite-4.0": "hermes_2_pro",
    "ibm-granite-granite-4.1": "hermes_2_pro",
    "NVIDIA-Nemotron-Nano-v2": "nemotron_v2",
    "Apertus-8B-Instruct": "apertus",
    "LFM2-8B-A1B": "lfm2",
    "LFM2.5-8B-A1B": "lfm2",
    "LFM2.5-Instruct": "lfm2",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral_small_3_2",
    # issue 41: late-2026 agent families
    "deepseek-ai-DeepSeek-V3.2": "deepseek_v3_2",
    "deepseek-ai-DeepSeek-V4": "deepseek_v4",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "deepseek_v4",
    "MiniMax-M2": "minimax_m2",
    "MiniMax-M3": "minimax_m3",
    "Kimi-K3": "kimi_k3",
    "openbmb-MiniCPM5-1B": "minicpm5",
    "Qwen3.5-4B": "qwen3_coder",
    "StepFun3.5-Flash": "qwen3_coder",
    "inclusionai-ling-3.0-flash": "ling_3",
    "Cohere2MoE": "command_r7b",
    "google-gemma-4-31B-it": "gemma4",
    "google-gemma-4-31B-it-interleaved": "gemma4",
    "GigaChat3-10B-A1.8B": "gigachat3",
    "GigaChat3.1-10B-A1.8B": "gigachat3_1",
    "CohereForAI-c4ai-command-r-plus-tool_use": "command_r_plus",
    "meetkai-functionary-medium-v3.1": "functionary_v3_1",
    "fireworks-ai-llama-3-firefunction-v2": "firefunction_v2",
    "unsloth-Apriel-1.5": "apriel",
    "Apriel-1.6-15b-Thinker-fixed": "apriel",
    "muse-glimmer": "muse_glimmer",
    "tencent-Hy3": "hy3",
    "upstage-Solar-Open-100B": "solar_open",
    "google-gemma-2-2b-it": "content_only",
    "microsoft-Phi-3.5-mini-instruct": "content_only",
}


@pytest.mark.parametrize("stem,fmt", sorted(EXPECTED_FORMATS.items()))
def test_format_chosen_from_rendered_markers(stem, fmt):
    assert load(stem + ".jinja")[1].chat_format == fmt


def test_format_detection_ignores_file_names(tmp_path):
    source = (FIXTURES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    caps = detect_caps(ChatTemplate(source))
    assert caps.chat_format == "hermes_2_pro"  # no name given at all


def test_specific_capabilities():
    qwen25 = load("Qwen-Qwen2.5-7B-Instruct.jinja")[1]
    assert qwen25.supports_tools and qwen25.supports_system_role and qwen25.supports_parallel_tool_calls
    assert qwen25.requires_object_arguments  # renders arguments with | tojson
    assert not qwen25.supports_thinking and not qwen25.thinking_forced_open
    qwen3 = load("Qwen-Qwen3-0.6B.jinja")[1]
    assert qwen3.supports_thinking and not qwen3.thinking_forced_open
    assert not qwen3.requires_object_arguments  # copies string arguments verbatim
    assert load("Qwen-QwQ-32B.jinja")[1].thinking_forced_open
    assert load("llama-cpp-deepseek-r1.jinja")[1].thinking_forced_open
    assert load("mistralai-Mistral-Nemo-Instruct-2407.jinja")[1].supports_tool_call_ids
    # Mistral's templates raise on ids other than 9 alphanumeric characters; no other fixture does
    assert [p.name for p in TEMPLATE_FILES if load(p.name)[1].requires_short_call_ids] == [
        "Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja"]
    gemma2 = load("google-gemma-2-2b-it.jinja")[1]
    assert not gemma2.supports_system_role and not gemma2.supports_tools
    assert load("meetkai-functionary-medium-v3.2.jinja")[1].requires_object_arguments is False



@pytest.mark.parametrize("name,native", [
    ("google-gemma-4-31B-it.jinja", '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'),
    ("Kimi-K3.jinja", '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'),
])
def test_a_template_that_reads_objects_in_its_own_syntax_gets_objects(name, native):
    """Gemma 4 and Kimi K3 copy a string argument as it is (JSON in the model's history, which it then imitates)
    but write an object in their own call syntax: such templates get objects, as llama.cpp gives objects to a
    template that reads their keys."""
    from skippy.engine.chat.prepare import PreparedTemplate, render_chat
    from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message

    assert load(name)[1].requires_object_arguments
    call = {"id": "call_a1b2c3d4e", "type": "function", "function": {"name": "get_weather",
                                                                      "arguments": '{"city": "Paris"}'}}
    messages = [Message("user", "Weather?"), Message("assistant", "", tool_calls=[call]),
                Message("tool", "sunny", tool_call_id="call_a1b2c3d4e"), Message("user", "Thanks")]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    prompt = render_chat(PreparedTemplate.build((FIXTURES / name).read_text()),
                         ChatCompletionRequest(messages=messages, tools=tools)).prompt
    assert native in prompt and '{"city": "Paris"}' not in prompt

def test_broken_template_source_gives_plain_caps():
    caps = detect_caps(ChatTemplate("{{ raise_exception('nope') }}"))
    assert caps == TemplateCaps()


def test_prompt_opens_thinking():
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert prompt_opens_thinking("<|CHATBOT_TOKEN|><|START_THINKING|>")
    assert thinking_opener("<|im_start|>assistant\n<think>\n") == "<think>\n"
    assert thinking_opener("<|im_start|>assistant\n<think>\n\n</think>\n\n") == ""


# ---------------------------------------------------------------- history

OBJ = TemplateCaps(requires_object_arguments=True)
STR = TemplateCaps(requires_object_arguments=False)


def test_history_string_arguments_become_objects_when_required():
    before = copy.deepcopy(CONVERSATION)
    out = normalize_history(CONVERSATION, OBJ)
    assert CONVERSATION == before, "input is not mutated"
    assert out[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert out[2]["content"] == ""
    assert out[1]["content"] == "Weather in\nParis?"
    kept = normalize_history(CONVERSATION, STR)
    assert kept[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert out[2] is not CONVERSATION[2] and out[2]["tool_calls"][0] is not CONVERSATION[2]["tool_calls"][0]


@pytest.mark.parametrize("caps", [OBJ, STR])
def test_history_invalid_arguments_json_names_message_index(caps):
    messages = copy.deepcopy(CONVERSATION)
    messages[2]["tool_calls"][0]["function"]["arguments"] = "{"
    with pytest.raises(InvalidRequest) as info:
        normalize_history(messages, caps)
    assert "messages[2]" in info.value.message
    assert info.value.param == "messages[2].tool_calls[0].function.arguments"
    assert info.value.status == 400


def test_history_non_text_part_is_400():
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(InvalidRequest) as info:
        normalize_history(messages, STR)
    assert "messages[0]" in info.value.message
    messages = [{"role": "user", "content": ["a", {"type": "text", "text": "b"}, {"type": "input_audio"}]}]
    with pytest.raises(InvalidRequest) as info:
        normalize_history(messages, STR)
    assert info.value.message == ("messages[0].content[2]: content part type 'input_audio' is not supported "
                                  "(only 'text')")
    assert info.value.param == "messages[0].content[2]"
    for part in ({"type": "text"}, {"type": "text", "text": 5}):  # a text part without its string: says so
        with pytest.raises(InvalidRequest) as info:
            normalize_history([{"role": "user", "content": ["a", part]}], STR)
        assert info.value.message == "messages[0].content[1].text: a text part needs a 'text' string"
        assert info.value.param == "messages[0].content[1].text"
    ok = normalize_history([{"role": "user", "content": ["a", {"type": "text", "text": "b"}]}], STR)
    assert ok[0]["content"] == "a\nb"


@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.stem)
def test_a_system_message_in_mid_conversation_reaches_the_prompt_with_every_template(path):
    """OpenAI clients and Anthropic's mid-conversation system messages (Claude Code) put a system message after
    the conversation has begun. Templates that raise on one (Qwen 3.5, Mistral's alternation) or drop it
    (gpt-oss, MiniMax) get it folded into a user message (``System: ...``); the others render it where it
    stands. A template with no system role at all (Gemma 2) gets the leading one in the first user message,
    as llama.cpp's polyfill does."""
    import msgspec

    from skippy.engine.chat.prepare import PreparedTemplate, render_chat
    from skippy.engine.protocols.openai.types import ChatCompletionRequest

    template, caps = load(path.name)
    tmpl = PreparedTemplate.build(path.read_text(), bos_token="<s>", eos_token="</s>")
    req = msgspec.convert({"messages": [
        {"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"}, {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Go"}]}, ChatCompletionRequest)
    prompt = render_chat(tmpl, req).prompt  # Gemma 2 has no system role: the first user message carries it
    assert "Answer in French." in prompt and "You are helpful." in prompt
    assert ("You are helpful.\nHi" in prompt) == (not caps.supports_system_role)
    assert prompt.index("Hi") < prompt.index("Answer in French.") < prompt.rindex("Go")
    assert ("System: Answer in French." in prompt) == (not caps.supports_late_system)


@pytest.mark.parametrize("name", ["mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                  "Mistral-Small-3.2-24B-Instruct-2506.jinja"])
def test_other_servers_call_ids_are_shortened_for_mistrals_templates(name):
    # an OpenAI id, an Anthropic client's toolu_ id, Ollama's call_0_0: each the same 9 characters in its call and
    # its result, so the template renders (it raised "Tool call IDs should be alphanumeric strings with length 9!")
    template, caps = load(name)
    for given in ("call_3f2a9c0d1e4b5a6978c0d1e2", "toolu_01A09q90qw90lq917835lq9", "call_0_0"):
        convo = copy.deepcopy(CONVERSATION)
        convo[2]["tool_calls"][0]["id"] = convo[3]["tool_call_id"] = given
        with pytest.raises(InvalidRequest):  # the template's raise_exception
            template.render(normalize_history(convo, attrs.evolve(caps, requires_short_call_ids=False)),
                            tools=[WEATHER])
        out = normalize_history(convo, caps)
        short = out[2]["tool_calls"][0]["id"]
        assert len(short) == 9 and short.isalnum() and out[3]["tool_call_id"] == short
        assert convo[3]["tool_call_id"] == given  # the input is not mutated
        assert short in template.render(out, tools=[WEATHER])
    assert normalize_history(CONVERSATION, caps)[3]["tool_call_id"] == "abc123def"  # a 9-character id stays


def test_short_call_ids_are_nine_alphanumerics_and_digests_are_stable():
    from skippy.engine.chat.formats.base import new_short_call_id, short_call_id

    ids = {new_short_call_id() for _ in range(200)}
    assert len(ids) == 200 and all(len(i) == 9 and i.isascii() and i.isalnum() for i in ids)
    assert short_call_id("call_x") == short_call_id("call_x") != short_call_id("call_y")
    assert short_call_id("abc123def") == "abc123def" and len(short_call_id("\ud800é")) == 9


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_an_assistant_messages_reasoning_reaches_templates_under_either_name(field):
    # vLLM and OpenRouter call it "reasoning", llama-server "reasoning_content"; Solar Open's template reads only
    # the first, most others only the second: the reasoning of a sent-back turn was dropped silently
    from skippy.engine.protocols.openai.types import Message, message_dicts

    history = [Message("user", "Q1"), Message("assistant", "A1", **{field: "RNEEDLE"}), Message("user", "Q2"),
               Message("assistant", "A2", **{field: "RNEEDLE"})]
    for name in ("upstage-Solar-Open-100B.jinja", "Qwen3.5-4B.jinja", "Kimi-K3.jinja"):
        template, caps = load(name)
        rendered = template.render(normalize_history(message_dicts(history), caps), add_generation_prompt=False)
        assert 1 <= rendered.count("RNEEDLE") <= 2, name  # rendered, once per turn at most


def test_a_template_that_reads_reasoning_under_its_other_name_supports_thinking():
    # Solar Open renders only an assistant message's `reasoning`: the probe gave it `reasoning_content` alone, and
    # the template was taken for one without thinking (Ollama's `think` was refused, /api/show left it out)
    caps = load("upstage-Solar-Open-100B.jinja")[1]
    assert caps.supports_thinking and caps.supports_tools and not caps.thinking_forced_open
