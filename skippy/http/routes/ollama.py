"""Ollama's native generation routes: ``/api/chat``, ``/api/generate``, ``/api/embed``, ``/api/embeddings``
(:mod:`skippy.engine.protocols.ollama`), a translation onto the chat, completions and embeddings paths.

A stream (``stream`` defaults to true, as Ollama's) is NDJSON (``application/x-ndjson``): one JSON object a
line, flushed as tokens come, no pings, no end marker; the last object has ``done: true`` and the counts. An
error before the first line is Ollama's ``{"error": ...}`` with its status (400 bad input, 404 a model this
server does not serve: Ollama's ``model "x" not found``, then what is true of it, :func:`not_found`); after it,
one last line ``{"error": ...}``, as Ollama ends a stream that fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from quart import Response

from skippy.actors.engine import Engine
from skippy.actors.streams import ReplyStream
from skippy.engine.chat.images import rename_image_error
from skippy.engine.errors import EngineError, ModelNotFound, NotSupported
from skippy.engine.protocols.ollama import translate as ollama
from skippy.engine.protocols.ollama.model_wire import OllamaError
from skippy.engine.protocols.ollama.types import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
)
from skippy.engine.protocols.ollama.wire import OllamaEmbeddingResponse, OllamaEmbedResponse
from skippy.engine.protocols.openai.types import ChatCompletionRequest
from skippy.http.context import RequestContext, Shared, current, shared
from skippy.http.replies import encode, json_response
from skippy.http.routes.base import (
    SseFormat,
    check_limits,
    completion_tokens,
    read_body,
    stream,
    unless_gone,
)

T = TypeVar("T")
log = logging.getLogger("skippy.http")

#: the paths whose answers, errors included, are in Ollama's shapes
OLLAMA_PATH = "/api/"


def is_ollama_path(path: str) -> bool:
    """``/api/...``: Ollama's routes (their errors are ``{"error": ...}``)."""
    return path.startswith(OLLAMA_PATH)


def _line(obj: Any) -> bytes:
    return encode(obj) + b"\n"


def _ndjson(translator: ollama.ChatStream | ollama.GenerateStream) -> SseFormat:
    """The NDJSON framing of one stream: each engine chunk becomes the translator's lines."""
    return SseFormat(event=lambda chunk: b"".join(_line(o) for o in translator.lines(chunk)),
                     error=lambda exc: _line(OllamaError(error=exc.message)), ping=None, done=None,
                     media_type="application/x-ndjson")


def not_found(name: str, served: list[str] | None = None) -> ModelNotFound:
    """404 for a model this server does not serve, in Ollama's words (``model "x" not found``) followed by what
    is true (:func:`~skippy.engine.protocols.ollama.models.not_served`): whether it is in the model cache or a
    registry model ``/api/pull`` takes, which models this server serves (``served``) and how to serve another.
    Not Ollama's ``try pulling it first``: pulling does not make this server serve a model."""
    from skippy.engine.protocols.ollama.models import name_candidates, not_served
    from skippy.models import cached_file, lookup

    candidates = [c for c in name_candidates(name) if "/" not in c]
    pullable = any(lookup(c) is not None for c in candidates)
    cached = any((f := cached_file(c)) is not None and f.is_file() for c in candidates)
    return ModelNotFound(not_served(name, served=served or [], cached=cached, pullable=pullable), param="model")


async def _engine(app: Shared, name: str, keep_alive: Any, chat: ChatCompletionRequest | None = None) -> Engine:
    """The engine of the served model ``name`` names (a 404 for any other name, as Ollama's, also when one
    model is served); a request's ``keep_alive`` applies to that model from now on, one without it returns
    the model to ``--keep-alive`` (Ollama: the latest request's holds). ``chat``: the translated
    chat request, whose images a model that cannot read them refuses before it loads
    (:meth:`Shared.engine_for`)."""
    seconds = ollama.keep_alive_seconds(keep_alive)
    pool = app.state.pool
    if pool is None:
        return app.engine()
    if not pool.ready.is_set():
        return await app.engine_for(name)  # 503 while the server starts
    found = pool.lookup(name)
    if found is None:
        raise not_found(name, pool.ids())
    return await app.engine_for(found, chat=chat, keep_alive=seconds)


def _unload_unloaded(app: Shared, req: OllamaChatRequest | OllamaGenerateRequest) -> Response | None:
    """The answer to an unload request (:func:`~skippy.engine.protocols.ollama.translate.unloads`) for a served
    model that is not loaded: ``done_reason`` ``unload`` at once, nothing loaded first (Ollama does not load a
    model to unload it); ``None`` otherwise (the route goes on: a loaded model unloads once it ends)."""
    pool = app.state.pool
    if not ollama.unloads(req) or pool is None or not pool.ready.is_set():
        return None
    found = pool.lookup(req.model)
    if found is None:
        raise not_found(req.model, pool.ids())
    return json_response(ollama.load_response(req)) if pool.engine(found) is None else None


def _ignored(ctx: RequestContext, names: list[str]) -> None:
    """Options not applied are named in ``X-Skippy-Ignored-Fields``, as unknown body fields are."""
    ctx.ignored_fields.extend(f"options.{n}" for n in names)


def _embed_options(ctx: RequestContext, options: dict[str, Any] | None) -> int | None:
    """An embedding request's ``options``, checked as the generation routes check them (a wrong type is a
    400 naming it); none changes an embedding, so every one but ``num_ctx`` (returned, for :func:`_note_ctx`)
    is named in ``X-Skippy-Ignored-Fields``."""
    _, _, num_ctx = ollama.sampling(options)
    _ignored(ctx, [name for name, value in (options or {}).items() if value is not None and name != "num_ctx"])
    return num_ctx


def _note_ctx(eng: Engine, num_ctx: int | None) -> None:
    """``num_ctx`` above the model's context per sequence cannot be applied (the context is the server's,
    ``--n-ctx``): it is named in ``X-Skippy-Ignored-Fields`` and the request runs in the server's context, as
    Ollama runs one above the model's training context in that context. Clients send the training context
    that ``/api/show`` reports (LlamaIndex's ``Ollama`` on every request), so refusing it refused them all."""
    if num_ctx is not None and num_ctx > eng.meta.n_ctx_seq:
        log.info("options.num_ctx %d is above the context of %d tokens per sequence (--n-ctx): the request runs "
                 "in that context", num_ctx, eng.meta.n_ctx_seq)
        _ignored(current(), ["num_ctx"])


def _checked(eng: Engine, req: OllamaChatRequest | OllamaGenerateRequest, num_ctx: int | None) -> Response | None:
    """What both generation routes check once they hold the model's engine: ``num_ctx`` against its context,
    ``think`` against its chat template (:func:`~skippy.engine.protocols.ollama.translate.check_thinking`);
    then the answer to a request that only loads the model, or unloads it with ``keep_alive`` 0 (Ollama's
    ``done_reason`` ``load`` / ``unload``: the engine call above loaded it, and its ``keep_alive`` of 0 unloads
    it once this request ends), else ``None``: the route generates."""
    _note_ctx(eng, num_ctx)
    ollama.check_thinking(req, eng.renderer.template.caps.supports_thinking)
    if ollama.loads_only(req):
        return json_response(ollama.load_response(req))
    return None


async def _renamed(call: Awaitable[T], body: ChatCompletionRequest,
                   req: OllamaChatRequest | OllamaGenerateRequest) -> T:
    """``await call``; an error naming an image part of the translated ``body`` named as Ollama's request has
    it (``messages.0.images.1``)."""
    try:
        return await call
    except EngineError as exc:
        raise rename_image_error(exc, body.messages, ollama.image_paths(req)) from None


def _ns_since(t0: float) -> int:
    return int((time.monotonic() - t0) * 1e9)


async def ollama_chat() -> Response:
    """Ollama ``POST /api/chat``. No ``messages`` loads the model and answers ``done`` at once (Ollama's way to
    preload; with ``keep_alive`` 0, to unload)."""
    app, ctx = shared(), current()
    t0 = time.monotonic()
    req = await read_body(OllamaChatRequest, ctx)
    body, ignored, num_ctx = ollama.chat_request(req)
    _ignored(ctx, ignored)
    check_limits(app.settings, body.messages, body)
    if (unloaded := _unload_unloaded(app, req)) is not None:
        return unloaded
    t_load = time.monotonic()  # load_duration: the wait for the model's engine (its load when it was not loaded)
    eng = await _renamed(_engine(app, req.model, req.keep_alive, body), body, req)
    load_ns = _ns_since(t_load)
    if (loaded := _checked(eng, req, num_ctx)) is not None:
        return loaded
    if body.stream:
        translator = ollama.ChatStream(req.model, t0, load_ns)
        return await stream(app, ctx, lambda: _renamed(eng.chat_stream(body), body, req), _ndjson(translator))
    result = await unless_gone(app, ctx, _renamed(eng.chat(body), body, req))
    ctx.tokens = completion_tokens(result)
    return json_response(ollama.chat_response(result, req.model, _ns_since(t0), load_ns))


async def ollama_generate() -> Response:
    """Ollama ``POST /api/generate``: through the chat template, or as is (``raw``), or fill-in-the-middle
    (``suffix``). An empty prompt loads the model and answers ``done`` at once (Ollama's way to preload; with
    ``keep_alive`` 0, to unload)."""
    app, ctx = shared(), current()
    t0 = time.monotonic()
    req = await read_body(OllamaGenerateRequest, ctx)
    body, ignored, num_ctx = ollama.generate_request(req)
    _ignored(ctx, ignored)
    check_limits(app.settings, body.messages if isinstance(body, ChatCompletionRequest) else [], body)
    if (unloaded := _unload_unloaded(app, req)) is not None:
        return unloaded
    t_load = time.monotonic()
    if isinstance(body, ChatCompletionRequest):
        eng = await _renamed(_engine(app, req.model, req.keep_alive, body), body, req)
    else:
        eng = await _engine(app, req.model, req.keep_alive)
    load_ns = _ns_since(t_load)
    if (loaded := _checked(eng, req, num_ctx)) is not None:
        return loaded
    if body.stream:
        translator = ollama.GenerateStream(req.model, t0, load_ns)

        async def start() -> ReplyStream[Any]:
            if isinstance(body, ChatCompletionRequest):
                return await _renamed(eng.chat_stream(body), body, req)
            return await eng.completion_stream(body)

        return await stream(app, ctx, start, _ndjson(translator))
    result = await unless_gone(app, ctx, _renamed(eng.chat(body), body, req) if isinstance(body, ChatCompletionRequest)
                               else eng.completion(body))
    ctx.tokens = completion_tokens(result)
    return json_response(ollama.generate_response(result, req.model, _ns_since(t0), load_ns))


async def ollama_embed() -> Response:
    """Ollama ``POST /api/embed`` (501 unless the server runs with ``--embeddings``). No ``input`` (or ``""``,
    ``[]``) loads the model and answers no embeddings, as Ollama's preload of an embedding model."""
    app, ctx = shared(), current()
    t0 = time.monotonic()
    req = await read_body(OllamaEmbedRequest, ctx)
    num_ctx = _embed_options(ctx, req.options)
    t_load = time.monotonic()
    eng = await _engine(app, req.model, req.keep_alive)
    load_ns = _ns_since(t_load)
    _note_ctx(eng, num_ctx)
    if not req.input:
        if eng.meta.embeddings is None:  # as the embedding itself would answer
            raise NotSupported("This server does not support embeddings. Start it with `--embeddings`",
                               code="not_supported")
        return json_response(OllamaEmbedResponse(model=req.model, embeddings=[], total_duration=_ns_since(t0),
                                                 load_duration=load_ns, prompt_eval_count=0))
    result = await unless_gone(app, ctx, eng.embeddings(ollama.embed_request(req)))
    return json_response(ollama.embed_response(result, req.model, _ns_since(t0), load_ns))


async def ollama_embeddings() -> Response:
    """Ollama's legacy ``POST /api/embeddings``: one ``prompt`` -> ``{"embedding": [...]}``; an empty ``prompt``
    loads the model and answers ``{"embedding": []}``, as Ollama's."""
    app, ctx = shared(), current()
    req = await read_body(OllamaEmbeddingsRequest, ctx)
    num_ctx = _embed_options(ctx, req.options)
    eng = await _engine(app, req.model, req.keep_alive)
    _note_ctx(eng, num_ctx)
    if not req.prompt:
        if eng.meta.embeddings is None:  # as the embedding itself would answer
            raise NotSupported("This server does not support embeddings. Start it with `--embeddings`",
                               code="not_supported")
        return json_response(OllamaEmbeddingResponse(embedding=[]))
    result = await unless_gone(app, ctx, eng.embeddings(ollama.embed_request(req)))
    vector = result.data[0].embedding if result.data else []
    return json_response(OllamaEmbeddingResponse(embedding=list(vector) if isinstance(vector, list) else []))


def error_body(message: str) -> bytes:
    """Ollama's error body, ``{"error": message}``, for an error answer on an ``/api/`` path
    (:mod:`skippy.http.app` rewrites the OpenAI envelopes there)."""
    return encode(OllamaError(error=message))


__all__ = ["error_body", "is_ollama_path", "not_found", "ollama_chat", "ollama_embed", "ollama_embeddings",
           "ollama_generate"]
