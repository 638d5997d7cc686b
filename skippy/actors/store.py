"""The HTTP layer's handle on the Responses store: blocking calls off the event loop, failures contained.

:class:`StoreClient` runs every call of a persistent store (SQLite, Redis) on one
:class:`~skippy.actors.base.DedicatedThread`, so the event loop never blocks on disk or network and
SQLite's connection has one user; a ``memory:`` store is called inline. A store that fails
(:class:`~skippy.engine.protocols.responses.store.StoreError`) never fails the request that wrote:
:meth:`StoreClient.put` logs and counts the failure (``on_error``, the
``skippy:responses_store_errors_total`` counter) and the response is still returned; a read that fails
answers as a missing response (404 ``response_not_found`` whose message says the store failed), and so does
a read of a response whose write failed (the last :data:`FAILED_WRITES_KEPT` such ids are remembered, on this
server only: a replica that did not write it answers the plain 404).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from skippy.actors.base import DedicatedThread
from skippy.engine.errors import EngineError
from skippy.engine.protocols.responses.store import (
    MemoryStore,
    ResponseNotFound,
    ResponseStore,
    StoredResponse,
    StoreError,
)

log = logging.getLogger("skippy.responses")

#: the response ids whose write failed that a :class:`StoreClient` remembers (its 404 then says so)
FAILED_WRITES_KEPT = 1024


class StoreUnavailable(EngineError):
    """503: the response store failed (``DELETE`` of a response could not be carried out)."""

    status = 503
    type = "server_error"
    code = "store_unavailable"


class StoreClient:
    """Async calls on ``store``; ``on_error(op)`` is told of each failed ``get``, ``put``, ``delete``.

    The thread starts with the first call and ends at :meth:`aclose` (which closes the store first).
    """

    def __init__(self, store: ResponseStore, *, on_error: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.on_error = on_error
        self._thread: DedicatedThread | None = None
        self._unwritten: dict[str, None] = {}  # ids whose last write failed, oldest first

    @property
    def url(self) -> str:
        return self.store.url

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if isinstance(self.store, MemoryStore):
            return fn(*args)
        if self._thread is None:
            self._thread = DedicatedThread("skippy-response-store")
        return await self._thread.run_sync(fn, *args)

    def _failed(self, op: str, exc: StoreError) -> None:
        log.error("response store: %s", exc)
        if self.on_error is not None:
            self.on_error(op)

    async def get(self, response_id: str, *, param: str | None = None) -> StoredResponse:
        """The stored response; raises :class:`ResponseNotFound` (404 naming ``param``) when there is none
        or the store cannot be read."""
        try:
            stored = await self._call(self.store.get, response_id)
        except StoreError as exc:
            self._failed("get", exc)
            raise ResponseNotFound(f"Response with id {response_id!r} could not be read: the response store "
                                   "is unavailable", param=param) from None
        if stored is None and response_id in self._unwritten:
            raise ResponseNotFound(f"Response with id {response_id!r} could not be written: the response store "
                                   "failed when it was stored (see the server log)", param=param)
        if stored is None:
            raise ResponseNotFound(f"Response with id {response_id!r} not found (never stored, deleted, "
                                   f"expired after --responses-ttl {self.store.ttl:.0f} s, or evicted: this "
                                   f"server keeps at most {self.store.max_size}, --responses-store-size)",
                                   param=param)
        return stored

    async def put(self, stored: StoredResponse) -> bool:
        """Store ``stored``, durably when it returns ``True``; ``False`` when the store failed (logged,
        counted; the caller still answers)."""
        key = stored.id
        try:
            await self._call(self.store.put, stored)
        except StoreError as exc:
            self._failed("put", exc)
            self._unwritten[key] = None
            if len(self._unwritten) > FAILED_WRITES_KEPT:
                del self._unwritten[next(iter(self._unwritten))]
            return False
        self._unwritten.pop(key, None)
        return True

    async def delete(self, response_id: str) -> None:
        """Forget a stored response; raises :class:`ResponseNotFound` (404) when there is none,
        :class:`StoreUnavailable` (503) when the store failed."""
        try:
            deleted = await self._call(self.store.delete, response_id)
        except StoreError as exc:
            self._failed("delete", exc)
            raise StoreUnavailable(f"Response with id {response_id!r} could not be deleted: the response "
                                   "store is unavailable; retry") from None
        if not deleted:
            raise ResponseNotFound(f"Response with id {response_id!r} not found", param="response_id")

    async def count(self) -> int | None:
        """How many responses are stored, ``None`` when the store cannot tell now."""
        try:
            return int(await self._call(self.store.count))
        except StoreError as exc:
            log.warning("response store: %s", exc)
            return None

    async def aclose(self) -> None:
        """Close the store (on its thread, after the calls queued before), then end the thread."""
        try:
            await self._call(self.store.close)
        finally:
            if self._thread is not None:
                self._thread.close()
                self._thread = None
