"""Bad input gets an OpenAI error envelope (4xx) and the server keeps serving."""

from __future__ import annotations

import httpx
import pytest

from tests.support import SYSTEM, assert_envelope

OK = {"messages": [SYSTEM, {"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}


@pytest.mark.parametrize("body, status, code, param", [
    (b"{not json", 400, None, None),
    (b"[1, 2]", 400, None, None),
    (b'{"messages": "hi"}', 400, None, "messages"),
    (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', 400, None, "temperature"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400, None, "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "x"}], "n": 9}', 400, None, "n"),  # > --parallel 8
    (b'{"messages": [{"role": "user", "content": "x"}], "n": 0}', 400, None, "n"),
    (b'{"messages": [{"role": "user", "content": "x"}], "top_p": 7}', 400, None, "top_p"),
    (b'{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"abc": 1}}', 400, None, "logit_bias"),
    (b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, None, "messages[0].role"),
    (b'{"messages": []}', 400, None, "messages"),
    (b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
     400, None, "messages[0].content[0]"),
])
def test_bad_chat_requests(base_url: str, body: bytes, status: int, code: str | None, param: str | None) -> None:
    resp = httpx.post(base_url + "/v1/chat/completions", content=body,
                      headers={"content-type": "application/json"}, timeout=30)
    assert_envelope(resp, status, code, param)
    # and the server keeps serving
    assert httpx.post(base_url + "/v1/chat/completions", json=OK, timeout=60).status_code == 200


def test_bad_stream_request_fails_before_headers(base_url: str) -> None:
    body = {"messages": [{"role": "user", "content": "word " * 3000}], "stream": True}  # over --n-ctx 2048
    resp = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60)
    assert_envelope(resp, 400, "context_length_exceeded")


def test_prompt_alone_over_context(base_url: str) -> None:
    long = "word " * 3000  # the test server runs --n-ctx 2048
    resp = httpx.post(base_url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": long}]}, timeout=60)
    assert_envelope(resp, 400, "context_length_exceeded", "messages")
    assert resp.json()["error"]["n_ctx"] == 2048  # llama-server's numbers beside OpenAI's code
    for path, body in (("/v1/completions", {"prompt": long}), ("/completion", {"prompt": long})):
        resp = httpx.post(base_url + path, json=body, timeout=60)
        error = resp.json()["error"]
        assert resp.status_code == 400 and error["param"] == "prompt", resp.text
        assert error["n_ctx"] == 2048 and error["n_prompt_tokens"] > 2048
    assert error["type"] == "exceed_context_size_error"  # llama-server's type on its own route


def test_other_routes_bad_input(base_url: str) -> None:
    assert_envelope(httpx.post(base_url + "/v1/completions", json={"prompt": ["a", 5]}), 400, param="prompt")  # mixed
    assert_envelope(httpx.post(base_url + "/detokenize", json={"tokens": [10**9]}), 400, param="tokens")
    assert_envelope(httpx.post(base_url + "/tokenize", json={"content": {"text": "x"}}), 400)  # no content: no tokens
    assert_envelope(httpx.get(base_url + "/v1/nothing"), 404)
    assert_envelope(httpx.get(base_url + "/v1/chat/completions"), 405)


def _nested_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def _body(extra: dict) -> bytes:
    return httpx.Request("POST", "/", json={**OK, **extra}).content


@pytest.mark.parametrize("body, param", [
    # an ignored field nested 1000 levels (msgspec recurses while skipping it)
    (b'{"messages": [{"role": "user", "content": "x"}], "metadata": ' + b"[" * 1000 + b"]" * 1000 + b"}", None),
    (_body({"tools": [{"type": "function", "function": {"name": "f", "parameters": _nested_schema(300)}}],
            "tool_choice": "required"}), "tools"),
    (_body({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": _nested_schema(250)}}}),
     "response_format"),
])
def test_deeply_nested_json_is_a_400(base_url: str, body: bytes, param: str | None) -> None:
    resp = httpx.post(base_url + "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"},
                      timeout=60)
    assert_envelope(resp, 400, param=param)
    assert httpx.post(base_url + "/v1/chat/completions", json=OK, timeout=60).status_code == 200


def test_null_for_an_optional_field_is_its_default_on_every_route(base_url: str) -> None:
    # OpenAI clients send null for fields they leave unset; a required field given null stays a 400
    nulls = {"return_hook_events": None, "stream": None, "cache_prompt": None, "logprobs": None}
    resp = httpx.post(base_url + "/v1/chat/completions", json={**OK, **nulls}, timeout=60)
    assert resp.status_code == 200 and resp.json()["object"] == "chat.completion", resp.text
    resp = httpx.post(base_url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "echo": None,
                                                          "stream": None}, timeout=60)
    assert resp.status_code == 200 and resp.json()["object"] == "text_completion", resp.text
    resp = httpx.post(base_url + "/v1/messages", json={"model": "m", "max_tokens": 2, "stream": None,
                                                       "messages": [{"role": "user", "content": "Hi"}]}, timeout=60)
    assert resp.status_code == 200 and resp.json()["type"] == "message", resp.text
    assert_envelope(httpx.post(base_url + "/v1/chat/completions", json={"messages": None, "stream": None}),
                    400, param="messages")
