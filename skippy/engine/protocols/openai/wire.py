"""The OpenAI wire model: one msgspec Struct per JSON object the OpenAI routes send.

The engine builds replies and stream chunks as these Structs
(:mod:`skippy.engine.protocols.openai.translate`), the HTTP layer encodes them
with ``msgspec.json``, and ``/openapi.json`` describes them with
``msgspec.json.schema_components`` (:mod:`skippy.http.openapi`), so the three
cannot drift apart.

Shapes follow OpenAI ``chat.completion``, ``chat.completion.chunk``, (legacy)
``text_completion``, ``embedding`` lists, the OpenAI error envelope and model list.
skippy and llama-server extensions are named where they appear
(``reasoning_content`` as llama-server and DeepSeek send it, llama-server's
``timings``, ``usage.injected_tokens``, ``entropy``/``margin`` on logprob entries,
``hook_events`` on chat choices).

Encoding rules (:class:`~skippy.engine.protocols.base.WireStruct`): a field that
is ``None`` is sent as ``null`` (e.g. ``logprobs: null``, a chunk's
``finish_reason: null``); a field whose value is :data:`msgspec.UNSET` is left
out (e.g. ``usage`` on all chunks but the last, ``injected_tokens`` when hooks
were off for the request). In the OpenAPI document every field that is never
left out is ``required``. Every Struct also reads like the dict it encodes to
(``reply["choices"][0]["message"]["content"]``, ``delta.get("content", "")``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from skippy.engine.errors import ContextLengthExceeded
from skippy.engine.protocols.base import UNSET, UnsetType, WireStruct

if TYPE_CHECKING:
    from skippy.engine.errors import EngineError

__all__ = [
    "RESPONSES", "SYSTEM_FINGERPRINT", "UNSET", "ChatChoice", "ChatChunkChoice", "ChatCompletion",
    "ChatCompletionChunk", "ChatDelta", "ChatLogprobs", "ChatMessage", "ChatTokenLogprob", "CompletionChoice",
    "CompletionLogprobs", "Embedding", "EmbeddingList", "EmbeddingUsage", "ErrorBody", "ErrorEnvelope", "FunctionCall",
    "FunctionCallDelta", "HookConsult", "HookEvent", "HookWindow", "Model", "ModelCardCapabilities", "ModelDetails",
    "ModelList", "ModelStatus", "PromptTokensDetails", "TextCompletion", "Timings", "ToolCall", "ToolCallDelta",
    "TopLogprob", "UnsetType", "Usage", "WireStruct",
]


#: OpenAI ``system_fingerprint`` of every reply.
SYSTEM_FINGERPRINT = "skippy-trio"


# -- errors ---------------------------------------------------------------------------------------

class ErrorBody(WireStruct, kw_only=True):
    """OpenAI error object: ``type`` e.g. ``invalid_request_error``; ``param`` and ``code`` may be null. A prompt
    beyond the context adds llama-server's ``n_prompt_tokens`` and ``n_ctx`` (clients trim their history by them)."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None
    n_prompt_tokens: int | UnsetType = UNSET
    n_ctx: int | UnsetType = UNSET


class ErrorEnvelope(WireStruct, kw_only=True):
    """OpenAI error envelope ``{"error": {...}}``: every non-2xx answer, and the last SSE event of a stream
    that failed after its headers were sent."""

    error: ErrorBody

    @classmethod
    def of(cls, exc: EngineError) -> ErrorEnvelope:
        """The envelope of an engine error (its ``message``, ``type``, ``param`` and ``code``; a
        :class:`ContextLengthExceeded`'s numbers)."""
        sizes: dict[str, int] = {}
        if isinstance(exc, ContextLengthExceeded) and exc.n_prompt is not None and exc.n_ctx is not None:
            sizes = {"n_prompt_tokens": exc.n_prompt, "n_ctx": exc.n_ctx}
        return cls(error=ErrorBody(message=exc.message, type=exc.type, param=exc.param, code=exc.code, **sizes))


# -- usage and timings ----------------------------------------------------------------------------

class PromptTokensDetails(WireStruct, kw_only=True):
    """OpenAI ``usage.prompt_tokens_details``: ``cached_tokens`` prompt tokens came from the prefix cache."""

    cached_tokens: int = 0


class Usage(WireStruct, kw_only=True):
    """OpenAI ``usage`` (tokens).

    ``prompt_tokens`` excludes tokens a ``before_chat`` hook appended;
    ``injected_tokens`` (skippy extension) counts every token hooks injected,
    and is present only when hooks were on for the request.
    """

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = msgspec.field(default_factory=PromptTokensDetails)
    injected_tokens: int | UnsetType = UNSET


class Timings(WireStruct, kw_only=True):
    """llama-server ``timings``: counts in tokens, times in milliseconds, rates in tokens per second.

    ``cache_n`` prompt tokens were reused from the prefix cache, ``prompt_n``
    were prefilled (``cache_n + prompt_n`` is the prompt); ``prompt_ms`` runs
    from admission to the first sampled token, ``predicted_ms`` from then to
    the end; ``predicted_n`` is the completion tokens. The generation rates are
    llama-server's (``server_slot_stats``): the first token comes from the
    prompt's logits, so ``predicted_per_token_ms`` and ``predicted_per_second``
    count the ``predicted_n - 1`` decode steps after it over ``predicted_ms``
    (0 for a single token). ``draft_n`` / ``draft_n_accepted``: speculative
    draft tokens verified and accepted, only when the request speculated
    (llama-server's fields).
    """

    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float
    draft_n: int | UnsetType = UNSET
    draft_n_accepted: int | UnsetType = UNSET

    @classmethod
    def of(cls, prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float,
           cache_n: int = 0, predicted_steps: int | None = None) -> Timings:
        """Timings from counts (tokens) and durations (ms); a rate over no tokens or no time is 0.

        ``predicted_steps``: the decode steps ``predicted_ms`` covers, by default
        ``predicted_n - 1`` (llama-server's ``n_gen_steps``: the first token is free);
        a sum over several sequences decoded side by side passes its own.
        """
        steps = max(predicted_n - 1, 0) if predicted_steps is None else predicted_steps
        return cls(cache_n=cache_n, prompt_n=prompt_n, prompt_ms=prompt_ms,
                   prompt_per_token_ms=prompt_ms / prompt_n if prompt_n else 0.0,
                   prompt_per_second=prompt_n * 1000.0 / prompt_ms if prompt_ms > 0 else 0.0,
                   predicted_n=predicted_n, predicted_ms=predicted_ms,
                   predicted_per_token_ms=predicted_ms / steps if steps else 0.0,
                   predicted_per_second=steps * 1000.0 / predicted_ms if steps and predicted_ms > 0 else 0.0)


class PromptProgress(WireStruct, kw_only=True):
    """llama-server ``prompt_progress`` (``return_progress``): prompt tokens in all (``total``), reused from
    the cache (``cache``), in the KV cache now (``processed``, cached ones included); ``time_ms`` since
    the request was queued."""

    total: int
    cache: int
    processed: int
    time_ms: int


# -- logprobs ---------------------------------------------------------------------------------------

class TopLogprob(WireStruct, kw_only=True):
    """One alternative at a position (OpenAI ``top_logprobs[]``): natural-log probability, UTF-8 bytes.
    With llama-server's ``post_sampling_probs``: ``id``, ``token``, ``bytes`` and ``prob`` (an entry of
    ``top_probs``) instead."""

    id: int | UnsetType = UNSET
    token: str
    logprob: float | UnsetType = UNSET
    bytes: list[int]
    prob: float | UnsetType = UNSET


class ChatTokenLogprob(WireStruct, kw_only=True):
    """One generated token (OpenAI ``logprobs.content[]``): ``token`` is its text (invalid UTF-8 as
    U+FFFD), ``bytes`` its raw bytes, ``logprob`` natural log, from the raw logits (``null`` when its
    logits row was not finite, NaN or ``+inf``: nothing scored it; its ``top_logprobs`` are then empty).

    With ``return_signals`` (skippy extension) also ``entropy`` and ``margin``
    (nats, from the raw logits: the distribution's entropy and the top-1 minus
    top-2 logit gap).

    With llama-server's ``post_sampling_probs``, its shape: ``id``, ``token``, ``bytes``, ``prob`` (the
    token's probability in the distribution the sampler chain drew it from) and ``top_probs`` (the most
    likely candidates of that distribution), instead of ``logprob`` and ``top_logprobs``.
    """

    id: int | UnsetType = UNSET
    token: str
    logprob: float | None | UnsetType = UNSET
    bytes: list[int]
    top_logprobs: list[TopLogprob] | UnsetType = UNSET
    prob: float | UnsetType = UNSET
    top_probs: list[TopLogprob] | UnsetType = UNSET
    entropy: float | None | UnsetType = UNSET
    margin: float | None | UnsetType = UNSET


class ChatLogprobs(WireStruct, kw_only=True):
    """OpenAI chat ``choices[].logprobs``: one entry per generated token."""

    content: list[ChatTokenLogprob]


class CompletionLogprobs(WireStruct, kw_only=True):
    """OpenAI legacy Completions ``choices[].logprobs``: parallel lists, one item per token.

    The tokens are the generated ones, preceded by the prompt's with ``echo``.
    ``top_logprobs[i]`` maps token text to natural-log probability for the
    ``logprobs`` most likely tokens; ``text_offset[i]`` is the character offset
    of token ``i`` in the prompt text followed by the completion (OpenAI). The
    first token of an echoed prompt has ``null`` logprob and ``top_logprobs``.
    """

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int] = msgspec.field(default_factory=list)


# -- hook events (skippy extension) -----------------------------------------------------------------

class HookConsult(WireStruct, kw_only=True):
    """The consultation behind a hook decision (skippy extension; ``--consult``, see the consult guide).

    ``peer``: the peer asked (a model of this server, or a server's base URL); ``outcome``: ``answered``
    (its hint was injected: ``action`` is ``inject``), ``empty`` (it answered nothing usable), ``error``
    (it failed: ``error`` says how), ``timeout`` (no answer within ``--consult-timeout``) or ``skipped``
    (nothing to ask: no user text, no peer serving another model); ``model``: the model that answered, as
    it named itself; ``latency_ms``: from the consultation's start to the answer (or the failure); ``chars``:
    the hint's characters injected (0, with ``error`` ``no_room``, when the note did not fit the context:
    ``action`` is ``none``). With two peers asked at once, the one whose answer was used, else the
    first one's failure. The media fallback's ``before_chat`` event has ``outcome`` ``described`` (a peer
    that reads images described the request's images; ``chars``: the descriptions').
    """

    peer: str
    outcome: Literal["answered", "empty", "error", "timeout", "skipped"]
    model: str | UnsetType = UNSET
    latency_ms: float | UnsetType = UNSET
    chars: int | UnsetType = UNSET
    error: str | UnsetType = UNSET


class HookWindow(WireStruct, kw_only=True):
    """The uncertainty-signal window when ``mid_generation`` fired (the last ``--signal-window`` tokens):
    entropy and margin in nats, counts in tokens."""

    token_count: int
    mean_entropy: float
    max_entropy: float
    mean_margin: float
    min_margin: float
    high_entropy_count: int
    repetition_count: int


class HookEvent(WireStruct, kw_only=True):
    """One hook-policy decision on this choice (skippy extension; only with ``"return_hook_events": true``
    on a request the hook policy ran for).

    ``event``: ``before_chat``, ``after_prefill`` (the first token) or ``mid_generation`` (the
    signal window fired). ``action``: ``none`` (also a hook timeout or error), ``inject`` or ``stop``.
    ``position``: how many generated tokens (``logprobs.content`` entries) came before it: the
    decision sits between token ``position - 1`` and token ``position``. ``text`` (``inject``):
    the injected text, prefilled into the sequence and never part of ``content``;
    ``injected_tokens``: its length in tokens. ``reason`` (``stop``): the ``finish_reason``.
    ``entropy`` / ``margin`` (nats): of the token the hook saw, which was emitted (``none``)
    or discarded (``inject``, ``stop``); absent for ``before_chat``. ``window``: at ``mid_generation``.
    ``consult``: the consultation of another model behind the decision (``--consult``), when there was one.
    """

    event: Literal["before_chat", "after_prefill", "mid_generation"]
    action: Literal["none", "inject", "stop"]
    position: int
    text: str | UnsetType = UNSET
    injected_tokens: int | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    entropy: float | None | UnsetType = UNSET
    margin: float | None | UnsetType = UNSET
    window: HookWindow | UnsetType = UNSET
    consult: HookConsult | UnsetType = UNSET


# -- chat.completion --------------------------------------------------------------------------------

class FunctionCall(WireStruct, kw_only=True):
    """``name`` and ``arguments`` (a JSON object serialised as text) of a tool call."""

    name: str
    arguments: str


class ToolCall(WireStruct, kw_only=True):
    """OpenAI ``message.tool_calls[]``."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(WireStruct, kw_only=True):
    """The assistant message of a ``chat.completion`` (OpenAI ``choices[].message``).

    ``content`` is null when the model only called tools; ``reasoning_content``
    (llama-server / DeepSeek extension) and ``tool_calls`` are present only when
    not empty.
    """

    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | UnsetType = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET


class ChatChoice(WireStruct, kw_only=True):
    """OpenAI ``chat.completion`` ``choices[]``; ``finish_reason`` is ``stop``, ``length``, ``tool_calls``
    or a hook policy's stop reason. ``stop_reason`` (vLLM's field): the request's stop string that ended
    the generation, present only when one did (``finish_reason`` is then ``stop``)."""

    index: int = 0
    message: ChatMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str
    stop_reason: str | UnsetType = UNSET
    hook_events: list[HookEvent] | UnsetType = UNSET


class ChatCompletion(WireStruct, kw_only=True):
    """OpenAI ``chat.completion`` (plus llama-server ``timings``)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str = SYSTEM_FINGERPRINT
    choices: list[ChatChoice]
    usage: Usage
    timings: Timings


# -- chat.completion.chunk --------------------------------------------------------------------------

class FunctionCallDelta(WireStruct, kw_only=True):
    """A tool call's function fragment: ``name`` in its first delta, then ``arguments`` text to append."""

    name: str | UnsetType = UNSET
    arguments: str = ""


class ToolCallDelta(WireStruct, kw_only=True):
    """OpenAI ``delta.tool_calls[]``: the first fragment of a call carries ``id`` and ``type``."""

    index: int
    id: str | UnsetType = UNSET
    type: Literal["function"] | UnsetType = UNSET
    function: FunctionCallDelta


class ChatDelta(WireStruct, kw_only=True):
    """OpenAI ``choices[].delta``: only the fields this chunk adds (``{}`` on the finish chunk).

    The first chunk of a stream is ``{"role": "assistant", "content": ""}``, or ``{"role": "assistant",
    "content": null}`` when the request offers tools (OpenAI's first delta of a tool-call reply); later deltas
    carry ``content`` only with text.
    """

    role: Literal["assistant"] | UnsetType = UNSET
    content: str | None | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET


class ChatChunkChoice(WireStruct, kw_only=True):
    """OpenAI ``chat.completion.chunk`` ``choices[]``: ``finish_reason`` is null until the last chunk; the
    finish chunk carries ``stop_reason`` (vLLM's field) when a stop string of the request ended the generation."""

    index: int = 0
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | UnsetType = UNSET
    hook_events: list[HookEvent] | UnsetType = UNSET


class ChatCompletionChunk(WireStruct, kw_only=True):
    """OpenAI ``chat.completion.chunk``: one SSE ``data`` event of a streamed chat completion.

    Every chunk of a stream has the same ``id`` and ``created``. With
    ``stream_options.include_usage`` a last chunk has empty ``choices`` and the
    ``usage`` (and llama-server ``timings``); a choice's finish chunk has its ``timings`` (llama-server's).
    With llama-server's ``timings_per_token`` the last chunk of each token's output has the choice's
    ``timings`` so far too; with ``return_progress`` chunks with an empty delta and ``prompt_progress``
    come before a choice's first token (one per prefill step, and one with the whole prompt processed).
    """

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str = SYSTEM_FINGERPRINT
    choices: list[ChatChunkChoice]
    usage: Usage | UnsetType = UNSET
    timings: Timings | UnsetType = UNSET
    prompt_progress: PromptProgress | UnsetType = UNSET


# -- text_completion ----------------------------------------------------------------------------------

class CompletionChoice(WireStruct, kw_only=True):
    """OpenAI legacy Completions ``choices[]``: ``finish_reason`` is null on stream chunks but the last."""

    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class TextCompletion(WireStruct, kw_only=True):
    """OpenAI legacy ``text_completion``: the reply, and each SSE chunk of a streamed one.

    A reply has ``usage`` and llama-server ``timings``; stream chunks have
    neither, except a choice's finish chunk (its ``timings``), a last chunk (``stream_options.include_usage``)
    with empty ``choices`` and ``usage``, and llama-server's ``timings_per_token`` (a chunk's choice's ``timings`` so
    far) and ``return_progress`` (chunks with no text and ``prompt_progress`` before the first token).
    """

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str = SYSTEM_FINGERPRINT
    choices: list[CompletionChoice]
    usage: Usage | UnsetType = UNSET
    timings: Timings | UnsetType = UNSET
    prompt_progress: PromptProgress | UnsetType = UNSET


# -- models, health, llama-server utility routes ------------------------------------------------------

class ModelDetails(WireStruct, kw_only=True):
    """skippy extension on ``/v1/models`` entries: context per sequence (tokens), training context,
    vocabulary size, sequence slots."""

    n_ctx: int
    n_ctx_train: int
    n_vocab: int
    parallel: int


class ModelStatus(WireStruct, kw_only=True):
    """llama-server router mode's ``status`` of a ``/v1/models`` entry (several models served): ``value``
    ``loaded``, ``loading`` or ``unloaded``; ``failed`` (with ``error``, skippy's) when its last load failed."""

    value: Literal["loaded", "loading", "unloaded"]
    failed: bool | UnsetType = UNSET
    error: str | UnsetType = UNSET


class ModelArchitecture(WireStruct, kw_only=True):
    """llama-server router mode's ``architecture`` of a model: what it reads (``text``, and ``image`` with a
    ``--mmproj`` projector) and writes."""

    input_modalities: list[str]
    output_modalities: list[str] = msgspec.field(default_factory=lambda: ["text"])


class ModelCardCapabilities(WireStruct, kw_only=True):
    """Mistral's model card ``capabilities``: chat, fill-in-the-middle (``/v1/fim/completions``), tool calls
    (native or emulated), image input. ``completion_fim`` is known once the model has loaded (``False`` before),
    as whether it generates at all (an encoder, served for embeddings, has neither chat nor tools)."""

    completion_chat: bool = True
    completion_fim: bool = False
    function_calling: bool = True
    vision: bool = False


class Model(WireStruct, kw_only=True):
    """OpenAI model object; with several models served, also ``state`` (``loaded``, ``loading``, ``unloaded``,
    ``failed``) and llama-server router mode's ``status``; ``meta`` only while the model is loaded;
    ``architecture`` (llama-server's) says whether it reads images. A LoRA adapter (``--lora``) is listed as
    its own model ``BASE:ADAPTER``, with vLLM's ``parent`` (the base model) and ``root`` (the adapter file).
    ``type`` and ``capabilities`` are Mistral's model card's (its SDK's ``models.list`` refuses an entry
    without them), ``max_context_length`` too (tokens per sequence, while the model is loaded).
    """

    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "skippy-trio"
    meta: ModelDetails | UnsetType = UNSET
    state: Literal["loaded", "loading", "unloaded", "failed"] | UnsetType = UNSET
    status: ModelStatus | UnsetType = UNSET
    architecture: ModelArchitecture | UnsetType = UNSET
    parent: str | UnsetType = UNSET
    root: str | UnsetType = UNSET
    type: Literal["base"] = "base"
    capabilities: ModelCardCapabilities = msgspec.field(default_factory=ModelCardCapabilities)
    max_context_length: int | UnsetType = UNSET


class ModelList(WireStruct, kw_only=True):
    """OpenAI ``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[Model]


# -- embeddings -----------------------------------------------------------------------------------

class Embedding(WireStruct, kw_only=True):
    """OpenAI ``embedding`` object: the L2-normalized vector of input ``index``, as floats or (``encoding_format``
    ``base64``) the base64 of its little-endian float32 bytes."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(WireStruct, kw_only=True):
    """OpenAI embeddings ``usage``: tokens of all inputs (``total_tokens`` is the same number)."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingList(WireStruct, kw_only=True):
    """OpenAI ``POST /v1/embeddings`` response: one :class:`Embedding` per input, in input order; with vLLM's
    ``id`` and ``created`` (Unix seconds), which Mistral's SDK requires."""

    id: str
    object: Literal["list"] = "list"
    created: int
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


#: Every top-level response object of this API (for the OpenAPI components).
RESPONSES: tuple[type[WireStruct], ...] = (
    ErrorEnvelope, ChatCompletion, ChatCompletionChunk, TextCompletion, ModelList, EmbeddingList)
