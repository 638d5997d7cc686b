"""The Responses store end to end (``--responses-store``): conversations continue across a restart, a
``kill -9`` and two replicas on one Redis; the bounds (size, TTL), ``input_items``, background responses
and ``cancel``; the store's faults. The real server, the official ``openai`` SDK, a real ``redis-server``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from skippy.engine.protocols.responses import translate as rapi
from skippy.engine.protocols.responses.store_sqlite import SqliteStore
from tests.sse import iter_named_sse
from tests.support import RedisServer, Server, openai_client, read_metrics

ARGS = ["--parallel", "8", "--n-ctx", "2048"]
MODEL = "SmolLM2-135M-Instruct"


def create(base_url: str, text: str, previous: str | None = None, **extra) -> dict:
    body = {"model": MODEL, "input": text, "temperature": 0, "max_output_tokens": 8, **extra}
    if previous is not None:
        body["previous_response_id"] = previous
    r = httpx.post(base_url + "/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def continues(base_url: str, first: dict) -> dict:
    """A follow-up of ``first`` on ``base_url``: 200, and the earlier turn is in its prompt and its items."""
    second = create(base_url, "And then?", previous=first["id"])
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    items = httpx.get(f"{base_url}/v1/responses/{second['id']}/input_items", params={"order": "asc"}, timeout=30)
    assert items.status_code == 200, items.text
    texts = [part["text"] for item in items.json()["data"] for part in item["content"]]
    assert texts[0] == "Hello there." and texts[-1] == "And then?"
    assert texts[1] == first["output"][0]["content"][0]["text"]
    return second


def test_a_conversation_continues_after_a_restart_and_after_kill_9(tmp_path: Path) -> None:
    store = ["--responses-store", f"sqlite:{tmp_path / 'responses.db'}"]
    with Server(ARGS + store, tmp_path / "first.log") as srv:
        first = create(srv.base_url, "Hello there.")
    with Server(ARGS + store, tmp_path / "second.log") as srv:  # stopped with SIGTERM above
        continues(srv.base_url, first)
        again = create(srv.base_url, "Hello there.")
        srv.kill()
    with Server(ARGS + store, tmp_path / "third.log") as srv:
        continues(srv.base_url, again)
        assert httpx.get(f"{srv.base_url}/v1/responses/{first['id']}", timeout=30).json()["id"] == first["id"]


def test_kill_9_while_32_conversations_write_loses_no_seen_response(tmp_path: Path) -> None:
    path = tmp_path / "responses.db"
    seen: list[str] = []
    stop = threading.Event()
    srv = Server(ARGS + ["--responses-store", f"sqlite:{path}"], tmp_path / "server.log")
    srv.wait_ready()

    def conversation(i: int) -> None:
        previous = None
        with httpx.Client(base_url=srv.base_url, timeout=60) as client:
            while not stop.is_set():
                body = {"model": MODEL, "input": f"Count to {i}.", "max_output_tokens": 4, "temperature": 0,
                        "stream": i % 2 == 0, **({"previous_response_id": previous} if previous else {})}
                try:
                    if body["stream"]:
                        with client.stream("POST", "/v1/responses", json=body) as resp:
                            for event in iter_named_sse(resp):
                                if event["type"] in ("response.completed", "response.incomplete"):
                                    seen.append(event["response"]["id"])  # the client saw its completion
                                    previous = event["response"]["id"]
                    else:
                        r = client.post("/v1/responses", json=body)
                        if r.status_code == 200:
                            seen.append(r.json()["id"])
                            previous = r.json()["id"]
                except (httpx.HTTPError, ValueError):
                    return  # the server is gone

    threads = [threading.Thread(target=conversation, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    time.sleep(8)
    srv.kill()
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert len(seen) >= 32, len(seen)
    store = SqliteStore(path, max_size=10000)  # opens: quick_check finds no torn page
    try:
        missing = [rid for rid in seen if store.get(rid) is None]
        assert not missing, f"{len(missing)} of {len(seen)} responses a client saw complete are not stored"
        assert store.count() >= len(seen)
    finally:
        store.close()


def test_store_faults_at_start_are_errors_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"definitely not SQLite " * 500)
    for store, named in ((f"sqlite:{blocker / 'responses.db'}", "not-a-dir/responses.db"),
                         (f"sqlite:{corrupt}", "corrupt.db"), ("redis://127.0.0.1:1/0", "127.0.0.1:1"),
                         ("postgres://db/x", "postgres://db/x")):
        run = subprocess.run([sys.executable, "-m", "skippy", "serve", "--responses-store", store, "--port", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        assert run.returncode == 1, (store, run.stdout)
        assert "--responses-store" in run.stdout and named in run.stdout, run.stdout


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("bounded")
    args = ARGS + ["--responses-store", f"sqlite:{work / 'r.db'}", "--responses-store-size", "3",
                   "--responses-ttl", "4"]
    with Server(args, work / "server.log") as srv:
        yield srv


def test_size_ttl_delete_and_input_items_pages(bounded: Server) -> None:
    client = openai_client(bounded.base_url)
    ids = [create(bounded.base_url, f"Hello {i}.")["id"] for i in range(4)]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ids[0])  # the oldest of four, past --responses-store-size 3
    chain = client.responses.create(model=MODEL, input="Hello there.", previous_response_id=ids[3],
                                    max_output_tokens=4, temperature=0)
    items = client.responses.input_items.list(chain.id, limit=1)  # one per page, the SDK follows has_more
    listed = [item.id for item in items]
    assert len(listed) == 3 and len(set(listed)) == 3  # desc: this input, the earlier turn's output and input
    first_page = client.responses.input_items.list(chain.id, limit=2, order="asc")
    assert [i.id for i in first_page.data] == listed[::-1][:2] and first_page.has_more
    client.responses.delete(ids[3])
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ids[3])
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(ids[3])
    bad = httpx.get(f"{bounded.base_url}/v1/responses/{chain.id}/input_items", params={"limit": "0"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"
    time.sleep(4.5)
    with pytest.raises(openai.NotFoundError, match="expired"):
        client.responses.retrieve(chain.id)
    late = httpx.post(bounded.base_url + "/v1/responses", json={"input": "x", "previous_response_id": chain.id},
                      timeout=30)
    assert late.status_code == 404 and late.json()["error"]["param"] == "previous_response_id"


def test_background_response_completes_and_is_polled(server) -> None:
    client = openai_client(server.base_url)
    queued = client.responses.create(model=MODEL, input="Name three colors.", background=True, temperature=0,
                                     max_output_tokens=16)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    deadline = time.monotonic() + 60
    while (got := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert got.status in ("completed", "incomplete") and got.output_text
    same = client.responses.create(model=MODEL, input="Name three colors.", temperature=0, max_output_tokens=16)
    assert same.output_text == got.output_text  # greedy: what the foreground answers
    with pytest.raises(openai.BadRequestError, match="completed|incomplete"):
        client.responses.cancel(queued.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nope")
    with pytest.raises(openai.BadRequestError, match="store"):
        client.responses.create(model=MODEL, input="x", background=True, store=False)


def test_cancel_a_background_and_a_streamed_response(server) -> None:
    client = openai_client(server.base_url)
    long = dict(model=MODEL, input="Write a very long story about a dragon and a knight.", temperature=0,
                max_output_tokens=1500)
    queued = client.responses.create(background=True, **long)
    time.sleep(0.5)
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(queued.id).status == "cancelled"
    assert client.responses.cancel(queued.id).status == "cancelled"  # again: the same answer

    with httpx.stream("POST", server.base_url + "/v1/responses", json={**long, "stream": True}, timeout=120) as resp:
        events = []
        for event in iter_named_sse(resp):
            events.append(event)
            if event["type"] == "response.output_text.delta" and len(events) == 8:
                rid = events[0]["response"]["id"]
                r = httpx.post(f"{server.base_url}/v1/responses/{rid}/cancel", timeout=30)
                assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    last = events[-1]
    assert last["type"] == "response.incomplete" and last["response"]["status"] == "cancelled"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert last["response"]["output"][0]["content"][0]["text"] == text
    assert client.responses.retrieve(rid).status == "cancelled"


def test_a_stored_stream_is_in_progress_from_its_start_then_stored_with_its_end(server) -> None:
    """A streamed ``store: true`` response is stored ``in_progress`` before ``response.created`` (GET shows it,
    ``previous_response_id`` to it is the 400 of an unfinished response), then with its end: ``cancelled`` with
    the output so far when the client goes away, what its last event says when it completes."""
    client = openai_client(server.base_url)
    long = dict(model=MODEL, input="Write a very long story about a dragon and a knight.", temperature=0,
                max_output_tokens=1500, stream=True)
    with httpx.stream("POST", server.base_url + "/v1/responses", json=long, timeout=120) as resp:
        for event in iter_named_sse(resp):
            if event["type"] == "response.created":
                rid = event["response"]["id"]
                seen = client.responses.retrieve(rid)  # already there, before any output
                assert seen.status == "in_progress" and seen.output == [] and seen.id == rid
            if event["type"] == "response.output_text.delta":
                assert client.responses.retrieve(rid).status == "in_progress"
                with pytest.raises(openai.BadRequestError, match="in_progress") as info:
                    client.responses.create(model=MODEL, input="And then?", previous_response_id=rid)
                assert info.value.body["param"] == "previous_response_id"
                break  # the client goes away mid-stream: the generation stops there
    deadline = time.monotonic() + 60
    while (left := client.responses.retrieve(rid)).status == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert left.status == "cancelled" and left.output_text
    with client.responses.stream(model=MODEL, input="Hello there.", temperature=0, max_output_tokens=8) as stream:
        final = stream.get_final_response()
    stored = client.responses.retrieve(final.id)
    assert stored.status == final.status and stored.output_text == final.output_text
    assert client.responses.create(model=MODEL, input="And then?", previous_response_id=final.id,
                                   max_output_tokens=4).status in ("completed", "incomplete")


def test_a_stored_stream_past_the_deadline_is_stored_failed(tmp_path: Path) -> None:
    with Server(ARGS + ["--threads", "1", "--request-timeout", "1", "--responses-store", "memory:"],
                tmp_path / "server.log") as srv:
        body = dict(model=MODEL, input="Write a very long story about a dragon and a knight.", temperature=0,
                    max_output_tokens=1500, stream=True)
        with httpx.stream("POST", srv.base_url + "/v1/responses", json=body, timeout=120) as resp:
            events = list(iter_named_sse(resp))
        last = events[-1]
        assert last["type"] == "response.failed", [e["type"] for e in events[-3:]]
        stored = openai_client(srv.base_url).responses.retrieve(last["response"]["id"])
        assert stored.status == "failed" and "request-timeout" in stored.error.message
        assert stored.output_text == "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_two_replicas_on_one_redis_share_a_conversation(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    store = ["--responses-store", redis.url]
    try:
        with Server(ARGS + store, tmp_path / "a.log") as a, Server(ARGS + store, tmp_path / "b.log") as b:
            first = create(a.base_url, "Hello there.")
            second = continues(b.base_url, first)
            third = create(a.base_url, "Thanks.", previous=second["id"])
            fourth = create(b.base_url, "Bye.", previous=third["id"])
            assert fourth["usage"]["input_tokens"] > third["usage"]["input_tokens"]

            redis.stop()  # Redis gone while serving: the reply still comes; the write failure is logged, counted
            lost = create(a.base_url, "Hello again.")
            assert "response store" in a.log() and "writing failed" in a.log()
            assert read_metrics(a.base_url).get("skippy:responses_store_errors_total{op=put}", 0) >= 1
            gone = httpx.post(a.base_url + "/v1/responses", json={"input": "x", "previous_response_id": lost["id"]},
                              timeout=30)
            assert gone.status_code == 404 and "unavailable" in gone.json()["error"]["message"]
            redis.start()
            gone = httpx.post(b.base_url + "/v1/responses", json={"input": "x", "previous_response_id": lost["id"]},
                              timeout=30)
            assert gone.status_code == 404 and gone.json()["error"]["code"] == "response_not_found"
            create(b.base_url, "Still there?", previous=fourth["id"])  # written before Redis went: kept
    finally:
        redis.stop()


def test_unfinished_background_responses_and_what_is_refused(server) -> None:
    client = openai_client(server.base_url)
    long = dict(model=MODEL, input="Write a very long story about a dragon and a knight.", temperature=0,
                max_output_tokens=1500)
    running = client.responses.create(background=True, **long)
    # continuing a response that has not finished is refused (its output is not there yet)
    with pytest.raises(openai.BadRequestError, match="has finished") as info:
        client.responses.create(model=MODEL, input="And then?", previous_response_id=running.id)
    assert info.value.body["param"] == "previous_response_id"
    # resuming its event stream is not served: a 400, not JSON where SSE is expected
    r = httpx.get(f"{server.base_url}/v1/responses/{running.id}", params={"stream": "true"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
    # a background request is checked as a foreground one: bad input is a 400 now, not a failed response later
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, background=True, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
    assert info.value.body["code"] == "media_not_supported" and info.value.body["param"] == "input[0].content[1]"
    # DELETE stops it and answers once its end is stored: it does not come back afterwards
    client.responses.delete(running.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(running.id)


def test_a_url_cannot_forge_a_log_line(server) -> None:
    r = httpx.get(server.base_url + "/v1/responses/x%0A2026-12-05%2018:00:00,000%20ERROR%20skippy.serve:%20FORGED%00",
                  timeout=30)
    assert r.status_code == 404
    lines = server.log().splitlines()
    assert not any(line.startswith("2026-12-05 18:00:00,000 ERROR skippy.serve: FORGED") for line in lines)
    assert "\x00" not in server.log() and any("x\\x0a2026-12-05" in line for line in lines)


def test_a_background_response_a_stopped_server_left_unfinished_reads_as_failed(tmp_path: Path) -> None:
    """A ``kill -9`` leaves a background response ``in_progress`` in the store; once it is older than
    ``--request-timeout`` (which bounds every background generation) plus a minute, it reads ``failed``, to
    GET and to ``previous_response_id`` alike (which continues it, as any finished response)."""
    from skippy.engine.protocols.responses.types import ResponsesRequest

    path = tmp_path / "responses.db"
    store = SqliteStore(path, max_size=100)
    for rid, age, background in (("resp_stale", 3600, True), ("resp_fresh", 0, True),
                                 ("resp_stale_stream", 3600, False)):
        turn = rapi.prepare(ResponsesRequest(input="hi", background=background, stream=not background), None,
                            model=MODEL, response_id=rid, created_at=int(time.time()) - age)
        store.put(turn.stored(turn.response([], "in_progress")))
    store.close()
    with Server(ARGS + ["--responses-store", f"sqlite:{path}", "--request-timeout", "600"],
                tmp_path / "server.log") as srv:
        client = openai_client(srv.base_url)
        stale = client.responses.retrieve("resp_stale")
        assert stale.status == "failed" and "stopped" in stale.error.message
        assert client.responses.retrieve("resp_stale_stream").status == "failed"  # a stream's, the same rule
        assert client.responses.retrieve("resp_fresh").status == "in_progress"  # it may still run elsewhere
        # continuing reads it the same way (one rule): a failed response is continued with what it stored (its
        # input, no output); one that may still run elsewhere is refused until it has finished
        follow = client.responses.create(model=MODEL, input="And then?", previous_response_id="resp_stale",
                                         temperature=0, max_output_tokens=4)
        assert follow.status in ("completed", "incomplete")
        items = client.responses.input_items.list(follow.id, order="asc").data
        assert [item.content[0].text for item in items] == ["hi", "And then?"]
        with pytest.raises(openai.BadRequestError, match="in_progress") as info:
            client.responses.create(model=MODEL, input="And then?", previous_response_id="resp_fresh")
        assert info.value.body["param"] == "previous_response_id"
        assert client.responses.cancel("resp_fresh").status == "cancelled"


def test_integers_beyond_64_bits_in_a_request_are_stored_exactly(server) -> None:
    """A request holding an integer msgpack cannot carry (``max_output_tokens``, a number in a tool's schema)
    is answered and stored (exactly: JSON), streamed, in the background and not: no 500, no store error; its
    ``max_output_tokens`` is clamped to the room left, as chat's ``max_tokens``. (A JSON schema ends each reply
    after a few tokens.)"""
    big = 10**30
    client = openai_client(server.base_url)
    tool = {"type": "function", "name": "f", "description": "f",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer", "default": big}}}}
    short = {"format": {"type": "json_schema", "name": "a", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": False}}}
    errors = read_metrics(server.base_url).get("skippy:responses_store_errors_total{op=put}", 0)
    first = client.responses.create(model=MODEL, input="Hi.", temperature=0, max_output_tokens=big, tools=[tool],
                                    tool_choice="none", text=short)
    assert first.status == "completed" and first.max_output_tokens == big
    got = client.responses.retrieve(first.id)
    assert got.max_output_tokens == big and got.tools[0].parameters["properties"]["x"]["default"] == big
    with client.responses.stream(model=MODEL, input="And then?", previous_response_id=first.id, temperature=0,
                                 max_output_tokens=big, text=short) as stream:
        streamed = stream.get_final_response()
    assert streamed.status == "completed" and client.responses.retrieve(streamed.id).max_output_tokens == big
    queued = client.responses.create(model=MODEL, input="Hi.", background=True, max_output_tokens=big, text=short)
    deadline = time.monotonic() + 60
    while (polled := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert polled.status == "completed" and polled.max_output_tokens == big
    assert read_metrics(server.base_url).get("skippy:responses_store_errors_total{op=put}", 0) == errors
