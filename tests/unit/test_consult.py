"""The sans-IO consultation rules (skippy/engine/hooks/consult.py): when to consult, which peers, in which
order, the request sent, the hint read from the answer, the injected text."""

from __future__ import annotations

import pytest

from skippy.engine.config import EngineConfig
from skippy.engine.hooks.consult import (
    CONSULT_TEMPERATURE,
    INSTRUCTION,
    ConsultRules,
    PeerInfo,
    PeerStats,
    check_peers,
    consultation_request,
    hint_text,
    injection,
    is_url,
    last_user_text,
    peer_order,
    peer_problem,
    should_consult_start,
)
from skippy.engine.hooks.signals import PrefillSignals
from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message

RULES = ConsultRules(entropy=2.0, margin=0.5, max_tokens=64, max_chars=40)


@pytest.mark.parametrize("entropy,margin,expected", [
    (2.0, 3.0, True),    # at the entropy threshold
    (5.0, 3.0, True),
    (1.99, 0.5, True),   # at the margin threshold
    (0.1, 0.0, True),    # a tie between the top two
    (1.99, 0.51, False),  # sure on both counts
    (0.0, 10.0, False),
])
def test_an_uncertain_start_is_high_entropy_or_a_small_margin(entropy: float, margin: float, expected: bool) -> None:
    assert should_consult_start(PrefillSignals(entropy, margin, 7), RULES) is expected


def test_forced_thresholds_always_or_never_consult() -> None:
    always = ConsultRules(entropy=0.0, margin=0.0)
    never = ConsultRules(entropy=1e9, margin=0.0)
    assert should_consult_start(PrefillSignals(0.0, 9.0, 1), always)
    assert not should_consult_start(PrefillSignals(30.0, 9.0, 1), never)


def test_rules_from_the_engine_config() -> None:
    c = EngineConfig(model="m.gguf", consult=("gemma",), consult_entropy=1.5, consult_margin=0.25,
                     consult_timeout=3.0, consult_max_tokens=50, consult_max_chars=100)
    assert ConsultRules.from_engine_config(c) == ConsultRules(1.5, 0.25, 3.0, 50, 100)
    d = EngineConfig(model="m.gguf")
    assert d.consult == () and ConsultRules.from_engine_config(d) == ConsultRules()
    assert EngineConfig(model="m.gguf", consult="http://h:1").consult == ("http://h:1",)  # one string: a tuple


@pytest.mark.parametrize("peer", ["gemma-3-270m", "SmolLM2-135M-Instruct", "http://127.0.0.1:8080",
                                  "https://api.example.com/v1", "http://[::1]:11434/v1", "HTTP://h"])
def test_good_peers(peer: str) -> None:
    assert peer_problem(peer) is None


@pytest.mark.parametrize("peer,words", [("", "model name"), ("two words", "spaces"), ("ftp://h", "http://"),
                                        ("http://", "host"), ("http://h:99999", "Port"),
                                        ("http://h/v1?x=1", "base URL"), (3, "model name")])
def test_bad_peers_say_why(peer: object, words: str) -> None:
    problem = peer_problem(peer)
    assert problem is not None and words in problem
    with pytest.raises(ValueError, match="consult"):
        EngineConfig(model="m.gguf", consult=(peer,))


def test_is_url() -> None:
    assert is_url("http://h") and is_url("https://h") and not is_url("gemma")


def test_peers_are_checked_against_the_served_models() -> None:
    smol = (("SmolLM2-135M-Instruct", "smollm2"), ("gemma-3-270m",))
    gemma = (("gemma-3-270m", "gemma3:270m"), ("SMOLLM2", "http://127.0.0.1:9"))
    check_peers([smol, gemma])  # names of served models (any alias, any case) and URLs
    check_peers([(("a",), ("http://h:1",))])  # one model, a remote peer
    with pytest.raises(ValueError, match=r"'llama' is neither a model this server serves \('SmolLM2"):
        check_peers([(smol[0], ("llama",)), gemma])
    with pytest.raises(ValueError, match="cannot consult itself"):
        check_peers([(("a", "alias-a"), ("ALIAS-A",))])
    # several models: a model naming itself is skipped by the peer order, not refused
    check_peers([(("a",), ("a", "b")), (("b",), ("a",))])


def test_peer_order_skips_the_asker_then_prefers_larger_then_faster() -> None:
    peers = [PeerInfo("small-fast", "s", size=100, latency_ms=10.0),
             PeerInfo("big-slow", "b", size=1000, latency_ms=900.0),
             PeerInfo("big-fast", "b2", size=1000, latency_ms=100.0),
             PeerInfo("http://remote", None),  # size unknown
             PeerInfo("self", "Asker", size=10**9),
             PeerInfo("big-new", "b3", size=1000)]  # no latency observed yet
    order = [p.name for p in peer_order(peers, {"asker", "alias"})]
    assert order == ["big-fast", "big-slow", "big-new", "small-fast", "http://remote"]
    # a remote peer whose answers came from the asker's own model is left out once that is known
    assert peer_order([PeerInfo("http://r", "alias")], ["asker", "alias"]) == []
    # ties keep the --consult order
    ties = [PeerInfo("x"), PeerInfo("y"), PeerInfo("z")]
    assert [p.name for p in peer_order(ties, ["a"])] == ["x", "y", "z"]


def test_peer_stats_average() -> None:
    s = PeerStats(alpha=0.5)
    assert s.mean_ms is None
    s.observe(100.0)
    s.observe(200.0)
    assert (s.n, s.mean_ms) == (2, 150.0)


def _chat(*messages: Message, **kw) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=list(messages), **kw)


def test_the_consultation_asks_the_last_user_message_only() -> None:
    req = _chat(Message("system", "You are a pirate."), Message("user", "First question?"),
                Message("assistant", "An answer."), Message("user", "  What is the capital of Peru?  "),
                temperature=1.3, max_tokens=900, stream=True, mesh_hooks=True, user="alice", tools=[])
    c = consultation_request(req, RULES, model="gemma-3-270m")
    assert c is not None
    assert [(m.role, m.content) for m in c.messages] == [("system", INSTRUCTION),
                                                         ("user", "What is the capital of Peru?")]
    assert (c.model, c.temperature, c.max_tokens, c.mesh_hooks, c.stream) == \
        ("gemma-3-270m", CONSULT_TEMPERATURE, 64, False, False)
    assert c.user is None and c.tools is None and not c.return_hook_events


def test_text_parts_are_joined_and_no_user_text_means_no_consultation() -> None:
    parts = [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "what is it?"}]
    assert last_user_text(_chat(Message("user", parts))) == "Look:\nwhat is it?"  # type: ignore[arg-type]
    assert consultation_request(_chat(Message("system", "s")), RULES) is None
    assert consultation_request(_chat(Message("user", "   ")), RULES) is None
    assert consultation_request(object(), RULES) is None


@pytest.mark.parametrize("answer,hint", [
    ("Lima.", "Lima."),
    ("  Lima\n\n is the   capital. ", "Lima is the capital."),
    ("<think>Peru... capital is Lima</think>\nLima.", "Lima."),
    ("<think>still thinking when max_tokens ran out", None),
    ("", None),
    (None, None),
    ("   \n ", None),
    # cut at the last sentence end within 40 characters
    ("Lima is the capital. It is on the coast of the Pacific Ocean.", "Lima is the capital."),
    # no sentence end past half: cut at a word, marked
    ("Lima which is the capital city lies on the Pacific coast of Peru", "Lima which is the capital city lies..."),
])
def test_the_hint_is_the_answer_trimmed_and_without_thinking(answer: str | None, hint: str | None) -> None:
    got = hint_text(answer, RULES.max_chars)
    assert got == hint
    assert got is None or len(got) <= RULES.max_chars


def test_a_hint_without_spaces_is_cut_hard() -> None:
    got = hint_text("x" * 100, 40)
    assert got is not None and len(got) == 40 and got.endswith("...")


def test_the_injection_format() -> None:
    assert injection("gemma-3-270m", "Lima.") == "\n[Note from gemma-3-270m: Lima.]\n"
