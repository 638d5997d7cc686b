"""The Engine facade: wires the actors and serves OpenAI requests in-process.

Usable from any trio program, without HTTP::

    async with skippy.open_engine(EngineConfig(model="SmolLM2-135M-Instruct")) as engine:
        reply = await engine.chat(ChatCompletionRequest(messages=[Message("user", "Hi")]))
        async for chunk in await engine.chat_stream(request):
            ...

Requests and replies are OpenAI shapes: msgspec request Structs in
(:mod:`skippy.engine.types`), the :mod:`skippy.engine.output.wire` Structs out
(they also read like dicts: ``reply["choices"][0]["message"]["content"]``).
Errors are :class:`skippy.engine.errors.EngineError` subclasses.

Per request, the facade renders and tokenizes the prompt through the actors,
makes a sans-IO :class:`~skippy.engine.output.generation.Generation`, submits
its sequence to the :class:`DecodeScheduler` (a full queue raises
:class:`QueueFull` there, before any chunk), and then only moves the
sequence's events from the scheduler's channel into the Generation; the
replies are built by :mod:`skippy.engine.output.responses`.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any, Generic, TypeVar

import attrs
import msgspec
import trio

from skippy.actors.hooks import HookEvaluator, WebhookPolicy
from skippy.actors.metrics import EngineMetrics
from skippy.actors.renderer import CHATML, TemplateRenderer
from skippy.actors.scheduler import DecodeScheduler
from skippy.actors.tokenizer import Tokenizer
from skippy.engine.chat.emulation import EarlyStop
from skippy.engine.chat.formats.base import ContentParser
from skippy.engine.chat.prepare import PreparedTemplate, make_output_parser
from skippy.engine.config import EngineConfig
from skippy.engine.errors import (
    ContextLengthExceeded,
    EngineClosed,
    EngineError,
    InvalidRequest,
    ModelNotFound,
    PermissionDenied,
)
from skippy.engine.hooks.policy import Deny, Inject, Stop, load_policy_factory
from skippy.engine.hooks.signals import FinishInfo, SignalConfig
from skippy.engine.output import wire
from skippy.engine.output.generation import Done, Generation, GenerationError, Piece
from skippy.engine.output.native import DEFAULT_SAMPLERS, NativeReply, generation_settings
from skippy.engine.output.responses import ChatReply, TextReply
from skippy.engine.runtime.base import Runtime
from skippy.engine.sampling import grammar as grammars
from skippy.engine.sampling.native import apply_samplers, sampler_names
from skippy.engine.sampling.params import MAX_TOP_LOGPROBS, SamplingParams, sampling_from_request
from skippy.engine.scheduling.events import SeqEvent
from skippy.engine.types import (
    ApplyTemplateRequest,
    ChatCompletionRequest,
    CompletionRequest,
    Message,
    NativeCompletionRequest,
    SamplingFields,
)


@attrs.frozen
class _HookCtx:
    """Per-request hook settings: the request the policy sees, and the signal flags."""

    request: Any
    hooks: bool
    signals: bool


T = TypeVar("T")


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
        self.hooks = hooks
        self._nursery = nursery
        self.metrics = EngineMetrics()
        self.metrics.attach(self)
        self.model_id = config.model_name or runtime.meta.name
        self._rids = itertools.count(1)
        self.closed = False

    # -- public API ---------------------------------------------------------------
    def check_model(self, model: str | None) -> None:
        """Raise :class:`ModelNotFound` (404) when ``model`` names another model."""
        if model and model.lower() not in {self.model_id.lower(), self.meta.name.lower(), self.meta.path.lower()}:
            raise ModelNotFound(f"model {model!r} is not served here (this server serves {self.model_id!r})",
                                param="model")

    async def chat(self, req: ChatCompletionRequest) -> wire.ChatCompletion:
        """One OpenAI ``chat.completion`` for ``req`` (``req.stream`` is ignored)."""
        gen, stream = await self._start_chat(req)
        reply = ChatReply(self.model_id, gen, logprobs=req.logprobs)
        return reply.completion(await _drain(stream))

    async def chat_stream(self, req: ChatCompletionRequest) -> AsyncIterator[wire.ChatCompletionChunk]:
        """OpenAI ``chat.completion.chunk`` objects: role chunk, deltas, finish chunk, optional usage chunk.

        Errors in the request (400/403/404/429) raise here, before the first
        chunk. Closing the iterator before its end cancels the generation.
        """
        gen, stream = await self._start_chat(req)
        reply = ChatReply(self.model_id, gen, logprobs=req.logprobs,
                          include_usage=bool(req.stream_options and req.stream_options.include_usage))
        return stream.rendered(reply.first_chunks(), reply.chunks)

    async def completion(self, req: CompletionRequest) -> wire.TextCompletion:
        """One OpenAI legacy ``text_completion`` for ``req`` (string prompt)."""
        prompt_text, gen, stream = await self._start_completion(req)
        reply = TextReply(self.model_id, gen, prompt_text=prompt_text, echo=req.echo,
                          logprobs=req.logprobs is not None)
        return reply.completion(await _drain(stream))

    async def completion_stream(self, req: CompletionRequest) -> AsyncIterator[wire.TextCompletion]:
        """OpenAI legacy ``text_completion`` chunks (the echoed prompt first with ``echo``).

        Errors in the request (400/404/429) raise here, before the first chunk.
        """
        prompt_text, gen, stream = await self._start_completion(req)
        reply = TextReply(self.model_id, gen, prompt_text=prompt_text, echo=req.echo,
                          logprobs=req.logprobs is not None,
                          include_usage=bool(req.stream_options and req.stream_options.include_usage))
        return stream.rendered(reply.first_chunks(), reply.chunks)

    async def completion_native(self, req: NativeCompletionRequest) -> list[wire.NativeCompletion]:
        """llama-server's native ``/completion``: one answer per prompt of ``req`` (see
        :meth:`NativeCompletionRequest.prompts`), all generated at once. Raises like :meth:`completion`."""
        replies = await self._start_native(req)
        results = []
        try:
            for reply, events in replies:
                async with aclosing(events):
                    async for item in events:
                        reply.observe(item)
                        if isinstance(item, Done):
                            results.append(reply.answer(item))
                            break
                    else:
                        raise GenerationError("generation ended without a result")
        finally:
            for _, events in replies:
                await events.aclose()
        return results

    async def completion_native_stream(self, req: NativeCompletionRequest) -> AsyncIterator[wire.NativeCompletion]:
        """llama-server's native ``/completion`` stream: each prompt's chunks in turn (``index`` says whose;
        all prompts are generated at once), each ending with its answer (``stop: true``)."""
        replies = await self._start_native(req)
        return _Chain([events.rendered([], reply.chunks) for reply, events in replies])

    async def _start_native(self, req: NativeCompletionRequest) -> list[tuple[NativeReply, _Events]]:
        self.check_model(req.model)
        if not -1 <= req.id_slot < self.meta.n_seq_max:
            raise InvalidRequest(f"id_slot must be -1 or a slot id (0..{self.meta.n_seq_max - 1})", param="id_slot")
        if not 0 <= req.n_probs <= MAX_TOP_LOGPROBS:
            raise InvalidRequest(f"n_probs must be in [0, {MAX_TOP_LOGPROBS}]", param="n_probs")
        sreq = apply_samplers(req, req.samplers)
        if req.repeat_last_n is not None and req.repeat_last_n < -1:
            raise InvalidRequest("repeat_last_n must be >= -1", param="repeat_last_n")
        params = self._sampling(sreq, logprobs=True, top_logprobs=req.n_probs)  # token ids ride on logprob events
        if req.repeat_last_n is not None:
            params = attrs.evolve(params, penalty_last_n=self.meta.n_ctx_seq if req.repeat_last_n == -1
                                  else req.repeat_last_n)
        if req.grammar is not None and req.json_schema is not None:
            raise InvalidRequest("give either grammar or json_schema, not both", param="grammar")
        gbnf = req.grammar if req.grammar is not None else (
            grammars.json_schema_grammar(req.json_schema, param="json_schema") if req.json_schema is not None
            else None)
        if gbnf is not None:
            if not await self.tokenizer.check_grammar(gbnf):
                raise InvalidRequest("the grammar does not parse (llama.cpp GBNF, root rule 'root')",
                                     param="grammar" if req.grammar is not None else "json_schema")
            params = attrs.evolve(params, grammar=gbnf)
        if req.ignore_eos:
            raise InvalidRequest("ignore_eos is not supported", param="ignore_eos")
        n_predict = req.n_predict if req.n_predict is not None else (
            req.max_tokens if req.max_tokens is not None else -1)
        stops = _stops(req.stop)
        samplers = [n for n in sampler_names(req.samplers) if n in DEFAULT_SAMPLERS] if req.samplers else \
            DEFAULT_SAMPLERS
        prompts = []
        for parts in req.prompts():
            tokens: list[int] = []
            for i, part in enumerate(parts):
                if isinstance(part, str):
                    tokens += await self.tokenizer.tokenize(part, add_special=i == 0, parse_special=True)
                elif 0 <= part < self.meta.n_vocab:
                    tokens.append(part)
                else:
                    raise InvalidRequest(f"token id {part} is out of range (0..{self.meta.n_vocab - 1})",
                                         param="prompt")
            if not tokens:
                raise InvalidRequest("prompt is empty", param="prompt")
            prompts.append(tokens)
        out: list[tuple[NativeReply, _Events]] = []
        try:
            for index, tokens in enumerate(prompts):
                limit = None if n_predict < 0 else n_predict
                max_tokens = self._max_tokens(msgspec.structs.replace(sreq, max_tokens=limit,
                                                                      max_completion_tokens=None), len(tokens))
                gen = Generation(next(self._rids), tokens, params, max_tokens, piece=self.runtime.vocab.piece,
                                 parser=ContentParser(), stops=stops, cache_prompt=req.cache_prompt)
                settings = generation_settings(params, n_predict=n_predict, stop=stops, stream=req.stream,
                                               n_probs=req.n_probs, samplers=samplers,
                                               timings_per_token=req.timings_per_token)
                prompt_text = await self.tokenizer.detokenize(tokens)
                rid = gen.rid
                reply = NativeReply(self.model_id, gen, prompt_text=prompt_text, settings=settings, index=index,
                                    return_tokens=req.return_tokens, n_probs=req.n_probs,
                                    timings_per_token=req.timings_per_token, return_progress=req.return_progress,
                                    slot_info=lambda rid=rid: self.scheduler.seq_info(rid))
                out.append((reply, self._submit(gen, None)))
        except BaseException:
            for _, events in out:
                await events.aclose()
            raise
        return out

    def slots(self) -> list[wire.Slot]:
        """Every slot's state in llama-server's ``GET /slots`` shape."""
        defaults = self.default_generation_settings()
        out = []
        for info in self.scheduler.slots():
            params = defaults
            if info.params is not None:
                params = generation_settings(info.params, n_predict=info.max_tokens)
            running = info.rid is not None
            out.append(wire.Slot(
                id=info.id, n_ctx=self.meta.n_ctx_seq, is_processing=running, id_task=info.rid if running else -1,
                n_prompt_tokens=info.n_prompt, n_prompt_tokens_cache=info.n_cached, n_kv=info.n_kv, params=params,
                next_token=[wire.SlotNextToken(has_next_token=running,
                                               n_remain=info.max_tokens - info.n_decoded if running else -1,
                                               n_decoded=info.n_decoded)]))
        return out

    async def slot_action(self, action: str, slot: int, path: str | None = None) -> dict[str, Any]:
        """llama-server's ``POST /slots/{id}?action=save|restore|erase`` on idle ``slot`` (state file
        ``path`` for save and restore); returns its reply dict. Raises :class:`SlotBusy` (409) while a
        request runs there, :class:`InvalidRequest` (400) for a bad slot or a file that cannot be restored."""
        if not 0 <= slot < self.meta.n_seq_max:
            raise InvalidRequest("Invalid slot ID", param="id_slot")
        return await self.scheduler.slot_action(action, slot, path)

    def default_generation_settings(self) -> wire.GenerationSettings:
        """llama-server's default ``generation_settings`` (a request that sets nothing; its seed is random)."""
        params = SamplingParams(seed=0xFFFFFFFF)  # llama.cpp's LLAMA_DEFAULT_SEED: a random seed per request
        return generation_settings(params, n_predict=-1)

    async def apply_template(self, messages: list[Message] | ApplyTemplateRequest) -> str:
        """Render ``messages`` (or an ``/apply-template`` request: ``add_generation_prompt``, ``tools``,
        ``chat_template_kwargs``) with the chat template, as the chat route would (llama-server
        ``/apply-template``). Raises :class:`InvalidRequest` (400) for bad messages, tools or template errors."""
        return await self.renderer.render_messages(messages)

    def props(self) -> dict[str, Any]:
        """Server properties in llama-server's ``/props`` shape, plus the template capabilities."""
        tmpl = self.renderer.template
        caps = attrs.asdict(tmpl.caps)
        caps["requires_alternation"] = tmpl.requires_alternation
        return {
            "default_generation_settings": {"n_ctx": self.meta.n_ctx_seq, "model": self.model_id,
                                            "params": msgspec.to_builtins(self.default_generation_settings())},
            "total_slots": self.meta.n_seq_max,
            "model_path": self.meta.path,
            "chat_template": tmpl.template.source,
            "chat_template_caps": caps,
            "bos_token": self.meta.bos_token,
            "eos_token": self.meta.eos_token,
            "n_ctx": self.meta.n_ctx_seq,
            "n_ctx_train": self.meta.n_ctx_train,
            "parallel": self.meta.n_seq_max,
            "force_tool_emulation": self.renderer.force_tool_emulation,
            "hooks": self.hooks.stats.snapshot() if self.hooks is not None else None,
        }

    def stats(self) -> dict[str, int]:
        """Slots and queue, llama-server ``/health``-style counts."""
        st = self.scheduler.stats()
        return {"slots_idle": st.n_slots - st.n_running, "slots_processing": st.n_running,
                "requests_waiting": st.n_waiting}

    # -- internals ----------------------------------------------------------------
    async def _start_chat(self, req: ChatCompletionRequest) -> tuple[Generation, _Events]:
        self.check_model(req.model)
        params = self._sampling(req, logprobs=req.logprobs, top_logprobs=req.top_logprobs or 0)
        hooks_on = self.hooks is not None and (req.mesh_hooks if req.mesh_hooks is not None
                                               else self.config.hooks_default_on)
        ctx = _HookCtx(req, hooks_on, req.return_signals)
        pre = await self._before_chat(ctx) if hooks_on else None
        rendered = await self.renderer.render(req)
        plan = rendered.plan
        if plan.grammar is not None:
            if not await self.tokenizer.check_grammar(plan.grammar, plan.grammar_lazy_patterns):
                raise InvalidRequest("the grammar does not parse (llama.cpp GBNF, root rule 'root')",
                                     param="grammar" if req.grammar is not None else "response_format")
            params = attrs.evolve(params, grammar=plan.grammar, grammar_lazy_patterns=plan.grammar_lazy_patterns)
        prompt = await self.tokenizer.tokenize(rendered.prompt, add_special=True, parse_special=True)
        injected = 0
        if isinstance(pre, Inject):  # before_chat injection: appended to the prompt, never shown
            extra = await self.tokenizer.tokenize(pre.text, add_special=False, parse_special=False)
            prompt, injected = prompt + extra, len(extra)
        early = EarlyStop(set(plan.allowed_tools), plan.parallel_tool_calls) if plan.emulated else None
        gen = Generation(next(self._rids), prompt, params, self._max_tokens(req, len(prompt)),
                         piece=self.runtime.vocab.piece, parser=make_output_parser(plan),
                         stops=_stops(req.stop), early_stop=early, hooks=hooks_on, signals=req.return_signals,
                         hook_request=req, injected=injected, cache_key=req.prompt_cache_key,
                         cache_prompt=req.cache_prompt)
        if isinstance(pre, Stop):
            return gen, self._stopped_before(gen, ctx, pre.reason)
        return gen, self._submit(gen, ctx)

    async def _before_chat(self, ctx: _HookCtx) -> Any:
        """Run ``before_chat``; Deny raises (403, or 400 when the policy says so) after ``on_finish``."""
        outcome = await self.hooks.call("before_chat", ctx.request)
        if isinstance(outcome, Deny):
            self._on_finish(ctx, FinishInfo(status="denied", error=outcome.message))
            if outcome.status == 400:
                raise InvalidRequest(outcome.message, code="denied_by_hook")
            raise PermissionDenied(outcome.message, code="denied_by_hook")
        return outcome

    def _stopped_before(self, gen: Generation, ctx: _HookCtx, reason: str) -> _Events:
        """A ``before_chat`` Stop: nothing is submitted; the events are only the :class:`Done`."""
        done = gen.stopped_before(reason)
        self._on_finish(ctx, gen.finish_info)
        return _Events(self, gen, None, None, done)

    def _on_finish(self, ctx: _HookCtx | None, info: FinishInfo) -> None:
        """``on_finish`` runs in the engine's nursery: never delays or fails the request."""
        if ctx is not None and ctx.hooks and self._nursery is not None:
            try:
                self._nursery.start_soon(self.hooks.call, "on_finish", ctx.request, info)
            except RuntimeError:  # the engine is closing
                pass

    async def _start_completion(self, req: CompletionRequest) -> tuple[str, Generation, _Events]:
        self.check_model(req.model)
        prompt_text = req.prompt
        if isinstance(prompt_text, list):
            if len(prompt_text) != 1:
                raise InvalidRequest("prompt must be a string (or a list of exactly one string)", param="prompt")
            prompt_text = prompt_text[0]
        lp = req.logprobs
        if lp is not None and not 0 <= lp <= 5:
            raise InvalidRequest("logprobs must be in [0, 5]", param="logprobs")
        params = self._sampling(req, logprobs=lp is not None, top_logprobs=lp or 0)
        prompt = await self.tokenizer.tokenize(prompt_text, add_special=True, parse_special=True)
        if not prompt:
            raise InvalidRequest("prompt is empty", param="prompt")
        gen = Generation(next(self._rids), prompt, params, self._max_tokens(req, len(prompt)),
                         piece=self.runtime.vocab.piece, parser=ContentParser(), stops=_stops(req.stop),
                         cache_prompt=req.cache_prompt)
        return prompt_text, gen, self._submit(gen, None)

    def _sampling(self, req: SamplingFields, *, logprobs: bool, top_logprobs: int) -> SamplingParams:
        if self.closed:
            raise EngineClosed("the engine is shutting down")
        return sampling_from_request(req, n_vocab=self.meta.n_vocab, logprobs=logprobs, top_logprobs=top_logprobs)

    def _max_tokens(self, req: SamplingFields, n_prompt: int) -> int:
        n_ctx = self.meta.n_ctx_seq
        asked = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        if asked is not None and asked < 1:
            raise InvalidRequest("max_tokens must be >= 1", param="max_tokens")
        if n_prompt >= n_ctx:
            raise ContextLengthExceeded(
                f"the prompt is {n_prompt} tokens, which does not fit this model's context of {n_ctx} tokens",
                param="messages")
        if asked is None:
            return n_ctx - n_prompt  # until the context is full (finish_reason "length")
        if n_prompt + asked > n_ctx and not self.config.clamp_max_tokens:
            # OpenAI and vLLM refuse this; --clamp-max-tokens clamps instead, as llama-server does
            raise ContextLengthExceeded(
                f"the prompt ({n_prompt} tokens) plus max_tokens ({asked}) exceeds the context of {n_ctx} "
                f"tokens; lower max_tokens to at most {n_ctx - n_prompt}", param="max_tokens")
        return min(asked, n_ctx - n_prompt)

    def _submit(self, gen: Generation, ctx: _HookCtx | None) -> _Events:
        """Queue ``gen``'s sequence now (:class:`QueueFull`, 429, raises here, before any chunk exists)."""
        send, recv = trio.open_memory_channel[SeqEvent](math.inf)
        self.scheduler.submit(gen.request, send)
        return _Events(self, gen, ctx, recv)


class _Events:
    """One submitted sequence's :class:`Piece` / :class:`Done` items, as an async iterator.

    It only moves events: each :class:`SeqEvent` from the scheduler's channel
    goes into the :class:`Generation`; the items it returns come out. It
    cancels the sequence when the generation asks (a stop string matched) or
    when it is closed before the end (the client went away), runs
    ``on_finish`` once with the generation's :class:`FinishInfo`, and observes
    TTFT, ITL and end-to-end latency (seconds, trio clock, from submission).

    Dropped without :meth:`aclose` (an embedder's ``break`` out of ``async
    for``), it closes itself when garbage-collected: the close is handed to the
    trio loop (``TrioToken.run_sync_soon``), as trio finalizes async generators.
    """

    def __init__(self, engine: Engine, gen: Generation, ctx: _HookCtx | None,
                 recv: trio.MemoryReceiveChannel[SeqEvent] | None, done: Done | None = None) -> None:
        self._engine = engine
        self._gen = gen
        self._ctx = ctx
        self._recv = recv
        self._ready: deque[Piece | Done] = deque([done] if done is not None else [])
        self._reported = done is not None  # on_finish already ran (a before_chat Stop)
        self._closed = False
        self._t_start = self._t_last = trio.current_time()
        self._token = trio.lowlevel.current_trio_token()

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> Piece | Done:
        while not self._ready:
            if self._gen.finished or self._recv is None:
                raise StopAsyncIteration
            try:
                event = await self._recv.receive()
            except trio.EndOfChannel:  # no FinishEvent: the sequence is gone
                await self.aclose()
                raise StopAsyncIteration from None
            item = self._feed(event)
            if item is not None:
                self._ready.append(item)
        return self._ready.popleft()

    def _feed(self, event: SeqEvent) -> Piece | Done | None:
        gen, metrics = self._gen, self._engine.metrics
        n = gen.completion_tokens
        try:
            item = gen.feed(event)
        except EngineError:
            self._report()
            raise
        if gen.completion_tokens != n:
            now = trio.current_time()
            (metrics.itl if n else metrics.ttft).observe(now - self._t_last)
            self._t_last = now
        if gen.wants_cancel:
            self._engine.scheduler.cancel(gen.rid)  # its FinishEvent follows
        if isinstance(item, Done):
            metrics.e2e.observe(trio.current_time() - self._t_start)
            self._report()
        return item

    def _report(self) -> None:
        if not self._reported:
            self._reported = True
            self._engine._on_finish(self._ctx, self._gen.finish_info)

    async def aclose(self) -> None:
        """Stop here: an unfinished generation is cancelled (``on_finish`` says ``cancelled``)."""
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._gen.finished:
            self._gen.abandon()
            self._engine.scheduler.cancel(self._gen.rid)
        self._report()
        if self._recv is not None:
            self._recv.close()

    def __del__(self) -> None:
        if not self._closed:
            try:
                self._token.run_sync_soon(self._close)
            except trio.RunFinishedError:  # the engine's trio run is over: nothing left to free
                pass

    def rendered(self, head: list[T], render: Callable[[Piece | Done], list[T]]) -> _Rendered[T]:
        """These items as reply objects: ``head`` first, then ``render(item)`` for each item."""
        return _Rendered(self, head, render)


class _Rendered(Generic[T]):
    """An :class:`_Events` mapped to reply objects (stream chunks); closing it closes the events."""

    def __init__(self, events: _Events, head: list[T], render: Callable[[Piece | Done], list[T]]) -> None:
        self._events = events
        self._ready: deque[T] = deque(head)
        self._render = render

    def __aiter__(self) -> _Rendered[T]:
        return self

    async def __anext__(self) -> T:
        while not self._ready:
            self._ready.extend(self._render(await self._events.__anext__()))
        return self._ready.popleft()

    async def aclose(self) -> None:
        await self._events.aclose()


class _Chain(Generic[T]):
    """Several rendered streams read one after the other; closing it closes them all."""

    def __init__(self, streams: list[_Rendered[T]]) -> None:
        self._streams = deque(streams)

    def __aiter__(self) -> _Chain[T]:
        return self

    async def __anext__(self) -> T:
        while self._streams:
            try:
                return await self._streams[0].__anext__()
            except StopAsyncIteration:
                self._streams.popleft()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        while self._streams:
            await self._streams.popleft().aclose()


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if len(stops) > 16:
        raise InvalidRequest("at most 16 stop strings are allowed", param="stop")
    return [s for s in stops if s]


async def _drain(events: _Events) -> Done:
    """Consume a generation to its :class:`Done` (the same parser as streaming gives the message)."""
    async with aclosing(events):
        async for item in events:
            if isinstance(item, Done):
                return item
    raise GenerationError("generation ended without a result")


def load_runtime(config: EngineConfig) -> Runtime:
    """Load the llama.cpp runtime for ``config`` (blocking; run it in a thread)."""
    from skippy.engine.runtime.llama import LlamaRuntime
    from skippy.models import resolve_model

    path = resolve_model(config.model)
    return LlamaRuntime(str(path), n_ctx_seq=config.n_ctx, n_seq_max=config.parallel, n_batch=config.n_batch,
                        n_threads=config.threads, flash_attn=config.flash_attn, name=config.model_name or None,
                        verbose=config.verbose)


@asynccontextmanager
async def open_engine(config: EngineConfig, *, runtime: Runtime | None = None) -> AsyncIterator[Engine]:
    """Load the model (in a worker thread), start the actors, yield the :class:`Engine`.

    On exit the actors are cancelled, running generations end with
    :class:`EngineClosed`, and the llama.cpp context is freed.
    Raises ``RuntimeError`` when the model cannot be loaded.
    """
    own = runtime is None
    if runtime is None:
        runtime = await trio.to_thread.run_sync(load_runtime, config)
    meta = runtime.meta
    source = config.chat_template or meta.chat_template or CHATML
    template = await trio.to_thread.run_sync(
        lambda: PreparedTemplate.build(source, bos_token=meta.bos_token, eos_token=meta.eos_token))
    tokenizer = Tokenizer(runtime.vocab, bos_id=meta.bos_id)
    renderer = TemplateRenderer(template, default_kwargs=config.chat_template_kwargs,
                                force_tool_emulation=config.force_tool_emulation)
    policy = _load_policy(config)
    webhook_client = None
    if config.hook_url:
        import httpx

        webhook_client = httpx.AsyncClient(timeout=config.hook_timeout + 1.0, trust_env=False)
        policy = WebhookPolicy(config.hook_url, webhook_client)
    evaluator = None
    if policy is not None:
        evaluator = HookEvaluator(policy, timeout=config.hook_timeout, fail_closed=config.hook_fail_closed)
    signal_config = SignalConfig(window=config.signal_window, high_entropy_threshold=config.high_entropy_threshold)
    scheduler = DecodeScheduler(runtime, step_tokens=config.step_tokens, max_queue=config.max_queue,
                                hooks=evaluator.inbox if evaluator else None, signal_config=signal_config,
                                prefix_cache=config.prefix_cache)
    try:
        async with trio.open_nursery() as nursery:
            engine = Engine(config, runtime, tokenizer, renderer, scheduler, evaluator, nursery)
            nursery.start_soon(tokenizer.run)
            nursery.start_soon(renderer.run)
            nursery.start_soon(scheduler.run)
            if evaluator is not None:
                nursery.start_soon(evaluator.run)
            try:
                yield engine
            finally:
                engine.closed = True
                nursery.cancel_scope.cancel()
    finally:
        if webhook_client is not None:
            with trio.CancelScope(shield=True):
                await webhook_client.aclose()
        if own:
            runtime.close()


def _load_policy(config: EngineConfig) -> Any:
    """The hook policy: an object, or a ``package.module:factory`` spec.

    Raises ``ValueError`` when both it and a hook URL are set.
    """
    if config.hook_policy is not None and config.hook_url:
        raise ValueError("set either a hook policy or a hook URL, not both")
    if isinstance(config.hook_policy, str):
        return load_policy_factory(config.hook_policy)
    return config.hook_policy
