"""The reasoning budget (llama-server's ``--reasoning-budget`` / ``thinking_budget_tokens``): after
``budget`` tokens inside ``<think>`` the core forces the budget message and ``</think>`` in place of
sampled tokens, then sampling resumes. Driven over the core's fake runtime."""

from __future__ import annotations

import pytest

from skippy.engine.scheduling.budget import BudgetState, ReasoningBudget
from tests.support import PROMPT, finish_of, make, req, run, step, tokens_of

# token ids -> text pieces: 60 "<think>", 61 "</think>", 62 "\n", 63 "Hmm", 64 " ok", 65 "</", 66 "think>"
PIECES = {60: b"<think>", 61: b"</think>", 62: b"\n", 63: b"Hmm", 64: b" ok", 65: b"</", 66: b"think>",
          70: b" Enough."}
CLOSE = (61,)


def piece(token: int) -> bytes:
    return PIECES.get(token, b"x")


def rule(budget: int, *, started: bool = False, forced: tuple[int, ...] = CLOSE) -> ReasoningBudget:
    return ReasoningBudget(budget, "<think>", "</think>", forced, started, piece)


def generate(script, budget_rule, max_tokens=12, **kw):
    rt, core = make(n_seq_max=1, **kw)
    rt.scripts[1] = list(script)
    core.add(req(1, PROMPT, max_tokens, reasoning_budget=budget_rule))
    out = run(rt, core)
    return tokens_of(out, 1), finish_of(out, 1), rt


def test_the_close_is_forced_after_budget_tokens_then_sampling_resumes():
    toks, fin, _ = generate([60, 63, 63, 63, 63, 63, 63, 64, 64, 64, 64], rule(3))
    # <think> opens (not counted), three reasoning tokens, then the forced close replaces a sampled token
    assert toks[:5] == [60, 63, 63, 63, 61]
    assert toks[5:] and 61 not in toks[5:]
    assert fin.reason == "length" and fin.completion_tokens == len(toks) == 12


def test_a_forced_token_is_accepted_by_the_sampler_not_sampled():
    """The forced close takes the place of sampling (a grammar then follows the text the sequence holds):
    the sampler accepts it, and the script's next token comes after it, not replaced by it."""
    toks, _, rt = generate([60, 63, 63, 63, 64, 70, 64, 64, 64], rule(3), max_tokens=8)
    assert toks == [60, 63, 63, 63, 61, 64, 70, 64]
    assert rt.samplers[0].forced == [61]


def test_a_prompt_that_opened_thinking_counts_from_the_first_token_and_budget_zero_closes_at_once():
    toks, _, _ = generate([63] * 12, rule(2, started=True))
    assert toks[:3] == [63, 63, 61]
    toks, _, _ = generate([63] * 12, rule(0, started=True, forced=(70, 61)))
    assert toks[:3] == [70, 61, 63]  # the budget message, then the close, then sampled tokens


def test_a_model_that_closes_itself_or_never_thinks_is_never_forced():
    toks, _, _ = generate([60, 63, 61, 64, 63, 63, 63, 63], rule(3), max_tokens=8)
    assert toks == [60, 63, 61, 64, 63, 63, 63, 63]
    toks, _, _ = generate([60, 63, 65, 66, 64, 63, 63, 63], rule(3), max_tokens=8)  # a close split over pieces
    assert toks == [60, 63, 65, 66, 64, 63, 63, 63]
    toks, _, _ = generate([62, 63, 63, 63, 63, 63, 63, 63], rule(2), max_tokens=8)  # no <think> at the start
    assert 61 not in toks


def test_leading_whitespace_before_the_open_tag_is_allowed():
    toks, _, _ = generate([62, 60, 63, 63, 63, 63], rule(2), max_tokens=6)
    assert toks[:5] == [62, 60, 63, 63, 61]


def test_no_rule_no_change():
    toks, _, _ = generate([60, 63, 63, 63, 63], None, max_tokens=5)
    assert toks == [60, 63, 63, 63, 63]


def test_speculative_drafts_wait_until_the_block_is_done():
    rt, core = make(n_seq_max=1, spec_ngram=4)
    rt.scripts[1] = [63] * 30
    core.add(req(1, PROMPT, 20, reasoning_budget=rule(3, started=True)))
    out, per_step = [], []  # (budget active before the step, generated tokens in its batch)
    while True:
        seq = core._seqs.get(1)
        active = seq is not None and seq.budget is not None and (seq.budget.active or bool(seq.forced))
        if step(rt, core, out) is None:
            break
        per_step.append((active, sum(e.pos >= len(PROMPT) for e in rt.batches[-1])))
    assert tokens_of(out, 1)[:4] == [63, 63, 63, 61]
    assert all(n <= 1 for active, n in per_step if active)
    assert any(n > 1 for active, n in per_step if not active)  # drafting resumes after the close


def test_budget_state_rules():
    with pytest.raises(ValueError):
        rule(-1)
    with pytest.raises(ValueError):
        rule(1, forced=())
    s = BudgetState(rule(1))
    assert s.on_token(62) == () and s.state == "start"  # whitespace: may still open
    assert s.on_token(60) == () and s.state == "think"
    assert s.on_token(63) == CLOSE and not s.active
    assert s.on_token(63) == ()


def test_a_spent_budget_waits_for_the_rest_of_a_character():
    """A byte-level token that begins a character (a 3-byte UTF-8 sequence split over tokens) and ends the
    budget: the close waits for the character's last byte (it was forced in between: a broken character in
    the reasoning, and a constraint behind the tag, whose grammar reads UTF-8, gave up); at most
    MAX_UTF8_WAIT tokens."""
    from skippy.engine.scheduling.budget import MAX_UTF8_WAIT

    bytes_of = {80: "€".encode()[:1], 81: "€".encode()[1:2], 82: "€".encode()[2:], 83: b"\xe2"}

    def split_piece(token: int) -> bytes:
        return bytes_of.get(token) or piece(token)

    s = BudgetState(ReasoningBudget(2, "<think>", "</think>", CLOSE, True, split_piece))
    assert s.on_token(63) == ()
    assert s.on_token(80) == () and s.active  # the budget is spent inside "€": wait
    assert s.on_token(81) == ()
    assert s.on_token(82) == CLOSE and not s.active  # "€" whole: the close now
    s = BudgetState(ReasoningBudget(1, "<think>", "</think>", CLOSE, True, split_piece))
    waits = [s.on_token(83) for _ in range(MAX_UTF8_WAIT + 1)]  # a malformed stream: MAX_UTF8_WAIT tokens more
    assert waits == [()] * MAX_UTF8_WAIT + [CLOSE]
