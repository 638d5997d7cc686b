"""Request preparation without I/O: what a request asks for, checked against the model and the server.

The :class:`~skippy.actors.engine.Engine` facade prepares a request in two halves,
as httpx builds a request before it sends it: the steps that need an actor (render
the template, tokenize, ask llama.cpp whether a grammar parses, run ``before_chat``)
are awaited there; everything else is a pure function here, unit-tested without an
event loop: how many choices (:func:`choice_count`), the sampling parameters
(:func:`sampling`), the completion budget (:func:`completion_budget`), the stop
strings (:func:`stop_strings`), each choice's seed and shortest reused prefix, the
prompts of a legacy Completions request (:func:`completion_prompt_items`), and the
reply builders of a request's choices (:func:`chat_choices`, :func:`text_choices`).

Every function raises :class:`~skippy.engine.errors.InvalidRequest` (400, naming the
field) or :class:`~skippy.engine.errors.ContextLengthExceeded` (400) for what the
request cannot have, before anything is submitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import msgspec

from skippy.engine.config import EngineConfig
from skippy.engine.errors import ContextLengthExceeded, InvalidRequest
from skippy.engine.hooks.policy import Inject, Stop
from skippy.engine.output.generation import Generation
from skippy.engine.protocols.openai.translate import ChatReply, Choices, TextReply
from skippy.engine.protocols.openai.types import ChatCompletionRequest, CompletionRequest, SamplingFields, prompt_items
from skippy.engine.runtime.base import ModelMeta
from skippy.engine.sampling.native import apply_samplers, wants_infill
from skippy.engine.sampling.params import SamplingParams, sampling_from_request
from skippy.engine.scheduling.events import HookEvent
from skippy.engine.scheduling.prefix import MIN_REUSE
from skippy.engine.scheduling.spec import requested_draft

#: OpenAI's limit on ``stop`` strings (vLLM and llama-server accept more; we keep OpenAI's)
MAX_STOPS = 16


@attrs.frozen
class Limits:
    """What preparation checks a request against: the model's and the server's limits.

    ``n_vocab``: token ids are ``0..n_vocab - 1``; ``n_ctx``: tokens per sequence (prompt plus
    completion); ``n_seq_max``: sequences decoded at once (``--parallel``, the most choices of one
    request); ``max_queue``: sequences that may wait (``--max-queue``); ``min_tail``: prompt tokens
    prefilled even when cached (the scheduler's); ``spec_ngram``: the server's default draft length
    (0: no speculative decoding); ``clamp_max_tokens``: a ``max_tokens`` beyond the room left is
    clamped (else refused); ``n_predict``: the budget of a request that sets no ``max_tokens``
    (llama-server's ``-n``; -1: the room left); ``n_ctx_train``: the model's training context (0: unknown),
    the most ``n_ctx`` can be; ``sampling_defaults``: ``(request field, value)`` the server fills in where a
    request leaves the field out (:attr:`~skippy.engine.config.EngineConfig.sampling_defaults`).
    """

    n_vocab: int
    n_ctx: int
    n_seq_max: int
    n_ctx_train: int = 0
    max_queue: int = 1024
    min_tail: int = 1
    spec_ngram: int = 0
    clamp_max_tokens: bool = True
    n_predict: int = -1
    sampling_defaults: tuple[tuple[str, float | int], ...] = ()

    @classmethod
    def of(cls, meta: ModelMeta, config: EngineConfig, min_tail: int) -> Limits:
        """The limits of a loaded model (``meta``) served with ``config``."""
        return cls(n_vocab=meta.n_vocab, n_ctx=meta.n_ctx_seq, n_seq_max=meta.n_seq_max, n_ctx_train=meta.n_ctx_train,
                   max_queue=config.max_queue,
                   min_tail=min_tail, spec_ngram=config.spec_ngram, clamp_max_tokens=config.clamp_max_tokens,
                   n_predict=config.n_predict, sampling_defaults=config.sampling_defaults)


@attrs.frozen
class Budget:
    """A prompt's completion budget: ``max_tokens`` to generate at most; ``clamped``: ``(asked, granted)``
    when the request's ``max_tokens`` went beyond the room left and was clamped, else ``None``."""

    max_tokens: int
    clamped: tuple[int, int] | None = None


def choice_count(req: SamplingFields, limits: Limits) -> int:
    """``n`` (default 1): 1..``n_seq_max`` choices (400 ``n`` beyond: each choice needs a sequence slot)."""
    n = 1 if req.n is None else req.n
    if n < 1:
        raise InvalidRequest("n must be >= 1", param="n")
    if n > limits.n_seq_max:
        raise InvalidRequest(f"n is {n}, but this server decodes at most {limits.n_seq_max} sequences "
                             "at once (--parallel)", param="n")
    return n


def sampling(req: SamplingFields, limits: Limits, *, logprobs: bool, top_logprobs: int) -> SamplingParams:
    """The request's sampling parameters, validated (:func:`~skippy.engine.sampling.params.sampling_from_request`),
    with the samplers its ``samplers`` leaves out turned off (:func:`~skippy.engine.sampling.native.apply_samplers`,
    400 naming ``samplers`` for what the chain cannot run). A field the request leaves out takes the server's
    default (``limits.sampling_defaults``: llama-server's ``--temp``, ``--top-k``...), if it has one."""
    unset = {name: value for name, value in limits.sampling_defaults if getattr(req, name) is None
             and not (name == "repeat_penalty" and req.repetition_penalty is not None)}  # vLLM's name for it
    if unset:
        req = msgspec.structs.replace(req, **unset)
    params = sampling_from_request(apply_samplers(req, req.samplers), n_vocab=limits.n_vocab, logprobs=logprobs,
                                   top_logprobs=top_logprobs, n_ctx=limits.n_ctx)
    return attrs.evolve(params, infill=True) if wants_infill(req.samplers) else params


def completion_budget(req: SamplingFields, n_prompt: int, limits: Limits, *, allow_zero: bool = False,
                      prompt_param: str = "messages") -> Budget:
    """The completion budget of a prompt of ``n_prompt`` tokens: the request's ``n_predict`` (llama-server's
    name, which wins; -1: none given), else ``max_tokens`` (or ``max_completion_tokens``), else the server's
    ``n_predict`` within the room left (at least 1), else the room left in the context. ``max_tokens`` 0 is
    a 400 unless ``allow_zero`` (llama-server's native routes, where it is ``n_predict``'s alias);
    ``n_predict`` 0 is taken: the prompt is prefilled, nothing generated. A prompt that alone fills the
    context is a 400 ``context_length_exceeded``; so is a ``max_tokens`` beyond the room left when
    ``clamp_max_tokens`` is off (as OpenAI and vLLM refuse it), else it is clamped to the room (as
    llama-server and Ollama do) and :attr:`Budget.clamped` says so. The prompt's error names ``prompt_param``
    and words it as llama-server does (``request (N tokens) exceeds the available context size (M tokens)``)
    and as OpenAI does (``maximum context length is M tokens``): clients recognise either."""
    n_ctx = limits.n_ctx
    asked = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if asked is not None and asked < (0 if allow_zero else 1):
        raise InvalidRequest("max_tokens must be >= 1", param="max_tokens")
    if req.n_predict is not None:
        asked = None if req.n_predict < 0 else req.n_predict
    if n_prompt >= n_ctx:
        larger = ("shorten the prompt or serve it with a larger --ctx-size" if n_ctx < limits.n_ctx_train else
                  "shorten the prompt (the model was trained for no more)")
        raise ContextLengthExceeded(
            f"request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens): this model's "
            f"maximum context length is {n_ctx} tokens; {larger}", param=prompt_param, n_prompt=n_prompt, n_ctx=n_ctx)
    room = n_ctx - n_prompt
    if asked is None and limits.n_predict >= 0:  # the server's -n: within the room left, never a 400
        return Budget(max(1, min(limits.n_predict, room)))
    if asked is None or asked <= room:
        return Budget(room if asked is None else asked)  # None: until the context is full (finish "length")
    if not limits.clamp_max_tokens:  # --no-clamp-max-tokens
        raise ContextLengthExceeded(
            f"the prompt ({n_prompt} tokens) plus max_tokens ({asked}) exceeds the context of {n_ctx} "
            f"tokens; lower max_tokens to at most {room} (this server runs with --no-clamp-max-tokens; "
            "without it max_tokens is clamped to the room left)", param="max_tokens", n_prompt=n_prompt, n_ctx=n_ctx,
            max_tokens=asked)
    return Budget(room, (asked, room))


def speculative(req: SamplingFields, limits: Limits) -> int | None:
    """Draft tokens per step of speculative decoding the request asks for (``None``: the server's default)."""
    return requested_draft(req.speculative, limits.spec_ngram)


def stop_strings(stop: str | list[str] | None) -> list[str]:
    """OpenAI ``stop`` as a list, empty strings left out; more than :data:`MAX_STOPS` is a 400."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if len(stops) > MAX_STOPS:
        raise InvalidRequest(f"at most {MAX_STOPS} stop strings are allowed", param="stop")
    return [s for s in stops if s]


def choice_seed(params: SamplingParams, j: int) -> SamplingParams:
    """Choice ``j``'s sampling: the request's seed plus ``j``, so seeded choices differ and reproduce."""
    return attrs.evolve(params, seed=(params.seed + j) & 0xFFFFFFFF) if j else params


def min_reuse(n: int, n_prompt: int, min_tail: int) -> int:
    """The shortest prefix the scheduler copies for a choice: with ``n`` > 1, also a prompt shorter than
    ``MIN_REUSE`` is prefilled once and copied (all of it but the last ``min_tail`` tokens)."""
    return MIN_REUSE if n == 1 else max(1, min(MIN_REUSE, n_prompt - min_tail))


def completion_logprobs(req: CompletionRequest) -> int | None:
    """Legacy Completions ``logprobs`` (alternatives per token, 0..5; llama-server's ``n_probs`` when
    ``logprobs`` is absent), ``None`` when not asked for."""
    lp = req.logprobs
    if lp is not None and not 0 <= lp <= 5:
        raise InvalidRequest("logprobs must be in [0, 5]", param="logprobs")
    if lp is None and req.n_probs:
        if not 0 <= req.n_probs <= 5:
            raise InvalidRequest("n_probs must be in [0, 5] on /v1/completions", param="n_probs")
        lp = req.n_probs
    return lp


def completion_prompt_items(req: CompletionRequest, n: int, limits: Limits) -> list[str | list[int]]:
    """Legacy Completions ``prompt`` as items: a string, or token ids (checked against the vocabulary).
    Raises :class:`InvalidRequest` (``prompt``) for an empty or mixed list, a token id outside the
    vocabulary, or more choices (prompts times ``n``) than the queue holds."""
    items = prompt_items(req.prompt, "prompt")
    if len(items) * n > limits.max_queue:
        raise InvalidRequest(f"prompt has {len(items)} prompts and n is {n}: at most {limits.max_queue} "
                             "choices per request (--max-queue)", param="prompt")
    for item in items:
        if not isinstance(item, str) and any(not 0 <= t < limits.n_vocab for t in item):
            raise InvalidRequest(f"prompt has a token id outside the vocabulary (0..{limits.n_vocab - 1})",
                                 param="prompt")
    return items


def before_chat_event(outcome: Any, injected: int) -> HookEvent:
    """The reported :class:`HookEvent` of a ``before_chat`` outcome (``Deny`` raised before this) that
    appended ``injected`` tokens to the prompt."""
    if isinstance(outcome, Inject):
        return HookEvent("before_chat", "inject", text=outcome.text, injected_tokens=injected)
    if isinstance(outcome, Stop):
        return HookEvent("before_chat", "stop", reason=outcome.reason)
    return HookEvent("before_chat", "none")


def reports_prefill(req: SamplingFields) -> bool:
    """Whether ``req``'s generations report each prefill step
    (:attr:`~skippy.engine.output.generation.GenerationOptions.progress`): llama-server's live
    ``timings_per_token`` and ``return_progress`` read them."""
    return req.return_progress or req.timings_per_token


def chat_choices(req: ChatCompletionRequest, gens: Sequence[Generation], *, model: str, reply_id: str,
                 created: int, include_usage: bool = False) -> Choices:
    """The reply builders of a chat request's ``n`` choices (one ``id`` and ``created``, choice ``i`` at
    ``choices[i]``; the live timings of ``timings_per_token`` and ``return_progress`` from the prefill steps the
    generations report: :func:`reports_prefill`; a request that offers tools, unless ``tool_choice`` is
    ``"none"``, streams ``content: null`` in its first delta:
    :meth:`~skippy.engine.protocols.openai.translate.ChatReply.first_chunks`)."""
    tools = bool(req.tools) and req.tool_choice != "none"  # the reply may call one: its stream starts content null
    replies = [ChatReply(model, gen, logprobs=gen.request.params.logprobs, index=i, id=reply_id, created=created,
                         timings_per_token=req.timings_per_token, return_progress=req.return_progress, tools=tools)
               for i, gen in enumerate(gens)]
    return Choices(replies, [0] * len(gens), include_usage=include_usage)


def text_choices(req: CompletionRequest, texts: Sequence[str], gens: Sequence[Generation], *, model: str,
                 reply_id: str, created: int, include_usage: bool = False) -> Choices:
    """The reply builders of a legacy Completions request: ``n`` choices per prompt (``texts``, for
    ``echo``), ``choices[prompt_i * n + j]``; a choice that did not score its prompt reads the scores of
    its prompt's first choice."""
    n = len(gens) // len(texts)
    replies = [TextReply(model, gen, prompt_text=texts[i // n], echo=req.echo, logprobs=gen.request.params.logprobs,
                         index=i, id=reply_id, created=created,
                         prompt_source=gen if gen.request.prompt_logprobs is not None else gens[i - i % n],
                         timings_per_token=req.timings_per_token, return_progress=req.return_progress)
               for i, gen in enumerate(gens)]
    return Choices(replies, [i // n for i in range(len(gens))], include_usage=include_usage)
