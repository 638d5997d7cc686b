"""n > 1, completions prompt lists and token ids, echo with prompt logprobs, FIM: the real server, the
official ``openai`` client (streamed and not).

The session server runs ``--parallel 8``. The choices of one prompt are prefilled once: the server's
``llamacpp:prompt_tokens_total`` grows by the prompt plus ``MIN_TAIL`` tokens per further choice (each
choice prefills the prompt's last tokens itself). Prompts carry a nonce so no earlier request's cached
prefix shortens them. Greedy outputs are compared across batch compositions only on prompts where
that holds (DESIGN.md, Runtime facts: the argmax agreed at batch 1 and 16).
"""

from __future__ import annotations

import math
import re
import secrets

import httpx
import openai
import pytest

from skippy.engine.scheduling.prefix import MIN_REUSE, MIN_TAIL

MODEL = "SmolLM2-135M-Instruct"


def prompt_tokens_total(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return float(re.search(r"^llamacpp:prompt_tokens_total (\S+)", text, re.M).group(1))


def nonce() -> str:
    return secrets.token_hex(4)


def question() -> list[dict]:
    return [{"role": "system", "content": f"Session {nonce()}."}, {"role": "user", "content": "Name a color."}]


# -- n > 1 on chat --------------------------------------------------------------------------------

def test_chat_n_prefills_once_and_greedy_choices_equal_n_1(client: openai.OpenAI, base_url: str) -> None:
    messages = question()
    before = prompt_tokens_total(base_url)
    reply = client.chat.completions.create(model=MODEL, messages=messages, n=3, max_tokens=12, temperature=0)
    prefilled = prompt_tokens_total(base_url) - before
    assert [c.index for c in reply.choices] == [0, 1, 2]
    usage = reply.usage
    assert prefilled == usage.prompt_tokens + 2 * MIN_TAIL  # the prompt once, then each copy's last tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    texts = {c.message.content for c in reply.choices}
    assert len(texts) == 1
    single = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0,
                                            extra_body={"cache_prompt": False})
    assert texts == {single.choices[0].message.content}
    assert single.usage.prompt_tokens == usage.prompt_tokens  # counted once, not per choice
    assert usage.completion_tokens == 3 * single.usage.completion_tokens  # every choice's


def test_chat_n_stream_interleaves_choices_by_index(client: openai.OpenAI, base_url: str) -> None:
    messages = question()
    whole = client.chat.completions.create(model=MODEL, messages=messages, n=3, max_tokens=10, temperature=0.9,
                                           seed=11, extra_body={"cache_prompt": False})
    stream = client.chat.completions.create(model=MODEL, messages=messages, n=3, max_tokens=10, temperature=0.9,
                                            seed=11, stream=True, stream_options={"include_usage": True},
                                            extra_body={"cache_prompt": False})
    order, texts, finishes, roles, usage, ids = [], {0: "", 1: "", 2: ""}, {}, set(), None, set()
    for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
            continue
        [choice] = chunk.choices
        order.append(choice.index)
        if choice.delta.role:
            roles.add(choice.index)
        texts[choice.index] += choice.delta.content or ""
        if choice.finish_reason:
            finishes[choice.index] = choice.finish_reason
    assert len(ids) == 1 and roles == {0, 1, 2} and set(finishes) == {0, 1, 2}
    assert order[:3] == [0, 1, 2]  # the role chunks, then the choices interleave as their tokens come
    body = order[3:]
    assert any(body[i] != body[i + 1] for i in range(len(body) - 1))
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    # the same seed gives the same choices, streamed or not; different choices sample differently
    assert [texts[i] for i in range(3)] == [c.message.content for c in whole.choices]
    assert len(set(texts.values())) > 1


def test_n_beyond_parallel_is_400_naming_n(client: openai.OpenAI) -> None:
    for call in (lambda: client.chat.completions.create(model=MODEL, messages=question(), n=9, max_tokens=2),
                 lambda: client.completions.create(model=MODEL, prompt="Hi", n=9, max_tokens=2)):
        with pytest.raises(openai.BadRequestError) as exc:
            call()
        assert exc.value.body["param"] == "n" and "--parallel" in exc.value.body["message"]


# -- /v1/completions: prompt lists and token ids ---------------------------------------------------

def test_completions_prompt_list_gives_n_choices_per_prompt(client: openai.OpenAI, base_url: str) -> None:
    prompts = [f"Story {nonce()}: Once upon a time", f"Fact {nonce()}: The sky is"]  # shorter than MIN_REUSE
    before = prompt_tokens_total(base_url)
    reply = client.completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=6, temperature=0)
    # each prompt prefilled once, however short; its second choice copies it and prefills its last tokens
    assert prompt_tokens_total(base_url) - before == reply.usage.prompt_tokens + 2 * MIN_TAIL
    for p in prompts:  # short prompts: without n > 1 they would not be shared at all
        assert len(httpx.post(base_url + "/tokenize", json={"content": p}, timeout=10).json()["tokens"]) < MIN_REUSE
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]  # index = prompt_i * n + j
    singles = [client.completions.create(model=MODEL, prompt=p, max_tokens=6, temperature=0,
                                         extra_body={"cache_prompt": False}) for p in prompts]
    assert [c.text for c in reply.choices] == [s.choices[0].text for s in singles for _ in range(2)]
    assert reply.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert reply.usage.completion_tokens == 2 * sum(s.usage.completion_tokens for s in singles)


def test_completions_token_id_prompts_match_the_text(client: openai.OpenAI, base_url: str) -> None:
    text = f"Note {nonce()}: the capital of France is"
    ids = httpx.post(base_url + "/tokenize", json={"content": text, "add_special": True}, timeout=10).json()["tokens"]
    by_text = client.completions.create(model=MODEL, prompt=text, max_tokens=5, temperature=0,
                                        extra_body={"cache_prompt": False})
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=5, temperature=0,
                                       extra_body={"cache_prompt": False})
    lists = client.completions.create(model=MODEL, prompt=[ids, ids[:-2]], max_tokens=5, temperature=0,
                                      echo=True)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)
    assert [c.index for c in lists.choices] == [0, 1]
    assert lists.choices[0].text == text + by_text.choices[0].text  # echo: the detokenized ids first
    assert lists.choices[1].text.startswith(text.rsplit(" ", 2)[0])


def test_completions_prompt_list_stream_interleaves(client: openai.OpenAI) -> None:
    prompts = [f"List {nonce()}: one, two,", f"Count {nonce()}: 1, 2,"]
    stream = client.completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=6, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    texts, finished, usage = {i: "" for i in range(4)}, set(), None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            continue
        [choice] = chunk.choices
        texts[choice.index] += choice.text
        if choice.finish_reason:
            finished.add(choice.index)
    whole = client.completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=6, temperature=0)
    assert finished == {0, 1, 2, 3} and [texts[i] for i in range(4)] == [c.text for c in whole.choices]
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.parametrize("prompt", [[], ["a", 5], [[]], [[1, 2], "b"], [49152], [[1, -1]]])
def test_bad_prompt_lists_are_400_naming_prompt(client: openai.OpenAI, prompt) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    assert exc.value.body["param"] == "prompt"


# -- echo with logprobs ----------------------------------------------------------------------------

def test_echo_logprobs_score_the_prompt_and_fill_text_offset(client: openai.OpenAI) -> None:
    stem = f"Topic {nonce()}. The capital of France is"
    plain = client.completions.create(model=MODEL, prompt=stem, max_tokens=1, temperature=0, logprobs=1,
                                      extra_body={"cache_prompt": False})
    nxt, nxt_lp = plain.choices[0].logprobs.tokens[0], plain.choices[0].logprobs.token_logprobs[0]
    assert plain.choices[0].logprobs.text_offset == [len(stem)]  # OpenAI: offsets count from the prompt's start
    prompt = stem + nxt
    reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                      logprobs=2)
    [choice] = reply.choices
    lp = choice.logprobs
    assert choice.text.startswith(prompt)
    n_prompt = reply.usage.prompt_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == \
        n_prompt + reply.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert all(len(t) == 2 for t in lp.top_logprobs[1:])
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    # the prompt's last token was the greedy continuation of the stem: scored as it was sampled
    assert lp.tokens[n_prompt - 1] == nxt and math.isclose(lp.token_logprobs[n_prompt - 1], nxt_lp, abs_tol=0.05)


def test_echo_logprobs_stream_and_n(client: openai.OpenAI) -> None:
    prompt = f"Topic {nonce()}. The capital of France is"
    whole = client.completions.create(model=MODEL, prompt=prompt, n=2, max_tokens=3, temperature=0, echo=True,
                                      logprobs=1)
    stream = client.completions.create(model=MODEL, prompt=prompt, n=2, max_tokens=3, temperature=0, echo=True,
                                       logprobs=1, stream=True)
    firsts: dict[int, object] = {}
    tokens = {0: [], 1: []}
    for chunk in stream:
        [c] = chunk.choices
        if c.index not in firsts:
            firsts[c.index] = c
            assert c.text == prompt  # the echo chunk leads, with the prompt's logprobs
        if c.logprobs is not None:
            tokens[c.index] += c.logprobs.token_logprobs
    for i in (0, 1):
        expect = whole.choices[i].logprobs.token_logprobs
        assert tokens[i][0] is None and len(tokens[i]) == len(expect)
        assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(tokens[i][1:], expect[1:], strict=True))
    assert whole.choices[0].logprobs.token_logprobs == whole.choices[1].logprobs.token_logprobs


# -- fill in the middle ----------------------------------------------------------------------------

def test_suffix_and_infill_need_fim_tokens(client: openai.OpenAI, base_url: str) -> None:
    # SmolLM2-135M's vocabulary has FIM_REP only (no prefix / suffix / middle tokens)
    with pytest.raises(openai.BadRequestError) as exc:
        client.completions.create(model=MODEL, prompt="def add(a, b):", suffix="\n    return c", max_tokens=8)
    assert exc.value.body["param"] == "suffix" and "fill-in-the-middle" in exc.value.body["message"]
    resp = httpx.post(base_url + "/infill", json={"input_prefix": "def add(a, b):", "input_suffix": "return c"},
                      timeout=30)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input_prefix"
    assert "fill-in-the-middle" in resp.json()["error"]["message"]
