"""``sqlite:PATH``: stored responses in one SQLite file (the standard library's :mod:`sqlite3`).

One table, ``responses(id, created_at, expires_at, data)``: ``data`` is
:func:`~.store.encode`'s bytes, times are Unix seconds. WAL journal with
``synchronous=FULL``: a :meth:`SqliteStore.put` that returned is on disk, a
``kill -9`` or a power cut loses no committed response and leaves no torn row.
Several processes (replicas on one host) may share the file: each write is one
short ``BEGIN IMMEDIATE`` transaction and a locked database is waited for up to
5 s (:data:`BUSY_TIMEOUT`). Opening waits too: two processes opening a new file at
once race to switch it to WAL, and SQLite answers that switch (and the first
reads while another connection sets up the WAL) ``SQLITE_BUSY`` at once, without
its busy handler, so :class:`SqliteStore` retries the whole opening on a busy or
locked database until the same 5 s have passed. The file is created with mode 0600 (the WAL and shared-memory files take
its mode).

Not thread-safe: one thread at a time (the HTTP layer's store thread); the
connection may be opened on another thread than the one using it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from skippy.engine.protocols.responses.store import (
    DEFAULT_TTL,
    StoredResponse,
    StoreError,
    check_bounds,
    decode,
    encode,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires_at);
"""

#: ``PRAGMA user_version`` of this schema (written at every open: the check that the file is writable)
SCHEMA_VERSION = 1

#: seconds a locked database is waited for: by each statement (sqlite3's ``timeout``) and by the opening
BUSY_TIMEOUT = 5.0

#: SQLite's primary result codes of a database another connection holds (``SQLITE_BUSY``, ``SQLITE_LOCKED``)
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says another connection holds the database (``SQLITE_BUSY`` or ``SQLITE_LOCKED``,
    extended codes such as ``SQLITE_BUSY_RECOVERY`` included): worth retrying, unlike any other error."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in _BUSY_CODES


class SqliteStore:
    """Stored responses in the SQLite file ``path`` (created with its directory if missing).

    Raises :class:`~.store.StoreError` naming ``path`` when it cannot be opened or written, is not a
    SQLite database, fails SQLite's ``quick_check`` (corrupted), has a newer schema, or stays locked by
    another process for ``busy_timeout`` seconds (default :data:`BUSY_TIMEOUT`) while opening; and from any
    method when SQLite fails later (disk full, I/O error).
    """

    def __init__(self, path: Path, *, max_size: int, ttl: float = DEFAULT_TTL,
                 clock: Callable[[], float] = time.time, busy_timeout: float = BUSY_TIMEOUT) -> None:
        check_bounds(max_size, ttl)
        self.path, self.url, self.max_size, self.ttl, self._clock = path, f"sqlite:{path}", max_size, ttl, clock
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError as exc:
            raise StoreError(f"cannot create the response store {path}: {exc}") from None
        try:
            self._db = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the response store {path}: {exc}") from None
        try:
            self._open_waiting(busy_timeout)
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(f"cannot use the response store {path}: {exc}") from None
        except StoreError:
            self._db.close()
            raise

    def _open_waiting(self, timeout: float) -> None:
        """:meth:`_open`, again after a short sleep while the database is busy (another process opening the
        same new file: :func:`is_busy`), for up to ``timeout`` seconds; then the last busy error is raised.
        :meth:`_open` may run again: its write is one transaction (rolled back when it fails) and its
        pragmas are idempotent."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        while True:
            try:
                self._open()
                return
            except sqlite3.Error as exc:
                if not is_busy(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _open(self) -> None:
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")  # "file is not a database" for a file of something else
        db.execute("PRAGMA synchronous=FULL")
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise StoreError(f"the response store {self.path} is corrupted (SQLite quick_check: "
                             f"{'; '.join(problems[:3])}); move it away or delete it to start a new one")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"the response store {self.path} has schema version {version}; this skippy "
                             f"reads version {SCHEMA_VERSION} (a newer skippy wrote it)")
        with self._write():
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction (``BEGIN IMMEDIATE``: waits for another process's, up to the timeout)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _failed(self, what: str, exc: sqlite3.Error) -> StoreError:
        return StoreError(f"response store {self.path}: {what} failed: {exc}")

    def get(self, response_id: str) -> StoredResponse | None:
        try:
            row = self._db.execute("SELECT data FROM responses WHERE id = ? AND expires_at > ?",
                                   (response_id, self._clock())).fetchone()
        except sqlite3.Error as exc:
            raise self._failed("reading", exc) from None
        return decode(row[0]) if row is not None else None

    def put(self, stored: StoredResponse) -> None:
        if self.max_size == 0:
            return
        now = self._clock()
        try:
            with self._write():
                self._db.execute("INSERT OR REPLACE INTO responses (id, created_at, expires_at, data) "
                                 "VALUES (?, ?, ?, ?)", (stored.id, now, now + self.ttl, encode(stored)))
                self._db.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
                (n,) = self._db.execute("SELECT count(*) FROM responses").fetchone()
                if n > self.max_size:
                    self._db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses "
                                     "ORDER BY created_at LIMIT ?)", (n - self.max_size,))
        except sqlite3.Error as exc:
            raise self._failed("writing", exc) from None

    def delete(self, response_id: str) -> bool:
        try:
            with self._write():
                cur = self._db.execute("DELETE FROM responses WHERE id = ? AND expires_at > ?",
                                       (response_id, self._clock()))
        except sqlite3.Error as exc:
            raise self._failed("deleting", exc) from None
        return cur.rowcount > 0

    def expire(self) -> int:
        try:
            with self._write():
                cur = self._db.execute("DELETE FROM responses WHERE expires_at <= ?", (self._clock(),))
        except sqlite3.Error as exc:
            raise self._failed("expiring", exc) from None
        return cur.rowcount

    def count(self) -> int:
        try:
            (n,) = self._db.execute("SELECT count(*) FROM responses WHERE expires_at > ?",
                                    (self._clock(),)).fetchone()
        except sqlite3.Error as exc:
            raise self._failed("counting", exc) from None
        return int(n)

    def close(self) -> None:
        self._db.close()
