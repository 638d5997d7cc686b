"""A reply that ``max_tokens`` cuts inside a multi-byte character (issue 35, point 5), on the real server.

SmolLM2's byte-level vocabulary spells most emoji and many katakana as several tokens, so small
limits end a greedy reply between a character's bytes. Every route (chat, legacy completions, the
native ``/completion``, Anthropic Messages, OpenAI Responses) goes through the same output pipeline:
the text ends at the last whole character, streamed and not, never with U+FFFD; the token
logprobs keep the cut token's own bytes.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.sse import iter_sse
from tests.support import Server

PROMPTS = ["Emoji: 😀😃😄😁", "日本語のカタカナ: アイウエオ カキクケコ"]
LIMITS = range(1, 8)
FFFD = "\ufffd"


def _cut(data: bytes) -> bool:
    """True when ``data`` ends inside a character (a UTF-8 sequence that never completed)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.end == len(data) and exc.reason == "unexpected end of data"
    return False


def _clean(text: str, parts: list[str]) -> None:
    assert FFFD not in text and all(FFFD not in p for p in parts), (text, parts)
    assert "".join(parts) == text, (text, parts)


@pytest.fixture
def oai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_native_completion_cut_inside_a_character(server: Server, prompt: str) -> None:
    cuts = 0
    for n in LIMITS:
        body = {"prompt": prompt, "n_predict": n, "temperature": 0, "n_probs": 1}
        whole = httpx.post(server.base_url + "/completion", json=body, timeout=120).json()
        data = b"".join(bytes(p["bytes"]) for p in whole["completion_probabilities"])
        cuts += _cut(data)
        assert whole["content"] == data.decode("utf-8", "ignore")  # the cut character's bytes are dropped
        with httpx.stream("POST", server.base_url + "/completion", json={**body, "stream": True}, timeout=120) as r:
            chunks = list(iter_sse(r))
        _clean(whole["content"], [c["content"] for c in chunks])
        assert b"".join(bytes(p["bytes"]) for c in chunks for p in c.get("completion_probabilities", [])) == data
    assert cuts >= 2  # the limits did cut characters


@pytest.mark.parametrize("prompt", PROMPTS)
def test_chat_and_completions_cut_inside_a_character(oai: openai.OpenAI, prompt: str) -> None:
    cuts = 0
    msgs = [{"role": "user", "content": prompt}]
    for n in LIMITS:
        whole = oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=n, logprobs=True)
        text = whole.choices[0].message.content or ""
        data = b"".join(bytes(t.bytes or []) for t in whole.choices[0].logprobs.content)
        cuts += _cut(data)
        assert whole.choices[0].finish_reason == "length" or not _cut(data)
        stream = oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=n, stream=True)
        _clean(text, [c.choices[0].delta.content or "" for c in stream if c.choices])

        legacy = oai.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=n)
        stream = oai.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=n, stream=True)
        _clean(legacy.choices[0].text, [c.choices[0].text for c in stream if c.choices])
    assert cuts >= 2


@pytest.mark.parametrize("prompt", PROMPTS)
def test_anthropic_and_responses_cut_inside_a_character(server: Server, oai: openai.OpenAI, prompt: str) -> None:
    sdk = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": prompt}]
    for n in LIMITS:
        msg = sdk.messages.create(model="m", max_tokens=n, messages=msgs, extra_body={"temperature": 0})
        text = "".join(b.text for b in msg.content if b.type == "text")
        with sdk.messages.stream(model="m", max_tokens=n, messages=msgs, extra_body={"temperature": 0}) as s:
            parts = list(s.text_stream)
        _clean(text, parts)

        r = oai.responses.create(model="m", input=prompt, max_output_tokens=n, temperature=0)
        with oai.responses.stream(model="m", input=prompt, max_output_tokens=n, temperature=0) as s:
            parts = [e.delta for e in s if e.type == "response.output_text.delta"]
        _clean(r.output_text, parts)
