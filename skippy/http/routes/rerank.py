"""The reranking routes (:mod:`skippy.engine.protocols.rerank`): ``POST /v1/rerank`` in the Jina / Cohere shape
(also ``/rerank``, ``/v2/rerank`` and llama-server's ``/reranking``, ``/v1/reranking``) and vLLM's
``POST /score`` (also ``/v1/score``). A server without ``--reranking`` answers 400 naming the flag."""

from __future__ import annotations

from quart import Response

from skippy.engine.protocols.rerank.types import RerankRequest, ScoreRequest
from skippy.http.context import current, shared
from skippy.http.replies import json_response
from skippy.http.routes.base import read_body, unless_gone


async def rerank() -> Response:
    app, ctx = shared(), current()
    req = await read_body(RerankRequest, ctx)
    eng = await app.engine_for(req.model)
    return json_response(await unless_gone(app, ctx, eng.rerank(req)))


async def score() -> Response:
    app, ctx = shared(), current()
    req = await read_body(ScoreRequest, ctx)
    eng = await app.engine_for(req.model)
    return json_response(await unless_gone(app, ctx, eng.score(req)))
