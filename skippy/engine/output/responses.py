"""OpenAI response objects as plain dicts (sans-IO builders).

Shapes follow OpenAI ``chat.completion``, ``chat.completion.chunk`` and
``text_completion``; ``timings`` follows llama-server.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from skippy.engine.chat.formats.base import Delta, ParsedMessage


def new_id(prefix: str) -> str:
    """``chatcmpl-`` / ``cmpl-`` + 24 random hex chars."""
    return f"{prefix}-{secrets.token_hex(12)}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """OpenAI ``usage`` object."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def timings(prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float,
            cache_n: int = 0) -> dict[str, Any]:
    """llama-server ``timings``: counts in tokens, times in milliseconds; ``cache_n`` prompt tokens reused."""
    return {
        "cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n * 1000.0 / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": predicted_n, "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
        "predicted_per_second": predicted_n * 1000.0 / predicted_ms if predicted_ms > 0 else 0.0,
    }


def delta_dict(d: Delta) -> dict[str, Any]:
    """A :class:`Delta` as an OpenAI ``choices[].delta`` object."""
    out: dict[str, Any] = {}
    if d.content:
        out["content"] = d.content
    if d.reasoning_content:
        out["reasoning_content"] = d.reasoning_content
    if d.tool_calls:
        calls = []
        for tc in d.tool_calls:
            c: dict[str, Any] = {"index": tc.index}
            fn: dict[str, Any] = {}
            if tc.id is not None:
                c["id"] = tc.id
                c["type"] = "function"
            if tc.name is not None:
                fn["name"] = tc.name
            fn["arguments"] = tc.arguments
            c["function"] = fn
            calls.append(c)
        out["tool_calls"] = calls
    return out


def message_dict(m: ParsedMessage) -> dict[str, Any]:
    """The final assistant message (OpenAI ``choices[].message``)."""
    out: dict[str, Any] = {"role": "assistant", "content": m.content or None}
    if m.reasoning_content:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
    return out


class ChunkFactory:
    """Builds the chunks of one stream: one ``id`` and ``created`` for all of them."""

    def __init__(self, model: str, *, object_: str = "chat.completion.chunk", prefix: str = "chatcmpl") -> None:
        self.id = new_id(prefix)
        self.created = int(time.time())
        self.model = model
        self.object = object_

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        out = {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
               "system_fingerprint": "skippy-trio", "choices": choices}
        out.update(extra)
        return out
