"""``/v1/fim/completions``: Mistral's fill-in-the-middle API (Codestral's), a translation onto the legacy
Completions path (:mod:`skippy.engine.protocols.mistral`), answered in Mistral's ``chat.completion`` shape.
"""

from __future__ import annotations

from typing import Any

from quart import Response

from skippy.actors.streams import ReplyStream
from skippy.engine.protocols.mistral import translate as mistral
from skippy.engine.protocols.mistral.types import FimCompletionRequest
from skippy.http.context import current, shared
from skippy.http.replies import json_response
from skippy.http.routes.base import (
    TranslatedStream,
    check_limits,
    completion_tokens,
    read_body,
    stream,
    unless_gone,
)


async def fim_completions() -> Response:
    """Mistral ``POST /v1/fim/completions``: ``prompt`` and ``suffix`` become a Completions request with
    ``suffix`` (the model's FIM tokens); the ``text_completion`` (or its chunks) becomes a ``chat.completion``
    (or ``chat.completion.chunk`` events, the last with ``usage``, then ``data: [DONE]``)."""
    app, ctx = shared(), current()
    req = await read_body(FimCompletionRequest, ctx)
    completion = mistral.to_completion_request(req)
    check_limits(app.settings, [], completion)
    eng, completion = await app.routed(completion)  # model "auto": the default model (a prompt has no images)
    if req.stream:
        async def start() -> ReplyStream[Any]:
            return TranslatedStream(await eng.completion_stream(completion), mistral.FimStream())
        return await stream(app, ctx, start)
    result = await unless_gone(app, ctx, eng.completion(completion))
    ctx.tokens = completion_tokens(result)
    return json_response(mistral.to_fim_completion(result))
