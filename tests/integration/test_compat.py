"""Client compatibility on first contact (issue 16): model names, context, assistant prefill, reasoning_effort,
tool calls as agents need them, request validation, unknown fields, SSE keep-alive, disconnect metrics.

Real model, real ``skippy serve``, the official ``openai`` client where it applies.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from tests.paths import CHAT_TEMPLATES
from tests.support import ASK, NAMED, SYSTEM, WEATHER, Server, check_call, openai_client

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def alias_server(tmp_path_factory: pytest.TempPathFactory):
    """Default --n-ctx, two aliases, strict fields off; 2 slots."""
    with Server(["--parallel", "2", "--alias", "gpt-4o-mini", "--alias", "local-model"],
                tmp_path_factory.mktemp("alias") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def ping_server(tmp_path_factory: pytest.TempPathFactory):
    """One slot (a second request waits in the queue), keep-alive every 0.2 s, --n-ctx 0, --strict-fields,
    the Qwen3 template (it reads enable_thinking)."""
    with Server(["--parallel", "1", "--n-ctx", "0", "--sse-ping-interval", "0.2", "--strict-fields",
                 "--chat-template", str(CHAT_TEMPLATES / "Qwen-Qwen3-0.6B.jinja")],
                tmp_path_factory.mktemp("ping") / "server.log") as srv:
        yield srv


def _chat(base_url: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(base_url + "/v1/chat/completions", json=body, timeout=120, **kw)


# -- model names --------------------------------------------------------------------------------------

def test_any_model_name_is_served_and_echoed(server: Server) -> None:
    client = openai_client(server.base_url)
    for name in ("gpt-4o", "llama3", MODEL):
        r = client.chat.completions.create(model=name, messages=ASK, max_tokens=3, temperature=0)
        assert r.model == name and r.choices[0].message.content is not None
    r = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Hello", max_tokens=2)
    assert r.model == "gpt-3.5-turbo-instruct"


def test_aliases_models_list_and_retrieve(alias_server: Server) -> None:
    client = openai_client(alias_server.base_url)
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL, "gpt-4o-mini", "local-model"]
    for m in models:
        # a real creation time (the model file's), not 0
        assert m.created > 1_500_000_000 and m.created <= time.time() + 60
        assert m.model_extra["meta"]["n_ctx"] == 8192
    got = client.models.retrieve("gpt-4o-mini")
    assert got.id == "gpt-4o-mini" and got.created == models[0].created
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("no-such-model")
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"
    r = client.chat.completions.create(model="local-model", messages=ASK, max_tokens=2)
    assert r.model == "local-model"


# -- context ------------------------------------------------------------------------------------------

def test_default_context_fits_max_tokens_4096(alias_server: Server) -> None:
    client = openai_client(alias_server.base_url)
    # SYSTEM + a greeting: the answer is short, the room asked for (4096) must fit the default context
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[SYSTEM, {"role": "user", "content": "Hi"}], max_tokens=4096, temperature=0)
    r = raw.parse()
    assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens > 0
    assert "x-skippy-max-tokens-clamped" not in raw.headers  # it fits: not clamped
    props = httpx.get(alias_server.base_url + "/props", timeout=10).json()
    assert props["n_ctx"] == 8192 == props["default_generation_settings"]["n_ctx"]


def test_n_ctx_zero_is_the_training_context(ping_server: Server) -> None:
    meta = httpx.get(ping_server.base_url + "/v1/models", timeout=10).json()["data"][0]["meta"]
    assert meta["n_ctx"] == meta["n_ctx_train"] == 8192
    assert httpx.get(ping_server.base_url + "/props", timeout=10).json()["n_ctx"] == 8192


# -- assistant prefill --------------------------------------------------------------------------------

PREFILL = [{"role": "user", "content": "List three colours, separated by commas."},
           {"role": "assistant", "content": "Red, green,"}]


def test_assistant_prefill_continues_the_message(server: Server) -> None:
    client = openai_client(server.base_url)
    prompt = httpx.post(server.base_url + "/apply-template", json={"messages": PREFILL}, timeout=30).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\nRed, green,")  # the turn stays open
    r = client.chat.completions.create(model=MODEL, messages=PREFILL, max_tokens=12, temperature=0,
                                       extra_body={"cache_prompt": False})
    # the content is only the continuation: what the model writes after the prefilled text
    raw = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0,
                                    extra_body={"cache_prompt": False})
    assert r.choices[0].message.content == raw.choices[0].text
    assert not r.choices[0].message.content.startswith("Red, green,")
    # streamed: the same continuation
    chunks = list(client.chat.completions.create(model=MODEL, messages=PREFILL, max_tokens=12, temperature=0,
                                                 stream=True, extra_body={"cache_prompt": False}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content


def test_vllm_prefill_fields(server: Server) -> None:
    def prompt(**fields) -> str:
        resp = httpx.post(server.base_url + "/apply-template", json={"messages": PREFILL, **fields}, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()["prompt"]

    assert prompt(continue_final_message=True, add_generation_prompt=False).endswith("Red, green,")
    closed = prompt(continue_final_message=False)
    assert closed.endswith("Red, green,<|im_end|>\n<|im_start|>assistant\n")
    assert prompt(add_generation_prompt=False).endswith("Red, green,<|im_end|>\n")
    client = openai_client(server.base_url)
    r = client.chat.completions.create(model=MODEL, messages=PREFILL, max_tokens=4,
                                       extra_body={"continue_final_message": True, "add_generation_prompt": False})
    assert r.choices[0].finish_reason in ("stop", "length")
    for body, param in (({"continue_final_message": True, "add_generation_prompt": True}, "add_generation_prompt"),
                        ({"continue_final_message": True, "messages": ASK}, "continue_final_message")):
        resp = _chat(server.base_url, {"messages": PREFILL, "max_tokens": 2, **body})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param


# -- reasoning_effort ---------------------------------------------------------------------------------

def test_reasoning_effort_reaches_the_template(ping_server: Server) -> None:
    def prompt(**fields) -> str:
        resp = httpx.post(ping_server.base_url + "/apply-template", json={"messages": ASK, **fields}, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()["prompt"]

    # Qwen3's template closes the thinking block when enable_thinking is false
    assert prompt(reasoning_effort="none").endswith("<think>\n\n</think>\n\n")
    assert prompt(reasoning_effort="minimal").endswith("<think>\n\n</think>\n\n")
    assert prompt(reasoning_effort="high").endswith("<|im_start|>assistant\n")
    assert prompt(reasoning_effort="none", enable_thinking=True).endswith("<|im_start|>assistant\n")
    client = openai_client(ping_server.base_url)
    none = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1, reasoning_effort="none")
    high = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1, reasoning_effort="high")
    assert none.usage.prompt_tokens > high.usage.prompt_tokens
    resp = _chat(ping_server.base_url, {"messages": ASK, "reasoning_effort": "extreme"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "reasoning_effort"


# -- tool calls as agents need them -------------------------------------------------------------------

def test_tool_call_cut_off_by_max_tokens_is_length_without_syntax(server: Server) -> None:
    client = openai_client(server.base_url)
    kwargs = dict(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=8)
    r = client.chat.completions.create(**kwargs)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert not choice.message.tool_calls  # the incomplete call is dropped
    assert "TOOL_CALL" not in (choice.message.content or "") and "{" not in (choice.message.content or "")
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert "TOOL_CALL" not in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


HISTORY = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "user", "content": "And in London?"},
]


def test_tool_choice_none_output_keeps_the_models_tool_call_text_as_content(server: Server) -> None:
    """Where no call may be made, the TOOL_CALL text the model copies from the history is its reply (issue 35.11:
    it was stripped, and the reply came back empty)."""
    # greedy, SmolLM2 answers this history with another TOOL_CALL line (checked through /v1/completions)
    prompt = httpx.post(server.base_url + "/apply-template", json={"messages": HISTORY}, timeout=30).json()["prompt"]
    raw = httpx.post(server.base_url + "/v1/completions", json={"prompt": prompt, "temperature": 0,
                                                                  "max_tokens": 40}, timeout=60).json()
    assert "TOOL_CALL" in raw["choices"][0]["text"]
    client = openai_client(server.base_url)
    for extra in ({"tools": [WEATHER], "tool_choice": "none"}, {}):
        r = client.chat.completions.create(model=MODEL, messages=HISTORY, temperature=0, max_tokens=40, **extra)
        content = r.choices[0].message.content or ""
        assert "TOOL_CALL" in content and not r.choices[0].message.tool_calls
        assert content == raw["choices"][0]["text"].strip()
        chunks = list(client.chat.completions.create(model=MODEL, messages=HISTORY, temperature=0, max_tokens=40,
                                                     stream=True, **extra))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content
        assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)


@pytest.mark.parametrize("tool_choice", ["required", NAMED])
def test_forced_choice_gives_one_call_unless_parallel(server: Server, tool_choice) -> None:
    client = openai_client(server.base_url)
    kwargs = dict(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice=tool_choice, temperature=0,
                  max_tokens=120)
    r = client.chat.completions.create(**kwargs)
    assert r.choices[0].finish_reason == "tool_calls" and len(r.choices[0].message.tool_calls) == 1
    check_call(r.choices[0].message.tool_calls[0].function.name, r.choices[0].message.tool_calls[0].function.arguments)
    many = client.chat.completions.create(parallel_tool_calls=True, **kwargs)
    if tool_choice == "required":  # the request may ask for parallel calls (SmolLM2 then repeats the call, greedy)
        assert len(many.choices[0].message.tool_calls) >= 2
    else:  # a named tool is one call whatever parallel_tool_calls says (issue 35.15)
        assert many.choices[0].finish_reason == "tool_calls" and len(many.choices[0].message.tool_calls) == 1


# -- request validation -------------------------------------------------------------------------------

DUP = [WEATHER, WEATHER]
BAD_REQUIRED = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": "city"}}}


@pytest.mark.parametrize("body, param", [
    ({"messages": ASK, "tool_choice": "required"}, "tool_choice"),
    ({"messages": ASK, "tool_choice": NAMED}, "tool_choice"),
    ({"messages": ASK, "tools": [], "tool_choice": "required"}, "tool_choice"),
    ({"messages": ASK, "tools": DUP}, "tools[1].function.name"),
    ({"messages": ASK, "tools": [BAD_REQUIRED]}, "tools[0].function.parameters.required"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "system"}, {"role": "user", "content": "x"}]}, "messages[0].content"),
    ({"messages": [SYSTEM, {"role": "user", "content": None}]}, "messages[1].content"),
    ({"messages": ASK, "extra_body": {"chat_template": "{{ messages[0].nothing.deeper }}"}}, "chat_template"),
])
def test_validation_errors_name_the_field(server: Server, body: dict, param: str) -> None:
    client = openai_client(server.base_url)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, max_tokens=2, **body)
    err = info.value.body
    assert err["param"] == param, err
    # no Python exception text: no jinja/Python object names, exception class names or tracebacks
    assert not re.search(r"dict object|NoneType|Traceback|[A-Z][a-z]+Error\b|object has no attribute",
                         err["message"]), err["message"]


def test_unknown_fields_are_named_in_a_header_and_logged_once(server: Server) -> None:
    body = {"messages": ASK, "max_tokenz": 5, "vendor_flag": True, "max_tokens": 2}
    for _ in range(2):
        resp = _chat(server.base_url, body)
        assert resp.status_code == 200
        assert resp.headers["X-Skippy-Ignored-Fields"] == "max_tokenz, vendor_flag"
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json={**body, "stream": True},
                      timeout=60) as resp:
        assert resp.headers["X-Skippy-Ignored-Fields"] == "max_tokenz, vendor_flag"
        resp.read()
    # any key a client sends is named in an ASCII header (JSON-escaped), on every route with a body
    odd = httpx.post(server.base_url + "/tokenize", json={"content": "hi", "naïve\n": 1}, timeout=30)
    assert odd.status_code == 200 and odd.headers["X-Skippy-Ignored-Fields"] == "na\\u00efve\\n"
    known = _chat(server.base_url, {"messages": ASK, "max_tokens": 2, "temperature": 0})
    assert "X-Skippy-Ignored-Fields" not in known.headers
    log = server.log()
    warnings = [line for line in log.splitlines() if "WARNING" in line and "'max_tokenz'" in line]
    assert len(warnings) == 1 and "'vendor_flag'" in warnings[0]


def test_strict_fields_refuse_unknown_fields(ping_server: Server) -> None:
    client = openai_client(ping_server.base_url)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=ASK, extra_body={"max_tokenz": 5})
    assert info.value.body["param"] == "max_tokenz" and info.value.body["code"] == "unknown_field"
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2)
    assert r.choices[0].finish_reason in ("stop", "length")
    # llama-server's own fields are known fields: llama.vim's requests pass (its chat warm-up, its streamed
    # instruction, a /completion with its FIM fields)
    for path, body in (("/v1/chat/completions", {"messages": ASK, "id_slot": 0, "n_predict": 0, "samplers": [],
                                                 "cache_prompt": True, "response_fields": [""]}),
                       ("/v1/chat/completions", {"messages": ASK, "id_slot": 3, "samplers": ["min_p", "temperature"],
                                                 "max_tokens": 2}),
                       ("/completion", {"prompt": "x = 1", "id_slot": 0, "n_predict": 2, "t_max_prompt_ms": 500,
                                        "t_max_predict_ms": 1000, "n_indent": 4, "response_fields": ["content"]})):
        got = httpx.post(ping_server.base_url + path, json=body, timeout=60)
        assert got.status_code == 200, (path, got.text)


def _metric(base_url: str, name: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_client_disconnect_is_counted_apart_from_4xx(server: Server) -> None:
    gone, fourxx = "skippy:http_client_disconnects_total", 'skippy:http_responses_total{status_class="4xx"}'
    before_gone, before_4xx = _metric(server.base_url, gone), _metric(server.base_url, fourxx)
    body = {"messages": ASK, "max_tokens": 400, "stream": True, "temperature": 0}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=60) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: ") and '"content"' in line and '"content":""' not in line:
                break  # the client goes away mid-stream
    deadline = time.monotonic() + 60
    while _metric(server.base_url, gone) < before_gone + 1:
        assert time.monotonic() < deadline, "the disconnect was never counted"
        time.sleep(0.1)
    assert _metric(server.base_url, fourxx) == before_4xx


def test_non_streamed_client_disconnect_is_counted_apart_from_4xx(server: Server) -> None:
    gone, fourxx = "skippy:http_client_disconnects_total", 'skippy:http_responses_total{status_class="4xx"}'
    before_gone, before_4xx = _metric(server.base_url, gone), _metric(server.base_url, fourxx)
    body = {"messages": ASK, "max_tokens": 400, "temperature": 0, "logit_bias": {"2": -100}}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up before the reply
        httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=0.5)
    deadline = time.monotonic() + 60
    while _metric(server.base_url, gone) < before_gone + 1:
        assert time.monotonic() < deadline, "the disconnect was never counted"
        time.sleep(0.1)
    assert _metric(server.base_url, fourxx) == before_4xx
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
    # its line's tokens= is what was generated before the client left (it said 0 beside completion_tokens=88)
    line = [x for x in server.log().splitlines() if "POST /v1/chat/completions client disconnected" in x][-1]
    tokens, completion = re.search(r" tokens=(\d+) ", line), re.search(r"completion_tokens=(\d+)", line)
    assert tokens and completion and tokens.group(1) == completion.group(1) and int(tokens.group(1)) > 0, line


def test_a_stream_left_before_its_first_chunk_is_a_disconnect(server: Server) -> None:
    # a /v1/completions stream sends nothing before its first token: a client that left during the prefill (or a
    # model load, or the queue) was neither logged nor counted
    gone = "skippy:http_client_disconnects_total"
    before = _metric(server.base_url, gone)
    logged = server.log().count("POST /v1/completions client disconnected")
    body = {"prompt": "The quick brown fox jumps over the lazy dog. " * 150, "max_tokens": 4, "stream": True,
            "cache_prompt": False}
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body, timeout=0.05) as resp:
            resp.read()
    deadline = time.monotonic() + 60
    while _metric(server.base_url, gone) < before + 1:
        assert time.monotonic() < deadline, "the disconnect was never counted"
        time.sleep(0.1)
    assert server.log().count("POST /v1/completions client disconnected") == logged + 1


# -- SSE keep-alive -----------------------------------------------------------------------------------

@contextlib.contextmanager
def _slot_busy(base: str) -> Iterator[Callable[[], None]]:
    """The server's one slot busy with a generation that cannot end early (end-of-generation tokens banned),
    until the block ends or it calls the ``release`` it is given: that closes the generation's stream, which
    cancels it."""
    stop = threading.Event()
    body = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 4000, "temperature": 0, "stream": True,
            "logit_bias": {"0": -100, "1": -100, "2": -100}}

    def generate() -> None:
        with httpx.stream("POST", base + "/v1/completions", json=body, timeout=600) as resp:
            for _ in resp.iter_lines():  # a line (a token or a ping) at least every 0.2 s
                if stop.is_set():
                    return

    def release() -> None:
        stop.set()
        worker.join()

    worker = threading.Thread(target=generate)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while httpx.get(base + "/health", timeout=10).json()["slots_processing"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield release
    finally:
        release()


def _queued_lines(base: str, path: str, body: dict, pings: int) -> list[str]:
    """The non-empty lines of a stream sent while the one slot is busy; the slot is released once the stream
    has had ``pings`` keep-alive comments."""
    lines: list[str] = []
    with _slot_busy(base) as release, httpx.stream("POST", base + path, json=body, timeout=120) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line:
                lines.append(line)
            if lines.count(": ping") == pings:
                release()
    return lines


def test_sse_keep_alive_while_queued(ping_server: Server) -> None:
    base = ping_server.base_url
    lines = _queued_lines(base, "/v1/chat/completions",
                          {"messages": ASK, "max_tokens": 3, "stream": True, "temperature": 0}, pings=2)
    # the stream waited in the queue behind the long request: after its first chunk (the role, sent at
    # once) keep-alive comments came until its first token
    data = [i for i, line in enumerate(lines) if line.startswith("data: ")]
    assert lines[data[1] - 2:data[1]] == [": ping", ": ping"], lines[:8]
    assert lines[-1] == "data: [DONE]"
    # the openai client reads a stream with comments in it
    client = openai_client(base)
    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_sse_keep_alive_before_the_first_token(ping_server: Server) -> None:
    """A text completion has no role chunk: its headers go out with a keep-alive comment before its first
    token (a client or proxy with a read timeout shorter than the queue wait kept no stream)."""
    base = ping_server.base_url
    for path, body, end in (("/v1/completions", {"prompt": "Hi", "max_tokens": 3, "stream": True}, "[DONE]"),
                            ("/completion", {"prompt": "Hi", "n_predict": 3, "stream": True}, '"stop":true')):
        lines = _queued_lines(base, path, body, pings=2)
        first = next(i for i, line in enumerate(lines) if line.startswith("data: "))
        assert first >= 2 and set(lines[:first]) == {": ping"}, (path, lines[:4])  # a busy machine: more pings
        assert end in lines[-1], (path, lines[-1])
    # a request error still has its status: it is raised before the wait
    with _slot_busy(base):
        r = httpx.post(base + "/v1/completions", json={"prompt": "Hi", "max_tokens": 3, "stream": True,
                                                       "logit_bias": {"x": 1}}, timeout=120)
    assert r.status_code == 400, r.text
