"""Continuous batching is invisible in results, and a vanished client frees its sequence."""

from __future__ import annotations

import httpx
import trio

from tests.sse import DONE, aiter_sse
from tests.support import BATCH_PROMPTS, SYSTEM


async def stream_tokens(client: httpx.AsyncClient, prompt: str) -> str:
    body = {"messages": [SYSTEM, {"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 16,
            "cache_prompt": False, "stream": True}
    text = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        async for event in aiter_sse(resp):
            if event != DONE:
                for choice in event["choices"]:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)


async def test_concurrent_greedy_equals_sequential(base_url: str) -> None:
    # llama.cpp's logits shift slightly with the micro-batch a sequence shares (its neighbours'
    # count changes the matmul kernels), so greedy text can fork at a near-tie. These prompts
    # and 16 tokens were measured to hold (6 of 6 concurrent waves; "What is 2 + 2?" did not),
    # cold prefills (cache_prompt false) keep the cache out of it, and a token routed to the
    # wrong sequence still shows as a different answer.
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        sequential = [await stream_tokens(client, p) for p in BATCH_PROMPTS]
        concurrent: list[str | None] = [None] * len(BATCH_PROMPTS)

        async def one(i: int) -> None:
            concurrent[i] = await stream_tokens(client, BATCH_PROMPTS[i])

        async with trio.open_nursery() as nursery:
            for i in range(len(BATCH_PROMPTS)):
                nursery.start_soon(one, i)
    assert all(sequential)
    assert concurrent == sequential


async def test_late_request_joins_running_batch(base_url: str) -> None:
    # A request that arrives while another streams gets its first token before the first one ends.
    events: list[str] = []
    long_started = trio.Event()
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        async def long() -> None:
            body = {"messages": [SYSTEM, {"role": "user", "content": "Write a long story about a dragon."}],
                    "temperature": 0, "max_tokens": 200, "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                n = 0
                async for event in aiter_sse(resp):
                    n += event != DONE
                    if n == 5:
                        long_started.set()
                events.append("long:done")
                long_started.set()  # (a long stream of fewer than 5 chunks: short runs now and fails)

        async def short() -> None:
            await long_started.wait()
            await stream_tokens(client, "What is 2 + 2?")
            events.append("short:done")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long)
            nursery.start_soon(short)
    assert events.index("short:done") < events.index("long:done")


async def tokens_predicted(client: httpx.AsyncClient) -> float:
    """The server's ``llamacpp:tokens_predicted_total`` counter (tokens generated so far)."""
    metrics = (await client.get("/metrics")).text
    return next(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith("llamacpp:tokens_predicted_total"))


async def test_disconnect_frees_sequence(base_url: str) -> None:
    max_tokens = 1000
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        eos = (await client.get("/props")).json()["eos_token"]
        [eos_id] = (await client.post("/tokenize", json={"content": eos})).json()["tokens"]
        before = await tokens_predicted(client)
        body = {"messages": [SYSTEM, {"role": "user", "content": "Write a long story about a dragon."}],
                "temperature": 0, "max_tokens": max_tokens, "logit_bias": {str(eos_id): -100}, "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            n = 0
            async for _ in aiter_sse(resp):
                n += 1
                if n >= 3:
                    break
            health = (await client.get("/health")).json()
            assert health["slots_processing"] >= 1
    # the response is closed: the connection drops mid-stream
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        with trio.fail_after(120):  # a bound on the poll only: a sequence left running also ends, at max_tokens
            while (await client.get("/health")).json()["slots_processing"]:
                await trio.sleep(0.02)
        # freed because the client went away: it never generated its max_tokens (the EOS token is banned)
        assert await tokens_predicted(client) - before < max_tokens
