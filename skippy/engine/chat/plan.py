"""The parse plan: every per-request output decision, made once at render time.

The TemplateRenderer builds it with the prompt; the decode scheduler and
the output pipeline only read it. Nothing later re-derives these choices.
"""

from __future__ import annotations

from typing import Any

import attrs

from skippy.engine.sampling.constraints import Constraint


@attrs.frozen
class ParsePlan:
    """Decisions for one request.

    ``chat_format``: the output parser's format name (``content_only`` when the
    request has no tools and the template no reasoning); ``reasoning_format``
    as requested (``auto``, ``none``, ``deepseek``, ``deepseek-legacy``,
    ``hidden``); ``thinking_forced_open``: the prompt already opened
    ``<think>``; ``thinking_opener``: then the text that opened it (``<think>\\n``), which begins
    ``content`` with ``reasoning_format: none`` (:attr:`~skippy.engine.chat.formats.core.ToolSyntax.
    keeps_prompt_opener`); ``allowed_tools``: names the output may call (empty: tools
    off); ``emulated``: tool calls use the ``TOOL_CALL`` text convention
    (where no call may be made, such text is plain content);
    ``tool_envelope``: the request mixes tools the model may call with a JSON schema, and the reply is
    llama-server's generic envelope (``{"tool_calls": [...]}`` or ``{"response": ...}``, the ``constraint``
    :func:`~skippy.engine.sampling.constraints.tool_envelope`), read by
    :class:`~skippy.engine.chat.formats.generic.EnvelopeScanner` (``emulated`` is then false);
    ``grammar``: GBNF or ``None``;
    ``grammar_lazy_patterns``: when set, the grammar applies only from the
    first match of one of these regexes on (llama.cpp lazy grammar);
    ``constraint``: the request's llguidance constraint (``response_format``,
    ``json_schema``, ``guided_*``, ...), never set together with ``grammar``;
    ``tool_schemas``: allowed tool name -> its ``parameters`` JSON schema (the
    XML formats type argument values by it).
    ``history_chars``: how many characters the prompt begins with that are the conversation
    without its generation prompt (the messages rendered with ``add_generation_prompt: false``;
    skippy-server's ``recurrent_cache_prefix_text``): the cache boundary where the scheduler saves
    a context checkpoint for the next turn (recurrent, hybrid and sliding-window models).
    ``None``: not asked for, or the template failed to render it.
    ``supports_thinking``: the template has a thinking block (:attr:`~skippy.engine.chat.capabilities.
    TemplateCaps.supports_thinking`); where it has none, the parser reads a format's workaround for models
    that do not think (Qwen3-Coder's call without its ``<tool_call>``).
    ``prefill_reasoning``: the reasoning of a continued assistant message (``continue_final_message``'s
    reasoning, :mod:`~skippy.engine.chat.continuation`): the prompt ends inside its thinking block, after it
    (``thinking_forced_open``), and it begins the reply's ``reasoning_content``, as llama-server gives it.
    ``short_call_ids``: the calls get ids of 9 alphanumeric characters, which the template takes back
    (:attr:`~skippy.engine.chat.capabilities.TemplateCaps.requires_short_call_ids`).
    """

    chat_format: str = "content_only"
    reasoning_format: str = "auto"
    thinking_forced_open: bool = False
    thinking_opener: str = ""
    allowed_tools: frozenset[str] = frozenset()
    parallel_tool_calls: bool = True
    emulated: bool = False
    tool_envelope: bool = False
    grammar: str | None = None
    grammar_lazy_patterns: tuple[str, ...] = ()
    constraint: Constraint | None = None
    tool_schemas: dict[str, dict[str, Any]] = attrs.field(factory=dict, eq=False, hash=False)
    history_chars: int | None = None
    supports_thinking: bool = True
    prefill_reasoning: str = ""
    short_call_ids: bool = False
