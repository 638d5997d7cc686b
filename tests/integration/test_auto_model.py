"""``model: "auto"``: the server chooses the model (skippy/engine/routing.py, docs/guides/multiple-models.md).

One real ``skippy serve`` with three models: SmolLM2-135M-Instruct (the default; its template has no
native tool calls), Gemma 3 270M (no template: ChatML, no native tools) and ``smol-tools``, a copy of
SmolLM2's GGUF whose ``tokenizer.chat_template`` is Qwen 2.5's (native Hermes-style tool calls), written
by the fixture with gguf-py. The hook policy of ``tests/integration/hook_policy.py`` shows that ``auto``
turns the hooks on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.paths import CHAT_TEMPLATES
from tests.sse import DONE, iter_sse
from tests.support import GEMMA, Server, gemma_path

ROOT = Path(__file__).resolve().parents[2]
SMOL_ID = "SmolLM2-135M-Instruct"
TOOLS_ID = "smol-tools"
QWEN = CHAT_TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"
PROMPT = [{"role": "user", "content": "Name three colors."}]
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                         "parameters": {"type": "object", "required": ["city"],
                                                        "properties": {"city": {"type": "string"}}}}}

pytestmark = pytest.mark.skipif(gemma_path() is None or not QWEN.is_file(),
                                reason=f"{GEMMA} is not in the model cache, or the chat-template fixtures are missing")


@pytest.fixture(scope="module")
def auto_server(tmp_path_factory: pytest.TempPathFactory):
    from skippy.models import resolve_model

    tmp = tmp_path_factory.mktemp("auto")
    tools_gguf = tmp / f"{TOOLS_ID}.gguf"  # SmolLM2 with a template that calls tools natively
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--chat-template-file", str(QWEN),
                    "--force", str(resolve_model("smollm2")), str(tools_gguf)], check=True, capture_output=True)
    args = ["--model", "smollm2", "--model", GEMMA, "--model", str(tools_gguf), "--parallel", "2",
            "--n-ctx", "1024", "--hook-policy", "tests.integration.hook_policy:make"]
    with Server(args, tmp / "server.log", env={"PYTHONPATH": str(ROOT)}) as srv:
        yield srv


def _post(srv: Server, path: str, body: dict) -> dict:
    r = httpx.post(srv.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _chat(srv: Server, **body) -> dict:
    return _post(srv, "/v1/chat/completions", {"messages": PROMPT, "max_tokens": 8, "temperature": 0, **body})


def test_models_lists_auto_after_the_served_models(auto_server: Server) -> None:
    data = httpx.get(auto_server.base_url + "/v1/models", timeout=30).json()["data"]
    assert [m["id"] for m in data] == [SMOL_ID, GEMMA, TOOLS_ID, "auto"]
    assert (data[-1]["state"], data[-1]["status"], data[-1]["object"]) == ("loaded", {"value": "loaded"}, "model")
    one = httpx.get(auto_server.base_url + "/v1/models/auto", timeout=30)
    assert one.status_code == 200 and one.json()["id"] == "auto"


def test_auto_without_tools_is_the_default_model_on_every_api(auto_server: Server) -> None:
    chat = _chat(auto_server, model="auto")
    assert chat["model"] == SMOL_ID and chat["choices"][0]["message"]["content"]
    assert _chat(auto_server, model="AUTO")["model"] == SMOL_ID  # case-insensitive, as model names
    with httpx.stream("POST", auto_server.base_url + "/v1/chat/completions", timeout=120,
                      json={"model": "auto", "messages": PROMPT, "max_tokens": 4, "stream": True}) as resp:
        chunks = [c for c in iter_sse(resp) if c != DONE]
    assert chunks and {c["model"] for c in chunks} == {SMOL_ID}
    completion = _post(auto_server, "/v1/completions", {"model": "auto", "prompt": "Red, green and", "max_tokens": 4})
    assert completion["model"] == SMOL_ID
    response = _post(auto_server, "/v1/responses", {"model": "auto", "input": "Say hi.", "max_output_tokens": 8})
    assert response["model"] == SMOL_ID and response["output"]
    message = _post(auto_server, "/v1/messages", {"model": "auto", "max_tokens": 8, "messages": PROMPT})
    assert message["model"] == SMOL_ID and message["type"] == "message"


def test_auto_with_tools_goes_to_a_model_whose_template_calls_tools_natively(auto_server: Server) -> None:
    # smol-tools has not loaded yet: its capabilities are unknown, so the default model answers
    body = {"model": "auto", "tools": [TOOL], "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "max_tokens": 16}
    assert _chat(auto_server, **body)["model"] == SMOL_ID
    for model in (GEMMA, TOOLS_ID):  # a request naming a model loads it; then its capabilities are known
        assert _chat(auto_server, model=model)["model"] == model
    caps = {m: httpx.get(auto_server.base_url + "/props", params={"model": m}, timeout=30).json()["chat_template_caps"]
            for m in (SMOL_ID, GEMMA, TOOLS_ID)}
    assert {m: c["supports_tools"] for m, c in caps.items()} == {SMOL_ID: False, GEMMA: False, TOOLS_ID: True}
    assert _chat(auto_server, **body)["model"] == TOOLS_ID
    response = _post(auto_server, "/v1/responses", {"model": "auto", "input": "Weather in Paris?",
                                                    "max_output_tokens": 16, "tools": [
                                                        {"type": "function", **TOOL["function"]}]})
    assert response["model"] == TOOLS_ID
    message = _post(auto_server, "/v1/messages", {"model": "auto", "max_tokens": 16, "messages": PROMPT, "tools": [
        {"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}]})
    assert message["model"] == TOOLS_ID
    assert _chat(auto_server, model="auto")["model"] == SMOL_ID  # no tools: still the default
    assert _chat(auto_server, **{**body, "tools": []})["model"] == SMOL_ID  # an empty list offers no tools


def test_auto_turns_the_hooks_on_unless_the_request_turns_them_off(auto_server: Server) -> None:
    events = _chat(auto_server, model="auto", return_hook_events=True)["choices"][0]["hook_events"]
    assert events[0] == {"event": "before_chat", "action": "none", "position": 0}
    assert "hook_events" not in _chat(auto_server, model="auto", return_hook_events=True,
                                      mesh_hooks=False)["choices"][0]
    assert "hook_events" not in _chat(auto_server, model=SMOL_ID, return_hook_events=True)["choices"][0]


def test_one_model_without_peers_takes_auto_as_itself_and_does_not_list_it(server: Server) -> None:
    reply = _chat(server, model="auto")
    assert reply["model"] == SMOL_ID  # the model that answered, not "auto"
    assert "auto" not in [m["id"] for m in httpx.get(server.base_url + "/v1/models", timeout=30).json()["data"]]
    assert httpx.get(server.base_url + "/v1/models/auto", timeout=30).json()["id"] == "auto"
