"""The tokenization cache in the server: a growing conversation's prompts count the tokens llama.cpp gives
the whole rendered prompt (the oracle: the model's vocabulary in this process), and ``/props`` shows the
pieces reused."""

from __future__ import annotations

import httpx

from tests.support import SYSTEM_LONG, Server, VocabOnly, ask


def _cache(srv: Server) -> dict:
    stats = httpx.get(srv.base_url + "/props", timeout=30).json()["tokenization_cache"]
    assert stats is not None
    return stats


def test_a_growing_conversation_is_tokenized_as_llama_cpp_tokenizes_it_whole(model_server: Server) -> None:
    props = httpx.get(model_server.base_url + "/props", timeout=30).json()
    before = _cache(model_server)
    messages = [{"role": "system", "content": SYSTEM_LONG + " <|im_end|> \n <end_of_turn>"},
                {"role": "user", "content": "Where should I go in  May?\n"}]
    with VocabOnly(props["model_path"]) as vocab:
        for turn in range(4):
            reply = ask(model_server.base_url, messages, max_tokens=6)
            prompt = httpx.post(model_server.base_url + "/apply-template", json={"messages": messages},
                                timeout=30).json()["prompt"]
            assert len(prompt) > 1024  # past the inline tokenization: the cache's texts
            assert reply["usage"]["prompt_tokens"] == len(vocab.prompt_tokens(prompt)), turn
            messages += [{"role": "assistant", "content": reply["choices"][0]["message"]["content"] or "ok"},
                         {"role": "user", "content": f"And in {'  June July August'.split()[turn % 3]} ?"}]
    after = _cache(model_server)
    assert after["disabled"] == ""
    assert after["tokenized_chars"] > before["tokenized_chars"]


def test_the_system_prompt_is_tokenized_once_across_requests(server: Server) -> None:
    before = _cache(server)
    system = {"role": "system", "content": "You answer in French. " * 100}
    for question in ("Hello?", "How are you?", "What time is it?"):
        ask(server.base_url, [system, {"role": "user", "content": question}], max_tokens=2)
    after = _cache(server)
    assert {"<|im_start|>", "<|im_end|>"} <= set(after["markers"])
    # the first request tokenizes the system prompt, the next two take it from the cache
    assert after["reused_chars"] - before["reused_chars"] >= 2 * len(system["content"])
    assert after["tokenized_chars"] - before["tokenized_chars"] < 2 * len(system["content"])
