"""Several models in one server: a pool of engines, loaded on demand and unloaded by policy.

Each configured model (:class:`PoolModel`) has at most one :class:`~skippy.actors.engine.Engine`
at a time, with its own actors (decode scheduler and KV cache, tokenizer, renderer); the pool
routes a request's ``model`` to it. The decisions (may this model load now, which one to
unload first, which are idle past ``keep_alive``) are made by the sans-IO
:class:`~skippy.engine.residency.Residency`; this module only runs them with trio:

- loading a model is one task in the pool's nursery (:meth:`ModelPool._host`) that waits for
  room, runs :func:`~skippy.actors.wiring.open_engine` (llama.cpp reads the weights in a
  worker thread, so the other models' streams go on) and keeps the engine open;
- a request calls :meth:`ModelPool.acquire`, which reserves the model, starts its load if
  needed, waits for it, and returns the engine with a :class:`Lease` that the caller releases
  when its response has ended; an unknown name raises
  :class:`~skippy.engine.errors.ModelNotFound` (404), a model whose load failed
  :class:`ModelUnavailable` (503) with the reason;
- unloading (LRU past ``max_loaded``, idle past ``keep_alive``) first drains the model: new
  requests wait, running ones finish, then the engine's scope closes and its memory is freed.
  A request arriving meanwhile loads it again. A model waiting for room whose last waiting request
  is cancelled (its client went away) does not load, and the model being drained for it, still
  serving, stays loaded: a swap nobody waits for does not happen.

With one model the pool serves it under any name (llama-server's behaviour and the OpenAI
clients' habit of sending ``"gpt-4o"``); with several, a name must match one of them, or be ``auto``:
the server chooses (:mod:`skippy.engine.routing`, from the capabilities each model showed when it loaded).
The names a model answers to: its id (the registry name, or the GGUF's file name without
``.gguf``), its ``--alias`` names, the registry's aliases (of one model per registry file: :func:`pool_models`),
and the GGUF's file name and path (case-insensitive).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from skippy.actors.engine import Engine
from skippy.actors.metrics import PoolMetrics
from skippy.actors.wiring import open_engine
from skippy.engine.config import EngineConfig
from skippy.engine.errors import EngineError, InvalidRequest, ModelNotFound
from skippy.engine.hooks.consult import check_peers
from skippy.engine.residency import FAILED, LOADED, LOADING, Residency
from skippy.engine.routing import Candidate, ModelCapabilities, RequestTraits, Route, choose_model, is_auto

log = logging.getLogger("skippy.pool")


class ModelUnavailable(EngineError):
    """503: the model's load failed (a file that is no GGUF, a missing file, too little memory); the
    message says why. The other models keep serving."""

    status = 503
    type = "unavailable_error"
    code = "model_load_failed"


@attrs.frozen
class PoolModel:
    """One model of the pool: ``config`` (its :class:`EngineConfig`; ``config.model_name`` is its id)
    and ``names``, every name it answers to (see :func:`model_names`)."""

    config: EngineConfig
    names: tuple[str, ...]

    @property
    def id(self) -> str:
        return self.names[0]

    @property
    def listed(self) -> tuple[str, ...]:
        """The names ``/v1/models`` lists: the id, then its ``--alias`` names."""
        return tuple(dict.fromkeys((self.id, *self.config.model_alias)))

    @classmethod
    def of(cls, config: EngineConfig) -> PoolModel:
        """The model of ``config`` served alone (with the registry's names of its file; see :func:`pool_models`
        for several)."""
        return cls(config, model_names(config))


def model_names(config: EngineConfig, *, registry: bool = True) -> tuple[str, ...]:
    """Every name the model of ``config`` answers to, its id first: ``config.model_name`` (else the
    file name without ``.gguf``), the ``--alias`` names, the registry name, aliases and Ollama name of the
    registry model whose file it serves (:func:`~skippy.models.registry_file`; not when ``registry`` is false),
    the file name and the path."""
    from skippy.models import registry_file

    path = Path(str(config.model))
    names = [config.model_name or path.stem, *config.model_alias]
    spec = registry_file(path) if registry else None
    if spec is not None:
        names += [spec.name, *spec.aliases, *((spec.ollama,) if spec.ollama else ())]
    names += [path.name, path.stem, str(config.model)]
    return tuple(dict.fromkeys(names))


def pool_models(configs: Sequence[EngineConfig]) -> list[PoolModel]:
    """The :class:`PoolModel` of each of ``configs`` (in order), each registry model's names (its registry name,
    aliases and Ollama name, ``smollm2:135m``) given to one of the models that serve its file: the one whose id
    is the registry name, else the first. So a preset section serving that file again (``[cold]`` with ``model =
    .../SmolLM2-135M-Instruct.Q4_1.gguf``) answers to its own names (``cold``), and ``/api/tags`` lists each
    model under a name that reaches it."""
    from skippy.models import registry_file

    specs = [registry_file(str(c.model)) for c in configs]
    ids = [(c.model_name or Path(str(c.model)).stem).casefold() for c in configs]
    holder: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec is not None and (spec.name not in holder or (ids[i] == spec.name.casefold()
                                                             and ids[holder[spec.name]] != spec.name.casefold())):
            holder[spec.name] = i
    return [PoolModel(c, model_names(c, registry=spec is not None and holder[spec.name] == i))
            for i, (c, spec) in enumerate(zip(configs, specs, strict=True))]


class Lease:
    """A request's hold on a model: the model is not unloaded before :meth:`release` (idempotent)."""

    def __init__(self, pool: ModelPool, name: str) -> None:
        self._pool, self._name = pool, name
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._pool._release(self._name)


@attrs.define
class _Slot:
    model: PoolModel
    engine: Engine | None = None
    file_time: int = 0
    caps: ModelCapabilities | None = None  # known once the model has loaded (for model "auto")


class ModelPool:
    """Engines for ``models`` (the first is the default, loaded at start), at most ``max_loaded``
    resident at a time (0: no bound), each unloaded after ``keep_alive`` idle seconds (negative:
    never). ``opener`` opens one engine (:func:`~skippy.actors.wiring.open_engine`; tests may pass
    another), called as ``opener(config, models=pool)`` (the pool: the other models a ``--consult`` peer
    may name); ``on_load(engine)`` runs after each load (the server logs the chat template). Run it
    with :meth:`run` in a nursery (``await nursery.start(pool.run)``).

    Raises ``ValueError`` for no models, two models with the same id, or a ``consult`` peer that is
    neither a URL nor another served model (:func:`~skippy.engine.hooks.consult.check_peers`).
    """

    def __init__(self, models: list[PoolModel], *, max_loaded: int = 0, keep_alive: float = -1.0,
                 opener: Callable[..., AbstractAsyncContextManager[Engine]] = open_engine,
                 on_load: Callable[[Engine], None] | None = None) -> None:
        check_peers([(m.names, m.config.consult) for m in models])  # --consult: served names or URLs
        self.residency = Residency([m.id for m in models], max_loaded=max_loaded, keep_alive=keep_alive)
        self._slots = {m.id: _Slot(m, file_time=_file_time(m.config.model)) for m in models}
        self._order = [m.id for m in models]
        self._opener = opener
        self._on_load = on_load
        self._nursery: trio.Nursery | None = None
        self._changed = trio.Event()
        #: set once the default model's first load ended (loaded or failed)
        self.ready = trio.Event()
        self.metrics = PoolMetrics(self._loaded_metrics, self._model_states)

    # -- what the routes ask ------------------------------------------------------------------
    @property
    def single(self) -> bool:
        """One model is served: every name routes to it."""
        return len(self._order) == 1

    @property
    def default(self) -> str:
        """The default model's id (the first configured)."""
        return self._order[0]

    def ids(self) -> list[str]:
        return list(self._order)

    def model(self, name: str) -> PoolModel:
        return self._slots[name].model

    def state(self, name: str) -> str:
        """``loaded``, ``loading``, ``unloaded`` or ``failed``."""
        return self.residency[name].state

    def error(self, name: str) -> str | None:
        """Why the model's last load failed (``None``: it did not)."""
        return self.residency[name].error

    def created(self, name: str) -> int:
        """The model file's modification time (Unix seconds), for ``/v1/models`` ``created``."""
        return self._slots[name].file_time

    def engine(self, name: str) -> Engine | None:
        """The model's engine while it is loaded, else ``None`` (never loads it)."""
        return self._slots[name].engine

    def loaded_engines(self) -> list[tuple[str, Engine]]:
        return [(i, e) for i in self._order if (e := self._slots[i].engine) is not None]

    def find(self, name: str | None, *, required: bool = True, traits: RequestTraits | None = None) -> str:
        """The id of the model a request's ``model`` names.

        One model: always it. Several: a name any model answers to (case-insensitive; see
        :func:`model_names`); ``None`` or ``""`` gives the default model unless ``required``;
        ``auto`` (when no model answers to it) the model :meth:`route` chooses for ``traits`` (``None``:
        a request with no images and no tools, so the default model).
        Raises :class:`~skippy.engine.errors.InvalidRequest` (400, ``param: model``) for a missing
        required name (llama-server's router mode answers 400 too) and
        :class:`~skippy.engine.errors.ModelNotFound` (404, as vLLM and Ollama) for another name.
        """
        if self.single:
            return self.default
        if not name:
            if not required:
                return self.default
            raise InvalidRequest("model is required: this server serves several models ("
                                 f"{self._served()}); name one in the request's model field", param="model",
                                 code="missing_required_parameter")
        if is_auto(name) and not self.answers(name):
            return self.route(traits or RequestTraits()).model
        return self.match(name)

    def answers(self, name: str) -> bool:
        """Whether some served model answers to ``name`` (case-insensitive; see :meth:`lookup`)."""
        return self.lookup(name) is not None

    def lookup(self, name: str) -> str | None:
        """The id of the model that answers to ``name``, else ``None``: one of a model's names
        (case-insensitive), an Ollama spelling of one (``registry.ollama.ai/library/``, ``library/``, a
        ``:latest`` tag: :func:`~skippy.engine.protocols.ollama.models.name_candidates`), or an alias of one
        recorded by Ollama's ``/api/copy`` (:func:`~skippy.models.alias_target`; never ``auto``, which is the
        server's choice unless a served model's own name)."""
        from skippy.engine.protocols.ollama.models import name_candidates
        from skippy.models import alias_target

        for candidate in name_candidates(name) or (name,):
            key = candidate.casefold()
            for i in self._order:
                if any(key == n.casefold() for n in self._slots[i].model.names):
                    return i
        for candidate in name_candidates(name):
            if is_auto(candidate):  # reserved for the server's choice, even if aliases.json names it
                continue
            target = alias_target(candidate)
            if target is not None and target.casefold() != candidate.casefold():
                key = target.casefold()
                return next((i for i in self._order if any(key == n.casefold() for n in self._slots[i].model.names)),
                            None)
        return None

    def route(self, traits: RequestTraits) -> Route:
        """Where a ``model: "auto"`` request with ``traits`` goes (:func:`~skippy.engine.routing.choose_model`):
        the models whose load has not failed, each loaded or not and with its capabilities once known."""
        slots = [self._slots[i] for i in self._order if self.residency[i].state != FAILED]
        candidates = [Candidate(s.model.id, loaded=s.engine is not None, caps=s.caps,
                                vision=s.model.config.mmproj is not None) for s in slots]
        return choose_model(traits, candidates, self.default)

    def match(self, name: str) -> str:
        """The id of the model that answers to ``name`` (:meth:`lookup`, one model or several); raises
        :class:`~skippy.engine.errors.ModelNotFound` (404) when none does."""
        found = self.lookup(name)
        if found is not None:
            return found
        raise ModelNotFound(f"The model '{name}' does not exist on this server (it serves {self._served()})",
                            param="model")

    def _served(self) -> str:
        return ", ".join(repr(i) for i in self._order)

    def healthy(self) -> bool:
        """Whether some model is loaded or could load (not every one has failed)."""
        return any(self.residency[i].state != FAILED for i in self._order)

    # -- requests -----------------------------------------------------------------------------
    async def acquire(self, name: str) -> tuple[Engine, Lease]:
        """The engine of model ``name`` (an id, see :meth:`find`), loading it first if needed.

        Waits while the model loads, or drains before an unload (then loads it again). The
        :class:`Lease` keeps it loaded until released; release it when the response has ended.
        Raises :class:`ModelUnavailable` (503) when its load failed; a cancelled wait leaves the
        load running for the other requests.
        """
        res = self.residency
        reserved = False
        try:
            while True:
                m = res[name]
                if not reserved:
                    if m.state == FAILED:
                        raise ModelUnavailable(f"model {name!r} could not be loaded: {m.error}")
                    reserved = res.reserve(name, trio.current_time())
                    if reserved and m.state not in (LOADING, LOADED):
                        self._start(name)
                if reserved and m.state == LOADED:
                    engine = self._slots[name].engine
                    assert engine is not None
                    return engine, Lease(self, name)
                if reserved and m.state == FAILED:
                    raise ModelUnavailable(f"model {name!r} could not be loaded: {m.error}")
                await self._wait()
        except BaseException:
            if reserved:
                self._release(name)
            raise

    @asynccontextmanager
    async def use(self, name: str | None = None, *, traits: RequestTraits | None = None) -> AsyncIterator[Engine]:
        """``async with pool.use("gemma-3-270m") as engine``: :meth:`acquire` and release around the block
        (``name`` and ``traits`` as for :meth:`find`; ``None``: the default model)."""
        engine, lease = await self.acquire(self.find(name, required=False, traits=traits))
        try:
            yield engine
        finally:
            lease.release()

    def could_load(self, name: str) -> bool:
        """``name`` (an id) is resident or loads without waiting for a model in use
        (:meth:`~skippy.engine.residency.Residency.could_load`)."""
        return self.residency.could_load(name)

    def unload(self, name: str) -> None:
        """Unload ``name`` once its running requests end; a model still loading, once loaded and its waiting
        requests are served (no-op when it is not loaded or loading)."""
        self.residency.drain(name)
        self._notify()

    # -- the trio side ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the default model's load and the keep-alive timer; runs until cancelled (then every
        engine closes)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._reaper)
            self._start(self.default, first=True)
            task_status.started()

    def _start(self, name: str, *, first: bool = False) -> None:
        assert self._nursery is not None, "ModelPool.run is not running"
        self.residency.begin_load(name)
        self._nursery.start_soon(self._host, name, first)
        self._notify()

    async def _host(self, name: str, first: bool) -> None:
        """Load ``name`` when there is room, keep its engine open until it drains and is idle, close it."""
        res, slot = self.residency, self._slots[name]
        try:
            while True:
                if res.may_close(name):  # no request waits for it any more (gone, or an unload was asked for)
                    log.info("model %s: not loaded: no request waits for it any more", name)
                    res.unloaded(name)
                    return
                ok, victim = res.room(name)
                if ok:
                    break
                if victim is not None:
                    log.info("model %s: unloading %s to make room (--max-loaded %d)", name, victim, res.max_loaded)
                    res.drain(victim, for_=name)
                    self._notify()
                await self._wait()
            log.info("model %s: loading %s", name, slot.model.config.model)
            t0 = trio.current_time()
            async with self._opener(slot.model.config, models=self) as engine:  # models: --consult peers
                slot.engine = engine
                slot.caps = model_capabilities(engine)
                res.loaded(name, trio.current_time())
                log.info("model %s loaded in %.1f s: n_ctx=%d per sequence, %d parallel sequences", name,
                         trio.current_time() - t0, engine.meta.n_ctx_seq, engine.meta.n_seq_max)
                if self._on_load is not None:
                    self._on_load(engine)
                if first:
                    self.ready.set()
                self._notify()
                while not res.may_close(name):
                    await self._wait()
                log.info("model %s: unloading", name)
                slot.engine = None
            res.unloaded(name)
        except Exception as exc:  # the load (or the running engine) failed: say why, serve the others
            slot.engine = None
            log.error("model %s could not be loaded: %s", name, exc)
            res.failed(name, str(exc) or type(exc).__name__)
        finally:
            if first:
                self.ready.set()
            slot.engine = None
            self._notify()

    async def _reaper(self) -> None:
        """Unload the models idle past ``keep_alive`` (Ollama's meaning)."""
        res = self.residency
        while True:
            for name in res.expired(trio.current_time()):
                log.info("model %s: idle for %g s (keep-alive), unloading", name, res.keep_alive_of(name))
                res.drain(name)
                self._notify()
            at = res.next_expiry()
            with trio.move_on_at(at if at is not None else math.inf):
                await self._wait()

    def set_keep_alive(self, name: str, seconds: float | None) -> None:
        """Ollama's per-request ``keep_alive`` for model ``name`` (seconds; negative: forever; 0: unload once
        idle; ``None``: the server's); the reaper re-reads the deadlines when it changes."""
        if self.residency.models[name].keep_alive != seconds:
            self.residency.set_keep_alive(name, seconds)
            self._notify()

    def _release(self, name: str) -> None:
        for kept in self.residency.release(name, trio.current_time()):
            log.info("model %s: stays loaded: no request waits for %s any more, which it was unloading for", kept,
                     name)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait(self) -> None:
        await self._changed.wait()

    # -- metrics ------------------------------------------------------------------------------
    def _loaded_metrics(self) -> Iterator[tuple[str, Any]]:
        for name, engine in self.loaded_engines():
            yield name, engine.metrics

    def _model_states(self) -> Iterator[tuple[str, str]]:
        for name in self._order:
            yield name, self.state(name)


def model_capabilities(engine: Engine) -> ModelCapabilities:
    """What model routing (``model: "auto"``) needs to know of a loaded engine: native tool calls (its chat
    template's ``supports_tools``, as ``/props`` ``chat_template_caps``, unless ``--force-tool-emulation``) and
    image input (the runtime meta's ``vision``: a ``--mmproj`` projector is loaded)."""
    renderer = engine.renderer
    return ModelCapabilities(native_tools=renderer.template.caps.supports_tools and not renderer.force_tool_emulation,
                             image_input=engine.meta.vision)


def _file_time(model: Any) -> int:
    import os
    import time

    try:
        return int(os.path.getmtime(str(model)))
    except (OSError, ValueError):
        return int(time.time())
