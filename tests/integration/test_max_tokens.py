"""A ``max_tokens`` beyond the context (issue 35): clamped by default on every route, as llama-server and Ollama
do, with the clamp reported (``X-Skippy-Max-Tokens-Clamped`` and the request's log line); refused with a 400
naming the flag under ``--no-clamp-max-tokens`` (OpenAI's and vLLM's answer). The real clients send what
agents send: Claude Code's ``max_tokens: 32000`` through the anthropic SDK, 16384 through openai's.
"""

from __future__ import annotations

import re
import time

import anthropic
import httpx
import openai
import pytest

from tests.sse import DONE, sse_events
from tests.support import Server

N_CTX = 256
LONG = "word " * 200  # 200 tokens, 231 as a chat: the room left in a 256-token context is a few dozen tokens
TEXT = "word " * 225  # a raw prompt (no chat template) leaves about as much
HEADER = "x-skippy-max-tokens-clamped"


@pytest.fixture(scope="module")
def clamp_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "2", "--n-ctx", str(N_CTX)], tmp_path_factory.mktemp("clamp") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "1", "--n-ctx", str(N_CTX), "--no-clamp-max-tokens"],
                tmp_path_factory.mktemp("strict") / "server.log") as srv:
        yield srv


def _oai(srv: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _granted(headers: httpx.Headers, asked: int) -> int:
    match = re.fullmatch(rf"{asked} -> (\d+)", headers[HEADER])
    assert match, headers[HEADER]
    return int(match.group(1))


def _log_line(srv: Server, request_id: str) -> str:
    deadline = time.monotonic() + 30  # a stream's line is written once its last byte is sent
    while time.monotonic() < deadline:
        lines = [line for line in srv.log().splitlines() if f"id={request_id} " in line]
        if lines:
            return lines[0]
        time.sleep(0.05)
    raise AssertionError(f"no log line for {request_id}")


def test_chat_clamps_and_says_so(clamp_server: Server) -> None:
    raw = _oai(clamp_server).chat.completions.with_raw_response.create(
        model="any", messages=[{"role": "user", "content": LONG}], max_tokens=16384, temperature=0,
        extra_headers={"X-Request-Id": "clamp-chat-1"})
    reply = raw.parse()
    usage = reply.usage
    granted = _granted(raw.headers, 16384)
    assert granted == N_CTX - usage.prompt_tokens and usage.completion_tokens <= granted
    assert reply.choices[0].finish_reason in ("stop", "length")
    line = _log_line(clamp_server, "clamp-chat-1")
    assert " 200 " in line and f"max_tokens_asked=16384 max_tokens_granted={granted}" in line


def test_a_max_tokens_that_fits_is_not_reported(clamp_server: Server) -> None:
    raw = _oai(clamp_server).chat.completions.with_raw_response.create(
        model="any", messages=[{"role": "user", "content": LONG}], max_tokens=3, temperature=0)
    assert raw.parse().usage.completion_tokens <= 3 and HEADER not in raw.headers


def test_a_chat_stream_clamps_with_the_header(clamp_server: Server) -> None:
    body = {"messages": [{"role": "user", "content": LONG}], "max_tokens": 32000, "stream": True,
            "stream_options": {"include_usage": True}}
    resp = httpx.post(clamp_server.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200
    events = [e for e in sse_events(resp) if e != DONE]
    usage = events[-1]["usage"]
    assert _granted(resp.headers, 32000) == N_CTX - usage["prompt_tokens"] >= usage["completion_tokens"]


def test_anthropic_messages_with_claude_codes_max_tokens(clamp_server: Server) -> None:
    client = anthropic.Anthropic(base_url=clamp_server.base_url, api_key="unused", max_retries=0, timeout=120)
    raw = client.messages.with_raw_response.create(model="any", max_tokens=32000,
                                                   messages=[{"role": "user", "content": LONG}])
    msg = raw.parse()
    granted = _granted(raw.headers, 32000)
    prompt = msg.usage.input_tokens + msg.usage.cache_read_input_tokens  # Anthropic counts cache reads apart
    assert granted == N_CTX - prompt and msg.usage.output_tokens <= granted
    assert msg.stop_reason in ("end_turn", "max_tokens")


def test_text_completions_responses_and_native_completion_clamp(clamp_server: Server) -> None:
    client = _oai(clamp_server)
    raw = client.completions.with_raw_response.create(model="any", prompt=TEXT, max_tokens=16384)
    assert _granted(raw.headers, 16384) == N_CTX - raw.parse().usage.prompt_tokens
    raw = client.responses.with_raw_response.create(model="any", input=LONG, max_output_tokens=32000)
    assert _granted(raw.headers, 32000) == N_CTX - raw.parse().usage.input_tokens
    resp = httpx.post(clamp_server.base_url + "/completion", json={"prompt": TEXT, "n_predict": 32000}, timeout=120)
    assert resp.status_code == 200
    assert _granted(resp.headers, 32000) == N_CTX - resp.json()["tokens_evaluated"]


def test_a_prompt_that_alone_fills_the_context_is_still_400(clamp_server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        _oai(clamp_server).chat.completions.create(
            model="any", messages=[{"role": "user", "content": "word " * 400}], max_tokens=32000)
    assert exc.value.body["code"] == "context_length_exceeded" and "exceeds the available" in exc.value.body["message"]


def test_strict_server_refuses_naming_the_flag(strict_server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        _oai(strict_server).chat.completions.create(
            model="any", messages=[{"role": "user", "content": LONG}], max_tokens=16384)
    body = exc.value.body
    assert body["code"] == "context_length_exceeded" and body["param"] == "max_tokens"
    assert "--no-clamp-max-tokens" in body["message"] and re.search(r"at most \d+", body["message"])
    client = anthropic.Anthropic(base_url=strict_server.base_url, api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(anthropic.BadRequestError) as aexc:
        client.messages.create(model="any", max_tokens=32000, messages=[{"role": "user", "content": LONG}])
    assert "--no-clamp-max-tokens" in str(aexc.value)
    raw = _oai(strict_server).chat.completions.with_raw_response.create(
        model="any", messages=[{"role": "user", "content": LONG}], max_tokens=3)
    assert raw.parse().usage.completion_tokens <= 3 and HEADER not in raw.headers
