"""The Engine facade: wires the actors and serves OpenAI requests in-process.

Usable from any trio program, without HTTP::

    async with skippy.open_engine(EngineConfig(model="SmolLM2-135M-Instruct")) as engine:
        reply = await engine.chat(ChatCompletionRequest(messages=[Message("user", "Hi")]))
        async for chunk in engine.chat_stream(request):
            ...

Requests and chunks are OpenAI shapes (msgspec request Structs in, dicts
out). Errors are :class:`skippy.engine.errors.EngineError` subclasses.
"""

from __future__ import annotations

import itertools
import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import attrs
import trio

from skippy.actors.hooks import HookEvaluator, WebhookPolicy
from skippy.actors.metrics import EngineMetrics
from skippy.actors.renderer import CHATML, TemplateRenderer
from skippy.actors.scheduler import DecodeScheduler
from skippy.engine.scheduling.events import FinishEvent, SeqRequest, TokenEvent
from skippy.actors.tokenizer import Tokenizer
from skippy.engine.output import responses
from skippy.engine.config import EngineConfig
from skippy.engine.errors import (ContextLengthExceeded, EngineClosed, EngineError, InvalidRequest, ModelNotFound,
                                  PermissionDenied)
from skippy.engine.hooks.policy import Deny, Inject, Stop, load_policy_factory
from skippy.engine.chat.prepare import PreparedTemplate, make_output_parser
from skippy.engine.chat.emulation import EarlyStop
from skippy.engine.chat.formats.base import ContentParser, Delta, ParsedMessage, StreamParser
from skippy.engine.output.pipeline import EarlyStopRule, OutputPipeline
from skippy.engine.chat.plan import ParsePlan
from skippy.engine.runtime.base import Runtime
from skippy.engine.sampling.params import SamplingParams, sampling_from_request
from skippy.engine.hooks.signals import FinishInfo, SignalConfig
from skippy.engine.types import ChatCompletionRequest, CompletionRequest, Message, SamplingFields


class GenerationError(EngineError):
    """500: the runtime failed while decoding (not caused by the request)."""


@attrs.frozen
class _Piece:
    deltas: list[Delta]
    tokens: list[TokenEvent]


@attrs.frozen
class _Done:
    deltas: list[Delta]
    tokens: list[TokenEvent]
    message: ParsedMessage
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    prompt_ms: float
    predicted_ms: float
    injected_tokens: int | None = None  # None: hooks were off for this request
    cached_tokens: int = 0

    def usage(self) -> dict[str, Any]:
        out = responses.usage(self.prompt_tokens, self.completion_tokens)
        out["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        if self.injected_tokens is not None:
            out["injected_tokens"] = self.injected_tokens
        return out

    def timings(self) -> dict[str, Any]:
        """llama-server ``timings``: ``prompt_n`` counts the prompt tokens actually prefilled."""
        return responses.timings(self.prompt_tokens - self.cached_tokens, self.prompt_ms, self.completion_tokens,
                                 self.predicted_ms, cache_n=self.cached_tokens)


@attrs.frozen
class _HookCtx:
    """Per-request hook settings: the request the policy sees, and the signal flags."""

    request: Any
    hooks: bool
    signals: bool


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

    async def chat(self, req: ChatCompletionRequest) -> dict[str, Any]:
        """One ``chat.completion`` object for ``req`` (``req.stream`` is ignored)."""
        factory = responses.ChunkFactory(self.model_id)
        gen = await self._start_chat(req)
        done = await _drain(gen)
        return {
            "id": factory.id, "object": "chat.completion", "created": factory.created, "model": self.model_id,
            "system_fingerprint": "skippy-trio",
            "choices": [{"index": 0, "message": responses.message_dict(done.message),
                         "logprobs": self._chat_logprobs(done.tokens, req.return_signals) if req.logprobs else None,
                         "finish_reason": done.finish_reason}],
            "usage": done.usage(),
            "timings": done.timings(),
        }

    async def chat_stream(self, req: ChatCompletionRequest) -> AsyncIterator[dict[str, Any]]:
        """``chat.completion.chunk`` objects: role chunk, deltas, finish chunk, optional usage chunk.

        Errors in the request (400/404/429) raise before the first chunk.
        """
        factory = responses.ChunkFactory(self.model_id)
        gen = await self._start_chat(req)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def choice(delta: dict[str, Any], tokens: list[TokenEvent], finish: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": delta,
                    "logprobs": self._chat_logprobs(tokens, req.return_signals) if req.logprobs and tokens else None,
                    "finish_reason": finish}

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            async with _aclosing(gen):
                yield factory.chunk([choice({"role": "assistant", "content": ""}, [])])
                async for item in gen:
                    pending = list(item.tokens)
                    for d in item.deltas:
                        yield factory.chunk([choice(responses.delta_dict(d), pending)])
                        pending = []
                    if isinstance(item, _Done):
                        yield factory.chunk([choice({}, pending, item.finish_reason)])
                        if include_usage:
                            yield factory.chunk([], usage=item.usage(), timings=item.timings())
                    elif pending:
                        yield factory.chunk([choice({}, pending)])

        return chunks()

    async def completion(self, req: CompletionRequest) -> dict[str, Any]:
        """One ``text_completion`` object for ``req`` (string prompt)."""
        factory = responses.ChunkFactory(self.model_id, object_="text_completion", prefix="cmpl")
        prompt_text, gen = await self._start_completion(req)
        done = await _drain(gen)
        text = (prompt_text if req.echo else "") + done.message.content
        return {
            "id": factory.id, "object": "text_completion", "created": factory.created, "model": self.model_id,
            "system_fingerprint": "skippy-trio",
            "choices": [{"index": 0, "text": text,
                         "logprobs": self._legacy_logprobs(done.tokens) if req.logprobs is not None else None,
                         "finish_reason": done.finish_reason}],
            "usage": done.usage(),
            "timings": done.timings(),
        }

    async def completion_stream(self, req: CompletionRequest) -> AsyncIterator[dict[str, Any]]:
        """``text_completion`` chunks (legacy Completions streaming)."""
        factory = responses.ChunkFactory(self.model_id, object_="text_completion", prefix="cmpl")
        prompt_text, gen = await self._start_completion(req)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def choice(text: str, tokens: list[TokenEvent], finish: str | None = None) -> dict[str, Any]:
            return {"index": 0, "text": text,
                    "logprobs": self._legacy_logprobs(tokens) if req.logprobs is not None and tokens else None,
                    "finish_reason": finish}

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            async with _aclosing(gen):
                if req.echo and prompt_text:
                    yield factory.chunk([choice(prompt_text, [])])
                async for item in gen:
                    text = "".join(d.content for d in item.deltas)
                    if isinstance(item, _Done):
                        yield factory.chunk([choice(text, item.tokens, item.finish_reason)])
                        if include_usage:
                            yield factory.chunk([], usage=item.usage())
                    elif text or item.tokens:
                        yield factory.chunk([choice(text, item.tokens)])

        return chunks()

    async def apply_template(self, messages: list[Message]) -> str:
        """Render ``messages`` with the chat template (llama-server ``/apply-template``)."""
        return await self.renderer.render_messages(messages)

    def props(self) -> dict[str, Any]:
        """Server properties in llama-server's ``/props`` shape, plus the template capabilities."""
        tmpl = self.renderer.template
        caps = attrs.asdict(tmpl.caps)
        caps["requires_alternation"] = tmpl.requires_alternation
        return {
            "default_generation_settings": {"n_ctx": self.meta.n_ctx_seq, "model": self.model_id},
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
    async def _start_chat(self, req: ChatCompletionRequest) -> AsyncIterator[_Piece | _Done]:
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
        max_tokens = self._max_tokens(req, len(prompt))
        if isinstance(pre, Stop):
            return self._stopped_before(ctx, len(prompt), pre.reason)
        return await _submitted(self._generate(prompt, params, max_tokens, plan, _stops(req.stop),
                                               make_output_parser(plan), early, ctx, injected, req.prompt_cache_key,
                                               req.cache_prompt))

    async def _before_chat(self, ctx: _HookCtx) -> Any:
        """Run ``before_chat``; Deny raises (403, or 400 when the policy says so) after ``on_finish``."""
        outcome = await self.hooks.call("before_chat", ctx.request)
        if isinstance(outcome, Deny):
            self._on_finish(ctx, FinishInfo(status="denied", error=outcome.message))
            if outcome.status == 400:
                raise InvalidRequest(outcome.message, code="denied_by_hook")
            raise PermissionDenied(outcome.message, code="denied_by_hook")
        return outcome

    async def _stopped_before(self, ctx: _HookCtx, n_prompt: int, reason: str) -> AsyncIterator[_Piece | _Done]:
        self._on_finish(ctx, FinishInfo(status="success", finish_reason=reason))
        yield _Done([], [], ParsedMessage(), reason, n_prompt, 0, 0.0, 0.0, 0)

    def _on_finish(self, ctx: _HookCtx | None, info: FinishInfo) -> None:
        """``on_finish`` runs in the engine's nursery: never delays or fails the request."""
        if ctx is not None and ctx.hooks and self._nursery is not None:
            try:
                self._nursery.start_soon(self.hooks.call, "on_finish", ctx.request, info)
            except RuntimeError:  # the engine is closing
                pass

    async def _start_completion(self, req: CompletionRequest) -> tuple[str, AsyncIterator[_Piece | _Done]]:
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
        gen = self._generate(prompt, params, self._max_tokens(req, len(prompt)), ParsePlan(),
                             _stops(req.stop), ContentParser(), cache_prompt=req.cache_prompt)
        return prompt_text, await _submitted(gen)

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

    async def _generate(self, prompt: list[int], params: SamplingParams, max_tokens: int, plan: ParsePlan,
                        stops: list[str], parser: StreamParser, early_stop: EarlyStopRule | None = None,
                        ctx: _HookCtx | None = None, injected: int = 0,
                        cache_key: str | None = None, cache_prompt: bool = True) -> AsyncIterator[_Piece | _Done]:
        rid = next(self._rids)
        send, recv = trio.open_memory_channel[Any](math.inf)
        pipeline = OutputPipeline(self.runtime.vocab.piece, stops + list(plan.stops), parser, early_stop)
        hooks = bool(ctx and ctx.hooks)
        self.scheduler.submit(SeqRequest(rid, prompt, params, max_tokens, hooks=hooks,
                                         signals=bool(ctx and ctx.signals), request=ctx.request if ctx else None,
                                         cache_key=cache_key, cache_prompt=cache_prompt), send)
        n_tokens = 0
        finished = False
        info = FinishInfo(status="cancelled")
        metrics = self.metrics
        t_start = t_last = trio.current_time()
        try:
            yield _SUBMITTED  # taken by _submitted(): the request is queued before any chunk goes out
            async with recv:
                async for ev in recv:
                    if isinstance(ev, TokenEvent):
                        if pipeline.stopped:
                            continue  # decoded after the stop string matched; discarded
                        now = trio.current_time()
                        (metrics.itl if n_tokens else metrics.ttft).observe(now - t_last)
                        t_last = now
                        n_tokens += 1
                        deltas = pipeline.feed(ev.token)
                        if pipeline.stopped:
                            self.scheduler.cancel(rid)  # its FinishEvent follows
                        if deltas or params.logprobs:
                            yield _Piece(deltas, [ev] if params.logprobs else [])
                        continue
                    assert isinstance(ev, FinishEvent)
                    finished = True
                    if ev.reason == "error":
                        info = FinishInfo(status="error", completion_tokens=n_tokens, error=ev.error)
                        raise GenerationError(f"generation failed: {ev.error}")
                    if pipeline.stopped:
                        reason = "stop"
                    elif ev.reason == "cancelled":
                        info = FinishInfo(status="error", completion_tokens=n_tokens, error="engine stopped")
                        raise EngineClosed("the engine stopped before the generation finished")
                    else:
                        reason = ev.reason
                    deltas, message = pipeline.finish()
                    if message.tool_calls and not ev.stopped_by_hook:
                        reason = "tool_calls"
                    n_injected = injected + ev.injected_tokens
                    metrics.e2e.observe(trio.current_time() - t_start)
                    info = FinishInfo(status="success", finish_reason=reason, completion_tokens=n_tokens,
                                      injected_tokens=n_injected)
                    yield _Done(deltas, [], message, reason, len(prompt) - injected, n_tokens, ev.prompt_ms,
                                ev.predicted_ms, n_injected if hooks else None, ev.cached_tokens)
                    return
        finally:
            if not finished:
                self.scheduler.cancel(rid)
                info = FinishInfo(status="cancelled", completion_tokens=n_tokens)
            self._on_finish(ctx, info)

    def _token_text(self, token: int) -> tuple[str, list[int]]:
        data = self.runtime.vocab.piece(token)
        return data.decode("utf-8", errors="replace"), list(data)

    def _chat_logprobs(self, tokens: list[TokenEvent], signals: bool = False) -> dict[str, Any]:
        """OpenAI ``logprobs.content``; with ``signals`` each entry also carries
        ``entropy`` and ``margin`` (nats, from the raw logits; skippy extension)."""
        content = []
        for ev in tokens:
            text, raw = self._token_text(ev.token)
            top = []
            for t in ev.top:
                ttext, traw = self._token_text(t.token)
                top.append({"token": ttext, "logprob": t.logprob, "bytes": traw})
            entry = {"token": text, "logprob": ev.logprob, "bytes": raw, "top_logprobs": top}
            if signals:
                entry["entropy"] = ev.entropy
                entry["margin"] = ev.margin
            content.append(entry)
        return {"content": content}

    def _legacy_logprobs(self, tokens: list[TokenEvent]) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for ev in tokens:
            text, _ = self._token_text(ev.token)
            out["tokens"].append(text)
            out["token_logprobs"].append(ev.logprob)
            out["top_logprobs"].append({self._token_text(t.token)[0]: t.logprob for t in ev.top})
        return out


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if len(stops) > 16:
        raise InvalidRequest("at most 16 stop strings are allowed", param="stop")
    return [s for s in stops if s]


_SUBMITTED: Any = object()


async def _submitted(gen: AsyncIterator[Any]) -> AsyncIterator[_Piece | _Done]:
    """``gen`` (from :meth:`Engine._generate`) run up to its submission to the scheduler.

    So request errors found there (:class:`QueueFull`, 429) raise before a stream sends its
    first chunk (the role chunk, an echoed prompt), and the HTTP status can still say so.
    """
    first = await gen.__anext__()
    assert first is _SUBMITTED
    return gen


async def _drain(gen: AsyncIterator[_Piece | _Done]) -> _Done:
    """Consume a generation; the final message comes from the same parser as streaming."""
    tokens: list[TokenEvent] = []
    async with _aclosing(gen):
        async for item in gen:
            tokens += item.tokens
            if isinstance(item, _Done):
                return attrs.evolve(item, tokens=tokens)
    raise GenerationError("generation ended without a result")


@asynccontextmanager
async def _aclosing(gen: Any) -> AsyncIterator[Any]:
    try:
        yield gen
    finally:
        await gen.aclose()


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
                                hooks=evaluator.inbox if evaluator else None, signal_config=signal_config, prefix_cache=config.prefix_cache)
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
    """The hook policy: an object, or a ``package.module:factory`` spec; ``ValueError`` when both it and a URL are set."""
    if config.hook_policy is not None and config.hook_url:
        raise ValueError("set either a hook policy or a hook URL, not both")
    if isinstance(config.hook_policy, str):
        return load_policy_factory(config.hook_policy)
    return config.hook_policy
