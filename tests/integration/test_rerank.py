"""POST /v1/rerank (and its aliases) and vLLM's /score against the real server, on a tiny random-weight
cross-encoder written with gguf-py (:func:`tests.tiny_models.write_tiny_reranker`: llama.cpp's ``bert``
with a classification head and rank pooling). No small reranker GGUF can be installed from the package
registries, and random weights make the scores meaningless as relevance, so the oracle is llama.cpp's own
rank pooling of the same pairs through llama-cpp-python's low-level API (:func:`llama_cpp_scores`).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np
import pytest

import skippy
from skippy import EngineConfig
from skippy.engine.output.rerank import MAX_DOCUMENTS
from skippy.engine.protocols.rerank.types import RerankRequest, ScoreRequest
from tests.sse import DONE, ContentStream
from tests.support import Server, check, json_schema
from tests.tiny_models import RERANKER_TEMPLATE, ensure_tiny_reranker

QUERY = "What do cats eat?"
DOCUMENTS = [
    "Cats are obligate carnivores and eat meat.",
    "The stock market fell sharply today.",
    "Kittens drink their mother's milk.",
    "Paris is the capital of France.",
    "Dry cat food is made of meat and grain.",
    "A train leaves London at noon.",
    "Some cats like fish.",
    "",
]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_reranker(tmp_path_factory.mktemp("reranker"))


@pytest.fixture(scope="module")
def rerank_server(reranker: Path, tmp_path_factory: pytest.TempPathFactory):
    with Server(["--model", str(reranker), "--reranking", "--parallel", "2", "--n-ctx", "256"],
                tmp_path_factory.mktemp("rerank") / "server.log") as srv:
        yield srv


def llama_cpp_scores(path: Path, pairs: list[tuple[str, str]], template: str | None = None) -> tuple[list[float],
                                                                                                   list[int]]:
    """llama.cpp's own scores of ``pairs``: one batch on a context made as the server's embedding context
    (``embeddings``, rank pooling, 512 tokens, 256 sequences in one unified KV buffer), each pair its own
    sequence, its prompt built as llama-server's format_prompt_rerank does (the template filled in and
    tokenized with special tokens parsed, else BOS query EOS SEP document EOS). Returns the scores (the first
    float of each sequence's pooled output) and each pair's token count."""
    import llama_cpp

    model = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    vocab = llama_cpp.llama_model_get_vocab(model)

    def tokenize(text: str, parse_special: bool) -> list[int]:
        raw = text.encode()
        buf = (llama_cpp.llama_token * (len(raw) + 8))()
        n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, parse_special)
        assert n >= 0
        return list(buf[:n])

    prompts = []
    for q, d in pairs:
        if template is not None:
            prompts.append(tokenize(template.replace("{query}", q).replace("{document}", d), True))
            continue
        eos = llama_cpp.llama_vocab_eos(vocab)
        tokens = [llama_cpp.llama_vocab_bos(vocab)] if llama_cpp.llama_vocab_get_add_bos(vocab) else []
        tokens += tokenize(q, False)
        tokens += [eos] if llama_cpp.llama_vocab_get_add_eos(vocab) else []
        tokens += [llama_cpp.llama_vocab_sep(vocab)] if llama_cpp.llama_vocab_get_add_sep(vocab) else []
        tokens += tokenize(d, False)
        tokens += [eos] if llama_cpp.llama_vocab_get_add_eos(vocab) else []
        prompts.append(tokens)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 512
    params.n_seq_max = 256
    params.kv_unified = True
    params.embeddings = True
    params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_RANK
    ctx = llama_cpp.llama_init_from_model(model, params)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    try:
        k = 0
        for seq, tokens in enumerate(prompts):
            for pos, token in enumerate(tokens):
                batch.token[k], batch.pos[k], batch.n_seq_id[k], batch.logits[k] = token, pos, 1, True
                batch.seq_id[k][0] = seq
                k += 1
        batch.n_tokens = k
        assert llama_cpp.llama_decode(ctx, batch) == 0
        scores = [llama_cpp.llama_get_embeddings_seq(ctx, seq)[0] for seq in range(len(prompts))]
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
    return [float(s) for s in scores], [len(p) for p in prompts]


def _rerank(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/rerank", json={"model": "reranker", **body}, timeout=120)


def test_scores_equal_llama_cpp_rank_pooling_sorted_best_first(rerank_server: Server, reranker: Path) -> None:
    ref, lengths = llama_cpp_scores(reranker, [(QUERY, d) for d in DOCUMENTS])
    resp = _rerank(rerank_server.base_url, query=QUERY, documents=DOCUMENTS)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["model"] == "reranker" and body["object"] == "list" and body["id"].startswith("rerank-")
    results = body["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results), reverse=True)
    ours = [0.0] * len(DOCUMENTS)
    for r in results:
        ours[r["index"]] = r["relevance_score"]
        assert set(r) == {"index", "relevance_score"}  # no document unless asked for, as llama-server
    # the same pairs in one batch of the same shape on the same kernels: equal up to float rounding
    assert np.allclose(ours, ref, rtol=1e-5, atol=1e-5), (ours, ref)
    assert len(set(np.round(ref, 4))) == len(DOCUMENTS)  # random weights still tell the pairs apart
    assert body["usage"] == {"prompt_tokens": sum(lengths), "total_tokens": sum(lengths)}


def test_the_aliases_and_score_give_the_same_scores(rerank_server: Server) -> None:
    url = rerank_server.base_url
    base = _rerank(url, query=QUERY, documents=DOCUMENTS[:4]).json()["results"]
    for path in ("/rerank", "/v2/rerank", "/reranking", "/v1/reranking"):
        resp = httpx.post(url + path, json={"query": QUERY, "documents": DOCUMENTS[:4]}, timeout=60)
        assert resp.json()["results"] == base, path
    by_index = {r["index"]: r["relevance_score"] for r in base}
    for path in ("/score", "/v1/score"):
        resp = httpx.post(url + path, json={"model": "m", "text_1": QUERY, "text_2": DOCUMENTS[:4]}, timeout=60)
        body = resp.json()
        assert body["object"] == "list" and body["model"] == "m" and body["usage"]["completion_tokens"] == 0
        assert [d["index"] for d in body["data"]] == [0, 1, 2, 3] and {d["object"] for d in body["data"]} == {"score"}
        assert [d["score"] for d in body["data"]] == pytest.approx([by_index[i] for i in range(4)], rel=1e-5)
    # N:N pairs by position; in a batch of another shape llama.cpp's own score of a pair moves in its third digit
    # (-5.8653 in a batch of 1 or 2 pairs, -5.8590 in one of 4 or 8, through llama-cpp-python alone: measured)
    many = httpx.post(url + "/score", json={"text_1": [QUERY, "Where is Paris?"], "text_2": DOCUMENTS[2:4]},
                      timeout=60).json()["data"]
    assert many[0]["score"] == pytest.approx(by_index[2], rel=1e-2)
    assert many[1]["score"] != pytest.approx(by_index[3], rel=1e-2)


def test_top_n_return_documents_and_document_objects(rerank_server: Server) -> None:
    url = rerank_server.base_url
    docs = [{"text": d, "id": i} for i, d in enumerate(DOCUMENTS[:5])]
    full = _rerank(url, query=QUERY, documents=DOCUMENTS[:5]).json()["results"]
    top = _rerank(url, query=QUERY, documents=docs, top_n=2, return_documents=True).json()["results"]
    assert [r["index"] for r in top] == [r["index"] for r in full[:2]]
    assert [r["document"] for r in top] == [{"text": DOCUMENTS[r["index"]]} for r in top]
    assert len(_rerank(url, query=QUERY, documents=DOCUMENTS[:3], top_n=50).json()["results"]) == 3


def test_the_gguf_rerank_template_makes_the_prompt(reranker: Path, tmp_path: Path) -> None:
    path = ensure_tiny_reranker(reranker.parent, template=True)
    with Server(["--model", str(path), "--rerank", "--parallel", "1", "--n-ctx", "256"], tmp_path / "t.log") as srv:
        assert "the GGUF's rerank template" in srv.log()
        ref, lengths = llama_cpp_scores(path, [(QUERY, d) for d in DOCUMENTS], template=RERANKER_TEMPLATE)
        plain, _ = llama_cpp_scores(path, [(QUERY, d) for d in DOCUMENTS])
        body = httpx.post(srv.base_url + "/score", json={"text_1": QUERY, "text_2": DOCUMENTS}, timeout=60).json()
        ours = [d["score"] for d in body["data"]]
        assert np.allclose(ours, ref, rtol=1e-5, atol=1e-5) and not np.allclose(ours, plain, rtol=1e-2)
        assert body["usage"]["prompt_tokens"] == sum(lengths)


def test_replies_and_errors_validate_against_openapi_json(rerank_server: Server) -> None:
    url = rerank_server.base_url
    doc = httpx.get(url + "/openapi.json", timeout=30).json()
    for path, body in (("/v1/rerank", {"query": QUERY, "documents": DOCUMENTS[:3]}),
                       ("/v1/rerank", {"query": QUERY, "documents": DOCUMENTS[:3], "return_documents": True}),
                       ("/score", {"text_1": QUERY, "text_2": DOCUMENTS[:3]})):
        resp = httpx.post(url + path, json=body, timeout=60)
        check(doc, json_schema(doc, path, "post"), resp.json())
    resp = httpx.post(url + "/v1/rerank", json={"query": QUERY, "documents": []}, timeout=60)
    check(doc, json_schema(doc, "/v1/rerank", "post", "default"), resp.json())


BAD = [
    ("/v1/rerank", {"query": QUERY}, "documents", None),
    ("/v1/rerank", {"query": QUERY, "documents": []}, "documents", None),
    ("/v1/rerank", {"query": QUERY, "documents": ["x"] * 10_000}, "documents", "array_above_max_length"),
    ("/v1/rerank", {"query": QUERY, "documents": [1, 2]}, "documents", None),
    ("/v1/rerank", {"query": QUERY, "documents": [{"title": "no text"}]}, "documents", None),
    ("/v1/rerank", {"query": QUERY, "documents": "one string"}, "documents", None),
    ("/v1/rerank", {"query": QUERY, "documents": ["word " * 600]}, "documents", "context_length_exceeded"),
    ("/v1/rerank", {"query": "", "documents": ["a"]}, "query", None),
    ("/v1/rerank", {"query": ["a"], "documents": ["a"]}, "query", None),
    ("/v1/rerank", {"documents": ["a"]}, "query", None),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": 0}, "top_n", None),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": -1}, "top_n", None),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": "2"}, "top_n", None),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": 2.5}, "top_n", None),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "model": 3}, "model", None),
    ("/score", {"text_1": [], "text_2": ["a"]}, "text_1", None),
    ("/score", {"text_1": QUERY, "text_2": []}, "text_2", None),
    ("/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, "text_2", None),
    ("/score", {"text_1": QUERY, "text_2": ["x"] * 10_000}, "text_2", "array_above_max_length"),
    ("/score", {"text_1": QUERY, "text_2": [{"text": "a"}]}, "text_2", None),
]


@pytest.mark.parametrize(("path", "body", "param", "code"), BAD)
def test_bad_input_is_a_400_envelope_naming_the_field(rerank_server: Server, path, body, param, code) -> None:
    resp = httpx.post(rerank_server.base_url + path, json=body, timeout=60)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and (code is None or error["code"] == code), error


def test_the_most_documents_are_accepted_one_more_is_not(rerank_server: Server) -> None:
    docs = [f"Document {i} is about cats and what they eat." for i in range(MAX_DOCUMENTS)]
    resp = _rerank(rerank_server.base_url, query=QUERY, documents=docs, top_n=3)
    assert resp.status_code == 200 and len(resp.json()["results"]) == 3
    resp = _rerank(rerank_server.base_url, query=QUERY, documents=[*docs, "one more"])
    assert resp.status_code == 400 and f"at most {MAX_DOCUMENTS} per request" in resp.json()["error"]["message"]


def test_embeddings_are_refused_on_a_reranking_server_and_nothing_is_a_server_error(rerank_server: Server) -> None:
    url = rerank_server.base_url
    resp = httpx.post(url + "/v1/embeddings", json={"input": "hello"}, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "pooling_not_supported"
    assert "/v1/rerank" in resp.json()["error"]["message"]
    props = httpx.get(url + "/props", timeout=30).json()
    assert (props["reranking"], props["embeddings"], props["pooling"]) == (True, False, "rank")
    resp = httpx.post(url + "/v1/rerank", content=b'{"query": ', timeout=60,
                      headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    log = rerank_server.log()
    assert "pairs as [BOS] query [EOS] [SEP] document [EOS]" in log and "not rank" not in log
    assert "Traceback" not in log and " 500 " not in log


def test_an_encoder_does_not_generate_on_any_route(rerank_server: Server) -> None:
    """The BERT cross-encoder has no causal attention: chat, completions, llama-server's /completion, Anthropic's
    messages, Responses and Ollama's chat are each a 400 in the route's shape (llama.cpp would sample noise), and
    /api/show lists no completion capability."""
    url = rerank_server.base_url
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    for path, body in (("/v1/chat/completions", chat), ("/v1/completions", {"prompt": "hi", "max_tokens": 4}),
                       ("/completion", {"prompt": "hi", "n_predict": 4}), ("/v1/responses", {"input": "hi"}),
                       ("/v1/responses", {"input": "hi", "background": True})):
        resp = httpx.post(url + path, json=body, timeout=60)
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["error"]["code"] == "model_not_supported" and "encoder" in resp.json()["error"]["message"]
    resp = httpx.post(url + "/v1/messages", json={"model": "m", **chat}, timeout=60)
    assert resp.status_code == 400 and resp.json()["type"] == "error" and "encoder" in resp.json()["error"]["message"]
    resp = httpx.post(url + "/api/chat", json={"model": "tiny-reranker", "stream": False, **chat}, timeout=60)
    assert resp.status_code == 400 and "encoder" in resp.json()["error"]
    show = httpx.post(url + "/api/show", json={"model": "tiny-reranker"}, timeout=60).json()
    assert "completion" not in show["capabilities"]
    assert httpx.post(url + "/v1/rerank", json={"query": "q", "documents": ["d"]}, timeout=60).status_code == 200


def test_without_reranking_the_routes_answer_400_naming_the_flag(base_url: str) -> None:
    for path, body in (("/v1/rerank", {"query": "q", "documents": ["a"]}), ("/score", {"text_1": "q", "text_2": "a"})):
        resp = httpx.post(base_url + path, json=body, timeout=60)
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["message"] == "This server does not support reranking. Start it with `--reranking`"
        assert error["code"] == "not_supported"
    assert httpx.get(base_url + "/props", timeout=30).json()["reranking"] is False


def _metric(base_url: str, name: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=30).text
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


def test_pairs_are_batched_beside_a_chat_stream(tmp_path: Path) -> None:
    # a chat model with --reranking: its chat streams as before while the rerank pairs go through the
    # embedding context's batches beside decoding (SmolLM2 has no classification head: a start-up warning,
    # and scores that mean nothing, which this test does not read)
    with Server(["--parallel", "2", "--n-ctx", "512", "--reranking"], tmp_path / "chat.log") as srv:
        assert "declares pooling type none, not rank" in srv.log()
        body = {"messages": [{"role": "user", "content": "Write a long story about a dragon and a knight."}],
                "max_tokens": 48, "temperature": 0, "stream": True, "cache_prompt": False}
        alone = httpx.post(srv.base_url + "/v1/chat/completions", json={**body, "stream": False},
                           timeout=300).json()["choices"][0]["message"]["content"]
        chat = ContentStream(srv.base_url, body)
        batches = _metric(srv.base_url, "skippy:embedding_batches_total")
        chat.start()
        assert chat.first.wait(300)
        n_sent = len(chat.events)
        docs = [f"Document {i}: the knight rides through the forest at dawn." for i in range(48)]
        resp = _rerank(srv.base_url, query="Where does the knight ride?", documents=docs)
        n_done = len(chat.events)
        chat.join(300)
        assert resp.status_code == 200 and len(resp.json()["results"]) == 48
        assert chat.events.pop() == DONE and "".join(chat.events) == alone  # the greedy stream as without reranking
        assert n_done > n_sent  # tokens kept coming while the rerank batches ran
        assert _metric(srv.base_url, "skippy:embedding_batches_total") - batches >= 3  # the budget cut the pairs


async def test_an_embedded_engine_reranks(reranker: Path) -> None:
    config = EngineConfig(model=str(reranker), parallel=1, n_ctx=256, reranking=True)
    async with skippy.open_engine(config) as engine:
        reply = await engine.rerank(RerankRequest(query=QUERY, documents=DOCUMENTS[:3], top_n=1))
        scores = await engine.score(ScoreRequest(text_1=QUERY, text_2=DOCUMENTS[:3]))
        assert len(reply["results"]) == 1
        best = max(range(3), key=lambda i: scores["data"][i]["score"])
        assert reply["results"][0]["index"] == best
        assert engine.props()["reranking"] is True
