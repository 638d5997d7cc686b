"""The Engine facade: serves OpenAI (and llama-server) requests in-process over one model's actors.

Usable from any trio program, without HTTP (:func:`~skippy.actors.wiring.open_engine` starts the actors)::

    async with skippy.open_engine(EngineConfig(model="SmolLM2-135M-Instruct")) as engine:
        reply = await engine.chat(ChatCompletionRequest(messages=[Message("user", "Hi")]))
        async for chunk in await engine.chat_stream(request):
            ...

Requests and replies are OpenAI shapes: msgspec request Structs in
(:mod:`skippy.engine.protocols.openai.types`), the :mod:`skippy.engine.protocols.openai.wire` Structs out
(they also read like dicts: ``reply["choices"][0]["message"]["content"]``).
Errors are :class:`skippy.engine.errors.EngineError` subclasses.

Per request, the facade renders and tokenizes the prompt through the actors,
makes a sans-IO :class:`~skippy.engine.output.generation.Generation` per
choice (OpenAI ``n``, times the prompts of a list on ``/v1/completions``),
submits their sequences together to the :class:`DecodeScheduler` (a full
queue raises :class:`QueueFull` there, before any chunk), and then only moves
each sequence's events from one shared channel into its Generation; the
replies are built by :mod:`skippy.engine.protocols.openai.translate`.

The choices of one prompt are one prompt prefilled once: they are submitted
together, the first prefills it, and the scheduler copies its KV
(``llama_memory_seq_cp``) to the others, which only prefill the prompt's last
tokens (the scheduler core's ``min_tail``) before sampling.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any, Concatenate, ParamSpec, TypeVar

import attrs
import msgspec
import trio

from skippy.actors.consult import ConsultPolicy
from skippy.actors.hooks import HookEvaluator
from skippy.actors.image_urls import ImageFetcher
from skippy.actors.metrics import EngineMetrics
from skippy.actors.pooling import Pooling
from skippy.actors.renderer import TemplateRenderer
from skippy.actors.scheduler import DecodeScheduler
from skippy.actors.streams import ChoiceChannel, HookCtx, ReplyStream, RequestEvents, drain
from skippy.actors.tokenizer import Tokenizer
from skippy.actors.trace import TRACE, reply_id
from skippy.engine.chat.emulation import EarlyStop
from skippy.engine.chat.formats import SYNTAXES, preserved_markers, preserved_pieces
from skippy.engine.chat.formats.base import ContentParser
from skippy.engine.chat.images import decode_data_url, has_images
from skippy.engine.chat.plan import ParsePlan
from skippy.engine.chat.prepare import emulated_thinking_open, make_output_parser
from skippy.engine.config import EngineConfig
from skippy.engine.errors import (
    ContextLengthExceeded,
    EngineClosed,
    InvalidRequest,
    ModelNotFound,
    PermissionDenied,
    QueueFull,
)
from skippy.engine.hooks.policy import Deny, Inject, Stop
from skippy.engine.hooks.signals import FinishInfo
from skippy.engine.infill import ExtraChunk, Mixed, format_infill, require_fim
from skippy.engine.lora import LoraAdapters
from skippy.engine.output.generation import Done, Generation, GenerationError, GenerationOptions
from skippy.engine.output.line_limits import LineLimits
from skippy.engine.preparation import (
    Limits,
    before_chat_event,
    chat_choices,
    choice_count,
    choice_seed,
    completion_budget,
    completion_logprobs,
    completion_prompt_items,
    min_reuse,
    reports_prefill,
    sampling,
    speculative,
    stop_strings,
    text_choices,
)
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.llama_server.translate import (
    DEFAULT_SAMPLERS,
    NativeAnswer,
    NativeReply,
    default_generation_settings,
    generation_settings,
    slot_views,
)
from skippy.engine.protocols.llama_server.types import (
    InfillRequest,
    MultimodalPrompt,
    NativeCompletionRequest,
    NativeEmbeddingRequest,
    NativeFields,
    native_n_cmpl,
    native_n_predict,
)
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.openai.translate import Choices
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    Message,
    SamplingFields,
    message_dicts,
)
from skippy.engine.protocols.rerank import wire as rerank_wire
from skippy.engine.protocols.rerank.types import RerankRequest, ScoreRequest
from skippy.engine.runtime.base import Runtime
from skippy.engine.runtime.media import MediaPrompt, MediaSpan
from skippy.engine.sampling.constraints import RequestConstraint, constraint_from_request
from skippy.engine.sampling.grammar import require_gbnf_depth
from skippy.engine.sampling.native import CHAIN, native_logit_bias, resolve_logit_bias, sampler_names
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.budget import ReasoningBudget
from skippy.engine.scheduling.events import HookEvent, SeqEvent
from skippy.engine.scheduling.prefix import common_prefix_len

T = TypeVar("T")
P = ParamSpec("P")


def _preparing(start: Callable[Concatenate[Engine, P], Awaitable[T]]) -> Callable[Concatenate[Engine, P], Awaitable[T]]:
    """Wrap an engine's ``_start_*`` (a generation): while it prepares its request (template, tokenizer) and until
    it submits it, the scheduler counts it as incoming (:meth:`DecodeScheduler.incoming`), so a burst starts as one
    batch. A model that cannot generate (an encoder: ``meta.generates``) refuses it first: :class:`InvalidRequest`
    ``model_not_supported``."""

    @functools.wraps(start)
    async def wrapper(self: Engine, *args: P.args, **kwargs: P.kwargs) -> T:
        self.require_open()
        self.require_generation()
        self.scheduler.incoming(1)
        try:
            started = await start(self, *args, **kwargs)
        finally:
            self.scheduler.incoming(-1)
        await trio.lowlevel.cancel_shielded_checkpoint()  # the scheduler plans the first step before the headers go
        return started

    return wrapper


class Engine:
    """OpenAI chat and text completions over the actors (see module docstring)."""

    def __init__(self, config: EngineConfig, runtime: Runtime, tokenizer: Tokenizer,
                 renderer: TemplateRenderer, scheduler: DecodeScheduler,
                 hooks: HookEvaluator | None = None, nursery: trio.Nursery | None = None) -> None:
        self.config = config
        self.runtime = runtime
        self.meta = runtime.meta
        self.tokenizer = tokenizer
        self.renderer = renderer
        self.scheduler = scheduler
        #: prompt tokens prefilled even when cached (the scheduler core's)
        self.min_tail = scheduler.core.min_tail
        #: what request preparation checks requests against (:mod:`skippy.engine.preparation`)
        self.limits = Limits.of(runtime.meta, config, self.min_tail)
        self.hooks = hooks
        #: the ``--consult`` policy (its media fallback runs here, before rendering); set by ``open_engine``
        self.consult: ConsultPolicy | None = None
        #: ``--allow-image-urls``: fetches chat requests' http(s) image URLs before rendering; set by ``open_engine``
        self.image_fetcher: ImageFetcher | None = None
        self._nursery = nursery
        self.metrics = EngineMetrics()
        self.metrics.attach(self)
        self.model_id = config.model_name or _cache_name(config.model) or runtime.meta.name
        #: every name the model answers to and ``/v1/models`` lists: its id, then ``--alias`` names
        self.served_names: tuple[str, ...] = tuple(dict.fromkeys((self.model_id, *config.model_alias)))
        #: ``/v1/models`` ``created``: the model file's modification time (Unix seconds), else the load time
        self.created = _file_time(runtime.meta.path)
        #: stop strings every chat request gets from the template: ChatML's ``<|im_end|>`` when ChatML
        #: stands in for a missing template and the vocabulary has no such token (see ``fallback_stops``)
        self.template_stops: tuple[str, ...] = ()
        #: the LoRA adapters (``--lora``) and their global scales (``GET`` / ``POST /lora-adapters``)
        self.lora = LoraAdapters(config.lora, config.lora_init_without_apply)
        self._rids = itertools.count(1)
        self._arrivals = itertools.count(1)  # SeqRequest.arrival: taken before any template or tokenizer work
        self._format_pieces: dict[str, Callable[[int], bytes]] = {}
        self._tag_pieces_of: dict[str, tuple[str | int, ...]] = {}  # a closing tag -> _tag_pieces
        self.closed = False
        #: embeddings, reranking and scoring (the pooled routes)
        self.pooling = Pooling(runtime.meta, tokenizer, scheduler, self.metrics, rids=self._rids,
                               reply_model=self.reply_model, closed=lambda: self.closed)

    # -- public API ---------------------------------------------------------------
    def require_generation(self) -> None:
        """Raise :class:`InvalidRequest` ``model_not_supported`` when the model cannot generate (an encoder:
        ``meta.generates``)."""
        if not self.meta.generates:
            raise InvalidRequest(f"model {self.meta.name!r} cannot generate text: it is an encoder (BERT-like, no "
                                 "causal attention), served for embeddings and reranking only", param="model",
                                 code="model_not_supported")

    def reply_model(self, model: str | None) -> str:
        """The model name a reply reports for a request's ``model``.

        One model is served, so any ``model`` value is accepted (llama-server
        does the same; a client's ``"gpt-4o"`` gets this model) and echoed in
        the reply's ``model`` field, as llama-server does; without one, the
        reply says :attr:`model_id`. (A server of several models would raise
        :class:`ModelNotFound`, 404, for a name none of them answers to.)
        """
        return model if model else self.model_id

    def find_model(self, model_id: str) -> str:
        """The served name equal to ``model_id`` (case-insensitive; the GGUF name and path count too)
        for ``GET /v1/models/{id}``; raises :class:`ModelNotFound` (404) for another name."""
        for name in (*self.served_names, self.meta.name, self.meta.path):
            if name.lower() == model_id.lower():
                return name if name in self.served_names else self.model_id
        raise ModelNotFound(f"model {model_id!r} is not served here (this server serves "
                            f"{', '.join(repr(n) for n in self.served_names)})", param="model")

    def lora_adapters(self) -> list[wire.LoraAdapter]:
        """llama-server ``GET /lora-adapters``: every adapter with its id, path and global scale."""
        return [wire.LoraAdapter(**entry) for entry in self.lora.listing()]

    def require_open(self) -> None:
        """Raise :class:`EngineClosed` (503) once the engine is closed: its model and actors are gone."""
        if self.closed:
            raise EngineClosed("the engine is shutting down")

    def set_lora_adapters(self, entries: Any) -> None:
        """llama-server ``POST /lora-adapters`` (``[{"id", "scale"}]``): the listed adapters take their scale as
        the global one, the others 0, for the requests prepared from now on (running ones keep theirs).
        Raises :class:`InvalidRequest` (400 naming ``N.id`` / ``N.scale``; nothing changed)."""
        self.lora.set_global(entries)

    async def chat(self, req: ChatCompletionRequest, *, priority: int = 0) -> openai_wire.ChatCompletion:
        """One OpenAI ``chat.completion`` for ``req`` (``req.stream`` is ignored); ``n`` choices. ``priority``:
        a lower one is admitted before waiting requests of a higher one (vLLM's ``priority``; 0 by default)."""
        gens, stream = await self._start_chat(await self._with_image_urls(req), priority)
        return self._chat_choices(req, gens).completion(await drain(stream))  # type: ignore[return-value]

    async def chat_stream(self, req: ChatCompletionRequest, *,
                          priority: int = 0) -> ReplyStream[openai_wire.ChatCompletionChunk]:
        """OpenAI ``chat.completion.chunk`` objects: role chunk, deltas, finish chunk, optional usage chunk.

        With ``n`` > 1 every choice's chunks carry its ``index`` and interleave as
        its tokens come; one usage chunk ends the stream. Errors in the request
        (400/403/404/429) raise here, before the first chunk. Closing the
        iterator before its end cancels every choice. ``priority`` as :meth:`chat`'s.
        """
        gens, stream = await self._start_chat(await self._with_image_urls(req), priority)
        choices = self._chat_choices(req, gens, include_usage=bool(req.stream_options
                                                                  and req.stream_options.include_usage))
        return stream.rendered(choices.first_chunks(), choices.chunks)

    async def completion(self, req: CompletionRequest) -> openai_wire.TextCompletion:
        """One OpenAI legacy ``text_completion`` for ``req``: ``n`` choices per prompt (a string, a list
        of strings, token ids or lists of token ids), ``choices[prompt_i * n + j]``."""
        texts, gens, stream = await self._start_completion(req)
        return self._text_choices(req, texts, gens).completion(await drain(stream))  # type: ignore[return-value]

    async def completion_stream(self, req: CompletionRequest) -> ReplyStream[openai_wire.TextCompletion]:
        """OpenAI legacy ``text_completion`` chunks (the echoed prompt first with ``echo``), each choice's
        with its ``index``.

        Errors in the request (400/404/429) raise here, before the first chunk.
        """
        texts, gens, stream = await self._start_completion(req)
        choices = self._text_choices(req, texts, gens, include_usage=bool(req.stream_options
                                                                         and req.stream_options.include_usage))
        return stream.rendered(choices.first_chunks(), choices.chunks)

    async def infill(self, req: InfillRequest) -> list[NativeAnswer]:
        """llama-server ``/infill``: fill the gap between ``input_prefix`` and ``input_suffix`` (see
        :mod:`skippy.engine.infill`); the answers are ``/completion``'s (:meth:`completion_native`: one per
        completion, ``n_cmpl``). Raises :class:`InvalidRequest` (400) for a model without FIM tokens."""
        return await self._native_answers(*await self._start_infill(req))

    async def infill_stream(self, req: InfillRequest) -> ReplyStream[NativeAnswer]:
        """llama-server ``/infill`` stream: ``/completion``'s chunks (:meth:`completion_native_stream`)."""
        replies, stream = await self._start_infill(req)
        return stream.rendered([], lambda index, item: replies[index].chunks(item))

    async def embeddings(self, req: EmbeddingRequest) -> openai_wire.EmbeddingList:
        """OpenAI ``POST /v1/embeddings``: :meth:`Pooling.embeddings <skippy.actors.pooling.Pooling.embeddings>`."""
        return await self.pooling.embeddings(req)

    async def embeddings_native(self, req: NativeEmbeddingRequest) -> list[wire.NativeEmbedding]:
        """llama-server's ``POST /embedding``: :meth:`Pooling.embeddings_native
        <skippy.actors.pooling.Pooling.embeddings_native>`."""
        return await self.pooling.embeddings_native(req)

    async def rerank(self, req: RerankRequest) -> rerank_wire.RerankResponse:
        """``POST /v1/rerank``: :meth:`Pooling.rerank <skippy.actors.pooling.Pooling.rerank>`."""
        return await self.pooling.rerank(req)

    async def score(self, req: ScoreRequest) -> rerank_wire.ScoreResponse:
        """vLLM's ``POST /score``: :meth:`Pooling.score <skippy.actors.pooling.Pooling.score>`."""
        return await self.pooling.score(req)

    @_preparing
    async def _start_infill(self, req: InfillRequest) -> tuple[list[NativeReply], RequestEvents]:
        require_fim(self.meta.fim, "input_prefix")
        arrival = next(self._arrivals)  # its place in the queue: before its tokenizer work
        prompt = await self._infill_tokens(req.input_prefix, req.input_suffix, prompt=req.prompt,
                                           extra=[ExtraChunk(c.text, c.filename) for c in req.input_extra],
                                           n_predict=native_n_predict(req))
        return await self._native(req, [(prompt, (), None)], arrival, save_replaced=False)

    async def _infill_tokens(self, prefix: Mixed, suffix: Mixed, *, prompt: Mixed = "",
                             extra: list[ExtraChunk] | None = None, n_predict: int = -1) -> list[int]:
        """A fill-in-the-middle prompt's token ids (llama-server ``format_infill``), assembled in a worker thread."""
        vocab, meta = self.runtime.vocab, self.meta
        for name, x in (("prefix", prefix), ("suffix", suffix), ("prompt", prompt)):
            if not isinstance(x, str) and any(not 0 <= t < meta.n_vocab for t in x):
                raise InvalidRequest(f"the {name} has a token id outside the vocabulary (0..{meta.n_vocab - 1})",
                                     param="prompt" if name == "prompt" else f"input_{name}")

        def build() -> list[int]:
            bos = meta.bos_id if vocab.tokenize("", add_special=True, parse_special=False) else None
            return format_infill(lambda t: vocab.tokenize(t, add_special=False, parse_special=False), meta.fim,
                                 prefix=prefix, suffix=suffix, extra=extra or (), prompt=prompt, bos=bos,
                                 n_batch=meta.n_batch, n_predict=n_predict, n_ctx=meta.n_ctx_seq)

        return await trio.to_thread.run_sync(build)

    def _chat_choices(self, req: ChatCompletionRequest, gens: list[Generation], *,
                      include_usage: bool = False) -> Choices:
        return chat_choices(req, gens, model=self.reply_model(req.model), reply_id=reply_id("chatcmpl"),
                            created=int(time.time()), include_usage=include_usage)

    def _text_choices(self, req: CompletionRequest, texts: list[str], gens: list[Generation], *,
                      include_usage: bool = False) -> Choices:
        return text_choices(req, texts, gens, model=self.reply_model(req.model), reply_id=reply_id("cmpl"),
                            created=int(time.time()), include_usage=include_usage)

    async def completion_native(self, req: NativeCompletionRequest) -> list[NativeAnswer]:
        """llama-server's native ``/completion``: one answer per prompt of ``req`` (see
        :meth:`NativeCompletionRequest.prompts`), all generated at once; ``response_fields`` makes each a dict
        of those fields (:func:`~skippy.engine.protocols.llama_server.translate.select_fields`). Raises like
        :meth:`completion`."""
        return await self._native_answers(*await self._start_native(req))

    async def completion_native_stream(self, req: NativeCompletionRequest) -> ReplyStream[NativeAnswer]:
        """llama-server's native ``/completion`` stream: every prompt's chunks as its tokens come (``index``
        says whose; all prompts are generated at once), each prompt's ending with its answer (``stop: true``)."""
        replies, stream = await self._start_native(req)
        return stream.rendered([], lambda index, item: replies[index].chunks(item))

    @staticmethod
    async def _native_answers(replies: list[NativeReply], stream: RequestEvents) -> list[NativeAnswer]:
        """Each prompt's answer once every prompt's generation is done."""
        dones: dict[int, Done] = {}
        async with aclosing(stream):
            async for index, item in stream:
                replies[index].observe(item)
                if isinstance(item, Done):
                    dones[index] = item
        if len(dones) != len(replies):
            raise GenerationError("generation ended without a result")
        return [reply.final(dones[i]) for i, reply in enumerate(replies)]

    @_preparing
    async def _start_native(self, req: NativeCompletionRequest) -> tuple[list[NativeReply], RequestEvents]:
        arrival = next(self._arrivals)  # its place in the queue: before its tokenizer work
        prompts: list[tuple[list[int], tuple[MediaSpan, ...], str | None]] = []
        for parts in req.prompts():
            if isinstance(parts, MultimodalPrompt):  # a prompt object: its images fill its media markers
                with_media = await self._native_media(parts)
                if not with_media.tokens:  # an empty prompt_string (the scheduler needs a token to start from)
                    raise InvalidRequest("prompt is empty", param="prompt")
                prompts.append((with_media.tokens, with_media.spans, parts.prompt_string))
                continue
            bad = next((p for p in parts if isinstance(p, int) and not 0 <= p < self.meta.n_vocab), None)
            if bad is not None:
                raise InvalidRequest(f"token id {bad} is out of range (0..{self.meta.n_vocab - 1})", param="prompt")
            tokens = await self.tokenizer.tokenize_mixed(parts)
            if not tokens:
                raise InvalidRequest("prompt is empty", param="prompt")
            prompts.append((tokens, (), None))
        return await self._native(req, prompts, arrival)

    async def _native(self, req: NativeFields, prompts: list[tuple[list[int], tuple[MediaSpan, ...], str | None]],
                      arrival: int, save_replaced: bool = True) -> tuple[list[NativeReply], RequestEvents]:
        """Submit ``/completion`` or ``/infill`` generations: ``n_cmpl`` per prompt (its token ids, images, and
        text when it came as text), with the request's sampling, ``n_predict`` and line limits. The replies are
        in llama-server's order: a prompt's completions together (the ``j``-th with the seed plus ``j``), the
        prompts in order; all queued at ``arrival``, taken when the request reached the engine.
        ``save_replaced``: :attr:`GenerationOptions.save_replaced` (False for ``/infill``)."""
        if not -1 <= req.id_slot < self.meta.n_seq_max:
            raise InvalidRequest(f"id_slot must be -1 or a slot id (0..{self.meta.n_seq_max - 1})", param="id_slot")
        n_cmpl = native_n_cmpl(req)
        if not 1 <= n_cmpl <= self.meta.n_seq_max:
            raise InvalidRequest(f"n_cmpl is {n_cmpl}, but it must be in [1, {self.meta.n_seq_max}] (each completion "
                                 "needs a sequence slot: --parallel)", param="n_cmpl")
        if req.n_indent < 0:
            raise InvalidRequest("n_indent must be >= 0", param="n_indent")
        lora = self.lora.for_request(req.lora)
        n_probs = req.n_probs or 0
        n_predict = native_n_predict(req)
        limit = None if n_predict < 0 else n_predict
        # max_tokens is n_predict (0 is taken here: the prompt only); the sampling checks see a positive one
        sreq = msgspec.structs.replace(req, logit_bias=None, max_completion_tokens=None, max_tokens=limit or None,
                                       n_predict=None, post_sampling_probs=req.post_sampling_probs and n_probs > 0)
        params = self._sampling(sreq, logprobs=True, top_logprobs=n_probs)  # token ids ride on logprob events
        params = attrs.evolve(params, logit_bias=await self._native_logit_bias(req))
        params = await self._constrained(params, constraint_from_request(req))
        stops = stop_strings(req.stop)
        samplers = [n for n in sampler_names(req.samplers) if n in CHAIN] if req.samplers is not None else \
            DEFAULT_SAMPLERS
        gens: list[Generation] = []
        replies: list[NativeReply] = []
        options = GenerationOptions(stops=stops, include_stop=req.include_stop_str_in_output,
                                    cache_prompt=req.cache_prompt, speculative=speculative(req, self.limits),
                                    arrival=arrival, lora=lora, save_replaced=save_replaced,
                                    progress=reports_prefill(req))
        for tokens, media, text in prompts:
            try:
                max_tokens = self._max_tokens(msgspec.structs.replace(sreq, max_tokens=limit), len(tokens),
                                              allow_zero=True, prompt_param="prompt")
            except ContextLengthExceeded as exc:
                exc.type = "exceed_context_size_error"  # llama-server's type on its own routes
                raise
            prompt_text = text if text is not None else await self.tokenizer.detokenize(tokens)
            shared = attrs.evolve(options, media=media, min_reuse=min_reuse(n_cmpl, len(tokens), self.min_tail))
            for j in range(n_cmpl):
                limits = LineLimits(req.n_indent, req.t_max_predict_ms, clock=time.perf_counter)
                seeded = choice_seed(params, j)
                gen = Generation(next(self._rids), tokens, seeded, max_tokens, piece=self.runtime.vocab.piece,
                                 parser=ContentParser(), early_stop=limits if limits.active else None, options=shared,
                                 shown=self.runtime.vocab.special_piece)
                settings = generation_settings(seeded, n_predict=n_predict, stop=stops, stream=req.stream,
                                               n_probs=n_probs, samplers=samplers,
                                               timings_per_token=req.timings_per_token, ignore_eos=req.ignore_eos,
                                               post_sampling_probs=req.post_sampling_probs)
                replies.append(NativeReply(
                    self.reply_model(req.model), gen, prompt_text=prompt_text, settings=settings, index=len(gens),
                    return_tokens=req.return_tokens, n_probs=n_probs, timings_per_token=req.timings_per_token,
                    return_progress=req.return_progress, response_fields=req.response_fields,
                    slot_info=functools.partial(self.scheduler.seq_info, gen.rid), n_ctx=self.meta.n_ctx_seq))
                gens.append(gen)
        return replies, self._submit(gens, None)

    async def _native_media(self, prompt: MultimodalPrompt) -> MediaPrompt:
        """A llama-server prompt object: its text with media markers and its ``multimodal_data`` (base64) read
        by libmtmd (:meth:`Tokenizer.tokenize_media`). Raises :class:`InvalidRequest` (400, ``prompt``) for
        data that is not base64, data on a model without a projector (``media_not_supported``), or markers
        that do not match the data."""
        images = []
        for k, data in enumerate(prompt.multimodal_data):
            where = f"prompt.multimodal_data[{k}]"
            if not self.meta.vision:
                raise InvalidRequest(f"{where}: this model reads text only (image input needs the model's "
                                     "projector: skippy serve --mmproj FILE)", param=where, code="media_not_supported")
            images.append(decode_data_url(f"data:application/octet-stream;base64,{data}", where))
        if not images:
            return MediaPrompt(await self.tokenizer.tokenize(prompt.prompt_string, add_special=True,
                                                             parse_special=True), ())
        return await self.tokenizer.tokenize_media(prompt.prompt_string, tuple(images), "prompt", where=tuple(
            f"prompt.multimodal_data[{k}]" for k in range(len(images))))

    async def _native_logit_bias(self, req: NativeFields) -> tuple[tuple[int, float], ...]:
        """llama-server's ``logit_bias`` forms as ``(token id, bias)`` pairs: a text's tokens (tokenized as
        llama-server does, no special tokens) each get its bias. Raises :class:`InvalidRequest` (400,
        ``logit_bias``) for a malformed entry or a token id outside the vocabulary."""
        entries = native_logit_bias(req.logit_bias)
        texts = {key for key, _ in entries if isinstance(key, str)}
        tokenized = {t: await self.tokenizer.tokenize(t, add_special=False, parse_special=False) for t in texts}
        return resolve_logit_bias(entries, tokenized, self.meta.n_vocab)

    def slots(self) -> list[wire.Slot]:
        """Every slot's state in llama-server's ``GET /slots`` shape."""
        return slot_views(self.scheduler.slots(), n_ctx=self.meta.n_ctx_seq,
                          defaults=self.default_generation_settings())

    async def slot_action(self, action: str, slot: int, path: str | None = None) -> dict[str, Any]:
        """llama-server's ``POST /slots/{id}?action=save|restore|erase`` on idle ``slot`` (state file
        ``path`` for save and restore); returns its reply dict. Raises :class:`SlotBusy` (409) while a
        request runs there, :class:`InvalidRequest` (400) for a bad slot or a file that cannot be restored."""
        self.require_open()
        if not 0 <= slot < self.meta.n_seq_max:
            raise InvalidRequest("Invalid slot ID", param="id_slot")
        return await self.scheduler.slot_action(action, slot, path)

    def default_generation_settings(self) -> wire.GenerationSettings:
        """llama-server's default ``generation_settings`` (a request that sets nothing: the server's sampling
        defaults, ``--temp``...; its seed random unless ``--seed``; ``n_predict``: the server's ``-n``)."""
        params = sampling(SamplingFields(), self.limits, logprobs=False, top_logprobs=0)
        if "seed" not in dict(self.limits.sampling_defaults):
            params = attrs.evolve(params, seed=0xFFFFFFFF)
        return default_generation_settings(n_predict=self.config.n_predict, params=params)

    async def apply_template(self, messages: list[Message] | ChatCompletionRequest) -> str:
        """The prompt of ``messages``, or of a whole chat request (its tools, template variables, prefill
        fields count), as the chat template renders it (llama-server ``/apply-template``)."""
        self.require_open()
        if isinstance(messages, ChatCompletionRequest):
            return (await self.renderer.render(await self._with_image_urls(messages))).prompt
        if self.image_fetcher is not None and self.meta.vision:
            messages = await self.image_fetcher.inline(messages)
        return await self.renderer.render_messages(messages)

    async def input_tokens(self, req: ChatCompletionRequest) -> int:
        """How many prompt tokens chat request ``req`` would prefill: its rendered prompt (tools, tool
        emulation, template variables and prefill count) tokenized as :meth:`chat` does, an image as the
        positions it takes (libmtmd reads it), before any ``before_chat`` hook injection (llama-server
        ``/v1/chat/completions/input_tokens``, Anthropic ``count_tokens``). Raises :class:`InvalidRequest`
        (400) like :meth:`chat` for bad messages, images, tools or template errors."""
        rendered = await self.renderer.render(await self._with_image_urls(req))
        if rendered.images:
            counted = await self.tokenizer.tokenize_media(rendered.prompt, rendered.images, encode=False,
                                                          where=rendered.image_params)
            return len(counted.tokens)
        return len(await self.tokenizer.tokenize(rendered.prompt, add_special=True, parse_special=True))

    def props(self) -> dict[str, Any]:
        """Server properties in llama-server's ``/props`` shape, plus the template capabilities, its
        source (:attr:`chat_template_source`) and
        ``kv_cache`` (:meth:`~skippy.engine.runtime.base.KVCacheInfo.as_dict`: types, cells, bytes;
        ``None`` when the runtime does not know them), ``backend_sampling`` (requests without logprobs or hooks
        are sampled in llama.cpp's decode graph: greedy ones, and sampled ones too where ``backend_sampled``),
        ``reader_wait`` (the decode loop waits for the request tasks to write a step's tokens before the next
        decode: ``--reader-wait``, resolved), ``tokenization_cache``
        (:meth:`~skippy.engine.runtime.tokenization.TokenizationCache.stats`; ``None`` where the vocabulary
        has none), the hook counters (``None``: no hook policy),
        ``hooks_default_on``, ``signals`` (``window`` in tokens, ``high_entropy_threshold`` in nats), and
        ``embeddings`` (``/v1/embeddings`` answers: started with ``embeddings`` and a pooling that gives
        vectors), ``reranking`` (``/v1/rerank`` answers: rank pooling), ``pooling`` (the embedding context's
        pooling type; ``None`` without ``embeddings``) and
        ``n_embd`` (the vector size), ``reasoning_format`` (the server's ``--reasoning-format``),
        ``cache_reuse`` (``--cache-reuse`` as applied: 0 where it is not, with ``--kv-unified``, on a
        sliding-window cache, without the prefix cache or KV shifting, as the start-up log warns),
        ``model_load`` (how the model was loaded:
        :attr:`~skippy.engine.runtime.base.ModelMeta.load`, ``None`` when unknown), and llama.cpp's
        ``backends``, ``devices`` and the model's ``offload``
        (:attr:`~skippy.engine.runtime.base.ModelMeta.devices`), and ``modalities`` (llama-server's:
        ``vision`` with a ``--mmproj`` projector)."""
        tmpl = self.renderer.template
        caps = attrs.asdict(tmpl.caps)
        caps["requires_alternation"] = tmpl.requires_alternation
        return {
            "default_generation_settings": {"n_ctx": self.meta.n_ctx_seq, "model": self.model_id,
                                            "params": msgspec.to_builtins(self.default_generation_settings())},
            "total_slots": self.meta.n_seq_max,
            "model_path": self.meta.path,
            "chat_template": tmpl.template.source,
            "chat_template_source": self.chat_template_source,
            "chat_template_caps": caps,
            "bos_token": self.meta.bos_token,
            "eos_token": self.meta.eos_token,
            "n_ctx": self.meta.n_ctx_seq,
            "n_ctx_train": self.meta.n_ctx_train,
            "parallel": self.meta.n_seq_max,
            "kv_cache": self.meta.kv_cache.as_dict() if self.meta.kv_cache is not None else None,
            "force_tool_emulation": self.renderer.force_tool_emulation,
            "backend_sampling": self.meta.backend_sampling,
            "backend_sampled": self.meta.backend_sampled,
            "reader_wait": self.scheduler.core.config.reader_wait,
            "tokenization_cache": self.tokenizer.cache.stats() if self.tokenizer.cache is not None else None,
            "hooks": self.hooks.stats.snapshot() if self.hooks is not None else None,
            "embeddings": self.meta.embeddings is not None and self.meta.embeddings.error is None,
            "reranking": self.meta.embeddings is not None and self.meta.embeddings.rerank is not None,
            "pooling": self.meta.embeddings.pooling if self.meta.embeddings is not None else None,
            "n_embd": self.meta.n_embd,
            "hooks_default_on": self.config.hooks_default_on,
            "signals": {"window": self.config.signal_window,
                        "high_entropy_threshold": self.config.high_entropy_threshold},
            "reasoning_format": self.config.reasoning_format,
            "cache_reuse": self.scheduler.core.kv_cache.cache_reuse,  # as applied: 0 where it cannot be
            "model_load": self.meta.load,
            "modalities": {"vision": self.meta.vision, "audio": False, "video": False},
            "model_alias": self.model_id,
            "is_sleeping": False,
            **(self.meta.devices or {}),
        }

    @property
    def chat_template_source(self) -> str:
        """Where the chat template comes from (``/props`` ``chat_template_source``): ``"--chat-template"``
        (the server's setting), ``"gguf"`` (the model's ``tokenizer.chat_template``) or
        ``"fallback:chatml"`` (neither: ChatML stands in, as llama-server's ``chatml`` default)."""
        if self.config.chat_template:
            return "--chat-template"
        return "gguf" if self.meta.chat_template else "fallback:chatml"

    def device_problem(self) -> str | None:
        """Why the model can no longer run (an RPC worker holding layers is gone), else None; the runtime's
        ``device_problem`` (runtimes without one have none). ``/health`` answers 503 with it."""
        check = getattr(self.runtime, "device_problem", None)
        return check() if check is not None else None

    def stats(self) -> dict[str, int]:
        """Slots and queue, llama-server ``/health``-style counts."""
        st = self.scheduler.stats()
        return {"slots_idle": st.n_slots - st.n_running, "slots_processing": st.n_running,
                "requests_waiting": st.n_waiting}

    # -- internals ----------------------------------------------------------------
    def _hooks_on(self, req: ChatCompletionRequest) -> bool:
        """The hooks run for ``req``: a hook policy, and the request's ``mesh_hooks`` (else ``--hooks-default-on``)."""
        return self.hooks is not None and (req.mesh_hooks if req.mesh_hooks is not None
                                           else self.config.hooks_default_on)

    async def _with_image_urls(self, req: ChatCompletionRequest) -> ChatCompletionRequest:
        """``req`` with its ``http(s)`` image URLs fetched into data URLs (``--allow-image-urls``:
        :class:`~skippy.actors.image_urls.ImageFetcher`), when its images are read: by this model, or by a
        ``--consult`` peer that describes them (media fallback). Before the request counts as incoming
        (a fetch may take seconds); ``req`` itself otherwise. Raises :class:`InvalidRequest` (400 naming the
        part) for an image URL that is refused or fails."""
        if self.image_fetcher is None or not (self.meta.vision or (self.consult is not None and self._hooks_on(req))):
            return req
        messages = await self.image_fetcher.inline(req.messages)
        return req if messages is req.messages else msgspec.structs.replace(req, messages=messages)

    @_preparing
    async def _start_chat(self, req: ChatCompletionRequest,
                          priority: int = 0) -> tuple[list[Generation], RequestEvents]:
        if not isinstance(priority, int) or isinstance(priority, bool):  # it orders the scheduler's queue
            raise InvalidRequest(f"priority must be an integer, got {priority!r}", param="priority")
        arrival = next(self._arrivals)
        lora = self.lora.for_request(req.lora)
        n = choice_count(req, self.limits)
        n_probs = req.n_probs or 0  # llama-server's name for top_logprobs
        params = self._sampling(req, logprobs=req.logprobs or n_probs > 0,
                                top_logprobs=req.top_logprobs if req.top_logprobs is not None else n_probs)
        hooks_on = self._hooks_on(req)
        described = None  # media fallback: a peer that reads images describes them for this text-only model
        if self.consult is not None and hooks_on and not self.meta.vision and has_images(message_dicts(req.messages)):
            req, described = await self.consult.describe_images(req)
        ctx = HookCtx(req, hooks_on, req.return_signals)
        pre = await self._before_chat(ctx) if hooks_on else None
        rendered = await self.renderer.render(req)
        plan = rendered.plan
        params = await self._constrained(params, RequestConstraint(plan.grammar, plan.constraint),
                                         plan.grammar_lazy_patterns, gbnf_param="grammar" if req.grammar else "tools")
        media: tuple[MediaSpan, ...] = ()
        if rendered.images:  # libmtmd reads the images: their placeholder ids in the prompt, and their spans
            with_media = await self.tokenizer.tokenize_media(rendered.prompt, rendered.images,
                                                             where=rendered.image_params)
            prompt, media = with_media.tokens, with_media.spans
        else:
            prompt = await self.tokenizer.tokenize(rendered.prompt, add_special=True, parse_special=True)
        checkpoint_at = None
        if plan.history_chars is not None and req.cache_prompt and not media:  # the checkpoint boundary
            history = await self.tokenizer.tokenize(rendered.prompt[:plan.history_chars], add_special=True,
                                                    parse_special=True)
            checkpoint_at = common_prefix_len(history, prompt)
        injected = 0
        if isinstance(pre, Inject):  # before_chat injection: appended to the prompt, never shown
            extra = await self.tokenizer.tokenize(pre.text, add_special=False, parse_special=False)
            prompt, injected = prompt + extra, len(extra)
        before = before_chat_event(pre, injected) if pre is not None and req.return_hook_events else None
        if described is not None and (before is None or before.action == "none"):
            before = HookEvent("before_chat", "inject", consult=described)
        max_tokens, stops = self._max_tokens(req, len(prompt)), stop_strings(req.stop)
        stops += [s for s in self.template_stops if s not in stops]  # ChatML's end on a foreign vocabulary
        piece = await self._piece_for(plan.chat_format)
        budget = await self._reasoning_budget(req, plan, piece)
        options = GenerationOptions(
            stops=stops, include_stop=req.include_stop_str_in_output, hooks=hooks_on, signals=req.return_signals,
            hook_request=req, injected=injected, hook_events=req.return_hook_events, before_chat=before,
            cache_key=req.prompt_cache_key, cache_prompt=req.cache_prompt,
            min_reuse=min_reuse(n, len(prompt), self.min_tail), checkpoint_at=checkpoint_at,
            speculative=speculative(req, self.limits), reasoning_budget=budget, arrival=arrival, priority=priority,
            media=media, lora=lora, progress=reports_prefill(req))
        gens = [Generation(next(self._rids), prompt, choice_seed(params, j), max_tokens, piece=piece,
                           parser=make_output_parser(plan), options=options, shown=self.runtime.vocab.special_piece,
                           early_stop=EarlyStop(set(plan.allowed_tools), plan.parallel_tool_calls,
                                                thinking_forced_open=emulated_thinking_open(plan))
                           if plan.emulated else None)
                for j in range(n)]
        if isinstance(pre, Stop):
            return gens, self._stopped_before(gens, ctx, pre.reason)
        return gens, self._submit(gens, ctx)

    async def _reasoning_budget(self, req: ChatCompletionRequest, plan: ParsePlan,
                                piece: Callable[[int], bytes]) -> ReasoningBudget | None:
        """The request's cap on its reasoning block: ``thinking_budget_tokens``, else the server's
        ``--reasoning-budget`` (``None`` when unlimited, when reasoning is not parsed, or for formats whose
        reasoning is not a ``<think>`` block: gpt-oss channels)."""
        n = req.thinking_budget_tokens if req.thinking_budget_tokens is not None else self.config.reasoning_budget
        syntax = SYNTAXES[plan.chat_format]
        if n < 0 or plan.reasoning_format == "none" or syntax.own_reasoning:
            return None
        opener, closer = syntax.think_tags
        # the newline after the tag, as templates write it: a small model that sees a bare closing tag tends to
        # end its turn there (measured on SmolLM2 after 1024 forced-open reasoning tokens)
        forced = await self.tokenizer.tokenize((self.config.reasoning_budget_message or "") + closer + "\n",
                                               add_special=False, parse_special=True)
        return ReasoningBudget(n, opener, closer, tuple(forced), plan.thinking_forced_open, piece)

    async def _piece_for(self, chat_format: str) -> Callable[[int], bytes]:
        """The token -> text function of a chat format's generations: the vocabulary's pieces, except that
        the format's markers that are control tokens keep their text (llama-server's ``preserved_tokens``;
        e.g. Kimi K2's ``<|tool_call_begin|>``, gpt-oss's ``<|channel|>``), so its parser sees them."""
        fn = self._format_pieces.get(chat_format)
        if fn is None:
            base, markers = self.runtime.vocab.piece, preserved_markers(chat_format)
            ids = {m: await self.tokenizer.tokenize(m, add_special=False, parse_special=True) for m in markers}
            kept = preserved_pieces(markers, ids.__getitem__, base)
            fn = base if not kept else (lambda token: kept.get(token) or base(token))
            self._format_pieces[chat_format] = fn
        return fn

    async def _before_chat(self, ctx: HookCtx) -> Any:
        """Run ``before_chat``; Deny raises (403, or 400 when the policy says so) after ``on_finish``. ``None``
        without hooks (as when the request turns them off)."""
        if self.hooks is None:
            return None
        outcome = await self.hooks.call("before_chat", ctx.request)
        if isinstance(outcome, Deny):
            self._on_finish(ctx, FinishInfo(status="denied", error=outcome.message))
            if outcome.status == 400:
                raise InvalidRequest(outcome.message, code="denied_by_hook")
            raise PermissionDenied(outcome.message, code="denied_by_hook")
        return outcome

    def _stopped_before(self, gens: list[Generation], ctx: HookCtx, reason: str) -> RequestEvents:
        """A ``before_chat`` Stop: nothing is submitted; the events are only each choice's :class:`Done`."""
        dones = [gen.stopped_before(reason) for gen in gens]
        self._on_finish(ctx, gens[0].finish_info)
        return RequestEvents(self, gens, None, None, dones=dones)

    def _on_finish(self, ctx: HookCtx | None, info: FinishInfo) -> None:
        """``on_finish`` runs in the engine's nursery: never delays or fails the request."""
        if ctx is not None and ctx.hooks and self.hooks is not None and self._nursery is not None:
            try:
                self._nursery.start_soon(self.hooks.call, "on_finish", ctx.request, info)
            except RuntimeError:  # the engine is closing
                pass

    @_preparing
    async def _start_completion(self, req: CompletionRequest) -> tuple[list[str], list[Generation], RequestEvents]:
        """The prompt texts (for ``echo``), every choice's generation (``n`` per prompt, in order), the events."""
        arrival = next(self._arrivals)
        lora = self.lora.for_request(req.lora)
        n = choice_count(req, self.limits)
        lp = completion_logprobs(req)
        params = self._sampling(req, logprobs=lp is not None, top_logprobs=lp or 0)
        params = attrs.evolve(params, post_sampling_probs=False)  # OpenAI's legacy logprobs are of the raw logits
        params = await self._constrained(params, constraint_from_request(req))
        prompts = await self._completion_prompts(req, n)
        stops = stop_strings(req.stop)
        scored = req.echo and lp is not None  # echo + logprobs: the prompt's tokens are scored once per prompt
        texts, gens = [], []
        shared = GenerationOptions(stops=stops, include_stop=req.include_stop_str_in_output,
                                   speculative=speculative(req, self.limits), arrival=arrival, lora=lora,
                                   progress=reports_prefill(req))
        for text, prompt in prompts:
            texts.append(text)
            max_tokens = self._max_tokens(req, len(prompt), prompt_param="prompt")
            options = attrs.evolve(shared, min_reuse=min_reuse(n, len(prompt), self.min_tail))
            for j in range(n):
                # the first choice scores the prompt (prefilled whole, so not from the cache); the others copy
                # its KV, or, when they cannot (a prompt of min_tail tokens or less, cache_prompt false),
                # score it themselves
                score = scored and (j == 0 or len(prompt) <= self.min_tail or not req.cache_prompt)
                gens.append(Generation(
                    next(self._rids), prompt, choice_seed(params, j), max_tokens, piece=self.runtime.vocab.piece,
                    parser=ContentParser(), options=attrs.evolve(options, cache_prompt=req.cache_prompt and not score,
                                                                 prompt_logprobs=(lp or 0) if score else None),
                    shown=self.runtime.vocab.special_piece))
        return texts, gens, self._submit(gens, None)

    async def _completion_prompts(self, req: CompletionRequest, n: int) -> list[tuple[str, list[int]]]:
        """``prompt`` as (text, token ids) pairs: a string, a list of strings, a list of token ids, or a list
        of lists of token ids (OpenAI). Strings are tokenized with the vocabulary's special tokens (BOS);
        token ids are used as given and detokenized for ``echo``. Raises :class:`InvalidRequest` (``prompt``)
        for an empty prompt, a mixed list, a token id outside the vocabulary, or more choices than the queue holds.
        """
        if req.suffix is not None:
            require_fim(self.meta.fim, "suffix")
        out = []
        for item in completion_prompt_items(req, n, self.limits):
            if isinstance(item, str):
                tokens = await self.tokenizer.tokenize(item, add_special=True, parse_special=True)
                text = item
            else:
                tokens = list(item)
                text = await self.tokenizer.detokenize(tokens) if tokens else ""
            if req.suffix is not None:  # fill in the middle: the prompt is the prefix (OpenAI suffix)
                tokens = await self._infill_tokens(item, req.suffix)
            if not tokens:
                raise InvalidRequest("prompt is empty", param="prompt")
            out.append((text, tokens))
        return out

    def _sampling(self, req: SamplingFields, *, logprobs: bool, top_logprobs: int) -> SamplingParams:
        self.require_open()
        return sampling(req, self.limits, logprobs=logprobs, top_logprobs=top_logprobs)

    async def _constrained(self, params: SamplingParams, rc: RequestConstraint,
                           lazy_patterns: tuple[str, ...] = (), gbnf_param: str = "grammar") -> SamplingParams:
        """``params`` with the request's grammar or constraint, once the vocabulary accepts it (400 naming
        the field when it does not: llama.cpp cannot parse the GBNF, or llguidance cannot compile the rest)."""
        if rc.gbnf is not None:
            require_gbnf_depth(rc.gbnf, gbnf_param)
            if not await self.tokenizer.check_grammar(rc.gbnf, lazy_patterns):
                raise InvalidRequest("the grammar does not parse (llama.cpp GBNF, root rule 'root')", param=gbnf_param)
            params = attrs.evolve(params, grammar=rc.gbnf, grammar_lazy_patterns=lazy_patterns)
        c = rc.constraint
        if c is not None:
            if c.think_close:  # the answer's constraint, behind the reasoning the prompt opened
                c = c.after(await self._tag_pieces(c.think_close))
            error = await self.tokenizer.check_constraint(c.grammar)
            if error:
                raise InvalidRequest(f"{c.param} cannot be enforced: {_one_line(error)}", param=c.param)
            params = attrs.evolve(params, constraint=c)
        return params

    async def _tag_pieces(self, tag: str) -> tuple[str | int, ...]:
        """A thinking block's closing tag as this vocabulary writes it, for
        :func:`~skippy.engine.sampling.constraints.after_reasoning`: its text where the vocabulary has no
        special token in it (a text match), else its token ids (``</think>`` is one token in Qwen's and
        DeepSeek's vocabularies, which no text matches), as the reasoning budget forces it."""
        pieces = self._tag_pieces_of.get(tag)
        if pieces is None:  # once per tag: the vocabulary does not change
            special = await self.tokenizer.tokenize(tag, add_special=False, parse_special=True)
            plain = await self.tokenizer.tokenize(tag, add_special=False, parse_special=False)
            pieces = self._tag_pieces_of[tag] = (tag,) if special == plain or not special else tuple(special)
        return pieces

    def _max_tokens(self, req: SamplingFields, n_prompt: int, *, allow_zero: bool = False,
                    prompt_param: str = "messages") -> int:
        """The completion budget of a prompt of ``n_prompt`` tokens (:func:`completion_budget`); a clamped
        ``max_tokens`` is noted in the :class:`RequestTrace` (the header and the log line report it)."""
        budget = completion_budget(req, n_prompt, self.limits, allow_zero=allow_zero, prompt_param=prompt_param)
        trace = TRACE.get()
        if budget.clamped is not None and trace is not None and (
                trace.max_tokens_clamped is None or budget.clamped[1] < trace.max_tokens_clamped[1]):
            trace.max_tokens_clamped = budget.clamped
        return budget.max_tokens

    def _submit(self, gens: list[Generation], ctx: HookCtx | None) -> RequestEvents:
        """Queue every choice's sequence now, together (:class:`QueueFull`, 429, raises here, before any
        chunk exists; the choices already queued are cancelled)."""
        send, recv = trio.open_memory_channel[tuple[int, SeqEvent]](math.inf)
        try:
            for i, gen in enumerate(gens):
                self.scheduler.submit(gen.request, ChoiceChannel(send, i))
        except QueueFull:
            for gen in gens[:i]:
                self.scheduler.cancel(gen.rid)
            raise
        return RequestEvents(self, gens, ctx, recv, send)


def _one_line(message: str, limit: int = 300) -> str:
    """A library's (multi-line) error message as one line of at most ``limit`` characters."""
    line = " ".join(message.split()) or "rejected"
    return line if len(line) <= limit else line[:limit] + "..."


def _cache_name(model: str) -> str | None:
    """``model`` when it is a model-cache name (``SmolLM2-135M-Instruct``), ``None`` for a file path."""
    return None if ("/" in model or "\\" in model or model.lower().endswith(".gguf")) else model


def _file_time(path: str) -> int:
    try:
        return int(os.path.getmtime(path))
    except (OSError, ValueError):
        return int(time.time())
