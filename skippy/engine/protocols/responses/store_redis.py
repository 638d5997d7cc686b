"""``redis://HOST:PORT[/DB]``: stored responses in Redis, shared by replicas (the ``redis`` client).

Keys, under the prefix ``skippy:responses:``: ``r:<id>`` holds :func:`~.store.encode`'s
bytes and expires with the response (``PX``, Redis's own expiry); the sorted set
``created`` scores each id by its creation (Unix seconds), the order the oldest are
evicted in past ``max_size``. Writes are one ``MULTI``/``EXEC`` transaction; whether a
write survives a Redis restart is the server's persistence setting (``appendonly yes``
with ``appendfsync always`` for every write; ``deploy/redis.conf``). Every call has a
2 s socket timeout: an unreachable Redis is a :class:`~.store.StoreError` in that time,
not a hang. Blocking; used from one thread at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import redis

from skippy.engine.protocols.responses.store import (
    DEFAULT_TTL,
    StoredResponse,
    StoreError,
    check_bounds,
    decode,
    encode,
)

PREFIX = "skippy:responses:"
#: seconds a call may wait for Redis (connecting, then each reply)
TIMEOUT = 2.0


def safe_url(url: str) -> str:
    """``url`` without its password (for logs and errors)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class RedisStore:
    """Stored responses in the Redis server at ``url`` (checked with ``PING`` at construction).

    Raises :class:`~.store.StoreError` naming the server (without its password) when it cannot be
    reached or answers an error, at construction and from every method.
    """

    def __init__(self, url: str, *, max_size: int, ttl: float = DEFAULT_TTL,
                 clock: Callable[[], float] = time.time) -> None:
        check_bounds(max_size, ttl)
        self.url, self.max_size, self.ttl, self._clock = safe_url(url), max_size, ttl, clock
        try:
            self._redis = redis.Redis.from_url(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
            self._redis.ping()
        except (redis.RedisError, ValueError) as exc:
            raise StoreError(f"cannot use the response store {self.url}: {exc}") from None

    def _failed(self, what: str, exc: Exception) -> StoreError:
        return StoreError(f"response store {self.url}: {what} failed: {exc}")

    def get(self, response_id: str) -> StoredResponse | None:
        try:
            blob = self._redis.get(PREFIX + "r:" + response_id)
        except redis.RedisError as exc:
            raise self._failed("reading", exc) from None
        return decode(blob) if blob is not None else None  # type: ignore[arg-type]

    def put(self, stored: StoredResponse) -> None:
        if self.max_size == 0:
            return
        now = self._clock()
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.set(PREFIX + "r:" + stored.id, encode(stored), px=int(self.ttl * 1000))
            pipe.zadd(PREFIX + "created", {stored.id: now})
            pipe.zremrangebyscore(PREFIX + "created", "-inf", now - self.ttl)  # expired: their keys are gone
            pipe.zcard(PREFIX + "created")
            n = pipe.execute()[-1]
            if n > self.max_size:
                popped: list[tuple[bytes, float]] = self._redis.zpopmin(  # type: ignore[assignment]
                    PREFIX + "created", n - self.max_size)
                oldest = [rid.decode() for rid, _ in popped]
                if oldest:
                    self._redis.delete(*(PREFIX + "r:" + rid for rid in oldest))
        except redis.RedisError as exc:
            raise self._failed("writing", exc) from None

    def delete(self, response_id: str) -> bool:
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.delete(PREFIX + "r:" + response_id)
            pipe.zrem(PREFIX + "created", response_id)
            deleted = pipe.execute()[0]
        except redis.RedisError as exc:
            raise self._failed("deleting", exc) from None
        return bool(deleted)

    def expire(self) -> int:
        try:
            return int(self._redis.zremrangebyscore(PREFIX + "created", "-inf", self._clock() - self.ttl))
        except redis.RedisError as exc:
            raise self._failed("expiring", exc) from None

    def count(self) -> int:
        try:
            self.expire()
            return int(self._redis.zcard(PREFIX + "created"))
        except redis.RedisError as exc:
            raise self._failed("counting", exc) from None

    def close(self) -> None:
        self._redis.close()
