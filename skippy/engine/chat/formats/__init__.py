"""Chat formats: turn generated text into OpenAI ``content``, ``reasoning_content``
and ``tool_calls``, streaming append-only deltas (see :mod:`.base`, :mod:`.core`).

``make_parser(chat_format, ...)`` builds the parser for one generation;
``chat_format`` is one of :data:`FORMATS` (chosen per template by
:func:`skippy.engine.chat.capabilities.detect_caps`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skippy.engine.chat.formats.base import (
    ContentParser,
    Delta,
    IdFactory,
    ParsedMessage,
    StreamParser,
    ToolCall,
    ToolCallDelta,
    new_call_id,
)
from skippy.engine.chat.formats.command_r7b import COMMAND_R7B
from skippy.engine.chat.formats.command_r_plus import COMMAND_R_PLUS
from skippy.engine.chat.formats.core import CONTENT_ONLY, REASONING_FORMATS, ChatParser, ToolSyntax, syntax_markers
from skippy.engine.chat.formats.deepseek import DEEPSEEK_R1, DEEPSEEK_V3_1
from skippy.engine.chat.formats.families import (
    APERTUS,
    APRIEL,
    FIREFUNCTION_V2,
    GIGACHAT3,
    GIGACHAT3_1,
    GRANITE,
    KIMI_K2,
    NEMOTRON_V2,
    SOLAR_OPEN,
)
from skippy.engine.chat.formats.functionary import FUNCTIONARY_V3_1, FUNCTIONARY_V3_2
from skippy.engine.chat.formats.gemma4 import GEMMA4
from skippy.engine.chat.formats.generic import GENERIC
from skippy.engine.chat.formats.glimmer import MUSE_GLIMMER
from skippy.engine.chat.formats.harmony import GPT_OSS
from skippy.engine.chat.formats.hermes import HERMES_2_PRO
from skippy.engine.chat.formats.lfm2 import LFM2
from skippy.engine.chat.formats.llama3 import LLAMA3_JSON
from skippy.engine.chat.formats.minimax_m3 import MINIMAX_M3
from skippy.engine.chat.formats.mistral import MISTRAL_NEMO, MISTRAL_SMALL_3_2
from skippy.engine.chat.formats.xml import (
    DEEPSEEK_V3_2,
    DEEPSEEK_V4,
    GLM_4_5,
    HY3,
    KIMI_K3,
    LING_3,
    MINICPM5,
    MINIMAX_M2,
    QWEN3_CODER,
    SEED_OSS,
)

SYNTAXES: dict[str, ToolSyntax] = {s.name: s for s in (
    CONTENT_ONLY, GENERIC, HERMES_2_PRO, LLAMA3_JSON, MISTRAL_NEMO, MISTRAL_SMALL_3_2,
    DEEPSEEK_R1, DEEPSEEK_V3_1, FUNCTIONARY_V3_2, COMMAND_R7B, GPT_OSS, QWEN3_CODER, SEED_OSS, GLM_4_5, LING_3,
    KIMI_K2, GRANITE, NEMOTRON_V2, APERTUS, LFM2, MINIMAX_M2, DEEPSEEK_V3_2, DEEPSEEK_V4, KIMI_K3, MINICPM5, GIGACHAT3,
    GIGACHAT3_1, GEMMA4, MINIMAX_M3, COMMAND_R_PLUS, FUNCTIONARY_V3_1, FIREFUNCTION_V2, APRIEL,
    MUSE_GLIMMER, HY3, SOLAR_OPEN)}

#: Every chat-format name ``make_parser`` accepts.
FORMATS: tuple[str, ...] = tuple(SYNTAXES)


def make_parser(chat_format: str, *, reasoning_format: str = "auto", thinking_forced_open: bool = False,
                thinking_opener: str = "",
                allowed_tools: set[str] | None = None, parallel_tool_calls: bool = True,
                id_factory: IdFactory = new_call_id,
                tool_schemas: dict[str, dict[str, Any]] | None = None, supports_thinking: bool = True,
                prefill_reasoning: str = "") -> StreamParser:
    """The streaming parser of one generation in ``chat_format``.

    ``allowed_tools``: names the request allows as calls (``tool_choice``
    already applied); ``None``/empty means tools are off and everything is
    content (reasoning is still split). Calls naming other tools stay content.
    ``parallel_tool_calls=False`` keeps only the first call (later ones are
    dropped, as vLLM does). ``reasoning_format`` is one of
    :data:`REASONING_FORMATS`. ``thinking_opener``: the text with which the
    generation prompt opened the thinking block (``<think>\\n``); with
    ``reasoning_format`` ``none`` it begins ``content`` where the format
    says so (:attr:`~.core.ToolSyntax.keeps_prompt_opener`). ``tool_schemas`` maps a tool name to its
    ``parameters`` JSON schema: formats whose arguments are text (Qwen3-Coder,
    GLM, Seed-OSS XML) type each value by it. ``supports_thinking``: the
    template has a thinking block; where it has none, a format's workaround
    for models that do not think applies (Qwen3-Coder's call without its
    ``<tool_call>``: :attr:`~.core.ToolSyntax.bare_call_open`). ``prefill_reasoning``: the reasoning of
    a continued assistant message, which the prompt ends inside: it begins ``reasoning_content``
    (:class:`~.core.ChatParser`). Raises ``ValueError`` for unknown names.
    """
    try:
        syntax = SYNTAXES[chat_format]
    except KeyError:
        raise ValueError(f"unknown chat format {chat_format!r}") from None
    return ChatParser(syntax, reasoning_format=reasoning_format, thinking_forced_open=thinking_forced_open,
                      thinking_opener=thinking_opener,
                      allowed_tools=allowed_tools, parallel_tool_calls=parallel_tool_calls,
                      id_factory=id_factory, tool_schemas=tool_schemas, supports_thinking=supports_thinking,
                      prefill_reasoning=prefill_reasoning)


def preserved_markers(chat_format: str) -> tuple[str, ...]:
    """The marker strings the parser of ``chat_format`` reads (:func:`~.core.syntax_markers`), whose
    control tokens must reach it as text (llama-server's ``preserved_tokens``). Raises ``ValueError``
    for unknown names."""
    try:
        return syntax_markers(SYNTAXES[chat_format])
    except KeyError:
        raise ValueError(f"unknown chat format {chat_format!r}") from None


def preserved_pieces(markers: tuple[str, ...], tokenize: Callable[[str], list[int]],
                     piece: Callable[[int], bytes]) -> dict[int, bytes]:
    """Token id -> text of each marker that is one control token of the vocabulary (``tokenize``: text ->
    ids with special tokens parsed, no BOS; ``piece``: a token's text as generated output shows it, empty
    for control tokens). Markers that are ordinary text, or several tokens, need nothing."""
    kept: dict[int, bytes] = {}
    for marker in markers:
        ids = tokenize(marker)
        if len(ids) == 1 and not piece(ids[0]):
            kept[ids[0]] = marker.encode("utf-8")
    return kept


__all__ = ["FORMATS", "preserved_markers", "preserved_pieces", "REASONING_FORMATS", "make_parser", "ChatParser",
           "ContentParser", "Delta",
           "ParsedMessage", "StreamParser", "ToolCall", "ToolCallDelta", "new_call_id"]
