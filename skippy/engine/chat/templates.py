"""Chat templates rendered with jinja2 the way Hugging Face transformers does.

Environment: ``jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)`` with the ``loopcontrols`` extension, a ``tojson``
filter that keeps non-ASCII characters, and the ``raise_exception`` and
``strftime_now`` globals (transformers ``chat_template_utils``).
Any error raised while rendering becomes :class:`TemplateError`, which the
engine reports as a 400 carrying the template's own message.

The environment is :class:`~skippy.engine.chat.sandbox.BoundedSandbox`,
an immutable sandbox that also bounds each render's work, time and memory
(:class:`~skippy.engine.chat.sandbox.RenderBudget`): a template can be a
request field, and template-injection payloads (attribute walking to
``__class__``/``__globals__``, runaway loops, giant strings) are refused
with a :class:`TemplateError` (400) within a bounded render time.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

from skippy.engine.chat.sandbox import BoundedSandbox, BudgetExceeded, Meter, RenderBudget
from skippy.engine.errors import InvalidRequest

#: what a Python exception raised while rendering means, in words (error messages carry no Python text)
_PLAIN: dict[type, str] = {
    TypeError: "an operation on a value of the wrong type", ValueError: "an invalid value",
    KeyError: "a missing key", IndexError: "an index out of range", AttributeError: "a missing attribute",
    ZeroDivisionError: "a division by zero", OverflowError: "a number too large",
    RecursionError: "recursion too deep", MemoryError: "out of memory", UnicodeError: "invalid text encoding",
}


class TemplateError(InvalidRequest):
    """400: the chat template raised or could not be compiled."""

    code = "template_error"


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers' AssistantTracker).

    transformers uses the block to mark assistant tokens for training masks;
    for inference it renders its body unchanged.
    """

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # transformers: json.dumps(x, ensure_ascii=False, indent=indent, separators=..., sort_keys=...)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def llama_cpp_variables(now: datetime.datetime) -> dict[str, str]:
    """The extra template variables llama.cpp's chat code supplies (``common/chat.cpp``), for ``now``.

    ``date_string`` (Llama 3.x templates, e.g. ``"26 Jul 2024"``: ``%d %b %Y``) and ``datetime``
    (FireFunction v2: ``%b %d %Y %H:%M:%S GMT``). Request or ``--chat-template-kwargs`` variables of
    the same name override them.
    """
    return {"date_string": now.strftime("%d %b %Y"), "datetime": now.strftime("%b %d %Y %H:%M:%S GMT")}


def make_environment(budget: RenderBudget | None = None) -> BoundedSandbox:
    """The jinja2 environment of transformers' ``apply_chat_template``, with a render budget."""
    env = BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _GenerationTag],
        budget=budget,
    )
    env.filters["tojson"] = env.wrap_filter("tojson", _tojson)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = make_environment()


class ChatTemplate:
    """A compiled chat template plus the special-token strings it may use.

    ``source`` is the jinja2 text (GGUF ``tokenizer.chat_template``, a file
    or a request's ``chat_template``). Raises :class:`TemplateError` when it
    does not compile.
    """

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._runaway: str | None = None
        #: FireFunction v2 (llama.cpp detects it by `` functools[``): tools are given as ``functions`` text
        self.firefunction = " functools[" in source
        try:
            self._template = _ENV.compile_template(source)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template does not compile: {exc}") from exc
        except (RecursionError, SyntaxError, MemoryError, ValueError, OverflowError, TypeError) as exc:
            raise TemplateError(f"chat template does not compile: {type(exc).__name__}: {exc}") from exc

    def render(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """Render ``messages`` (OpenAI message dicts) to prompt text.

        ``tools`` is the OpenAI ``tools`` array or ``None`` (for FireFunction v2 templates it goes in as
        ``functions``, JSON text indented by 2, as llama.cpp gives it); extra keyword
        arguments (``enable_thinking``, ``chat_template_kwargs`` entries...)
        become template variables, beside llama.cpp's :func:`llama_cpp_variables`.
        Raises :class:`TemplateError` with the template's own message when rendering fails, or when the render goes
        over its budget (operations, time, size: see
        :class:`~skippy.engine.chat.sandbox.RenderBudget`). A template
        that goes over budget on a small input is marked as runaway and
        refused at once from then on (so probing it costs one budget, not
        one per probe).

        A render with tools that fails reading a ``description`` is tried once more with an empty one for
        each parameter that has none (Command R+ prints every parameter's unguarded; OpenAI's parameter
        descriptions are optional, and most tools leave them out).

        A render without tools that fails with ``tools`` set to ``None`` (as
        transformers passes it) is tried once more with ``tools`` undefined,
        as llama.cpp renders: the ``tool_use`` variants of Command R+ and
        Hermes 2 Pro, which transformers only renders with tools, then loop
        over no tools. Templates that render with ``None`` are unaffected.
        """
        if self._runaway is not None:
            raise TemplateError(self._runaway)
        context = {**llama_cpp_variables(datetime.datetime.now()), **kwargs}
        if self.firefunction:  # llama.cpp: tools go in as the JSON text ``functions``, ``tools`` stays null
            context.setdefault("functions", json.dumps(tools, indent=2, ensure_ascii=False) if tools else "")
            tools = None
        context.update(
            messages=messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        try:
            return self._render(context)
        except TemplateError as exc:
            if self._runaway is None and tools and "reads 'description'" in str(exc):
                described = _described_parameters(tools)
                if described is not None:  # Command R+ prints each parameter's description unguarded
                    return self._render({**context, "tools": described})
            if self._runaway is not None or tools is not None:
                raise
            try:  # llama.cpp leaves ``tools`` undefined when there are none (``for t in tools`` loops over nothing)
                return self._render({k: v for k, v in context.items() if k != "tools"})
            except TemplateError:
                pass
            raise

    def _render(self, context: dict[str, Any]) -> str:
        meter = Meter(_ENV.budget)
        try:
            meter.measure_input(context)  # the limits scale with the input's size
        except BudgetExceeded as exc:  # the input itself (e.g. nested too deep): not the template's fault
            raise TemplateError(f"chat template input refused: {exc}") from exc
        try:
            with _ENV.metering(meter):
                return self._template.render(**context)
        except BudgetExceeded as exc:
            message = f"chat template refused: {exc}"
            if meter.input_chars <= _ENV.budget.small_input_chars:
                self._runaway = message
            raise TemplateError(message) from exc
        except jinja2.UndefinedError as exc:  # jinja's text names Python types ("'dict object' has no ...")
            m = re.search(r"has no attribute '([^']+)'|^'([^']+)' is undefined|has no element (\d+)", str(exc))
            if m is not None and m.group(3) is not None:  # messages[0] of no messages, say
                name = f" item {m.group(3)} of a list"
            else:
                name = f" {(m.group(1) or m.group(2))!r}" if m else " a value"
            raise TemplateError(f"chat template error: the template reads{name}, which this request does not "
                                "have (a message, a message field, a tool field or a template variable)") from exc
        except jinja2.TemplateError as exc:  # the template's own raise_exception(message), or jinja's syntax text
            raise TemplateError(f"chat template error: {exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError,
                OverflowError, RecursionError, MemoryError, UnicodeError) as exc:
            raise TemplateError(f"chat template error: the template failed on this request "
                                f"({_PLAIN.get(type(exc), 'an invalid operation')})") from exc


def _described_parameters(tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """``tools`` with ``"description": ""`` given to each top-level parameter (a ``parameters.properties``
    entry that is an object) that has none; ``None`` when every parameter has one already."""
    out, changed = [], False
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        params = function.get("parameters") if isinstance(function, dict) else None
        props = params.get("properties") if isinstance(params, dict) else None
        if isinstance(function, dict) and isinstance(params, dict) and isinstance(props, dict) and any(
                isinstance(p, dict) and "description" not in p for p in props.values()):
            props = {k: {**p, "description": ""} if isinstance(p, dict) and "description" not in p else p
                     for k, p in props.items()}
            tool = {**tool, "function": {**function, "parameters": {**params, "properties": props}}}
            changed = True
        out.append(tool)
    return out if changed else None
