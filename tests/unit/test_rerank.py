"""The sans-IO half of reranking: pairs as llama-server's format_prompt_rerank makes them
(:mod:`skippy.engine.output.rerank`), the request checks and the replies (:mod:`skippy.engine.protocols.rerank`)."""

from __future__ import annotations

import msgspec
import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.output.rerank import MAX_DOCUMENTS, fit_pair, pair_tokens, template_prompt
from skippy.engine.protocols.base import decode_request
from skippy.engine.protocols.rerank.translate import rerank_response, rerank_texts, score_pairs, score_response
from skippy.engine.protocols.rerank.types import RerankRequest, ScoreRequest
from skippy.engine.runtime.base import RerankFormat


def test_a_pair_is_bos_query_eos_sep_document_eos_where_the_vocabulary_adds_them() -> None:
    assert pair_tokens(RerankFormat(bos=1, eos=2, sep=0), [10, 11], [20]) == (1, 10, 11, 2, 0, 20, 2)
    assert pair_tokens(RerankFormat(bos=101, eos=102), [10], [20, 21]) == (101, 10, 102, 20, 21, 102)  # no SEP
    assert pair_tokens(RerankFormat(), [10], [20]) == (10, 20)
    assert pair_tokens(RerankFormat(bos=1, eos=2, sep=0), [], []) == (1, 2, 0, 2)  # an empty document still pairs


def test_the_template_replaces_query_and_document_once() -> None:
    tmpl = "<q>{query}</q><d>{document}</d>{query}"
    assert template_prompt(tmpl, "cats", "dogs") == "<q>cats</q><d>dogs</d>cats"
    # a query holding "{document}" stays as written (llama.cpp's two string_replace_all passes would fill it)
    assert template_prompt(tmpl, "{document}", "x") == "<q>{document}</q><d>x</d>{document}"
    assert template_prompt("{query}", "a\\1", "b") == "a\\1"  # no regex escapes in the texts


def test_a_pair_must_fit_the_embedding_context() -> None:
    assert fit_pair([1, 2, 3], 0, 3) == (1, 2, 3)
    with pytest.raises(InvalidRequest) as exc:
        fit_pair(list(range(10)), 4, 8)
    assert (exc.value.param, exc.value.code) == ("documents", "context_length_exceeded")
    assert "documents[4]" in exc.value.message and "10 tokens" in exc.value.message and "8 tokens" in exc.value.message
    with pytest.raises(InvalidRequest, match="no tokens"):
        fit_pair([], 0, 8, "text_2")
    with pytest.raises(InvalidRequest) as exc:  # the query alone fills the context: the query is the error
        fit_pair(list(range(10)), 0, 8, n_query=8)
    assert (exc.value.param, exc.value.code) == ("query", "context_length_exceeded") and "shorten the query" in \
        exc.value.message
    assert fit_pair(list(range(8)), 0, 8, n_query=8) == tuple(range(8))  # no document tokens, but it fits


def _rerank(**body) -> RerankRequest:
    return decode_request(msgspec.json.encode(body), RerankRequest)


def test_documents_are_strings_or_text_objects() -> None:
    req = _rerank(query="q", documents=["a", {"text": "b", "title": "ignored"}, ""])
    assert rerank_texts(req) == ["a", "b", ""]


@pytest.mark.parametrize(("body", "param"), [
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q"}, "documents"),
    ({"query": "", "documents": ["a"]}, "query"),
    ({"documents": ["a"]}, "query"),
    ({"query": 1, "documents": ["a"]}, "query"),
    ({"query": "q", "documents": "a"}, "documents"),
    ({"query": "q", "documents": [1]}, "documents"),
    ({"query": "q", "documents": [None]}, "documents"),
    ({"query": "q", "documents": [{"content": "a"}]}, "documents"),
    ({"query": "q", "documents": [["a"]]}, "documents"),
    ({"query": "q", "documents": ["x"] * (MAX_DOCUMENTS + 1)}, "documents"),
    ({"query": "q", "documents": ["x"] * 10_000}, "documents"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": -3}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": 1.5}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": "2"}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": True}, "top_n"),
    ({"query": "q", "documents": ["a"], "return_documents": "yes"}, "return_documents"),
])
def test_bad_rerank_requests_name_the_field(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        rerank_texts(_rerank(**body))
    assert exc.value.param == param and exc.value.status == 400
    if body.get("documents") and len(body["documents"]) > MAX_DOCUMENTS:
        assert exc.value.code == "array_above_max_length" and f"at most {MAX_DOCUMENTS}" in exc.value.message


def test_results_are_sorted_best_first_cut_to_top_n_with_documents_when_asked() -> None:
    texts = ["a", "b", "c", "d"]
    scores = [0.5, 2.0, -1.0, 2.0]
    reply = rerank_response(_rerank(query="q", documents=texts), texts, scores, rid="rerank-1", model="m",
                            prompt_tokens=40)
    assert [(r.index, r.relevance_score) for r in reply.results] == [(1, 2.0), (3, 2.0), (0, 0.5), (2, -1.0)]
    body = msgspec.json.decode(msgspec.json.encode(reply))
    assert body == {"id": "rerank-1", "model": "m", "object": "list",
                    "usage": {"prompt_tokens": 40, "total_tokens": 40},
                    "results": [{"index": 1, "relevance_score": 2.0}, {"index": 3, "relevance_score": 2.0},
                                {"index": 0, "relevance_score": 0.5}, {"index": 2, "relevance_score": -1.0}]}
    reply = rerank_response(_rerank(query="q", documents=texts, top_n=2, return_documents=True), texts, scores,
                            rid="r", model="m", prompt_tokens=40)
    assert [(r.index, r.document.text) for r in reply.results] == [(1, "b"), (3, "d")]
    assert len(rerank_response(_rerank(query="q", documents=texts, top_n=99), texts, scores, rid="r", model="m",
                               prompt_tokens=1).results) == 4


def _score(**body) -> ScoreRequest:
    return decode_request(msgspec.json.encode(body), ScoreRequest)


def test_score_pairs_one_to_many_and_many_to_many() -> None:
    assert score_pairs(_score(text_1="q", text_2="d")) == [("q", "d")]
    assert score_pairs(_score(text_1="q", text_2=["a", "b"])) == [("q", "a"), ("q", "b")]
    assert score_pairs(_score(text_1=["q"], text_2=["a", "b"])) == [("q", "a"), ("q", "b")]
    assert score_pairs(_score(text_1=["q", "r"], text_2=["a", "b"])) == [("q", "a"), ("r", "b")]
    reply = score_response([0.25, -1.0], rid="score-1", model="m", created=7, prompt_tokens=9)
    assert msgspec.json.decode(msgspec.json.encode(reply)) == {
        "id": "score-1", "object": "list", "created": 7, "model": "m",
        "data": [{"index": 0, "object": "score", "score": 0.25}, {"index": 1, "object": "score", "score": -1.0}],
        "usage": {"prompt_tokens": 9, "total_tokens": 9, "completion_tokens": 0}}


@pytest.mark.parametrize(("body", "param"), [
    ({"text_1": [], "text_2": ["a"]}, "text_1"),
    ({"text_1": "q", "text_2": []}, "text_2"),
    ({"text_1": "", "text_2": ["a"]}, "text_1"),
    ({"text_1": ["q", "r"], "text_2": ["a", "b", "c"]}, "text_2"),
    ({"text_1": "q", "text_2": ["a"] * 10_000}, "text_2"),
    ({"text_1": "q", "text_2": [1]}, "text_2"),
    ({"text_2": ["a"]}, "text_1"),
])
def test_bad_score_requests_name_the_field(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        score_pairs(_score(**body))
    assert exc.value.param == param
