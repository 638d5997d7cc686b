"""What the routes share, and what one request carries.

App-wide: :class:`Shared` (the :class:`AppState` with the engine once loaded,
the :class:`Lifecycle` of graceful shutdown, the
:class:`~skippy.http.settings.ServerSettings`, the encoded ``/openapi.json``),
stored once on the app as ``app.extensions["skippy"]`` by
:func:`~skippy.http.app.create_app` and read with :func:`shared`.

Per request: one :class:`RequestContext` (arrival time, deadline, completion
tokens for the log line, whether the body was read), created with the request
by :class:`SkippyRequest` and read with :func:`current`.
"""

from __future__ import annotations

import contextvars
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import msgspec
import trio
from quart import current_app, request
from quart_trio.wrappers.request import TrioRequest

from skippy.actors.engine import Engine
from skippy.actors.pool import ModelUnavailable
from skippy.actors.store import StoreClient
from skippy.actors.trace import RequestTrace
from skippy.engine.chat.images import extract_images
from skippy.engine.errors import DeviceLost, EngineError, ModelLoading, ModelNotFound
from skippy.engine.lora import LoraAdapter, LoraAdapters, split_adapter_name
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
    message_dicts,
)
from skippy.engine.protocols.responses.store import MemoryStore
from skippy.engine.routing import RequestTraits, chat_traits, is_auto
from skippy.http.settings import ServerSettings

if TYPE_CHECKING:
    from skippy.actors.metrics import EngineMetrics, PoolMetrics
    from skippy.actors.pool import Lease, ModelPool
    from skippy.engine.config import EngineConfig

EXTENSION = "skippy"  # the key of :class:`Shared` in ``app.extensions``
#: the key, in a request's ASGI ``scope["state"]``, of the answer the HTTP server sent itself when the request's
#: body broke HTTP/1.1's framing (:mod:`skippy.http.serve`): ``(status, code, message)``; the route's view then
#: logs that answer instead of a client disconnect (:func:`~skippy.http.routes.base.logs_if_gone`)
SERVER_ANSWER = "skippy.server_answer"
#: the key, in a request's ASGI ``scope["state"]``, of its request id (:func:`request_id_from`): set by whichever
#: comes first, the app's request (:class:`SkippyRequest`) or the HTTP server's own answer to a body that broke the
#: framing (:mod:`skippy.http.serve`), and taken by the other, so that the answer and the log line name one id
REQUEST_ID = "skippy.request_id"

#: the requests :meth:`Shared.routed` takes (a ``model: "auto"`` one comes back with the chosen model)
R = TypeVar("R", ChatCompletionRequest, CompletionRequest)
#: the requests :meth:`Shared.adapted` takes (any with a ``lora`` field)
S = TypeVar("S", bound=SamplingFields)


class RequestTimeout(EngineError):
    """504: the request ran past ``--request-timeout``; its generation was stopped."""

    status = 504
    type = "timeout_error"
    code = "request_timeout"


class ShuttingDown(EngineError):
    """503: the server is shutting down (new request, or one still running when the grace period ended)."""

    status = 503
    type = "unavailable_error"
    code = "server_shutting_down"


class Lifecycle:
    """Graceful shutdown shared by the routes.

    :meth:`drain` (first SIGINT/SIGTERM): new requests get 503, running ones
    go on. :meth:`expire` (grace period over, or a second signal): every
    running request's :meth:`guard` scope is cancelled, so its handler
    answers 503 or its stream ends with a final SSE error event.
    """

    def __init__(self) -> None:
        self.draining = False
        self.expired = False
        self._scopes: set[trio.CancelScope] = set()
        self._requests = 0

    def drain(self) -> None:
        self.draining = True

    def expire(self) -> None:
        self.draining = self.expired = True
        for scope in list(self._scopes):
            scope.cancel()

    @property
    def running(self) -> int:
        """HTTP requests in progress, from their arrival to the last byte of their response."""
        return self._requests

    def count_requests(self, asgi_app: Any) -> Any:
        """``asgi_app`` wrapped to count its HTTP requests in :attr:`running`.

        At the ASGI level a request spans its whole response, a stream's body
        included, and the count drops however it ends (done, failed,
        cancelled because the client went away). So do the request's holds on
        the models of a :class:`~skippy.actors.pool.ModelPool` (:data:`LEASES`).
        """
        async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                return await asgi_app(scope, receive, send)
            self._requests += 1
            leases: list[Lease] = []
            token = LEASES.set(leases)
            try:
                await asgi_app(scope, receive, send)
            finally:
                self._requests -= 1
                LEASES.reset(token)
                for lease in leases:  # the models this request used may be unloaded now
                    lease.release()

        return counted

    @contextmanager
    def guard(self, deadline: float) -> Iterator[trio.CancelScope]:
        """A cancel scope with the request's ``deadline`` (trio clock) that :meth:`expire` also cancels.

        Wrap only awaits in it, never a ``yield`` of an async generator.
        """
        with trio.CancelScope(deadline=deadline) as scope:
            if self.expired:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)


#: the model leases (:class:`~skippy.actors.pool.Lease`) taken by the HTTP request of this context; released
#: when its response has ended (:meth:`Lifecycle.count_requests`)
LEASES: contextvars.ContextVar[list[Lease] | None] = contextvars.ContextVar("skippy_leases", default=None)


class AppState:
    """What the server fills in while it runs: the engine once loaded (``None`` while loading), or the
    :class:`~skippy.actors.pool.ModelPool` of the served models (``skippy serve`` sets ``pool``; an
    embedder or a test may set ``engine`` alone), the :class:`Lifecycle`, and ``started`` (Unix seconds)."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.pool: ModelPool | None = None
        self.load_error: str | None = None
        self.lifecycle = Lifecycle()
        self.started = time.time()  # Unix seconds (the Process-Start-Time-Unix header where /proc is missing)
        #: unknown request fields already named in a warning log line (each is logged once per server run)
        self.warned_fields: set[str] = set()


class RunningResponses:
    """The responses this server is generating that ``POST /v1/responses/{id}/cancel`` and ``DELETE`` can stop
    (streamed and background ones): each with the function that cancels it and an event set once it has
    stored its end (:meth:`done`). Event loop only."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[Callable[[], None], trio.Event]] = {}

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._entries

    def add(self, response_id: str, cancel: Callable[[], None]) -> None:
        """``response_id`` runs here; ``cancel()`` stops it."""
        self._entries[response_id] = (cancel, trio.Event())

    def done(self, response_id: str) -> None:
        """``response_id`` has ended and stored its end (or will store nothing): wake :meth:`stop`."""
        entry = self._entries.pop(response_id, None)
        if entry is not None:
            entry[1].set()

    async def stop(self, response_id: str, timeout: float = 5.0) -> bool:
        """Cancel ``response_id`` and wait, ``timeout`` seconds at most, until it has stored its end;
        ``False`` when it does not run here."""
        entry = self._entries.get(response_id)
        if entry is None:
            return False
        cancel, ended = entry
        cancel()
        with trio.move_on_after(timeout):
            await ended.wait()
        return True


@attrs.frozen
class Shared:
    """App-wide state of the routes: ``state`` (engine, lifecycle), ``settings``, ``openapi`` (the
    encoded ``/openapi.json`` document, built once) and ``responses``, the store of ``/v1/responses``
    (``--responses-store``; a ``memory:`` one unless :func:`~skippy.http.app.create_app` is given one)."""

    state: AppState
    settings: ServerSettings
    openapi: bytes
    responses: StoreClient = attrs.field(default=attrs.Factory(lambda self: StoreClient(MemoryStore(
        self.settings.responses_store_size, self.settings.responses_ttl)), takes_self=True))
    #: the responses being generated by this server that ``POST /v1/responses/{id}/cancel`` can stop
    running: RunningResponses = attrs.field(factory=RunningResponses)

    @property
    def lifecycle(self) -> Lifecycle:
        return self.state.lifecycle

    def engine(self) -> Engine:
        """The loaded engine of one model (the default model of a pool, if loaded); raises
        :class:`~skippy.engine.errors.ModelLoading` (503) while it loads (or with the load error if
        loading failed), :class:`~skippy.engine.errors.DeviceLost` (503) once an RPC worker holding layers
        of the model is gone. Routes use :meth:`engine_for`."""
        pool = self.state.pool
        engine = self.state.engine if pool is None else pool.engine(pool.default)
        if engine is None:
            raise ModelLoading(self.state.load_error or "the model is still loading; retry shortly")
        return _usable(engine)

    async def engine_for(self, model: str | None, *, required: bool = True,
                         traits: RequestTraits | None = None, chat: ChatCompletionRequest | None = None,
                         keep_alive: float | None = None) -> Engine:
        """The engine of the model a request names in ``model`` (its body's field or ``?model=``).

        One model: it, whatever the name (llama-server's behaviour). Several
        (:class:`~skippy.actors.pool.ModelPool`): the named one, loaded first if it is not (the
        request waits; the other models keep serving), held loaded until the response has ended;
        without a name, 400 when ``required`` (the generation routes, as llama-server's router mode)
        else the default model; ``auto``: the one the routing rules choose for ``traits``
        (:mod:`skippy.engine.routing`; routes call :meth:`routed`). Raises
        :class:`~skippy.engine.errors.ModelLoading` (503) while the server starts (the default model's first
        load), ``ModelNotFound`` (404) for a name no model answers to,
        :class:`~skippy.actors.pool.ModelUnavailable` (503) when the model cannot load. ``chat``: the chat
        request the engine is for; one with image parts that a model not loaded could not read gets its
        400 before the model loads (:func:`_refuse_unreadable_images`). ``keep_alive``: the request's idle
        seconds for the model from now on (Ollama's per-request ``keep_alive``); a request (``required``)
        without one returns the model to ``--keep-alive``, as Ollama's default applies to a request that
        sets none: the latest request's holds.
        """
        pool = self.state.pool
        if pool is None:
            return self.engine()
        if not pool.ready.is_set():
            raise ModelLoading(self.state.load_error or "the model is still loading; retry shortly")
        tried: set[str] = set()
        while True:
            name = pool.find(model, required=required, traits=traits)
            if required:
                pool.set_keep_alive(name, keep_alive)
            engine = pool.engine(name)
            if engine is None and chat is not None:
                _refuse_unreadable_images(pool.model(name).config, chat)
            if pool.single and engine is not None and pool.residency.keep_alive_of(name) < 0:
                return _usable(engine)  # one model that is never unloaded: nothing to hold
            try:
                engine, lease = await pool.acquire(name)
                break
            except ModelUnavailable:
                # auto: the chosen model failed to load (a --models-dir file that is no model); the rules choose
                # again without it, as they leave out a model whose load failed, until none is left
                if traits is None or name in tried:
                    raise
                tried.add(name)
        leases = LEASES.get()
        if leases is not None:
            leases.append(lease)
        else:  # outside an HTTP request (no one would release it): do not hold the model
            lease.release()
        return _usable(engine)

    def loaded_engine(self, model: str | None) -> Engine | None:
        """The engine of the model ``model`` names (``None``: the default model) while it is loaded, else ``None``:
        for a route that only reads a model's state (``GET /slots``, polled by dashboards), which must neither
        load a model (under ``--max-loaded`` that unloads another) nor count as its use (``--keep-alive``).
        Raises as :meth:`engine_for` for a name no model answers to and while the server starts."""
        pool = self.state.pool
        if pool is None:
            return self.engine()
        if not pool.ready.is_set():
            raise ModelLoading(self.state.load_error or "the model is still loading; retry shortly")
        engine = pool.engine(pool.find(model, required=False))
        return _usable(engine) if engine is not None else None

    async def routed(self, req: R) -> tuple[Engine, R]:
        """The engine for ``req.model`` (:meth:`engine_for`) and the request to give it.

        ``req`` itself, unless its ``model`` is ``auto`` (and no served model answers to that name): then
        the model the routing rules choose for the request's traits (its image parts and ``tools``:
        :func:`~skippy.engine.routing.chat_traits`, :func:`~skippy.engine.routing.choose_model`), and a copy
        of ``req`` whose ``model`` is that model's id (so the reply names the model that answered) and, for a
        chat request, ``mesh_hooks`` true unless the request set it (``auto`` turns the hooks on; they run
        where a hook policy or ``--consult`` is configured).
        """
        name, req = self.adapted(req)
        chat = req if isinstance(req, ChatCompletionRequest) else None
        if name != req.model:  # "BASE:ADAPTER"
            return await self.engine_for(name, chat=chat), req
        pool = self.state.pool
        if not is_auto(req.model) or (pool is not None and req.model is not None and pool.answers(req.model)):
            return await self.engine_for(req.model, chat=chat), req
        if isinstance(req, ChatCompletionRequest):
            eng = await self.engine_for(req.model, traits=chat_traits(req.messages, req.tools), chat=req)
            hooks = True if req.mesh_hooks is None else req.mesh_hooks
            return eng, msgspec.structs.replace(req, model=eng.model_id, mesh_hooks=hooks)
        eng = await self.engine_for(req.model, traits=RequestTraits())
        return eng, msgspec.structs.replace(req, model=eng.model_id)

    def adapted(self, req: S) -> tuple[str | None, S]:
        """The model name to route ``req`` by, and the request to give its engine: for vLLM's ``model:
        "BASE:ADAPTER"`` naming a LoRA adapter of a served model (:meth:`lora_model`), ``BASE`` and ``req``
        with that adapter alone at its start-up scale as its ``lora`` field (unless it has one, which wins;
        the reply still names ``BASE:ADAPTER``); else ``req.model`` and ``req`` as they are. Raises
        ``ModelNotFound`` (404) as :meth:`lora_model`."""
        named = self.lora_model(req.model)
        if named is None:
            return req.model, req
        base, adapter = named
        if not req.lora:
            req = msgspec.structs.replace(req, lora=[{"id": adapter.id, "scale": adapter.scale}])
        return base, req

    def lora_model(self, model: str | None) -> tuple[str, LoraAdapter] | None:
        """``model`` as ``BASE:ADAPTER`` (:func:`~skippy.engine.lora.split_adapter_name`): the base model's
        name and the adapter, when no served model answers to ``model`` itself, a served model answers to
        ``BASE`` and it has ``--lora`` adapters; ``None`` otherwise (the name routes as any other). With one
        model served, which any name reaches, ``BASE`` may be any name when ``ADAPTER`` is one of its adapters
        (``gpt-4o:french``: the adapter, never the base model without it). Raises
        :class:`~skippy.engine.errors.ModelNotFound` (404 ``model_not_found``, as an unknown model) when
        ``BASE`` names a served model with adapters but none named ``ADAPTER`` (its file name without
        ``.gguf``)."""
        parts = split_adapter_name(model)
        if parts is None or self._config_of(model) is not None:  # type: ignore[arg-type]
            return None
        base, name = parts
        config = self._config_of(base)
        if config is None:
            config = self._single_config()
            if config is None or LoraAdapters(config.lora).named(name) is None:
                return None  # another name: one model takes it as any name, several answer 404
        if not config.lora:
            return None
        adapter = LoraAdapters(config.lora).named(name)
        if adapter is None:
            names = ", ".join(repr(f"{base}:{a.name}") for a in LoraAdapters(config.lora).adapters)
            raise ModelNotFound(f"The model '{model}' does not exist on this server: {base!r} has no LoRA adapter "
                                f"{name!r} (its adapters: {names})", param="model")
        return base, adapter

    def _single_config(self) -> Any:
        """The ``EngineConfig`` of the one served model (any name reaches it), else ``None`` (several, or none
        loaded yet)."""
        pool = self.state.pool
        if pool is not None:
            return pool.model(pool.default).config if pool.single else None
        return self.state.engine.config if self.state.engine is not None else None

    def _config_of(self, name: str) -> Any:
        """The ``EngineConfig`` of the served model that answers to ``name`` (by one of its names), else ``None``."""
        pool = self.state.pool
        if pool is not None:
            found = pool.lookup(name)
            return pool.model(found).config if found is not None else None
        engine = self.state.engine
        if engine is None:
            return None
        names = (*engine.served_names, engine.meta.name, engine.meta.path)
        return engine.config if any(n.casefold() == name.casefold() for n in names) else None

    def metrics(self) -> EngineMetrics | PoolMetrics | None:
        """Where the HTTP counters go: the pool's of several models, else the one engine's (``None``
        while it is not loaded)."""
        pool = self.state.pool
        if pool is not None and not pool.single:
            return pool.metrics
        engine = self.state.engine if pool is None else pool.engine(pool.default)
        return engine.metrics if engine is not None else None

    def stopped(self) -> EngineError:
        """The error of a request whose guard scope was cancelled: shutdown (503) or its deadline (504)."""
        if self.lifecycle.expired:
            return ShuttingDown("the server shut down before this request finished")
        return RequestTimeout(f"the request did not finish within {self.settings.request_timeout:g} s "
                              "(--request-timeout); its generation was stopped")

    async def guarded(self, deadline: float, work: Awaitable[Any]) -> Any:
        """Await ``work`` within ``deadline`` (trio clock) and the shutdown grace period.

        Raises :class:`RequestTimeout` or :class:`ShuttingDown` (see :meth:`stopped`) when cut short.
        """
        with self.lifecycle.guard(deadline) as scope:
            return await work
        raise self.stopped() if scope.cancelled_caught else AssertionError("unreachable")


def shared() -> Shared:
    """The :class:`Shared` of the app serving the current request (or app context)."""
    return cast(Shared, current_app.extensions[EXTENSION])


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")


def request_id_from(header: str | None) -> str:
    """The request's id: the client's ``X-Request-Id`` when it is 1-128 characters of
    ``A-Z a-z 0-9 . _ : @ / + = -`` (a UUID, a trace id), else 24 random hex chars (a value
    that could break a log line or a header is replaced, not echoed)."""
    if header and _REQUEST_ID.match(header):
        return header
    return secrets.token_hex(12)


@attrs.define
class RequestContext:
    """One request's own state, from its arrival to its response.

    ``t0``: arrival, ``time.perf_counter()`` seconds (for the log line's
    duration). ``deadline``: trio clock time past which the request is cut
    short (``inf``: none; set from ``--request-timeout`` when the request
    starts). ``tokens``: completion tokens of the answer (the log line's
    ``tokens=``; a stream's are its trace's). ``body_read``: whether the handler read the body (a
    response sent before that closes the connection). ``request_id``: see
    :func:`request_id_from` (sent back as ``X-Request-Id``, the reply ids'
    suffix); ``client``: ``host:port`` of the peer; ``trace``: what the engine
    reports about the generation (:class:`~skippy.actors.trace.RequestTrace`).
    ``ignored_fields``: top-level body fields this server does not know (the
    ``X-Skippy-Ignored-Fields`` response header). ``logged``: its log line was written.
    """

    t0: float = attrs.field(factory=time.perf_counter)
    deadline: float = math.inf
    tokens: int = 0
    body_read: bool = False
    request_id: str = attrs.field(factory=lambda: secrets.token_hex(12))
    client: str | None = None
    trace: RequestTrace = attrs.field(factory=RequestTrace)
    ignored_fields: list[str] = attrs.field(factory=list)
    logged: bool = False


class SkippyRequest(TrioRequest):
    """quart-trio's request with one :class:`RequestContext` (``.skippy``), made with the request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        state = self.scope.get("state")
        if isinstance(state, dict):
            rid = state.setdefault(REQUEST_ID, request_id_from(self.headers.get("X-Request-Id")))
        else:
            rid = request_id_from(self.headers.get("X-Request-Id"))
        self.skippy = RequestContext(request_id=rid, client=client_of(self.scope), trace=RequestTrace(request_id=rid))


def client_of(scope: Any) -> str | None:
    """The client's address of an ASGI ``scope`` for the log line: ``host:port``, ``[v6]:port``; ``None``
    when the server gives none."""
    peer = scope.get("client")
    if not peer:
        return None
    return f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"


def current() -> RequestContext:
    """The :class:`RequestContext` of the request being handled (needs a request context)."""
    return cast(SkippyRequest, request).skippy


def _refuse_unreadable_images(config: EngineConfig, req: ChatCompletionRequest) -> None:
    """Raise the 400 (``media_not_supported``, naming the first image part) that the engine of a model with
    ``config`` would answer ``req``, when ``req`` has image parts and the model cannot read them: no
    ``--mmproj`` projector, and no ``--consult`` peer to describe them for this request (hooks off). Known
    from the settings, so a model that is not loaded is not loaded (and another not unloaded) for a 400."""
    hooks_on = req.mesh_hooks if req.mesh_hooks is not None else config.hooks_default_on
    if config.mmproj is not None or (config.consult and hooks_on):
        return
    extract_images(message_dicts(req.messages), vision=False)


def _usable(engine: Engine) -> Engine:
    """``engine``, unless an RPC worker holding layers of its model is gone: then
    :class:`~skippy.engine.errors.DeviceLost` (503), since llama.cpp would abort the process on the request."""
    if problem := engine.device_problem():
        raise DeviceLost(problem)
    return engine
