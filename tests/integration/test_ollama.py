"""Ollama's native generation API (/api/chat, /api/generate, /api/embed, /api/embeddings) on the real server,
with the official ``ollama`` client and raw httpx for the framing and the errors.

The default SmolLM2 template has no tools (they are emulated); the Qwen 2.5 template calls them natively
(``<tool_call>``); DeepSeek V4's template opens ``<think>`` when thinking is on. Sampling is greedy
(``temperature: 0``).
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import ollama
import pytest

from tests.paths import CHAT_TEMPLATES
from tests.support import Server

MODEL = "smollm2:135m"
GREEDY = {"temperature": 0, "num_predict": 16}
ASK = [{"role": "user", "content": "Name a colour of the sky."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object", "required": ["city"],
                                                           "properties": {"city": {"type": "string"}}}}}


def client(srv: Server) -> ollama.Client:
    return ollama.Client(host=srv.base_url, timeout=120)


def ndjson(srv: Server, path: str, body: dict) -> tuple[httpx.Response, list[dict]]:
    with httpx.stream("POST", srv.base_url + path, json=body, timeout=120) as resp:
        lines = [line for line in resp.iter_lines() if line]
        return resp, [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory: pytest.TempPathFactory):
    """The default model with DeepSeek V4's template: thinking on opens <think> in the prompt, off closes it."""
    template = CHAT_TEMPLATES / "deepseek-ai-DeepSeek-V4.jinja"
    with Server(["--parallel", "2", "--n-ctx", "2048", "--chat-template", str(template)],
                tmp_path_factory.mktemp("thinking") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def embed_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "2", "--n-ctx", "1024", "--embeddings", "--pooling", "mean"],
                tmp_path_factory.mktemp("embed") / "server.log") as srv:
        yield srv


def test_chat_is_the_chat_completion_and_the_stream_the_same_text(server: Server) -> None:
    c = client(server)
    reply = c.chat(model=MODEL, messages=ASK, options=GREEDY, stream=False)
    assert reply.model == MODEL and reply.done and reply.done_reason in ("stop", "length")
    assert reply.message.role == "assistant" and reply.message.content
    assert reply.prompt_eval_count > 0 and 0 < reply.eval_count <= 16
    assert reply.total_duration >= reply.eval_duration > 0 and reply.prompt_eval_duration > 0
    chat = httpx.post(server.base_url + "/v1/chat/completions", timeout=120, json={
        "messages": ASK, "temperature": 0, "max_tokens": 16}).json()
    assert reply.message.content == chat["choices"][0]["message"]["content"]
    parts = list(c.chat(model=MODEL, messages=ASK, options=GREEDY, stream=True))
    assert len(parts) > 3 and all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == reply.message.content
    assert parts[-1].eval_count == reply.eval_count and parts[-1].done_reason == reply.done_reason


def test_stream_framing_is_ndjson_one_object_a_line(server: Server) -> None:
    resp, lines = ndjson(server, "/api/chat", {"model": MODEL, "messages": ASK, "options": GREEDY})  # stream: default
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/x-ndjson")
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] in ("stop", "length")
    for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
                "eval_duration"):
        assert isinstance(lines[-1][key], int), key
    assert all(line["done"] is False and line["model"] == MODEL and line["created_at"].endswith("Z")
               for line in lines[:-1])
    assert lines[-1]["eval_count"] == len(lines) - 1 or lines[-1]["eval_count"] >= len(lines) - 1


def test_generate_templated_raw_and_streamed(server: Server) -> None:
    c = client(server)
    templated = c.generate(model=MODEL, prompt="Say hello.", system="You are terse.", options=GREEDY)
    raw = c.generate(model=MODEL, prompt="The capital of France is", raw=True, options=GREEDY)
    assert templated.done and templated.response and raw.response
    native = httpx.post(server.base_url + "/v1/completions", timeout=120, json={
        "prompt": "The capital of France is", "temperature": 0, "max_tokens": 16}).json()
    assert raw.response == native["choices"][0]["text"]  # raw: the prompt as is, no template
    parts = list(c.generate(model=MODEL, prompt="The capital of France is", raw=True, options=GREEDY, stream=True))
    assert "".join(p.response for p in parts) == raw.response and parts[-1].done
    loaded = c.generate(model=MODEL, prompt="")  # Ollama's preload: an empty prompt answers at once
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""


def test_logprobs_and_top_logprobs_through_the_official_client(server: Server) -> None:
    """Ollama's ``logprobs`` / ``top_logprobs``: one entry per generated token (the chat route's, in Ollama's
    shape), the stream's lines adding up to the same list; raw generate has them too."""
    c = client(server)
    reply = c.chat(model=MODEL, messages=ASK, options=GREEDY, logprobs=True, top_logprobs=3)
    assert len(reply.logprobs) == reply.eval_count and "".join(e.token for e in reply.logprobs) == \
        reply.message.content
    assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob
               for e in reply.logprobs)
    chat = httpx.post(server.base_url + "/v1/chat/completions", timeout=120, json={
        "messages": ASK, "temperature": 0, "max_tokens": 16, "logprobs": True, "top_logprobs": 3}).json()
    assert [(e.token, e.logprob) for e in reply.logprobs] == [
        (e["token"], e["logprob"]) for e in chat["choices"][0]["logprobs"]["content"]]
    parts = list(c.chat(model=MODEL, messages=ASK, options=GREEDY, logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for p in parts for e in (p.logprobs or [])]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in reply.logprobs]
    raw = c.generate(model=MODEL, prompt="The capital of France is", raw=True, options=GREEDY, logprobs=True)
    assert len(raw.logprobs) == raw.eval_count and "".join(e.token for e in raw.logprobs) == raw.response
    assert c.chat(model=MODEL, messages=ASK, options=GREEDY).logprobs is None  # not asked: not sent
    resp = httpx.post(server.base_url + "/api/chat", timeout=60, json={
        "model": MODEL, "messages": ASK, "stream": False, "logprobs": True, "top_logprobs": 21})
    assert resp.status_code == 400 and "top_logprobs" in resp.json()["error"]


def test_options_seed_and_num_predict(server: Server) -> None:
    c = client(server)
    opts = {"temperature": 1.0, "seed": 7, "num_predict": 12, "top_k": 40, "top_p": 0.9, "repeat_penalty": 1.1}
    a = c.chat(model=MODEL, messages=ASK, options=opts)
    b = c.chat(model=MODEL, messages=ASK, options=opts)
    assert a.message.content == b.message.content and a.eval_count <= 12
    short = c.chat(model=MODEL, messages=ASK, options={"num_predict": 3, "temperature": 0})
    assert short.eval_count == 3 and short.done_reason == "length"
    resp = httpx.post(server.base_url + "/api/chat", timeout=120, json={
        "model": MODEL, "messages": ASK, "stream": False, "options": {"num_predict": 2, "num_gpu": 99, "bogus": 1}})
    assert resp.status_code == 200
    assert set(resp.headers["x-skippy-ignored-fields"].split(", ")) == {"options.num_gpu", "options.bogus"}


def test_format_json_schema_is_enforced(server: Server) -> None:
    schema = {"type": "object", "properties": {"colour": {"type": "string"}, "hex": {"type": "string"}},
              "required": ["colour", "hex"], "additionalProperties": False}
    reply = client(server).chat(model=MODEL, messages=[{"role": "user", "content": "A colour as JSON."}],
                                format=schema, options={"temperature": 0, "num_predict": 60})
    jsonschema.validate(json.loads(reply.message.content), schema)
    plain = client(server).generate(model=MODEL, prompt="A colour as JSON.", format="json",
                                    options={"temperature": 0, "num_predict": 60})
    assert isinstance(json.loads(plain.response), dict)


@pytest.mark.parametrize("fixture", ["server", "qwen_server"], ids=["emulated-tools", "native-tools"])
def test_tools_round_trip(request: pytest.FixtureRequest, fixture: str) -> None:
    """A tool call comes back with its arguments as an object (Ollama's shape), streamed whole; its result
    goes back with ``tool_name`` and the model answers the next turn."""
    srv = request.getfixturevalue(fixture)
    c = client(srv)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    # a 135M model does not call tools on its own reliably: the call is forced with OpenAI's tool_choice, which
    # /api/chat takes as an extension (the official client has no argument for it: raw httpx)
    body = {"model": MODEL, "messages": ask, "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "options": {"temperature": 0, "num_predict": 200}}
    resp = httpx.post(srv.base_url + "/api/chat", json={**body, "stream": False}, timeout=120)
    reply = ollama.ChatResponse(**resp.json())
    [call] = reply.message.tool_calls or []
    assert call.function.name == "get_weather" and isinstance(resp.json()["message"]["tool_calls"][0]["function"][
        "arguments"], dict)
    jsonschema.validate(call.function.arguments, WEATHER["function"]["parameters"])
    resp, lines = ndjson(srv, "/api/chat", body)
    with_calls = [line for line in lines if line["message"].get("tool_calls")]
    assert len(with_calls) == 1, lines  # sent whole, once
    assert with_calls[0]["message"]["tool_calls"][0]["function"]["arguments"] == call.function.arguments
    follow = c.chat(model=MODEL, tools=[WEATHER], options=GREEDY, messages=[
        *ask, {"role": "assistant", "content": "", "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny, 21 C"}])
    assert follow.done and follow.eval_count > 0  # the call and its result rendered: the model went on
    # a tool-call turn whose content is null (Ollama's decoder reads null as ""), as several clients send it
    raw = {"model": MODEL, "stream": False, "tools": [WEATHER], "options": {"num_predict": 2}, "messages": [
        *ask, {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny, 21 C"}]}
    resp = httpx.post(srv.base_url + "/api/chat", json=raw, timeout=120)
    assert resp.status_code == 200 and resp.json()["done"], resp.text


def test_think_puts_the_reasoning_in_thinking(thinking_server: Server) -> None:
    c = client(thinking_server)
    thinking = c.chat(model=MODEL, messages=ASK, think=True, options={"temperature": 0, "num_predict": 12})
    assert thinking.message.thinking and not thinking.message.content  # the budget ends inside <think>
    plain = c.chat(model=MODEL, messages=ASK, think=False, options={"temperature": 0, "num_predict": 12})
    assert plain.message.content and not plain.message.thinking
    gen = c.generate(model=MODEL, prompt="Name a colour.", think=True, options={"temperature": 0, "num_predict": 8})
    assert gen.thinking and not gen.response
    resp = httpx.post(thinking_server.base_url + "/api/chat", timeout=30, json={
        "model": MODEL, "messages": ASK, "think": "very"})
    assert resp.status_code == 400 and "think" in resp.json()["error"]


def test_think_on_a_model_that_cannot_think_is_refused_as_ollama(server: Server) -> None:
    """SmolLM2's template has no reasoning block (``/api/show`` lists no ``thinking``): Ollama answers ``think``
    on (``true`` or an effort) with 400 ``"<model>" does not support thinking`` on both routes, raw included;
    ``think: false`` and no ``think`` are ordinary requests."""
    c = client(server)
    assert "thinking" not in c.show(MODEL).capabilities
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(model=MODEL, messages=ASK, think=True, options=GREEDY)
    assert err.value.status_code == 400 and err.value.error == f'"{MODEL}" does not support thinking'
    for path, body in (("/api/chat", {"messages": ASK}), ("/api/generate", {"prompt": "Hi"}),
                       ("/api/generate", {"prompt": "Hi", "raw": True}), ("/api/chat", {"messages": []})):
        for think in (True, "high"):
            resp = httpx.post(server.base_url + path, timeout=60, json={"model": MODEL, "think": think, **body})
            assert resp.status_code == 400, (path, body, think, resp.text)
            assert resp.json() == {"error": f'"{MODEL}" does not support thinking'}
    assert c.chat(model=MODEL, messages=ASK, think=False, options=GREEDY).message.content
    assert c.generate(model=MODEL, prompt="Hi", think=False, options=GREEDY).response
    assert c.chat(model=MODEL, messages=ASK, options=GREEDY).message.content


def test_no_messages_loads_the_model_as_an_empty_prompt_does(server: Server) -> None:
    """Ollama's "Load a model" on ``/api/chat``: no ``messages`` (empty, or the field left out) answers one final
    object at once, ``done_reason: "load"``, an empty assistant message and no counts, streamed or not."""
    c = client(server)
    loaded = c.chat(model=MODEL, messages=[])
    assert loaded.done and loaded.done_reason == "load" and loaded.model == MODEL
    assert loaded.message.role == "assistant" and loaded.message.content == "" and loaded.eval_count is None
    for body in ({"model": MODEL}, {"model": MODEL, "messages": [], "stream": True}):
        resp = httpx.post(server.base_url + "/api/chat", json=body, timeout=60)
        assert resp.status_code == 200, resp.text
        reply = resp.json()
        assert reply.pop("created_at").endswith("Z")
        assert reply == {"model": MODEL, "message": {"role": "assistant", "content": ""}, "done": True,
                         "done_reason": "load"}


def test_embed_and_legacy_embeddings(embed_server: Server) -> None:
    c = client(embed_server)
    out = c.embed(model=MODEL, input=["the sky is blue", "grass is green"])
    assert len(out.embeddings) == 2 and len(out.embeddings[0]) > 100 and out.prompt_eval_count > 0
    norm = sum(x * x for x in out.embeddings[0]) ** 0.5
    assert abs(norm - 1.0) < 1e-3
    one = c.embed(model=MODEL, input="the sky is blue")
    assert one.embeddings[0] == pytest.approx(out.embeddings[0], rel=1e-4, abs=1e-5)
    legacy = c.embeddings(model=MODEL, prompt="the sky is blue")
    assert legacy.embedding == pytest.approx(out.embeddings[0], rel=1e-4, abs=1e-5)
    for empty in ("", [], None):  # Ollama's preload of an embedding model: loaded, no embeddings
        body = {"model": MODEL} if empty is None else {"model": MODEL, "input": empty}
        resp = httpx.post(embed_server.base_url + "/api/embed", json=body, timeout=30)
        assert resp.status_code == 200 and resp.json()["embeddings"] == [], resp.text
    resp = httpx.post(embed_server.base_url + "/api/embeddings", json={"model": MODEL, "prompt": ""}, timeout=30)
    assert resp.status_code == 200 and resp.json() == {"embedding": []}, resp.text  # the legacy route's preload


@pytest.mark.parametrize("path,text", [("/api/embed", "input"), ("/api/embeddings", "prompt")])
def test_embed_options_are_checked_as_on_chat(embed_server: Server, path: str, text: str) -> None:
    def post(options: dict) -> httpx.Response:
        return httpx.post(embed_server.base_url + path, json={"model": MODEL, text: "hi", "options": options},
                          timeout=30)

    bad = post({"temperature": "x"})
    assert bad.status_code == 400 and "temperature" in bad.json()["error"]
    big = post({"num_ctx": 10**9})  # above the server's context: not applied, named
    assert big.status_code == 200 and big.headers["X-Skippy-Ignored-Fields"] == "options.num_ctx"
    ok = post({"num_thread": 4, "foo": 1, "num_ctx": 512})  # none changes an embedding: named as not applied
    assert ok.status_code == 200 and ok.headers["X-Skippy-Ignored-Fields"] == "options.num_thread, options.foo"


def test_embed_without_embeddings_is_an_ollama_error(server: Server) -> None:
    for body in ({"model": MODEL, "input": "x"}, {"model": MODEL}):
        resp = httpx.post(server.base_url + "/api/embed", json=body, timeout=30)
        assert resp.status_code == 501 and "--embeddings" in resp.json()["error"]


@pytest.mark.parametrize("body,status,needle", [
    ({"model": "no-such-model:1b", "messages": ASK}, 404, 'model "no-such-model:1b" not found'),
    ({"model": MODEL, "messages": ASK, "options": {"temperature": "hot"}}, 400, "temperature"),
    ({"model": MODEL, "messages": ASK, "options": {"num_predict": -5}}, 400, "num_predict"),
    ({"model": MODEL, "messages": ASK, "format": "yaml"}, 400, "format"),
    ({"model": MODEL, "messages": ASK, "keep_alive": "soon"}, 400, "keep_alive"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400, "--mmproj"),
    ({"model": MODEL, "messages": ASK, "think": True}, 400, f'"{MODEL}" does not support thinking'),
    ({"messages": ASK}, 400, "model"),
], ids=["unknown-model", "option-type", "num-predict", "format", "keep-alive", "images", "think",
        "no-model"])
def test_bad_chat_input_is_an_ollama_error_and_the_server_keeps_serving(server: Server, body: dict, status: int,
                                                                         needle: str) -> None:
    resp = httpx.post(server.base_url + "/api/chat", json={**body, "stream": False}, timeout=30)
    assert resp.status_code == status, resp.text
    assert set(resp.json()) == {"error"} and needle in resp.json()["error"]
    assert client(server).chat(model=MODEL, messages=ASK, options={"num_predict": 2}).done


def test_a_num_ctx_above_the_servers_context_runs_in_it_and_is_named(server: Server) -> None:
    # LlamaIndex's Ollama sends the training context /api/show reports (32768 for Gemma 3) as options.num_ctx on
    # every request; above --n-ctx it was a 400, so every request failed. Ollama runs such a request in the
    # context it has; the option is named as not applied.
    for path, body in (("/api/chat", {"messages": ASK}), ("/api/generate", {"prompt": "Hi"})):
        resp = httpx.post(server.base_url + path, timeout=60, json={
            "model": MODEL, "stream": False, **body, "options": {"num_ctx": 10**6, "num_predict": 2}})
        assert resp.status_code == 200 and resp.json()["done"] is True, resp.text
        assert resp.headers["X-Skippy-Ignored-Fields"] == "options.num_ctx"
    fits = httpx.post(server.base_url + "/api/chat", timeout=60, json={
        "model": MODEL, "stream": False, "messages": ASK, "options": {"num_ctx": 512, "num_predict": 2}})
    assert fits.status_code == 200 and "X-Skippy-Ignored-Fields" not in fits.headers


@pytest.mark.parametrize("raw,status", [(b"{not json", 400), (b"[]", 400)])
def test_malformed_bodies(server: Server, raw: bytes, status: int) -> None:
    for path in ("/api/chat", "/api/generate", "/api/embed"):
        resp = httpx.post(server.base_url + path, content=raw, timeout=30)
        assert resp.status_code == status and set(resp.json()) == {"error"}, (path, resp.text)


def test_generate_refuses_a_go_template_and_accepts_context(server: Server) -> None:
    resp = httpx.post(server.base_url + "/api/generate", timeout=30, json={
        "model": MODEL, "prompt": "hi", "template": "{{ .Prompt }}", "stream": False})
    assert resp.status_code == 400 and "template" in resp.json()["error"]
    ok = httpx.post(server.base_url + "/api/generate", timeout=60, json={
        "model": MODEL, "prompt": "hi", "context": [1, 2, 3], "stream": False, "options": {"num_predict": 2}})
    assert ok.status_code == 200 and ok.json()["done"] is True


def test_unknown_api_route_is_an_ollama_404(server: Server) -> None:
    resp = httpx.get(server.base_url + "/api/nothing", timeout=30)
    assert resp.status_code == 404 and set(resp.json()) == {"error"}


def test_a_stream_that_fails_midway_ends_with_an_error_line(tmp_path) -> None:
    """Past --request-timeout the generation is cancelled; the NDJSON stream (already 200) ends with one
    ``{"error": ...}`` line, as Ollama's does, and the server keeps serving."""
    with Server(["--parallel", "1", "--n-ctx", "2048", "--threads", "1", "--request-timeout", "1"],
                tmp_path / "server.log") as srv:
        resp, lines = ndjson(srv, "/api/generate", {"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "raw": True,
                                                    "options": {"num_predict": 1500, "temperature": 0}})
        assert resp.status_code == 200 and len(lines) > 1
        assert set(lines[-1]) == {"error"} and "--request-timeout" in lines[-1]["error"]
        assert all(line.get("done") is False for line in lines[:-1])
        assert client(srv).generate(model=MODEL, prompt="Hi", raw=True, options={"num_predict": 2}).done
