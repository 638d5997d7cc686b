"""llama-server's own routes: ``/completion``, ``/infill``, ``/slots``, ``/props``, ``/tokenize``,
``/detokenize``, ``/apply-template``, ``/v1/chat/completions/input_tokens``
(:mod:`skippy.engine.protocols.llama_server`).
"""

from __future__ import annotations

import re
from pathlib import Path

import llama_cpp
from quart import Response, request

import skippy
from skippy.engine.errors import InvalidRequest, NotSupported
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.llama_server.types import (
    ApplyTemplateRequest,
    DetokenizeRequest,
    InfillRequest,
    ModelActionRequest,
    NativeCompletionRequest,
    NativeEmbeddingRequest,
    SlotActionRequest,
    TokenizeRequest,
)
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
)
from skippy.http.context import current, shared
from skippy.http.replies import (
    error_response,
    json_response,
)
from skippy.http.routes.base import (
    NATIVE_SSE,
    check_limits,
    read_body,
    stream,
    unless_gone,
)


async def infill() -> Response:
    app, ctx = shared(), current()
    req = await read_body(InfillRequest, ctx)
    name, req = app.adapted(req)  # model "BASE:ADAPTER": a LoRA adapter of BASE
    eng = await app.engine_for(name)
    if req.stream:
        return await stream(app, ctx, lambda: eng.infill_stream(req), NATIVE_SSE)
    results = await unless_gone(app, ctx, eng.infill(req))
    ctx.tokens = ctx.trace.completion_tokens
    return json_response(results[0] if len(results) == 1 else results)  # llama-server: a list for several


async def completion_native() -> Response:
    """llama-server's native ``/completion``: one object for one prompt, a list for several; its SSE stream
    has no ``[DONE]`` (llama-server ends it with the ``stop: true`` chunk)."""
    app, ctx = shared(), current()
    req = await read_body(NativeCompletionRequest, ctx)
    check_limits(app.settings, [], req)
    name, req = app.adapted(req)  # model "BASE:ADAPTER": a LoRA adapter of BASE
    eng = await app.engine_for(name)
    if req.stream:
        return await stream(app, ctx, lambda: eng.completion_native_stream(req), NATIVE_SSE)
    results = await unless_gone(app, ctx, eng.completion_native(req))
    ctx.tokens = ctx.trace.completion_tokens
    return json_response(results[0] if len(results) == 1 else results)  # llama-server: a list for several


async def slots() -> Response:
    """llama-server ``GET /slots``: 501 with ``--no-slots``; ``?fail_on_no_slot=1`` answers 503 when no slot
    is idle. A model that is not loaded (several served) has no slots, ``[]``: reading them neither loads it nor
    counts as its use (:meth:`~skippy.http.context.Shared.loaded_engine`)."""
    app = shared()
    if not app.settings.slots:
        raise NotSupported("This server does not support slots endpoint. Start it with `--slots`")
    eng = app.loaded_engine(request.args.get("model"))
    states = eng.slots() if eng is not None else []
    if request.args.get("fail_on_no_slot") not in (None, "", "0", "false") and eng is not None \
            and all(s.is_processing for s in states):  # (a model not loaded has its slots once it loads)
        return error_response(503, "no slot available", "unavailable_error", code="no_slot_available")
    return json_response(states)


#: a slot file name: no directory part, no hidden or parent names (llama.cpp fs_validate_filename's spirit)
_SLOT_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}")


async def slot_action(id_slot: str) -> Response:
    """llama-server ``POST /slots/{id}?action=save|restore|erase`` (``{"filename": ...}`` for save and restore,
    a plain name inside ``--slot-save-path``); 501 without ``--slot-save-path``."""
    app, ctx = shared(), current()
    save_dir = app.settings.slot_save_path
    if save_dir is None:
        raise NotSupported("This server does not support slots action. Start it with `--slot-save-path`")
    try:
        slot = int(id_slot)
    except ValueError:
        raise InvalidRequest("Invalid slot ID", param="id_slot") from None
    action = request.args.get("action", "")
    if action not in ("save", "restore", "erase"):
        raise InvalidRequest("Invalid action", param="action")
    path = None
    if action != "erase":
        body = await read_body(SlotActionRequest, ctx)
        if not _SLOT_FILE.fullmatch(body.filename) or ".." in body.filename:
            raise InvalidRequest("Invalid filename", param="filename")
        directory = Path(save_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = str(directory / body.filename)
        if action == "restore" and not Path(path).is_file():
            raise InvalidRequest(f"Unable to restore slot: no file {body.filename!r} in the slot save path",
                                 param="filename")
    eng = await app.engine_for(request.args.get("model"), required=False)
    result = await unless_gone(app, ctx, eng.slot_action(action, slot, path))
    if path is not None:
        result["filename"] = Path(path).name
    reply = {"save": wire.SlotSaved, "restore": wire.SlotRestored, "erase": wire.SlotErased}[action]
    return json_response(reply(**result))


async def lora_adapters() -> Response:
    """llama-server ``GET /lora-adapters``: ``[{"id", "path", "scale"}]`` of the model (``?model=``; default: the
    default model), the scales being the global ones (``[]`` without ``--lora``)."""
    eng = await shared().engine_for(request.args.get("model"), required=False)
    return json_response(eng.lora_adapters())


async def lora_adapters_apply() -> Response:
    """llama-server ``POST /lora-adapters``: a list of ``{"id", "scale"}`` sets the global scales (the adapters
    left out go to 0); ``{"success": true}``. A bad entry is a 400 naming it (``0.id``, ``1.scale``), nothing set."""
    app, ctx = shared(), current()
    body = await read_body(list, ctx)  # a JSON array, as llama-server requires
    eng = await app.engine_for(request.args.get("model"), required=False)
    eng.set_lora_adapters(body)
    return json_response(wire.LoraApplied())


async def props_change() -> Response:
    """llama-server ``POST /props``: 501 unless started with ``--props``; then ``{"success": true}`` (llama-server
    changes no property there either)."""
    app, ctx = shared(), current()
    if not app.settings.props:
        raise NotSupported("This server does not support changing global properties. Start it with `--props`")
    await read_body(dict, ctx)  # a JSON object, as llama-server parses it
    return json_response({"success": True})


async def embedding() -> Response:
    """llama-server ``POST /embedding`` (``/embeddings``): its own shape, not OpenAI's (``/v1/embeddings``)."""
    app, ctx = shared(), current()
    req = await read_body(NativeEmbeddingRequest, ctx)
    eng = await app.engine_for(req.model)
    return json_response(await unless_gone(app, ctx, eng.embeddings_native(req)))


async def tokenize() -> Response:
    app, ctx = shared(), current()
    req = await read_body(TokenizeRequest, ctx)
    eng = await app.engine_for(req.model or request.args.get("model"), required=False)
    content = [] if req.content is None else [req.content] if isinstance(req.content, str) else req.content
    bad = next((t for t in content if isinstance(t, int) and not 0 <= t < eng.meta.n_vocab), None)
    if bad is not None:
        raise InvalidRequest(f"token id {bad} is out of range (0..{eng.meta.n_vocab - 1})", param="content")
    tokens = await eng.tokenizer.tokenize_mixed(content, add_special=req.add_special,
                                                parse_special=req.parse_special)
    if req.with_pieces:
        out: list[int | wire.TokenPiece] = []
        for t in tokens:
            piece = eng.runtime.vocab.special_piece(t)  # special tokens as their text, as llama-server
            try:
                out.append(wire.TokenPiece(id=t, piece=piece.decode("utf-8")))
            except UnicodeDecodeError:
                out.append(wire.TokenPiece(id=t, piece=list(piece)))
        return json_response(wire.TokenizeResponse(tokens=out))
    return json_response(wire.TokenizeResponse(tokens=list(tokens)))


async def detokenize() -> Response:
    app, ctx = shared(), current()
    req = await read_body(DetokenizeRequest, ctx)
    eng = await app.engine_for(req.model or request.args.get("model"), required=False)
    try:
        content = await eng.tokenizer.detokenize(req.tokens)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="tokens") from exc
    return json_response(wire.DetokenizeResponse(content=content))


async def apply_template() -> Response:
    app, ctx = shared(), current()
    req = await read_body(ApplyTemplateRequest, ctx)
    check_limits(app.settings, req.messages, req)
    eng = await app.engine_for(req.model or request.args.get("model"), required=False)
    prompt = await app.guarded(ctx.deadline, eng.apply_template(req))
    return json_response(wire.ApplyTemplateResponse(prompt=prompt))


async def input_tokens() -> Response:
    """llama-server ``POST /v1/chat/completions/input_tokens``: a chat body -> ``{"input_tokens": N}``."""
    app, ctx = shared(), current()
    req = await read_body(ChatCompletionRequest, ctx)
    check_limits(app.settings, req.messages, req)
    eng = await app.engine_for(req.model)
    n = await unless_gone(app, ctx, eng.input_tokens(req))
    return json_response(wire.InputTokens(input_tokens=n))


async def props() -> Response:
    """llama-server ``GET /props``: the engine's (:meth:`Engine.props`), with the server's ``build_info`` and which
    optional routes answer (``endpoint_slots``, ``endpoint_props``, ``endpoint_metrics``), as llama-server's."""
    app = shared()
    eng = await app.engine_for(request.args.get("model"), required=False)
    return json_response({**eng.props(), "build_info": f"skippy-trio {skippy.__version__} (llama-cpp-python "
                                                       f"{llama_cpp.__version__})",
                          "endpoint_slots": app.settings.slots, "endpoint_props": app.settings.props,
                          "endpoint_metrics": app.settings.metrics})


# -- llama-server's router mode: /models/load, /models/unload ---------------------------------------------

async def models_load() -> Response:
    """``POST /models/load`` ``{"model"}``: load a served model now (waits until it is loaded; 503
    ``model_unavailable`` when it cannot load), kept loaded until ``--max-loaded`` or ``--keep-alive``
    unloads it, as if a request had used it. 404 for a name no model answers to. With one model served:
    it is loaded already."""
    app, ctx = shared(), current()
    req = await read_body(ModelActionRequest, ctx)
    pool = app.state.pool
    if pool is None or pool.single:
        app.engine()  # 503 while it loads
        return json_response(wire.ModelActionResult())
    name = pool.match(req.model)
    _, lease = await unless_gone(app, ctx, pool.acquire(name))
    lease.release()
    return json_response(wire.ModelActionResult())


async def models_unload() -> Response:
    """``POST /models/unload`` ``{"model"}``: unload a served model once its running requests end (the
    answer does not wait for that; a model that is not loaded stays so). 404 for a name no model answers
    to; 400 when the server serves one model (it stays loaded)."""
    app, ctx = shared(), current()
    req = await read_body(ModelActionRequest, ctx)
    pool = app.state.pool
    if pool is None or pool.single:
        raise InvalidRequest("this server serves one model, which stays loaded: /models/unload is for several "
                             "(--model repeated, --models-dir, --models-preset)", param="model")
    pool.unload(pool.match(req.model))
    return json_response(wire.ModelActionResult())
