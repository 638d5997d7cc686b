"""Request types of the OpenAI-compatible API, as msgspec Structs.

Decoding a body with :func:`decode_request` validates JSON syntax and field
types in one pass; any failure raises :class:`InvalidRequest` (400) naming
the offending field. Unknown fields are ignored, as OpenAI clients and agent
frameworks send extensions. Field names are OpenAI's (Chat Completions and
legacy Completions); ``top_k``, ``min_p``, ``repeat_penalty`` and
``grammar`` are llama-server extensions.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from skippy.engine.errors import InvalidRequest

T = TypeVar("T")


class ContentPart(msgspec.Struct, omit_defaults=True):
    """One part of a multi-part message content (``{"type": "text", "text": ...}``)."""

    type: str
    text: str | None = None
    image_url: Any = None
    input_audio: Any = None


class Message(msgspec.Struct, omit_defaults=True):
    """An OpenAI chat message (system, developer, user, assistant or tool)."""

    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class StreamOptions(msgspec.Struct, omit_defaults=True):
    include_usage: bool = False


class SamplingFields(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Sampling fields shared by chat and text completions.

    ``cache_prompt`` (llama-server): ``false`` prefills the whole prompt
    instead of reusing a cached prefix. llama.cpp logits depend slightly on
    how a prompt is split into batches, so only a cold prefill gives
    bit-for-bit reproducible greedy output.
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
    logit_bias: dict[str, float] | None = None
    n: int | None = None
    user: str | None = None
    cache_prompt: bool = True


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


class ChatCompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/chat/completions`` body (OpenAI Chat Completions).

    Beyond OpenAI: ``reasoning_format`` (llama-server: ``auto``, ``none``,
    ``deepseek``, ``deepseek-legacy``, ``hidden``), ``chat_template`` (a
    per-request jinja2 template), ``chat_template_kwargs`` and
    ``enable_thinking`` (template variables), ``grammar`` (raw GBNF),
    ``mesh_hooks`` (run the hook policy; skippy-server's field name) and
    ``return_signals`` (per-token ``entropy`` and ``margin`` in ``logprobs``).
    ``prompt_cache_key`` (OpenAI) groups requests for prefix-cache placement.
    """

    messages: list[Message]
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    grammar: str | None = None
    reasoning_format: str | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None
    mesh_hooks: bool | None = None
    return_signals: bool = False
    prompt_cache_key: str | None = None

    def __post_init__(self) -> None:
        for name in ("tools", "tool_choice", "response_format", "chat_template_kwargs"):
            value = getattr(self, name)
            if isinstance(value, ResponseFormat):
                value = [value.schema, value.json_schema.schema if value.json_schema else None]
            if value is not None and nesting(value) > MAX_NESTING:
                raise InvalidRequest(f"{name} is nested deeper than {MAX_NESTING} levels", param=name)


class CompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/completions`` body (OpenAI legacy Completions; string prompt).

    ``n_predict`` (llama-server) is taken as ``max_tokens`` when neither ``max_tokens`` nor
    ``max_completion_tokens`` is given (-1: until the context is full), as llama-server reads it there too.
    """

    prompt: str | list[str]
    logprobs: int | None = None
    echo: bool = False
    n_predict: int | None = None

    def __post_init__(self) -> None:
        if self.n_predict is not None and self.max_tokens is None and self.max_completion_tokens is None:
            self.max_tokens = None if self.n_predict < 0 else self.n_predict


#: One llama-server prompt: text, token ids, or a mix of both (strings are tokenized in place).
PromptPart = int | str


class NativeCompletionRequest(SamplingFields, kw_only=True):
    """llama-server's native ``POST /completion`` (and ``/completions`` without ``/v1``) body.

    ``prompt``: a string, a list of token ids, a list mixing ids and strings (one prompt), or a list of
    strings / lists (several prompts: the answer is a list, one result per prompt, ``index`` in order).
    ``n_predict`` (-1: until the context is full) is ``max_tokens``. ``n_probs`` adds
    ``completion_probabilities`` (that many alternatives per token, <= 20); ``return_tokens`` the
    generated token ids; ``samplers`` (names, or llama.cpp's one-letter string) chooses which samplers
    of the chain run (see :func:`skippy.engine.sampling.native.apply_samplers`); ``json_schema`` and
    ``grammar`` constrain the output; ``timings_per_token`` adds ``timings`` to each streamed chunk,
    ``return_progress`` a ``prompt_progress`` chunk once the prompt is in the KV cache. ``id_slot`` is
    checked (-1 or a slot id) but the scheduler places the request (a slot's cached prefix is reused
    by any request that shares it).
    """

    prompt: str | list[PromptPart | list[PromptPart]]
    n_predict: int | None = None
    id_slot: int = -1
    return_tokens: bool = False
    n_probs: int = 0
    samplers: list[str] | str | None = None
    json_schema: dict[str, Any] | None = None
    grammar: str | None = None
    timings_per_token: bool = False
    return_progress: bool = False
    repeat_last_n: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.json_schema is not None and nesting(self.json_schema) > MAX_NESTING:
            raise InvalidRequest(f"json_schema is nested deeper than {MAX_NESTING} levels", param="json_schema")

    def prompts(self) -> list[list[PromptPart]]:
        """The prompts (llama-server ``tokenize_input_prompts``): a string, or a list of ids with or without
        strings, is one prompt; a list of strings or of lists is several."""
        p = self.prompt
        if isinstance(p, str):
            return [[p]]
        if not p:
            raise InvalidRequest("prompt is empty", param="prompt")
        if any(isinstance(x, int) for x in p):
            if any(isinstance(x, list) for x in p):
                raise InvalidRequest("prompt mixes token ids with nested lists", param="prompt")
            return [list(p)]  # type: ignore[arg-type]
        return [[x] if isinstance(x, str) else list(x) for x in p]


class SlotActionRequest(msgspec.Struct, kw_only=True):
    """``POST /slots/{id}?action=save|restore`` (llama-server): the state file's name in ``--slot-save-path``."""

    filename: str


class TokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /tokenize`` (llama-server): ``content`` -> ``{"tokens": [...]}``."""

    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /detokenize`` (llama-server): ``tokens`` -> ``{"content": ...}``."""

    tokens: list[int]


class ApplyTemplateRequest(msgspec.Struct, kw_only=True):
    """``POST /apply-template`` (llama-server): ``messages`` -> ``{"prompt": ...}``.

    Rendered as the chat route renders them: ``add_generation_prompt`` (default true), ``tools``
    (native in the template, or the ``TOOL_CALL`` emulation's system text), ``chat_template_kwargs`` and
    ``enable_thinking`` (template variables).
    """

    messages: list[Message]
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None

    def __post_init__(self) -> None:
        for name in ("tools", "tool_choice", "chat_template_kwargs"):
            value = getattr(self, name)
            if value is not None and nesting(value) > MAX_NESTING:
                raise InvalidRequest(f"{name} is nested deeper than {MAX_NESTING} levels", param=name)

    def chat_request(self) -> ChatCompletionRequest:
        """The chat request whose prompt this is (what the chat route would render)."""
        return ChatCompletionRequest(messages=self.messages, tools=self.tools, tool_choice=self.tool_choice,
                                     chat_template_kwargs=self.chat_template_kwargs,
                                     enable_thinking=self.enable_thinking)


#: Deepest nesting of lists and objects accepted in ``tools``, ``tool_choice``,
#: ``response_format`` and ``chat_template_kwargs``: JSON schemas are walked recursively
#: (grammar conversion, templates' ``tojson``), and real ones nest a handful of levels.
MAX_NESTING = 64


def nesting(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (a scalar is 0, ``[]`` is 1); iterative."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        stack.extend((x, d + 1) for x in v)
    return deepest


def decode_request(body: bytes, type_: type[T]) -> T:
    """Decode and validate a JSON body into ``type_``.

    Raises :class:`InvalidRequest` (400) for malformed JSON, a non-object
    body, a missing required field or a field of the wrong type; the
    message is msgspec's, which names the field path (e.g. ``$.messages[0].role``).
    """
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        path = str(exc).rsplit("`$.", 1)
        param = path[1].rstrip("`").split("[")[0].split(".")[0] if len(path) == 2 else None
        if param is None:
            # a missing top-level field: "Object missing required field `messages`"
            missing = str(exc).split("missing required field `", 1)
            param = missing[1].split("`", 1)[0] if len(missing) == 2 else None
        raise InvalidRequest(f"invalid request: {exc}", param=param) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"malformed JSON body: {exc}") from exc
    except RecursionError as exc:  # msgspec recurses per level, in fields it skips too
        raise InvalidRequest("the JSON body is nested too deeply") from exc


def message_dicts(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages as plain dicts (what chat templates read); unset fields omitted."""
    return msgspec.to_builtins(messages)
