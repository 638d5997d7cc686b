"""The engine embedded in a trio program (no HTTP), and /health while loading."""

from __future__ import annotations

import trio

import skippy
from skippy import ChatCompletionRequest, EngineConfig, Message
from skippy.http.app import AppState, create_app
from skippy.models import ensure_model


async def test_open_engine_chat_and_stream() -> None:
    config = EngineConfig(model=str(ensure_model("SmolLM2-135M-Instruct")), parallel=2, n_ctx=1024)
    async with skippy.open_engine(config) as engine:
        req = ChatCompletionRequest(messages=[Message("system", "You are a helpful assistant."),
                                              Message("user", "What is the capital of France?")],
                                    temperature=0, max_tokens=20)
        reply = await engine.chat(req)
        assert "Paris" in reply["choices"][0]["message"]["content"]
        chunks = [c async for c in await engine.chat_stream(req)]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert text == reply["choices"][0]["message"]["content"]
        assert engine.stats()["slots_processing"] == 0


async def test_embedded_engine_answers_to_its_configured_model_name() -> None:
    ensure_model("SmolLM2-135M-Instruct")
    config = EngineConfig(model="SmolLM2-135M-Instruct", parallel=1, n_ctx=512)  # a cache name, as in the README
    async with skippy.open_engine(config) as engine:
        assert engine.model_id == "SmolLM2-135M-Instruct" and engine.served_names == ("SmolLM2-135M-Instruct",)
        for model in ("SmolLM2-135M-Instruct", None):
            reply = await engine.chat(ChatCompletionRequest(messages=[Message("user", "Hi")], model=model,
                                                            temperature=0, max_tokens=2))
            assert reply["model"] == "SmolLM2-135M-Instruct"
        assert engine.find_model("smollm2-135m-instruct") == "SmolLM2-135M-Instruct"


async def test_decoding_goes_on_beside_a_task_that_never_blocks() -> None:
    # The scheduler lets other tasks go idle before a decode step, but only for a bounded time:
    # a busy task in the embedding program (it only ever yields) must not stall generation.
    config = EngineConfig(model=str(ensure_model("SmolLM2-135M-Instruct")), parallel=1, n_ctx=512)
    spins = 0

    async def busy() -> None:
        nonlocal spins
        while True:
            spins += 1
            await trio.sleep(0)

    async with skippy.open_engine(config) as engine, trio.open_nursery() as nursery:
        nursery.start_soon(busy)
        req = ChatCompletionRequest(messages=[Message("user", "Count from one to ten.")],
                                    temperature=0, max_tokens=16)
        with trio.fail_after(60):
            reply = await engine.chat(req)
        nursery.cancel_scope.cancel()
    assert reply["usage"]["completion_tokens"] > 0 and spins > 100


async def test_health_503_while_loading() -> None:
    state = AppState()
    app = create_app(state)
    client = app.test_client()
    resp = await client.get("/health")
    assert resp.status_code == 503
    assert (await resp.get_json())["error"]["code"] == "model_loading"
    resp = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert resp.status_code == 503
    assert "Retry-After" in resp.headers
