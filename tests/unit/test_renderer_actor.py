"""The TemplateRenderer actor: where a chat request renders (no model)."""

from __future__ import annotations

import threading

import msgspec
import trio

from skippy.actors.renderer import CHATML, INLINE_MESSAGES, TemplateRenderer
from skippy.engine.chat.prepare import PreparedTemplate
from skippy.engine.protocols.openai.types import ChatCompletionRequest


async def test_a_small_chat_renders_inline_and_a_large_one_or_its_own_template_in_a_worker_thread() -> None:
    """Up to INLINE_MESSAGES messages and INLINE_TOOLS tools on the compiled template render on the event
    loop's thread (no worker-thread trip); more messages, or a request's own chat_template, in a worker."""
    renderer = TemplateRenderer(PreparedTemplate.build(CHATML))
    threads: list[str] = []
    render = renderer._render

    def spy(req, add_generation_prompt):
        threads.append(threading.current_thread().name)
        return render(req, add_generation_prompt)

    renderer._render = spy  # type: ignore[method-assign]

    def chat(n: int, **extra) -> ChatCompletionRequest:
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(n)]
        return msgspec.convert({"messages": msgs, **extra}, ChatCompletionRequest)

    main = threading.current_thread().name
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renderer.run)
        small = await renderer.render(chat(3))
        await renderer.render(chat(INLINE_MESSAGES + 1))
        await renderer.render(chat(3, chat_template=CHATML))
        nursery.cancel_scope.cancel()
    assert small.prompt.startswith("<|im_start|>user\nturn 0<|im_end|>")
    assert threads[0] == main and threads[1] != main and threads[2] != main
