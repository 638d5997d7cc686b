"""Generation hooks end to end: a Python policy loaded by the real server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio

from tests.integration.hook_policy import INJECTED
from tests.sse import DONE, aiter_sse, iter_sse
from tests.support import SYSTEM, Server, check, json_schema, sse_schema

ROOT = Path(__file__).resolve().parents[2]
STORY = [SYSTEM, {"role": "user", "content": "Write a short story about a lighthouse keeper."}]


def _hook_server(tmp_path_factory: pytest.TempPathFactory, hook_timeout: float) -> Server:
    # threshold 0 nats: every token is high-entropy, so the mid-generation hook fires at 12 decoded tokens
    return Server(["--parallel", "4", "--n-ctx", "1024", "--hook-policy", "tests.integration.hook_policy:make",
                   "--hook-timeout", str(hook_timeout), "--high-entropy-threshold", "0"],
                  tmp_path_factory.mktemp("hooks") / "server.log", env={"PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def hook_server(tmp_path_factory: pytest.TempPathFactory):
    with _hook_server(tmp_path_factory, 8) as srv:
        yield srv


@pytest.fixture(scope="module")
def patient_hook_server(tmp_path_factory: pytest.TempPathFactory):
    """A hook timeout no test reaches: a parked hook is released by the test, whatever the machine's speed."""
    with _hook_server(tmp_path_factory, 3600) as srv:
        yield srv


def chat(base_url: str, user: str | None, **extra) -> httpx.Response:
    body = {"messages": STORY, "temperature": 0, "max_tokens": 40, "mesh_hooks": True, **extra}
    if user:
        body["user"] = user
    return httpx.post(base_url + "/v1/chat/completions", json=body, timeout=120)


def stream_text(base_url: str, user: str, **extra) -> tuple[str, dict]:
    body = {"messages": STORY, "temperature": 0, "max_tokens": 40, "mesh_hooks": True, "user": user,
            "stream": True, "stream_options": {"include_usage": True}, **extra}
    text, last = [], {}
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=120) as resp:
        for chunk in iter_sse(resp):
            if chunk != DONE:
                for c in chunk["choices"]:
                    text.append(c["delta"].get("content") or "")
                last = chunk
    return "".join(text), last


def test_inject_changes_continuation_and_stays_hidden(hook_server: Server) -> None:
    control = chat(hook_server.base_url, None, mesh_hooks=False).json()
    injected = chat(hook_server.base_url, "inject").json()
    text = injected["choices"][0]["message"]["content"]
    assert text != control["choices"][0]["message"]["content"]
    assert INJECTED.strip() not in text and "reconsider" not in text
    n_injected = len(httpx.post(hook_server.base_url + "/tokenize", json={"content": INJECTED}).json()["tokens"])
    assert injected["usage"]["injected_tokens"] == n_injected
    assert "injected_tokens" not in control["usage"]
    # the text before the hook fired is the control's: the hook fires after 12 decoded tokens
    prefix = chat(hook_server.base_url, None, mesh_hooks=False, max_tokens=11).json()
    assert text.startswith(prefix["choices"][0]["message"]["content"])

    streamed, usage_chunk = stream_text(hook_server.base_url, "inject")
    assert streamed == text
    assert usage_chunk["usage"]["injected_tokens"] == n_injected


def test_injections_keep_a_forced_tool_call_and_a_json_schema_whole(hook_server: Server) -> None:
    """A grammar took the token sampled before an injection: it is kept, so a forced call and a schema's JSON
    stay whole however many times the policy injects (the first token's was lost: 'OOL_CALL', 'et_weather')."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = chat(hook_server.base_url, "inject_always", messages=weather, tools=tools, tool_choice="required",
             max_tokens=48, return_hook_events=True).json()
    choice = r["choices"][0]
    assert "inject" in [e["action"] for e in choice["hook_events"]] and r["usage"]["injected_tokens"] > 0
    assert choice["finish_reason"] == "tool_calls", choice
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and "city" in json.loads(call["function"]["arguments"])
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = chat(hook_server.base_url, "inject_always", messages=[{"role": "user", "content": "Invent a person."}],
             response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
             max_tokens=60).json()
    assert r["usage"]["injected_tokens"] > 0 and r["choices"][0]["finish_reason"] == "stop"
    person = json.loads(r["choices"][0]["message"]["content"])
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)


def test_stop_outcome_reports_its_reason(hook_server: Server) -> None:
    r = chat(hook_server.base_url, "stop").json()
    assert r["choices"][0]["finish_reason"] == "policy_stop"
    assert r["usage"]["completion_tokens"] == 11  # the 12th token was held for the hook and discarded
    _, last = stream_text(hook_server.base_url, "stop", stream_options={"include_usage": False})
    assert last["choices"][0]["finish_reason"] == "policy_stop"


def test_deny_gives_error_envelope(hook_server: Server) -> None:
    r = chat(hook_server.base_url, "deny")
    assert r.status_code == 403
    assert r.json()["error"]["message"] == "requests from deny are not allowed"
    r = chat(hook_server.base_url, "deny400", stream=True)
    assert r.status_code == 400 and r.json()["error"]["code"] == "denied_by_hook"
    # without mesh_hooks the policy is not consulted
    assert chat(hook_server.base_url, "deny", mesh_hooks=False).status_code == 200


def test_timeout_and_exception_complete_normally(hook_server: Server) -> None:
    # "slow" sleeps 30 s in mid_generation; the server's --hook-timeout is 8 s
    before = httpx.get(hook_server.base_url + "/props").json()["hooks"]
    control = chat(hook_server.base_url, None, mesh_hooks=False).json()
    slow = chat(hook_server.base_url, "slow").json()
    broken = chat(hook_server.base_url, "raise").json()
    for r in (slow, broken):
        assert r["choices"][0]["finish_reason"] == control["choices"][0]["finish_reason"]
        assert r["choices"][0]["message"]["content"] == control["choices"][0]["message"]["content"]
    after = httpx.get(hook_server.base_url + "/props").json()["hooks"]
    assert after["mid_generation"]["timeouts"] > before["mid_generation"]["timeouts"]
    assert after["after_prefill"]["errors"] == before["after_prefill"]["errors"] + 1


async def test_parked_sequence_does_not_stall_others(patient_hook_server: Server) -> None:
    hook_server = patient_hook_server  # the blocked hook never times out: only the test's release ends it
    hooks_before = httpx.get(hook_server.base_url + "/props").json()["hooks"]["mid_generation"]
    events: list[str] = []
    body = {"messages": STORY, "temperature": 0, "max_tokens": 40, "stream": True}
    async with httpx.AsyncClient(base_url=hook_server.base_url, timeout=300) as client:
        async def blocked() -> None:
            async with client.stream("POST", "/v1/chat/completions",
                                     json={**body, "mesh_hooks": True, "user": "block"}) as resp:
                async for event in aiter_sse(resp):
                    if event == DONE:
                        events.append("block:done")

        async def other() -> None:
            while True:  # poll (bounded by the fail_after below) until the blocked request is parked in its hook
                hooks = (await client.get("/props")).json()["hooks"]["mid_generation"]
                if hooks["calls"] > hooks_before["calls"]:
                    break
                await trio.sleep(0.02)
            n = 0
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                async for event in aiter_sse(resp):
                    n += event != DONE
            events.append(f"other:done:{n}")
            r = await client.post("/v1/chat/completions", json={**body, "stream": False, "max_tokens": 1,
                                                                "mesh_hooks": True, "user": "release"})
            assert r.status_code == 200
            events.append("released")

        with trio.fail_after(600):  # bounds the polls; a stalled scheduler fails here
            async with trio.open_nursery() as nursery:
                nursery.start_soon(blocked)
                nursery.start_soon(other)
    # the other request streamed in full while the blocked one was parked, which ended only when released
    assert events[0].startswith("other:done") and int(events[0].split(":")[2]) > 10
    assert events[1:] == ["released", "block:done"]


def test_return_signals_in_logprobs(hook_server: Server) -> None:
    r = chat(hook_server.base_url, None, mesh_hooks=False, logprobs=True, return_signals=True, max_tokens=5).json()
    for entry in r["choices"][0]["logprobs"]["content"]:
        assert entry["entropy"] >= 0 and entry["margin"] >= 0


# -- return_hook_events: the client sees what the hook policy did, and where ---------------------------

def test_hook_events_are_returned_where_they_happen_only_to_a_client_that_asks(hook_server: Server) -> None:
    import jsonschema

    n_injected = len(httpx.post(hook_server.base_url + "/tokenize", json={"content": INJECTED}).json()["tokens"])
    body = {"logprobs": True, "return_signals": True, "return_hook_events": True}
    r = chat(hook_server.base_url, "inject", **body).json()
    events = r["choices"][0]["hook_events"]
    # threshold 0 nats: after_prefill sees the first token (no action), mid_generation fires at the 12th
    # decoded token, which is discarded for the injection: 11 tokens came before it
    assert [(e["event"], e["action"], e["position"]) for e in events] == [
        ("before_chat", "none", 0), ("after_prefill", "none", 0), ("mid_generation", "inject", 11)]
    assert events[0] == {"event": "before_chat", "action": "none", "position": 0}  # no token, no signals
    inject = events[2]
    assert inject["text"] == INJECTED and inject["injected_tokens"] == n_injected
    assert inject["window"]["token_count"] == 12 and inject["entropy"] >= 0 and inject["margin"] >= 0
    assert "text" not in events[1] and "window" not in events[1]
    assert INJECTED.strip() not in r["choices"][0]["message"]["content"]
    # no action emits the token the hook saw: after_prefill's numbers are the first token's
    first = r["choices"][0]["logprobs"]["content"][0]
    assert (events[1]["entropy"], events[1]["margin"]) == (first["entropy"], first["margin"])
    doc = httpx.get(hook_server.base_url + "/openapi.json").json()
    check(doc, json_schema(doc, "/v1/chat/completions", "post"), r)

    # streamed: each event rides on the chunk where it happens, after `position` tokens
    stream_body = {"messages": STORY, "temperature": 0, "max_tokens": 40, "mesh_hooks": True, "user": "stop",
                   "stream": True, **body}
    seen, positions, last = 0, [], None
    with httpx.stream("POST", hook_server.base_url + "/v1/chat/completions", json=stream_body, timeout=120) as resp:
        for chunk in iter_sse(resp):
            if chunk == DONE:
                continue
            check(doc, sse_schema(doc, "/v1/chat/completions"), chunk)
            for c in chunk["choices"]:
                for e in c.get("hook_events", []):
                    positions.append((e["event"], e["action"], e["position"], seen, e.get("reason")))
                seen += len((c.get("logprobs") or {}).get("content") or [])
                last = c["finish_reason"] or last
    assert positions == [("before_chat", "none", 0, 0, None), ("after_prefill", "none", 0, 0, None),
                         ("mid_generation", "stop", 11, 11, "policy_stop")]
    assert seen == 11 and last == "policy_stop"

    # not asked, or the policy did not run for this request: no field
    assert "hook_events" not in chat(hook_server.base_url, "inject").json()["choices"][0]
    assert "hook_events" not in chat(hook_server.base_url, None, mesh_hooks=False, return_hook_events=True
                                     ).json()["choices"][0]
    with pytest.raises(jsonschema.ValidationError):  # the schema really describes the field
        jsonschema.validate({"event": "mid_generation", "action": "explode", "position": 1},
                            {**doc["components"]["schemas"]["HookEvent"], "components": doc["components"]})


def test_a_before_chat_decision_is_reported_on_the_first_chunk(hook_server: Server) -> None:
    events = chat(hook_server.base_url, None, return_hook_events=True, max_tokens=3).json()
    assert events["choices"][0]["hook_events"][0] == {"event": "before_chat", "action": "none", "position": 0}
    body = {"messages": STORY, "temperature": 0, "max_tokens": 3, "mesh_hooks": True,
            "stream": True, "return_hook_events": True}
    with httpx.stream("POST", hook_server.base_url + "/v1/chat/completions", json=body, timeout=120) as resp:
        first = next(c for c in iter_sse(resp) if c != DONE)
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert first["choices"][0]["hook_events"] == [{"event": "before_chat", "action": "none", "position": 0}]
