"""The TemplateRenderer actor: chat request -> prompt text + parse plan.

It owns the compiled chat template and its probed capabilities (and a
small cache of per-request ``chat_template`` overrides). Rendering runs in
worker threads, so a slow template never holds up the event loop or the
decode scheduler. The work itself is :func:`skippy.engine.chat.prepare.render_chat`.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import trio

from skippy.actors.base import ThreadActor
from skippy.engine.chat.prepare import PreparedTemplate, Rendered, render_chat
from skippy.engine.types import ApplyTemplateRequest, ChatCompletionRequest, Message

# ChatML, used when the GGUF carries no chat template and none is given.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

__all__ = ["CHATML", "RenderChat", "Rendered", "TemplateRenderer"]


@attrs.frozen
class RenderChat:
    request: ChatCompletionRequest
    add_generation_prompt: bool
    reply: trio.MemorySendChannel[Any]


class TemplateRenderer(ThreadActor[RenderChat]):
    """Renders chat prompts with the model's (or the configured, or the request's) template.

    ``default_kwargs``: template variables from ``--chat-template-kwargs``;
    ``force_tool_emulation``: emulate tools even for templates that support them.
    """

    def __init__(self, template: PreparedTemplate, *, default_kwargs: dict[str, Any] | None = None,
                 force_tool_emulation: bool = False, max_threads: int = 2) -> None:
        super().__init__(max_threads)
        self.template = template
        self.default_kwargs = dict(default_kwargs or {})
        self.force_tool_emulation = force_tool_emulation
        bos, eos = template.template.bos_token, template.template.eos_token
        self._override = functools.lru_cache(maxsize=16)(
            lambda source: PreparedTemplate.build(source, bos_token=bos, eos_token=eos))

    def handle(self, msg: RenderChat) -> Rendered:
        req = msg.request
        tmpl = self._override(req.chat_template) if req.chat_template else self.template
        return render_chat(tmpl, req, default_kwargs=self.default_kwargs,
                           force_tool_emulation=self.force_tool_emulation,
                           add_generation_prompt=msg.add_generation_prompt)

    async def render(self, request: ChatCompletionRequest, *, add_generation_prompt: bool = True) -> Rendered:
        """Render ``request``; raises :class:`InvalidRequest` (400) for bad input or template errors."""
        return await self.ask(lambda r: RenderChat(request, add_generation_prompt, r))

    async def render_messages(self, messages: list[Message] | ApplyTemplateRequest) -> str:
        """Only the prompt of ``messages`` or of an ``/apply-template`` request (llama-server)."""
        if isinstance(messages, ApplyTemplateRequest):
            return (await self.render(messages.chat_request(),
                                      add_generation_prompt=messages.add_generation_prompt)).prompt
        return (await self.render(ChatCompletionRequest(messages=messages))).prompt
