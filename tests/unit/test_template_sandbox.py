"""The bounded template sandbox: injection payloads are refused fast; real templates render as before."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2.sandbox
import pytest

from skippy.engine.chat import templates as T
from skippy.engine.chat.sandbox import BudgetExceeded
from skippy.engine.chat.templates import ChatTemplate, TemplateError, _described_parameters
from tests.paths import CHAT_TEMPLATES

FIXTURES = CHAT_TEMPLATES
USER = [{"role": "user", "content": "hi"}]

# Each of these would run for minutes, allocate gigabytes, or reach Python internals.
RUNAWAY = {
    "nested_loops": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
    "string_repeat": "{{ 'a' * 1000000000 }}",
    "namespace_doubling": "{% set ns = namespace(x='a') %}{% for i in range(64) %}{% set ns.x = ns.x ~ ns.x %}"
                          "{% endfor %}{{ ns.x | length }}",
    "aliased_list_doubling": "{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}"
                             "{% endfor %}{{ ns.x | tojson }}",
    "huge_power": "{{ 9 ** (9 ** 9) }}",
    "printf_width": "{{ '%999999999s' % 'x' }}",
    "format_filter_star": "{{ '%*s' | format(1000000000, 'x') }}",
    "center": "{{ 'x' | center(1000000000) }}",
    "ljust": "{{ 'x'.ljust(1000000000) }}",
    "str_format_width": "{{ '{:>1000000000}'.format('x') }}",
    "replace_blowup": "{{ ('a' * 100000) | replace('', 'b' * 100000) }}",
    "join_blowup": "{{ (['a' * 100000] * 100000) | join }}",
    "batch_fill": "{{ range(10) | batch(1000000000, 'x') | list }}",
    "slice_parts": "{{ range(10) | slice(1000000000) | list }}",
    "exponential_macro": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% else %}x{% endif %}"
                         "{% endmacro %}{{ f(60) }}",
    "recursive_loop": "{% for x in range(100000) recursive %}{{ loop(range(100000)) }}{% endfor %}",
    "to_bytes": "{{ (1).to_bytes(1000000000, 'big') }}",
    "output_flood": "{% for i in range(100000) %}{{ 'a' * 100000 }}{% endfor %}",
    "big_compares": "{% set a = 'a' * 10000000 %}{% set b = 'a' * 10000000 %}"
                    "{% for i in range(100000) %}{% if a == b %}{% endif %}{% endfor %}",
    "sum_of_lists": "{{ range(100000) | map('string') | map('list') | sum(start=[]) }}",
    "tojson_indent": "{{ (range(100000) | list) | tojson(indent=100000) }}",
    "deep_parens": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
}

INJECTION = {
    "cycler_globals": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "self_globals": "{{ self.__init__.__globals__ }}",
    "namespace_globals": "{{ namespace.__init__.__globals__ }}",
    "config_items": "{{ config.items() }}",
    "config_walk": "{{ config.__class__.__init__.__globals__['os'].environ }}",
    "request_builtins": "{{ request.application.__globals__.__builtins__.open('/etc/passwd').read() }}",
    "include_file": "{% include '/etc/passwd' %}",
    "import_module": "{% import 'os' as os %}{{ os }}",
    "lipsum_globals": "{{ lipsum.__globals__['os'].environ }}",
    "raise_exception_globals": "{{ raise_exception.__globals__ }}",
    "subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "strftime_globals": "{{ strftime_now.__globals__.os.environ }}",
    "format_attribute": "{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}",
    "attr_filter": "{{ cycler | attr('__init__') | attr('__globals__') }}",
    "map_attribute": "{{ [cycler] | map(attribute='__init__') | list }}",
    "type_mro": "{{ messages.__class__.mro() }}",
}


@pytest.mark.parametrize("name", sorted(RUNAWAY))
def test_runaway_templates_refused_fast(name: str) -> None:
    with pytest.raises(TemplateError) as ei:
        ChatTemplate(RUNAWAY[name]).render(USER)
    assert ei.value.status == 400
    # fast: stopped by the op and size accounting, never by the wall-clock limit (max_seconds)
    assert "render time" not in ei.value.message
    assert not (isinstance(ei.value.__cause__, BudgetExceeded) and ei.value.__cause__.kind == "time")


@pytest.mark.parametrize("name", sorted(INJECTION))
def test_injection_payloads_refused(name: str) -> None:
    with pytest.raises(TemplateError) as ei:
        ChatTemplate(INJECTION[name]).render(USER)
    message = ei.value.message
    assert "<function" not in message and "<class" not in message and "root:" not in message


def test_runaway_template_is_refused_at_once_afterwards() -> None:
    tmpl = ChatTemplate(RUNAWAY["nested_loops"])
    with pytest.raises(TemplateError) as first:
        tmpl.render(USER)
    tmpl._template = None  # at once: a runaway is never rendered (nor metered) again
    for _ in range(20):  # e.g. the capability probes of a request template
        with pytest.raises(TemplateError, match="exceeded its budget") as again:
            tmpl.render(USER)
        assert again.value.message == first.value.message


def test_budget_scales_with_input() -> None:
    # A linear template over a big conversation is not a runaway, and it stays usable afterwards.
    src = "{% for m in messages %}{% for c in m.content %}{{ c }}{% endfor %}{% endfor %}"
    tmpl = ChatTemplate(src)
    messages = [{"role": "user", "content": "abcdefgh" * 1000} for _ in range(100)]  # 800k loop iterations
    assert len(tmpl.render(messages)) == 800_000
    assert tmpl.render(USER) == "hi"


def test_mutating_methods_stay_undefined_like_transformers() -> None:
    # jinja2's immutable sandbox makes list.append undefined; calling it is the error
    assert ChatTemplate("{{ messages.append is defined }}").render(USER) == "False"
    with pytest.raises(TemplateError):
        ChatTemplate("{{ messages.append(1) }}").render(USER)


def test_template_made_lists_and_dicts_are_mutable_inputs_are_not():
    # llama.cpp's engine allows ns.ids.append(...) (Kimi K2's template); transformers refuses every mutation.
    # Ours: the template's own literals may change, the caller's data may not.
    source = ("{% set ns = namespace(ids=[]) %}{% set d = {} %}{% for m in messages %}"
              "{% set _ = ns.ids.append(m.role) %}{% set _ = d.update({m.role: loop.index}) %}{% endfor %}"
              "{{ ns.ids.pop(0) }} {{ ns.ids }} {{ d | tojson }}")
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert ChatTemplate(source).render(messages) == "user ['assistant'] {\"user\": 1, \"assistant\": 2}"
    with pytest.raises(TemplateError, match="unsafe"):
        ChatTemplate("{% set _ = messages[0].update({'role': 'x'}) %}").render(messages)
    with pytest.raises(TemplateError, match="unsafe"):
        ChatTemplate("{% set x = messages + [] %}{{ messages.append(1) }}").render(messages)
    assert messages[0] == {"role": "user", "content": "a"}


def test_template_made_list_growth_is_metered():
    source = "{% set x = [] %}{% for i in range(100000) %}{% set _ = x.extend(range(100000)) %}{% endfor %}"
    with pytest.raises(TemplateError, match="operations"):
        ChatTemplate(source).render([])


def test_render_without_tools_falls_back_to_tools_undefined_where_transformers_fails():
    # tools undefined (not None) when there are none, as llama.cpp: "for tool in tools" loops over nothing
    assert ChatTemplate("{% for t in tools %}x{% endfor %}ok").render([]) == "ok"
    # a template that renders with tools=None is rendered as transformers does (None, not undefined)
    assert ChatTemplate("{{ tools is none }}").render([]) == "True"
    with pytest.raises(TemplateError, match="nope"):
        ChatTemplate("{{ raise_exception('nope') }}").render([])
    with pytest.raises(TemplateError):  # with tools given, no retry
        ChatTemplate("{% for t in tools %}{{ t.nope + 1 }}{% endfor %}").render([], tools=[{"type": "function"}])


def _plain_environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", T._GenerationTag])
    env.filters["tojson"] = T._tojson
    env.globals["raise_exception"] = T._raise_exception
    env.globals["strftime_now"] = T._strftime_now
    return env


TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}} for i in range(3)]


def _conversation(n: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are helpful."}]
    for i in range(n):
        messages += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    return messages + [{"role": "user", "content": "last"}]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jinja")), ids=lambda p: p.stem)
def test_real_templates_render_as_in_plain_sandbox(path: Path) -> None:
    source = path.read_text()
    plain = _plain_environment().from_string(source)
    ours = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    for tools in (None, TOOLS):
        # llama.cpp's extra variables, fixed so both renders see the same (FireFunction: tools as ``functions``)
        context = dict(messages=_conversation(20), tools=tools, add_generation_prompt=True,
                       date_string="01 Dec 2026", datetime="Dec 01 2026 12:00:00 GMT")
        plain_context = dict(context)
        if ours.firefunction:
            plain_context.update(tools=None, functions=json.dumps(tools, indent=2, ensure_ascii=False) if tools else "")
        try:
            expected = plain.render(bos_token="<s>", eos_token="</s>", **plain_context)
        except Exception:  # noqa: BLE001 - transformers refuses it: we retry with tools undefined, as llama.cpp
            fallback = {k: v for k, v in plain_context.items() if not (k == "tools" and v is None)}
            try:
                expected = plain.render(bos_token="<s>", eos_token="</s>", **fallback)
            except Exception:  # noqa: BLE001 - the template refuses this input in both environments
                try:  # ours fills in the parameters' descriptions a template reads unguarded (Command R+)
                    described = _described_parameters(tools) if tools else None
                    expected = plain.render(bos_token="<s>", eos_token="</s>",
                                            **{**plain_context, "tools": described}) if described else None
                except Exception:  # noqa: BLE001 - refused for another reason
                    expected = None
                if expected is None:
                    with pytest.raises(TemplateError):
                        ours.render(**context)
                    continue
        assert ours.render(**context) == expected
