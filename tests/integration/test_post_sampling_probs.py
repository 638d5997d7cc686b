"""llama-server's ``post_sampling_probs`` on the real server: ``/completion`` and chat answer ``prob`` and
``top_probs``, the distribution each token was drawn from after the sampler chain (the vectorized one, and
llama.cpp's for a grammar or mirostat), where ``n_probs`` / ``logprobs`` alone give raw log-probabilities;
the tokens themselves do not change; ``/v1/completions`` keeps OpenAI's raw logprobs."""

from __future__ import annotations

import math

import httpx
import pytest

from tests.sse import iter_sse
from tests.support import Server

PROMPT = "The three primary colors are"


def complete(srv: Server, **body) -> dict:
    r = httpx.post(srv.base_url + "/completion", json={"prompt": PROMPT, "n_predict": 6, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def check_distribution(entry: dict, n_probs: int, most: int) -> None:
    """One token's post-sampling entry: its probability, at most ``min(n_probs, most)`` candidates by
    probability descending, none of probability 0, their sum at most 1, the token's own among them."""
    assert set(entry) == {"id", "token", "bytes", "prob", "top_probs"}
    top = entry["top_probs"]
    assert 1 <= len(top) <= min(n_probs, most)
    probs = [t["prob"] for t in top]
    assert all(0 < q <= 1 for q in probs) and probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-6
    assert all(set(t) == {"id", "token", "bytes", "prob"} for t in top)
    mine = [t["prob"] for t in top if t["id"] == entry["id"]]
    if mine:
        assert math.isclose(mine[0], entry["prob"], rel_tol=1e-6)
    else:
        assert entry["prob"] <= probs[-1] + 1e-6  # drawn from the tail beyond the n_probs shown


@pytest.mark.parametrize("chain", [
    {"temperature": 0.8, "top_k": 3},  # the vectorized chain
    {"temperature": 1.0, "top_k": 0, "top_p": 0.9, "min_p": 0.0},
    {"temperature": 0.9, "mirostat": 2},  # llama.cpp's chain
    {"temperature": 0.8, "top_k": 3, "grammar": 'root ::= " red" | " blue" | " green" | " yellow"'},
])
def test_completion_gives_the_distribution_each_token_was_drawn_from(server: Server, chain: dict) -> None:
    body = {"n_probs": 5, "seed": 11, **chain}
    post = complete(server, post_sampling_probs=True, **body)
    raw = complete(server, **body)
    assert post["content"] == raw["content"]  # the tokens are the chain's either way
    assert post["generation_settings"]["post_sampling_probs"] and not raw["generation_settings"]["post_sampling_probs"]
    assert len(post["completion_probabilities"]) == post["tokens_predicted"] >= 1
    for entry in post["completion_probabilities"]:
        check_distribution(entry, 5, chain.get("top_k") or 5)
    assert all("logprob" in e and "prob" not in e for e in raw["completion_probabilities"])
    if "grammar" in chain:  # only what the grammar allows is a candidate: " red", " blue"... all start with " "
        first = post["completion_probabilities"][0]["top_probs"]
        assert all(t["token"].startswith(" ") for t in first)


def test_generation_settings_echo_the_field_as_sent(server: Server) -> None:
    got = complete(server, temperature=0, n_probs=0, post_sampling_probs=True)  # no probabilities asked
    assert got["generation_settings"]["post_sampling_probs"] is True and "completion_probabilities" not in got


def test_greedy_draws_its_token_with_probability_one(server: Server) -> None:
    got = complete(server, temperature=0, n_probs=3, post_sampling_probs=True, return_tokens=True)
    assert [e["id"] for e in got["completion_probabilities"]] == got["tokens"]
    for entry in got["completion_probabilities"]:
        assert entry["prob"] == 1.0 and entry["top_probs"] == [
            {"id": entry["id"], "token": entry["token"], "bytes": entry["bytes"], "prob": 1.0}]


def test_streamed_completion_chunks_carry_the_same_probabilities(server: Server) -> None:
    body = {"prompt": PROMPT, "n_predict": 4, "n_probs": 2, "post_sampling_probs": True, "seed": 3,
            "temperature": 0.7, "stream": True}
    with httpx.stream("POST", server.base_url + "/completion", json=body, timeout=120) as r:
        chunks = list(iter_sse(r))
    entries = [e for c in chunks for e in c.get("completion_probabilities", [])]
    assert len(entries) == 4
    whole = complete(server, n_predict=4, n_probs=2, post_sampling_probs=True, seed=3, temperature=0.7)
    assert [e["id"] for e in entries] == [e["id"] for e in whole["completion_probabilities"]]
    for a, b in zip(entries, whole["completion_probabilities"], strict=True):
        assert math.isclose(a["prob"], b["prob"], rel_tol=1e-5)


def test_chat_logprobs_take_llama_servers_shape(server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 5, "seed": 2,
            "temperature": 0.8, "logprobs": True, "top_logprobs": 4, "post_sampling_probs": True}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert content
    for entry in content:
        check_distribution(entry, 4, 40)
    body["post_sampling_probs"] = False
    raw = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120).json()
    raw_content = raw["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in raw_content] == [e["token"] for e in content]
    assert all(set(e) == {"token", "logprob", "bytes", "top_logprobs"} for e in raw_content)


def test_legacy_completions_keep_openais_raw_logprobs(server: Server) -> None:
    body = {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 2, "post_sampling_probs": True}
    r = httpx.post(server.base_url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert all(v < 0 for v in lp["token_logprobs"])  # raw log-probabilities, not greedy's probability 1
