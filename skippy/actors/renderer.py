"""The TemplateRenderer actor: messages -> prompt text + parse plan.

It owns the compiled chat template. Rendering runs in worker threads, so
a slow template never holds up the event loop or the decode scheduler.
"""

from __future__ import annotations

from typing import Any

import attrs

from skippy.actors.base import ThreadActor
from skippy.engine.errors import InvalidRequest
from skippy.engine.plan import ParsePlan
from skippy.engine.templates import ChatTemplate

# ChatML, used when the GGUF carries no chat template and none is given.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@attrs.frozen
class Rendered:
    """A rendered prompt and the request's :class:`ParsePlan`."""

    prompt: str
    plan: ParsePlan


@attrs.frozen
class RenderChat:
    messages: list[dict[str, Any]]
    add_generation_prompt: bool
    reply: Any


def _flatten_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Text-part lists become strings (templates expect strings); media parts -> 400."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.get("type") != "text" or part.get("text") is None:
                    raise InvalidRequest(
                        f"messages[{i}]: content part of type {part.get('type')!r} is not supported "
                        "(this model reads text only)", param="messages")
                texts.append(part["text"])
            m = {**m, "content": "".join(texts)}
        elif content is None and m.get("role") != "assistant":
            m = {**m, "content": ""}
        out.append(m)
    return out


class TemplateRenderer(ThreadActor):
    """Renders chat prompts with the model's (or the configured) template."""

    ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

    def __init__(self, template: ChatTemplate, *, max_threads: int = 2) -> None:
        super().__init__(max_threads)
        self.template = template

    def handle(self, msg: RenderChat) -> Rendered:
        if not msg.messages:
            raise InvalidRequest("messages must contain at least one message", param="messages")
        for i, m in enumerate(msg.messages):
            if m.get("role") not in self.ROLES:
                raise InvalidRequest(f"messages[{i}].role {m.get('role')!r} is not one of "
                                     f"{sorted(self.ROLES)}", param="messages")
        messages = _flatten_content(msg.messages)
        prompt = self.template.render(messages, add_generation_prompt=msg.add_generation_prompt)
        return Rendered(prompt, ParsePlan())

    async def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> Rendered:
        """Render ``messages``; raises :class:`InvalidRequest` (400) for bad input or template errors."""
        return await self.ask(lambda r: RenderChat(messages, add_generation_prompt, r))
