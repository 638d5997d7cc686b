"""Chat templates rendered like transformers' apply_chat_template (sans-IO)."""

import datetime
import json

import pytest

from skippy.engine.chat.templates import ChatTemplate, TemplateError
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.wire import ErrorEnvelope
from tests.paths import CHAT_TEMPLATES

FIXTURES = CHAT_TEMPLATES
USER = [{"role": "user", "content": "NEEDLE ünïcödé 日本 😀"}]


def render(src: str, messages=USER, **kw) -> str:
    return ChatTemplate(src).render(messages, **kw)


def template_error(src: str, messages=USER, **kw) -> TemplateError:
    with pytest.raises(TemplateError) as ei:
        ChatTemplate(src).render(messages, **kw)
    err = ei.value
    assert isinstance(err, InvalidRequest)
    assert err.status == 400
    assert ErrorEnvelope.of(err)["error"]["type"] == "invalid_request_error"
    assert ErrorEnvelope.of(err)["error"]["code"] == "template_error"
    return err


# --- environment ---------------------------------------------------------------


def test_tojson_keeps_non_ascii():
    out = render("{{ messages[0] | tojson }}")
    assert "日本" in out and "😀" in out and "ünïcödé" in out
    assert "\\u" not in out
    assert json.loads(out) == USER[0]


def test_tojson_arguments():
    assert render("{{ {'b': 1, 'a': [1, 2]} | tojson(indent=2) }}") == '{\n  "b": 1,\n  "a": [\n    1,\n    2\n  ]\n}'
    assert render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}") == '{"a": 2, "b": 1}'
    assert render("{{ {'a': 1} | tojson(separators=(',', ':')) }}") == '{"a":1}'
    assert render("{{ 'é' | tojson(ensure_ascii=true) }}") == '"\\u00e9"'


def test_tojson_output_is_not_html_escaped():
    assert render("{{ '<a&b>' | tojson }}") == '"<a&b>"'


def test_raise_exception_carries_template_message():
    err = template_error("{{ raise_exception('Only user and assistant roles are supported!') }}")
    assert "Only user and assistant roles are supported!" in err.message


def test_raise_exception_from_real_template():
    src = (FIXTURES / "google-gemma-2-2b-it.jinja").read_text()
    err = template_error(src, [{"role": "system", "content": "s"}, *USER])
    assert "System role not supported" in err.message
    err = template_error(src, [*USER, *USER])
    assert "Conversation roles must alternate" in err.message


def test_undefined_variable_attribute_is_template_error():
    err = template_error("{{ nothing.here }}")
    assert "nothing" in err.message
    err = template_error("{{ messages[0].missing.deeper }}")
    assert "missing" in err.message


def test_an_item_of_an_empty_list_is_named_so():
    """Gemma 2's template reads ``messages[0]``: with no message before a continued assistant one, jinja says
    "list object has no element 0", and the error said "the template reads, which ..." with nothing named."""
    err = template_error("{{ messages[0]['role'] }}", [])
    assert "reads item 0 of a list, which this request does not have" in err.message


def test_undefined_alone_renders_empty():
    # jinja2 default Undefined: printing it is fine (transformers behaves the same)
    assert render("[{{ not_defined }}]") == "[]"


def test_python_errors_while_rendering_are_template_errors():
    template_error("{{ 1 / 0 }}")
    template_error("{{ messages[5]['content'] }}")
    template_error("{% for x in none_var %}{% endfor %}{{ 1 + 'a' }}")


def test_compile_error_is_template_error():
    with pytest.raises(TemplateError) as ei:
        ChatTemplate("{% if %}")
    assert ei.value.status == 400
    assert "compile" in ei.value.message


def test_generation_tag_renders_body():
    src = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
           "A:{{ m.content }}{% endgeneration %}{% else %}U:{{ m.content }}{% endif %}|{% endfor %}")
    out = render(src, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert out == "U:q|A:a|"


def test_generation_tag_scope_sees_outer_variables():
    src = "{% set x = 'outer' %}{% generation %}{{ x }}-{{ messages | length }}{% endgeneration %}"
    assert render(src) == "outer-1"


def test_loopcontrols_break_and_continue():
    src = ("{% for m in messages %}{% if m.content == 'stop' %}{% break %}{% endif %}"
           "{% if m.content == 'skip' %}{% continue %}{% endif %}{{ m.content }},{% endfor %}")
    msgs = [{"role": "user", "content": c} for c in ["a", "skip", "b", "stop", "c"]]
    assert render(src, msgs) == "a,b,"


def test_trim_blocks_and_lstrip_blocks():
    src = "    {% if true %}\nX\n    {% endif %}\nY"
    assert render(src) == "X\nY"


def test_strftime_now_global():
    out = render("{{ strftime_now('%Y') }}")
    assert out == str(datetime.datetime.now().year) or out == str(datetime.datetime.now().year - 1)


def test_context_variables():
    src = ("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools | tojson }}|"
           "{{ enable_thinking }}")
    t = ChatTemplate(src, bos_token="<s>", eos_token="</s>")
    assert t.render(USER, add_generation_prompt=False, enable_thinking=True) == "<s>|</s>|False|null|True"
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert t.render(USER, tools=tools).split("|")[3] == json.dumps(tools)


# --- sandbox -------------------------------------------------------------------


@pytest.mark.parametrize("src", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ raise_exception.__globals__['json'] }}",
    "{{ messages[0].__class__.__base__.__subclasses__() }}",
])
def test_sandbox_refuses_attribute_walking(src):
    err = template_error(src)
    assert "unsafe" in err.message or "undefined" in err.message


@pytest.mark.parametrize("src", [
    "{{ messages.append({'role': 'x'}) }}",
    "{{ messages[0].update({'content': 'x'}) }}",
    "{{ messages.pop() }}",
])
def test_immutable_sandbox_refuses_mutation(src):
    msgs = [dict(m) for m in USER]
    template_error(src, msgs)
    assert msgs == USER


def test_security_error_is_mapped_to_template_error():
    import jinja2.exceptions

    err = template_error("{{ ''.__class__.__mro__ }}")
    assert isinstance(err.__cause__, jinja2.exceptions.SecurityError)
    err = template_error("{{ '{0.__class__.__mro__}'.format(1) }}")
    assert isinstance(err.__cause__, jinja2.exceptions.SecurityError)


def test_sandbox_range_limit_is_template_error():
    err = template_error("{{ range(10 ** 7) | length }}")
    assert "a number too large" in err.message


def test_sandbox_never_leaks_python_object_reprs():
    # underscore attributes are refused outright (not rendered as empty), never resolved to the real object
    err = template_error("{{ ''.__class__ }}")
    assert "class '" not in err.message and "unsafe" in err.message


# --- real templates ------------------------------------------------------------


@pytest.mark.parametrize("name,before,after", [
    ("Qwen-Qwen2.5-7B-Instruct", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
    ("meta-llama-Llama-3.1-8B-Instruct", "<|start_header_id|>user<|end_header_id|>\n\n",
     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("HuggingFaceTB-SmolLM3-3B", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
    ("google-gemma-2-2b-it", "<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "[INST]", "[/INST]"),
    ("microsoft-Phi-3.5-mini-instruct", "<|user|>\n", "<|end|>\n<|assistant|>\n"),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "<｜User｜>", "<｜Assistant｜>"),
    ("openai-gpt-oss-120b", None, None),
    ("ibm-granite-granite-3.3-2B-Instruct", None, None),
    ("Cohere2MoE", None, None),
])
def test_fixture_template_renders_user_message(name, before, after):
    t = ChatTemplate((FIXTURES / f"{name}.jinja").read_text(), bos_token="<s>", eos_token="</s>")
    text = USER[0]["content"]
    out = t.render(USER, add_generation_prompt=True)
    assert out.count(text) == 1
    if before is not None:
        assert before + text + after in out
        if name not in ("mistralai-Mistral-Nemo-Instruct-2407", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"):
            assert out.endswith(after)  # the generation prompt ends the text
    # without the generation prompt the message is still there, and the prompt is no longer
    out2 = t.render(USER, add_generation_prompt=False)
    assert text in out2
    assert len(out2) <= len(out)


def test_fixture_multi_turn_order():
    t = ChatTemplate((FIXTURES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text())
    out = t.render([{"role": "system", "content": "SYS"}, {"role": "user", "content": "U1"},
                    {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}])
    assert out == ("<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
                   "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
                   "<|im_start|>assistant\n")
