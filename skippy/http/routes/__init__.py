"""The routes: one table (:data:`ROUTES`) that registers them on :data:`blueprint` and documents them.

Each :class:`Route` names its paths (the first is the one documented in
``/openapi.json``; the others are aliases, e.g. ``/chat/completions``
beside ``/v1/chat/completions`` as llama-server and vLLM accept), its
method, its handler, and for :mod:`skippy.http.openapi` its summary,
request body Struct, response Struct and content type. Public routes
(``secured=False``) need no API key.

Handlers are module-level and thin: decode the body into a msgspec Struct
(:func:`~skippy.engine.protocols.base.decode_request`, 400 on bad input), call the
:class:`~skippy.actors.engine.Engine` within the request's deadline and the
shutdown grace (:meth:`~skippy.http.context.Shared.guarded`), encode the
result. App-wide state comes from :func:`~skippy.http.context.shared`, the
request's own from :func:`~skippy.http.context.current`.

The handlers live by API, mirroring :mod:`skippy.engine.protocols`: :mod:`.openai`, :mod:`.llama_server`,
:mod:`.responses`, :mod:`.anthropic`, :mod:`.ollama_models` (Ollama's ``/api/tags``, ``/api/show``... and ``/``),
:mod:`.rerank` (``/v1/rerank``, ``/score``), :mod:`.mistral` (``/v1/fim/completions``),
and :mod:`.server` for ``/health``, ``/openapi.json`` and ``/metrics``;
:mod:`.base` holds the :class:`~.base.Route` row and what the handlers share.
"""

from __future__ import annotations

from quart import Blueprint

from skippy.engine.protocols.anthropic import wire as anthropic_wire
from skippy.engine.protocols.anthropic.types import CountTokensRequest, MessagesRequest
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
from skippy.engine.protocols.mistral.types import FimCompletionRequest
from skippy.engine.protocols.ollama import model_wire as ollama_model_wire
from skippy.engine.protocols.ollama import types as ollama_types
from skippy.engine.protocols.ollama import wire as ollama_wire
from skippy.engine.protocols.ollama.model_wire import CopyRequest, DeleteRequest, PullRequest, ShowRequest
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.openai.types import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from skippy.engine.protocols.rerank import wire as rerank_wire
from skippy.engine.protocols.rerank.types import RerankRequest, ScoreRequest
from skippy.engine.protocols.responses import wire as rwire
from skippy.engine.protocols.responses.types import ResponsesRequest
from skippy.http.routes.anthropic import count_tokens, messages
from skippy.http.routes.base import Route, logs_if_gone
from skippy.http.routes.llama_server import (
    apply_template,
    completion_native,
    detokenize,
    embedding,
    infill,
    input_tokens,
    lora_adapters,
    lora_adapters_apply,
    models_load,
    models_unload,
    props,
    props_change,
    slot_action,
    slots,
    tokenize,
)
from skippy.http.routes.mistral import fim_completions
from skippy.http.routes.ollama import ollama_chat, ollama_embed, ollama_embeddings, ollama_generate
from skippy.http.routes.ollama_models import (
    copy_model,
    delete_model,
    list_running,
    list_tags,
    pull_model,
    root,
    show_model,
    version,
)
from skippy.http.routes.openai import chat_completions, completions, embeddings, model, models
from skippy.http.routes.rerank import rerank, score
from skippy.http.routes.responses import (
    responses_cancel,
    responses_create,
    responses_delete,
    responses_get,
    responses_input_items,
)
from skippy.http.routes.server import health, metrics, openapi_json

__all__ = ["PUBLIC_PATHS", "ROUTES", "Route", "blueprint"]


# -- the table --------------------------------------------------------------------------------------

ROUTES: tuple[Route, ...] = (
    Route(("/v1/chat/completions", "/chat/completions"), "POST", chat_completions,
          "OpenAI Chat Completions (SSE when stream is true)", ChatCompletionRequest, openai_wire.ChatCompletion,
          sse=openai_wire.ChatCompletionChunk),
    Route(("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"), "POST", input_tokens,
          "llama-server token counting: the prompt tokens a chat request would use", ChatCompletionRequest,
          wire.InputTokens),
    Route(("/v1/completions",), "POST", completions,
          "OpenAI legacy Completions (SSE when stream is true)", CompletionRequest, openai_wire.TextCompletion,
          sse=openai_wire.TextCompletion),
    Route(("/v1/fim/completions", "/fim/completions"), "POST", fim_completions,
          "Mistral FIM (Codestral's): prompt and suffix filled with the model's FIM tokens, answered as a "
          "chat.completion (SSE chunks when stream is true, the last with usage)", FimCompletionRequest,
          openai_wire.ChatCompletion, sse=openai_wire.ChatCompletionChunk),
    Route(("/v1/responses", "/responses"), "POST", responses_create,
          "OpenAI Responses, translated onto the chat path (SSE events when stream is true; stored by default)",
          ResponsesRequest, rwire.ResponseObject, sse=rwire.ResponseStreamEvent),
    Route(("/v1/responses/<response_id>", "/responses/<response_id>"), "GET", responses_get,
          "A stored response (404 when it was not stored, was deleted, expired or was evicted)",
          response=rwire.ResponseObject),
    Route(("/v1/responses/<response_id>/input_items", "/responses/<response_id>/input_items"), "GET",
          responses_input_items, "A page of a stored response's input items (after, limit, order)",
          response=rwire.ResponseItemList),
    Route(("/v1/responses/<response_id>/cancel", "/responses/<response_id>/cancel"), "POST", responses_cancel,
          "Cancel a background or streamed response (its stored status becomes cancelled)",
          response=rwire.ResponseObject),
    Route(("/v1/responses/<response_id>", "/responses/<response_id>"), "DELETE", responses_delete,
          "Forget a stored response (404 when there is none)", response=rwire.ResponseDeleted),
    Route(("/infill",), "POST", infill, "llama-server /infill: fill-in-the-middle with the model's FIM tokens, "
          "answered as /completion (a list for n_cmpl > 1; SSE without [DONE] when stream is true)", InfillRequest,
          wire.NativeCompletion, sse=wire.NativeCompletion, shape="native"),
    Route(("/v1/embeddings",), "POST", embeddings, "OpenAI Embeddings: L2-normalized vectors from the embedding "
          "context (501 unless the server runs with --embeddings)", EmbeddingRequest, openai_wire.EmbeddingList),
    Route(("/embedding", "/embeddings"), "POST", embedding, "llama-server embeddings: one entry per input, "
          "its pooled vector normalized as embd_normalize says (501 unless the server runs with --embeddings)",
          NativeEmbeddingRequest, wire.NativeEmbedding, shape="list"),
    Route(("/v1/rerank", "/rerank", "/v2/rerank", "/reranking", "/v1/reranking"), "POST", rerank,
          "Jina / Cohere reranking: documents scored against a query, best first (400 unless the server runs with "
          "--reranking)", RerankRequest, rerank_wire.RerankResponse),
    Route(("/score", "/v1/score"), "POST", score, "vLLM scoring: the relevance score of each text_1, text_2 pair "
          "(400 unless the server runs with --reranking)", ScoreRequest, rerank_wire.ScoreResponse),
    Route(("/v1/models", "/models"), "GET", models, "The served model under each of its names (--alias)",
          response=openai_wire.ModelList),
    Route(("/v1/models/<path:model_id>", "/models/<path:model_id>"), "GET", model,
          "One served model by name (404 model_not_found for another)", response=openai_wire.Model),
    Route(("/completion", "/completions"), "POST", completion_native,
          "llama-server native completion (a list for several prompts; SSE without [DONE] when stream is true)",
          NativeCompletionRequest, wire.NativeCompletion, sse=wire.NativeCompletion, shape="native"),
    Route(("/slots",), "GET", slots, "llama-server per-slot state (501 with --no-slots)", response=wire.Slot,
          shape="list"),
    Route(("/models/load",), "POST", models_load, "llama-server router mode: load a served model now (waits "
          "until it is loaded)", ModelActionRequest, wire.ModelActionResult),
    Route(("/models/unload",), "POST", models_unload, "llama-server router mode: unload a served model once its "
          "requests end", ModelActionRequest, wire.ModelActionResult),
    Route(("/slots/<id_slot>",), "POST", slot_action,
          "llama-server slot save / restore / erase (?action=; 501 without --slot-save-path)", SlotActionRequest),
    Route(("/lora-adapters",), "GET", lora_adapters, "llama-server: the LoRA adapters (--lora) with their global "
          "scales", response=wire.LoraAdapter, shape="list"),
    Route(("/lora-adapters",), "POST", lora_adapters_apply, "llama-server: set the LoRA adapters' global scales "
          "(those left out go to 0)", wire.LoraScale, wire.LoraApplied, body_list=True),
    Route(("/props",), "POST", props_change, "llama-server POST /props (501 without --props)", documented=False),
    Route(("/health",), "GET", health, "Readiness and slot counts (503 while loading)", response=wire.Health,
          secured=False),
    Route(("/openapi.json",), "GET", openapi_json, "This OpenAPI document", documented=False),
    Route(("/tokenize",), "POST", tokenize, "llama-server /tokenize", TokenizeRequest, wire.TokenizeResponse),
    Route(("/detokenize",), "POST", detokenize, "llama-server /detokenize", DetokenizeRequest,
          wire.DetokenizeResponse),
    Route(("/apply-template",), "POST", apply_template, "llama-server /apply-template", ApplyTemplateRequest,
          wire.ApplyTemplateResponse),
    Route(("/props",), "GET", props, "llama-server /props"),
    Route(("/v1/messages",), "POST", messages, "Anthropic Messages (SSE events when stream is true)", MessagesRequest,
          anthropic_wire.AnthropicMessage, sse=anthropic_wire.STREAM_EVENTS, error=anthropic_wire.AnthropicError),
    Route(("/v1/messages/count_tokens",), "POST", count_tokens, "Anthropic Messages token counting",
          CountTokensRequest, anthropic_wire.MessageTokensCount, error=anthropic_wire.AnthropicError),
    Route(("/metrics",), "GET", metrics, "Prometheus metrics (text exposition format)", content_type="text/plain"),
    # Ollama's generation routes (routes/ollama.py): NDJSON streams unless stream is false
    Route(("/api/chat",), "POST", ollama_chat, "Ollama chat (NDJSON lines when stream is true, Ollama's default)",
          ollama_types.OllamaChatRequest, ollama_wire.OllamaChatResponse, ndjson=ollama_wire.OllamaChatResponse,
          error=ollama_model_wire.OllamaError),
    Route(("/api/generate",), "POST", ollama_generate, "Ollama generate: through the chat template, raw, or "
          "fill-in-the-middle with suffix (NDJSON lines when stream is true)", ollama_types.OllamaGenerateRequest,
          ollama_wire.OllamaGenerateResponse, ndjson=ollama_wire.OllamaGenerateResponse,
          error=ollama_model_wire.OllamaError),
    Route(("/api/embed",), "POST", ollama_embed, "Ollama embeddings of one or several inputs (501 unless the "
          "server runs with --embeddings)", ollama_types.OllamaEmbedRequest, ollama_wire.OllamaEmbedResponse,
          error=ollama_model_wire.OllamaError),
    Route(("/api/embeddings",), "POST", ollama_embeddings, "Ollama's legacy embeddings of one prompt",
          ollama_types.OllamaEmbeddingsRequest, ollama_wire.OllamaEmbeddingResponse,
          error=ollama_model_wire.OllamaError),
    # Ollama's model management (routes/ollama_models.py); "/" is public for GET and HEAD through webui.is_public
    Route(("/api/tags",), "GET", list_tags, "Ollama: the served models under their Ollama names, and their copies",
          response=ollama_model_wire.TagList, error=ollama_model_wire.OllamaError),
    Route(("/api/show",), "POST", show_model, "Ollama: one served model's Modelfile, template, details, GGUF "
          "metadata and capabilities (404 for another)", ShowRequest, ollama_model_wire.ShowReply,
          error=ollama_model_wire.OllamaError),
    Route(("/api/ps",), "GET", list_running, "Ollama: the loaded models, their memory and when they unload",
          response=ollama_model_wire.ProcessList, error=ollama_model_wire.OllamaError),
    Route(("/api/pull",), "POST", pull_model, "Ollama: pull a registry model into the cache (NDJSON progress "
          "unless stream is false)", PullRequest, ollama_model_wire.ProgressStatus,
          ndjson=ollama_model_wire.ProgressStatus, error=ollama_model_wire.OllamaError),
    Route(("/api/delete",), "DELETE", delete_model, "Ollama: delete a copy or a cached model file (400 for the "
          "served model)", DeleteRequest, error=ollama_model_wire.OllamaError),
    Route(("/api/copy",), "POST", copy_model, "Ollama: record another name of a served or cached model",
          CopyRequest, error=ollama_model_wire.OllamaError),
    Route(("/api/version",), "GET", version, "Ollama: the Ollama version this API follows (and skippy's)",
          response=ollama_model_wire.VersionReply, secured=False, error=ollama_model_wire.OllamaError),
    Route(("/",), "GET", root, "The playground's page to a browser, else Ollama's 'Ollama is running'",
          content_type="text/plain", documented=False),
)


PUBLIC_PATHS = frozenset(path for route in ROUTES if not route.secured for path in route.paths)


blueprint = Blueprint("skippy", __name__)
for _route in ROUTES:
    _view = logs_if_gone(_route.handler)  # one view per route (a route's paths share its endpoint)
    for _path in _route.paths:
        blueprint.add_url_rule(_path, view_func=_view, methods=[_route.method])
