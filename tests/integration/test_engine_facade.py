"""The Engine facade embedded in trio, on the real model: what it does around a Generation.

A full queue raises before any iterator exists, a stream closed early cancels
its sequence, a stop string cancels it too, and ``on_finish`` hooks get the
FinishInfo of each ending (success, cancelled, denied).
"""

from __future__ import annotations

import gc

import pytest
import trio

import skippy
from skippy import ChatCompletionRequest, CompletionRequest, EngineConfig, Message
from skippy.actors import wiring
from skippy.engine.errors import EngineClosed, InvalidRequest, PermissionDenied, QueueFull
from skippy.engine.hooks.policy import NO_ACTION, Deny
from skippy.engine.hooks.signals import FinishInfo
from skippy.engine.protocols.llama_server.types import NativeCompletionRequest
from skippy.models import ensure_model

QUESTION = [Message("system", "You are a helpful assistant."), Message("user", "What is the capital of France?")]


class Recorder:
    """A hook policy that records every on_finish (and denies user ``deny``)."""

    def __init__(self) -> None:
        self.finished: list[FinishInfo] = []
        self.seen = trio.Event()

    async def before_chat(self, request):
        return Deny("no") if request.user == "deny" else NO_ACTION

    async def on_finish(self, request, info):
        self.finished.append(info)
        self.seen.set()


async def next_finish(policy: Recorder) -> FinishInfo:
    with trio.fail_after(30):
        await policy.seen.wait()
    policy.seen = trio.Event()
    return policy.finished.pop()


async def until_idle(engine) -> None:
    with trio.fail_after(30):
        while engine.stats()["slots_processing"] or engine.stats()["requests_waiting"]:
            await trio.sleep(0.01)


@pytest.fixture
def model() -> str:
    return str(ensure_model("SmolLM2-135M-Instruct"))


async def test_on_finish_success_stop_string_and_denied(model: str) -> None:
    policy = Recorder()
    config = EngineConfig(model=model, parallel=2, n_ctx=1024, hook_policy=policy, hooks_default_on=True)
    async with skippy.open_engine(config) as engine:
        reply = await engine.chat(ChatCompletionRequest(messages=QUESTION, temperature=0, max_tokens=12))
        info = await next_finish(policy)
        assert (info.status, info.finish_reason, info.completion_tokens) == (
            "success", reply["choices"][0]["finish_reason"], reply["usage"]["completion_tokens"])
        assert reply["usage"]["injected_tokens"] == 0  # hooks were on for this request

        # a stop string: the sequence is cancelled, the finish is a normal "stop" without the stop text
        stopped = await engine.chat(ChatCompletionRequest(messages=QUESTION, temperature=0, max_tokens=30,
                                                          stop=["Paris"]))
        assert stopped["choices"][0]["finish_reason"] == "stop"
        assert "Paris" not in stopped["choices"][0]["message"]["content"]
        info = await next_finish(policy)
        assert (info.status, info.finish_reason) == ("success", "stop")
        await until_idle(engine)

        with pytest.raises(PermissionDenied):
            await engine.chat(ChatCompletionRequest(messages=QUESTION, user="deny", max_tokens=4))
        assert (await next_finish(policy)).status == "denied"


async def test_a_stream_closed_early_cancels_its_sequence(model: str) -> None:
    policy = Recorder()
    config = EngineConfig(model=model, parallel=1, n_ctx=1024, hook_policy=policy, hooks_default_on=True)
    async with skippy.open_engine(config) as engine:
        no_end = {str(t): -100.0 for t in engine.meta.eog_ids}  # the model cannot end before max_tokens
        req = ChatCompletionRequest(messages=[Message("user", "Write a long story about a lighthouse.")],
                                    temperature=0, max_tokens=400, logit_bias=no_end)
        chunks = await engine.chat_stream(req)
        got = 0
        async for chunk in chunks:
            got += bool(chunk["choices"] and chunk["choices"][0]["delta"].get("content"))
            if got == 3:
                break
        await chunks.aclose()  # what the HTTP layer does when the client goes away
        info = await next_finish(policy)
        assert info.status == "cancelled" and 3 <= info.completion_tokens < 400
        await until_idle(engine)
        assert engine.scheduler.stats().tokens_predicted_total < 100  # stopped, not decoded to 400 tokens
        # the freed slot serves the next request
        reply = await engine.chat(ChatCompletionRequest(messages=QUESTION, temperature=0, max_tokens=4))
        assert reply["usage"]["completion_tokens"] == 4


async def test_a_stream_dropped_without_aclose_cancels_its_sequence(model: str) -> None:
    # an embedder's ``break`` out of ``async for`` without aclose(): the stream closes itself when collected
    policy = Recorder()
    config = EngineConfig(model=model, parallel=1, n_ctx=1024, hook_policy=policy, hooks_default_on=True)
    async with skippy.open_engine(config) as engine:
        no_end = {str(t): -100.0 for t in engine.meta.eog_ids}
        req = ChatCompletionRequest(messages=[Message("user", "Write a long story about a lighthouse.")],
                                    temperature=0, max_tokens=400, logit_bias=no_end)

        async def read_three() -> None:
            got = 0
            async for chunk in await engine.chat_stream(req):
                got += bool(chunk["choices"] and chunk["choices"][0]["delta"].get("content"))
                if got == 3:
                    break

        await read_three()
        gc.collect()
        info = await next_finish(policy)
        assert info.status == "cancelled" and 3 <= info.completion_tokens < 400
        await until_idle(engine)
        assert engine.scheduler.stats().tokens_predicted_total < 100


async def test_a_burst_as_large_as_the_free_slots_is_served_with_a_queue_of_one(model: str) -> None:
    # max_queue bounds the requests that wait for a slot: 4 at once on 4 idle slots all run; with 4 running,
    # a 5th waits in the one place of the queue and a 6th is refused
    config = EngineConfig(model=model, parallel=4, n_ctx=1024, max_queue=1, threads=1)
    async with skippy.open_engine(config) as engine:
        req = ChatCompletionRequest(messages=[Message("user", "Hi")], max_tokens=4, temperature=0)
        outcomes: list[str] = []

        async def one() -> None:
            try:
                await engine.chat(req)
                outcomes.append("ok")
            except QueueFull:
                outcomes.append("429")

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(one)
        assert outcomes == ["ok"] * 4
        streams = [await engine.chat_stream(ChatCompletionRequest(messages=[Message("user", "Write a long story.")],
                                                                  max_tokens=300)) for _ in range(5)]
        with pytest.raises(QueueFull):
            await engine.chat_stream(req)
        for stream in streams:
            await stream.aclose()


async def test_an_embedding_burst_as_large_as_the_embedding_sequences_is_served_with_a_queue_of_one(
        model: str) -> None:
    from skippy.engine.protocols.openai.types import EmbeddingRequest

    config = EngineConfig(model=model, parallel=2, n_ctx=1024, max_queue=1, threads=1, embeddings=True,
                          pooling="mean")
    async with skippy.open_engine(config) as engine:
        places = engine.runtime.meta.embeddings.n_seq_max
        outcomes: list[str] = []

        async def one(i: int) -> None:
            try:
                await engine.embeddings(EmbeddingRequest(input=f"hello {i}"))
                outcomes.append("ok")
            except QueueFull:
                outcomes.append("429")

        async with trio.open_nursery() as nursery:
            for i in range(places + 1):  # every embedding sequence, and the one place of the queue
                nursery.start_soon(one, i)
        assert outcomes == ["ok"] * (places + 1)


async def test_a_full_queue_raises_before_any_iterator(model: str) -> None:
    config = EngineConfig(model=model, parallel=1, n_ctx=512, max_queue=1)
    async with skippy.open_engine(config) as engine:
        long = ChatCompletionRequest(messages=[Message("user", "Write a long story.")], max_tokens=300)
        running = await engine.chat_stream(long)
        waiting = await engine.chat_stream(long)
        with trio.fail_after(30):  # one sequence in the only slot, one in the queue of one
            while engine.stats() != {"slots_idle": 0, "slots_processing": 1, "requests_waiting": 1}:
                await trio.sleep(0.01)
        with pytest.raises(QueueFull):
            await engine.completion_stream(CompletionRequest(prompt="Hello", max_tokens=4, echo=True))
        with pytest.raises(QueueFull):
            await engine.chat_stream(long)
        with pytest.raises(QueueFull):
            await engine.chat(long)
        await waiting.aclose()
        await running.aclose()
        await until_idle(engine)


async def test_an_open_that_fails_or_is_cancelled_after_the_load_frees_the_model(
        model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = []
    real = wiring.load_runtime
    monkeypatch.setattr(wiring, "load_runtime", lambda config: loaded.append(real(config)) or loaded[-1])
    # the template fails after the model is loaded
    with pytest.raises(Exception, match="template"):
        async with skippy.open_engine(EngineConfig(model=model, n_ctx=256, threads=1, chat_template="{% if %}")):
            pass
    # cancelled while the model loads: the load finishes in its thread, then the model is freed
    with trio.move_on_after(0.01) as scope:
        async with skippy.open_engine(EngineConfig(model=model, n_ctx=256, threads=1)):
            pass
    assert scope.cancelled_caught
    assert len(loaded) == 2 and all(rt._ctx is None for rt in loaded)  # llama_free'd


async def test_an_exception_from_the_body_comes_out_as_itself(model: str) -> None:
    # trio's nursery wraps what leaves it in an ExceptionGroup; open_engine unwraps the body's own exception
    config = EngineConfig(model=model, parallel=1, n_ctx=512)
    with pytest.raises(InvalidRequest) as caught:
        async with skippy.open_engine(config) as engine:
            await engine.chat(ChatCompletionRequest(messages=QUESTION, max_tokens=4, n=0))
    assert not isinstance(caught.value.__context__, BaseExceptionGroup)
    assert any(entry.name == "test_an_exception_from_the_body_comes_out_as_itself" for entry in caught.traceback)

    class Mine(Exception):
        pass

    with pytest.raises(Mine):
        async with skippy.open_engine(config):
            raise Mine("the embedder's own")

    # a group the body raises, and one from a nursery inside the body, come out as themselves too (trio's
    # cancel scope hands a copy of a group on: split without its Cancelled)
    class MyGroup(ExceptionGroup):
        pass

    mine = MyGroup("mine", [Mine("one"), Mine("two")])
    with pytest.raises(MyGroup) as group:
        async with skippy.open_engine(config):
            raise mine
    assert group.value is mine  # that very group (trio's cancel scope passes a copy on)
    with pytest.raises(ExceptionGroup) as group:
        async with skippy.open_engine(config):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                raise Mine("in a nursery")
    assert [type(e) for e in group.value.exceptions] == [Mine]


async def test_a_closed_engine_refuses_every_call_that_would_tokenize(model: str) -> None:
    # the vocabulary is freed with the model: a text tokenized after the close crashed the process (SIGSEGV)
    async with skippy.open_engine(EngineConfig(model=model, parallel=1, n_ctx=512)) as engine:
        pass
    with pytest.raises(EngineClosed):
        await engine.input_tokens(ChatCompletionRequest(messages=QUESTION))
    with pytest.raises(EngineClosed):
        await engine.completion_native(NativeCompletionRequest(prompt="hi"))
    with pytest.raises(EngineClosed):
        await engine.tokenizer.detokenize([1, 2])
    with pytest.raises(EngineClosed):  # it waited for the scheduler that was gone: for ever
        await engine.slot_action("erase", 0)
    with pytest.raises(EngineClosed):
        await engine.apply_template(QUESTION)


async def test_an_actor_failure_stays_in_its_group(model: str) -> None:
    async def broken_actor() -> None:
        raise RuntimeError("actor died")

    with pytest.raises(BaseExceptionGroup) as caught:
        async with skippy.open_engine(EngineConfig(model=model, parallel=1, n_ctx=512)) as engine:
            engine._nursery.start_soon(broken_actor)  # a task of the engine's nursery, as its actors are
            await trio.sleep_forever()
    assert [type(e) for e in caught.value.exceptions] == [RuntimeError]


async def test_a_request_built_with_plain_dicts_streams_as_over_http(model: str) -> None:
    async with skippy.open_engine(EngineConfig(model=model, parallel=1, n_ctx=512)) as engine:
        req = ChatCompletionRequest(messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0,
                                    stream_options={"include_usage": True},
                                    response_format={"type": "json_schema",
                                                     "json_schema": {"name": "n", "schema": {"type": "integer"}}})
        chunks = [chunk async for chunk in await engine.chat_stream(req)]
        assert chunks[-1]["usage"]["completion_tokens"] >= 1 and not chunks[-1]["choices"]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert text.strip().lstrip("-").isdigit()  # the schema held


async def test_a_closed_stream_ends_at_once(model: str) -> None:
    # as an async generator after aclose(): StopAsyncIteration, even for the chunks made before the first read
    async with skippy.open_engine(EngineConfig(model=model, parallel=1, n_ctx=512)) as engine:
        req = ChatCompletionRequest(messages=QUESTION, max_tokens=8)
        unread = await engine.chat_stream(req)  # its role chunk is made already
        await unread.aclose()
        assert [chunk async for chunk in unread] == []
        started = await engine.chat_stream(req)
        assert (await started.__anext__())["choices"][0]["delta"]["role"] == "assistant"
        await started.aclose()
        await started.aclose()  # closing twice is harmless
        with pytest.raises(StopAsyncIteration):
            await started.__anext__()
        echoed = await engine.completion_stream(CompletionRequest(prompt="Hello", max_tokens=4, echo=True))
        await echoed.aclose()
        assert [chunk async for chunk in echoed] == []
        await until_idle(engine)


async def test_a_bad_priority_fails_its_request_not_the_engine(model: str) -> None:
    async with skippy.open_engine(EngineConfig(model=model, parallel=1, n_ctx=512, threads=1)) as engine:
        req = ChatCompletionRequest(messages=[Message("user", "Hi")], max_tokens=2, temperature=0)
        for bad in (None, "high", 1.5, float("nan"), True):
            with pytest.raises(InvalidRequest, match="priority"):
                await engine.chat(req, priority=bad)  # type: ignore[arg-type]
        assert (await engine.chat(req, priority=-3))["choices"][0]["finish_reason"] in ("stop", "length")
