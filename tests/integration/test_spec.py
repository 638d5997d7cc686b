"""Prompt-lookup speculative decoding with the real model and a real ``skippy serve --spec-ngram 5``.

Each prompt is asked with ``"speculative": false`` and with the server's default (on): greedy output
must be the same token for token (cold prefill both times, ``cache_prompt: false``), the speculating
reply reports its accepted drafts in ``timings``, and ``/metrics`` counts them.
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.support import Server

TEXT = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a small brass lantern and "
        "a notebook bound in faded green cloth. He recorded the direction of the wind, the color of the sky over the "
        "western cliffs, and the number of ships that passed the point before the lamp was lit. Over forty years the "
        "notebooks filled three shelves in the cottage below, and the villagers sometimes came to read them when "
        "they wanted to know what the weather had been like on the day a child was born or a boat was lost. The "
        "keeper never minded. He would put the kettle on, find the right volume, and sit quietly while they turned "
        "the pages.")


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "2", "--n-ctx", "2048", "--spec-ngram", "5"],
                tmp_path_factory.mktemp("spec") / "server.log") as srv:
        yield srv


def chat(srv: Server, content: str, max_tokens: int, **extra) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": max_tokens,
            "cache_prompt": False, **extra}
    r = httpx.post(srv.base_url + "/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


def metric(srv: Server, name: str) -> float:
    text = httpx.get(srv.base_url + "/metrics", timeout=30).text
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


@pytest.mark.parametrize("content,max_tokens,copying", [
    ("Repeat the following text exactly:\n\n" + TEXT, 160, True),
    ("Write a short poem about the sea.", 64, False),
])
def test_greedy_output_is_the_same_with_and_without_speculation(spec_server: Server, content: str,
                                                                max_tokens: int, copying: bool) -> None:
    drafted0 = metric(spec_server, "skippy:spec_draft_tokens_total")
    off = chat(spec_server, content, max_tokens, speculative=False)
    on = chat(spec_server, content, max_tokens)
    assert on["choices"][0]["message"]["content"] == off["choices"][0]["message"]["content"]
    assert on["usage"]["completion_tokens"] == off["usage"]["completion_tokens"]
    assert "draft_n" not in off["timings"]
    if copying:  # the reply copies the prompt: most drafts are accepted
        t = on["timings"]
        assert t["draft_n"] > 0 and t["draft_n_accepted"] > 0.5 * t["draft_n"]
        assert t["draft_n_accepted"] > 0.3 * on["usage"]["completion_tokens"]
        assert metric(spec_server, "skippy:spec_draft_tokens_total") - drafted0 == t["draft_n"]
    accepted = metric(spec_server, "skippy:spec_accepted_tokens_total")
    assert 0 <= accepted <= metric(spec_server, "skippy:spec_draft_tokens_total")


def test_seeded_sampling_follows_the_same_draws(spec_server: Server) -> None:
    """Every emitted token is sampled once by the request's own sampler chain, whether its logits came from a
    draft position or not: with the same seed both arms draw the same tokens."""
    content = "Repeat the following text exactly:\n\n" + TEXT
    extra = {"temperature": 0.7, "seed": 1234}
    off = chat(spec_server, content, 96, speculative=False, **extra)
    on = chat(spec_server, content, 96, speculative=4, **extra)
    assert on["choices"][0]["message"]["content"] == off["choices"][0]["message"]["content"]
    assert on["timings"]["draft_n_accepted"] > 0


def test_a_bad_speculative_value_is_a_400_naming_the_field(spec_server: Server) -> None:
    for bad in (17, -1, "yes"):
        r = httpx.post(spec_server.base_url + "/v1/chat/completions", timeout=30,
                       json={"messages": [{"role": "user", "content": "hi"}], "speculative": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "speculative"
    r = httpx.post(spec_server.base_url + "/v1/completions", timeout=30,
                   json={"prompt": "hi", "speculative": 99})
    assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"


#: a prompt the model copies: its drafts run on past the stop string "kappa" (a verified draft, a multi-step run)
COPY = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau\n" * 3 + \
    "alpha beta"


@pytest.mark.parametrize("route", ["/v1/completions", "/completion"])
@pytest.mark.parametrize("speculative", [False, True])
def test_metrics_count_the_replies_tokens_not_those_decoded_past_a_stop_string(spec_server: Server, route: str,
                                                                               speculative: bool) -> None:
    """``llamacpp:tokens_predicted_total`` grows by the reply's completion tokens, and
    ``skippy:spec_accepted_tokens_total`` by its ``draft_n_accepted``, which is at most its ``predicted_n``:
    the tokens the scheduler decoded after the stop string (the rest of a verified draft or of a multi-step
    run) are in neither (they were counted: 28 for a reply of 12)."""
    names = ("llamacpp:tokens_predicted_total", "skippy:spec_accepted_tokens_total", "skippy:spec_draft_tokens_total")
    before = [metric(spec_server, n) for n in names]
    r = httpx.post(spec_server.base_url + route, timeout=600, json={
        "prompt": COPY, "max_tokens" if route == "/v1/completions" else "n_predict": 50, "stop": ["kappa"],
        "temperature": 0, "cache_prompt": False,
        "speculative": speculative})
    assert r.status_code == 200, r.text
    reply = r.json()
    t = reply["timings"]
    n = reply["usage"]["completion_tokens"] if "usage" in reply else reply["tokens_predicted"]
    assert t["predicted_n"] == n and 0 < n < 50  # stopped by "kappa"
    predicted, accepted, drafted = (metric(spec_server, name) - b for name, b in zip(names, before, strict=True))
    assert predicted == n
    assert (drafted, accepted) == ((t["draft_n"], t["draft_n_accepted"]) if speculative else (0, 0))
    if speculative:
        assert 0 < t["draft_n_accepted"] <= n


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_n_choices_timings_keep_their_draft_counts(spec_server: Server, route: str) -> None:
    """With ``n`` > 1 the request's ``timings`` (every choice's tokens summed, as ``predicted_n``) carry
    ``draft_n`` / ``draft_n_accepted`` summed over the choices (they were left out), and ``/metrics`` agrees."""
    body = {"prompt": COPY} if route == "/v1/completions" else {
        "messages": [{"role": "user", "content": "Repeat exactly:\n" + COPY}]}
    drafted0 = metric(spec_server, "skippy:spec_draft_tokens_total")
    r = httpx.post(spec_server.base_url + route, timeout=600,
                   json={**body, "max_tokens": 30, "n": 2, "temperature": 0, "cache_prompt": False})
    assert r.status_code == 200, r.text
    t = r.json()["timings"]
    assert t["predicted_n"] == r.json()["usage"]["completion_tokens"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] <= t["draft_n"]
    assert metric(spec_server, "skippy:spec_draft_tokens_total") - drafted0 == t["draft_n"]


def test_slots_show_the_server_speculates(spec_server: Server) -> None:
    """llama-server's ``/slots`` ``speculative`` is true where a slot can speculate: ``--spec-ngram 5``."""
    slots = httpx.get(spec_server.base_url + "/slots", timeout=30).json()
    assert slots and all(s["speculative"] is True for s in slots)
