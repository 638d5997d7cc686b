"""Which models of a multi-model server are resident: the sans-IO policy of the model pool.

:class:`Residency` keeps, for each configured model, its load state, the requests
using it and when it was last used, and decides (no I/O, no clock of its own: the
caller passes ``now`` in seconds of any monotonic clock):

- whether a model may start loading now or must first make room: with
  ``max_loaded`` > 0 at most that many models hold memory (reading their weights,
  loaded, or still closing), the models waiting for room go in the order they asked,
  and the least recently used loaded model is unloaded to make it
  (llama-server's router ``--models-max``, Ollama's ``OLLAMA_MAX_LOADED_MODELS``);
- which loaded models have been idle longer than ``keep_alive`` seconds (Ollama's
  ``keep_alive``: a negative value keeps models loaded forever, 0 unloads a model
  as soon as its last request ends);
- when an unloading model may close: once it is *draining* (new requests wait for
  it to close, then load it again) and none of its requests runs;
- that a model waiting for room no longer loads once no request waits for it (the
  last one was cancelled: its client went away), and that the models being unloaded
  to make that room, still serving, stay loaded: the swap does not happen.

A request that wants a model *reserves* it (:meth:`Residency.reserve`) before
it waits for the load, and releases it when its response ends. Reservations
protect a model from being closed under its requests; a model chosen for
unloading while requests hold it closes after they end. The LRU order puts
models with requests after idle ones, so an idle model is always unloaded first.

The trio side (:mod:`skippy.actors.pool`) only runs what this decides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

UNLOADED = "unloaded"
LOADING = "loading"
LOADED = "loaded"
FAILED = "failed"


@attrs.define
class ModelResidency:
    """One model's bookkeeping.

    ``state``: ``unloaded``, ``loading`` (waiting for room, or its weights are being read: ``admitted``),
    ``loaded`` (also while draining) or ``failed`` (its load raised; ``error`` says why). ``queued``: the
    order in which loading models asked for room (first come, first admitted). ``users``: requests that
    hold it or wait for its load. ``last_used``: when a request last took or released it (seconds,
    the caller's clock; ``-inf``: never). ``draining``: chosen for unloading; it closes once ``users``
    is 0, and new requests wait for that. ``drained_for``: the model waiting for room that it drains for (it
    stays loaded if that one is no longer wanted before it closes); ``None``: drained for its own sake
    (``keep_alive``, an unload asked for). ``keep_alive``: this model's own idle time in seconds, set by a
    request (Ollama's per-request ``keep_alive``; negative: forever); ``None``: the set's.
    """

    name: str
    state: str = UNLOADED
    users: int = 0
    last_used: float = -math.inf
    draining: bool = False
    drained_for: str | None = None
    error: str | None = None
    keep_alive: float | None = None
    admitted: bool = False
    queued: int = 0

    @property
    def holds_memory(self) -> bool:
        """Reading its weights, loaded, or closing."""
        return self.state == LOADED or (self.state == LOADING and self.admitted)

    @property
    def waits_for_room(self) -> bool:
        """Loading but not admitted yet, and still wanted (not drained with no request waiting for it)."""
        return self.state == LOADING and not self.admitted and not (self.draining and self.users == 0)


class Residency:
    """The load policy of a set of models (see the module docstring).

    ``names``: the models, each once. ``max_loaded``: most resident models at a time (0: no bound).
    ``keep_alive``: seconds an idle loaded model stays loaded (negative: forever).
    Raises ``ValueError`` for no names, a repeated name or a negative ``max_loaded``.
    """

    def __init__(self, names: Iterable[str], *, max_loaded: int = 0, keep_alive: float = -1.0) -> None:
        names = list(names)
        if not names:
            raise ValueError("at least one model is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be distinct: {names}")
        if max_loaded < 0:
            raise ValueError(f"max_loaded must be >= 0, not {max_loaded}")
        self.max_loaded = max_loaded
        self.keep_alive = keep_alive
        self.models: dict[str, ModelResidency] = {n: ModelResidency(n) for n in names}
        self._queued = 0

    def __getitem__(self, name: str) -> ModelResidency:
        return self.models[name]

    # -- requests -----------------------------------------------------------------------------
    def reserve(self, name: str, now: float) -> bool:
        """A request wants ``name``: count it as a user and return ``True``; ``False`` while the model
        drains or has failed (the request waits for it to close, or gets the load error). A ``True``
        on an ``unloaded`` model means: start loading it (:meth:`begin_load`)."""
        m = self.models[name]
        if m.draining or m.state == FAILED:
            return False
        m.users += 1
        m.last_used = now
        return True

    def release(self, name: str, now: float) -> list[str]:
        """A request that reserved ``name`` ended (done, failed or cancelled).

        When it was the last request waiting for ``name`` to get room (a loading model not admitted yet),
        ``name`` will not load: it drains (:meth:`may_close`; a new request waits for that, then loads it
        again), and the models drained to make its room that still serve requests (so have not begun to
        close) stay loaded, their drain called off. Returns their names (none, most of the time)."""
        m = self.models[name]
        if m.users <= 0:
            raise ValueError(f"{name}: release without a reservation")
        m.users -= 1
        m.last_used = now
        if m.users > 0 or m.state != LOADING or m.admitted:
            return []
        m.draining = True  # no request wants it any more: it does not load
        kept = [x for x in self.models.values() if x.draining and x.drained_for == name and x.users > 0]
        for x in kept:
            x.draining, x.drained_for = False, None
        return [x.name for x in kept]

    # -- loading ------------------------------------------------------------------------------
    def begin_load(self, name: str) -> None:
        """``name`` starts loading (from ``unloaded``; a ``failed`` model may be loaded again)."""
        m = self.models[name]
        if m.state not in (UNLOADED, FAILED):
            raise ValueError(f"{name} is {m.state}, cannot begin loading")
        self._queued += 1
        m.state, m.error, m.draining, m.admitted, m.queued = LOADING, None, False, False, self._queued
        m.drained_for = None

    def could_load(self, name: str) -> bool:
        """Whether ``name`` holds memory already or could load without waiting for a model in use: there is
        room, or an idle model (no request holds it) can be unloaded for it. False when only the end of
        running requests would make room (a request that waits on ``name`` itself, say a consultation of it
        by a loaded model, would then wait for its own end)."""
        m = self.models[name]
        if m.holds_memory or self.max_loaded <= 0:
            return True
        holding = [x for x in self.models.values() if x.holds_memory]
        return len(holding) < self.max_loaded or any(x.users == 0 for x in holding if x.name != name)

    def room(self, name: str) -> tuple[bool, str | None]:
        """May the loading model ``name`` read its weights now? ``(True, None)`` admits it (it then holds
        memory until it is unloaded or fails).

        The models waiting for room are admitted in the order they asked, while fewer than ``max_loaded``
        models hold memory (:attr:`ModelResidency.holds_memory`). Else ``(False, victim)``: the loaded model
        to unload so that ``name``'s turn comes (the least recently used, idle ones before those with
        requests); ``None``: wait, because the models already draining make the room it needs, ``name`` is
        not the next in line for a model to close, or the models holding memory are all still loading.
        """
        m = self.models[name]
        if m.admitted or self.max_loaded <= 0:
            m.admitted = True
            return True, None
        holding = [x for x in self.models.values() if x.holds_memory]
        waiting = sorted((x for x in self.models.values() if x.waits_for_room), key=lambda x: x.queued)
        if m not in waiting:  # drained while it waited, with nothing waiting for it: it will not load
            return False, None
        free, rank = self.max_loaded - len(holding), waiting.index(m)
        if rank < free:
            m.admitted = True
            return True, None
        if sum(x.draining for x in holding) >= rank + 1 - free:
            return False, None  # the draining ones make room for it once they close: unload no more
        candidates = [x for x in holding if x.state == LOADED and not x.draining]
        if not candidates:
            return False, None
        victim = min(candidates, key=lambda x: (x.users > 0, x.last_used))
        return False, victim.name

    def loaded(self, name: str, now: float) -> None:
        m = self.models[name]
        m.state = LOADED
        m.last_used = max(m.last_used, now)

    def failed(self, name: str, error: str) -> None:
        """The load (or the running engine) of ``name`` failed: requests waiting for it get ``error``."""
        m = self.models[name]
        m.state, m.error, m.draining, m.drained_for, m.admitted = FAILED, error, False, None, False

    def unloaded(self, name: str) -> None:
        m = self.models[name]
        m.state, m.draining, m.drained_for, m.admitted = UNLOADED, False, None, False

    # -- unloading ----------------------------------------------------------------------------
    def drain(self, name: str, *, for_: str | None = None) -> None:
        """Choose ``name`` for unloading: new requests wait; it closes when :meth:`may_close`. A model still
        loading is unloaded once its load ends and the requests that waited for it are served (its load
        cannot stop half way: llama.cpp reads the weights in one call); unloaded or failed, nothing happens.
        ``for_``: the model waiting for room (:meth:`room`'s victim) that it is unloaded for; without it (its
        keep-alive, an unload asked for) the unload stands whatever happens to the model waiting."""
        m = self.models[name]
        if m.state not in (LOADED, LOADING):
            return
        if not m.draining:
            m.drained_for = for_
        elif for_ is None:
            m.drained_for = None
        m.draining = True

    def may_close(self, name: str) -> bool:
        """Whether the loaded model ``name`` should close now (or, still waiting for room, not load): it drains
        and none of its requests runs."""
        m = self.models[name]
        return m.draining and m.users == 0

    def keep_alive_of(self, name: str) -> float:
        """The idle seconds ``name`` stays loaded: its own (a request set it) or the set's."""
        own = self.models[name].keep_alive
        return self.keep_alive if own is None else own

    def set_keep_alive(self, name: str, seconds: float | None) -> None:
        """A request's ``keep_alive`` for ``name`` from now on (Ollama's: the latest request's holds;
        ``None``: back to the set's)."""
        self.models[name].keep_alive = seconds

    def _idle(self) -> list[ModelResidency]:
        return [m for m in self.models.values() if m.state == LOADED and not m.draining and m.users == 0
                and self.keep_alive_of(m.name) >= 0]

    def expired(self, now: float) -> list[str]:
        """Loaded models idle (no request, not draining) for their ``keep_alive`` seconds or more, oldest
        first."""
        idle = [m for m in self._idle() if now - m.last_used >= self.keep_alive_of(m.name)]
        return [m.name for m in sorted(idle, key=lambda m: m.last_used)]

    def next_expiry(self) -> float | None:
        """When the next idle model reaches its ``keep_alive`` (the caller's clock), ``None`` if none will."""
        return min((m.last_used + self.keep_alive_of(m.name) for m in self._idle()), default=None)
