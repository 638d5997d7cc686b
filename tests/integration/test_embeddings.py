"""POST /v1/embeddings against the real server and model: the official openai SDK, llama-cpp-python as the
reference, chat streaming beside embedding batches, and bad input (4xx envelopes, never 5xx).

One server runs with ``--embeddings --pooling mean`` (SmolLM2's GGUF sets no pooling type, so ``model``
would be ``none``); the session's default server (no ``--embeddings``) answers 501 as llama-server does.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
import trio

import skippy
from skippy import EngineConfig
from skippy.engine.errors import InvalidRequest, NotSupported
from skippy.engine.protocols.llama_server.types import NativeEmbeddingRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, EmbeddingRequest, Message
from skippy.models import ensure_model
from tests.sse import DONE, ContentStream
from tests.support import Server, check, json_schema

#: (anchor, paraphrase, unrelated): with SmolLM2-135M and mean pooling the paraphrase is closer to the
#: anchor than the unrelated sentence by a cosine margin of 0.16..0.35 for each (measured when written)
TRIPLES = [
    ("The cat is sleeping on the sofa.", "A cat naps on the couch.", "The stock market fell sharply today."),
    ("How do I reset my password?", "What are the steps to change my password?", "The weather in Paris is sunny."),
    ("He plays the guitar every evening.", "Every night he plays his guitar.",
     "Photosynthesis converts light into chemical energy."),
    ("The train to London leaves at noon.", "At 12 o'clock the London train departs.",
     "She baked a chocolate cake for the party."),
    ("I love eating fresh strawberries.", "Fresh strawberries are my favorite food.",
     "The server crashed because the disk was full."),
    ("The children are playing football in the park.", "Kids play soccer in the park.",
     "Interest rates were raised by the central bank."),
    ("Water boils at 100 degrees Celsius.", "At 100 degrees Celsius, water starts to boil.",
     "My brother bought a new car yesterday."),
    ("The doctor told him to rest for a week.", "He was advised by the physician to rest for seven days.",
     "The museum opens at nine in the morning."),
]
SENTENCES = [s for triple in TRIPLES for s in triple]
N_EMBD = 576  # SmolLM2-135M


@pytest.fixture(scope="module")
def embd_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "4", "--n-ctx", "1024", "--embeddings", "--pooling", "mean"],
                tmp_path_factory.mktemp("embeddings") / "server.log") as srv:
        yield srv


@pytest.fixture
def embd_client(embd_server: Server):
    import openai

    return openai.OpenAI(base_url=embd_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)


def _vectors(reply) -> np.ndarray:
    assert [d.index for d in reply.data] == list(range(len(reply.data)))
    return np.array([d.embedding for d in reply.data], dtype=np.float64)


def _metric(base_url: str, name: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=30).text
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


def test_one_input_with_the_openai_sdk(embd_client, embd_server: Server) -> None:
    inputs_before = _metric(embd_server.base_url, "skippy:embedding_inputs_total")
    reply = embd_client.embeddings.create(model="text-embedding-3-small", input="The cat sat on the mat.")
    [vec] = _vectors(reply)
    assert vec.shape == (N_EMBD,) and np.linalg.norm(vec) == pytest.approx(1.0, abs=1e-5)
    assert reply.model == "text-embedding-3-small" and reply.object == "list"  # any model name, echoed
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == 7
    assert _metric(embd_server.base_url, "skippy:embedding_inputs_total") == inputs_before + 1
    props = httpx.get(embd_server.base_url + "/props", timeout=30).json()
    assert (props["embeddings"], props["pooling"], props["n_embd"]) == (True, "mean", N_EMBD)


def test_a_batch_of_64_is_in_order_and_equals_each_input_alone(embd_client) -> None:
    texts = [f"Sentence number {i} is about {topic}." for i, topic in
             enumerate(["cats", "trains", "music", "cooking", "rain", "chess", "boats", "stars"] * 8)]
    batch = _vectors(embd_client.embeddings.create(model="m", input=texts))
    assert batch.shape == (64, N_EMBD)
    assert len({tuple(v) for v in batch.round(6)}) == 64  # 64 different inputs, 64 different vectors
    for i in (0, 17, 63):  # the same vector alone: inputs never see each other in a batch (llama.cpp's kernels
        # depend on the batch's shape, so the numbers move in their last bits: 0.006 at most, measured)
        alone = _vectors(embd_client.embeddings.create(model="m", input=texts[i]))[0]
        assert alone @ batch[i] > 0.999 and np.abs(alone - batch[i]).max() < 0.02


def test_base64_equals_float(embd_client, embd_server: Server) -> None:
    floats = _vectors(embd_client.embeddings.create(model="m", input=SENTENCES[:3], encoding_format="float"))
    raw = embd_client.embeddings.create(model="m", input=SENTENCES[:3], encoding_format="base64")
    decoded = np.array([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in raw.data])
    assert np.array_equal(decoded, floats)  # the float32 values exactly
    sdk_default = _vectors(embd_client.embeddings.create(model="m", input=SENTENCES[:3]))  # the SDK asks for base64
    assert np.array_equal(sdk_default, floats)


def test_token_id_inputs_equal_their_text(embd_client, embd_server: Server) -> None:
    tokens = httpx.post(embd_server.base_url + "/tokenize", json={"content": SENTENCES[0], "add_special": True},
                        timeout=30).json()["tokens"]
    text = _vectors(embd_client.embeddings.create(model="m", input=SENTENCES[0]))
    ids = _vectors(embd_client.embeddings.create(model="m", input=tokens))
    two = _vectors(embd_client.embeddings.create(model="m", input=[tokens, tokens[:3]]))
    assert np.array_equal(text, ids)  # the same input in the same batch shape: the same bits
    # beside another input the batch is larger and llama.cpp's kernels may tile it differently (on an AVX2-only
    # CPU the last bits move): equal within float32 rounding, and the 3-token input is a different vector
    assert np.allclose(two[0], ids[0], rtol=1e-4, atol=1e-6) and not np.allclose(two[1], ids[0], rtol=1e-2)


def test_a_paraphrase_ranks_above_an_unrelated_sentence(embd_client) -> None:
    vec = _vectors(embd_client.embeddings.create(model="m", input=SENTENCES))
    for i, (anchor, _, _) in enumerate(TRIPLES):
        a, para, other = vec[3 * i], vec[3 * i + 1], vec[3 * i + 2]
        assert a @ para - a @ other > 0.1, anchor


def test_vectors_equal_llama_cpp_python_create_embedding(embd_client) -> None:
    import llama_cpp

    # flash attention as the server's (auto: on for this CPU backend), so the kernels are the same
    llm = llama_cpp.Llama(str(ensure_model("SmolLM2-135M-Instruct")), embedding=True, n_ctx=512, n_batch=512,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, flash_attn=True, verbose=False)
    try:
        ref = np.array([d["embedding"] for d in llm.create_embedding(SENTENCES[:6])["data"]], dtype=np.float64)
    finally:
        llm.close()
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)  # llama-cpp-python's create_embedding does not normalize
    ours = _vectors(embd_client.embeddings.create(model="m", input=SENTENCES[:6]))
    # the same batch (the six inputs in one) on the same kernels: equal up to float rounding (2e-8 measured;
    # with flash attention off in llama-cpp-python only, components differ by up to 0.007, cosine 0.9997)
    assert np.abs(ours - ref).max() < 1e-5


def test_chat_streams_while_embedding_batches_run(embd_client, embd_server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "Write a long story about a dragon and a knight."}],
            "max_tokens": 48, "temperature": 0, "stream": True, "cache_prompt": False}
    alone = httpx.post(embd_server.base_url + "/v1/chat/completions", json={**body, "stream": False},
                       timeout=300).json()["choices"][0]["message"]["content"]
    chat = ContentStream(embd_server.base_url, body)  # the content pieces as they arrive, then DONE
    batches_before = _metric(embd_server.base_url, "skippy:embedding_batches_total")
    chat.start()
    assert chat.first.wait(300)
    n_sent = len(chat.events)
    texts = [f"Embedding input {i}: the knight rides through the forest at dawn." for i in range(64)]
    reply = embd_client.embeddings.create(model="m", input=texts)
    n_done = len(chat.events)
    chat.join(300)
    assert len(reply.data) == 64 and chat.events.pop() == DONE
    assert "".join(chat.events) == alone  # the same greedy stream as without embeddings
    assert n_done > n_sent  # tokens kept coming while the embedding batches ran
    # 64 inputs of ~17 tokens over several steps: the budget left by decoding caps each batch
    assert _metric(embd_server.base_url, "skippy:embedding_batches_total") - batches_before >= 3


def test_replies_and_errors_validate_against_openapi_json(embd_server: Server) -> None:
    url = embd_server.base_url
    doc = httpx.get(url + "/openapi.json", timeout=30).json()
    op = doc["paths"]["/v1/embeddings"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/EmbeddingRequest")
    for fmt in ("float", "base64"):
        resp = httpx.post(url + "/v1/embeddings", json={"input": SENTENCES[:2], "encoding_format": fmt}, timeout=300)
        check(doc, json_schema(doc, "/v1/embeddings", "post"), resp.json())
    resp = httpx.post(url + "/v1/embeddings", json={"input": []}, timeout=60)
    check(doc, json_schema(doc, "/v1/embeddings", "post", "default"), resp.json())


BAD = [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": ["a", 1]}, "input"),
    ({"input": [[1, 2], []]}, "input"),
    ({"input": [999999]}, "input"),
    ({"input": [["a"]]}, "input"),
    ({"input": None}, "input"),
    ({"input": {"text": "a"}}, "input"),
    ({}, "input"),
    ({"input": "word " * 600}, "input"),
    ({"input": "a", "dimensions": 64}, "dimensions"),
    ({"input": "a", "dimensions": -1}, "dimensions"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "truncate": "yes"}, "truncate"),
    ({"input": "a", "model": 5}, "model"),
]


@pytest.mark.parametrize(("body", "param"), BAD)
def test_bad_input_is_a_400_envelope_naming_the_field(embd_server: Server, body, param) -> None:
    resp = httpx.post(embd_server.base_url + "/v1/embeddings", json=body, timeout=60)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_a_long_input_is_400_or_cut_with_truncate(embd_server: Server) -> None:
    url = embd_server.base_url + "/v1/embeddings"
    resp = httpx.post(url, json={"input": "word " * 600}, timeout=60)
    assert resp.json()["error"]["code"] == "context_length_exceeded" and "512 tokens" in resp.text
    resp = httpx.post(url, json={"input": "word " * 600, "truncate": True}, timeout=300)
    assert resp.status_code == 200 and resp.json()["usage"]["prompt_tokens"] == 512


def test_malformed_json_and_the_log_have_no_server_error(embd_server: Server) -> None:
    resp = httpx.post(embd_server.base_url + "/v1/embeddings", content=b'{"input": ', timeout=60,
                      headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "error" in resp.json()
    log = embd_server.log()
    assert "Traceback" not in log and " 500 " not in log


def test_llama_servers_own_embedding_route_normalizes_as_embd_normalize_says(embd_server: Server) -> None:
    """``POST /embedding`` (and ``/embeddings``), llama-server's own shape: ``[{"index", "embedding": [[...]]}]``,
    each row normalized by ``embd_normalize`` as llama.cpp's ``common_embd_normalize``; the vectors are
    ``/v1/embeddings``' (checked against llama.cpp above) before their normalization."""
    texts = SENTENCES[:3]
    data = httpx.post(embd_server.base_url + "/v1/embeddings", json={"input": texts}, timeout=60).json()["data"]
    unit = np.array([d["embedding"] for d in data], dtype=np.float64)

    def native(path: str = "/embedding", **body) -> np.ndarray:
        reply = httpx.post(embd_server.base_url + path, json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        assert [e["index"] for e in reply.json()] == list(range(len(reply.json())))
        return np.array([e["embedding"][0] for e in reply.json()], dtype=np.float64)

    assert np.abs(native(content=texts) - unit).max() < 1e-6  # 2, Euclidean: the default
    raw = native("/embeddings", input=texts, embd_normalize=-1)
    assert np.abs(raw / np.linalg.norm(raw, axis=1, keepdims=True) - unit).max() < 1e-6
    assert np.allclose(np.abs(native(content=texts, embd_normalize=0)).max(axis=1), 32760.0)
    assert np.allclose(np.abs(native(content=texts, embd_normalize=1)).sum(axis=1), 1.0)
    assert np.allclose((np.abs(native(content=texts, embd_normalize=3)) ** 3).sum(axis=1), 1.0)
    oai = httpx.post(embd_server.base_url + "/v1/embeddings", json={"input": texts, "embd_normalize": -1}, timeout=60)
    assert np.abs(np.array([d["embedding"] for d in oai.json()["data"]]) - raw).max() < 1e-6  # llama-server's too
    for body, param in (({}, "content"), ({"content": ""}, "content"), ({"content": "x", "embd_normalize": -2},
                                                                         "embd_normalize")):
        reply = httpx.post(embd_server.base_url + "/embedding", json=body, timeout=60)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text


def test_llama_servers_mixed_inputs_are_tokenized_as_it_does(embd_server: Server) -> None:
    """llama-server's ``tokenize_input_prompts``: token ids with strings in one input, and a list of such
    inputs beside strings; each string tokenized with special tokens parsed (they were a 400)."""
    base = embd_server.base_url

    def tokens(text: str) -> list[int]:
        return httpx.post(base + "/tokenize", json={"content": text}, timeout=60).json()["tokens"]

    def vectors(content: object) -> np.ndarray:
        reply = httpx.post(base + "/embedding", json={"content": content, "embd_normalize": -1}, timeout=60)
        assert reply.status_code == 200, reply.text
        return np.array([e["embedding"][0] for e in reply.json()], dtype=np.float64)

    hello, world = tokens("hello"), tokens(" world")
    ids = vectors([hello + world])
    assert np.abs(vectors([*hello, " world"]) - ids).max() < 1e-4  # one input of ids and text
    both = vectors([[*hello, " world"], "x"])  # a list of inputs, mixed and plain
    assert both.shape[0] == 2 and np.abs(both[:1] - ids).max() < 1e-4
    assert np.abs(both[1:] - vectors("x")).max() < 1e-4
    ids_beside_text = vectors(["x", hello + world])  # a string and a list of ids: one input each
    assert ids_beside_text.shape[0] == 2 and np.abs(ids_beside_text[1:] - ids).max() < 1e-4
    bad = httpx.post(base + "/embedding", json={"content": [1, [2, 3]]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "content"


def test_without_embeddings_the_route_answers_501_as_llama_server(base_url: str) -> None:
    resp = httpx.post(base_url + "/v1/embeddings", json={"input": "hello"}, timeout=60)
    assert resp.status_code == 501
    assert httpx.post(base_url + "/embedding", json={"content": "hello"}, timeout=60).status_code == 501
    error = resp.json()["error"]
    assert error["type"] == "not_supported_error" and "--embeddings" in error["message"]
    assert httpx.get(base_url + "/props", timeout=30).json()["embeddings"] is False


def test_the_sdk_does_not_retry_a_route_turned_off(server: Server) -> None:
    # 501 carries X-Should-Retry: false (as OpenAI's API sends it), which openai-python obeys: one request
    # reaches the server, not three (max_retries=2 retries any 5xx without it)
    import openai

    sent = []
    http = httpx.Client(event_hooks={"request": [sent.append]})
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=2, http_client=http)
    with pytest.raises(openai.APIStatusError) as exc:
        client.embeddings.create(model="any", input="hello")
    assert exc.value.status_code == 501 and exc.value.response.headers["x-should-retry"] == "false"
    assert [r.url.path for r in sent] == ["/v1/embeddings"]


def test_an_embeddings_batch_llama_cpp_cannot_split_is_a_clean_start_up_error(tmp_path) -> None:
    # llama.cpp aborted the process (SIGABRT, GGML_ASSERT(ggml_can_mul_mat)) for 257..: above 256 sequences'
    # worth, a batch must split evenly over its 256 sequences; now the flag is refused before anything loads
    srv = Server(["--embeddings", "--pooling", "mean", "--embeddings-batch", "300"], tmp_path / "bad.log")
    try:
        assert srv.proc.wait(timeout=60) == 2
        log = srv.log()
        assert "Invalid value for '--embeddings-batch'" in log and "must be a multiple of 256" in log
        assert "use 256 or 512" in log and "GGML_ASSERT" not in log
    finally:
        srv.stop()
    # a multiple of 256 starts (768, 1024 and 2048 did; 257, 300, 384, 800 and 1000 aborted, measured) and
    # embeds inputs up to that many tokens
    with Server(["--parallel", "1", "--n-ctx", "256", "--embeddings", "--pooling", "mean", "--embeddings-batch",
                 "768"], tmp_path / "good.log") as srv:
        assert "batches of up to 768 tokens and 256 inputs" in srv.log()
        resp = httpx.post(srv.base_url + "/v1/embeddings", json={"input": "word " * 700}, timeout=120)
        assert resp.status_code == 200, resp.text
        assert 512 < resp.json()["usage"]["prompt_tokens"] <= 768


def test_the_embeddings_guide_says_what_langchain_and_the_default_batch_do(base_url: str) -> None:
    # LangChain's OpenAIEmbeddings sends tiktoken (cl100k_base) ids: "hello world" is [15339, 1917], which this
    # vocabulary reads as " autumn bir", embedded without an error; the embeddings guide (where users read about
    # embeddings, linked from the README) says so, with the client's fix, and names the default batch's input limit
    text = httpx.post(base_url + "/detokenize", json={"tokens": [15339, 1917]}, timeout=30).json()["content"]
    assert text == " autumn bir"
    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs" / "guides" / "embeddings.md").read_text(encoding="utf-8")
    assert '`" autumn bir"`' in guide and "check_embedding_ctx_length=False" in guide
    assert "(512 by default" in guide
    assert "guides/embeddings.md" in (root / "README.md").read_text(encoding="utf-8")


async def test_a_pooling_without_vectors_is_400_and_generation_still_works() -> None:
    # the GGUF's pooling ("model") is none for SmolLM2: llama-server's 400 on /v1/embeddings, its per-token vectors
    # on /embedding (llama.cpp's own, unnormalized: its send_embedding), and the engine serves chat as before
    import llama_cpp

    path = str(ensure_model("SmolLM2-135M-Instruct"))
    config = EngineConfig(model=path, parallel=1, n_ctx=512, embeddings=True)
    texts = ["hello world", "The sea is blue today.", "x"]
    async with skippy.open_engine(config) as engine:
        with pytest.raises(InvalidRequest, match="Pooling type 'none' is not OAI compatible") as exc:
            await engine.embeddings(EmbeddingRequest(input="hello"))
        assert exc.value.code == "pooling_not_supported" and exc.value.status == 400
        assert engine.props()["pooling"] == "none" and engine.props()["embeddings"] is False
        native = await engine.embeddings_native(NativeEmbeddingRequest(content=texts, embd_normalize=2))
        reply = await engine.chat(ChatCompletionRequest(messages=[Message("user", "Hi")], max_tokens=3, temperature=0))
        assert reply["usage"]["completion_tokens"] == 3
    llm = llama_cpp.Llama(path, embedding=True, n_ctx=512, n_batch=512, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE,
                          flash_attn=True, verbose=False)
    try:  # each text alone there, the three in one batch here
        ref = [np.array(llm.embed(text, normalize=False), dtype=np.float64) for text in texts]
    finally:
        llm.close()
    assert [e.index for e in native] == [0, 1, 2] and [len(e.embedding) for e in native] == [len(r) for r in ref]
    for entry, rows in zip(native, ref, strict=True):
        assert np.abs(np.array(entry.embedding) - rows).max() < 1e-4  # 0.0 measured
        assert not np.allclose(np.linalg.norm(rows, axis=1), 1.0)  # raw, as llama-server sends them
    config = EngineConfig(model=str(ensure_model("SmolLM2-135M-Instruct")), parallel=1, n_ctx=512)
    async with skippy.open_engine(config) as engine:
        with pytest.raises(NotSupported):
            await engine.embeddings(EmbeddingRequest(input="hello"))


async def test_an_embedded_engine_embeds_beside_a_chat() -> None:
    config = EngineConfig(model=str(ensure_model("SmolLM2-135M-Instruct")), parallel=2, n_ctx=512,
                          embeddings=True, pooling="last")
    async with skippy.open_engine(config) as engine:
        results = {}

        async def chat() -> None:
            results["chat"] = await engine.chat(ChatCompletionRequest(messages=[Message("user", "Count to five.")],
                                                                      max_tokens=12, temperature=0))

        async def embed() -> None:
            results["embd"] = await engine.embeddings(EmbeddingRequest(input=SENTENCES[:8]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(chat)
            nursery.start_soon(embed)
        assert results["chat"]["usage"]["completion_tokens"] == 12
        vec = np.array([d.embedding for d in results["embd"].data])
        assert vec.shape == (8, N_EMBD) and np.allclose(np.linalg.norm(vec, axis=1), 1.0, atol=1e-5)
        assert engine.stats()["slots_processing"] == 0 and json.loads(json.dumps(engine.props()))["pooling"] == "last"
