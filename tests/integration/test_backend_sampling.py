"""``--backend-sampling``: requests sampled in llama.cpp's decode graph (greedy, sampled with a seed, penalized) answer
as the default server does.

Requests run one at a time, so both servers decode the same batch shapes (on some CPUs llama.cpp's kernels round a
batch of a different size differently, and a greedy text may then part ways)."""

from __future__ import annotations

import httpx
import pytest

from tests.support import Server

PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "List three prime numbers."]


@pytest.fixture(scope="module")
def bs_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "8", "--n-ctx", "2048", "--backend-sampling"],
                tmp_path_factory.mktemp("bs") / "server.log") as srv:
        yield srv


def chat(srv: Server, content: str, **extra) -> dict:
    r = httpx.post(srv.base_url + "/v1/chat/completions", timeout=120,
                   json={"messages": [{"role": "user", "content": content}], "max_tokens": 24, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_backend_sampled_replies_equal_the_default_servers(server: Server, bs_server: Server) -> None:
    props = httpx.get(bs_server.base_url + "/props").json()
    assert props["backend_sampling"] is True and props["backend_sampled"] is True
    assert httpx.get(server.base_url + "/props").json()["backend_sampling"] is False
    kinds = [{"temperature": 0}, {"temperature": 0, "logprobs": True, "top_logprobs": 2},
             {"temperature": 0.8, "seed": 7}, {"temperature": 0},  # greedy, requests that read the logits,
             {"temperature": 0.7, "seed": 3, "top_p": 0.9, "repeat_penalty": 1.2, "presence_penalty": 0.3},
             {"temperature": 0.8, "seed": 7, "logprobs": True},  # sampled in the graph and on the host,
             {"temperature": 1.0, "seed": 1, "top_k": 49153, "top_p": 0.9},  # past the vocabulary: was an abort
             {"temperature": 1.3, "seed": 3, "top_k": 40, "top_p": 1.0},  # left to the host: see graph_exact
             {"temperature": 1.0, "seed": 4294967294}, {"temperature": 1.0, "seed": 3, "min_p": 1.0}]
    for extra in kinds:  # each slot switches between the graph's sampler and the raw logits
        for prompt in PROMPTS:
            got, ref = chat(bs_server, prompt, **extra), chat(server, prompt, **extra)
            assert got["message"]["content"] == ref["message"]["content"] and got["message"]["content"]
            assert got["finish_reason"] == ref["finish_reason"]
            if "logprobs" in extra:
                tokens = [[t["token"] for t in c["logprobs"]["content"]] for c in (got, ref)]
                assert tokens[0] == tokens[1]
