"""Mistral FIM request body (a msgspec Struct; decode with :func:`~skippy.engine.protocols.base.decode_request`,
any failure a 400 naming the field). Unknown fields are ignored."""

from __future__ import annotations

from typing import Any

import msgspec


class FimCompletionRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/fim/completions`` (Mistral's FIM API, as its ``mistralai`` SDK's ``fim.complete`` and
    ``fim.stream`` send it, and as editors configured for Codestral do).

    ``prompt``: the text before the cursor. ``suffix``: the text after it; given (even empty), the model fills
    the middle with its FIM tokens (400 naming ``suffix`` for a vocabulary without them); left out, ``prompt`` is
    simply continued, as Mistral documents. ``max_tokens``, ``min_tokens``, ``temperature``, ``top_p``, ``stop``
    (a string or a list) as in OpenAI's Completions; ``random_seed`` is the sampling seed. ``stream``: SSE
    ``chat.completion.chunk`` events ending with ``data: [DONE]``, the last one with ``usage``. ``model`` may be
    any served name (echoed); ``metadata`` and ``prompt_cache_key`` are accepted and ignored.
    """

    prompt: str
    suffix: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    min_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    random_seed: int | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
