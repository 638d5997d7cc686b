"""The TemplateRenderer actor: small plain chats on the caller's thread, the rest in a worker thread (no model)."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest
import trio

import skippy.actors.renderer as renderer_mod
from skippy.actors.renderer import CHATML, INLINE_CHARS, INLINE_MESSAGES, TemplateRenderer, renders_inline
from skippy.engine.chat.prepare import PreparedTemplate
from skippy.engine.errors import InvalidRequest
from skippy.engine.types import ChatCompletionRequest

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def chat(**fields: Any) -> ChatCompletionRequest:
    fields.setdefault("messages", [{"role": "user", "content": "hi"}])
    return msgspec.convert(fields, ChatCompletionRequest)


@pytest.mark.parametrize(("fields", "inline"), [
    ({}, True),
    ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                   {"role": "assistant", "content": "a", "reasoning_content": "r"}]}, True),
    ({"messages": [{"role": "user", "content": "x" * INLINE_CHARS}]}, True),
    ({"messages": [{"role": "user", "content": "x" * (INLINE_CHARS + 1)}]}, False),
    ({"messages": [{"role": "user", "content": "x"}] * (INLINE_MESSAGES + 1)}, False),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, False),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                         "function": {"name": "f", "arguments": "{}"}}]}]}, False),
    ({"tools": [TOOL]}, False),
    ({"chat_template": CHATML}, False),
    ({"response_format": {"type": "json_object"}}, False),
    ({"grammar": "root ::= \"a\""}, False),
])
def test_renders_inline_only_small_plain_chats(fields: dict[str, Any], inline: bool) -> None:
    assert renders_inline(chat(**fields)) is inline


async def test_small_chats_render_inline_and_the_rest_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    real = renderer_mod.render_chat

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(renderer_mod, "render_chat", recording)
    rend = TemplateRenderer(PreparedTemplate.build(CHATML))
    small, big = chat(), chat(messages=[{"role": "user", "content": "hi" + " " * INLINE_CHARS}])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rend.run)
        inline = await rend.render(small)
        in_worker = await rend.render(big)
        with pytest.raises(InvalidRequest):  # an error raises the same way on the inline path
            await rend.render(chat(messages=[{"role": "wizard", "content": "hi"}]))
        nursery.cancel_scope.cancel()
    here = threading.get_ident()
    assert threads[0] == here and threads[1] != here and threads[2] == here
    assert inline.prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert in_worker.prompt == inline.prompt.replace("hi", "hi" + " " * INLINE_CHARS)
    assert inline.plan == in_worker.plan
