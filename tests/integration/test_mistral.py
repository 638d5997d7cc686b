"""Mistral's FIM API (``POST /v1/fim/completions``, Codestral's) through Mistral's own SDK (``mistralai``), on
the real server and model: the default model given FIM tokens by ``--override-kv`` (the ``fim_server``
fixture). The filled text is the one ``/v1/completions`` with ``suffix`` gives (one generation path)."""

from __future__ import annotations

import httpx
import pytest
from mistralai.client import Mistral
from mistralai.client.errors import SDKError

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n    return c\n"


@pytest.fixture
def mistral(fim_server: str) -> Mistral:
    return Mistral(api_key="unused", server_url=fim_server)


def test_fim_complete_and_stream_give_the_text_of_completions_with_suffix(mistral: Mistral, fim_server: str) -> None:
    reply = mistral.fim.complete(model="codestral-latest", prompt=PREFIX, suffix=SUFFIX, max_tokens=12,
                                 temperature=0)
    assert reply.object == "chat.completion" and reply.model == "codestral-latest"
    [choice] = reply.choices
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    legacy = httpx.post(fim_server + "/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 12,
                                                              "temperature": 0}, timeout=120).json()
    assert choice.message.content == legacy["choices"][0]["text"]
    assert reply.usage.prompt_tokens == legacy["usage"]["prompt_tokens"]
    assert reply.usage.completion_tokens == legacy["usage"]["completion_tokens"]

    events = list(mistral.fim.stream(model="codestral-latest", prompt=PREFIX, suffix=SUFFIX, max_tokens=12,
                                     temperature=0))
    chunks = [e.data for e in events]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content for c in chunks
                   if c.choices and isinstance(c.choices[0].delta.content, str))
    assert text == choice.message.content
    # Mistral's last chunk has the finish reason and the usage, unasked
    assert chunks[-1].choices[0].finish_reason == choice.finish_reason
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_without_a_suffix_the_prompt_is_continued(mistral: Mistral, fim_server: str) -> None:
    reply = mistral.fim.complete(model="codestral-latest", prompt="The capital of France is", max_tokens=6,
                                 temperature=0)
    legacy = httpx.post(fim_server + "/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 6,
                                                              "temperature": 0}, timeout=120).json()
    assert reply.choices[0].message.content == legacy["choices"][0]["text"] != ""


def test_stop_min_tokens_and_random_seed_are_taken(mistral: Mistral, fim_server: str) -> None:
    reply = mistral.fim.complete(model="m", prompt=PREFIX, suffix=SUFFIX, max_tokens=8, min_tokens=8,
                                 temperature=0.9, random_seed=7)
    assert reply.usage.completion_tokens == 8  # min_tokens: no end before 8 tokens
    again = mistral.fim.complete(model="m", prompt=PREFIX, suffix=SUFFIX, max_tokens=8, min_tokens=8,
                                 temperature=0.9, random_seed=7)
    assert again.choices[0].message.content == reply.choices[0].message.content
    first = reply.choices[0].message.content
    stop = first[2:4] if len(first) >= 4 else first[-1]
    cut = mistral.fim.complete(model="m", prompt=PREFIX, suffix=SUFFIX, max_tokens=8, temperature=0.9,
                               random_seed=7, stop=[stop])
    assert stop not in cut.choices[0].message.content and cut.choices[0].finish_reason == "stop"


def test_bad_input_is_a_400_and_a_model_without_fim_tokens_names_the_suffix(fim_server: str, base_url: str) -> None:
    for body, param in (({"suffix": "x"}, "prompt"), ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
                        ({"prompt": 3}, "prompt")):
        r = httpx.post(fim_server + "/v1/fim/completions", json=body, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    # the default server's vocabulary has no FIM tokens: a suffix cannot be filled
    with pytest.raises(SDKError) as exc:
        Mistral(api_key="unused", server_url=base_url).fim.complete(model="m", prompt=PREFIX, suffix=SUFFIX,
                                                                    max_tokens=4)
    assert exc.value.status_code == 400 and "suffix" in exc.value.body
    # streamed (an empty suffix too), the error comes before the headers: a JSON 400, not an event stream
    r = httpx.post(base_url + "/v1/fim/completions", json={"prompt": PREFIX, "suffix": "", "stream": True},
                   timeout=60)
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["param"] == "suffix"


def test_models_list_reads_the_model_cards(mistral: Mistral, base_url: str) -> None:
    """Mistral's SDK refuses a model entry without its card's ``type`` and ``capabilities``."""
    [card] = [m for m in mistral.models.list().data if m.id != "auto"][:1]
    assert card.type == "base" and card.capabilities.completion_chat and card.capabilities.function_calling
    assert card.capabilities.completion_fim and card.max_context_length == 2048  # --n-ctx: tokens per sequence
    [plain] = [m for m in Mistral(api_key="unused", server_url=base_url).models.list().data if m.id != "auto"][:1]
    assert not plain.capabilities.completion_fim and not plain.capabilities.vision
