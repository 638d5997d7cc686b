"""The llama-server wire model: the JSON objects of llama-server's own routes, as msgspec Structs.

``/completion`` and ``/infill`` (:class:`NativeCompletion`), ``/health``,
``/tokenize``, ``/detokenize``, ``/apply-template``,
``/v1/chat/completions/input_tokens``, ``/slots`` and ``/props``'
``generation_settings``, in the shapes of llama.cpp's ``tools/server``. Encoding
rules are :class:`~skippy.engine.protocols.base.WireStruct`'s (``None`` is sent
as ``null``, :data:`msgspec.UNSET` is left out). ``timings`` is the OpenAI
replies' :class:`~skippy.engine.protocols.openai.wire.Timings` (llama-server sends
the same object on both).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from skippy.engine.protocols.base import UNSET, UnsetType, WireStruct
from skippy.engine.protocols.openai.wire import PromptProgress, Timings

__all__ = [
    "RESPONSES", "UNSET", "ApplyTemplateResponse", "DetokenizeResponse", "GenerationSettings", "Health",
    "InputTokens", "LoraAdapter", "LoraApplied", "LoraScale", "NativeCompletion", "NativeTokenProb",
    "NativeTopProb", "PromptProgress", "Slot", "SlotErased",
    "SlotNextToken", "SlotRestored", "SlotSaved", "TokenPiece", "TokenizeResponse", "UnsetType",
]


class Health(WireStruct, kw_only=True):
    """llama-server ``GET /health`` once the model is loaded: slot and queue counts; with several models served,
    ``models_loading``, the ids of those loading now (from the request that wants one until it is loaded, its
    wait for room under ``--max-loaded`` included; skippy's)."""

    status: Literal["ok"] = "ok"
    slots_idle: int
    slots_processing: int
    requests_waiting: int
    models_loading: list[str] | UnsetType = UNSET


class LoraAdapter(WireStruct, kw_only=True):
    """llama-server ``GET /lora-adapters``: one loaded adapter (``--lora``), its id (command-line order from 0),
    file and global scale (what a request without a ``lora`` field runs with; 0: not applied)."""

    id: int
    path: str
    scale: float


class LoraScale(WireStruct, kw_only=True):
    """One entry of ``POST /lora-adapters``'s body (a list of them) and of a request's ``lora`` field: an
    adapter id and its scale; adapters left out get 0."""

    id: int
    scale: float


class LoraApplied(WireStruct, kw_only=True):
    """llama-server ``POST /lora-adapters``'s reply once the global scales are set."""

    success: bool = True


class TokenPiece(WireStruct, kw_only=True):
    """llama-server ``/tokenize`` with ``with_pieces``: ``piece`` is text, or the raw bytes when they are
    not valid UTF-8 on their own."""

    id: int
    piece: str | list[int]


class TokenizeResponse(WireStruct, kw_only=True):
    """llama-server ``POST /tokenize``: token ids, or :class:`TokenPiece` objects with ``with_pieces``."""

    tokens: list[int | TokenPiece]


class NativeEmbedding(WireStruct, kw_only=True):
    """One input's entry of llama-server's ``POST /embedding`` reply (a list of them, in input order):
    ``embedding`` holds one row, the pooled vector normalized as the request's ``embd_normalize`` says; with
    pooling ``none``, one row per token of the input, not normalized (as llama-server)."""

    index: int
    embedding: list[list[float]]


class DetokenizeResponse(WireStruct, kw_only=True):
    """llama-server ``POST /detokenize``."""

    content: str


class InputTokens(WireStruct, kw_only=True):
    """llama-server ``POST /v1/chat/completions/input_tokens``: the prompt tokens a chat request would use."""

    object: str = "response.input_tokens"
    input_tokens: int


class ApplyTemplateResponse(WireStruct, kw_only=True):
    """llama-server ``POST /apply-template``: the rendered prompt text."""

    prompt: str


# -- llama-server native routes: /completion, /slots, /props ----------------------------------------

class GenerationSettings(WireStruct, kw_only=True):
    """llama-server ``generation_settings`` (of a ``/completion`` answer, a ``/slots`` entry's ``params``,
    ``/props`` ``default_generation_settings.params``): the sampling parameters as they ran.

    Every sampler's value as it ran (the request's, else the server's default, else llama-server's).
    ``n_predict`` -1: until the context is full. ``samplers``: the chain in order. ``logit_bias``:
    ``[token id, bias]`` pairs, a banned token's bias ``null`` (-inf, which JSON cannot write; llama-server
    writes it so too).
    """

    seed: int
    temperature: float
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int
    top_p: float
    min_p: float
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    typical_p: float = 1.0
    repeat_last_n: int
    repeat_penalty: float
    presence_penalty: float
    frequency_penalty: float
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    stop: list[str] = msgspec.field(default_factory=list)
    max_tokens: int
    n_predict: int
    n_keep: int = 0
    n_discard: int = 0
    ignore_eos: bool = False
    stream: bool = False
    logit_bias: list[list[float | None]] = msgspec.field(default_factory=list)
    n_probs: int = 0
    min_keep: int = 0
    grammar: str = ""
    samplers: list[str]
    timings_per_token: bool = False
    post_sampling_probs: bool = False


class NativeTopProb(WireStruct, kw_only=True):
    """One alternative of llama-server's ``completion_probabilities[].top_logprobs`` (``logprob``), or of its
    ``top_probs`` (``prob``, with ``post_sampling_probs``)."""

    id: int
    token: str
    bytes: list[int]
    logprob: float | UnsetType = UNSET
    prob: float | UnsetType = UNSET


class NativeTokenProb(WireStruct, kw_only=True):
    """llama-server ``completion_probabilities[]`` (``n_probs`` > 0): one generated token, its natural-log
    probability and the ``n_probs`` most likely alternatives (from the raw logits); with
    ``post_sampling_probs``, ``prob`` and ``top_probs`` instead: its probability and the most likely
    candidates in the distribution the sampler chain drew it from."""

    id: int
    token: str
    bytes: list[int]
    logprob: float | UnsetType = UNSET
    top_logprobs: list[NativeTopProb] | UnsetType = UNSET
    prob: float | UnsetType = UNSET
    top_probs: list[NativeTopProb] | UnsetType = UNSET


class NativeCompletion(WireStruct, kw_only=True):
    """llama-server's native ``/completion`` answer, and each SSE chunk of a streamed one.

    A chunk (``stop: false``) carries the new ``content`` and its ``tokens`` (the id sampled for it, as
    llama-server streams them, ``return_tokens`` or not; the answer has them only with ``return_tokens``);
    ``timings`` with ``timings_per_token``; ``completion_probabilities`` with ``n_probs``; a
    ``return_progress`` chunk carries ``prompt_progress`` and no content. The answer (and a stream's
    last chunk, ``stop: true``) adds ``model``, ``generation_settings``, ``prompt``, ``stop_type``
    (``eos``: an end-of-generation token, ``word``: a ``stop`` string, named in ``stopping_word``,
    ``limit``: ``n_predict`` or the context), ``tokens_cached`` and ``timings``. ``id_slot`` is the slot
    the request ran in (-1 on chunks, as llama-server).
    """

    index: int = 0
    content: str
    tokens: list[int] = msgspec.field(default_factory=list)
    id_slot: int = -1
    stop: bool
    model: str | UnsetType = UNSET
    tokens_predicted: int
    tokens_evaluated: int
    generation_settings: GenerationSettings | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    has_new_line: bool | UnsetType = UNSET
    truncated: bool | UnsetType = UNSET
    stop_type: Literal["eos", "word", "limit", "none"] | UnsetType = UNSET
    stopping_word: str | UnsetType = UNSET
    tokens_cached: int | UnsetType = UNSET
    timings: Timings | UnsetType = UNSET
    completion_probabilities: list[NativeTokenProb] | UnsetType = UNSET
    prompt_progress: PromptProgress | UnsetType = UNSET


class SlotNextToken(WireStruct, kw_only=True):
    """llama-server ``/slots`` ``next_token[]``: ``n_remain`` tokens left to generate (-1: idle),
    ``n_decoded`` generated so far."""

    has_next_token: bool
    has_new_line: bool = False
    n_remain: int
    n_decoded: int


class Slot(WireStruct, kw_only=True):
    """One slot of llama-server's ``GET /slots``.

    ``id_task``: the request running in it (-1: idle); ``n_prompt_tokens`` its prompt,
    ``n_prompt_tokens_cache`` of them reused; ``n_ctx`` the slot's context; ``params`` the running
    request's sampling parameters (the defaults when idle); ``n_kv`` (skippy) tokens held in its KV
    cache (a running sequence's, or an idle slot's prefix-cache entry); ``speculative``: the running request
    speculates, an idle slot's requests would by default (``--spec-ngram`` on a model that can speculate).
    """

    id: int
    n_ctx: int
    speculative: bool = False
    is_processing: bool
    id_task: int
    n_prompt_tokens: int
    n_prompt_tokens_cache: int
    n_kv: int
    params: GenerationSettings
    next_token: list[SlotNextToken]


class SlotSaved(WireStruct, kw_only=True):
    """``POST /slots/{id}?action=save`` (llama-server): tokens saved, bytes written, ``timings.save_ms``."""

    id_slot: int
    filename: str
    n_saved: int
    n_written: int
    timings: dict[str, float]


class SlotRestored(WireStruct, kw_only=True):
    """``POST /slots/{id}?action=restore`` (llama-server): tokens restored, bytes read, ``timings.restore_ms``."""

    id_slot: int
    filename: str
    n_restored: int
    n_read: int
    timings: dict[str, float]


class SlotErased(WireStruct, kw_only=True):
    """``POST /slots/{id}?action=erase`` (llama-server): tokens the slot held."""

    id_slot: int
    n_erased: int


class ModelActionResult(WireStruct, kw_only=True):
    """``POST /models/load`` / ``/models/unload`` (llama-server's router mode): ``{"success": true}``."""

    success: bool = True


#: Every top-level response object of this API (for the OpenAPI components).
RESPONSES: tuple[type[WireStruct], ...] = (
    Health, TokenizeResponse, DetokenizeResponse, ApplyTemplateResponse, InputTokens, NativeCompletion, Slot,
    SlotSaved, SlotRestored, SlotErased, ModelActionResult)
