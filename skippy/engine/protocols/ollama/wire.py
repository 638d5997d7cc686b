"""Ollama's native generation replies (``docs/api.md`` of ollama/ollama; its Go ``api.ChatResponse``,
``api.GenerateResponse``, ``api.EmbedResponse``), as msgspec Structs.

A stream is one of these objects per line (NDJSON): ``done: false`` while tokens come, then a last one with
``done: true``, ``done_reason`` and the counts. Durations are nanoseconds: ``total_duration`` (the request
from its arrival), ``load_duration`` (loading the model for it: 0 when it was loaded), ``prompt_eval_count`` /
``prompt_eval_duration`` (the prompt tokens prefilled, cache hits excluded, as llama.cpp's ``prompt_n``) and
``eval_count`` / ``eval_duration`` (the generated tokens). ``created_at`` is RFC 3339 UTC. ``logprobs``
(asked for): one entry per generated token, a stream line carrying those of its piece. Errors use
:class:`~skippy.engine.protocols.ollama.model_wire.OllamaError`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from skippy.engine.protocols.base import UNSET, UnsetType, WireStruct


class OllamaCallFunction(WireStruct, kw_only=True):
    """A call's ``function``: ``arguments`` a JSON object; ``index`` its place among the message's calls."""

    name: str
    arguments: dict[str, Any]
    index: int | UnsetType = UNSET


class OllamaReplyToolCall(WireStruct, kw_only=True):
    id: str | UnsetType = UNSET
    function: OllamaCallFunction


class OllamaReplyMessage(WireStruct, kw_only=True):
    """The assistant message of ``/api/chat`` (and a stream line's piece of it)."""

    role: str = "assistant"
    content: str = ""
    thinking: str | UnsetType = UNSET
    tool_calls: list[OllamaReplyToolCall] | UnsetType = UNSET


class OllamaTokenLogprob(WireStruct, kw_only=True):
    """One token and its natural-log probability (Ollama's ``api.TokenLogprob``); ``bytes`` its UTF-8 bytes
    (absent where the engine's shape has none: the raw completion path's alternatives)."""

    token: str
    logprob: float | None
    bytes: list[int] | UnsetType = UNSET


class OllamaLogprob(OllamaTokenLogprob, kw_only=True):
    """A generated token's entry of ``logprobs`` (Ollama's ``api.Logprob``): with ``top_logprobs``, the most
    likely tokens at its position (``top_logprobs`` of the request, most likely first)."""

    top_logprobs: list[OllamaTokenLogprob] | UnsetType = UNSET


class _Final(WireStruct, kw_only=True):
    """The counts of the last object (``done: true``); absent from the others."""

    done_reason: str | UnsetType = UNSET
    total_duration: int | UnsetType = UNSET
    load_duration: int | UnsetType = UNSET
    prompt_eval_count: int | UnsetType = UNSET
    prompt_eval_duration: int | UnsetType = UNSET
    eval_count: int | UnsetType = UNSET
    eval_duration: int | UnsetType = UNSET


class OllamaChatResponse(_Final, kw_only=True):
    """``/api/chat``: the reply, or one line of its stream."""

    model: str
    created_at: str
    message: OllamaReplyMessage
    done: bool
    logprobs: list[OllamaLogprob] | UnsetType = UNSET


class OllamaGenerateResponse(_Final, kw_only=True):
    """``/api/generate``: ``response`` is the text (a stream line: its next piece), ``thinking`` the
    reasoning; ``context`` (deprecated) is not sent."""

    model: str
    created_at: str
    response: str
    thinking: str | UnsetType = UNSET
    done: bool
    logprobs: list[OllamaLogprob] | UnsetType = UNSET


class OllamaEmbedResponse(WireStruct, kw_only=True):
    """``/api/embed``: one vector per input, in order (L2-normalized, as Ollama's)."""

    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class OllamaEmbeddingResponse(WireStruct, kw_only=True):
    """Legacy ``/api/embeddings``: the vector of one ``prompt``."""

    embedding: list[float] = msgspec.field(default_factory=list)


RESPONSES: tuple[type, ...] = (OllamaChatResponse, OllamaGenerateResponse, OllamaEmbedResponse, OllamaEmbeddingResponse)
