"""The TemplateRenderer actor: chat request -> prompt text + parse plan.

It owns the compiled chat template and its probed capabilities (and a
small cache of per-request ``chat_template`` overrides). A request of at most
:data:`INLINE_MESSAGES` messages and :data:`INLINE_TOOLS` tools, on the
compiled template, renders on the caller's thread; a larger one, or one that
brings its own template (compiled on first use), in a worker thread, so a slow
template never holds up the event loop or the decode scheduler. The work itself
is :func:`skippy.engine.chat.prepare.render_chat`.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import trio

from skippy.actors.base import ThreadActor
from skippy.engine.chat.documents import has_files
from skippy.engine.chat.prepare import PreparedTemplate, Rendered, render_chat
from skippy.engine.protocols.llama_server.types import ApplyTemplateRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message

# ChatML, used when the GGUF carries no chat template and none is given.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

CHATML_END = "<|im_end|>"
"""ChatML's end-of-turn marker."""

#: Requests with at most this many messages and :data:`INLINE_TOOLS` tools render inline (on the trio
#: thread). Measured on 2 CPU cores with SmolLM2's template: a short chat renders in 0.10 ms, the
#: agent burst's request (a 600-token system prompt, 5 emulated tools) in 0.54 ms, 64 messages of
#: 4000 characters in 1.1 ms; the trip to a worker thread and back took 5-8 ms in a 16-request burst
#: (the worker waits for the GIL while the loop parses the other requests), and the two worker
#: threads served the burst's renders in turn: its last request was submitted 36 ms after its first.
INLINE_MESSAGES = 64
INLINE_TOOLS = 32

__all__ = ["CHATML", "CHATML_END", "INLINE_MESSAGES", "INLINE_TOOLS", "RenderChat", "Rendered", "TemplateRenderer",
           "fallback_stops"]


def fallback_stops(vocab: Any, eog_ids: frozenset[int] | set[int]) -> tuple[str, ...]:
    """Stop strings a chat needs when ChatML stands in for a GGUF without a chat template.

    A model trained on ChatML (SmolLM2, Qwen) has ``<|im_end|>`` as one end-of-generation token, so
    generation ends there. On another vocabulary (Gemma's, Llama's) the marker is ordinary text of
    several tokens: the model can write it and run on into turns it invents. Then the marker is
    returned as a stop string (llama-server adds its templates' end markers as stop words the same
    way). ``vocab.tokenize(text, add_special=False, parse_special=True)`` -> token ids.

    Returns:
        ``()`` when ``<|im_end|>`` is one end-of-generation token of the vocabulary, else
        ``("<|im_end|>",)``.
    """
    tokens = vocab.tokenize(CHATML_END, add_special=False, parse_special=True)
    if len(tokens) == 1 and tokens[0] in eog_ids:
        return ()
    return (CHATML_END,)


@attrs.frozen
class RenderChat:
    request: ChatCompletionRequest
    add_generation_prompt: bool
    reply: trio.MemorySendChannel[Any]


class TemplateRenderer(ThreadActor[RenderChat]):
    """Renders chat prompts with the model's (or the configured, or the request's) template.

    ``default_kwargs``: template variables from ``--chat-template-kwargs``;
    ``force_tool_emulation``: emulate tools even for templates that support them;
    ``history_boundary``: also find where the conversation without its generation prompt ends
    (:attr:`~skippy.engine.chat.plan.ParsePlan.history_chars`, a second rendering; the engine turns
    it on when the scheduler keeps context checkpoints); ``reasoning_format``: the default of a request
    that sets none (``--reasoning-format``); ``vision``: the model reads images (a ``--mmproj`` projector).
    """

    def __init__(self, template: PreparedTemplate, *, default_kwargs: dict[str, Any] | None = None,
                 force_tool_emulation: bool = False, history_boundary: bool = False, max_threads: int = 2,
                 reasoning_format: str = "auto", vision: bool = False) -> None:
        super().__init__(max_threads)
        self.vision = vision
        self.reasoning_format = reasoning_format
        self.template = template
        self.default_kwargs = dict(default_kwargs or {})
        self.force_tool_emulation = force_tool_emulation
        self.history_boundary = history_boundary
        bos, eos = template.template.bos_token, template.template.eos_token
        self._override = functools.lru_cache(maxsize=16)(
            lambda source: PreparedTemplate.build(source, bos_token=bos, eos_token=eos))

    def handle(self, msg: RenderChat) -> Rendered:
        return self._render(msg.request, msg.add_generation_prompt)

    def _render(self, req: ChatCompletionRequest, add_generation_prompt: bool) -> Rendered:
        tmpl = self._override(req.chat_template) if req.chat_template else self.template
        return render_chat(tmpl, req, default_kwargs=self.default_kwargs,
                           force_tool_emulation=self.force_tool_emulation,
                           add_generation_prompt=add_generation_prompt, history_boundary=self.history_boundary,
                           reasoning_format=self.reasoning_format, vision=self.vision)

    async def render(self, request: ChatCompletionRequest, *, add_generation_prompt: bool = True) -> Rendered:
        """Render ``request`` (inline when small, see :data:`INLINE_MESSAGES`; never with a document to read,
        :mod:`skippy.engine.chat.documents`); raises :class:`InvalidRequest` (400) for bad input or template
        errors."""
        if (not request.chat_template and len(request.messages) <= INLINE_MESSAGES
                and len(request.tools or ()) <= INLINE_TOOLS and not has_files(request.messages)):
            await trio.lowlevel.checkpoint()
            return self._render(request, add_generation_prompt)
        return await self.ask(lambda r: RenderChat(request, add_generation_prompt, r))

    async def render_messages(self, messages: list[Message] | ApplyTemplateRequest) -> str:
        """Only the prompt of ``messages`` or of an ``/apply-template`` request (llama-server)."""
        if isinstance(messages, ApplyTemplateRequest):  # a chat request: render_chat reads its add_generation_prompt
            return (await self.render(messages)).prompt
        return (await self.render(ChatCompletionRequest(messages=messages))).prompt
