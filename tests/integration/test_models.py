"""The core behaviours on both real models: SmolLM2-135M and Gemma 3 270M (issue 18).

Gemma 3 has sliding-window attention (llama.cpp's iSWA KV cache, window 512) and no chat
template (ChatML stands in). Raw llama.cpp itself gives different logits for a prompt
prefilled whole and one split before its last tokens (on Gemma 3 up to 0.84 in logprob), so
a cached prompt's greedy text may differ from a cold one's at a near-tie. These tests compare
what is exact instead: the server's output equals llama-cpp-python's (low-level API, same
context shape) for the same prompt and the same prefill split, tokens and logprobs.
"""

from __future__ import annotations

import httpx
import llama_cpp
import openai
import pytest
import trio

from skippy.engine.scheduling.prefix import common_prefix_len
from skippy.models import resolve_model
from tests.sse import DONE, aiter_sse
from tests.support import GEMMA, Raw, Server


def _model(server: Server) -> str:
    return httpx.get(server.base_url + "/v1/models", timeout=10).json()["data"][0]["id"]


def _is_gemma(server: Server) -> bool:
    return "gemma" in httpx.get(server.base_url + "/props", timeout=10).json()["model_path"]


@pytest.fixture(scope="module")
def raw(model_server: Server):
    path = str(resolve_model(GEMMA if _is_gemma(model_server) else "SmolLM2-135M-Instruct"))
    r = Raw(path)
    yield r
    r.close()


def _complete(server: Server, prompt: list[int], n: int, **extra) -> dict:
    r = httpx.post(server.base_url + "/v1/completions", timeout=120,
                   json={"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 1, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _check_exact(reply: dict, ref: tuple[str, list[float]]) -> None:
    choice = reply["choices"][0]
    assert choice["text"] == ref[0]
    assert choice["logprobs"]["token_logprobs"][:len(ref[1])] == pytest.approx(ref[1], abs=1e-4)


# -- chat, completions, stream = non-stream, stop strings, UTF-8 -------------------------------------

def test_chat_stream_equals_non_stream_and_stops_at_a_stop_string(model_server: Server) -> None:
    client = openai.OpenAI(base_url=model_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "Write one sentence about the sea."}]
    whole = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16)
    text = whole.choices[0].message.content or ""
    assert text.strip() and "<|im_end|>" not in text
    chunks = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    words = text.split()
    stop = next(w for w in words[1:] if len(w) > 2)  # a word the reply reaches after its start
    cut = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16, stop=[stop])
    assert cut.choices[0].message.content == text[:text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_completions_cold_equal_llama_cpp_python_and_stream_equals_non_stream(model_server: Server, raw: Raw) -> None:
    prompt = raw.tokenize("The three largest cities of France are", bos=True)
    reply = _complete(model_server, prompt, 12, cache_prompt=False)
    raw.trim(0)
    _check_exact(reply, raw.greedy(raw.prefill(prompt), 12))
    text = []
    with httpx.stream("POST", model_server.base_url + "/v1/completions", timeout=120,
                      json={"prompt": prompt, "max_tokens": 12, "temperature": 0, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                import json

                text += [c["text"] for c in json.loads(line[6:])["choices"]]
    assert "".join(text) == reply["choices"][0]["text"]


async def test_utf8_output_never_splits_a_character(model_server: Server) -> None:
    body = {"prompt": "日本の首都は東京です。フランスの首都は", "max_tokens": 16, "temperature": 0, "stream": True}
    parts = []
    async with httpx.AsyncClient(base_url=model_server.base_url, timeout=120) as client:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            async for event in aiter_sse(resp):
                if event != DONE:
                    parts += [c["text"] for c in event["choices"]]
        whole = (await client.post("/v1/completions", json={**body, "stream": False})).json()
    assert "".join(parts) == whole["choices"][0]["text"] and any(parts)
    # no streamed part ends inside a character, the last neither: a character max_tokens cut is dropped
    # (tests/integration/test_utf8_cut.py)
    assert all("\ufffd" not in p for p in parts), parts


# -- logprobs: control tokens shown as their text, text_offset into the echoed text --------------------

#: a user turn in each model's turn markers (control tokens typed in the text); SmolLM2 starts the next turn
TURNS = {False: "<|im_start|>user\nSay yes.<|im_end|>\n", True: "<start_of_turn>user\nSay yes.<end_of_turn>\n"}


def test_logprobs_show_control_tokens_as_their_text_and_echo_offsets_index_the_text(model_server: Server) -> None:
    """A control token (a turn marker, the BOS) shows as its text in logprobs, chosen or an alternative, as
    vLLM's do (it showed as "", and a legacy top_logprobs dict kept one of two such alternatives); an echoed
    prompt's ``text_offset`` indexes the text, which holds the markers typed in it (they counted as nothing)
    but not a BOS the tokenizer added."""
    gemma = _is_gemma(model_server)
    prompt = TURNS[gemma]
    r = httpx.post(model_server.base_url + "/v1/completions", timeout=120, json={
        "prompt": prompt, "echo": True, "logprobs": 5, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    choice, n = r.json()["choices"][0], r.json()["usage"]["prompt_tokens"]
    text, lp = choice["text"], choice["logprobs"]
    assert text.startswith(prompt) and all(lp["tokens"])  # no token shows as nothing
    for i, (token, at) in enumerate(zip(lp["tokens"][:n], lp["text_offset"], strict=False)):
        if i == 0 and gemma:  # Gemma's BOS: a token of the prompt, not of its text
            assert (token, at) == ("<bos>", 0)
        else:
            assert text[at:at + len(token)] == token, (i, token, at)
    assert lp["text_offset"][n] == len(prompt) and lp["text_offset"] == sorted(lp["text_offset"])
    markers = ["<start_of_turn>", "<end_of_turn>"] if gemma else ["<|im_start|>", "<|im_end|>"]
    assert [t for t in lp["tokens"][:n] if t in markers] == markers
    assert "" not in [key for top in lp["top_logprobs"][1:] for key in top]
    if not gemma:  # after the turn: the next turn's marker, or the end of this one
        assert {"<|im_start|>", "<|im_end|>"} <= set(lp["top_logprobs"][n])
    # llama-server's /completion: the chosen token and its alternatives (SmolLM2 starts the next turn)
    native = httpx.post(model_server.base_url + "/completion", timeout=120, json={
        "prompt": prompt, "n_predict": 1, "n_probs": 5, "temperature": 0}).json()
    [first] = native["completion_probabilities"]
    assert first["token"] and all(alt["token"] for alt in first["top_logprobs"])
    if not gemma:
        assert (first["token"], first["bytes"], native["content"]) == ("<|im_start|>", list(b"<|im_start|>"), "")
    # chat: no alternative shows as nothing (SmolLM2's end of turn is one before the reply's end)
    client = openai.OpenAI(base_url=model_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say just: yes"}],
                                           temperature=0, max_tokens=8, logprobs=True, top_logprobs=20)
    alternatives = [alt for e in reply.choices[0].logprobs.content for alt in e.top_logprobs]
    assert all(alt.token and alt.bytes == list(alt.token.encode()) for alt in alternatives
               if "\ufffd" not in alt.token)
    if not gemma:
        assert "<|im_end|>" in {alt.token for alt in alternatives}


# -- prefix reuse --------------------------------------------------------------------------------

def test_prefix_reuse_is_reported_and_equals_llama_cpp_python_for_the_same_split(
        model_server: Server, raw: Raw) -> None:
    """A prompt sharing a ~120-token prefix with the previous one reuses it (``cached_tokens``), and
    its tokens and logprobs equal llama-cpp-python's when the prefix is prefilled with the first
    prompt and the rest after a trim; its cold run equals a cold llama-cpp-python run. The cached
    and cold texts are not compared: on Gemma 3 the split moves logits enough to tip near-ties."""
    head = raw.tokenize("Prefix reuse check. " + "A careful librarian sorts old maps by region and year. " * 10,
                        bos=True)
    a = head + raw.tokenize(" Question: name a river in Italy. Answer:")
    b = head + raw.tokenize(" Question: name a mountain in Spain. Answer:")
    first = _complete(model_server, a, 8)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    second = _complete(model_server, b, 8)
    n = common_prefix_len(a, b)
    assert n >= 100 and second["usage"]["prompt_tokens_details"]["cached_tokens"] == n
    raw.trim(0)
    raw.prefill(a)
    raw.trim(n)
    _check_exact(second, raw.greedy(raw.prefill(b[n:]), 8))
    cold = _complete(model_server, b, 8, cache_prompt=False)
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    raw.trim(0)
    _check_exact(cold, raw.greedy(raw.prefill(b), 8))


def test_gemma_reuses_no_prefix_whose_sliding_window_is_gone(gemma_server: Server) -> None:
    """Gemma 3's SWA layers keep about 512 positions without --swa-full: after a 1500-token prompt,
    a 600-token prefix of it lacks the window its next position needs, so it is prefilled again
    (llama-server's rule) and the reply equals a cold llama-cpp-python run; reusing it would
    attend over overwritten cells."""
    r = Raw(str(resolve_model(GEMMA)))
    try:
        filler = r.tokenize(" ".join(f"item {i} is a small red box." for i in range(400)))
        head = [llama_cpp.llama_vocab_bos(r.vocab)] + filler[:600]
        a, b = head + filler[600:1500], head + r.tokenize(" The last item is")
        assert len(a) > 1400
        assert _complete(gemma_server, a, 1)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        reply = _complete(gemma_server, b, 8)
        assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        _check_exact(reply, r.greedy(r.prefill(b), 8))
    finally:
        r.close()


# -- batching ------------------------------------------------------------------------------------

PROMPTS = ["The three primary colors are", "The opposite of hot is", "Two fruits that grow on trees are"]


async def test_concurrent_greedy_equals_sequential(model_server: Server) -> None:
    """Three greedy completions (Gemma 3 is a base model), one by one and then at once: the same
    texts (a token routed to the wrong sequence would show). On Gemma 3 a batch of three decodes with
    other numerics than a batch of one (llama.cpp's kernels depend on the batch's shape) and greedy text
    parts at near-ties ("red, yellow, and blue" against "red, blue and yellow" was seen in CI), so
    there each text must begin with the same first token as its sequential twin, which a misrouted
    token would still break; full equality is checked on SmolLM2."""
    async def one(client: httpx.AsyncClient, prompt: str) -> str:
        body = {"prompt": prompt, "temperature": 0, "max_tokens": 8, "cache_prompt": False}
        r = await client.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    async with httpx.AsyncClient(base_url=model_server.base_url, timeout=120) as client:
        sequential = [await one(client, p) for p in PROMPTS]
        concurrent: list[str | None] = [None] * len(PROMPTS)

        async def run(i: int) -> None:
            concurrent[i] = await one(client, PROMPTS[i])

        async with trio.open_nursery() as nursery:
            for i in range(len(PROMPTS)):
                nursery.start_soon(run, i)
    assert all(s.strip() for s in sequential), sequential
    if not _is_gemma(model_server):
        assert concurrent == sequential
        return
    for got, want in zip(concurrent, sequential, strict=True):
        assert got is not None and got.split()[:1] == want.split()[:1], (concurrent, sequential)


# -- /props ----------------------------------------------------------------------------------------

def test_props_names_the_chat_template_source(model_server: Server, qwen_server: Server) -> None:
    props = httpx.get(model_server.base_url + "/props", timeout=10).json()
    if _is_gemma(model_server):  # no tokenizer.chat_template in the GGUF: ChatML stands in
        assert props["chat_template_source"] == "fallback:chatml" and "<|im_start|>" in props["chat_template"]
    else:
        assert props["chat_template_source"] == "gguf"
    assert httpx.get(qwen_server.base_url + "/props", timeout=10).json()["chat_template_source"] == "--chat-template"


def test_gemma_kv_bytes_hold_the_sliding_window_layers_at_their_window(gemma_server: Server) -> None:
    """llama.cpp's iSWA cache for this shape (its start-up log): 3 full-attention layers of 2048 cells
    and 15 sliding-window layers of 1024 cells (window 512 + n_ubatch 512), per stream, 4 streams;
    rows of 256 f16 values (one KV head) in K and in V: 42 MiB each, not 72 as if every layer held
    2048 cells."""
    kv = httpx.get(gemma_server.base_url + "/props", timeout=10).json()["kv_cache"]
    assert kv["bytes_k"] == kv["bytes_v"] == 512 * 4 * (3 * 2048 + 15 * 1024) == 42 * 2**20
