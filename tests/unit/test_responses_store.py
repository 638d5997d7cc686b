"""The Responses store (``--responses-store``): the memory, SQLite and Redis backends behind one interface,
their bounds (size, TTL), the SQLite file's faults, the async client's failure handling, input item pages.

The Redis backend runs against a real ``redis-server`` on a loopback port (:class:`tests.support.RedisServer`).
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import msgspec
import pytest

from skippy.actors.store import StoreClient, StoreUnavailable
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.responses import translate as rapi
from skippy.engine.protocols.responses.store import (
    MemoryStore,
    ResponseNotFound,
    ResponseStore,
    StoredResponse,
    StoreError,
    decode,
    encode,
    open_store,
    page_of_items,
    settled,
)
from skippy.engine.protocols.responses.store_redis import RedisStore, safe_url
from skippy.engine.protocols.responses.store_sqlite import SqliteStore
from skippy.engine.protocols.responses.types import ResponsesRequest
from skippy.engine.protocols.responses.wire import ResponseOutputMessage, ResponseOutputText
from tests.support import RedisServer


def stored(rid: str, text: str = "hello", previous: StoredResponse | None = None) -> StoredResponse:
    """A stored response ``rid``: the user says ``text``, the model answers ``re: text``."""
    turn = rapi.prepare(ResponsesRequest(input=text, previous_response_id=previous.id if previous else None),
                        previous, model="m", response_id=rid)
    out = ResponseOutputMessage(id=rapi.new_id("msg"), status="completed",
                                content=[ResponseOutputText(text=f"re: {text}")])
    return turn.stored(turn.response([out], "completed"))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):
    made: list[ResponseStore] = []

    def make(max_size: int = 100, ttl: float = 3600.0, clock: Clock | None = None) -> ResponseStore:
        kw = {"clock": clock} if clock is not None else {}
        if request.param == "memory":
            store: ResponseStore = MemoryStore(max_size, ttl, **kw)
        elif request.param == "sqlite":
            store = SqliteStore(tmp_path / "responses.db", max_size=max_size, ttl=ttl, **kw)
        else:
            server = request.getfixturevalue("redis_server")
            import redis
            redis.Redis.from_url(server.url).flushdb()
            store = RedisStore(server.url, max_size=max_size, ttl=ttl, **kw)
        made.append(store)
        return store

    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    for store in made:
        store.close()


def test_put_get_delete_round_trip(make_store) -> None:
    store = make_store()
    first = stored("resp_1", "hi")
    second = stored("resp_2", "and then?", previous=first)
    store.put(first)
    store.put(second)
    got = store.get("resp_2")
    assert got is not None and got.response == second.response and got.items == second.items
    assert got.n_input == 3 and [i.role for i in got.items] == ["user", "assistant", "user", "assistant"]
    assert all(i.id for i in got.items)  # every stored item has an id (input_items lists them by it)
    assert store.get("resp_nope") is None and store.count() == 2
    assert store.delete("resp_1") is True and store.delete("resp_1") is False and store.get("resp_1") is None
    assert store.get("resp_2") is not None  # a follow-up keeps its whole conversation when an earlier turn goes
    store.put(second)  # the same id again replaces it
    assert store.count() == 1


def test_the_oldest_are_forgotten_past_the_size(make_store) -> None:
    clock = Clock()
    store = make_store(max_size=3, clock=clock)
    for i in range(6):
        clock.now += 1
        store.put(stored(f"resp_{i}"))
        if i < 3:
            assert store.get("resp_0") is not None  # reading it does not keep it longer
    assert [store.get(f"resp_{i}") is not None for i in range(6)] == [False] * 3 + [True] * 3
    assert store.count() == 3
    off = make_store(max_size=0)
    off.put(stored("resp_x"))
    assert off.get("resp_x") is None


def test_expired_responses_read_as_missing(make_store) -> None:
    if make_store.kind == "redis":  # Redis expires keys on its own clock
        store = make_store(ttl=0.3)
        store.put(stored("resp_old"))
        assert store.get("resp_old") is not None
        time.sleep(0.5)
    else:
        clock = Clock()
        store = make_store(ttl=60, clock=clock)
        store.put(stored("resp_old"))
        clock.now += 59
        assert store.get("resp_old") is not None
        clock.now += 2
    assert store.get("resp_old") is None and store.delete("resp_old") is False
    assert store.count() == 0


def test_encode_is_compact_and_refuses_what_it_did_not_write() -> None:
    item = stored("resp_1", "a long question " * 200)
    blob = encode(item)
    assert decode(blob) == item and len(blob) < 600
    with pytest.raises(StoreError, match="unknown format"):
        decode(b"\x07junk")
    with pytest.raises(StoreError, match="cannot be read"):
        decode(blob[:20])


BIG = 10**30  # beyond msgpack's 64-bit integers; JSON requests may hold it


def big_stored(rid: str = "resp_big") -> StoredResponse:
    """A stored response whose request holds integers msgpack cannot carry: ``max_output_tokens`` and a number
    in a function tool's schema."""
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer", "default": BIG, "minimum": -BIG}}}}
    req = msgspec.convert({"input": "hi", "max_output_tokens": BIG, "tools": [tool]}, ResponsesRequest)
    turn = rapi.prepare(req, None, model="m", response_id=rid)
    out = ResponseOutputMessage(id=rapi.new_id("msg"), status="completed", content=[ResponseOutputText(text="re")])
    return turn.stored(turn.response([out], "completed"))


def test_integers_beyond_64_bits_are_stored_exactly(make_store) -> None:
    item = big_stored()
    blob = encode(item)
    assert blob[:1] == b"\x02" and decode(blob) == item  # JSON: msgpack cannot carry them
    assert encode(stored("resp_1"))[:1] == b"\x01"  # every other record stays msgpack
    store = make_store()
    store.put(item)
    got = store.get("resp_big")
    assert got == item and got.response.max_output_tokens == BIG
    assert got.response.tools[0]["parameters"]["properties"]["x"] == {"type": "integer", "default": BIG,
                                                                       "minimum": -BIG}


def test_a_record_that_cannot_be_encoded_is_a_store_error() -> None:
    item = stored("resp_1")
    odd = attrs.evolve(item, response=msgspec.structs.replace(item.response, tools=[object()]))
    with pytest.raises(StoreError, match="resp_1 cannot be encoded"):
        encode(odd)


def test_sqlite_survives_reopening_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "responses.db"
    store = SqliteStore(path, max_size=10)
    store.put(stored("resp_1"))
    store.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = SqliteStore(path, max_size=10)
    assert again.get("resp_1") is not None
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again.close()


def test_sqlite_faults_at_start_name_the_file(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere: a file in place of the directory instead
            blocker = tmp_path / "file"
            blocker.write_text("x")
            target = blocker / "responses.db"
        else:
            target = locked / "responses.db"
        with pytest.raises(StoreError, match="responses.db"):
            SqliteStore(target, max_size=10)
    finally:
        locked.chmod(0o700)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, " * 300)
    with pytest.raises(StoreError, match=r"junk\.db"):
        SqliteStore(junk, max_size=10)
    # a real database with a damaged page: quick_check finds it
    broken = tmp_path / "broken.db"
    store = SqliteStore(broken, max_size=1000)
    for i in range(200):
        store.put(stored(f"resp_{i}", f"question {i} " * 50))
    store.close()
    sqlite3.connect(broken).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    data = bytearray(broken.read_bytes())
    page = 4096
    data[3 * page:3 * page + 200] = b"\xff" * 200
    broken.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"broken\.db"):
        SqliteStore(broken, max_size=1000)


def _open_each(paths: list[str], barrier: multiprocessing.synchronize.Barrier, errors: multiprocessing.Queue) -> None:
    """A replica starting: open each new store file in ``paths`` as the other process opens it too (the
    barrier), then report the errors (a spawned process's target: module level)."""
    failed = []
    for path in paths:
        barrier.wait()
        try:
            SqliteStore(Path(path), max_size=10).close()
        except StoreError as exc:
            failed.append(str(exc))
    errors.put(failed)


def test_sqlite_two_processes_open_a_new_file_at_once(tmp_path: Path) -> None:
    """Two replicas sharing $SKIPPY_HOME start together: both open the new responses.db (SQLite answers the
    second WAL switch SQLITE_BUSY at once; the opening waits instead of failing)."""
    paths = [str(tmp_path / f"responses{i}.db") for i in range(60)]
    ctx = multiprocessing.get_context("spawn")
    barrier, errors = ctx.Barrier(2), ctx.Queue()
    workers = [ctx.Process(target=_open_each, args=(paths, barrier, errors)) for _ in range(2)]
    for worker in workers:
        worker.start()
    failed = [errors.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert failed == [[], []]
    for path in paths[::10]:
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT count(*) FROM responses").fetchone()[0] == 0
        db.close()


def test_sqlite_opening_waits_for_a_lock_and_gives_up_after_its_timeout(tmp_path: Path) -> None:
    """A new file another connection is writing in rollback mode (what a replica opening it holds before
    its WAL switch): the switch is SQLITE_BUSY without SQLite's busy handler; the store waits for the lock,
    and past ``busy_timeout`` is a StoreError naming the file."""
    path = tmp_path / "responses.db"
    path.touch()
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, other.execute, ("COMMIT",))
    release.start()
    start = time.monotonic()
    store = SqliteStore(path, max_size=10)
    assert time.monotonic() - start >= 0.2
    release.join()
    store.put(stored("resp_1"))
    assert store.get("resp_1") is not None
    store.close()
    other.execute("BEGIN IMMEDIATE")  # now in WAL mode: held past the opening's timeout
    with pytest.raises(StoreError, match=r"responses\.db.*locked"):
        SqliteStore(path, max_size=10, busy_timeout=0.2)
    other.execute("COMMIT")
    other.close()


def test_open_store_urls(tmp_path: Path, redis_server: RedisServer) -> None:
    assert isinstance(open_store("memory:", max_size=1), MemoryStore)
    sqlite_store = open_store(f"sqlite:{tmp_path / 'r.db'}", max_size=1)
    assert isinstance(sqlite_store, SqliteStore) and sqlite_store.url == f"sqlite:{tmp_path / 'r.db'}"
    sqlite_store.close()
    redis_store = open_store(redis_server.url, max_size=1)
    assert isinstance(redis_store, RedisStore)
    redis_store.close()
    for bad in ("postgres://x", "sqlite:", "responses.db"):
        with pytest.raises(ValueError):
            open_store(bad, max_size=1)
    with pytest.raises(StoreError, match="127.0.0.1:1"):
        open_store("redis://127.0.0.1:1/0", max_size=1)
    assert safe_url("redis://:secret@host:6379/0") == "redis://:***@host:6379/0"


def test_redis_gone_is_a_store_error(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    store = RedisStore(server.url, max_size=10)
    store.put(stored("resp_1"))
    server.stop()
    try:
        with pytest.raises(StoreError, match="writing"):
            store.put(stored("resp_2"))
        with pytest.raises(StoreError, match="reading"):
            store.get("resp_1")
    finally:
        server.start()  # the same data: the append-only file was fsynced at each write
    assert store.get("resp_1") is not None
    store.close()
    server.stop()


# -- the async client --------------------------------------------------------------------------------

class Failing(MemoryStore):
    def get(self, response_id: str) -> StoredResponse | None:
        raise StoreError("redis://x: reading failed: Connection refused")

    def put(self, stored: StoredResponse) -> None:
        raise StoreError("redis://x: writing failed: Connection refused")

    def delete(self, response_id: str) -> bool:
        raise StoreError("redis://x: deleting failed: Connection refused")


async def test_client_contains_failures() -> None:
    errors: list[str] = []
    client = StoreClient(Failing(10), on_error=errors.append)
    assert await client.put(stored("resp_1")) is False
    with pytest.raises(ResponseNotFound, match="store is unavailable") as info:
        await client.get("resp_1", param="previous_response_id")
    assert info.value.status == 404 and info.value.param == "previous_response_id"
    with pytest.raises(StoreUnavailable):
        await client.delete("resp_1")
    assert errors == ["put", "get", "delete"]


class FailingWrites(MemoryStore):
    """Reads work; writes fail while ``broken`` (a SQLite file locked by another process, a full disk)."""

    broken = True

    def put(self, stored: StoredResponse) -> None:
        if self.broken:
            raise StoreError("sqlite:r.db: writing failed: database is locked")
        super().put(stored)


async def test_a_response_whose_write_failed_is_a_404_that_says_so_until_it_is_written() -> None:
    store = FailingWrites(10)
    client = StoreClient(store)
    assert await client.put(stored("resp_1")) is False
    with pytest.raises(ResponseNotFound, match="could not be written") as info:
        await client.get("resp_1", param="previous_response_id")
    assert info.value.status == 404 and info.value.param == "previous_response_id"
    with pytest.raises(ResponseNotFound, match="never stored"):  # another id: the plain 404
        await client.get("resp_2")
    store.broken = False
    assert await client.put(stored("resp_1")) is True  # written after all (a background response's update)
    assert (await client.get("resp_1")).id == "resp_1"
    store.delete("resp_1")
    with pytest.raises(ResponseNotFound, match="never stored"):
        await client.get("resp_1")


async def test_the_failed_writes_remembered_are_bounded() -> None:
    from skippy.actors import store as store_module

    client = StoreClient(FailingWrites(10))
    for i in range(store_module.FAILED_WRITES_KEPT + 1):
        await client.put(stored(f"resp_{i}"))
    with pytest.raises(ResponseNotFound, match="never stored"):  # the oldest is forgotten
        await client.get("resp_0")
    with pytest.raises(ResponseNotFound, match="could not be written"):
        await client.get(f"resp_{store_module.FAILED_WRITES_KEPT}")


async def test_client_runs_a_persistent_store_on_its_thread(tmp_path: Path) -> None:
    client = StoreClient(SqliteStore(tmp_path / "r.db", max_size=10))
    assert await client.put(stored("resp_1")) is True
    assert (await client.get("resp_1")).id == "resp_1"
    assert await client.count() == 1
    await client.delete("resp_1")
    with pytest.raises(ResponseNotFound, match="--responses-store-size"):
        await client.get("resp_1")
    with pytest.raises(ResponseNotFound):
        await client.delete("resp_1")
    await client.aclose()


# -- input_items pages -------------------------------------------------------------------------------

def test_input_items_pages() -> None:
    first = stored("resp_1", "one")
    second = stored("resp_2", "two", previous=first)
    ids = [i.id for i in second.input_items]
    assert len(ids) == 3  # the earlier turn's input and output, this request's input; not its own output
    page, more = page_of_items(second)
    assert [i.id for i in page] == ids[::-1] and not more
    page, more = page_of_items(second, order="asc", limit=2)
    assert [i.id for i in page] == ids[:2] and more
    page, more = page_of_items(second, order="asc", limit=2, after=page[-1].id)
    assert [i.id for i in page] == ids[2:] and not more
    listed = rapi.listed_item(second.input_items[0])
    assert listed["type"] == "message" and listed["content"] == [{"type": "input_text", "text": "one"}]
    assert rapi.listed_item(second.input_items[1])["content"][0]["type"] == "output_text"
    for kw, param in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "up"}, "order"),
                      ({"after": "msg_nope"}, "after")):
        with pytest.raises(InvalidRequest) as info:
            page_of_items(second, **kw)
        assert info.value.param == param


def test_an_unfinished_response_a_stopped_server_left_settles_as_failed() -> None:
    """GET, cancel and previous_response_id read a stored response through one rule (settled): queued /
    in_progress, not running here, older than --request-timeout plus a minute: failed."""
    turn = rapi.prepare(ResponsesRequest(input="hi", background=True), None, model="m", response_id="resp_1",
                        created_at=1_000)
    left = turn.stored(turn.response([], "in_progress"))
    stale = settled(left, running=False, timeout=600, now=1_000 + 661)
    assert stale.response.status == "failed" and stale.response.error.code == "server_error"
    assert "stopped" in stale.response.error.message and stale.items == left.items
    assert settled(left, running=False, timeout=600, now=1_000 + 659) is left  # may still run on another replica
    assert settled(left, running=True, timeout=600, now=10**9) is left  # runs here
    assert settled(left, running=False, timeout=0, now=10**9) is left  # no --request-timeout: no bound
    done = turn.stored(turn.response([], "completed"))
    assert settled(done, running=False, timeout=600, now=10**9) is done
