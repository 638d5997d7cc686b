"""Stored responses (``store: true``, OpenAI's default): one small interface, three backends.

A follow-up request names a stored response (``previous_response_id``) and
sends only its new items; the store keeps each response with its whole
conversation (:class:`StoredResponse`), so a response stays usable when an
earlier turn of its chain is deleted, evicted or expired.

``--responses-store URL`` picks the backend (:func:`open_store`):

- ``sqlite:PATH`` (the default: ``$SKIPPY_HOME/responses.db``): :class:`~.store_sqlite.SqliteStore`,
  one file that survives restarts and crashes (WAL, ``synchronous=FULL``), mode 0600;
- ``redis://[:PASSWORD@]HOST:PORT[/DB]`` (``rediss://`` for TLS): :class:`~.store_redis.RedisStore`,
  shared by the replicas behind one load balancer;
- ``memory:``: :class:`MemoryStore`, nothing on disk (embedders, tests), lost with the process.

Every backend is bounded twice: ``max_size`` responses (``--responses-store-size``; past it the oldest
is forgotten first; 0 stores nothing) and ``ttl`` seconds from creation (``--responses-ttl``, OpenAI's
30 days by default). A forgotten, deleted or expired response reads as missing (``None``; a route
answers 404 :class:`ResponseNotFound`). The interface is synchronous and blocking for the persistent
backends: the HTTP layer calls it from one worker thread (:mod:`skippy.actors.store`). A backend whose
database or server fails raises :class:`StoreError`.

Stored is what :class:`StoredResponse` holds: the response object and its conversation as input
items (zlib-compressed msgpack in the persistent backends; JSON for a record holding an integer msgpack
cannot carry: :func:`encode`), nothing more.
"""

from __future__ import annotations

import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import attrs
import msgspec

from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.protocols.responses.types import ResponseInputItem
from skippy.engine.protocols.responses.wire import ResponseError, ResponseObject

#: OpenAI keeps stored responses for 30 days (``--responses-ttl``'s default), in seconds
DEFAULT_TTL = 30 * 24 * 3600.0

#: ``GET /v1/responses/{id}/input_items``: ``limit``'s range and default (OpenAI's)
MAX_LIST_LIMIT, DEFAULT_LIST_LIMIT = 100, 20


class ResponseNotFound(EngineError):
    """404: no stored response has this id (never stored, deleted, expired, or evicted past the store's
    size)."""

    status = 404
    type = "invalid_request_error"
    code = "response_not_found"


class StoreError(Exception):
    """The store's database or server failed (a SQLite error, Redis unreachable): the message names the
    store and the cause. Raised by :func:`open_store` (a start-up error) and by every method."""


# -- what is stored ------------------------------------------------------------------------------------

@attrs.frozen
class StoredResponse:
    """A stored response and its whole conversation as input items.

    ``items``: the previous responses' items, this request's input, then this response's output as
    input items (what a ``previous_response_id`` continues), each with an ``id``. ``n_input``: how many
    of them were this response's input (``items[:n_input]``, what ``input_items`` lists).
    """

    response: ResponseObject
    items: tuple[ResponseInputItem, ...]
    n_input: int = -1

    def __attrs_post_init__(self) -> None:
        if self.n_input < 0:
            object.__setattr__(self, "n_input", len(self.items))

    @property
    def id(self) -> str:
        return self.response.id

    @property
    def created_at(self) -> int:
        return self.response.created_at

    @property
    def input_items(self) -> tuple[ResponseInputItem, ...]:
        return self.items[:self.n_input]


class _Record(msgspec.Struct, array_like=True):
    """One stored response as the persistent backends write it (a version byte, then msgpack, zlib)."""

    response: ResponseObject
    items: list[ResponseInputItem]
    n_input: int


_VERSION = b"\x01"  # msgpack
_VERSION_JSON = b"\x02"  # JSON: a record msgpack cannot carry
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Record)
_JSON_ENCODER = msgspec.json.Encoder()
_JSON_DECODER = msgspec.json.Decoder(_Record)


def encode(stored: StoredResponse) -> bytes:
    """``stored`` as bytes: version 1, a zlib-compressed msgpack record (JSON-like text compresses 4-8x); version
    2, zlib-compressed JSON, for a record msgpack cannot carry: an integer beyond its 64 bits (above 2**64 - 1 or
    below -2**63), which JSON requests may hold (``max_output_tokens``, a number in a tool's schema), JSON keeps
    exactly. Raises :class:`StoreError` for a record neither can encode (the caller's store failure: logged,
    counted, the reply still sent)."""
    record = _Record(stored.response, list(stored.items), stored.n_input)
    try:
        try:
            return _VERSION + zlib.compress(_ENCODER.encode(record), 1)
        except OverflowError:
            return _VERSION_JSON + zlib.compress(_JSON_ENCODER.encode(record), 1)
    except (OverflowError, TypeError, ValueError) as exc:  # msgspec.EncodeError is a ValueError
        raise StoreError(f"response {stored.id} cannot be encoded for the store: {exc}") from None


def decode(blob: bytes) -> StoredResponse:
    """The :class:`StoredResponse` of :func:`encode`'s bytes; raises :class:`StoreError` for bytes it did
    not write (another version, a torn value)."""
    version = blob[:1]
    if version not in (_VERSION, _VERSION_JSON):
        raise StoreError(f"a stored response has an unknown format (first byte {version!r})")
    try:
        data = zlib.decompress(blob[1:])
        record = _DECODER.decode(data) if version == _VERSION else _JSON_DECODER.decode(data)
    except (zlib.error, msgspec.DecodeError) as exc:
        raise StoreError(f"a stored response cannot be read: {exc}") from None
    return StoredResponse(record.response, tuple(record.items), record.n_input)


# -- the interface ------------------------------------------------------------------------------------

class ResponseStore(Protocol):
    """What every backend does; ids are the responses' ``resp_...`` ids. Blocking; not thread-safe (one
    thread at a time). Raises :class:`StoreError` when its database or server fails."""

    #: where it keeps them, for logs and errors (``sqlite:/path``, ``redis://host:port/0``, ``memory:``)
    url: str
    max_size: int
    ttl: float

    def get(self, response_id: str) -> StoredResponse | None:
        """The stored response, ``None`` when there is none (never stored, deleted, expired, evicted)."""
        ...

    def put(self, stored: StoredResponse) -> None:
        """Keep ``stored`` (replacing one with its id), then forget the oldest past ``max_size`` and the
        expired; durable when it returns (the persistent backends)."""
        ...

    def delete(self, response_id: str) -> bool:
        """Forget a stored response; ``False`` when there was none."""
        ...

    def expire(self) -> int:
        """Remove the expired responses now (each method ignores them anyway); how many were removed."""
        ...

    def count(self) -> int:
        """How many responses are stored (expired ones not yet removed may be counted)."""
        ...

    def close(self) -> None:
        """Release the file or connection; the store is unusable after."""
        ...


class MemoryStore:
    """``memory:``: stored responses in a dict in insertion order, the oldest evicted past ``max_size``.

    Items are shared between a response and its follow-ups (tuples of references), so a long
    conversation is not copied per turn. ``clock``: Unix seconds (a test's fake clock).
    """

    def __init__(self, max_size: int, ttl: float = DEFAULT_TTL, *, clock: Callable[[], float] = time.time) -> None:
        check_bounds(max_size, ttl)
        self.url, self.max_size, self.ttl, self._clock = "memory:", max_size, ttl, clock
        self._entries: OrderedDict[str, tuple[float, StoredResponse]] = OrderedDict()  # id -> (expires, stored)

    def __len__(self) -> int:
        return self.count()

    def get(self, response_id: str) -> StoredResponse | None:
        entry = self._entries.get(response_id)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[response_id]
            return None
        return entry[1]

    def put(self, stored: StoredResponse) -> None:
        if self.max_size == 0:
            return
        self._entries.pop(stored.id, None)
        self._entries[stored.id] = (self._clock() + self.ttl, stored)
        while len(self._entries) > self.max_size:
            self._entries.popitem(last=False)

    def delete(self, response_id: str) -> bool:
        return self.get(response_id) is not None and self._entries.pop(response_id, None) is not None

    def expire(self) -> int:
        now = self._clock()
        gone = [rid for rid, (expires, _) in self._entries.items() if expires <= now]
        for rid in gone:
            del self._entries[rid]
        return len(gone)

    def count(self) -> int:
        self.expire()
        return len(self._entries)

    def close(self) -> None:
        self._entries.clear()


def check_bounds(max_size: int, ttl: float) -> None:
    if max_size < 0:
        raise ValueError(f"max_size must be >= 0, got {max_size}")
    if not ttl > 0:
        raise ValueError(f"ttl must be > 0 seconds, got {ttl}")


def open_store(url: str, *, max_size: int, ttl: float = DEFAULT_TTL) -> ResponseStore:
    """The store ``url`` names (see the module docstring; the caller resolves the default,
    ``sqlite:$SKIPPY_HOME/responses.db``).

    Raises :class:`StoreError` naming the store when it cannot be used (a directory that cannot be
    written, a file that is not a SQLite database or is corrupted, Redis unreachable) and ``ValueError``
    for a URL of another scheme or a negative ``max_size``.
    """
    if url == "memory:":
        return MemoryStore(max_size, ttl)
    if url.startswith("sqlite:"):
        from skippy.engine.protocols.responses.store_sqlite import SqliteStore
        if not url.removeprefix("sqlite:"):
            raise ValueError("a sqlite: response store names its file: sqlite:PATH")
        return SqliteStore(Path(url.removeprefix("sqlite:")).expanduser(), max_size=max_size, ttl=ttl)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from skippy.engine.protocols.responses.store_redis import RedisStore
        return RedisStore(url, max_size=max_size, ttl=ttl)
    raise ValueError(f"a response store is sqlite:PATH, redis://HOST:PORT[/DB] or memory:, not {url!r}")


# -- responses a stopped server left unfinished ----------------------------------------------------------

#: statuses of a response still being generated (a background one, or a stream)
UNFINISHED = ("queued", "in_progress")

#: seconds past ``--request-timeout`` after which an unfinished response not running here has certainly stopped
STALE_AFTER_TIMEOUT = 60.0

#: the ``error.message`` of a response :func:`settled` reads as ``failed``
STOPPED_MESSAGE = "the server generating this response stopped before it ended"


def settled(stored: StoredResponse, *, running: bool, timeout: float, now: float) -> StoredResponse:
    """``stored`` as every route reads it: a response left ``queued`` / ``in_progress`` by a server that
    stopped (``kill -9``, a crash) reads as ``failed`` (``error.code`` ``server_error``,
    :data:`STOPPED_MESSAGE`), so a client polling it, cancelling it or continuing from it
    (``previous_response_id``) gets an end.

    The rule: unfinished, not ``running`` on this server, and created more than ``timeout``
    (``--request-timeout``, seconds; it bounds every background generation and stream) plus
    :data:`STALE_AFTER_TIMEOUT` seconds before ``now`` (Unix seconds). A younger one may still run on another
    replica and is returned as stored; with ``timeout`` 0 (no limit) nothing is ever settled. Nothing is
    written: the stored response stays as it is (a replica still running it stores its end over it).
    """
    r = stored.response
    if r.status in UNFINISHED and not running and timeout > 0 and now - r.created_at > timeout + STALE_AFTER_TIMEOUT:
        failed = msgspec.structs.replace(r, status="failed", error=ResponseError(code="server_error",
                                                                                message=STOPPED_MESSAGE))
        return attrs.evolve(stored, response=failed)
    return stored


# -- GET /v1/responses/{id}/input_items --------------------------------------------------------------

def page_of_items(stored: StoredResponse, *, after: str | None = None, limit: int = DEFAULT_LIST_LIMIT,
                  order: str = "desc") -> tuple[list[ResponseInputItem], bool]:
    """One page of ``stored``'s input items (OpenAI's ``input_items`` list: ``order`` ``desc`` by default,
    newest first; ``after`` the id of the last item of the previous page) and whether more follow.

    Raises :class:`InvalidRequest` (400) naming ``limit`` outside 1-100, ``order`` other than
    ``asc``/``desc``, ``after`` that is no item of this response.
    """
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit}", param="limit")
    if order not in ("asc", "desc"):
        raise InvalidRequest(f"order must be 'asc' or 'desc', got {order!r}", param="order")
    items = list(stored.input_items)
    if order == "desc":
        items.reverse()
    start = 0
    if after is not None:
        ids = [item.id for item in items]
        if after not in ids:
            raise InvalidRequest(f"after: {stored.id} has no input item with id {after!r}", param="after")
        start = ids.index(after) + 1
    page = items[start:start + limit]
    return page, start + limit < len(items)
