"""The OpenAI routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/models``
(:mod:`skippy.engine.protocols.openai`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from quart import Response, request

from skippy.engine.errors import InvalidRequest
from skippy.engine.lora import LoraAdapters
from skippy.engine.protocols.anthropic.translate import model_info, model_info_list
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
)
from skippy.engine.routing import AUTO, is_auto
from skippy.http.context import Shared, current, shared
from skippy.http.replies import (
    json_response,
)
from skippy.http.routes.base import (
    check_limits,
    completion_tokens,
    is_anthropic_client,
    read_body,
    stream,
    unless_gone,
)

# -- handlers ---------------------------------------------------------------------------------------

async def chat_completions() -> Response:
    app, ctx = shared(), current()
    req = await read_body(ChatCompletionRequest, ctx)
    check_limits(app.settings, req.messages, req)
    eng, req = await app.routed(req)  # model "auto": the chosen model's id, hooks on
    if req.stream:
        return await stream(app, ctx, lambda: eng.chat_stream(req))
    result = await unless_gone(app, ctx, eng.chat(req))
    ctx.tokens = completion_tokens(result)
    return json_response(result)


async def completions() -> Response:
    app, ctx = shared(), current()
    req = await read_body(CompletionRequest, ctx)
    check_limits(app.settings, [], req)
    eng, req = await app.routed(req)  # model "auto": the default model (a prompt has no images, no tools)
    if req.stream:
        return await stream(app, ctx, lambda: eng.completion_stream(req))
    result = await unless_gone(app, ctx, eng.completion(req))
    ctx.tokens = completion_tokens(result)
    return json_response(result)


async def embeddings() -> Response:
    app, ctx = shared(), current()
    req = await read_body(EmbeddingRequest, ctx)
    eng = await app.engine_for(req.model)
    result = await unless_gone(app, ctx, eng.embeddings(req))
    return json_response(result)


def _architecture(vision: bool) -> openai_wire.ModelArchitecture:
    return openai_wire.ModelArchitecture(input_modalities=["text", "image"] if vision else ["text"])


def _model(eng: Any, name: str) -> openai_wire.Model:
    meta = eng.meta
    return openai_wire.Model(id=name, created=eng.created, meta=openai_wire.ModelDetails(
        n_ctx=meta.n_ctx_seq, n_ctx_train=meta.n_ctx_train, n_vocab=meta.n_vocab, parallel=meta.n_seq_max),
        architecture=_architecture(meta.vision), max_context_length=meta.n_ctx_seq,
        capabilities=openai_wire.ModelCardCapabilities(completion_chat=meta.generates, function_calling=meta.generates,
                                                       completion_fim=meta.generates and meta.fim.available,
                                                       vision=meta.vision))


def _pool_model(pool: Any, model_id: str, name: str) -> openai_wire.Model:
    """A ``/v1/models`` entry of a model of several: its ``state`` and llama-server router mode's ``status``;
    ``meta`` while it is loaded."""
    state = pool.state(model_id)
    eng = pool.engine(model_id)
    vision = pool.model(model_id).config.mmproj is not None  # known from the settings, loaded or not
    entry = _model(eng, name) if eng is not None else openai_wire.Model(
        id=name, created=pool.created(model_id), architecture=_architecture(vision),
        capabilities=openai_wire.ModelCardCapabilities(vision=vision))
    error = pool.error(model_id)
    entry.state = state
    entry.status = openai_wire.ModelStatus(value="unloaded" if state == "failed" else state,
                                    failed=True if error else wire.UNSET, error=error or wire.UNSET)
    return entry


def _several(app: Shared) -> Any:
    """The pool whose models ``/v1/models`` lists with their state: when several models are served (and the
    server has started), or one that is unloaded (``--keep-alive``); else ``None``."""
    pool = app.state.pool
    if pool is None or not pool.ready.is_set() or (pool.single and pool.engine(pool.default) is not None):
        return None
    return pool


def _auto_model(app: Shared) -> openai_wire.Model:
    """The ``auto`` entry: the server chooses the model (:mod:`skippy.engine.routing`). Listed among several
    models, it has a ``state`` and ``status`` as they do: ``loaded`` while some model is (it answers without a
    load), else ``unloaded``."""
    entry = openai_wire.Model(id=AUTO, created=int(app.state.started))
    pool = app.state.pool
    if pool is not None and pool.ready.is_set():
        entry.state = "loaded" if pool.loaded_engines() else "unloaded"
        entry.status = openai_wire.ModelStatus(value=entry.state)
    return entry


def _lists_auto(app: Shared) -> bool:
    """Whether ``/v1/models`` lists ``auto``: several models are served, or ``--consult`` peers are configured
    (``auto`` is accepted by every server; with one model and no peers it is just that model, not listed)."""
    pool = app.state.pool
    if pool is None:
        eng = app.engine()
        return bool(getattr(eng.config, "consult", ())) and not any(is_auto(n) for n in eng.served_names)
    if pool.answers(AUTO):  # a served model's own name: it answers, as any model name
        return False
    return not pool.single or any(getattr(pool.model(i).config, "consult", ()) for i in pool.ids())


def _answers_auto(app: Shared, model_id: str) -> bool:
    """Whether ``GET /v1/models/{model_id}`` is the ``auto`` entry (no served model answers to ``auto``)."""
    if not is_auto(model_id):
        return False
    pool = app.state.pool
    if pool is not None:
        return not pool.answers(model_id)
    return not any(is_auto(n) for n in app.engine().served_names)


def _adapters(entry: openai_wire.Model, lora: tuple[tuple[str, float], ...]) -> list[openai_wire.Model]:
    """The ``/v1/models`` entries of a model's LoRA adapters: ``BASE:ADAPTER`` each (vLLM's naming), as the base
    model's ``entry`` with vLLM's ``parent`` (the base) and ``root`` (the adapter file)."""
    return [msgspec.structs.replace(entry, id=f"{entry.id}:{a.name}", parent=entry.id, root=a.path)
            for a in LoraAdapters(lora).adapters]


async def models() -> Response:
    """OpenAI ``GET /v1/models``: the served model under each of its names; with several models, each with its
    ``state`` (``loaded``, ``loading``, ``unloaded``, ``failed``) and llama-server router mode's ``status``; each
    model's LoRA adapters as ``BASE:ADAPTER`` after it; then
    ``auto`` (the server chooses) when several models are served or ``--consult`` peers are configured."""
    app = shared()
    pool = _several(app)
    data: list[openai_wire.Model] = []
    if pool is not None:
        for i in pool.ids():
            entries = [_pool_model(pool, i, name) for name in pool.model(i).listed]
            data += entries + _adapters(entries[0], pool.model(i).config.lora)
    else:
        eng = app.engine()
        data = [_model(eng, name) for name in eng.served_names]
        data += _adapters(data[0], eng.config.lora)
    if _lists_auto(app):
        data.append(_auto_model(app))
    if is_anthropic_client():  # the Anthropic SDKs' models.list: Anthropic's page
        try:
            limit = int(request.args.get("limit", "20"))
        except ValueError:
            raise InvalidRequest("limit must be an integer", param="limit") from None
        return json_response(model_info_list([model_info(m.id, m.created) for m in data], limit=limit,
                                             after_id=request.args.get("after_id"),
                                             before_id=request.args.get("before_id")))
    return json_response(openai_wire.ModelList(data=data))


async def model(model_id: str) -> Response:
    """OpenAI ``GET /v1/models/{id}`` (Anthropic's ``ModelInfo`` when the request has ``anthropic-version``)."""
    entry = await _one_model(model_id)
    if is_anthropic_client():
        return json_response(model_info(entry.id, entry.created))
    return json_response(entry)


async def _one_model(model_id: str) -> openai_wire.Model:
    app = shared()
    if _answers_auto(app, model_id):
        return _auto_model(app)
    named = app.lora_model(model_id)  # "BASE:ADAPTER" (404 for an adapter BASE does not have)
    if named is not None:
        base, adapter = named
        pool = _several(app)
        if pool is not None:
            found = pool.match(base)
            entry = _pool_model(pool, found, found)
        else:
            eng = app.engine()
            entry = _model(eng, eng.model_id)
        return msgspec.structs.replace(entry, id=f"{entry.id}:{adapter.name}", parent=entry.id, root=adapter.path)
    pool = _several(app)
    if pool is not None:
        found = pool.match(model_id)
        return _pool_model(pool, found, model_id if model_id in pool.model(found).listed else found)
    eng = app.engine()
    return _model(eng, eng.find_model(model_id))
