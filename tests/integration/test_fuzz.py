"""Fuzzing the live server: schemathesis against /openapi.json, hypothesis against the chat route.

Both are bounded (schemathesis by a time budget, hypothesis by max_examples) so the suite
stays well under ten minutes on 2 cores; the server has a small context (n_ctx 256) so any request that does
generate is short. Whatever comes in, the answer is 2xx or 4xx, never 5xx, and a streamed
answer never ends with a server error event.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skippy.engine.protocols.openai.types import ChatCompletionRequest
from skippy.models import DEFAULT_MODEL, resolve_model
from tests.sse import DONE, iter_sse
from tests.support import Server

SCHEMATHESIS_SECONDS = 60  # coverage phase (boundary and negative cases), then fuzzing until the budget is spent
HYPOTHESIS_EXAMPLES = 150


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory):
    # one llama.cpp thread: decoding does not collapse when other processes share the 2 cores;
    # a slot save path, --props and --embeddings, so slot actions, POST /props and /v1/embeddings are fuzzed past
    # llama-server's 501 for a server started without them (a 501 there is the server's configuration, not the
    # request's fault)
    # its own model cache (SKIPPY_HOME), the default model linked in: Ollama's /api/delete, /api/copy and
    # /api/pull are fuzzed too, and must never touch the real cache
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "home" / "models").mkdir(parents=True)
    model = Path(resolve_model(DEFAULT_MODEL))
    (tmp / "home" / "models" / model.name).symlink_to(model)
    with Server(["--model", str(tmp / "home" / "models" / model.name), "--parallel", "4", "--n-ctx", "256",
                 "--max-queue", "64", "--threads", "1",
                 "--slot-save-path", str(tmp / "slots"), "--props", "--embeddings", "--pooling", "mean",
                 "--embeddings-batch", "128"], tmp / "server.log", env={"SKIPPY_HOME": str(tmp / "home")}) as srv:
        yield srv


def assert_no_server_errors(srv: Server) -> None:
    log = srv.log()
    assert " 500 " not in log and " 502 " not in log and "Traceback" not in log and "unhandled error" not in log


def test_openapi_json_is_generated_from_the_request_types(fuzz_server: Server) -> None:
    doc = httpx.get(fuzz_server.base_url + "/openapi.json", timeout=10).json()
    assert doc["openapi"].startswith("3.1")
    schemas = doc["components"]["schemas"]
    _, expected = msgspec.json.schema_components([ChatCompletionRequest], ref_template="#/components/schemas/{name}")
    assert set(expected["ChatCompletionRequest"]["properties"]) == set(schemas["ChatCompletionRequest"]["properties"])
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ChatCompletionRequest")
    assert {"200", "default"} <= set(chat["responses"])
    routes = {"/v1/completions", "/v1/models", "/health", "/tokenize", "/detokenize", "/apply-template",
              "/v1/embeddings", "/v1/responses", "/v1/responses/{response_id}", "/v1/messages",
              "/v1/messages/count_tokens"}  # so schemathesis fuzzes them too
    assert routes <= set(doc["paths"])


def test_schemathesis_finds_no_5xx_and_no_schema_violation(fuzz_server: Server, tmp_path: Path) -> None:
    report = tmp_path / "schemathesis.json"
    cmd = [str(Path(sys.executable).parent / "schemathesis"), "run", fuzz_server.base_url + "/openapi.json",
           "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance,"
                       "status_code_conformance",
           "--max-time", str(SCHEMATHESIS_SECONDS), "--workers", "2", "--seed", "20261129",
           "--request-timeout", "120", "--report", "json", "--report-json-path", str(report)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    output = proc.stdout[-8000:] + proc.stderr[-2000:]
    summary = json.loads(report.read_text())
    cases = summary["test_cases"]
    print(f"\nschemathesis: {cases['generated']} test cases, {summary['running_time']:.1f}s, "
          f"errors {summary['errors']}")
    assert summary["failures"] == [] and cases["with_failures"] == 0, output
    # network errors (timeouts, resets) would be hangs or crashes of ours; schemathesis' own runtime
    # errors (e.g. CPython's "AST constructor recursion depth mismatch" in its generators) are not
    assert not [e for e in summary["errors"] if e["title"] != "Runtime Error"], output
    assert cases["generated"] >= 200, output
    assert_no_server_errors(fuzz_server)


# -- hypothesis: arbitrary JSON at the chat route ---------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats()
                | st.text(max_size=40))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)

TEMPLATES = [
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "{{ messages[0].__class__ }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ raise_exception('no') }}",
    "{% if %}",
]
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "wizard"]) | json_values,
     "content": st.text(max_size=60) | json_values},
    optional={"name": json_values, "tool_calls": json_values | st.just([{"id": "c1", "type": "function",
                                                                         "function": {"name": "f",
                                                                                      "arguments": "{}"}}]),
              "tool_call_id": json_values, "reasoning_content": st.text(max_size=20)})
tool = st.fixed_dictionaries({"type": st.just("function") | json_values,
                              "function": st.fixed_dictionaries({"name": st.text(max_size=10) | json_values},
                                                                optional={"parameters": json_values})})
chat_body = st.fixed_dictionaries(
    {"messages": st.lists(message, max_size=4) | json_values,
     "max_tokens": st.integers(-1, 4) | json_values},
    optional={"stream": st.booleans(), "temperature": json_values | st.floats(0, 2), "top_p": json_values,
              "top_k": json_values, "min_p": json_values, "seed": json_values, "stop": json_values,
              "logit_bias": json_values | st.dictionaries(st.integers(-5, 60000).map(str), st.floats(-100, 100)),
              "logprobs": st.booleans() | json_values, "top_logprobs": st.integers(-1, 30) | json_values,
              "n": json_values, "tools": st.lists(tool, max_size=3) | json_values,
              "tool_choice": st.sampled_from(["auto", "none", "required"]) | json_values,
              "response_format": st.sampled_from([{"type": "json_object"}, {"type": "text"}]) | json_values,
              "grammar": st.sampled_from(['root ::= "yes" | "no"', "root ::=", "x"]) | json_values,
              "chat_template": st.sampled_from(TEMPLATES) | json_values,
              "chat_template_kwargs": json_values, "reasoning_format": json_values,
              "stream_options": json_values, "model": json_values})


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN and Infinity become the non-JSON tokens the server must refuse


bodies = st.one_of(chat_body.map(encode), json_values.map(encode), st.binary(max_size=64))


def test_hypothesis_arbitrary_json_at_chat_route(fuzz_server: Server) -> None:
    client = httpx.Client(base_url=fuzz_server.base_url, timeout=120)
    statuses: dict[int, int] = {}

    @settings(max_examples=HYPOTHESIS_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(body=bodies)
    def check(body: bytes) -> None:
        with client.stream("POST", "/v1/chat/completions", content=body,
                           headers={"Content-Type": "application/json"}) as resp:
            statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
            assert 200 <= resp.status_code < 500, (resp.status_code, resp.read()[:500], body[:500])
            if resp.headers.get("content-type", "").startswith("text/event-stream"):
                for event in iter_sse(resp):
                    assert event == DONE or event.get("error", {}).get("type") != "server_error", event
            else:
                payload = resp.read()
                if resp.status_code >= 400:
                    assert set(json.loads(payload)["error"]) == {"message", "type", "param", "code"}

    try:
        check()
    finally:
        client.close()
    print(f"\nhypothesis: {sum(statuses.values())} bodies, statuses {dict(sorted(statuses.items()))}")
    assert sum(statuses.values()) >= HYPOTHESIS_EXAMPLES
    assert_no_server_errors(fuzz_server)
