"""Request types of the OpenAI API, as msgspec Structs: what the engine serves.

Chat Completions (:class:`ChatCompletionRequest`), legacy Completions
(:class:`CompletionRequest`) and Embeddings (:class:`EmbeddingRequest`); the
other APIs translate onto them (Anthropic Messages and Responses onto a chat
request), so they are the engine's request model. Decode a body with
:func:`~skippy.engine.protocols.base.decode_request` (any failure:
:class:`InvalidRequest`, 400, naming the field). Unknown fields are ignored, as
OpenAI clients and agent frameworks send extensions. Field names are OpenAI's;
``top_k``, ``min_p``, ``repeat_penalty``, the other llama.cpp samplers
(``typical_p``, ``mirostat``, ``dry_*``, ``xtc_*`` ...), ``grammar`` and
``json_schema`` are llama-server extensions; ``repetition_penalty``,
``min_tokens``, ``ignore_eos``, ``stop_token_ids``,
``include_stop_str_in_output``, ``guided_*`` and ``structured_outputs`` are vLLM's.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.base import MAX_NESTING, convert_nested, nesting


class ContentPart(msgspec.Struct, omit_defaults=True):
    """One part of a multi-part message content (``{"type": "text", "text": ...}``; ``image_url``; ``file``:
    ``{"file_data": "data:application/pdf;base64,...", "filename": ...}``, read by
    :mod:`skippy.engine.chat.documents`)."""

    type: str
    text: str | None = None
    image_url: Any = None
    input_audio: Any = None
    file: Any = None


class Message(msgspec.Struct, omit_defaults=True):
    """An OpenAI chat message (system, developer, user, assistant or tool). An assistant message's reasoning is
    ``reasoning_content`` (llama-server's and DeepSeek's name) or ``reasoning`` (vLLM's and OpenRouter's); the
    template gets it under both (:func:`message_dicts`)."""

    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class StreamOptions(msgspec.Struct, omit_defaults=True):
    include_usage: bool = False


class JsonSchemaFormat(msgspec.Struct, omit_defaults=True):
    """OpenAI ``response_format.json_schema``: ``schema`` is enforced with a grammar."""

    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(msgspec.Struct, omit_defaults=True):
    """OpenAI ``response_format``: ``text``, ``json_object`` or ``json_schema``."""

    type: str
    json_schema: JsonSchemaFormat | None = None
    schema: dict[str, Any] | None = None  # llama-server accepts the schema here too


class StructuredOutputs(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """vLLM ``structured_outputs``: exactly one of ``json`` (a JSON schema), ``regex``,
    ``choice`` (a list of strings) or ``grammar`` (GBNF or Lark).

    Unknown keys are refused (400), so a misspelled constraint is never dropped silently.
    """

    json: dict[str, Any] | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool | None = None
    disable_additional_properties: bool | None = None
    whitespace_pattern: str | None = None
    disable_fallback: bool | None = None
    structural_tag: Any = None


class SamplingFields(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Sampling and constraint fields shared by chat and text completions.

    Built in Python, a field typed with a Struct (``stream_options``, ``response_format``,
    ``structured_outputs``; a subclass's ``messages``, ``input_extra``, ``prompt`` objects) also takes the
    plain dicts and lists its JSON would hold, converted at construction
    (:func:`~skippy.engine.protocols.base.convert_nested`; a bad one: :class:`InvalidRequest` naming it).
    Validated by :func:`skippy.engine.sampling.params.sampling_from_request`
    (samplers) and :func:`skippy.engine.sampling.constraints.constraint_from_request`
    (``response_format``, ``grammar``, ``json_schema``, ``guided_*``, ``structured_outputs``).

    ``cache_prompt`` (llama-server): ``false`` prefills the whole prompt
    instead of reusing a cached prefix. llama.cpp logits depend slightly on
    how a prompt is split into batches, so only a cold prefill gives
    bit-for-bit reproducible greedy output.

    ``speculative`` (skippy): prompt-lookup speculative decoding for this
    request: ``false`` or ``0`` off, ``true`` on, an int ``1..16`` the draft
    tokens per step; absent, the server's ``--spec-ngram`` decides. The output
    is the same either way (greedy: identical tokens up to llama.cpp's
    batch-shape rounding; sampled: the same distribution).

    ``n_predict`` (llama-server's name for the completion budget) wins over ``max_tokens``: -1 or
    less the server's default, 0 the prompt only (put into the KV cache, nothing generated: a client's
    warm-up), which ``max_tokens`` may not ask (OpenAI's rule: >= 1). ``samplers`` (llama-server):
    which samplers of the chain run (:func:`skippy.engine.sampling.native.apply_samplers`). ``id_slot``,
    ``response_fields`` and ``t_max_prompt_ms`` (llama-server's) are taken on every route, so clients that
    send them (llama.vim) pass ``--strict-fields``: ``id_slot`` is checked and ``response_fields`` applied on
    llama-server's own routes only (as llama-server, whose OpenAI replies keep every field), and
    ``t_max_prompt_ms`` does nothing (llama-server does not implement it either). ``timings_per_token``
    (llama-server's, which its web UI sends): each streamed chunk's choice carries its ``timings`` so far;
    ``return_progress``: a stream sends ``prompt_progress`` chunks (prompt tokens in all, cached, processed;
    ms since arrival) before the first token: one per prefill step that leaves prompt to prefill, and one
    once the prompt is in the KV cache (llama-server's, one per batch).

    ``post_sampling_probs`` (llama-server): the logprobs a request asks for (``n_probs``, chat's ``logprobs``)
    come as probabilities (``prob``, ``top_probs``) of the distribution each token was drawn from, after the
    sampler chain (top_k, top_p, min_p, temperature...), instead of log-probabilities of the raw logits;
    on ``/completion``, ``/infill`` and chat (``/v1/completions`` keeps OpenAI's raw logprobs).

    ``lora`` (llama-server): ``[{"id": int, "scale": number}]``, the LoRA adapters (``--lora``) this
    request runs with, the others at 0; absent or empty, the server's global scales
    (:mod:`skippy.engine.lora`; a bad entry is a 400 naming ``lora.N.id`` or ``lora.N.scale``).
    """

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    #: OpenAI's ``{"token id": bias}``; llama-server also takes ``false`` (never sampled) and ``[[id, bias]]`` pairs
    logit_bias: dict[str, float | bool] | list[list[int | float | bool]] | None = None
    n: int | None = None
    user: str | None = None
    cache_prompt: bool = True
    speculative: bool | int | None = None
    lora: list[Any] | None = None
    # llama-server samplers (llama.cpp common_sampler names)
    typical_p: float | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None
    dry_sequence_breakers: list[str] | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    top_n_sigma: float | None = None
    dynatemp_range: float | None = None
    dynatemp_exponent: float | None = None
    repeat_last_n: int | None = None
    min_keep: int | None = None
    n_probs: int | None = None
    post_sampling_probs: bool = False
    n_predict: int | None = None
    samplers: list[str] | str | None = None
    id_slot: int = -1
    response_fields: list[str] | None = None
    t_max_prompt_ms: int | None = None
    timings_per_token: bool = False
    return_progress: bool = False
    # vLLM sampling parameters
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    # constraints (structured output), on chat and text completions alike
    response_format: ResponseFormat | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structured_outputs: StructuredOutputs | None = None

    def __post_init__(self) -> None:
        convert_nested(self)  # plain dicts given in Python (stream_options={...}, messages=[{...}]), as JSON decodes
        for name in ("response_format", "json_schema", "guided_json", "structured_outputs"):
            value = getattr(self, name)
            if isinstance(value, ResponseFormat):
                value = [value.schema, value.json_schema.schema if value.json_schema else None]
            elif isinstance(value, StructuredOutputs):
                value = value.json
            if value is not None and nesting(value) > MAX_NESTING:
                raise InvalidRequest(f"{name} is nested deeper than {MAX_NESTING} levels", param=name)


class ChatCompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/chat/completions`` body (OpenAI Chat Completions).

    Beyond OpenAI: ``reasoning_format`` (llama-server: ``auto``, ``none``,
    ``deepseek``, ``deepseek-legacy``, ``hidden``), ``chat_template`` (a
    per-request jinja2 template), ``chat_template_kwargs`` and
    ``enable_thinking`` (template variables), ``reasoning_effort`` (OpenAI's;
    also a template variable, and ``enable_thinking: false`` for ``"none"`` /
    ``"minimal"``), ``continue_final_message`` / ``add_generation_prompt``
    (vLLM's: assistant prefill, see :func:`~skippy.engine.chat.prepare.render_chat`;
    ``continue_final_message`` also takes llama-server's ``"content"`` and ``"reasoning_content"``:
    :func:`~skippy.engine.chat.continuation.continuation`),
    ``grammar`` (raw GBNF),
    ``mesh_hooks`` (run the hook policy; skippy-server's field name),
    ``return_signals`` (per-token ``entropy`` and ``margin`` in ``logprobs``) and
    ``return_hook_events`` (each hook decision as a ``hook_events`` entry of the choice, streamed on
    the chunk where it happens: :class:`~skippy.engine.protocols.openai.wire.HookEvent`).
    ``prompt_cache_key`` (OpenAI) groups requests for prefix-cache placement.
    ``thinking_budget_tokens`` (llama-server's): reasoning tokens allowed inside ``<think>`` before
    the closing tag (and a newline) is forced (-1: unlimited; ``None``: the server's ``--reasoning-budget``).
    ``top_logprobs`` (``null`` aside) without ``logprobs: true`` is a 400 naming ``top_logprobs``, as OpenAI,
    vLLM and llama-server refuse it (llama-server's message); llama-server's ``n_probs`` asks for logprobs alone.
    """

    messages: list[Message]
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    reasoning_format: str | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    continue_final_message: bool | str | None = None
    add_generation_prompt: bool | None = None
    mesh_hooks: bool | None = None
    return_signals: bool = False
    return_hook_events: bool = False
    prompt_cache_key: str | None = None
    thinking_budget_tokens: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.thinking_budget_tokens is not None and self.thinking_budget_tokens < -1:
            raise InvalidRequest("thinking_budget_tokens must be >= -1 (-1: unlimited)",
                                 param="thinking_budget_tokens")
        if self.top_logprobs is not None and not self.logprobs:  # llama-server's rule: null passes
            raise InvalidRequest("top_logprobs requires logprobs to be set to true", param="top_logprobs")
        for name in ("tools", "tool_choice", "chat_template_kwargs"):
            value = getattr(self, name)
            if value is not None and nesting(value) > MAX_NESTING:
                raise InvalidRequest(f"{name} is nested deeper than {MAX_NESTING} levels", param=name)


class CompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/completions`` body (OpenAI legacy Completions).

    ``prompt``: a string, a list of strings, a list of token ids, or a list of
    lists of token ids (one set of ``n`` choices per prompt); the engine checks
    that a list is not mixed. ``suffix``: the text after the completion
    (fill-in-the-middle with the vocabulary's FIM tokens).
    """

    prompt: str | list[str | int | list[int]]
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/embeddings`` body (OpenAI Embeddings).

    ``input``: a string, a list of strings, a list of token ids, or a list of lists of token ids
    (one vector per input; the engine checks that a list is not mixed and not empty).
    ``encoding_format``: ``float`` (default) or ``base64`` (the little-endian float32 bytes, as
    OpenAI sends them). ``dimensions``: accepted only as the model's own size (no shortening).
    ``truncate`` (llama-server's and Hugging Face TEI's field): an input longer than the embedding
    context keeps its first tokens instead of answering 400. ``embd_normalize`` (llama-server's, which its
    ``/v1/embeddings`` honours too): how each vector is normalized, 2 (unit length) by default. ``model`` may
    be any name (one model is served); ``user`` is accepted and ignored.
    """

    input: str | list[str | int | list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    truncate: bool = False
    embd_normalize: int = 2  # llama-server's: -1 none, 0 int16 range, 1 taxicab, 2 Euclidean (OpenAI's), p


def prompt_items(raw: str | list[Any], param: str) -> list[str | list[int]]:
    """OpenAI's four prompt shapes (Completions ``prompt``, Embeddings ``input``) as a list of items:
    a string, a list of strings, a list of token ids (one item) or a list of token-id lists.

    Raises :class:`InvalidRequest` naming ``param`` for an empty or a mixed list.
    """
    if isinstance(raw, str):
        return [raw]
    if raw and all(isinstance(x, str) for x in raw):
        return list(raw)
    if raw and all(isinstance(x, int) for x in raw):
        return [list(raw)]
    if raw and all(isinstance(x, list) for x in raw):
        return list(raw)
    raise InvalidRequest(f"{param} must be a string, a list of strings, a list of token ids or a list of lists "
                         "of token ids, not empty and not mixed", param=param)


def message_dicts(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages as plain dicts (what chat templates read); unset fields omitted. A message's reasoning is under
    both ``reasoning_content`` and ``reasoning``, whichever the client sent (``reasoning_content`` first when it
    sent both): templates read one or the other (Solar Open only ``reasoning``, most ``reasoning_content``, some
    either; none of the 70 fixture families renders it twice)."""
    dicts: list[dict[str, Any]] = msgspec.to_builtins(messages)
    for d in dicts:
        given = d.get("reasoning_content") or d.get("reasoning")
        if isinstance(given, str) and given:
            d["reasoning_content"] = d["reasoning"] = given
    return dicts


class NotText(ValueError):
    """A content part that is not text (:func:`part_texts`): ``index`` in the list, ``kind`` its
    ``type`` (``None`` when it has none; the Python type name for a part that is not a dict)."""

    def __init__(self, index: int, kind: object) -> None:
        super().__init__(f"content part {index} ({kind!r}) is not text")
        self.index, self.kind = index, kind

    @property
    def missing_text(self) -> bool:
        """The part says it is text but holds no ``text`` string (the fault is its field, not its type)."""
        return self.kind == "text"


def part_texts(parts: list[Any], *, bare_strings: bool = True) -> list[str]:
    """The texts of a message ``content`` given as a list of parts (the message dicts of
    :func:`message_dicts`): a ``{"type": "text", "text": ...}`` part's string, and with ``bare_strings``
    a part that is a plain string, as itself. Joining them is the caller's choice (templates get them
    joined with ``"\\n"``, a prefill continues them joined with ``""``). Raises :class:`NotText` at the
    first other part (an image, audio, a text part without a string): the caller turns it into its
    400, naming its own field."""
    texts = []
    for j, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif bare_strings and isinstance(part, str):
            texts.append(part)
        else:
            raise NotText(j, part.get("type") if isinstance(part, dict) else type(part).__name__)
    return texts
