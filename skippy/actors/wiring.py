"""Wiring one model's actors: :func:`open_engine` loads the model, starts the tokenizer, the template
renderer, the decode scheduler and the hook evaluator (with the ``--consult`` policy or the user's) in one
nursery, gives the engine the image URL fetcher of ``--allow-image-urls`` (:mod:`skippy.actors.image_urls`),
and yields the :class:`~skippy.actors.engine.Engine` facade over them; :func:`load_runtime` loads the
llama.cpp runtime alone.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import trio

from skippy.actors.consult import ComposedPolicy, LocalModels, build_consult, hook_timeout
from skippy.actors.engine import Engine
from skippy.actors.hooks import HookEvaluator, WebhookPolicy
from skippy.actors.image_urls import build_image_fetcher
from skippy.actors.renderer import CHATML, TemplateRenderer, fallback_stops
from skippy.actors.scheduler import DecodeScheduler
from skippy.actors.tokenizer import Tokenizer
from skippy.engine.chat.prepare import PreparedTemplate
from skippy.engine.config import EngineConfig
from skippy.engine.hooks.policy import load_policy_factory
from skippy.engine.runtime.base import Runtime
from skippy.engine.runtime.tokenization import cache_for
from skippy.engine.scheduling.config import SchedulerConfig, host_bound


def load_runtime(config: EngineConfig) -> Runtime:
    """Load the llama.cpp runtime for ``config`` (blocking; run it in a thread)."""
    from skippy.engine.runtime.llama import LlamaRuntime, RuntimeConfig
    from skippy.models import resolve_model

    path = resolve_model(config.model)
    return LlamaRuntime(str(path), RuntimeConfig.from_engine_config(config))


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else all)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


@asynccontextmanager
async def open_engine(config: EngineConfig, *, runtime: Runtime | None = None,
                      models: LocalModels | None = None) -> AsyncIterator[Engine]:
    """Load the model (in a worker thread), start the actors, yield the :class:`Engine`.

    ``models``: the server's other models (the :class:`~skippy.actors.pool.ModelPool` passes itself), for
    ``config.consult`` peers that name one; with ``consult`` set the hook policy is the consultation
    (:mod:`skippy.actors.consult`), after the user's ``hook_policy`` / ``hook_url`` when there is one, and
    the hook timeout at least ``consult_timeout`` + 1 s. With ``allow_image_urls`` the engine fetches chat
    requests' ``http(s)`` image URLs (:class:`~skippy.actors.image_urls.ImageFetcher`); its HTTP client is
    closed on exit, as the hook and consult clients are.

    On exit the actors are cancelled, running generations end with
    :class:`~skippy.engine.errors.EngineClosed`, and the llama.cpp context is freed.
    An exception raised in the ``async with`` body comes out as itself, not inside the nursery's
    ``ExceptionGroup``; an actor's failure comes out in a ``BaseExceptionGroup`` (with the body's exception
    beside it when both failed).
    Raises ``RuntimeError`` when the model cannot be loaded.
    """
    own = runtime is None
    if runtime is None:
        runtime = await _load(config)
    webhook_client = consult_client = image_client = None
    body_error: BaseException | None = None
    try:  # from here on, what was loaded is freed however the set-up or the engine's life ends
        await trio.lowlevel.checkpoint()
        meta = runtime.meta
        source = config.chat_template or meta.chat_template or CHATML
        template = await trio.to_thread.run_sync(
            lambda: PreparedTemplate.build(source, bos_token=meta.bos_token, eos_token=meta.eos_token))
        cache = await trio.to_thread.run_sync(cache_for, runtime.vocab)
        tokenizer = Tokenizer(runtime.vocab, bos_id=meta.bos_id, media=getattr(runtime, "media", None), cache=cache)
        renderer = TemplateRenderer(template, default_kwargs=config.chat_template_kwargs,
                                    force_tool_emulation=config.force_tool_emulation,
                                    reasoning_format=config.reasoning_format, vision=meta.vision)
        policy = _load_policy(config)
        if config.hook_url:
            import httpx

            webhook_client = httpx.AsyncClient(timeout=config.hook_timeout + 1.0, trust_env=False)
            policy = WebhookPolicy(config.hook_url, webhook_client)
        consult, consult_client = build_consult(config, models) if config.consult else (None, None)
        image_fetcher, image_client = build_image_fetcher(config) if config.allow_image_urls else (None, None)
        if consult is not None:  # the user's policy first; the consultation when it takes no action
            policy = consult if policy is None else ComposedPolicy(policy, consult, config.hook_timeout)
        evaluator = None
        if policy is not None:
            evaluator = HookEvaluator(policy, timeout=hook_timeout(config), fail_closed=config.hook_fail_closed)
        bound = host_bound(meta, config.threads or os.cpu_count() or 1, usable_cores())
        scheduler = DecodeScheduler(runtime, SchedulerConfig.from_engine_config(config, host_bound=bound),
                                    hooks=evaluator.inbox if evaluator else None)
        renderer.history_boundary = scheduler.core.checkpoints is not None  # the chat's checkpoint boundary
        async with trio.open_nursery() as nursery:
            engine = Engine(config, runtime, tokenizer, renderer, scheduler, evaluator, nursery)
            engine.image_fetcher = image_fetcher
            if consult is not None:
                consult.metrics = engine.metrics
                engine.consult = consult
            if source is CHATML:
                engine.template_stops = fallback_stops(runtime.vocab, meta.eog_ids)
            nursery.start_soon(tokenizer.run)
            nursery.start_soon(renderer.run)
            nursery.start_soon(scheduler.run)
            if evaluator is not None:
                nursery.start_soon(evaluator.run)
            try:
                yield engine
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                engine.closed = tokenizer.closed = True
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        mine = _from_body(group.exceptions[0], body_error) if body_error is not None and len(group.exceptions) == 1 \
            else None
        if mine is not None:
            _raise_unwrapped(mine)
        raise
    finally:
        for client in (webhook_client, consult_client, image_client):
            if client is not None:
                with trio.CancelScope(shield=True):
                    await client.aclose()
        if own:
            runtime.close()


async def _load(config: EngineConfig) -> Runtime:
    """The model loaded in a worker thread. A cancellation waits for the load (trio does not abandon the thread)
    and is not raised here: the caller's next checkpoint raises it, where the loaded model is freed."""
    with trio.CancelScope(shield=True):
        runtime: Runtime = await trio.to_thread.run_sync(load_runtime, config)
    return runtime


def _from_body(exc: BaseException, body_error: BaseException) -> BaseException | None:
    """What the body raised, when ``exc``, the one exception of the nursery's group, is it: that very exception;
    for an exception group (a nursery inside the body, a ``KeyboardInterrupt`` that came through one), also
    the copy trio's cancel scope made of it (``split``: a new group of the same message whose leaves are the
    body's), which is the body's own group again when the copy left nothing out, else the copy (without the
    ``Cancelled`` leaves the scope took: they must not leave it). ``None`` when ``exc`` is something else."""
    if exc is body_error:
        return body_error
    if not (isinstance(exc, BaseExceptionGroup) and isinstance(body_error, BaseExceptionGroup)):
        return None
    mine = [id(leaf) for leaf in _leaves(body_error)]
    theirs = [id(leaf) for leaf in _leaves(exc)]
    if exc.message != body_error.message or not set(theirs) <= set(mine):
        return None
    return body_error if sorted(theirs) == sorted(mine) else exc


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions that are not groups inside ``exc`` (``exc`` itself when it is none)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _raise_unwrapped(exc: BaseException) -> NoReturn:
    """Raise ``exc``, the one exception of the nursery's group, as itself (trio's pattern for a context manager
    around a nursery: the caller's ``except`` matches what its own block raised). Its traceback, ``__cause__``
    and ``__context__`` stay as they were (re-raising inside ``except`` would set the group as its context)."""
    context = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = context
        del exc, context


def _load_policy(config: EngineConfig) -> Any:
    """The hook policy: an object, or a ``package.module:factory`` spec.

    Raises ``ValueError`` when both it and a hook URL are set.
    """
    if config.hook_policy is not None and config.hook_url:
        raise ValueError("set either a hook policy or a hook URL, not both")
    if isinstance(config.hook_policy, str):
        return load_policy_factory(config.hook_policy)
    return config.hook_policy
