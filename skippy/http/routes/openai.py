"""The OpenAI routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/models``
(:mod:`skippy.engine.protocols.openai`).
"""

from __future__ import annotations

from typing import Any

from quart import Response

from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
)
from skippy.http.context import Shared, current, shared
from skippy.http.replies import (
    json_response,
)
from skippy.http.routes.base import (
    check_limits,
    completion_tokens,
    read_body,
    stream,
    unless_gone,
)

# -- handlers ---------------------------------------------------------------------------------------

async def chat_completions() -> Response:
    app, ctx = shared(), current()
    req = await read_body(ChatCompletionRequest, ctx)
    check_limits(app.settings, req.messages, req)
    eng = await app.engine_for(req.model)
    if req.stream:
        return await stream(app, ctx, lambda: eng.chat_stream(req))
    result = await unless_gone(app, ctx, eng.chat(req))
    ctx.tokens = completion_tokens(result)
    return json_response(result)


async def completions() -> Response:
    app, ctx = shared(), current()
    req = await read_body(CompletionRequest, ctx)
    check_limits(app.settings, [], req)
    eng = await app.engine_for(req.model)
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


def _model(eng: Any, name: str) -> openai_wire.Model:
    meta = eng.meta
    return openai_wire.Model(id=name, created=eng.created, meta=openai_wire.ModelDetails(
        n_ctx=meta.n_ctx_seq, n_ctx_train=meta.n_ctx_train, n_vocab=meta.n_vocab, parallel=meta.n_seq_max))


def _pool_model(pool: Any, model_id: str, name: str) -> openai_wire.Model:
    """A ``/v1/models`` entry of a model of several: its ``state`` and llama-server router mode's ``status``;
    ``meta`` while it is loaded."""
    state = pool.state(model_id)
    eng = pool.engine(model_id)
    entry = _model(eng, name) if eng is not None else openai_wire.Model(id=name, created=pool.created(model_id))
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


async def models() -> Response:
    """OpenAI ``GET /v1/models``: the served model under each of its names; with several models, each with its
    ``state`` (``loaded``, ``loading``, ``unloaded``, ``failed``) and llama-server router mode's ``status``."""
    app = shared()
    pool = _several(app)
    if pool is not None:
        return json_response(openai_wire.ModelList(data=[_pool_model(pool, i, name) for i in pool.ids()
                                                  for name in pool.model(i).listed]))
    eng = app.engine()
    return json_response(openai_wire.ModelList(data=[_model(eng, name) for name in eng.served_names]))


async def model(model_id: str) -> Response:
    app = shared()
    pool = _several(app)
    if pool is not None:
        found = pool.match(model_id)
        return json_response(_pool_model(pool, found, model_id if model_id in pool.model(found).listed else found))
    eng = app.engine()
    return json_response(_model(eng, eng.find_model(model_id)))
