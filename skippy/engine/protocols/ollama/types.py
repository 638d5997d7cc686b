"""Ollama's native request bodies (``docs/api.md`` of ollama/ollama), as msgspec Structs.

``POST /api/chat`` (:class:`OllamaChatRequest`), ``POST /api/generate`` (:class:`OllamaGenerateRequest`),
``POST /api/embed`` (:class:`OllamaEmbedRequest`) and the legacy ``POST /api/embeddings``
(:class:`OllamaEmbeddingsRequest`). ``stream`` defaults to true on the two generation routes, as Ollama's.
``options`` stays a free JSON object here: :func:`~skippy.engine.protocols.ollama.translate.sampling`
checks each known option's type (400 naming it) and names the unknown ones (a warning, as Ollama's).
"""

from __future__ import annotations

from typing import Any

import msgspec


class OllamaToolCallFunction(msgspec.Struct, omit_defaults=True):
    """A call's ``function``: ``arguments`` is a JSON object (Ollama's), not a string (OpenAI's)."""

    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    index: int | None = None


class OllamaToolCall(msgspec.Struct, omit_defaults=True):
    function: OllamaToolCallFunction
    id: str | None = None
    type: str | None = None


class OllamaMessage(msgspec.Struct, omit_defaults=True):
    """One chat message: ``role`` system / user / assistant / tool; ``content`` its text (``null`` is ``""``, as
    Ollama's decoder reads it: an assistant's tool-call turn often has no text); ``thinking`` an assistant's
    reasoning; ``tool_name`` names the tool a ``tool`` message answers; ``images`` base64 images (read by a
    model served with its ``--mmproj`` projector)."""

    role: str
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class _Generation(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What both generation routes take. ``logprobs``: each generated token's log probability in the reply;
    ``top_logprobs`` (0-20): that many alternatives at each position too (Ollama 0.12.11's fields).
    ``mesh_hooks`` (skippy's, as on OpenAI chat): run the hook policy and consultation for this request
    (``false`` keeps them off under ``--hooks-default-on`` too)."""

    model: str
    stream: bool = True
    format: str | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    think: bool | str | None = None
    keep_alive: str | int | float | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    mesh_hooks: bool | None = None


class OllamaChatRequest(_Generation, kw_only=True):
    """``POST /api/chat``. ``tool_choice`` is not Ollama's: OpenAI's, accepted as an extension (``"auto"``,
    ``"required"``, ``"none"`` or a named function), as llama-server takes extensions on OpenAI's routes."""

    messages: list[OllamaMessage] = msgspec.field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None


class OllamaGenerateRequest(_Generation, kw_only=True):
    """``POST /api/generate``: ``prompt`` (with ``system``) through the chat template, or as is with
    ``raw``; ``suffix`` makes it fill-in-the-middle; ``template`` is refused (the GGUF's Jinja template is
    what renders); ``context`` (deprecated token list) is accepted and not used; ``images`` as a chat message's
    (refused with ``raw`` or ``suffix``)."""

    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    raw: bool = False
    context: list[int] | None = None
    images: list[str] | None = None


class OllamaEmbedRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``POST /api/embed``: ``input`` a string or a list of strings (none, ``""`` or ``[]``: the model is only
    loaded, Ollama's preload of an embedding model); ``truncate`` (default true) cuts an input longer than the
    context, false makes it a 400."""

    model: str
    input: str | list[str] | None = None
    truncate: bool = True
    dimensions: int | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | int | float | None = None


class OllamaEmbeddingsRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Legacy ``POST /api/embeddings``: one ``prompt``."""

    model: str
    prompt: str
    options: dict[str, Any] | None = None
    keep_alive: str | int | float | None = None


REQUESTS: tuple[type, ...] = (OllamaChatRequest, OllamaGenerateRequest, OllamaEmbedRequest, OllamaEmbeddingsRequest)
