"""Chat request -> prompt text + :class:`ParsePlan` (sans-IO).

This is what the TemplateRenderer runs for every chat request: validate the
tool fields, decide native vs emulated tool calls once, rewrite or
normalise the history, render the template with the request's variables,
and choose the grammar (forced tool calls, ``response_format``, raw
``grammar``). :func:`make_output_parser` builds the plan's output parser.
"""

from __future__ import annotations

from typing import Any

import attrs

from skippy.engine.chat import emulation
from skippy.engine.chat.capabilities import TemplateCaps, detect_caps, prompt_opens_thinking
from skippy.engine.chat.formats import REASONING_FORMATS, make_parser
from skippy.engine.chat.formats.base import StreamParser
from skippy.engine.chat.formats.emulated import EmulatedToolParser
from skippy.engine.chat.history import normalize_history
from skippy.engine.chat.plan import ParsePlan
from skippy.engine.chat.templates import ChatTemplate, TemplateError
from skippy.engine.errors import InvalidRequest
from skippy.engine.sampling import grammar as grammars
from skippy.engine.types import ChatCompletionRequest, message_dicts

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@attrs.frozen
class PreparedTemplate:
    """A compiled template with its probed capabilities (computed once per template)."""

    template: ChatTemplate
    caps: TemplateCaps
    requires_alternation: bool

    @classmethod
    def build(cls, source: str, *, bos_token: str = "", eos_token: str = "") -> PreparedTemplate:
        """Compile and probe ``source``; raises :class:`TemplateError` if it does not compile."""
        template = ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
        try:
            template.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
            alternation = False
        except TemplateError:
            alternation = True
        return cls(template, detect_caps(template), alternation)


@attrs.frozen
class Rendered:
    """A rendered prompt and the request's :class:`ParsePlan`."""

    prompt: str
    plan: ParsePlan


def _validate_tools(tools: list[dict[str, Any]] | None, tool_choice: Any) -> None:
    for i, tool in enumerate(tools or []):
        fn = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(fn, dict):
            raise InvalidRequest(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}",
                                 param=f"tools[{i}]")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequest(f"tools[{i}].function.name must be a non-empty string", param=f"tools[{i}]")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest(f"tools[{i}].function.parameters must be a JSON schema object",
                                 param=f"tools[{i}]")
    if tool_choice is None or tool_choice in ("none", "auto", "required"):
        return
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            emulation.select_tools(tools, tool_choice)  # raises when the named tool is missing
            return
    raise InvalidRequest("tool_choice must be 'none', 'auto', 'required' or "
                         "{\"type\": \"function\", \"function\": {\"name\": ...}}", param="tool_choice")


def _structured_grammar(req: ChatCompletionRequest) -> str | None:
    rf = req.response_format
    if req.grammar is not None and rf is not None and rf.type != "text":
        raise InvalidRequest("give either grammar or response_format, not both", param="grammar")
    if req.grammar is not None:
        return req.grammar
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object":
        return grammars.json_object_grammar() if rf.schema is None else grammars.json_schema_grammar(rf.schema)
    if rf.type == "json_schema":
        schema = rf.json_schema.schema if rf.json_schema is not None else rf.schema
        if schema is None:
            raise InvalidRequest("response_format json_schema needs json_schema.schema", param="response_format")
        strict = bool(rf.json_schema is not None and rf.json_schema.strict)
        return grammars.json_schema_grammar(schema, strict=strict)
    raise InvalidRequest(f"response_format type {rf.type!r} is not one of text, json_object, json_schema",
                         param="response_format")


def template_kwargs(request_kwargs: dict[str, Any] | None, enable_thinking: bool | None = None,
                    default_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The template variables of one render: ``enable_thinking`` defaults to true (llama-server's default,
    and what the capability probe assumes), then the server's ``--chat-template-kwargs``, then the
    request's ``chat_template_kwargs``, then its ``enable_thinking`` field, each overriding the last."""
    kwargs: dict[str, Any] = {"enable_thinking": True, **(default_kwargs or {}), **(request_kwargs or {})}
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    return kwargs


def _has_tool_history(messages: list[dict[str, Any]]) -> bool:
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def render_chat(tmpl: PreparedTemplate, req: ChatCompletionRequest, *,
                default_kwargs: dict[str, Any] | None = None, force_tool_emulation: bool = False,
                add_generation_prompt: bool = True) -> Rendered:
    """Render ``req`` with ``tmpl`` and decide its :class:`ParsePlan`.

    Tools are emulated (``TOOL_CALL`` lines) when the request asks for
    tools (non-empty ``tools``, ``tool_choice`` not ``"none"``) and the
    template has no native tool support, or ``force_tool_emulation``.
    Template variables: ``enable_thinking`` true unless set (llama-server), ``default_kwargs`` (server
    ``--chat-template-kwargs``), overridden by the request's ``chat_template_kwargs`` and ``enable_thinking``.
    Raises :class:`InvalidRequest` (400) for bad messages, tools, schemas,
    grammars, or template errors (with the template's message).
    """
    messages = message_dicts(req.messages)
    if not messages:
        raise InvalidRequest("messages must contain at least one message", param="messages")
    for i, m in enumerate(messages):
        if m.get("role") not in ROLES:
            raise InvalidRequest(f"messages[{i}].role {m.get('role')!r} is not one of {sorted(ROLES)}",
                                 param="messages")
    if len(messages) >= 2 and messages[-1]["role"] == messages[-2]["role"] == "assistant":
        # llama-server refuses this too (a final assistant message alone is a prefill to continue)
        raise InvalidRequest("Cannot have 2 or more assistant messages at the end of the list.", param="messages")
    reasoning = req.reasoning_format or "auto"
    if reasoning not in REASONING_FORMATS:
        raise InvalidRequest(f"reasoning_format must be one of {list(REASONING_FORMATS)}", param="reasoning_format")
    tools = req.tools or []
    tool_choice = req.tool_choice if req.tool_choice is not None else "auto"
    _validate_tools(tools, tool_choice)
    parallel = req.parallel_tool_calls if req.parallel_tool_calls is not None else True
    tools_on = bool(tools) and tool_choice != "none"
    caps = tmpl.caps
    emulated = tools_on and (force_tool_emulation or not caps.supports_tools)
    kwargs = template_kwargs(req.chat_template_kwargs, req.enable_thinking, default_kwargs)
    for reserved in ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token"):
        kwargs.pop(reserved, None)

    tool_grammar: str | None = None
    lazy: tuple[str, ...] = ()
    if emulated or (not caps.supports_tools and _has_tool_history(messages)):
        messages = emulation.rewrite_history(messages, tools if tools_on else [], tool_choice if tools_on else "none",
                                             requires_alternation=tmpl.requires_alternation,
                                             parallel_tool_calls=parallel)
        render_tools = None
        if emulated:
            g = emulation.build_grammar(tools, tool_choice, parallel)
            if g is not None:
                tool_grammar, lazy = g.gbnf, (g.trigger_patterns if g.lazy else ())
    else:
        messages = normalize_history(messages, caps)
        render_tools = tools if tools_on else None
        if tools_on and (tool_choice == "required" or isinstance(tool_choice, dict)):
            tool_grammar = grammars.native_tool_grammar(caps.chat_format, tools,
                                                        emulation.select_tools(tools, tool_choice), parallel=parallel)
    prompt = tmpl.template.render(messages, tools=render_tools, add_generation_prompt=add_generation_prompt, **kwargs)

    structured = _structured_grammar(req)
    if structured is not None and tool_grammar is not None and not lazy:
        raise InvalidRequest("a forced tool call cannot be combined with response_format or grammar",
                             param="response_format")
    plan = ParsePlan(
        chat_format=caps.chat_format,
        reasoning_format=reasoning,
        thinking_forced_open=prompt_opens_thinking(prompt),
        allowed_tools=frozenset(emulation.allowed_tool_names(tools, tool_choice)) if tools_on else frozenset(),
        parallel_tool_calls=parallel,
        emulated=emulated,
        grammar=structured if structured is not None else tool_grammar,
        grammar_lazy_patterns=() if structured is not None else lazy,
    )
    return Rendered(prompt, plan)


def make_output_parser(plan: ParsePlan) -> StreamParser:
    """The streaming output parser the plan calls for."""
    if plan.emulated:
        return EmulatedToolParser(set(plan.allowed_tools), plan.parallel_tool_calls)
    return make_parser(plan.chat_format, reasoning_format=plan.reasoning_format,
                       thinking_forced_open=plan.thinking_forced_open,
                       allowed_tools=set(plan.allowed_tools) or None, parallel_tool_calls=plan.parallel_tool_calls)
