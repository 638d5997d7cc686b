"""Context checkpoints (issue 21) on real models and the real server.

Recurrent and hybrid models: tiny random-weight GGUFs of ``mamba`` and ``lfm2`` written by the test
setup (:mod:`tests.tiny_models`; SmolLM2's vocabulary and ChatML template). A multi-turn chat saves
the sequence state at the history boundary and the next turn restores it: ``cached_tokens`` reaches
the turn-1 history, only the rest is prefilled (counted by ``llamacpp:prompt_tokens_total``), and its
tokens and logprobs equal llama-cpp-python's (low-level API, same context shape) for a prefill split
at the same boundaries. An edited earlier message restores nothing; under 50 conversations the
checkpoints stay within ``--cache-ram``.

Gemma 3 (sliding-window attention, window 512): a conversation longer than the window is reused
through a checkpoint instead of being prefilled again. There llama.cpp lays a restored SWA state out
contiguously, while the cold path's cells sit in a ring, so attention sums in another order (up to
~1 in a logit on Gemma 3, as with llama-server's own checkpoints); the reference is llama.cpp doing
the same: the same split, with the state copied out and restored at the boundary
(``llama_state_seq_get_data_ext`` / ``_set_data_ext``).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import httpx
import llama_cpp
import numpy as np
import pytest

from skippy.engine.scheduling.prefix import common_prefix_len
from tests.support import GEMMA, STEP_TOKENS, Raw, Server, gemma_path
from tests.tiny_models import ensure_tiny

SHAPE = ["--parallel", "4", "--n-ctx", "2048"]  # Raw's context shape: 4 streams of 2048 cells, n_batch 512
SYSTEM = {"role": "system", "content": "You are a careful assistant who answers in short sentences."}


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="module", params=["mamba", "lfm2"])
def tiny(request: pytest.FixtureRequest, tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """(server, raw llama-cpp-python, GGUF path) of one generated recurrent / hybrid model."""
    path = ensure_tiny(request.param, tiny_dir)
    with Server(["--model", str(path), *SHAPE], tmp_path_factory.mktemp(request.param) / "server.log") as srv:
        raw = Raw(str(path))
        try:
            yield srv, raw, path
        finally:
            raw.close()


def _chat(server: Server, messages: list[dict], n: int = 8, **extra) -> dict:
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=120,
                   json={"messages": messages, "max_tokens": n, "temperature": 0, "logprobs": True, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _metric(server: Server, name: str) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    [value] = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return value


def _render(server: Server, messages: list[dict], generation_prompt: bool = True) -> str:
    r = httpx.post(server.base_url + "/apply-template", timeout=30,
                   json={"messages": messages, "add_generation_prompt": generation_prompt})
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def _tokens(raw: Raw, text: str) -> list[int]:
    data = text.encode()
    arr = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(raw.vocab, data, len(data), arr, len(data) + 8, True, True)
    return list(arr[:n])


def _decode_to(raw: Raw, tokens: list[int], stop: int) -> np.ndarray:
    """Decode ``tokens[raw.n_past:stop]`` in chunks of ``STEP_TOKENS``; the last chunk's last logprobs."""
    lp = None
    while raw.n_past < stop:
        lp = raw.decode(tokens[raw.n_past:min(stop, raw.n_past + STEP_TOKENS)])
    return lp  # type: ignore[return-value]


def _save(raw: Raw) -> bytes:
    size = llama_cpp.llama_state_seq_get_size_ext(raw.ctx, 0, 0)
    buf = (ctypes.c_uint8 * size)()
    assert llama_cpp.llama_state_seq_get_data_ext(raw.ctx, buf, size, 0, 0) == size
    return bytes(buf)


def _restore(raw: Raw, state: bytes, n: int) -> None:
    raw.trim(0)
    buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    assert llama_cpp.llama_state_seq_set_data_ext(raw.ctx, buf, len(state), 0, 0) == len(state)
    raw.n_past = n


def _logprobs(reply: dict) -> list[float]:
    return [c["logprob"] for c in reply["choices"][0]["logprobs"]["content"]]


def _check(reply: dict, ref: tuple[str, list[float]]) -> None:
    lps = _logprobs(reply)
    assert lps == pytest.approx(ref[1][:len(lps)], abs=1e-4) and len(lps) >= 1
    assert reply["choices"][0]["message"]["content"] == ref[0][:len(reply["choices"][0]["message"]["content"])]


def _conversation(server: Server, raw: Raw, first: str, second: str) -> tuple[list[dict], list[dict], int, dict]:
    """Turn 1 (``first``) and turn 2's messages (``second`` after turn 1's reply); returns (turn-1 messages,
    turn-2 messages, turn-1 history tokens, turn-1 reply)."""
    m1 = [SYSTEM, {"role": "user", "content": first}]
    reply = _chat(server, m1)
    m2 = m1 + [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
               {"role": "user", "content": second}]
    history = _tokens(raw, _render(server, m1, generation_prompt=False))
    return m1, m2, len(history), reply


def test_turn_two_restores_the_checkpoint_and_equals_llama_cpp_for_the_same_split(tiny) -> None:
    server, raw, _ = tiny
    m1, m2, n1, first = _conversation(server, raw, "Describe a quiet harbour at dawn in a few words.",
                                      "Now describe the same harbour at night.")
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    p1, p2 = _tokens(raw, _render(server, m1)), _tokens(raw, _render(server, m2))
    assert len(p1) == first["usage"]["prompt_tokens"] and common_prefix_len(p1, p2) >= n1 >= 20
    b2 = common_prefix_len(_tokens(raw, _render(server, m2, generation_prompt=False)), p2)
    prefilled = _metric(server, "llamacpp:prompt_tokens_total")
    second = _chat(server, m2)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == n1 and second["usage"]["prompt_tokens"] == len(p2)
    # turn 2's prefill work is the rest of its prompt only (counted tokens, not time)
    assert _metric(server, "llamacpp:prompt_tokens_total") - prefilled == len(p2) - n1
    # the reference: llama.cpp prefilling turn 2 cold, split where the server split it (the restored
    # history, then up to turn 2's own boundary, then its generation prompt)
    raw.trim(0)
    _decode_to(raw, p2, n1)
    _decode_to(raw, p2, b2)
    _check(second, raw.greedy(_decode_to(raw, p2, len(p2)), 8))
    # without the cache: cold, in one piece, and equal to llama.cpp's unsplit prefill
    cold = _chat(server, m2, cache_prompt=False)
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    raw.trim(0)
    _check(cold, raw.greedy(_decode_to(raw, p2, len(p2)), 8))


def test_an_edited_earlier_message_does_not_restore_the_checkpoint(tiny) -> None:
    server, raw, _ = tiny
    m1, m2, n1, _ = _conversation(server, raw, "List three kinds of clouds, please.", "Which one brings rain?")
    restored = _metric(server, "skippy:ctx_checkpoints_restored_total")
    edited = [m2[0], {"role": "user", "content": "List three kinds of trees, please."}, *m2[2:]]
    reply = _chat(server, edited)
    assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert _metric(server, "skippy:ctx_checkpoints_restored_total") == restored
    again = _chat(server, m2)  # the unedited conversation still restores its own
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == n1


def test_checkpoints_stay_within_cache_ram_under_50_conversations(tiny_dir: Path,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """--cache-ram 1 (MiB) holds about 45 of the tiny Mamba's 22 KB states: 50 two-turn conversations
    evict the least recently used, the bytes held never exceed the budget, and the latest
    conversation's turn 2 still restores its checkpoint."""
    path = ensure_tiny("mamba", tiny_dir)
    with Server(["--model", str(path), *SHAPE, "--cache-ram", "1"],
                tmp_path_factory.mktemp("budget") / "server.log") as server:
        for i in range(50):
            m1 = [SYSTEM, {"role": "user", "content": f"Conversation {i}: name a number near {i * 7}."}]
            r1 = _chat(server, m1, n=2)
            m2 = m1 + [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
                       {"role": "user", "content": "And one more?"}]
            r2 = _chat(server, m2, n=2)
            assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, i
            assert _metric(server, "skippy:ctx_checkpoint_bytes") <= 2**20
        assert _metric(server, "skippy:ctx_checkpoints_evicted_total") > 0
        assert _metric(server, "skippy:ctx_checkpoints_saved_total") == 100


@pytest.fixture(scope="module")
def gemma_ckpt_server(tmp_path_factory: pytest.TempPathFactory):
    if gemma_path() is None:
        pytest.skip(f"{GEMMA} is not in the model cache")
    with Server(["--model", GEMMA, *SHAPE], tmp_path_factory.mktemp("gemma-ckpt") / "server.log") as srv:
        yield srv


def test_gemma_reuses_a_conversation_longer_than_the_window_through_a_checkpoint(gemma_ckpt_server: Server) -> None:
    """A 1000-token conversation whose slot other requests took meanwhile: turn 2 restores the state saved
    at turn 1's history (SWA layers and full-attention KV) instead of prefilling it again. (A slot whose
    SWA layers still hold the window is reused as before; they keep about window + batch cells, so
    only a reply of over ~512 tokens moves them past the history.)"""
    server = gemma_ckpt_server
    raw = Raw(str(gemma_path()))
    try:
        notes = " ".join(f"Note {i}: the box on shelf {i} is red." for i in range(70))
        m1 = [{"role": "user", "content": f"Read these notes.\n{notes}\nWhich shelf holds box 3?"}]
        first = _chat(server, m1)
        n1 = len(_tokens(raw, _render(server, m1, generation_prompt=False)))
        assert n1 > 600  # its checkpoint holds a sliding window that starts past position 0
        for i in range(4):  # other clients take the 4 slots: the conversation's cached KV is evicted
            _chat(server, [{"role": "user", "content": f"Say the number {i}."}], n=1)
        m2 = m1 + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                   {"role": "user", "content": "And which shelf holds box 9?"}]
        p1, p2 = _tokens(raw, _render(server, m1)), _tokens(raw, _render(server, m2))
        b2 = common_prefix_len(_tokens(raw, _render(server, m2, generation_prompt=False)), p2)
        second = _chat(server, m2)
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == n1
        # llama.cpp: turn 1's prefill up to the boundary, its state copied out and restored, then the rest
        raw.trim(0)
        _decode_to(raw, p1, n1)
        state = _save(raw)
        _restore(raw, state, n1)
        _decode_to(raw, p2, b2)
        _check(second, raw.greedy(_decode_to(raw, p2, len(p2)), 8))
    finally:
        raw.close()
