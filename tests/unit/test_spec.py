"""Prompt-lookup speculative decoding: the n-gram drafter, the acceptance backoff, and the scheduler's
draft / verify / trim path over the deterministic fake runtime of the scheduler's tests (tests.support).

The fake's samplers play a script whatever the batch index, like a deterministic model whose next
token does not depend on where its logits were computed; so with or without speculation a sequence
must emit exactly its script, and every sampled token must be emitted (a sampler never accepts a
token that is thrown away: the script left over says how many were sampled). The fake checks that
every decode's positions follow the sequence's KV, so a missing trim fails the next step.
"""

from __future__ import annotations

import pytest

from skippy.engine.protocols.openai.translate import timings
from skippy.engine.scheduling import spec as spec_mod
from skippy.engine.scheduling.config import SchedulerConfig
from skippy.engine.scheduling.core import SchedulerCore
from skippy.engine.scheduling.spec import BACKOFF_FIRST, NgramDrafter, SpecState
from tests.support import EOG, FILLER, Clock, FakeRuntime, finish_of, req, step, tokens_of

PROMPT = list(range(100, 140))  # 40 distinct tokens


def make(*, spec_ngram=4, n_seq_max=2, step_tokens=64, n_ctx_seq=256, hooks=False, prefix_cache=True, n_batch=64):
    rt = FakeRuntime(n_seq_max=n_seq_max, n_ctx_seq=n_ctx_seq, n_batch=n_batch)
    config = SchedulerConfig(step_tokens=step_tokens, prefix_cache=prefix_cache, spec_ngram=spec_ngram)
    core = SchedulerCore(rt, config, hooks=hooks, clock=Clock())
    return rt, core


def run_checked(rt, core, limit=300):
    """Step until nothing decodes, checking after every step that each running sequence's KV holds exactly
    ``n_past`` tokens (the draft past the accepted prefix was trimmed) and no step exceeds the budget."""
    outputs = []
    for _ in range(limit):
        if step(rt, core, outputs) is None:
            return outputs
        assert len(rt.batches[-1]) <= core.step_tokens
        for seq in core._running.values():
            assert len(rt.kv[seq.kv.slot]) == seq.kv.n_past, "KV not trimmed to the accepted prefix"
            assert rt.kv[seq.kv.slot] == seq.kv.prompt[:seq.kv.n_past]
    raise AssertionError("did not settle")


def drafted_entries(rt, slot, n_prompt=40):
    """Per decode step, how many generated-text tokens of ``slot`` were in the batch beyond its first."""
    return [max(0, sum(e.seq_id == slot and e.pos >= n_prompt for e in b) - 1) for b in rt.batches]


# -- the drafter ----------------------------------------------------------------------

def test_drafter_proposes_what_followed_the_longest_latest_match():
    d = NgramDrafter(2, 4)
    text = [1, 2, 3, 4, 5, 6, 9, 3, 4, 7, 8, 0, 3]
    assert d.propose(text, 4, k=3) == (7, 8, 0)  # (3, 4) occurred twice: the latest continuation
    text2 = text[:-2] + [2, 3]
    assert NgramDrafter(2, 4).propose(text2, 4, k=3) == (5, 6, 9)  # (2, 3, 4) beats the later (3, 4)
    assert d.propose(text, 99, k=3) == ()
    assert d.propose([1, 2, 3, 1], 2, k=5) == (3, 1, 2)  # the continuation runs into the pending token


def test_drafter_keeps_copying_from_where_its_last_draft_came_from():
    src = [9, 1, 2, 3, 4, 50, 51, 52, 1, 2, 3, 4, 60, 61, 62, 8]
    d = NgramDrafter(2, 4)
    assert d.propose(src + [9], 1, k=4) == (2, 3, 4, 50)
    # the text copies on (2, 3, then 4 pending): its 4-gram (1, 2, 3, 4) last occurred before 60, but the copy
    # it follows continues with 50
    assert d.propose(src + [9, 1, 2, 3], 4, k=4) == (50, 51, 52, 1)
    assert NgramDrafter(2, 4).propose(src + [9, 1, 2, 3], 4, k=4) == (60, 61, 62, 8)
    # a text that left the copy falls back to the index
    assert d.propose(src + [9, 1, 2, 3, 4, 50, 7, 60], 61, k=2) == (62, 8)


def test_drafter_cuts_drafts_at_end_of_generation_tokens_and_indexes_incrementally():
    d = NgramDrafter(2, 3)
    text = [10, 11, 12, 0, 13]
    assert d.propose(text, 10, k=4, stop=frozenset({0})) == ()  # (13, 10) unseen
    text += [10, 11]
    assert d.propose(text, 12, k=4, stop=frozenset({0})) == ()  # would start with the EOG
    assert d.propose(text, 12, k=4) == (0, 13, 10, 11)
    d2 = NgramDrafter(2, 3)
    assert d2.propose(text[:3], 10, k=2) == ()
    assert d2.propose(text, 12, k=2) == (0, 13)  # the new tokens were indexed


def test_spec_state_backs_off_after_low_acceptance_and_resets_when_it_pays():
    s = SpecState(k=4)
    for _ in range(4):
        assert s.ready()
        s.record(4, 0)
    assert s.skip == BACKOFF_FIRST and s.backoff == 2 * BACKOFF_FIRST
    assert [s.ready() for _ in range(BACKOFF_FIRST)] == [False] * BACKOFF_FIRST and s.ready()
    for _ in range(4):
        s.record(4, 4)
    assert s.skip == 0 and s.backoff == BACKOFF_FIRST
    assert (s.drafted, s.accepted) == (32, 16)


def test_the_draft_length_grows_after_full_acceptance_and_shrinks_after_a_rejection():
    s = SpecState(k=5)
    assert s.n == 5
    lengths = []
    for drafted, accepted in ((5, 2), (4, 0), (3, 3), (5, 5), (5, 4), (4, 0), (3, 0), (2, 0), (1, 0)):
        assert drafted == s.n
        s.record(drafted, accepted)
        lengths.append(s.n)
    assert lengths == [4, 3, 5, 5, 4, 3, 2, 1, 1]


# -- the scheduler --------------------------------------------------------------------

def copy_run(spec_ngram, script, max_tokens=30, **kw):
    rt, core = make(spec_ngram=spec_ngram, **kw)
    rt.scripts = {1: list(script)}
    core.add(req(1, PROMPT, max_tokens=max_tokens))
    out = run_checked(rt, core)
    return rt, core, out


def test_a_copying_sequence_emits_its_script_in_fewer_steps_with_drafts_verified_and_trimmed():
    script = PROMPT[10:30] + [7, 8] + PROMPT[5:12]  # copies, diverges, copies again
    rt0, core0, out0 = copy_run(0, script, max_tokens=len(script))
    rt, core, out = copy_run(4, script, max_tokens=len(script))
    assert tokens_of(out0, 1) == tokens_of(out, 1) == script
    assert finish_of(out, 1).reason == "length" and finish_of(out, 1).completion_tokens == len(script)
    assert rt.samplers[0].script == []  # every sampled token was emitted
    st = core.stats()
    assert st.steps < core0.stats().steps - 10
    assert st.tokens_predicted_total == len(script)
    assert 0 < st.spec_accepted_tokens_total <= st.spec_draft_tokens_total
    fin = finish_of(out, 1)
    assert (fin.draft_tokens, fin.draft_accepted) == (st.spec_draft_tokens_total, st.spec_accepted_tokens_total)
    assert max(drafted_entries(rt, 0)) == 4
    drafts = [b for b in rt.batches if len(b) > 1 and b[0].pos >= len(PROMPT)]
    assert drafts
    assert all(e.logits for b in drafts for e in b)  # logits at the pending token and at every draft token
    assert rt.kv[0] == PROMPT  # finished: only the prefilled prompt stays for reuse
    assert core0.stats().spec_draft_tokens_total == 0


def test_an_end_of_generation_token_mid_draft_finishes_and_nothing_after_it_is_sampled():
    script = PROMPT[10:16] + [EOG, 9, 9]
    rt, core, out = copy_run(4, script)
    assert tokens_of(out, 1) == PROMPT[10:16] and finish_of(out, 1).reason == "stop"
    assert rt.samplers[0].script == [9, 9]


def test_drafts_are_cut_before_an_end_of_generation_token_in_the_text():
    rt, core = make(spec_ngram=4)
    prompt = PROMPT[:20] + [EOG] + PROMPT[20:]
    rt.scripts = {1: PROMPT[16:20] + [EOG]}
    core.add(req(1, prompt, max_tokens=30))
    out = run_checked(rt, core)
    assert tokens_of(out, 1) == PROMPT[16:20] and finish_of(out, 1).reason == "stop"
    assert all(e.token != EOG for b in rt.batches for e in b if e.pos >= len(prompt))


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 7])
def test_max_tokens_is_never_exceeded_and_never_sampled_past(max_tokens):
    rt, core, out = copy_run(4, PROMPT[10:30], max_tokens=max_tokens)
    assert tokens_of(out, 1) == PROMPT[10:10 + max_tokens] and finish_of(out, 1).reason == "length"
    assert rt.samplers[0].script == PROMPT[10 + max_tokens:30]
    assert max(e.pos for b in rt.batches for e in b) < len(PROMPT) + max_tokens


def test_a_full_context_finishes_as_without_speculation():
    for spec_ngram in (0, 4):
        rt, core, out = copy_run(spec_ngram, PROMPT[5:40], max_tokens=100, n_ctx_seq=48)
        fin = finish_of(out, 1)
        assert fin.reason == "length" and len(PROMPT) + fin.completion_tokens == 48
        assert tokens_of(out, 1) == PROMPT[5:13]
        assert max(e.pos for b in rt.batches for e in b) < 48


def test_low_acceptance_stops_drafting(monkeypatch):
    pattern = [20, 21, 22, 23, 24, 25]
    script = [t for i in range(100) for t in (20, 21, 30 + i % 100)]  # the text's (20, 21) never continues with 22

    def drafted(min_acceptance):
        monkeypatch.setattr(spec_mod, "MIN_ACCEPTANCE", min_acceptance)
        rt, core = make(spec_ngram=4, n_ctx_seq=512)
        rt.scripts = {1: list(script)}
        core.add(req(1, pattern * 5, max_tokens=len(script)))
        out = run_checked(rt, core)
        assert tokens_of(out, 1) == script
        gaps, run = [], 0
        for n in drafted_entries(rt, 0, n_prompt=30)[1:]:
            run = 0 if n else run + 1
            gaps.append(run)
        return core.stats().spec_draft_tokens_total, max(gaps)

    without, gap0 = drafted(0.0)  # no backoff: a rejected draft every third token
    with_backoff, gap = drafted(0.3)
    assert without > 100 and with_backoff < 0.7 * without
    assert gap0 < BACKOFF_FIRST and gap >= 4 * BACKOFF_FIRST  # paused, the pause doubling


def test_the_request_field_overrides_the_server_default():
    for server, asked, most in ((4, 0, 0), (0, 2, 2), (0, None, 0), (4, None, 4), (2, 99, spec_mod.MAX_DRAFT)):
        rt, core = make(spec_ngram=server)
        rt.scripts = {1: PROMPT[:39]}
        core.add(req(1, PROMPT, max_tokens=39, speculative=asked))
        out = run_checked(rt, core)
        assert tokens_of(out, 1) == PROMPT[:39]
        assert max(drafted_entries(rt, 0)) == most, (server, asked)


def test_hooked_sequences_never_draft():
    rt, core = make(spec_ngram=4, hooks=True, prefix_cache=False)
    rt.scripts = {1: PROMPT[10:20]}
    core.add(req(1, PROMPT, max_tokens=10, hooks=True))
    for _ in range(30):
        for rid, ev in step(rt, core) or []:
            if type(ev).__name__ == "HookRequest":
                from skippy.engine.hooks.policy import NO_ACTION
                core.on_verdict(rid, NO_ACTION)
        if core.idle:
            break
    assert core.idle and max(drafted_entries(rt, 0)) == 0


def test_drafts_share_the_step_budget_after_prefill():
    rt, core = make(spec_ngram=8, step_tokens=12, n_batch=12, prefix_cache=False)
    rt.scripts = {1: PROMPT[10:40]}
    core.add(req(1, PROMPT, max_tokens=30))
    out = []
    while max(drafted_entries(rt, 0), default=0) == 0:  # until 1 drafts
        out += step(rt, core)
    core.add(req(2, list(range(200, 230)), max_tokens=2))
    out += run_checked(rt, core)
    assert tokens_of(out, 1) == PROMPT[10:40]
    full = [b for b in rt.batches if sum(e.seq_id == 1 for e in b) == 11]  # 2's prefill chunks that fill the step
    assert len(full) == 2 and all(sum(e.seq_id == 0 for e in b) == 1 for b in full)  # 1 drafts nothing then
    assert all(len(b) <= 12 for b in rt.batches) and max(drafted_entries(rt, 0)) == 8


def test_logprobs_come_with_every_verified_token():
    rt, core = make(spec_ngram=4)
    prompt = list(range(8, 32))  # token ids inside the fake's vocabulary
    rt.scripts = {1: prompt[4:14]}
    core.add(req(1, prompt, max_tokens=10, params={"logprobs": True, "top_logprobs": 1}))
    out = run_checked(rt, core)
    evs = [ev for r, ev in out if r == 1 and hasattr(ev, "logprob")]
    assert [e.token for e in evs] == prompt[4:14] and all(e.logprob is not None and len(e.top) == 1 for e in evs)
    assert core.stats().spec_accepted_tokens_total > 0


def test_two_sequences_speculate_side_by_side():
    rt, core = make(spec_ngram=4)
    other = list(range(300, 340))
    rt.scripts = {1: PROMPT[10:30], 2: other[3:13] + [FILLER, 7] + other[20:28]}
    core.add(req(1, PROMPT, max_tokens=20))
    core.add(req(2, other, max_tokens=20))
    out = run_checked(rt, core)
    assert tokens_of(out, 1) == PROMPT[10:30]
    assert tokens_of(out, 2) == other[3:13] + [FILLER, 7] + other[20:28]
    assert [e.seq_id for e in rt.batches[3]] == sorted(e.seq_id for e in rt.batches[3])  # slot order kept


# -- the request field and the reply ----------------------------------------------------

def test_the_speculative_field_maps_to_draft_tokens_or_a_400():
    from skippy.engine.errors import InvalidRequest
    from skippy.engine.scheduling.spec import DEFAULT_DRAFT, requested_draft

    assert [requested_draft(v, 0) for v in (None, False, True, 0, 3, 16)] == [None, 0, DEFAULT_DRAFT, 0, 3, 16]
    assert requested_draft(True, 8) == 8
    for bad in (-1, 17):
        with pytest.raises(InvalidRequest) as exc:
            requested_draft(bad, 4)
        assert exc.value.param == "speculative"


def test_the_request_body_field_and_timings_draft_counts():
    import msgspec

    from skippy.engine.output.generation import Generation, GenerationOptions
    from skippy.engine.protocols.base import decode_request
    from skippy.engine.protocols.openai.types import ChatCompletionRequest
    from skippy.engine.scheduling.events import FinishEvent

    body = b'{"messages": [{"role": "user", "content": "x"}], "speculative": %s}'
    assert [decode_request(body % v, ChatCompletionRequest).speculative for v in (b"true", b"4", b"false")] == [
        True, 4, False]
    from skippy.engine.errors import InvalidRequest
    with pytest.raises(InvalidRequest):
        decode_request(body % b'"yes"', ChatCompletionRequest)

    from skippy.engine.chat.formats.base import ContentParser
    from skippy.engine.sampling.params import SamplingParams
    for drafted, shown in ((0, {}), (12, {"draft_n": 12, "draft_n_accepted": 9})):
        gen = Generation(1, [1, 2], SamplingParams(), 8, piece=lambda t: b"a", parser=ContentParser(),
                         options=GenerationOptions(speculative=3))
        assert gen.request.speculative == 3
        done = gen.feed(FinishEvent("stop", 2, 0, 1.0, 1.0, draft_tokens=drafted, draft_accepted=9))
        shape = msgspec.to_builtins(timings(done.counts))
        assert {k: shape[k] for k in ("draft_n", "draft_n_accepted") if k in shape} == shown


def test_the_accepted_draft_tokens_are_marked_so_the_output_side_can_count_those_it_keeps():
    script = PROMPT[10:30] + [7, 8] + PROMPT[5:12]
    rt, core, out = copy_run(4, script, max_tokens=len(script))
    evs = [ev for r, ev in out if r == 1 and hasattr(ev, "drafted")]
    assert [e.token for e in evs] == script
    assert sum(e.drafted for e in evs) == finish_of(out, 1).draft_accepted == core.stats().spec_accepted_tokens_total
    assert not evs[0].drafted  # the first token follows the prompt: no draft before it


def test_a_stop_string_cuts_the_replies_accepted_draft_tokens_with_its_tokens():
    from skippy.engine.chat.formats.base import ContentParser
    from skippy.engine.output.generation import Generation, GenerationOptions
    from skippy.engine.sampling.params import SamplingParams
    from skippy.engine.scheduling.events import FinishEvent, TokenEvent

    pieces = {1: b"a", 2: b"b", 3: b"STOP", 4: b"c", 5: b"d"}
    gen = Generation(1, [9, 9], SamplingParams(), 16, piece=pieces.__getitem__, parser=ContentParser(),
                     options=GenerationOptions(stops=["STOP"], speculative=4))
    # one verified draft of 4 tokens, all accepted (1, 2, 3, 4) and the token after them (5): the stop is the third
    for token, drafted in ((1, True), (2, True), (3, True), (4, True), (5, False)):
        gen.feed(TokenEvent(token, drafted=drafted))
    done = gen.feed(FinishEvent("cancelled", 2, 5, 1.0, 1.0, draft_tokens=4, draft_accepted=4))
    assert done.finish_reason == "stop" and done.counts.completion_tokens == 3
    assert (done.counts.draft_tokens, done.counts.draft_accepted) == (4, 3)  # not more accepted than predicted
    assert gen.draft_accepted == 3


def test_slots_show_whether_their_sequences_speculate():
    """llama-server's ``/slots`` ``speculative``: an idle slot of a ``--spec-ngram`` server can speculate; a
    running one shows its own request's choice."""
    rt, core = make(spec_ngram=4)
    assert [s.speculative for s in core.slots()] == [True, True]
    rt.scripts = {1: PROMPT[10:20], 2: PROMPT[10:20]}
    core.add(req(1, PROMPT, max_tokens=10, speculative=0))
    step(rt, core, [])
    assert [s.speculative for s in core.slots()] == [False, True]
    assert [s.speculative for s in make(spec_ngram=0)[1].slots()] == [False, False]
