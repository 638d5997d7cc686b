"""Request types of llama-server's own routes, as msgspec Structs.

``/completion`` (:class:`NativeCompletionRequest`), ``/infill``, ``/slots``
actions, ``/tokenize``, ``/detokenize`` and ``/apply-template``, with
llama-server's field names (``n_predict``, ``cache_prompt``, ``id_slot`` ...);
the sampling fields are the OpenAI requests'
(:class:`~skippy.engine.protocols.openai.types.SamplingFields`), as llama-server
accepts both spellings.
"""

from __future__ import annotations

import msgspec

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, SamplingFields


class InfillExtra(msgspec.Struct, kw_only=True):
    """One ``input_extra`` entry of ``/infill``: a file's ``text`` (required, as llama-server requires it) and
    ``filename``."""

    text: str
    filename: str = "tmp"


#: One llama-server prompt: text, token ids, or a mix of both (strings are tokenized in place).
PromptPart = int | str


#: llama-server's ``logit_bias``: ``[[token id or text, bias or false], ...]`` or ``{"token id or text": bias
#: or false}`` (read by :func:`skippy.engine.sampling.native.native_logit_bias`).
NativeLogitBias = dict[str, float | bool] | list[list[int | float | str | bool]]


class MultimodalPrompt(msgspec.Struct, kw_only=True):
    """llama-server's prompt object with media: ``prompt_string`` holds one media marker (``<__media__>``)
    per entry of ``multimodal_data`` (base64 file bytes, images here), which fill them in order."""

    prompt_string: str
    multimodal_data: list[str] = msgspec.field(default_factory=list)


class NativeFields(SamplingFields, kw_only=True):
    """The fields llama-server's ``/completion`` and ``/infill`` share beyond the OpenAI ones (its
    ``params_from_json_cmpl``).

    ``n_predict`` (-1: until the context is full; 0: the prompt is put in the KV cache and nothing is
    generated, a code-completion client's cache warm-up) is ``max_tokens``. ``n_probs`` adds
    ``completion_probabilities`` (that many alternatives per token, <= 20); ``return_tokens`` the
    generated token ids in the answer (stream chunks carry theirs anyway, as llama-server's);
    ``samplers`` (names, or llama.cpp's one-letter string) chooses which samplers of the chain run (see
    :func:`skippy.engine.sampling.native.apply_samplers`); ``json_schema`` and ``grammar`` constrain
    the output; ``timings_per_token`` and ``return_progress`` as on every route
    (:class:`~skippy.engine.protocols.openai.types.SamplingFields`).
    ``n_indent`` and ``t_max_predict_ms``
    end a completion at a line (:mod:`skippy.engine.output.line_limits`); ``response_fields`` keeps only
    those fields of the answer, a ``/`` path naming a nested one (``"timings/prompt_n"``, a key of its
    own in the answer, as llama-server's ``json_get_nested_values``). ``n_cmpl`` (or ``n``): completions
    per prompt, 1..``--parallel`` (more than one answer in all: a list, a prompt's completions together,
    the ``j``-th seeded with ``seed`` + ``j``). ``id_slot`` is checked (-1 or a
    slot id) but the scheduler places the request (a slot's cached prefix is reused by any request that
    shares it). ``logit_bias`` takes llama-server's forms (:data:`NativeLogitBias`: pairs or an
    object, token ids or texts, ``false`` bans), not only OpenAI's ``{"id": bias}``.
    """

    logit_bias: NativeLogitBias | None = None  # type: ignore[assignment]
    return_tokens: bool = False
    n_indent: int = 0
    t_max_predict_ms: int = -1
    n_cmpl: int | None = None


def native_n_predict(req: NativeFields) -> int:
    """The tokens ``req`` may generate: ``n_predict``, else ``max_tokens`` (llama-server reads both), else -1
    (until the context is full); 0 generates nothing."""
    if req.n_predict is not None:
        return req.n_predict
    return req.max_tokens if req.max_tokens is not None else -1


def native_n_cmpl(req: NativeFields) -> int:
    """The completions ``req`` asks for per prompt: ``n_cmpl``, else ``n`` (llama-server's alias), else 1."""
    if req.n_cmpl is not None:
        return req.n_cmpl
    return req.n if req.n is not None else 1


class InfillRequest(NativeFields, kw_only=True):
    """``POST /infill`` body (llama-server): fill the gap between ``input_prefix`` and ``input_suffix``.

    ``input_extra``: more files for context, before the prefix; ``prompt``: text (or token ids)
    appended to the prefix. The other fields are ``/completion``'s (:class:`NativeFields`), and so
    is the answer.
    """

    input_prefix: str | list[int] = ""
    input_suffix: str | list[int] = ""
    input_extra: list[InfillExtra] = msgspec.field(default_factory=list)
    prompt: str | list[int] = ""


class NativeCompletionRequest(NativeFields, kw_only=True):
    """llama-server's native ``POST /completion`` (and ``/completions`` without ``/v1``) body.

    ``prompt``: a string, a list of token ids, a list mixing ids and strings (one prompt), or a list of
    strings / lists (several prompts: the answer is a list, one result per prompt, ``index`` in order);
    the other fields: :class:`NativeFields`.
    """

    prompt: str | MultimodalPrompt | list[PromptPart | list[PromptPart] | MultimodalPrompt]

    def prompts(self) -> list[list[PromptPart] | MultimodalPrompt]:
        """The prompts (llama-server ``tokenize_input_prompts``): a string, or a list of ids with or without
        strings, is one prompt; a list of strings, lists or prompt objects is several; a prompt object with
        ``multimodal_data`` stays one (its images fill its markers)."""
        p = self.prompt
        if isinstance(p, str):
            return [[p]]
        if isinstance(p, MultimodalPrompt):
            return [p]
        if not p:
            raise InvalidRequest("prompt is empty", param="prompt")
        if any(isinstance(x, int) for x in p):
            flat = [x for x in p if isinstance(x, int | str)]
            if len(flat) != len(p):
                raise InvalidRequest("prompt mixes token ids with nested lists or objects", param="prompt")
            return [flat]
        return [x if isinstance(x, MultimodalPrompt) else list(x) if isinstance(x, list) else [x] for x in p]


class SlotActionRequest(msgspec.Struct, kw_only=True):
    """``POST /slots/{id}?action=save|restore`` (llama-server): the state file's name in ``--slot-save-path``."""

    filename: str


class ModelActionRequest(msgspec.Struct, kw_only=True):
    """``POST /models/load`` and ``/models/unload`` (llama-server's router mode): the ``model`` to load or
    unload (any name it answers to)."""

    model: str


class TokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /tokenize`` (llama-server): ``content`` -> ``{"tokens": [...]}``; ``content`` is a string or
    llama-server's mixed prompt (token ids with strings, ``[12, "text"]``); none gives no tokens, as
    llama-server answers it."""

    content: str | list[PromptPart] | None = None
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False
    model: str | None = None  # several models served: whose vocabulary (llama-server's router mode)


class NativeEmbeddingRequest(msgspec.Struct, kw_only=True):
    """``POST /embedding`` (``/embeddings``, llama-server's own embeddings): ``content`` (or ``input``) in the
    shapes of OpenAI's ``input`` (a string, strings, token ids, lists of token ids), one vector per input, and
    llama-server's mixed ones: token ids with strings in one input (``[12, "text", 34]``), and lists of those
    beside strings; ``embd_normalize`` (llama.cpp ``common_embd_normalize``): -1 none, 0 max-absolute scaled to
    int16's range, 1 taxicab, 2 Euclidean (the default, as ``--embd-normalize``'s), above 2 the p-norm; with
    pooling ``none`` (per-token vectors) nothing is normalized, as llama-server."""

    content: str | list[PromptPart | list[PromptPart]] | None = None
    input: str | list[PromptPart | list[PromptPart]] | None = None
    embd_normalize: int = 2
    truncate: bool = False
    model: str | None = None  # several models served: whose embeddings (llama-server's router mode)

    @property
    def param(self) -> str:
        """The field the inputs come from."""
        return "content" if self.input is None else "input"

    def inputs(self) -> str | list[PromptPart | list[PromptPart]]:
        """``input`` when given (llama-server reads it first), else ``content``. Raises :class:`InvalidRequest`
        (400) when neither is."""
        raw = self.input if self.input is not None else self.content
        if raw is None:
            raise InvalidRequest('"input" or "content" must be provided', param="content")
        return raw

    def mixed(self) -> list[list[PromptPart]] | None:
        """The inputs as llama-server's ``tokenize_input_prompts`` reads them, when one mixes token ids with
        text (else ``None``: OpenAI's shapes): token ids with strings is one input; a list of strings and
        lists is one input each."""
        raw = self.inputs()
        if isinstance(raw, str) or not raw:
            return None
        if any(isinstance(x, int) for x in raw):  # one input of ids, maybe with strings
            if any(isinstance(x, list) for x in raw):
                raise InvalidRequest("an input mixes token ids with nested lists", param=self.param)
            return [list(raw)] if any(isinstance(x, str) for x in raw) else None  # type: ignore[arg-type]
        lists = [x for x in raw if isinstance(x, list)]
        if not any(isinstance(y, str) for x in lists for y in x) and (not lists or len(lists) == len(raw)):
            return None  # strings only, or lists of ids only: OpenAI's shapes
        return [list(x) if isinstance(x, list) else [x] for x in raw]


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /detokenize`` (llama-server): ``tokens`` -> ``{"content": ...}``."""

    tokens: list[int]
    model: str | None = None  # several models served: whose vocabulary (llama-server's router mode)


class ApplyTemplateRequest(ChatCompletionRequest, kw_only=True):
    """``POST /apply-template`` (llama-server): a chat body -> ``{"prompt": ...}``.

    As in llama-server, the whole chat body is accepted and its fields that
    shape the prompt count (``tools``, ``tool_choice``, ``chat_template``,
    ``chat_template_kwargs``, ``enable_thinking``, ``reasoning_effort``,
    ``continue_final_message``, ``add_generation_prompt``); the prompt is
    exactly what ``/v1/chat/completions`` would tokenize.
    """
