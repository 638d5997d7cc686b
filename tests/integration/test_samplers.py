"""llama-server's and vLLM's sampler fields through the official ``openai`` client: accepted, applied, bounded.

Each sampler is accepted on both routes and a value out of range is a 400 naming the field.
Where a sampler's effect is deterministic it is checked: under greedy decoding DRY and
``repetition_penalty`` change a repetitive answer, ``repeat_last_n: 0`` turns the penalty off,
a tiny ``top_n_sigma`` at temperature 1 keeps only the top token; all defaults spelled out give
the default greedy answer. ``ignore_eos``, ``min_tokens``, ``stop_token_ids`` and
``include_stop_str_in_output`` change where a greedy answer ends.
"""

from __future__ import annotations

import httpx
import openai
import pytest

MODEL = "SmolLM2-135M-Instruct"
SHORT = [{"role": "user", "content": "What is 2+2?"}]  # greedy: one sentence, then end of generation
REPETITIVE = "The capital of France is"  # greedy: repeats a sentence within 40 tokens


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client: openai.OpenAI, extra: dict | None = None, **kw):
    return client.chat.completions.create(model=MODEL, messages=SHORT, **{"temperature": 0, "max_tokens": 40, **kw},
                                          extra_body=extra or {}).choices[0]


def complete(client: openai.OpenAI, extra: dict | None = None, **kw) -> str:
    return client.completions.create(model=MODEL, prompt=REPETITIVE, **{"temperature": 0, "max_tokens": 40, **kw},
                                     extra_body=extra or {}).choices[0].text


#: every sampler field with a valid, non-default value
ACCEPTED = [
    {"typical_p": 0.9},
    {"mirostat": 1, "mirostat_tau": 4.0, "mirostat_eta": 0.2},
    {"mirostat": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.1},
    {"dry_multiplier": 0.8, "dry_base": 1.5, "dry_allowed_length": 3, "dry_penalty_last_n": -1,
     "dry_sequence_breakers": ["\n", "."]},
    {"xtc_probability": 0.5, "xtc_threshold": 0.1},
    {"top_n_sigma": 1.5},
    {"dynatemp_range": 0.5, "dynatemp_exponent": 1.5},
    {"repeat_last_n": -1, "repeat_penalty": 1.1},
    {"min_keep": 5},
    {"n_probs": 3},
    {"repetition_penalty": 1.2},
    {"min_tokens": 3},
    {"ignore_eos": True},
    {"stop_token_ids": [2, 13]},
    {"include_stop_str_in_output": True, "stop": ["."]},
]


@pytest.mark.parametrize("extra", ACCEPTED, ids=[",".join(e) for e in ACCEPTED])
def test_sampler_is_accepted_on_both_routes(client, extra: dict) -> None:
    got = chat(client, extra, temperature=0.8, seed=7, max_tokens=12)
    assert got.finish_reason in ("stop", "length") and got.message.content is not None
    text = complete(client, extra, temperature=0.8, seed=7, max_tokens=12)
    assert isinstance(text, str)


def test_same_seed_same_output_with_mirostat(client) -> None:
    extra = {"mirostat": 2, "mirostat_tau": 5.0}
    first = complete(client, extra, temperature=1.0, seed=11, max_tokens=20)
    assert complete(client, extra, temperature=1.0, seed=11, max_tokens=20) == first


#: (field, out-of-range value)
REFUSED = [
    ("typical_p", 0.0), ("typical_p", 1.5),
    ("mirostat", 3), ("mirostat", -1),
    ("mirostat_tau", -1.0), ("mirostat_eta", 0.0), ("mirostat_eta", 2.0),
    ("dry_multiplier", -0.5), ("dry_base", 0.5), ("dry_allowed_length", -1),
    ("dry_penalty_last_n", -2), ("dry_sequence_breakers", []), ("dry_sequence_breakers", [""]),
    ("xtc_probability", 1.5), ("xtc_probability", -0.1), ("xtc_threshold", 1.5),
    ("top_n_sigma", -2.0), ("dynatemp_range", -1.0), ("dynatemp_exponent", -1.0),
    ("repeat_last_n", -2), ("min_keep", -1), ("min_keep", 10**6), ("n_probs", 21), ("n_probs", -1),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0),
    ("min_tokens", -1), ("min_tokens", 50),  # above max_tokens (5)
    ("stop_token_ids", [-1]), ("stop_token_ids", [10**7]),
    ("ignore_eos", "yes"), ("include_stop_str_in_output", 3),
]


@pytest.mark.parametrize("route", ["chat/completions", "completions"])
@pytest.mark.parametrize("field,value", REFUSED, ids=[f"{f}={v}" for f, v in REFUSED])
def test_out_of_range_sampler_is_400_naming_the_field(server, route: str, field: str, value) -> None:
    body = {"max_tokens": 5, field: value}
    body.update({"messages": SHORT} if route.startswith("chat") else {"prompt": "hi"})
    r = httpx.post(f"{server.base_url}/v1/{route}", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field, err
    assert err["type"] == "invalid_request_error"


def test_out_of_range_sampler_is_400_through_the_openai_client(client) -> None:
    with pytest.raises(openai.BadRequestError) as ei:
        chat(client, {"mirostat": 3})
    assert ei.value.body["param"] == "mirostat"


def test_greedy_output_is_unchanged_by_the_defaults_spelled_out(client) -> None:
    defaults = {"typical_p": 1.0, "mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1, "dry_multiplier": 0.0,
                "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1, "xtc_probability": 0.0,
                "xtc_threshold": 0.1, "top_n_sigma": -1.0, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
                "repeat_last_n": 64, "min_keep": 0, "repetition_penalty": 1.0, "min_tokens": 0,
                "ignore_eos": False, "stop_token_ids": [], "include_stop_str_in_output": False}
    assert complete(client, {**defaults, "cache_prompt": False}) == complete(client, {"cache_prompt": False})
    assert chat(client, defaults).message.content == chat(client).message.content


def test_dry_and_repetition_penalty_change_a_repetitive_greedy_answer(client) -> None:
    plain = complete(client)
    assert "population of approximately" in plain.split("population of approximately", 1)[1]  # it repeats
    assert complete(client, {"dry_multiplier": 2.0, "dry_allowed_length": 2}) != plain
    penalized = complete(client, {"repetition_penalty": 1.5})
    assert penalized != plain
    assert complete(client, {"repeat_penalty": 1.5}) == penalized  # vLLM's name for llama.cpp's penalty
    assert complete(client, {"repetition_penalty": 1.5, "repeat_last_n": 0}) == plain  # window 0: off


def test_tiny_top_n_sigma_keeps_only_the_top_token(client) -> None:
    greedy = complete(client, max_tokens=20)
    for seed in (1, 2):
        assert complete(client, {"top_n_sigma": 0.001, "top_k": 0, "min_p": 0.0}, temperature=1.5, top_p=1.0,
                        seed=seed, max_tokens=20) == greedy


def test_n_probs_returns_top_logprobs(client) -> None:
    got = chat(client, {"n_probs": 3}, max_tokens=5)
    assert got.logprobs is not None and all(len(e.top_logprobs) == 3 for e in got.logprobs.content)
    r = client.completions.create(model=MODEL, prompt="hi", max_tokens=3, temperature=0, extra_body={"n_probs": 2})
    assert all(len(t) == 2 for t in r.choices[0].logprobs.top_logprobs)


def test_ignore_eos_and_min_tokens_keep_generating(client) -> None:
    """Each prompt prefilled afresh (``cache_prompt: false``): greedy decoding after a reused prefix, whose KV
    another batch computed, may flip the near-tie at the end of the first sentence (it did after test_tools)."""
    fresh = {"cache_prompt": False}
    plain = chat(client, fresh)
    assert plain.finish_reason == "stop", plain.message.content
    n = client.chat.completions.create(model=MODEL, messages=SHORT, temperature=0,
                                       max_tokens=40, extra_body=fresh).usage.completion_tokens
    assert n < 30
    r = client.chat.completions.create(model=MODEL, messages=SHORT, temperature=0, max_tokens=40,
                                       extra_body={"ignore_eos": True, **fresh})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 40
    assert r.choices[0].message.content.startswith(plain.message.content)
    r = client.chat.completions.create(model=MODEL, messages=SHORT, temperature=0, max_tokens=60,
                                       extra_body={"min_tokens": n + 5, **fresh})
    assert r.usage.completion_tokens >= n + 5
    assert r.choices[0].message.content.startswith(plain.message.content)


def test_stop_token_ids_end_the_answer_before_that_token(client, server) -> None:
    content = chat(client).message.content
    ids = httpx.post(server.base_url + "/tokenize", json={"content": content}).json()["tokens"]
    i = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])
    prefix = httpx.post(server.base_url + "/detokenize", json={"tokens": ids[:i]}).json()["content"]
    got = chat(client, {"stop_token_ids": [ids[i]]})
    assert got.finish_reason == "stop"
    assert got.message.content == prefix
    # during min_tokens a stop token id is not sampled, so the answer goes on past it
    longer = chat(client, {"stop_token_ids": [ids[i]], "min_tokens": i + 1})
    assert len(longer.message.content) > len(prefix)


def test_include_stop_str_in_output(client) -> None:
    content = chat(client).message.content  # "The answer to this classic math problem is 4."
    word = content.split()[2]
    cut = chat(client, stop=[word]).message.content
    assert cut == content[: content.index(word)]
    assert chat(client, {"include_stop_str_in_output": True}, stop=[word]).message.content == cut + word
    r = client.chat.completions.create(model=MODEL, messages=SHORT, temperature=0, max_tokens=40, stop=[word],
                                       stream=True, extra_body={"include_stop_str_in_output": True})
    assert "".join(c.choices[0].delta.content or "" for c in r if c.choices) == cut + word


def test_llama_server_sampling_flags_are_the_defaults_requests_leave_out(server, tmp_path) -> None:
    """``skippy serve --temp 0 --top-k 1 --repeat-penalty 1.3``, as llama-server command lines give them: a request
    that sets no sampling answers as one that sends those values; one that sends its own keeps them; /props and
    an idle slot show the defaults."""
    from tests.support import Server

    with Server(["--temp", "0", "--top-k", "1", "--repeat-penalty", "1.3", "--parallel", "1", "--n-ctx", "512"],
                tmp_path / "server.log") as srv:
        props = httpx.get(srv.base_url + "/props", timeout=30).json()["default_generation_settings"]["params"]
        assert (props["temperature"], props["top_k"], props["repeat_penalty"]) == (0.0, 1, 1.3)
        assert httpx.get(srv.base_url + "/slots", timeout=30).json()[0]["params"]["repeat_penalty"] == 1.3
        flagged = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
        implicit = flagged.completions.create(model=MODEL, prompt=REPETITIVE, max_tokens=40).choices[0].text
        explicit = flagged.completions.create(model=MODEL, prompt=REPETITIVE, max_tokens=40, temperature=0,
                                              extra_body={"top_k": 1, "repeat_penalty": 1.3}).choices[0].text
        own = flagged.completions.create(model=MODEL, prompt=REPETITIVE, max_tokens=40, temperature=0,
                                         extra_body={"repeat_penalty": 1.0}).choices[0].text
    assert implicit == explicit
    assert own == complete(openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                                         timeout=120))  # the request's own value: the default server's answer
    assert implicit != own  # the server's repeat penalty changed the repetitive greedy answer


FRUIT = "The best fruit in the world is"


def test_temperature_0_and_below_run_typical_p_and_infill_first(server) -> None:
    """llama-server runs its whole chain before temperature 0 (or below), which then keeps the highest logit
    left: typical_p (and infill, where ``samplers`` names it) can drop the plain argmax. A temperature below 0 is
    the same greedy decoding (llama-server's README), on its own routes and the OpenAI ones."""
    def native(**kw) -> str:
        body = {"prompt": FRUIT, "n_predict": 10, "cache_prompt": False, **kw}
        r = httpx.post(f"{server.base_url}/completion", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["content"]

    plain = native(temperature=0)
    typical = native(temperature=0, typical_p=0.05)
    assert typical != plain  # " not the one..." (the argmax) against " a lemon..." (typical_p's pick)
    assert native(temperature=-1, typical_p=0.05) == typical
    assert native(temperature=0, typical_p=0.05, samplers=["top_k", "top_p", "temperature"]) == plain  # not named
    infill = ["top_k", "top_p", "infill", "temperature"]
    assert native(temperature=0, samplers=infill, seed=3) == native(temperature=-0.5, samplers=infill, seed=9)
    for route, body in (("completions", {"prompt": FRUIT}), ("chat/completions", {"messages": SHORT})):
        got = [httpx.post(f"{server.base_url}/v1/{route}", json={**body, "max_tokens": 10, "temperature": t},
                          timeout=120) for t in (0, -1)]
        assert [r.status_code for r in got] == [200, 200], got[1].text
        assert got[0].json()["choices"][0] == got[1].json()["choices"][0]
