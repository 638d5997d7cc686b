"""Chat and text completions against the real server with the official openai client and httpx."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.sse import DONE, sse_events
from tests.support import SYSTEM

FRANCE = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]


def test_capital_of_france_greedy(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=FRANCE, temperature=0, max_tokens=30)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
    assert r.object == "chat.completion"
    assert r.usage.prompt_tokens > 10 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    timings = r.model_extra["timings"]
    assert timings["prompt_n"] + timings["cache_n"] == r.usage.prompt_tokens
    assert r.usage.prompt_tokens_details.cached_tokens == timings["cache_n"]
    assert timings["predicted_n"] == r.usage.completion_tokens
    assert timings["predicted_per_second"] > 0


def test_streaming_matches_non_streaming(client: openai.OpenAI) -> None:
    kwargs = dict(model="SmolLM2-135M-Instruct", messages=FRANCE, temperature=0, max_tokens=40)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_sse_framing_and_usage_chunk(base_url: str) -> None:
    body = {"messages": FRANCE, "temperature": 0, "max_tokens": 12, "stream": True,
            "stream_options": {"include_usage": True}}
    resp = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    # every event is one "data: " line and a blank line
    assert all(block.startswith("data: ") and "\n" not in block for block in resp.text.split("\n\n")[:-1])
    assert resp.text.endswith("\n\n")
    events = sse_events(resp)
    assert events[-1] == DONE
    chunks = events[:-1]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] in ("stop", "length") and finish["delta"] == {}
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-2])
    assert content
    assert usage_chunk["usage"]["completion_tokens"] >= 1
    assert all("usage" not in c for c in chunks[:-1])


def test_no_usage_chunk_without_include_usage(base_url: str) -> None:
    body = {"messages": FRANCE, "temperature": 0, "max_tokens": 5, "stream": True}
    events = sse_events(httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60))
    assert events[-1] == DONE
    chunks = events[:-1]
    assert all(c["choices"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_stop_string_not_returned(client: openai.OpenAI) -> None:
    kwargs = dict(model="SmolLM2-135M-Instruct", messages=FRANCE, temperature=0, max_tokens=30)
    full = client.chat.completions.create(**kwargs).choices[0].message.content
    assert "Paris" in full
    r = client.chat.completions.create(stop=["Paris"], **kwargs)
    assert r.choices[0].message.content == full[: full.index("Paris")]
    assert r.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(stop=["Paris"], stream=True, **kwargs))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == full[: full.index("Paris")]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seed_reproducible(client: openai.OpenAI) -> None:
    kwargs = dict(model="SmolLM2-135M-Instruct", temperature=1.0, max_tokens=30, seed=1234,
                  messages=[SYSTEM, {"role": "user", "content": "Tell me a story about a cat."}])
    a = client.chat.completions.create(**kwargs).choices[0].message.content
    b = client.chat.completions.create(**kwargs).choices[0].message.content
    assert a == b and a


def test_seeded_sampling_reproduces_inside_a_batch(client: openai.OpenAI) -> None:
    """Each seeded request gives the same text alone and decoded in one batch with others (the
    vectorized sampler keeps one random stream per sequence), penalties and logit_bias included."""
    import concurrent.futures

    def run(i: int) -> str:
        extra = {"frequency_penalty": 0.5, "presence_penalty": 0.3} if i % 2 else {"logit_bias": {"28": -5}}
        return client.chat.completions.create(
            model="SmolLM2-135M-Instruct", temperature=0.9, max_tokens=12, seed=100 + i,
            messages=[SYSTEM, {"role": "user", "content": f"Tell me a story about cat number {i}."}],
            **extra).choices[0].message.content

    alone = [run(i) for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(run, range(4)))
    assert together == alone
    assert len(set(alone)) == 4


def test_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=FRANCE, temperature=0,
                                       max_tokens=5, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        # greedy: the sampled token is the most likely one
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)


def test_top_logprobs_without_logprobs_is_a_400_naming_it(client: openai.OpenAI) -> None:
    """OpenAI, vLLM and llama-server refuse top_logprobs without logprobs: true (it was ignored: no logprobs
    came back); a null top_logprobs is no top_logprobs (llama-server's rule)."""
    for extra in ({"top_logprobs": 3}, {"logprobs": False, "top_logprobs": 0}, {"top_logprobs": 2, "stream": True}):
        with pytest.raises(openai.BadRequestError) as exc:
            client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=FRANCE, max_tokens=2, **extra)
        assert exc.value.body["param"] == "top_logprobs"
        assert exc.value.body["message"] == "top_logprobs requires logprobs to be set to true"
    r = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=FRANCE, max_tokens=2,
                                       top_logprobs=None)
    assert r.choices[0].logprobs is None


def test_completions_stream_and_not(client: openai.OpenAI) -> None:
    r = client.completions.create(model="SmolLM2-135M-Instruct", prompt="The capital of France is",
                                  temperature=0, max_tokens=8)
    assert "Paris" in r.choices[0].text
    chunks = list(client.completions.create(model="SmolLM2-135M-Instruct", prompt="The capital of France is",
                                            temperature=0, max_tokens=8, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_multibyte_output_never_replacement_char(base_url: str) -> None:
    body = {"prompt": "日本の首都は東京です。中国の首都は", "temperature": 0, "max_tokens": 24, "stream": True}
    events = sse_events(httpx.post(base_url + "/v1/completions", json=body, timeout=60))
    texts = [e["choices"][0]["text"] for e in events[:-1]]
    joined = "".join(texts)
    assert any(ord(ch) > 0x2E80 for ch in joined)  # the model does answer in CJK
    assert "\ufffd" not in joined


def test_models_and_llama_server_routes(base_url: str) -> None:
    models = httpx.get(base_url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "SmolLM2-135M-Instruct"
    tok = httpx.post(base_url + "/tokenize", json={"content": "Hello world"}).json()["tokens"]
    assert len(tok) == 2
    assert httpx.post(base_url + "/detokenize", json={"tokens": tok}).json()["content"] == "Hello world"
    pieces = httpx.post(base_url + "/tokenize", json={"content": "Hello world", "with_pieces": True}).json()
    assert [p["piece"] for p in pieces["tokens"]] == ["Hello", " world"]
    # special tokens show their text, as llama-server's common_token_to_piece(special=true) (they were "")
    pieces = httpx.post(base_url + "/tokenize", json={"content": "<|im_start|>user", "with_pieces": True}).json()
    assert [p["piece"] for p in pieces["tokens"]] == ["<|im_start|>", "user"]
    prompt = httpx.post(base_url + "/apply-template", json={"messages": FRANCE}).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n") and "capital of France" in prompt


def test_request_log_line(server, client: openai.OpenAI) -> None:
    client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=FRANCE, temperature=0, max_tokens=3)
    assert any("POST /v1/chat/completions 200 tokens=3 " in line for line in server.log().splitlines())


def test_stream_log_line_counts_tokens_not_events(server, base_url: str) -> None:
    # tokens= is the completion tokens generated, as for a JSON answer, not the events that carried output: a
    # streamed tool call is one delta for all its tokens (the line said tokens=1 beside completion_tokens=26)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [weather],
            "tool_choice": "required", "temperature": 0, "max_tokens": 60, "stream": True,
            "stream_options": {"include_usage": True}}
    resp = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=120,
                      headers={"X-Request-Id": "stream-tokens-1"})
    chunks = [e for e in sse_events(resp) if e != DONE]
    n = chunks[-1]["usage"]["completion_tokens"]
    events = sum(1 for c in chunks[1:] for choice in c["choices"] if choice["delta"])
    assert events < n  # the tool call's tokens came in fewer events
    deadline = time.monotonic() + 30  # the line is written once the stream's last byte is sent
    while not (lines := [line for line in server.log().splitlines() if "id=stream-tokens-1 " in line]):
        assert time.monotonic() < deadline, "no log line for the stream"
        time.sleep(0.05)
    assert f" 200 tokens={n} " in lines[0] and f"completion_tokens={n} " in lines[0], lines[0]


def test_polled_routes_are_not_logged_at_info(server, base_url: str) -> None:
    # the playground polls /health and /metrics every 3 s: their 200s log at DEBUG (the server runs at INFO),
    # their failures at INFO; a request's line is written before its answer leaves
    assert httpx.get(base_url + "/health", timeout=10).status_code == 200
    assert httpx.get(base_url + "/metrics", timeout=10).status_code == 200
    assert httpx.get(base_url + "/v1/models", timeout=10).status_code == 200
    log = server.log()
    assert "GET /v1/models 200 " in log
    assert "GET /health 200 " not in log and "GET /metrics 200 " not in log
