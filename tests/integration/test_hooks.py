"""Generation hooks end to end: a Python policy loaded by the real server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from tests.integration.conftest import SYSTEM, Server
from tests.integration.hook_policy import INJECTED
from tests.sse import DONE, aiter_sse, iter_sse

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
