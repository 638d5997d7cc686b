"""Continuing a conversation's last assistant message (assistant prefill), sans-IO.

llama-server continues a conversation that ends with an assistant message (its ``prefill_assistant``
default) and reads ``continue_final_message`` (``true``, or which part to continue: ``"content"`` or
``"reasoning_content"``, ``common_chat_continuation_parse``). :func:`continuation` decides which part
a request continues, with llama.cpp's rule for ``true``: the reasoning when the message holds
``reasoning_content`` and no content, else the content.

A continued content is the message's text after the generation prompt (see
:func:`~skippy.engine.chat.prepare.render_chat`), or, where the message holds reasoning too, after that
reasoning's closed block as the template renders it (:func:`content_prompt`); the reply holds only what
follows. A continued reasoning is an open thinking block: :func:`reasoning_prompt` ends the prompt inside
it, right after the prefilled reasoning, so the model goes on thinking, and the output parser starts in
reasoning with that text as the start of ``reasoning_content``
(:attr:`~skippy.engine.chat.plan.ParsePlan.prefill_reasoning`), as llama-server's reply begins with it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from skippy.engine.chat.capabilities import thinking_opener
from skippy.engine.chat.formats.core import ToolSyntax
from skippy.engine.chat.templates import ChatTemplate, TemplateError
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, NotText, part_texts

#: the parts of an assistant message a request may continue (llama-server's ``continue_final_message`` strings)
CONTENT, REASONING = "content", "reasoning_content"
#: at most this many characters between the end of a rendered reasoning and the content after it
_BLOCK_END = 256


def _mark() -> str:
    """What stands for the prefilled text in a probe render of :func:`reasoning_prompt` and :func:`content_prompt`:
    random per render, so no text of a conversation can be taken for it (a fixed marker the user wrote moved the
    cut)."""
    return "SKIPPY_PREFILL_MARK_" + secrets.token_hex(8)


def continuation(req: ChatCompletionRequest, messages: list[dict[str, Any]]) -> str | None:
    """Which part of the last message (an assistant's) the reply continues: :data:`CONTENT`,
    :data:`REASONING`, or ``None`` when the message is rendered closed.

    llama-server's default: a conversation that ends with an assistant message (without
    ``tool_calls``) continues it. vLLM's fields decide when given: ``continue_final_message: true``
    asks for it (400 unless the last message is an assistant's, or with ``add_generation_prompt:
    true``, as vLLM), ``continue_final_message: false`` or ``add_generation_prompt: false`` alone render
    the last message closed. llama-server's ``"content"`` / ``"reasoning_content"`` name the part; else
    (llama.cpp's ``COMMON_CHAT_CONTINUATION_AUTO``) a message with ``reasoning_content`` and no content
    continues its reasoning, any other its content. Raises :class:`InvalidRequest` (400) naming the field.
    """
    last = messages[-1]
    is_assistant = last.get("role") == "assistant"
    asked = req.continue_final_message
    if isinstance(asked, str) and asked not in (CONTENT, REASONING):
        raise InvalidRequest(f"continue_final_message must be a boolean, {CONTENT!r} or {REASONING!r}",
                             param="continue_final_message")
    if asked is not None and asked is not False:
        if not is_assistant:
            raise InvalidRequest("continue_final_message needs the last message to be an assistant message",
                                 param="continue_final_message")
        if req.add_generation_prompt:
            raise InvalidRequest("continue_final_message and add_generation_prompt cannot both be true",
                                 param="add_generation_prompt")
    elif asked is False or req.add_generation_prompt is False or not is_assistant or last.get("tool_calls"):
        return None
    if isinstance(asked, str):
        return asked
    reasoning = last.get("reasoning_content")
    return REASONING if isinstance(reasoning, str) and reasoning and not last.get("content") else CONTENT


def prefill_text(message: dict[str, Any], i: int) -> str:
    """The text a continued ``message`` (``messages[i]``) holds: its ``content`` string, or its text parts
    joined with ``""`` as llama-server continues them. Raises :class:`InvalidRequest` (400) for other
    parts."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        try:
            return "".join(part_texts(content, bare_strings=False))
        except NotText:
            raise InvalidRequest(f"messages[{i}].content: an assistant message to continue may hold text "
                                 "parts only", param=f"messages[{i}].content") from None
    raise InvalidRequest(f"messages[{i}].content must be a string or a list of parts", param=f"messages[{i}].content")


def family_opener(template: ChatTemplate, syntax: ToolSyntax) -> str:
    """The text that opens a thinking block after the generation prompt in ``syntax``'s family: its
    :attr:`~skippy.engine.chat.formats.core.ToolSyntax.reasoning_opener` (llama.cpp's parser of the family
    writes it: Kimi K2's ``<think>``, Gemma 4's ``<|channel>thought\\n``, gpt-oss's analysis channel), else
    its opening think tag where the template writes that tag (Granite 3.3, LFM2, Ministral's ``[THINK]``);
    ``""`` where neither says (the model's tag is not known)."""
    if syntax.reasoning_opener:
        return syntax.reasoning_opener
    tag = syntax.think_tags[0]
    return tag if tag in template.source else ""


def reasoning_prompt(render: Callable[[list[dict[str, Any]], bool], str], history: list[dict[str, Any]],
                     final: dict[str, Any], reasoning: str, family: str) -> tuple[str, str] | None:
    """``(prompt, opener)``: the prompt that ends inside the thinking block of a continued assistant
    message, right after its prefilled ``reasoning`` (as given, untrimmed), and the text that opened the
    block; ``None`` where no block can be opened.

    ``render(messages, add_generation_prompt)`` renders with the request's tools and variables;
    ``history`` is the conversation before ``final``, the continued message; ``family`` is
    :func:`family_opener`'s text. The block is found, in order:

    1. as the template renders the message: ``final`` with ``reasoning_content`` rendered (and no
       content), cut where the reasoning begins, so the closing tag and everything after it are left
       out; used where the text before the cut ends in a thinking tag (Seed-OSS ``<seed:think>``,
       MiniMax M3 ``<mm:think>``, Qwen 3.5 ``<think>\\n``);
    2. where the template leaves that message's reasoning out: the generation prompt, where it opens
       the block itself (DeepSeek R1, QwQ);
    3. else the generation prompt and ``family`` (Kimi K2, Gemma 4, gpt-oss, Granite 3.3, LFM2,
       Ministral), as llama.cpp writes the continuation (``generation_prompt`` of its family parsers).
    """
    tags = (family.strip(),) if family.strip() else ()
    mark = _mark()
    try:
        probe = render([*history, {**final, "content": "", "reasoning_content": mark}], False)
    except TemplateError:
        probe = ""
    if probe.count(mark) == 1:
        head = probe[:probe.index(mark)]
        opener = thinking_opener(head, tags)
        if opener:
            return head + reasoning, opener
    prompt = render(history, True)
    opener = thinking_opener(prompt, tags)
    if opener:
        return prompt + reasoning, opener
    if family:
        return prompt + family + reasoning, family
    return None


def content_prompt(render: Callable[[list[dict[str, Any]], bool], str], history: list[dict[str, Any]],
                   final: dict[str, Any], content: str) -> str | None:
    """The prompt that continues the content of ``final``, a continued assistant message that also holds
    ``reasoning_content``: the message as the template renders it, cut where its content begins (the
    reasoning's closed block before the cut, the end of the turn after it left out), then ``content``;
    ``None`` where the template leaves the message's reasoning out (the caller then continues after the
    generation prompt). llama.cpp writes the same: the reasoning, the closing tag, then the content.
    ``render`` and ``history`` as for :func:`reasoning_prompt`."""
    reasoning = final.get("reasoning_content")
    mark = _mark()
    try:
        probe = render([*history, {**final, "content": mark}], False)
    except TemplateError:
        return None
    if probe.count(mark) != 1 or not isinstance(reasoning, str) or not reasoning.strip():
        return None
    head = probe[:probe.index(mark)]
    # the reasoning's block just before the content (its closing tag and the space after it are short)
    return head + content if reasoning.strip() in head[-(len(reasoning) + _BLOCK_END):] else None


def open_block_content_prompt(render: Callable[[list[dict[str, Any]], bool], str], history: list[dict[str, Any]],
                              final: dict[str, Any], content: str, generation_prompt: str, close_tag: str) -> str:
    """The prompt that continues the content of ``final``, a continued assistant message without reasoning,
    where ``generation_prompt`` opens a thinking block (Qwen 3.5, DeepSeek R1, Nemotron 3): the content must
    not land inside that block, or the model takes it for its thinking and the reply for reasoning. The
    message as the template renders it, cut where its content begins, where that leaves no block open
    (Qwen 3.5's ``<think>\n\n</think>\n\n``, DeepSeek R1's bare assistant header); else the generation
    prompt with the block closed by ``close_tag`` (the family's closing tag), as llama.cpp writes an empty
    reasoning before a continued content. ``render`` and ``history`` as for :func:`reasoning_prompt`."""
    mark = _mark()
    try:
        probe = render([*history, {**final, "content": mark}], False)
    except TemplateError:
        probe = ""
    if probe.count(mark) == 1:
        head = probe[:probe.index(mark)]
        if not thinking_opener(head):
            return head + content
    return generation_prompt + close_tag + content

