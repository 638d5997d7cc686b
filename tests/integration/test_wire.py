"""Real responses of the real server validate against the schema it serves at /openapi.json.

The schema comes from the same msgspec Structs the engine builds its replies
with (skippy.engine.protocols.openai.wire); every field that is always sent is
``required`` and no object admits unknown fields, so a Struct that drifts
from what the routes really send fails here.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from tests.support import SYSTEM, Server, check, json_schema, sse_schema, validator

MESSAGES = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def doc(server: Server) -> dict[str, Any]:
    return httpx.get(server.base_url + "/openapi.json", timeout=10).json()


def post(base_url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base_url + path, json=body, timeout=120)


def stream(base_url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    with httpx.stream("POST", base_url + path, json={**body, "stream": True}, timeout=120) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    assert events
    return events


@pytest.mark.parametrize("body", [
    {"max_tokens": 8},
    {"max_tokens": 4, "logprobs": True, "top_logprobs": 2, "return_signals": True},
    {"max_tokens": 30, "stop": ["Paris"]},
    {"max_tokens": 60, "tools": TOOLS, "tool_choice": "required",
     "messages": [SYSTEM, {"role": "user", "content": "What is the weather in Paris?"}]},
    {"max_tokens": 4, "n": 2},
], ids=["plain", "logprobs", "stop", "tool_calls", "n"])
def test_chat_completion(base_url: str, doc: dict[str, Any], body: dict[str, Any]) -> None:
    resp = post(base_url, "/v1/chat/completions", {"messages": MESSAGES, "temperature": 0, **body})
    assert resp.status_code == 200
    reply = resp.json()
    check(doc, json_schema(doc, "/v1/chat/completions", "post"), reply)
    if "tools" in body:
        assert reply["choices"][0]["finish_reason"] == "tool_calls"  # the tool_calls shape was exercised


@pytest.mark.parametrize("body", [
    {"max_tokens": 8, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 1},
    {"max_tokens": 60, "tools": TOOLS, "tool_choice": "required",
     "messages": [SYSTEM, {"role": "user", "content": "What is the weather in Paris?"}]},
    {"max_tokens": 4, "n": 2, "stream_options": {"include_usage": True}},
], ids=["usage_logprobs", "tool_calls", "n"])
def test_chat_completion_chunks(base_url: str, doc: dict[str, Any], body: dict[str, Any]) -> None:
    chunks = stream(base_url, "/v1/chat/completions", {"messages": MESSAGES, "temperature": 0, **body})
    schema = sse_schema(doc, "/v1/chat/completions")
    for chunk in chunks:
        check(doc, schema, chunk)
    # a reply that may call tools starts as OpenAI starts a tool-call reply: content null, never ""
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None if "tools" in body else ""}


@pytest.mark.parametrize("body", [
    {"max_tokens": 6},
    {"max_tokens": 6, "logprobs": 2, "echo": True},
    {"max_tokens": 4, "n": 2, "prompt": ["The capital of France is", "Hello"], "logprobs": 1},
], ids=["plain", "echo_logprobs", "n_prompt_list"])
def test_text_completion(base_url: str, doc: dict[str, Any], body: dict[str, Any]) -> None:
    resp = post(base_url, "/v1/completions", {"prompt": "The capital of France is", "temperature": 0, **body})
    assert resp.status_code == 200
    check(doc, json_schema(doc, "/v1/completions", "post"), resp.json())
    chunks = stream(base_url, "/v1/completions", {"prompt": "The capital of France is", "temperature": 0,
                                                  "stream_options": {"include_usage": True}, **body})
    for chunk in chunks:
        check(doc, sse_schema(doc, "/v1/completions"), chunk)
    assert chunks[-1]["choices"] == [] and "usage" in chunks[-1]


def test_error_envelopes(base_url: str, doc: dict[str, Any]) -> None:
    not_found = httpx.get(base_url + "/v1/models/no-such-model", timeout=10)
    check(doc, json_schema(doc, "/v1/models/{model_id}", "get", "default"), not_found.json())
    bad_json = httpx.post(base_url + "/v1/chat/completions", content=b"{", timeout=10,
                          headers={"Content-Type": "application/json"})
    # a prompt that alone overflows the context (a max_tokens beyond it is clamped by default, not refused)
    too_long = post(base_url, "/v1/completions", {"prompt": "hi " * 4000, "max_tokens": 8})
    assert (not_found.status_code, bad_json.status_code, too_long.status_code) == (404, 400, 400)
    for resp in (not_found, bad_json, too_long):
        check(doc, json_schema(doc, "/v1/chat/completions", "post", "default"), resp.json())


def test_models_health_and_llama_server_routes(base_url: str, doc: dict[str, Any]) -> None:
    check(doc, json_schema(doc, "/v1/models", "get"), httpx.get(base_url + "/v1/models").json())
    check(doc, json_schema(doc, "/v1/models/{model_id}", "get"),
          httpx.get(base_url + "/v1/models/SmolLM2-135M-Instruct").json())
    check(doc, json_schema(doc, "/health", "get"), httpx.get(base_url + "/health").json())
    for body in ({"content": "héllo wörld"}, {"content": "héllo wörld", "with_pieces": True}):
        check(doc, json_schema(doc, "/tokenize", "post"), post(base_url, "/tokenize", body).json())
    check(doc, json_schema(doc, "/detokenize", "post"), post(base_url, "/detokenize", {"tokens": [28120]}).json())
    check(doc, json_schema(doc, "/apply-template", "post"),
          post(base_url, "/apply-template", {"messages": MESSAGES}).json())


def test_the_schema_refuses_a_missing_null_field_and_an_unknown_field(base_url: str, doc: dict[str, Any]) -> None:
    # what makes the tests above able to fail: a drifted Struct gives exactly these differences
    reply = post(base_url, "/v1/chat/completions", {"messages": MESSAGES, "temperature": 0, "max_tokens": 2}).json()
    schema = json_schema(doc, "/v1/chat/completions", "post")
    check(doc, schema, reply)
    missing = copy.deepcopy(reply)
    del missing["choices"][0]["logprobs"]  # sent as null, so required
    extra = copy.deepcopy(reply)
    extra["usage"]["surprise"] = 1
    wrong = copy.deepcopy(reply)
    wrong["timings"]["cache_n"] = "0"
    for bad in (missing, extra, wrong):
        assert not validator(doc, schema).is_valid(bad)
