"""``--reader-wait``: with the wait off the request tasks write a step's tokens while the next decode runs, and every
stream still gets all its tokens; ``/props`` says which the server runs with (``auto`` resolved)."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from tests.support import Server

PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "List three prime numbers.",
           "Count from one to ten.", "Name a colour.", "What is two plus two?", "Say hello.", "Describe a cat."]


@pytest.fixture(scope="module")
def nowait_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "8", "--n-ctx", "2048", "--reader-wait", "off"],
                tmp_path_factory.mktemp("nowait") / "server.log") as srv:
        yield srv


def test_props_say_whether_the_loop_waits_for_readers(server: Server, nowait_server: Server) -> None:
    # the shared server runs llama.cpp on every core (--threads' default): auto waits there
    assert httpx.get(server.base_url + "/props").json()["reader_wait"] is True
    assert httpx.get(nowait_server.base_url + "/props").json()["reader_wait"] is False


async def test_concurrent_streams_get_every_token_without_the_wait(nowait_server: Server) -> None:
    """8 streams at once (multi-step runs of 8 sequences): each one's chunks carry as many tokens (their
    logprobs entries) as its usage counts, the text is theirs, and the stream ends with a finish reason."""
    results: dict[str, tuple[str, list[str], int, str | None]] = {}

    async def stream(client: httpx.AsyncClient, prompt: str) -> None:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 48, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}, "logprobs": True}
        text, tokens, finish, usage = "", [], None, -1
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]["completion_tokens"]
                for choice in chunk["choices"]:
                    text += choice["delta"].get("content") or ""
                    tokens += [t["token"] for t in ((choice.get("logprobs") or {}).get("content") or [])]
                    finish = choice.get("finish_reason") or finish
        results[prompt] = (text, tokens, usage, finish)

    async with httpx.AsyncClient(base_url=nowait_server.base_url, timeout=120) as client:
        async with trio.open_nursery() as nursery:
            for prompt in PROMPTS:
                nursery.start_soon(stream, client, prompt)
    for prompt in PROMPTS:
        text, tokens, usage, finish = results[prompt]
        assert finish in ("stop", "length") and text, results[prompt]
        assert len(tokens) == usage and "".join(tokens) == text, results[prompt]
