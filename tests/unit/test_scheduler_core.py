"""SchedulerCore: every scheduling rule, driven step by step over a small deterministic fake runtime.

The fake (:class:`tests.support.FakeRuntime`, shared with the other tests of the scheduler) keeps a
token list per KV slot and checks each decode batch the way llama.cpp would (positions follow the
sequence's KV, sequence ids in range, at most ``n_batch`` tokens), so a wrong ``n_past``, copy or trim
fails here.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from skippy.engine.errors import QueueFull
from skippy.engine.hooks.policy import NO_ACTION, Inject, NoAction, Stop
from skippy.engine.runtime.base import EmbeddingInfo
from skippy.engine.scheduling.budget import ReasoningBudget
from skippy.engine.scheduling.config import SchedulerConfig
from skippy.engine.scheduling.core import SchedulerCore
from skippy.engine.scheduling.decode import execute
from skippy.engine.scheduling.events import (
    EmbeddingsEvent,
    EmbedRequest,
    FinishEvent,
    HookEvent,
    HookRequest,
    PrefillProgress,
    PromptLogprobs,
    SchedulerCounters,
    SchedulerStats,
    TokenEvent,
)
from skippy.engine.scheduling.prefix import EXACT_TAIL, MIN_REUSE, MIN_TAIL
from skippy.engine.scheduling.request import Phase
from tests.support import (
    EOG,
    FILLER,
    N_VOCAB,
    PROMPT,
    Clock,
    FakeRuntime,
    FakeVocab,
    finish_of,
    make,
    req,
    run,
    step,
    tokens_of,
)

# -- admission -------------------------------------------------------------------------

def test_admission_in_arrival_order_within_the_slot_limit():
    rt, core = make(n_seq_max=2)
    for rid in (1, 2, 3):
        core.add(req(rid, [50 + rid] * 4, max_tokens=2))
    step(rt, core)
    assert [core.phase(r) for r in (1, 2, 3)] == [Phase.DECODING, Phase.DECODING, Phase.WAITING]
    st = core.stats()
    assert (st.n_running, st.n_waiting) == (2, 1)
    out = run(rt, core)
    assert [r for r, ev in out if isinstance(ev, FinishEvent)] == [1, 2, 3]
    assert core.idle


def test_the_queue_keeps_arrival_order_when_requests_are_submitted_out_of_it():
    """A request whose template or tokenizer work took longer is submitted late but keeps its place: the
    queue is ordered by ``SeqRequest.arrival``; one without an arrival queues at the end, and nothing
    submitted after it passes it."""
    rt, core = make(n_seq_max=1)
    core.add(req(1, [51] * 4, max_tokens=2, arrival=1))
    core.add(req(3, [53] * 4, max_tokens=2, arrival=3))
    core.add(req(2, [52] * 4, max_tokens=2, arrival=2))  # arrived before 3, submitted after it
    core.add(req(9, [59] * 4, max_tokens=2))  # no arrival: at the end
    core.add(req(4, [54] * 4, max_tokens=2, arrival=4))
    out = run(rt, core)
    assert [r for r, ev in out if isinstance(ev, FinishEvent)] == [1, 2, 3, 9, 4]


def test_a_request_sharing_only_the_system_prompt_leaves_a_waiting_requests_entry_alone():
    """Two resident entries share a system prompt; the one holding a waiting request's whole prompt is
    neither reused in place nor evicted by a request that shares only the system prompt, so that
    request still finds its prompt cached (all but MIN_TAIL tokens)."""
    system = list(range(100, 124))  # each prompt's own part is longer: a copy, not an in-place reuse, keeps a
    a, b, c = (system + list(range(k, k + 30)) for k in (1000, 2000, 3000))
    rt, core = make(n_seq_max=2)
    core.add(req(1, a, max_tokens=1))
    core.add(req(2, b, max_tokens=1))
    run(rt, core)  # both finish: slot 0 holds a, slot 1 holds b (b the most recently used)
    assert core.kv_cache.prefix.resident(0) == a and core.kv_cache.prefix.resident(1) == b
    core.add(req(3, c, max_tokens=1, arrival=1))  # shares only the system prompt with both entries
    core.add(req(4, a, max_tokens=1, arrival=2))  # a again: slot 0's entry is its whole prompt
    out = run(rt, core)
    assert core.slot(3) is None and finish_of(out, 3).cached_tokens == len(system)  # reused b's slot in place
    assert finish_of(out, 4).cached_tokens == len(a) - MIN_TAIL
    assert (finish_of(out, 3).slot, finish_of(out, 4).slot) == (1, 0)  # the finish names the slot it ran in


def test_the_prompt_cache_keeps_an_overwritten_prompt_in_host_memory_and_restores_it():
    """llama-server's --cache-ram prompt cache: one slot; a's prompt is resident, b shares only the system
    prompt and reuses the slot in place (a's state is saved first), then a again is restored from host
    memory (trimmed to all but MIN_TAIL) instead of prefilling its own part again."""
    system = list(range(100, 124))  # b keeps less than half of a (llama-server saves only then)
    a, b = system + list(range(1, 31)), system + list(range(50, 80))
    rt, core = make(n_seq_max=1, prompt_cache=None)
    core.add(req(1, a, max_tokens=1))
    run(rt, core)
    core.add(req(2, b, max_tokens=1))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == len(system)  # in place: the slot held a
    assert rt.saved == [(0, len(a))] and len(core.kv_cache.prompt_cache) == 1
    core.add(req(3, a, max_tokens=1))
    out = run(rt, core)
    assert finish_of(out, 3).cached_tokens == len(a) - MIN_TAIL
    assert rt.restored == [(0, len(a))] and rt.kv[0][:len(a)] == a
    st = core.stats()
    assert (st.checkpoints_saved_total, st.checkpoints_restored_total) >= (2, 1)  # b's state was kept too
    # off by default in the core (the engine passes --cache-ram)
    rt, core = make(n_seq_max=1)
    assert core.kv_cache.prompt_cache is None


def test_queue_full_raises_and_a_freed_place_is_taken_again():
    rt, core = make(n_seq_max=1, max_queue=2)
    core.add(req(1, [51] * 4, max_tokens=1))  # the free slot's
    core.add(req(2, [52] * 4))  # waits
    core.add(req(3, [53] * 4))  # waits
    with pytest.raises(QueueFull):
        core.add(req(4, [54] * 4))
    step(rt, core)  # 1 is admitted and ends at its first token: 2 takes the slot, a place in the queue is free
    step(rt, core)
    core.add(req(4, [54] * 4))


def test_a_lower_priority_is_admitted_first_then_arrival_order():
    rt, core = make(n_seq_max=1, prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=2, arrival=1))
    order = [rid for rid, ev in step(rt, core) if isinstance(ev, FinishEvent)]  # 1 takes the slot
    core.add(req(2, [52] * 4, max_tokens=2, arrival=2))
    core.add(req(3, [53] * 4, max_tokens=2, arrival=4))
    core.add(req(4, [54] * 4, max_tokens=2, arrival=5, priority=-1))  # a consultation: ahead of 2 and 3
    core.add(req(5, [55] * 4, max_tokens=2, arrival=3))  # an earlier arrival: between 2 and 3
    core.add(req(6, [56] * 4, max_tokens=2, priority=-1))  # arrival unknown: behind 4
    for out in iter(lambda: step(rt, core), None):
        order += [rid for rid, ev in out if isinstance(ev, FinishEvent)]
    assert order == [1, 4, 6, 2, 5, 3]


def test_a_burst_on_free_slots_is_not_refused():
    """``max_queue`` counts the requests that wait for a slot no running sequence holds: a burst as large as the
    free slots plus the queue is taken at once, on an idle scheduler and with some slots running."""
    rt, core = make(n_seq_max=4, max_queue=1)
    for rid in range(1, 6):  # 4 slots free, 1 place in the queue
        core.add(req(rid, [50 + rid] * 4))
    with pytest.raises(QueueFull):
        core.add(req(6, [56] * 4))
    assert core.n_queued() == 1
    step(rt, core)  # 4 admitted, 1 waits
    assert core.n_queued() == 1
    with pytest.raises(QueueFull):
        core.add(req(6, [56] * 4))
    assert core.n_queued(incoming=2) == 3


def test_lowest_free_slot_keeps_running_slots_compact_and_batches_in_slot_order():
    rt, core = make(n_seq_max=3, prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=1))
    core.add(req(2, [52] * 4, max_tokens=8))
    core.add(req(3, [53] * 4, max_tokens=8))
    step(rt, core)  # 1 finishes at its first token: slot 0 is free
    assert [core.slot(r) for r in (1, 2, 3)] == [None, 1, 2]
    core.add(req(4, [54] * 4, max_tokens=8))
    step(rt, core)
    assert core.slot(4) == 0
    seq_ids = [e.seq_id for e in rt.batches[-1]]
    assert seq_ids == sorted(seq_ids) and set(seq_ids) == {0, 1, 2}


def test_a_refused_sampler_finishes_with_error_at_admission():
    rt, core = make()
    core.add(req(1, [51] * 4, params={"grammar": "bad"}))
    core.add(req(2, [52] * 4))
    out = step(rt, core)
    assert finish_of(out, 1).reason == "error" and "grammar" in finish_of(out, 1).error
    assert core.phase(2) is Phase.DECODING and core.slot(2) == 0  # the slot went back


# -- finish ----------------------------------------------------------------------------

def test_max_tokens_eog_and_full_context_finish():
    rt, core = make(n_seq_max=3, n_ctx_seq=12, prefix_cache=False)
    rt.scripts = {2: [9, 9, EOG]}
    core.add(req(1, [51] * 4, max_tokens=3))
    core.add(req(2, [52] * 4, max_tokens=8))
    core.add(req(3, [53] * 8, max_tokens=50))
    out = run(rt, core)
    assert tokens_of(out, 1) == [FILLER] * 3 and finish_of(out, 1).reason == "length"
    assert tokens_of(out, 2) == [9, 9] and finish_of(out, 2).reason == "stop"  # EOG is not emitted
    fin3 = finish_of(out, 3)
    assert fin3.reason == "length" and 8 + fin3.completion_tokens == 12  # the context is full
    assert (fin3.prompt_tokens, fin3.completion_tokens) == (8, 4)
    assert all(s.freed for s in rt.samplers)


def test_max_tokens_zero_prefills_the_prompt_and_finishes_without_sampling():
    """llama-server's ``n_predict`` 0 (a FIM client's cache warm-up): the prompt goes into the KV cache
    (over several chunks, no logits asked), the sequence finishes ``length`` with no token, and the
    prompt stays resident: the same prompt again reuses it."""
    rt, core = make(n_seq_max=2, step_tokens=8)
    core.add(req(1, PROMPT, max_tokens=0))
    core.add(req(2, [52] * 4, max_tokens=3))  # decodes beside it
    out = run(rt, core)
    assert tokens_of(out, 1) == [] and finish_of(out, 1).reason == "length"
    assert (finish_of(out, 1).prompt_tokens, finish_of(out, 1).completion_tokens) == (len(PROMPT), 0)
    assert tokens_of(out, 2) == [FILLER] * 3
    assert not any(e.logits for b in rt.batches for e in b if e.seq_id == finish_of(out, 1).slot)
    assert all(s.freed for s in rt.samplers)
    assert core.kv_cache.prefix.resident(finish_of(out, 1).slot) == PROMPT
    core.add(req(3, PROMPT, max_tokens=1))
    assert finish_of(run(rt, core), 3).cached_tokens == len(PROMPT) - MIN_TAIL


def test_a_stop_token_id_finishes_like_eog_and_is_not_emitted():
    """vLLM ``stop_token_ids``: the sampled id ends the sequence with ``stop``; other requests are not affected."""
    rt, core = make(prefix_cache=False)
    rt.scripts = {1: [9, 8, 7, 6], 2: [9, 8, 7, 6]}
    core.add(req(1, [51] * 4, max_tokens=8, params={"stop_token_ids": frozenset({7})}))
    core.add(req(2, [52] * 4, max_tokens=4))
    out = run(rt, core)
    assert tokens_of(out, 1) == [9, 8] and finish_of(out, 1).reason == "stop"
    assert finish_of(out, 1).completion_tokens == 2
    assert tokens_of(out, 2) == [9, 8, 7, 6] and finish_of(out, 2).reason == "length"


def test_finish_event_times_and_counters():
    rt, core = make(prefix_cache=False)
    core.add(req(1, [51] * 6, max_tokens=3))
    out = run(rt, core)
    fin = finish_of(out, 1)
    assert fin.prompt_ms > 0 and fin.predicted_ms > 0
    st = core.stats()
    assert (st.prompt_tokens_total, st.tokens_predicted_total, st.steps) == (6, 3, 3)


def test_llama_server_metrics_counters_queue_wait_and_busy_slots():
    rt, core = make(n_seq_max=1, prefix_cache=False)
    core.add(req(1, [51] * 6, max_tokens=3))
    core.add(req(2, [52] * 5, max_tokens=2))  # waits for the only slot
    out = run(rt, core)
    first, second = finish_of(out, 1), finish_of(out, 2)
    assert second.queue_ms > first.queue_ms > 0  # the second waited while the first ran
    st = core.stats()
    # llama-server's prompt_seconds_total / tokens_predicted_seconds_total: the sums of the finishes' times
    assert st.prompt_seconds_total * 1000 == pytest.approx(first.prompt_ms + second.prompt_ms)
    assert st.predicted_seconds_total * 1000 == pytest.approx(first.predicted_ms + second.predicted_ms)
    assert st.busy_slots_total == st.steps  # one sequence in every batch (one slot)
    assert st.n_tokens_max == 6 + 3 - 1  # the longest sequence in the KV: 6 prompt + 2 decoded (the last is not)
    assert (st.timed_prompt_tokens, st.timed_predicted_tokens) == (6 + 5, 3 + 2)


# -- cancel ----------------------------------------------------------------------------

def test_cancel_a_waiting_request_leaves_silently():
    rt, core = make(n_seq_max=1)
    core.add(req(1, [51] * 4, max_tokens=50))
    core.add(req(2, [52] * 4))
    step(rt, core)
    assert core.cancel(2) == []
    assert core.phase(2) is Phase.FINISHED and core.stats().n_waiting == 0


@pytest.mark.parametrize("phase", [Phase.PREFILLING, Phase.DECODING])
def test_cancel_a_running_sequence_frees_its_slot(phase):
    rt, core = make(n_seq_max=1, step_tokens=8, n_batch=8, prefix_cache=False)
    core.add(req(1, list(range(100, 120)), max_tokens=50))
    step(rt, core)
    if phase is Phase.DECODING:
        run_until = [step(rt, core) for _ in range(3)]
        assert run_until
    assert core.phase(1) is phase
    [(rid, fin)] = core.cancel(1)
    assert rid == 1 and fin.reason == "cancelled"
    assert rt.kv[0] == [] and rt.samplers[0].freed
    core.add(req(2, [52] * 4, max_tokens=1))
    assert finish_of(run(rt, core), 2).reason == "length"


# -- prefix cache ----------------------------------------------------------------------

def test_reuse_in_place_when_no_slot_is_free():
    rt, core = make(n_seq_max=1)
    core.add(req(1, PROMPT + [1, 2, 3], max_tokens=2))
    run(rt, core)
    assert rt.kv[0][:len(PROMPT)] == PROMPT and len(core.kv_cache.prefix) == 1
    core.add(req(2, PROMPT + [7, 8, 9], max_tokens=2))
    out = run(rt, core)
    assert rt.copies == []  # in place
    assert finish_of(out, 2).cached_tokens == len(PROMPT)
    assert core.stats().prefix_hits == 1


def test_copy_into_a_free_slot_keeps_a_cached_entry_the_prompt_keeps_less_than_half_of():
    """No host prompt cache: in place would lose most of the entry, so it is copied into the free slot."""
    rt, core = make(n_seq_max=2)
    core.add(req(1, PROMPT[:20] + list(range(1000, 1030)), max_tokens=2))
    run(rt, core)
    core.add(req(2, PROMPT[:20] + [7, 8, 9], max_tokens=2))
    out = run(rt, core)
    assert rt.copies == [(0, 1)]
    assert finish_of(out, 2).cached_tokens == 20
    assert len(core.kv_cache.prefix) == 2  # both slots hold a reusable prompt now


def test_a_chats_next_turn_reuses_its_entry_in_place_although_a_slot_is_free():
    """The resident entry is all prefix of the new prompt (a next turn, a repeated prompt): nothing is lost
    in place, so no whole-stream copy (n_ctx_seq cells inside the next decode); the free slot stays free."""
    rt, core = make(n_seq_max=2)
    core.add(req(1, PROMPT, max_tokens=2))
    run(rt, core)
    core.add(req(2, PROMPT + [7, 8, 9], max_tokens=2))
    out = run(rt, core)
    assert rt.copies == [] and finish_of(out, 2).cached_tokens == len(PROMPT)
    assert rt.kv[0] == PROMPT + [7, 8, 9] and len(core.kv_cache.prefix) == 1 and rt.kv[1] == []  # slot 1 untouched
    core.add(req(3, PROMPT + [7, 8, 9], max_tokens=2))  # the same prompt again: all but MIN_TAIL reused
    out = run(rt, core)
    assert rt.copies == [] and finish_of(out, 3).cached_tokens == len(PROMPT) + 3 - MIN_TAIL


def test_a_prompt_keeping_nearly_all_of_an_entry_reuses_it_in_place_and_a_smaller_share_saves_it_first():
    """A prompt that keeps KEEP_FRACTION of a resident entry or more reuses it in place although a slot is
    free, without saving it; one that keeps less reuses it in place too when the host prompt cache saves it
    first (its own cells, cheaper than a whole-stream copy), and the saved prompt is restored when it comes
    back. An entry a waiting request could reuse more of than this one is copied, not taken (claim)."""
    rt, core = make(n_seq_max=3, prompt_cache=None)
    core.add(req(1, PROMPT + [1], max_tokens=2))
    run(rt, core)
    core.add(req(2, PROMPT + [7, 8, 9], max_tokens=2))  # keeps 40 of 41
    out = run(rt, core)
    assert rt.copies == [] and rt.saved == [] and finish_of(out, 2).cached_tokens == len(PROMPT)
    core.add(req(3, PROMPT[:20] + list(range(1000, 1030)), max_tokens=2))  # keeps 20 of 43: saved first
    out = run(rt, core)
    assert rt.copies == [] and rt.saved == [(0, len(PROMPT) + 3)] and finish_of(out, 3).cached_tokens == 20
    assert len(core.kv_cache.prefix) == 1
    core.add(req(4, PROMPT + [7, 8, 9], max_tokens=2))  # restored from host memory
    out = run(rt, core)
    assert finish_of(out, 4).cached_tokens == len(PROMPT) + 3 - MIN_TAIL and len(rt.restored) == 1
    # a waiting request's whole prompt is not taken in place: copied into the free slot instead
    rt, core = make(n_seq_max=3, prompt_cache=None)
    core.add(req(1, PROMPT + [1, 2, 3], max_tokens=2))
    run(rt, core)
    core.add(req(6, PROMPT + [4, 4, 4], max_tokens=2, arrival=1))
    core.add(req(7, PROMPT + [1, 2, 3], max_tokens=2, arrival=2))
    out = run(rt, core)
    assert rt.copies == [(0, 1)] and rt.restored == [] and rt.saved == []
    assert finish_of(out, 7).cached_tokens == len(PROMPT) + 3 - MIN_TAIL



@pytest.mark.parametrize("prompt_cache", [None, 0])
def test_a_request_that_does_not_save_what_it_replaces_takes_the_entry_in_place(prompt_cache):
    """save_replaced False (llama-server's /infill: the prompt is rebuilt around the editor's cursor each time):
    a resident entry it keeps 20 of 41 tokens of is reused in place, neither saved to the host prompt cache
    first nor copied to the free slot; the same request with the default saves it (prompt cache) or copies it."""
    for save_replaced in (False, True):
        rt, core = make(n_seq_max=2, prompt_cache=prompt_cache)
        core.add(req(1, PROMPT + [1], max_tokens=2))
        run(rt, core)
        core.add(req(2, PROMPT[:20] + list(range(1000, 1030)), max_tokens=2, save_replaced=save_replaced))
        out = run(rt, core)
        assert finish_of(out, 2).cached_tokens == 20
        if not save_replaced:
            assert rt.saved == [] and rt.copies == [] and len(core.kv_cache.prefix) == 1
        elif prompt_cache is None:
            assert rt.saved == [(0, len(PROMPT) + 1)] and rt.copies == []
        else:
            assert rt.saved == [] and rt.copies == [(0, 1)] and len(core.kv_cache.prefix) == 2


@pytest.mark.parametrize("entry, saved", [(list(range(100, 115)) + [9], False),  # 3 keeps 15 of 16
                                           (list(range(100, 112)) + [9] * 8, True),  # 3 keeps 12 of 20
                                           (list(range(500, 530)), True)])  # 3 keeps none of it
def test_an_evicted_entry_is_saved_only_when_the_request_taking_its_slot_keeps_less_than_nearly_all(entry, saved):
    """Slot 0 decodes a long request, slot 1 holds a resident entry; a request that copies its prefix
    from the running sequence evicts the entry, and saves it to the host prompt cache unless its own
    prompt keeps KEEP_FRACTION of it (its KV will hold those tokens: the state would duplicate them)."""
    shared = list(range(100, 140))
    rt, core = make(n_seq_max=2, prompt_cache=None)
    core.add(req(1, entry, max_tokens=1))
    run(rt, core)  # resident in slot 0
    core.add(req(2, shared + [3, 4], max_tokens=30))
    step(rt, core)  # cold into the free slot 1 (it shares fewer than MIN_REUSE tokens with the entry)
    core.add(req(3, shared + [7, 8], max_tokens=1))  # 40 from running 2 beats the entry: copy, evict slot 0
    out = run(rt, core)
    assert rt.copies[0] == (1, 0) and finish_of(out, 3).cached_tokens == len(shared)
    assert rt.saved == ([(0, len(entry))] if saved else [])


def test_an_evicted_entry_whose_prefix_another_entry_holds_is_not_saved_but_the_last_holder_is():
    """Two resident entries share all but their last token; evicting one keeps its prefix in the other's KV
    (nothing worth a state save), evicting the other then saves it (no one else holds it)."""
    shared = list(range(100, 140))
    rt, core = make(n_seq_max=2, prompt_cache=None)
    core.add(req(1, shared + [1], max_tokens=4))
    core.add(req(2, shared + [2], max_tokens=4))
    run(rt, core)  # 2 copied the prefix from running 1: slots 0 and 1 hold the two entries
    assert len(core.kv_cache.prefix) == 2 and rt.saved == []
    core.add(req(3, list(range(500, 530)), max_tokens=1))  # shares nothing: evicts the least recently used
    run(rt, core)
    assert rt.saved == []  # the other entry holds 40 of its 41 tokens
    core.add(req(4, list(range(600, 630)), max_tokens=1))
    run(rt, core)
    assert [n for _, n in rt.saved] == [41]  # the last holder of the shared prefix goes to host memory


def test_idle_saves_copy_each_entry_the_prompt_cache_lacks_so_later_evictions_save_nothing():
    """While idle, the resident entries no held state covers to KEEP_FRACTION are listed for saving; once the
    first of two entries sharing all but their last token is saved, the other needs nothing; evicting both
    under load then saves nothing inside the plan. Nothing is listed while a request waits or runs, or
    without a prompt cache."""
    shared = list(range(100, 140))
    rt, core = make(n_seq_max=2, prompt_cache=None)
    core.add(req(1, shared + [1], max_tokens=4))
    core.add(req(2, shared + [2], max_tokens=4))
    run(rt, core)
    todo = core.idle_saves()
    assert sorted(slot for slot, _ in todo) == [0, 1] and rt.saved == []
    for slot, tokens in todo:
        if core.needs_idle_save(slot, tokens):
            core.add_idle_save(slot, tokens, rt.state_seq_get_data(slot))
    assert len(rt.saved) == 1 and core.idle_saves() == []  # the saved state holds 40 of the other's 41
    core.add(req(3, list(range(500, 530)), max_tokens=1))
    assert core.idle_saves() == []  # a request waits
    run(rt, core)
    core.add(req(4, list(range(600, 630)), max_tokens=1))
    run(rt, core)
    assert len(rt.saved) == 1  # the last holder of the shared prefix was evicted without a save
    assert core.stats().checkpoints_saved_total == 1
    rt, core = make(n_seq_max=2, prompt_cache=0)
    core.add(req(1, shared + [1], max_tokens=4))
    run(rt, core)
    assert core.idle_saves() == []  # no prompt cache
    rt = FakeRuntime(n_seq_max=2)
    rt.meta = attrs.evolve(rt.meta, devices={"offload": {"devices": ["RPC0[127.0.0.1:50052]"]}})
    core = SchedulerCore(rt, SchedulerConfig(prompt_cache=None), clock=Clock())
    core.add(req(1, shared + [1], max_tokens=4))
    run(rt, core)
    assert len(core.kv_cache.prefix) == 1 and core.idle_saves() == []  # the KV cache on a device (an RPC worker)


def test_without_a_prompt_cache_an_entry_another_holds_is_reused_in_place_not_copied():
    """No host prompt cache, a free slot: the new prompt keeps 20 of the entry's 41 tokens, but the other
    entry holds 40 of them, so nothing worth a whole-stream copy is lost: reused in place."""
    shared = list(range(100, 140))
    rt, core = make(n_seq_max=3)
    core.add(req(1, shared + [1], max_tokens=4))
    core.add(req(2, shared + [2], max_tokens=4))
    run(rt, core)
    n_copies = len(rt.copies)  # 2 copied the prefix from running 1
    core.add(req(3, shared[:20] + [9, 9, 9], max_tokens=1))
    out = run(rt, core)
    assert len(rt.copies) == n_copies and finish_of(out, 3).cached_tokens == 20 and len(core.kv_cache.prefix) == 2


def test_copy_from_a_running_sequence():
    rt, core = make(n_seq_max=2)
    core.add(req(1, PROMPT + [1, 2, 3], max_tokens=20))
    step(rt, core)  # 1 prefilled and decoding
    core.add(req(2, PROMPT + [7, 8, 9], max_tokens=2))
    out = run(rt, core)
    assert rt.copies[0] == (0, 1)
    assert finish_of(out, 2).cached_tokens == len(PROMPT)


def test_unified_kv_copies_only_the_prefix_from_a_resident_entry():
    rt, core = make(n_seq_max=2, unified=True)
    core.add(req(1, PROMPT + [1, 2, 3], max_tokens=2))
    run(rt, core)
    core.add(req(2, PROMPT + [7, 8, 9], max_tokens=2, script=None))
    step(rt, core)
    assert rt.copies == [(0, 1, len(PROMPT))]  # the prefix, not the whole entry then a trim
    assert rt.cells[1][:len(PROMPT)] == rt.cells[0][:len(PROMPT)]  # shared cells
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == len(PROMPT)
    assert rt.kv[1] == PROMPT + [7, 8, 9] and len(core.kv_cache.prefix) == 2
    assert rt.cells_used() == len(PROMPT) + 3 + 3  # the prefix once, each entry's own tail


def test_unified_kv_copies_only_the_prefix_from_a_running_sequence():
    rt, core = make(n_seq_max=2, unified=True)
    core.add(req(1, PROMPT + [1, 2, 3], max_tokens=20))
    step(rt, core)
    step(rt, core)  # 1 prefilled and has generated a token into its KV
    assert len(rt.kv[0]) > len(PROMPT) + 3
    core.add(req(2, PROMPT + [7, 8, 9], max_tokens=2))
    step(rt, core)
    assert rt.copies == [(0, 1, len(PROMPT))]
    assert rt.kv[1] == PROMPT + [7, 8, 9]  # no generated token of 1 came along
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == len(PROMPT)
    assert tokens_of(out, 1) and finish_of(out, 1).reason == "length"


def test_unified_kv_never_needs_more_cells_than_it_has():
    """Full contexts in every slot, resident entries sharing prefixes with running ones: the cells
    in use stay within n_ctx_seq x n_seq_max (the fake asserts it at every decode, as llama_decode
    would fail), and every sequence's positions stay below n_ctx_seq."""
    n_ctx, slots = 64, 3
    rt, core = make(n_seq_max=slots, n_ctx_seq=n_ctx, unified=True, max_queue=64)
    heads = [list(range(200, 230)), list(range(300, 330))]
    rid = 0
    for wave in range(6):
        for i in range(4):
            rid += 1
            tail = [400 + wave * 10 + i] * (3 + i)
            core.add(req(rid, heads[(wave + i) % 2] + tail, max_tokens=n_ctx))  # runs to the context end
        out = run(rt, core, limit=2000)
        assert all(finish_of(out, r).reason == "length" for r in range(rid - 3, rid + 1))
    assert core.stats().prefix_hits > 10
    assert rt.max_cells_used <= n_ctx * slots
    assert any(len(c) == n_ctx - 1 for c in rt.cells.values()) or rt.max_cells_used > n_ctx


@pytest.mark.parametrize("tail", [MIN_TAIL, EXACT_TAIL])
def test_cached_prompt_always_prefills_its_last_tokens(tail):
    # one token, as llama-server; the engine asks for two (EXACT_TAIL) with flash attention off
    rt, core = make(n_seq_max=1, min_tail=tail)
    core.add(req(1, PROMPT, max_tokens=2))
    run(rt, core)
    core.add(req(2, PROMPT, max_tokens=2))  # the same prompt again
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == len(PROMPT) - tail
    assert [e.pos for e in rt.batches[-2]] == list(range(len(PROMPT) - tail, len(PROMPT)))  # the tail, then a decode


@pytest.mark.parametrize("n_seq_max", [1, 2])  # the entry reused in place, or copied into the free slot
def test_cache_reuse_moves_cached_chunks_that_continue_the_prompt(n_seq_max):
    """llama-server's --cache-reuse N (an editor's file seen again with a line removed and one added): past the
    shared prefix, a cached run of >= N tokens that continues the prompt moves to its new positions instead
    of being prefilled; a run that does not continue it (after the added line) is not reused, nor one
    shorter than N, nor anything with --cache-reuse 0."""
    head, a, b, c, x = (list(range(k, k + 20)) for k in (100, 120, 140, 160, 200))
    prompt = head + b + x[:3] + c
    for reuse, cached in ((8, 40), (21, 20), (0, 20)):
        rt, core = make(n_seq_max=n_seq_max, cache_reuse=reuse)
        core.add(req(1, head + a + b + c, max_tokens=1))
        run(rt, core)
        core.add(req(2, prompt, max_tokens=2))
        out = run(rt, core)
        slot = finish_of(out, 2).slot
        assert finish_of(out, 2).cached_tokens == cached
        assert rt.shifts == ([(slot, 40, 60, -20)] if cached == 40 else [])
        assert rt.kv[slot][:len(prompt)] == prompt and rt.pos[slot][:len(prompt)] == list(range(len(prompt)))


@pytest.mark.parametrize("n_seq_max", [1, 2])
def test_cache_reuse_needs_no_shared_prefix_of_min_reuse_tokens(n_seq_max):
    """A ring of files whose oldest one was dropped (llama.vim's extra context): the prompt shares only a
    5-token header with the cached one, below MIN_REUSE, yet the cached files that follow it are moved up
    and reused: in place with one slot, in a copy when a slot is free (the new prompt keeps under 15/16 of
    the entry, which stays for a later prompt)."""
    p, a, b, c, d = [7, 8, 9, 10, 11], *(list(range(k, k + 20)) for k in (120, 140, 160, 180))
    rt, core = make(n_seq_max=n_seq_max, cache_reuse=8)
    core.add(req(1, p + a + b + c, max_tokens=1))
    run(rt, core)
    core.add(req(2, p + b + c + d, max_tokens=1))
    out = run(rt, core)
    fin = finish_of(out, 2)
    assert fin.cached_tokens == 45 and fin.slot == n_seq_max - 1  # the header, then b and c moved 20 down
    assert rt.shifts == [(fin.slot, 25, 65, -20)] and len(rt.copies) == n_seq_max - 1
    rt, core = make(n_seq_max=n_seq_max, cache_reuse=0)  # without --cache-reuse: nothing is shared
    core.add(req(1, p + a + b + c, max_tokens=1))
    run(rt, core)
    core.add(req(2, p + b + c + d, max_tokens=1))
    assert finish_of(run(rt, core), 2).cached_tokens == 0


def test_cache_reuse_keeps_the_prompts_last_tokens_for_prefill():
    """A moved run stops MIN_TAIL tokens before the prompt's end: those are prefilled (the first token's logits)."""
    head, a, b = (list(range(k, k + 20)) for k in (100, 120, 140))
    rt, core = make(n_seq_max=1, cache_reuse=4)
    core.add(req(1, head + a + b, max_tokens=1))
    run(rt, core)
    core.add(req(2, head + b, max_tokens=1))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 40 - MIN_TAIL
    assert rt.shifts == [(0, 40, 60 - MIN_TAIL, -20)]


def test_generated_tokens_are_not_kept_for_reuse():
    rt, core = make(n_seq_max=1)
    core.add(req(1, PROMPT, max_tokens=5))
    run(rt, core)
    assert rt.kv[0] == PROMPT  # the generated tail was removed; the prompt stays resident
    # the next turn contains the reply verbatim: only the prompt is reused
    core.add(req(2, PROMPT + [FILLER] * 5 + [8, 9], max_tokens=1))
    assert finish_of(run(rt, core), 2).cached_tokens == len(PROMPT)


def test_no_reuse_below_min_reuse_with_cache_prompt_false_or_for_recurrent_models():
    for kw, second, expect in (({}, PROMPT[:MIN_REUSE - 1] + [1, 2, 3], 0),
                               ({}, PROMPT + [1], len(PROMPT) + 1 - MIN_TAIL),
                               ({"cache_prompt": False}, PROMPT + [1], 0)):
        rt, core = make(n_seq_max=1)
        core.add(req(1, PROMPT + [2, 3], max_tokens=1))
        run(rt, core)
        core.add(req(2, second, max_tokens=1, **kw))
        assert finish_of(run(rt, core), 2).cached_tokens == expect, (kw, expect)
    rt, core = make(n_seq_max=1, recurrent=True)
    core.add(req(1, PROMPT, max_tokens=1))
    run(rt, core)
    core.add(req(2, PROMPT, max_tokens=1))
    run(rt, core)
    assert len(core.kv_cache.prefix) == 0 and rt.kv[0] == [] and core.stats().prefix_queries == 0


# -- sliding-window (iSWA) caches -----------------------------------------------------

SWA = 16  # the fake model's window: PROMPT (40 tokens) reaches past it


def test_swa_reuses_a_prefix_only_while_the_window_cells_are_held():
    """After a 40-token prefill the SWA layers hold positions 24..39: a 30-token prefix would need
    14..29 (its first prefilled position's window), so it is prefilled cold; the whole 40 still
    serves (llama-server's pos_min rule). The fake asserts every decode's window is held."""
    rt, core = make(n_seq_max=1, n_swa=SWA)
    core.add(req(1, PROMPT, max_tokens=1))
    run(rt, core)
    assert rt.seq_pos_min(0) == len(PROMPT) - SWA and len(core.kv_cache.prefix) == 1
    core.add(req(2, PROMPT[:30] + [1, 2, 3], max_tokens=1))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 0 and rt.kv[0] == PROMPT[:30] + [1, 2, 3]
    core.add(req(3, PROMPT[:30] + [1, 2, 3] + [4, 5], max_tokens=1))  # its whole prompt is resident
    assert finish_of(run(rt, core), 3).cached_tokens == 33
    rt, core = make(n_seq_max=1, n_swa=SWA)
    core.add(req(1, PROMPT, max_tokens=1))
    run(rt, core)
    core.add(req(2, PROMPT + [1, 2, 3], max_tokens=1))
    assert finish_of(run(rt, core), 2).cached_tokens == len(PROMPT)
    assert core.stats().prefix_hits == 1


def test_swa_full_reuses_any_prefix():
    rt, core = make(n_seq_max=1, n_swa=SWA, swa_full=True)
    core.add(req(1, PROMPT, max_tokens=1))
    run(rt, core)
    core.add(req(2, PROMPT[:30] + [1, 2, 3], max_tokens=1))
    assert finish_of(run(rt, core), 2).cached_tokens == 30


def test_swa_copies_from_the_best_source_that_still_holds_its_window():
    """Slot 0 shares 30 tokens but lost their window; slot 1 shares 20 and holds it: slot 1 is the source
    (reused in place although slot 2 is free: its entry is all prefix, so nothing is lost)."""
    rt, core = make(n_seq_max=3, n_swa=SWA)
    core.add(req(1, PROMPT, max_tokens=1))
    run(rt, core)
    core.add(req(2, PROMPT[:20], max_tokens=1))
    run(rt, core)  # 18 < 24: prefilled cold into slot 1, whose SWA layers hold 4..19
    assert core.slot(2) is None and rt.kv[1] == PROMPT[:20]
    core.add(req(3, PROMPT[:30] + [9] * 3, max_tokens=1))
    out = run(rt, core)
    assert rt.copies == [] and finish_of(out, 3).cached_tokens == 20
    assert rt.kv[1] == PROMPT[:30] + [9] * 3 and core.kv_cache.prefix.resident(0) == PROMPT


def test_swa_drops_a_finished_sequence_whose_window_is_gone():
    """A long generation moves the window past the prompt: trimmed back to it, the SWA layers hold
    nothing, so no entry is kept and the slot is free."""
    rt, core = make(n_seq_max=1, n_swa=SWA)
    core.add(req(1, PROMPT[:20], max_tokens=40))
    run(rt, core)
    assert len(core.kv_cache.prefix) == 0 and rt.kv[0] == []
    core.add(req(2, PROMPT[:20] + [1, 2], max_tokens=1))
    assert finish_of(run(rt, core), 2).cached_tokens == 0


def test_swa_turns_speculation_off_unless_swa_full():
    for swa_full, expect in ((False, None), (True, True)):
        rt, core = make(n_seq_max=1, n_swa=SWA, swa_full=swa_full, spec_ngram=4)
        core.add(req(1, PROMPT, max_tokens=1))
        core.plan()
        seq = core._running[1]
        assert (seq.spec is not None if expect else seq.spec is None), swa_full


# -- context checkpoints (recurrent, hybrid and sliding-window models) -------------------

H1 = list(range(100, 140))  # a conversation's history (40 tokens)
GEN = [7, 8, 9]  # its generation prompt
U2 = list(range(150, 160))  # the next user message


def turns(history=H1):
    """Turn 1 and turn 2 of a conversation, each with its boundary (the history without GEN)."""
    t1 = list(history) + GEN
    t2 = t1 + [60, 61] + U2 + GEN
    return (t1, len(history)), (t2, len(t2) - len(GEN))


def test_recurrent_saves_a_checkpoint_at_the_boundary_and_the_next_turn_restores_it():
    rt, core = make(n_seq_max=2, recurrent=True, ctx_checkpoints=4)
    (t1, b1), (t2, b2) = turns()
    core.add(req(1, t1, max_tokens=2, checkpoint_at=b1))
    out = run(rt, core)
    assert finish_of(out, 1).cached_tokens == 0
    # the prefill stopped at the boundary for one step; the state was copied right after it
    assert [e.pos for e in rt.batches[0]] == list(range(b1))
    assert rt.saved == [(0, b1)]
    assert [c.tokens for c in core.kv_cache.checkpoints] == [tuple(H1)]
    before, prefilled = len(rt.batches), core.stats().prompt_tokens_total
    core.add(req(2, t2, max_tokens=2, checkpoint_at=b2))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == b1 and rt.restored == [(0, b1)]
    assert rt.batches[before][0].pos == b1  # the fake checks every position follows the restored state
    assert core.stats().prompt_tokens_total - prefilled == len(t2) - b1
    assert rt.saved[-1] == (0, b2) and core.stats().checkpoints == 2
    st = core.stats()
    assert (st.checkpoints_saved_total, st.checkpoints_restored_total, st.prefix_hits) == (2, 1, 1)


def test_a_checkpoint_is_restored_only_when_its_tokens_are_a_prefix_of_the_prompt():
    rt, core = make(n_seq_max=1, recurrent=True, ctx_checkpoints=4)
    (t1, b1), (t2, b2) = turns()
    core.add(req(1, t1, max_tokens=1, checkpoint_at=b1))
    run(rt, core)
    for rid, edited in ((2, [99] + t2[1:]), (3, t2[:20] + [98] + t2[21:]), (4, t2[:b1 - 1] + [97] + t2[b1:])):
        core.add(req(rid, edited, max_tokens=1))
        assert finish_of(run(rt, core), rid).cached_tokens == 0, rid
    assert rt.restored == []
    core.add(req(5, t1[:b1 + MIN_TAIL - 1], max_tokens=1))  # the checkpoint would leave < MIN_TAIL tokens
    assert finish_of(run(rt, core), 5).cached_tokens == 0 and rt.restored == []


def test_cache_prompt_false_neither_restores_nor_saves_a_checkpoint():
    rt, core = make(n_seq_max=1, recurrent=True, ctx_checkpoints=4)
    (t1, b1), (t2, b2) = turns()
    core.add(req(1, t1, max_tokens=1, checkpoint_at=b1))
    run(rt, core)
    before = len(rt.batches)
    core.add(req(2, t2, max_tokens=1, checkpoint_at=b2, cache_prompt=False))
    assert finish_of(run(rt, core), 2).cached_tokens == 0
    assert rt.restored == [] and rt.saved == [(0, b1)]
    assert [len(b) for b in rt.batches[before:]] == [len(t2)]  # prefilled whole, not split at b2


def test_no_checkpoints_for_attention_models_swa_full_or_when_off():
    for kw in ({}, {"n_swa": 16, "swa_full": True}, {"recurrent": True, "prefix_cache": False},
               {"recurrent": True, "checkpoint_budget": 0}):
        rt, core = make(n_seq_max=1, ctx_checkpoints=4, **kw)
        assert core.kv_cache.checkpoints is None, kw
        (t1, b1), _ = turns()
        core.add(req(1, t1, max_tokens=1, checkpoint_at=b1))
        run(rt, core)
        assert rt.saved == [] and [len(b) for b in rt.batches] == [len(t1)], kw
    rt, core = make(n_seq_max=1, recurrent=True)  # ctx_checkpoints=0
    assert core.kv_cache.checkpoints is None


def test_checkpoints_per_slot_are_bounded_oldest_first():
    rt, core = make(n_seq_max=1, recurrent=True, ctx_checkpoints=2)
    heads = [[200 + 10 * k + i for i in range(30)] for k in range(3)]
    for rid, head in enumerate(heads, 1):
        (t1, b1), _ = turns(head)
        core.add(req(rid, t1, max_tokens=1, checkpoint_at=b1))
        run(rt, core)
    assert [c.tokens for c in core.kv_cache.checkpoints] == [tuple(heads[1]), tuple(heads[2])]
    assert core.stats().checkpoints_evicted_total == 1


def test_checkpoint_bytes_stay_within_the_budget_least_recently_used_first_out():
    rt, core = make(n_seq_max=2, recurrent=True, ctx_checkpoints=64)
    heads = [[300 + 40 * k + i for i in range(40)] for k in range(3)]
    (a1, ba), (a2, _) = turns(heads[0])
    core.add(req(1, a1, max_tokens=1, checkpoint_at=ba))
    run(rt, core)
    one = core.stats().checkpoint_bytes
    rt, core = make(n_seq_max=2, recurrent=True, ctx_checkpoints=64, checkpoint_budget=2 * one + one // 2)
    for rid, head in enumerate(heads[:2], 1):
        (t1, b1), _ = turns(head)
        core.add(req(rid, t1, max_tokens=1, checkpoint_at=b1))
        run(rt, core)
    core.add(req(3, a2, max_tokens=1))  # restores the first conversation's checkpoint: now most recently used
    assert finish_of(run(rt, core), 3).cached_tokens == 40
    (t1, b1), _ = turns(heads[2])
    core.add(req(4, t1, max_tokens=1, checkpoint_at=b1))
    run(rt, core)
    assert [c.tokens for c in core.kv_cache.checkpoints] == [tuple(heads[0]), tuple(heads[2])]
    st = core.stats()
    assert st.checkpoint_bytes <= st.checkpoint_budget and st.checkpoints_evicted_total == 1
    for rid in range(5, 55):  # 50 conversations of two turns: never over the budget
        head = [400 + rid] + heads[rid % 3][1:]
        (t1, b1), (t2, b2) = turns(head)
        core.add(req(rid * 10, t1, max_tokens=1, checkpoint_at=b1))
        core.add(req(rid * 10 + 1, t2, max_tokens=1, checkpoint_at=b2))
        for _ in range(200):
            assert core.stats().checkpoint_bytes <= st.checkpoint_budget
            if step(rt, core) is None:
                break
    assert core.stats().checkpoints <= 2


def test_swa_restores_a_checkpoint_when_the_window_of_the_cached_prefix_is_gone():
    """A long reply moves the window past the prompt, so the slot keeps nothing (see above); the
    checkpoint at the boundary still serves the next turn. The fake asserts every window is held."""
    rt, core = make(n_seq_max=1, n_swa=SWA, ctx_checkpoints=4)
    (t1, b1), (t2, b2) = turns()
    core.add(req(1, t1, max_tokens=30, checkpoint_at=b1))
    run(rt, core)
    assert len(core.kv_cache.prefix) == 0 and rt.saved == [(0, b1)]
    core.add(req(2, t2, max_tokens=1, checkpoint_at=b2))
    assert finish_of(run(rt, core), 2).cached_tokens == b1 and rt.restored == [(0, b1)]
    # a resident prefix that still holds its window and is longer wins over the checkpoint
    core.add(req(3, t2 + [70, 71, 72], max_tokens=1))
    assert finish_of(run(rt, core), 3).cached_tokens == len(t2) and rt.restored == [(0, b1)]


def test_swa_saves_no_checkpoint_for_a_sequence_that_cannot_outgrow_the_window():
    rt, core = make(n_seq_max=1, n_swa=64, ctx_checkpoints=4)
    (t1, b1), _ = turns()
    core.add(req(1, t1, max_tokens=4, checkpoint_at=b1))  # 43 + 4 <= 64
    run(rt, core)
    assert rt.saved == []


def test_eviction_is_lru_and_prefers_the_same_prompt_cache_key():
    rt, core = make(n_seq_max=2)
    a, b = list(range(200, 240)), list(range(300, 340))
    core.add(req(1, a, max_tokens=1, cache_key="x"))
    run(rt, core)
    core.add(req(2, b, max_tokens=1, cache_key="y"))
    run(rt, core)  # slot 0: a (older, key x); slot 1: b (key y)
    core.add(req(3, list(range(400, 440)), max_tokens=1, cache_key="z"))
    run(rt, core)
    assert core.slot(3) is None and rt.kv[0][:5] == list(range(400, 405))  # LRU (a) evicted
    core.add(req(4, list(range(500, 540)), max_tokens=1, cache_key="z"))
    run(rt, core)
    assert rt.kv[0][:5] == list(range(500, 505))  # its own group's entry (slot 0), though b is the LRU
    assert rt.kv[1][:5] == list(range(300, 305))


def test_a_request_waits_for_a_running_prefill_of_its_prefix_without_holding_back_others():
    rt, core = make(n_seq_max=3, step_tokens=8, n_batch=8)
    long_prompt = list(range(100, 164))
    core.add(req(1, long_prompt + [1, 2], max_tokens=2))
    step(rt, core)  # 1 prefills 8 tokens a step
    core.add(req(2, long_prompt + [3, 4], max_tokens=2))
    core.add(req(3, [60] * 4, max_tokens=2))
    step(rt, core)
    assert core.phase(2) is Phase.WAITING and core.phase(3) is not Phase.WAITING
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == len(long_prompt)  # copied once 1 held it


def test_a_burst_shares_one_prefill_when_every_slot_holds_a_cache_entry():
    rt, core = make(n_seq_max=2, step_tokens=16)
    for rid, base in ((1, 200), (2, 300)):
        core.add(req(rid, list(range(base, base + 40)), max_tokens=1))
        run(rt, core)
    assert len(core.kv_cache.prefix) == 2 and core.stats().n_running == 0
    shared = list(range(600, 664))
    core.add(req(3, shared + [1, 2], max_tokens=2))
    core.add(req(4, shared + [3, 4], max_tokens=2))
    out = run(rt, core)
    assert finish_of(out, 4).cached_tokens == len(shared)  # copied from 3 instead of prefilled again
    assert rt.copies == [(core_slot := rt.copies[0][0], 1 - core_slot)]


def test_the_choices_of_one_prompt_prefill_it_once_and_copy_it_even_when_short():
    short = [40, 41, 42, 43, 44, 45]  # < MIN_REUSE: not shared by default
    for min_reuse, expect_prefilled in ((MIN_REUSE, 3 * len(short)),
                                        (len(short) - MIN_TAIL, len(short) + 2 * MIN_TAIL)):
        rt, core = make(n_seq_max=3)
        for rid in (1, 2, 3):  # n = 3 choices, submitted together
            core.add(req(rid, short, max_tokens=2, min_reuse=min_reuse))
        out = run(rt, core)
        assert core.stats().prompt_tokens_total == expect_prefilled, min_reuse
        if min_reuse < MIN_REUSE:
            assert [finish_of(out, r).cached_tokens for r in (1, 2, 3)] == [0, *[len(short) - MIN_TAIL] * 2]
            assert rt.copies == [(0, 1), (0, 2)]


def test_a_lowered_min_reuse_shares_only_whole_prompts_and_keeps_the_short_prompt_for_later_choices():
    rt, core = make(n_seq_max=3)
    core.add(req(1, [40, 41, 42, 50, 51], max_tokens=1, min_reuse=3))
    core.add(req(2, [40, 41, 42, 60, 61], max_tokens=1, min_reuse=3))  # shares 3 of its own 3 reusable tokens
    core.add(req(3, [40, 41, 70, 71, 72], max_tokens=1, min_reuse=3))  # shares 2 < 3: cold
    out = run(rt, core)
    assert [finish_of(out, r).cached_tokens for r in (1, 2, 3)] == [0, 3, 0]


def test_prompt_logprobs_score_every_prompt_token_over_chunks_before_the_first_token():
    rt, core = make(n_seq_max=2, step_tokens=8)
    prompt = list(range(10, 30))  # 20 tokens: prefilled in chunks of 8
    core.add(req(1, prompt, max_tokens=2, prompt_logprobs=2, cache_prompt=False))
    core.add(req(2, [10, 11, 12], max_tokens=2))  # a neighbour without scores
    out = run(rt, core)
    scored = [(i, ev) for i, (r, ev) in enumerate(out) if r == 1 and isinstance(ev, PromptLogprobs)]
    [(at, ev)] = scored
    first_token = next(i for i, (r, e) in enumerate(out) if r == 1 and isinstance(e, TokenEvent))
    assert at < first_token
    assert [t.token for t in ev.tokens] == prompt[1:]
    # the fake's logits: FILLER 3.0, token 7 1.0, the rest 0.0 (log-softmax over N_VOCAB tokens)
    lse = np.log(np.exp(3.0) + np.exp(1.0) + N_VOCAB - 2)
    assert all(abs(t.logprob - (0.0 - lse)) < 1e-5 for t in ev.tokens)
    assert [a.token for a in ev.tokens[0].top] == [FILLER, 7]
    assert not [e for r, e in out if r == 2 and isinstance(e, PromptLogprobs)]
    logits_per_batch = [sum(e.logits for e in b if e.seq_id == core_slot) for b in rt.batches
                        for core_slot in [0]]
    assert sum(logits_per_batch) == len(prompt) + 1  # every prompt position, then the one generated token


def test_prefill_progress_reports_each_prefill_step_before_the_first_token_and_only_when_asked():
    rt, core = make(n_seq_max=2, n_batch=8)
    core.add(req(1, list(range(10, 30)), max_tokens=2, progress=True))  # 20 tokens: chunks of 8 (n_batch) at most
    core.add(req(2, list(range(40, 60)), max_tokens=2))  # the same without progress
    out = run(rt, core)
    steps = [(i, ev) for i, (r, ev) in enumerate(out) if r == 1 and isinstance(ev, PrefillProgress)]
    first_token = next(i for i, (r, e) in enumerate(out) if r == 1 and isinstance(e, TokenEvent))
    assert all(i < first_token for i, _ in steps)
    processed = [ev.processed for _, ev in steps]
    assert processed == [8, 16, 20]  # n_batch tokens a step; the last step (the whole prompt) too
    assert {ev.cached for _, ev in steps} == {0}
    assert [ev.prompt_ms for _, ev in steps] == sorted(ev.prompt_ms for _, ev in steps)  # since admission
    assert not [e for r, e in out if r == 2 and isinstance(e, PrefillProgress)]


def test_a_one_token_prompt_gets_empty_prompt_logprobs():
    rt, core = make(n_seq_max=1)
    core.add(req(1, [10], max_tokens=1, prompt_logprobs=0, cache_prompt=False))
    out = run(rt, core)
    assert [e for _, e in out if isinstance(e, PromptLogprobs)] == [PromptLogprobs(())]


# -- prefill budget --------------------------------------------------------------------

def test_every_step_stays_within_step_tokens_and_decoders_progress_while_a_long_prompt_prefills():
    rt, core = make(n_seq_max=2, step_tokens=16, prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=30))
    step(rt, core)
    core.add(req(2, list(range(100, 200)), max_tokens=2))
    out = []
    for _ in range(4):
        out += step(rt, core)
    assert all(len(b) <= 16 for b in rt.batches)
    assert len(tokens_of(out, 1)) == 4  # one token per step while 2 prefills
    assert core.phase(2) is Phase.PREFILLING


def test_a_short_prompt_gets_its_first_token_before_a_long_prefill_ends():
    rt, core = make(n_seq_max=2, step_tokens=32, prefix_cache=False)
    core.add(req(1, list(range(100, 300)), max_tokens=2))
    step(rt, core)
    core.add(req(2, [52] * 6, max_tokens=2))
    out = step(rt, core)
    assert tokens_of(out, 2) == [FILLER]  # shortest remaining first
    assert core.phase(1) is Phase.PREFILLING
    assert sum(1 for e in rt.batches[-1] if e.seq_id == core.slot(1)) >= 8  # the oldest keeps a quarter


# -- hooks -----------------------------------------------------------------------------

def hooked(params=None, **kw):
    rt, core = make(hooks=True, prefix_cache=False, **kw)
    core.add(req(1, [51] * 4, max_tokens=6, hooks=True, request="the request", params=params or {}))
    out = step(rt, core)
    [(rid, call)] = out
    assert rid == 1 and isinstance(call, HookRequest) and call.event == "after_prefill"
    assert call.request == "the request" and call.payload.token_id == FILLER
    assert core.phase(1) is Phase.PARKED and core.stats().n_parked == 1
    return rt, core


def test_park_then_no_action_emits_the_held_token():
    rt, core = hooked()
    assert step(rt, core) is None  # parked: nothing to decode
    out = core.on_verdict(1, NO_ACTION)
    assert out == [(1, TokenEvent(FILLER, None, (), out[0][1].entropy, out[0][1].margin))]
    assert core.phase(1) is Phase.DECODING
    assert len(tokens_of(run(rt, core), 1)) == 5


def test_stop_verdict_discards_the_held_token_and_finishes():
    rt, core = hooked()
    [(rid, fin)] = core.on_verdict(1, Stop("policy_says_no"))
    assert fin.reason == "policy_says_no" and fin.stopped_by_hook and fin.completion_tokens == 0


def test_inject_verdict_prefills_the_text_where_the_hook_fired():
    rt, core = hooked()
    kv_before = list(rt.kv[0])
    assert core.on_verdict(1, Inject("abc")) == []
    assert core.phase(1) is Phase.PREFILLING
    out = step(rt, core)
    injected = FakeVocab().tokenize("abc", add_special=False, parse_special=False)
    assert rt.kv[0] == kv_before + injected  # where the hook fired; the held token never entered the KV
    out += run(rt, core)
    fin = finish_of(out, 1)
    assert fin.injected_tokens == 3 and FILLER not in injected


def test_a_constrained_sequence_keeps_its_held_token_before_the_injection():
    """Its grammar (or constraint) took the held token when it was sampled, and cannot take it back: the token is
    emitted and enters the KV cache, then the injection (discarding it left the output outside the grammar)."""
    rt, core = hooked(params={"grammar": 'root ::= [a-z]*'})
    kv_before = list(rt.kv[0])
    out = core.on_verdict(1, Inject("abc"))
    assert out == [(1, TokenEvent(FILLER, None, (), out[0][1].entropy, out[0][1].margin))]
    assert core.phase(1) is Phase.PREFILLING
    step(rt, core)
    injected = FakeVocab().tokenize("abc", add_special=False, parse_special=False)
    assert rt.kv[0] == kv_before + [FILLER] + injected
    fin = finish_of(run(rt, core), 1)
    assert fin.injected_tokens == 3 and fin.completion_tokens == 6  # the held token counts as generated
    # at its last token under max_tokens the injection would be cut off: no action
    rt, core = make(hooks=True, prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=1, hooks=True, params={"grammar": 'root ::= [a-z]*'}))
    step(rt, core)
    assert [type(ev) for _, ev in core.on_verdict(1, Inject("abc"))] == [TokenEvent, FinishEvent]


def test_a_lazy_grammar_keeps_the_held_token_only_once_its_trigger_appeared():
    """Emulated ``auto`` tool calls carry a lazy grammar: until its trigger (``TOOL_CALL``) appears it constrains
    nothing, so an injection discards the held token as for any sequence; once triggered, it keeps it."""
    for trigger, kept in ((r"[\s\S]*?(TOOL_CALL)[\s\S]*", False), (rf"[\s\S]*?(<{FILLER}>)[\s\S]*", True)):
        rt, core = hooked(params={"grammar": 'root ::= [a-z]*', "grammar_lazy_patterns": (trigger,)})
        kv_before = list(rt.kv[0])
        out = core.on_verdict(1, Inject("abc"))
        assert [isinstance(ev, TokenEvent) for _, ev in out] == ([True] if kept else []), trigger
        step(rt, core)
        injected = FakeVocab().tokenize("abc", add_special=False, parse_special=False)
        assert rt.kv[0] == kv_before + ([FILLER] if kept else []) + injected


def test_a_reported_verdict_sends_its_consult_report_even_unasked():
    """A consultation's report reaches the request (its log line reads it) without return_hook_events."""
    rt, core = hooked()
    report = {"peer": "gemma", "outcome": "answered", "latency_ms": 12.5, "chars": 3}
    [(rid, ev)] = core.on_verdict(1, Inject("abc", report=report))
    assert isinstance(ev, HookEvent) and ev.action == "inject" and ev.consult == report
    rt, core = hooked()
    out = core.on_verdict(1, NoAction(report={"peer": "gemma", "outcome": "timeout"}))
    assert isinstance(out[0][1], HookEvent) and out[0][1].consult == {"peer": "gemma", "outcome": "timeout"}
    assert isinstance(out[1][1], TokenEvent)
    rt, core = hooked()
    assert [type(ev) for _, ev in core.on_verdict(1, NO_ACTION)] == [TokenEvent]  # no report, not asked: no event


def test_an_injection_that_does_not_fit_is_no_action():
    rt, core = hooked(n_ctx_seq=8)
    out = core.on_verdict(1, Inject("x" * 50))
    assert [type(ev) for _, ev in out] == [TokenEvent]


def test_a_consultations_note_that_does_not_fit_is_reported_as_not_injected():
    """The note dropped for want of room: the event said ``action`` none but its ``consult`` still said
    ``chars`` 509 (injected). Now ``chars`` is 0 and ``error`` says ``no_room``; the report itself is untouched."""
    rt, core = hooked(n_ctx_seq=8)
    report = {"peer": "gemma", "outcome": "answered", "latency_ms": 12.5, "chars": 48}
    out = core.on_verdict(1, Inject("x" * 50, report=report))
    assert [type(ev) for _, ev in out] == [HookEvent, TokenEvent] and out[0][1].action == "none"
    assert out[0][1].consult == {**report, "chars": 0, "error": "no_room"}
    assert report["chars"] == 48


def test_verdicts_for_unknown_or_unparked_sequences_are_ignored():
    rt, core = hooked()
    assert core.on_verdict(99, NO_ACTION) == []
    core.on_verdict(1, NO_ACTION)
    assert core.on_verdict(1, Stop("late")) == []


def test_cancel_a_parked_sequence():
    rt, core = hooked()
    [(rid, fin)] = core.cancel(1)
    assert fin.reason == "cancelled" and core.on_verdict(1, NO_ACTION) == []


def test_mid_generation_fires_from_the_signal_window():
    from skippy.engine.hooks.signals import SignalConfig

    rt = FakeRuntime()
    core = SchedulerCore(rt, SchedulerConfig(prefix_cache=False,
                                             signal_config=SignalConfig(window=2, high_entropy_threshold=0.0)),
                         hooks=True, clock=Clock())
    core.add(req(1, [51] * 4, max_tokens=20, hooks=True))
    events = []
    for _ in range(30):
        out = step(rt, core) or []
        for rid, ev in out:
            if isinstance(ev, HookRequest):
                events.append(ev.event)
                core.on_verdict(rid, NO_ACTION)
        if core.idle:
            break
    assert events[0] == "after_prefill" and "mid_generation" in events


def test_requests_without_hooks_or_without_an_evaluator_never_park():
    rt, core = make(hooks=False)
    core.add(req(1, [51] * 4, max_tokens=3, hooks=True))
    assert not any(isinstance(ev, HookRequest) for _, ev in run(rt, core))


def test_hook_events_say_what_each_verdict_did_before_its_effect_only_when_asked():
    from skippy.engine.hooks.signals import SignalConfig

    def run_with(outcomes, hook_events=True):
        rt = FakeRuntime()
        signals = SignalConfig(window=2, high_entropy_threshold=0.0, min_decoded=2, min_interval=2)
        core = SchedulerCore(rt, SchedulerConfig(prefix_cache=False, signal_config=signals), hooks=True,
                             clock=Clock())
        core.add(req(1, [51] * 4, max_tokens=8, hooks=True, hook_events=hook_events))
        outs, outcomes = [], list(outcomes)
        for _ in range(60):
            for rid, ev in step(rt, core) or []:
                outs.append(ev)
                if isinstance(ev, HookRequest):
                    outs += [e for _, e in core.on_verdict(rid, outcomes.pop(0) if outcomes else NO_ACTION)]
            if core.idle:
                break
        return outs

    outs = run_with([NO_ACTION, Inject("abc"), Stop("enough")])
    kinds = [type(ev).__name__ for ev in outs]
    # after_prefill: no action, then its held token; mid_generation: inject (no token), then stop (the finish)
    assert kinds[:3] == ["HookRequest", "HookEvent", "TokenEvent"]
    events = [ev for ev in outs if isinstance(ev, HookEvent)]
    assert [(e.event, e.action) for e in events] == [("after_prefill", "none"), ("mid_generation", "inject"),
                                                     ("mid_generation", "stop")]
    assert events[0].window is None and events[0].entropy is not None
    assert events[1].text == "abc" and events[1].injected_tokens == 3 and events[1].window["token_count"] == 2
    assert events[2].reason == "enough"
    assert outs[-2] is events[2] and outs[-1].reason == "enough"  # the stop's event comes right before its finish
    # not asked: the same verdicts, no HookEvent
    assert not any(isinstance(ev, HookEvent) for ev in run_with([NO_ACTION, Inject("abc"), Stop("enough")],
                                                                 hook_events=False))

# -- errors and shutdown ---------------------------------------------------------------

def test_a_failed_decode_finishes_every_running_sequence_and_keeps_nothing():
    rt, core = make(n_seq_max=2)
    core.add(req(1, PROMPT, max_tokens=9))
    core.add(req(2, [52] * 4, max_tokens=9))
    core.add(req(3, [53] * 4))
    step(rt, core)
    out = core.fail("boom")
    assert sorted((r, ev.reason) for r, ev in out) == [(1, "error"), (2, "error")]
    assert len(core.kv_cache.prefix) == 0 and core.phase(3) is Phase.WAITING


def test_close_finishes_running_and_waiting_as_cancelled():
    rt, core = make(n_seq_max=1)
    core.add(req(1, [51] * 4, max_tokens=9))
    core.add(req(2, [52] * 4))
    step(rt, core)
    assert sorted((r, ev.reason) for r, ev in core.close()) == [(1, "cancelled"), (2, "cancelled")]
    assert core.idle


def test_logprobs_and_signals_come_from_the_raw_logits():
    rt, core = make(prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=1, signals=True, params={"logprobs": True, "top_logprobs": 2}))
    [ev] = [ev for _, ev in run(rt, core) if isinstance(ev, TokenEvent)]
    assert [t.token for t in ev.top] == [FILLER, 7]
    assert ev.logprob == pytest.approx(ev.top[0].logprob) and ev.logprob < 0
    assert ev.entropy > 0 and ev.margin == pytest.approx(2.0)


def test_non_finite_logits_give_no_numbers_and_fail_no_sequence():
    rt, core = make(hooks=True, prefix_cache=False)
    rt.nan_slots = {0}
    core.add(req(1, [51] * 4, max_tokens=2, hooks=True, signals=True,
                 params={"logprobs": True, "top_logprobs": 2}))
    core.add(req(2, [52] * 4, max_tokens=2, params={"logprobs": True}))
    out = run(rt, core)
    first = [ev for r, ev in out if r == 1 and isinstance(ev, TokenEvent)]
    assert len(first) == 2 and all(ev.logprob is None and ev.entropy is None and ev.top == () for ev in first)
    assert finish_of(out, 1).reason == "length" and finish_of(out, 2).reason == "length"
    assert all(ev.logprob is not None for r, ev in out if r == 2 and isinstance(ev, TokenEvent))


def test_slot_snapshot_erase_and_adopt_for_llama_server_slot_files():
    rt, core = make(n_seq_max=2)
    core.add(req(1, PROMPT + [1, 2, 3], max_tokens=20))
    step(rt, core)
    running = core.slots()
    assert running[0].rid == 1 and running[0].n_prompt == len(PROMPT) + 3 and running[1].rid is None
    assert core.slot_busy(0) and not core.slot_busy(1)
    run(rt, core)
    kept = core.slot_tokens(0)
    assert kept and core.slots()[0].n_kv == len(kept) and core.slots()[0].rid is None
    assert core.erase_slot(0) == len(kept) and core.slot_tokens(0) == [] and len(core.kv_cache.prefix) == 0
    rt.put_tokens(0, kept)  # what a restored state file put back into the KV
    core.adopt_slot(0, kept)
    core.add(req(2, PROMPT + [7, 8, 9], max_tokens=2))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == len(PROMPT)  # the adopted tokens are reused
    core.erase_slot(1)
    core.adopt_slot(1, [])  # a failed restore leaves the slot free
    assert core.slot_tokens(1) == [] and not core.slot_busy(1)


# -- embeddings ------------------------------------------------------------------------

EMBD = EmbeddingInfo(pooling="mean", n_ctx=32, n_seq_max=4)


def embeddings_of(outputs, rid) -> EmbeddingsEvent:
    [ev] = [ev for r, ev in outputs if r == rid and isinstance(ev, EmbeddingsEvent)]
    return ev


def test_embedding_batches_fill_the_embedding_context_when_nothing_generates():
    rt, core = make(embeddings=EMBD)
    inputs = [tuple(range(10 + i, 20 + i)) for i in range(5)] + [(7, 8)] * 6  # 5 x 10 tokens, 6 x 2
    core.add_embedding(EmbedRequest(1, tuple(inputs)))
    out = run(rt, core)
    # in order, at most n_ctx tokens and n_seq_max inputs per batch (the fake asserts both)
    assert [len(b) for b in rt.embed_batches] == [3, 4, 4]
    assert [t for b in rt.embed_batches for t in b] == [list(t) for t in inputs]
    ev = embeddings_of(out, 1)
    assert ev.error is None and ev.prompt_tokens == 62 and ev.vectors.shape == (11, 3)
    assert ev.vectors[:, 0].tolist() == [t[0] for t in inputs]  # each vector where its input was
    assert rt.batches == [] and core.idle
    st = core.stats()
    assert (st.embed_inputs_total, st.embed_tokens_total, st.embed_batches_total, st.n_embed_waiting) == (11, 62, 3, 0)


def test_pooling_none_gives_each_input_its_tokens_vectors_across_batches():
    # llama-server's /embedding with --pooling none: a vector per token; the inputs of one request span batches
    rt, core = make(embeddings=EmbeddingInfo(pooling="none", n_ctx=8, n_seq_max=4, error="not OAI compatible"))
    inputs = ((1, 2, 3), (4, 5, 6, 7, 8), (9,), (10, 11))
    core.add_embedding(EmbedRequest(1, inputs))
    out = run(rt, core)
    assert [sum(map(len, b)) for b in rt.embed_batches] == [8, 3]  # inputs 0-1, then 2-3
    ev = embeddings_of(out, 1)
    assert ev.lengths == (3, 5, 1, 2) and ev.vectors.shape == (11, 3) and ev.prompt_tokens == 11
    rows = ev.per_input()
    assert [r[:, 0].tolist() for r in rows] == [list(t) for t in inputs]  # each input's own tokens, in order
    assert [r[:, 1].tolist() for r in rows] == [list(range(len(t))) for t in inputs]
    pooled = embeddings_of(run(*_pooled_core()), 1)
    assert pooled.lengths is None and [r.shape for r in pooled.per_input()] == [(3,), (3,)]


def _pooled_core():
    rt, core = make(embeddings=EMBD)
    core.add_embedding(EmbedRequest(1, ((1, 2), (3,))))
    return rt, core


def test_an_embedding_batch_never_starves_running_streams():
    rt, core = make(n_seq_max=2, step_tokens=64, embeddings=EMBD, prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=40))
    core.add(req(2, [52] * 4, max_tokens=40))
    step(rt, core)  # both prefilled: decoding now
    core.add_embedding(EmbedRequest(3, tuple((20 + i,) * 5 for i in range(12))))  # 12 inputs of 5 tokens
    out = []
    n_batches = len(rt.batches)
    while core.phase(1) is Phase.DECODING and not any(r == 3 for r, _ in out):
        step(rt, core, out)
        # every step decodes both streams, and its embedding batch takes a quarter of the 62 tokens they leave
        assert sorted(e.seq_id for e in rt.batches[-1]) == [0, 1]
        assert sum(map(len, rt.embed_batches[-1])) == 15
    assert len(rt.batches) - n_batches == 4 == len(rt.embed_batches)  # 3 inputs (15 tokens) per step
    assert embeddings_of(out, 3).vectors.shape == (12, 3)
    assert len(tokens_of(out, 1)) == len(tokens_of(out, 2)) == 4  # one token per stream per step, meanwhile


def test_an_input_longer_than_the_share_goes_alone_and_the_streams_still_decode():
    rt, core = make(n_seq_max=2, step_tokens=16, embeddings=EMBD, prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=40))
    step(rt, core)
    core.add_embedding(EmbedRequest(2, ((30,) * 32, (31,) * 32, (32,) * 3)))
    out = []
    for _ in range(3):
        step(rt, core, out)
        assert [e.seq_id for e in rt.batches[-1]] == [0]  # the stream's token, every step
    assert [sum(map(len, b)) for b in rt.embed_batches] == [32, 32, 3]  # one long input per step, whole
    assert embeddings_of(out, 2).prompt_tokens == 67 and len(tokens_of(out, 1)) == 3


def test_prefill_and_embeddings_share_the_step_budget_and_both_progress():
    rt, core = make(n_seq_max=2, step_tokens=16, embeddings=EMBD, prefix_cache=False)
    core.add(req(1, list(range(100, 160)), max_tokens=2))  # 60 prompt tokens to prefill
    core.add_embedding(EmbedRequest(2, tuple((40 + i,) * 2 for i in range(16))))  # 16 inputs of 2 tokens
    out = []
    for _ in range(3):
        step(rt, core, out)
        n_prefill, n_embed = len(rt.batches[-1]), sum(map(len, rt.embed_batches[-1]))
        assert (n_prefill, n_embed) == (12, 4)  # a quarter of the budget for embeddings, the rest prefills
    out += run(rt, core)
    assert core.idle and len(tokens_of(out, 1)) == 2 and embeddings_of(out, 2).vectors.shape == (16, 3)


def test_a_cancelled_embedding_request_leaves_the_queue_and_its_running_batch_is_dropped():
    rt, core = make(embeddings=EMBD)
    core.add_embedding(EmbedRequest(1, ((5,) * 30, (6,) * 30)))
    core.add_embedding(EmbedRequest(2, ((7,) * 4,)))
    plan = core.plan()  # the batch holds request 1's first input
    core.cancel(1)  # its second input leaves the queue; the batch in flight ends without it
    out = core.update(plan, execute(rt, plan)) + run(rt, core)
    assert [r for r, ev in out if isinstance(ev, EmbeddingsEvent)] == [2]
    assert rt.embed_batches == [[[5] * 30], [[7] * 4]] and core.idle and core.stats().n_embed_waiting == 0


def test_a_failed_embedding_batch_fails_its_requests_only():
    rt, core = make(embeddings=EmbeddingInfo(pooling="mean", n_ctx=8, n_seq_max=4), prefix_cache=False)
    core.add(req(1, [51] * 4, max_tokens=3))
    core.add_embedding(EmbedRequest(2, ((99, 1), (2, 3) * 4)))  # its first batch fails
    core.add_embedding(EmbedRequest(3, ((4, 5),)))
    out = run(rt, core)
    ev2, ev3 = embeddings_of(out, 2), embeddings_of(out, 3)
    assert ev2.vectors is None and "embedding batch failed" in ev2.error
    assert ev3.error is None and ev3.vectors.tolist() == [[4, 2, 9]]
    assert [list(map(len, b)) for b in rt.embed_batches] == [[2], [2]]  # 2's second input was dropped
    assert tokens_of(out, 1) == [FILLER] * 3 and finish_of(out, 1).reason == "length"


def test_a_failed_decode_puts_the_embedding_batch_back_and_close_cancels_embeddings():
    rt, core = make(embeddings=EMBD)
    core.add(req(1, [51] * 4))
    core.add_embedding(EmbedRequest(2, ((5,) * 3,)))
    plan = core.plan()
    assert plan.batch is not None and plan.embed is not None
    out = core.fail("llama_decode failed")  # the step raised before its embedding batch ran
    assert finish_of(out, 1).reason == "error" and not any(r == 2 for r, _ in out)
    out = run(rt, core)
    assert embeddings_of(out, 2).vectors.tolist() == [[5, 3, 15]]
    core.add_embedding(EmbedRequest(3, ((5,) * 3,)))
    assert embeddings_of(core.close(), 3).error == "cancelled" and core.idle


def test_embedding_requests_count_in_the_queue_limit_and_bad_inputs_are_refused():
    rt, core = make(n_seq_max=1, max_queue=2, embeddings=EMBD)
    for rid in (1, 3, 7, 8):  # the embedding context's 4 sequences: none of them waits
        core.add_embedding(EmbedRequest(rid, ((5,),)))
    core.add(req(2, [52] * 4))  # the free slot's
    core.add(req(6, [56] * 4))  # waits for it
    assert core.n_queued() == 1
    core.add_embedding(EmbedRequest(9, ((5,),)))  # waits: the second place of the queue
    assert core.n_queued() == 2 and core.n_queued(incoming_embeds=1) == 3
    with pytest.raises(QueueFull):
        core.add_embedding(EmbedRequest(10, ((5,),)))
    for inputs in ((), ((),), ((5,) * 33,)):
        with pytest.raises(ValueError, match="1..32 tokens"):
            make(embeddings=EMBD)[1].add_embedding(EmbedRequest(4, inputs))
    for info in (None, EmbeddingInfo(pooling="mean", n_ctx=32, n_seq_max=4, error="llama.cpp could not create it")):
        with pytest.raises(ValueError):
            make(embeddings=info)[1].add_embedding(EmbedRequest(5, ((5,),)))


# -- multi-step runs ---------------------------------------------------------------------

def _mixed_workload(steps):
    """Four requests on three slots (one waits): an EOG, a stop token id, max_tokens and a full context."""
    rt, core = make(n_seq_max=3, n_ctx_seq=16, scheduler_steps=steps)
    rt.scripts = {1: [9, 8, 9, 8, 9, EOG], 2: [9, 8, 7, 6], 4: [6, 6, EOG]}
    core.add(req(1, [51] * 4, max_tokens=12))
    core.add(req(2, [52] * 4, max_tokens=8, params={"stop_token_ids": frozenset({7})}))
    core.add(req(3, [53] * 9, max_tokens=50))
    core.add(req(4, [54] * 5, max_tokens=5))
    plans, outputs = [], []
    for _ in range(100):
        plan = core.plan()
        outputs += plan.outputs
        if plan.empty:
            break
        plans.append(plan)
        outputs += core.update(plan, execute(rt, plan))
    return rt, core, plans, outputs


def test_a_multi_step_run_gives_every_sequence_the_tokens_and_finish_of_single_steps():
    rt1, core1, plans1, out1 = _mixed_workload(1)
    rt4, core4, plans4, out4 = _mixed_workload(4)
    for rid in (1, 2, 3, 4):
        assert tokens_of(out4, rid) == tokens_of(out1, rid)
        fin1, fin4 = finish_of(out1, rid), finish_of(out4, rid)
        assert (fin4.reason, fin4.completion_tokens) == (fin1.reason, fin1.completion_tokens)
    assert finish_of(out4, 3).reason == "length" and 9 + finish_of(out4, 3).completion_tokens == 16
    # the same tokens went into the KV cache (FakeRuntime checks every position), nothing past a finish
    assert sum(len(b) for b in rt4.batches) == sum(len(b) for b in rt1.batches)
    assert rt4.kv == rt1.kv
    assert core4.stats().tokens_predicted_total == core1.stats().tokens_predicted_total
    assert any(p.steps > 1 for p in plans4) and not any(p.steps > 1 for p in plans1)
    assert len(plans4) < len(plans1)
    assert core4.stats().steps == len(rt4.batches)  # every decode of a run counts as a step


def _plan_run(rt, core, steps):
    """Step until the core plans a multi-step run of ``steps`` decodes (runs grow with the youngest sequence)."""
    for _ in range(20):
        plan = core.plan()
        if plan.steps == steps:
            return plan
        assert plan.steps < steps
        core.update(plan, execute(rt, plan))
    raise AssertionError("no such run")


def test_runs_grow_with_the_youngest_sequences_tokens():
    rt, core = make(scheduler_steps=8)
    core.add(req(1, [51] * 4, max_tokens=40))
    seen = []
    for _ in range(7):
        plan = core.plan()
        seen.append(plan.steps)
        core.update(plan, execute(rt, plan))
    assert seen == [1, 1, 2, 4, 8, 8, 8]  # the prefill, then runs as long as the tokens so far
    core.add(req(2, [52] * 4, max_tokens=40))
    assert [step(rt, core) is not None, core.plan().steps] == [True, 1]  # a new stream: one step at a time


def test_a_multi_step_run_ends_when_a_sequence_finishes_while_a_request_waits():
    rt, core = make(n_seq_max=2, scheduler_steps=8)
    rt.scripts = {1: [9] * 6 + [EOG]}
    core.add(req(1, [51] * 4, max_tokens=40))
    core.add(req(2, [52] * 4, max_tokens=40))
    core.add(req(3, [53] * 4, max_tokens=3))  # waits for a slot
    plan = _plan_run(rt, core, 4)  # 1 and 2 have 4 tokens each
    assert plan.until_finish
    result = execute(rt, plan)
    assert [len(ev) for ev in result.tokens] == [3, 3]  # 1's EOG at the third decode ends the run for 2 too
    assert result.decodes == 3
    out = core.update(plan, result)
    assert tokens_of(out, 1) == [9, 9] and finish_of(out, 1).reason == "stop"
    assert tokens_of(out, 2) == [FILLER] * 3
    plan = core.plan()  # 3 is admitted into the freed slot right away
    assert plan.steps == 1 and {e.seq_id for e in plan.batch.entries} == {0, 1}


def test_a_multi_step_run_stops_at_an_interrupt():
    rt, core = make(scheduler_steps=8)
    core.add(req(1, [51] * 4, max_tokens=40))
    plan = _plan_run(rt, core, 8)
    n_kv = len(rt.kv[0])
    asked = []
    result = execute(rt, plan, interrupt=lambda: asked.append(1) or len(asked) >= 3)
    assert [len(ev) for ev in result.tokens] == [3]  # the first decode, then two before the third answer
    out = core.update(plan, result)
    assert tokens_of(out, 1) == [FILLER] * 3
    assert len(rt.kv[0]) == n_kv + 3
    assert step(rt, core)  # decoding goes on from there


def test_no_multi_step_run_with_a_prefill_or_a_hook_window_in_the_batch():
    rt, core = make(scheduler_steps=4, step_tokens=6)
    core.add(req(1, [51] * 4, max_tokens=20))
    step(rt, core)
    core.add(req(2, [52] * 30, max_tokens=20))  # its prefill takes several steps beside 1's decode
    assert core.plan().steps == 1
    rt, core = make(scheduler_steps=4, hooks=True)
    core.add(req(1, [51] * 4, max_tokens=20, hooks=True))
    step(rt, core)  # parked after its first token
    core.on_verdict(1, NO_ACTION)
    plan = core.plan()
    assert plan.batch is not None and plan.steps == 1


# -- backend sampling ------------------------------------------------------------------------------

class BackendFake(FakeRuntime):
    """The fake with llama.cpp's backend greedy sampler: SeqSampler rows, logits that depend on the slot's last
    token, a greedy token picked "in the graph" for slots with the sampler attached, whose raw rows llama.cpp
    then leaves unset (reading them fails here)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.meta = attrs.evolve(self.meta, backend_sampling=True)
        self.attached: set[int] = set()
        self.chains: dict[int, object] = {}
        self.changes: list[tuple[int, bool]] = []

    def logits(self, index):
        assert index in self._out
        slot = self._out[index]
        assert slot not in self.attached, "raw logits of a backend-sampled sequence"
        return self._row(slot)

    def _row(self, slot):
        x = np.zeros(N_VOCAB, dtype=np.float32)
        x[(self.kv[slot][-1] * 7 + 3) % 200 + 20] = 2.0  # never EOG
        x[9] = 1.0
        return x

    def new_sampler(self, params):
        from skippy.engine.sampling.vector import SeqSampler

        s = SeqSampler(params, self.meta.eog_ids)
        self.samplers.append(s)
        return s

    def free_sampler(self, sampler):
        pass

    def set_backend_sampler(self, seq_id, params):
        on = params is not None
        assert on or seq_id in self.attached, "a detach of nothing"
        assert not (on and seq_id in self.attached and params.greedy and self.chains[seq_id].greedy), \
            "a greedy chain attached again"
        (self.attached.add if on else self.attached.discard)(seq_id)
        self.chains[seq_id] = params
        self.changes.append((seq_id, on))

    def sampled_token(self, index):
        slot = self._out[index]
        assert slot in self.attached
        return int(np.argmax(self._row(slot)))

    def sampled_tokens(self, indices):
        return [self.sampled_token(i) for i in indices]


def _backend_core(backend=True, **kw):
    rt = BackendFake(n_seq_max=2)
    if not backend:
        rt.meta = attrs.evolve(rt.meta, backend_sampling=False)
    return rt, SchedulerCore(rt, SchedulerConfig(step_tokens=64, max_queue=8, **kw), clock=Clock())


@pytest.mark.parametrize("steps", [1, 4])
def test_plain_greedy_requests_are_sampled_in_the_graph_with_the_same_tokens(steps):
    def serve(backend):
        rt, core = _backend_core(backend, scheduler_steps=steps)
        core.add(req(1, [11, 12, 13], 6, params={"temperature": 0.0}))
        core.add(req(2, [14, 15], 6, params={"temperature": 0.0}))
        return rt, run(rt, core)

    rt, out = serve(True)
    _, ref = serve(False)
    assert tokens_of(out, 1) == tokens_of(ref, 1) and len(tokens_of(out, 1)) == 6
    assert tokens_of(out, 2) == tokens_of(ref, 2)
    assert sorted(rt.changes) == [(0, True), (1, True)]  # attached once, at admission


class WalkFake(BackendFake):
    """:class:`BackendFake` whose greedy token walks with the slot's last three tokens and is sometimes the EOG
    (a run's sequences then end at different decodes)."""

    def _row(self, slot):
        x = np.zeros(N_VOCAB, dtype=np.float32)
        t = (sum(self.kv[slot][-3:]) * 7 + 3) % 60 + 20
        x[EOG if t % 13 == 0 else t] = 2.0
        x[9] = 1.0
        return x


@pytest.mark.parametrize("backend", [False, True])
def test_a_plain_run_a_column_at_a_time_equals_the_general_loop(backend, monkeypatch):
    """Multi-step runs of plain greedy sequences (argmax of the rows, or the backend sampler's pick) go through
    the columnar loop; made to take the general one instead, every token, finish, KV position and decode
    batch is the same: EOGs, a stop token id, max_tokens, the context's end and a waiting request among them."""
    import skippy.engine.scheduling.decode as decode_mod

    def serve(steps=8):
        rt = WalkFake(n_seq_max=3, n_ctx_seq=40)
        if not backend:
            rt.meta = attrs.evolve(rt.meta, backend_sampling=False)
        core = SchedulerCore(rt, SchedulerConfig(step_tokens=64, max_queue=8, scheduler_steps=steps), clock=Clock())
        greedy = {"temperature": 0.0}
        core.add(req(1, [11, 12, 13], 30, params=greedy))
        core.add(req(2, [14, 15], 25, params={**greedy, "stop_token_ids": frozenset({41, 44, 47})}))
        core.add(req(3, [16] * 10, 200, params=greedy))
        core.add(req(4, [17, 18, 19, 20], 9, params=greedy))
        core.add(req(5, [21, 22], 12, params=greedy))
        return rt, core, run(rt, core)

    rt, core, out = serve()
    assert any(len(b) > 1 and all(e.logits for e in b) for b in rt.batches[3:])  # runs decoded
    monkeypatch.setattr(decode_mod, "_plain", lambda task: False)
    rt_ref, core_ref, ref = serve()
    assert out == ref and rt.batches == rt_ref.batches and rt.kv == rt_ref.kv
    assert core.stats() == core_ref.stats()
    assert {finish_of(out, r).reason for r in range(1, 6)} >= {"stop", "length"}
    assert [s.n_accepted for s in rt.samplers] == [s.n_accepted for s in rt_ref.samplers]  # an EOG counts too
    # and as single steps (the core takes a run's tokens at once): the same tokens, finishes and counters
    rt_one, core_one, one = serve(steps=1)
    for r in range(1, 6):
        assert tokens_of(out, r) == tokens_of(one, r)
        assert finish_of(out, r).reason == finish_of(one, r).reason
    assert rt.kv == rt_one.kv
    untimed = {"steps": 0, "prompt_seconds_total": 0.0, "predicted_seconds_total": 0.0}
    assert attrs.evolve(core.stats(), **untimed) == attrs.evolve(core_one.stats(), **untimed)


def test_a_slot_is_detached_for_a_request_that_needs_its_logits_and_attached_again_after():
    rt, core = _backend_core()
    core.add(req(1, [11, 12, 13], 3, params={"temperature": 0.0}))
    first = tokens_of(run(rt, core), 1)
    assert rt.changes == [(0, True)] or rt.changes == [(1, True)]
    slot = rt.changes[0][0]
    # logprobs, sampling with a temperature, a logit bias or a penalty, ignore_eos: the raw logits are read
    for rid, params in ((2, {"temperature": 0.0, "logprobs": True, "top_logprobs": 2}),
                        (3, {"temperature": 0.8}),
                        (4, {"temperature": 0.0, "logit_bias": ((30, 1.0),)}),
                        (5, {"temperature": 0.0, "repeat_penalty": 1.3}),
                        (6, {"temperature": 0.0, "ignore_eos": True})):
        core.add(req(rid, [11, 12, 13], 3, params=params))  # the same prompt: its slot is reused
        out = run(rt, core)
        assert len(tokens_of(out, rid)) == 3 and finish_of(out, rid).reason == "length"
    assert rt.changes[:2] == [(slot, True), (slot, False)] and len(rt.changes) == 2
    core.add(req(7, [11, 12, 13], 3, params={"temperature": 0.0}))
    assert tokens_of(run(rt, core), 7) == first and len(first) == 3
    assert rt.changes[-1] == (slot, True) and len(rt.changes) == 3



class SampledFake(BackendFake):
    """:class:`BackendFake` whose backend also runs sampled chains (``meta.backend_sampled``): an attached chain
    samples as a fresh host :class:`SeqSampler` of its parameters would (the same seed, the same tokens)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.meta = attrs.evolve(self.meta, backend_sampled=True)
        self.graph: dict[int, object] = {}

    def set_backend_sampler(self, seq_id, params):
        from skippy.engine.sampling.vector import SeqSampler

        super().set_backend_sampler(seq_id, params)
        self.graph[seq_id] = None if params is None else SeqSampler(params, self.meta.eog_ids)

    def sampled_token(self, index):
        from skippy.engine.sampling.vector import sample_rows

        slot = self._out[index]
        assert slot in self.attached
        return sample_rows(self._row(slot)[None, :], [self.graph[slot]])[0]


@pytest.mark.parametrize("steps", [1, 4])
def test_sampled_requests_run_in_the_graph_when_the_backend_samples_there(steps):
    """With ``meta.backend_sampled``, sampled and penalized requests take their own backend chain (attached at
    admission, even over the slot's earlier one) and give the host chain's tokens; a reasoning budget or
    end-of-generation suppression keeps the raw logits (and the slot's chain is detached for it)."""
    kinds = [{"temperature": 0.8}, {"temperature": 0.8, "repeat_penalty": 1.3},
             {"temperature": 0.0, "repeat_penalty": 1.3}, {"temperature": 0.9, "top_k": 0, "top_p": 0.5},
             {"temperature": 0.8, "ignore_eos": True}, {"temperature": 0.0}, {"temperature": 0.0}]  # seeds: the ids

    def serve(fake):
        rt = fake(n_seq_max=1)
        core = SchedulerCore(rt, SchedulerConfig(step_tokens=64, max_queue=8, scheduler_steps=steps), clock=Clock())
        out = []
        for rid, params in enumerate(kinds, 1):
            core.add(req(rid, [11, 12, 13], 6, params=params))  # one slot: each request reuses it
            out += run(rt, core)
        return rt, out

    rt, out = serve(SampledFake)
    ref_rt, ref = serve(BackendFake)
    for rid in range(1, len(kinds) + 1):
        assert tokens_of(out, rid) == tokens_of(ref, rid) and tokens_of(out, rid)
    assert rt.changes == [(0, True)] * 4 + [(0, False), (0, True)]  # the greedy chain kept for request 7
    assert ref_rt.changes == [(0, True)]  # greedy chains only: from request 6, kept for 7
    assert rt.chains[0].greedy


def test_a_reasoning_budget_keeps_a_sampled_request_off_the_graph():
    rt = SampledFake(n_seq_max=1)
    core = SchedulerCore(rt, SchedulerConfig(step_tokens=64, max_queue=8), clock=Clock())
    core.add(req(1, [11, 12, 13], 4, params={"temperature": 0.8}))
    run(rt, core)
    assert rt.changes == [(0, True)]
    rule = ReasoningBudget(100, "<think>", "</think>", (5, 6), False, lambda t: b"x")
    budget = attrs.evolve(req(2, [11, 12, 13], 4, params={"temperature": 0.8}), reasoning_budget=rule)
    core.add(budget)
    assert len(tokens_of(run(rt, core), 2)) == 4
    assert rt.changes == [(0, True), (0, False)]

# -- stats -------------------------------------------------------------------------------

def test_stats_snapshot_the_counters_and_the_gauges():
    """``stats()`` is the core's :class:`SchedulerCounters` (the same field names) with the gauges of the
    moment: a frozen :class:`SchedulerStats` that later steps do not change."""
    counters = {f.name for f in attrs.fields(SchedulerCounters)}
    assert counters < {f.name for f in attrs.fields(SchedulerStats)}
    rt, core = make()
    core.add(req(1, PROMPT, max_tokens=3))
    run(rt, core)
    st = core.stats()
    assert {k: v for k, v in attrs.asdict(st).items() if k in counters} == attrs.asdict(core.counters)
    assert (st.steps, st.tokens_predicted_total, st.prompt_tokens_total) == (len(rt.batches), 3, len(PROMPT))
    assert (st.n_slots, st.n_running, st.kv_cells_used) == (2, 0, len(PROMPT))  # the prompt stays resident
    core.add(req(2, PROMPT, max_tokens=3))
    run(rt, core)
    assert core.stats().tokens_predicted_total == 6 and st.tokens_predicted_total == 3


# -- the KV-cache manager's invariants ---------------------------------------------------

def _check_slots(rt, core):
    """Every slot is free (KV empty), resident (KV = its entry's tokens) or running, exactly one of them."""
    kv = core.kv_cache
    free = set(kv._free_slots)
    resident = dict(kv.prefix.items())
    running = [s.kv.slot for s in core._running.values()]
    assert len(running) == len(set(running))
    assert not (free & set(resident)) and not (free & set(running)) and not (set(resident) & set(running))
    assert free | set(resident) | set(running) == set(range(core.n_slots))
    assert all(rt.kv[s] == [] for s in free)
    assert all(rt.kv[s] == tokens for s, tokens in resident.items())


@pytest.mark.parametrize("prompt_cache", [0, None])
def test_every_slot_is_free_resident_or_running_through_reuse_eviction_cancel_and_refusal(prompt_cache):
    rt, core = make(n_seq_max=3, prompt_cache=prompt_cache)
    prompts = [PROMPT, PROMPT[:30] + [7] * 12, PROMPT + [8] * 5, [60] * 20, PROMPT[:20] + [9] * 25, [61] * 3]
    rid = 0
    out = []
    for k in range(40):
        if k % 3 == 0 and rid < 14:
            rid += 1
            core.add(req(rid, prompts[rid % len(prompts)], max_tokens=2 + rid % 4,
                         params={"grammar": "bad"} if rid == 7 else {}))
        if k == 5:
            out += core.cancel(2)
        out += step(rt, core) or []
        _check_slots(rt, core)
    out += run(rt, core)
    _check_slots(rt, core)
    assert core.idle and finish_of(out, 7).reason == "error"
    assert core.stats().prefix_hits > 0 and len(core.kv_cache.prefix) > 0


# -- the scheduler's options ------------------------------------------------------------

def test_scheduler_config_is_built_once_from_the_engine_settings():
    # every scheduler option of EngineConfig reaches SchedulerConfig (open_engine passes nothing else)
    from skippy.engine.config import EngineConfig
    from skippy.engine.hooks.signals import SignalConfig

    engine = EngineConfig(model="x.gguf", step_tokens=128, max_queue=9, signal_window=8, high_entropy_threshold=1.5,
                          prefix_cache=False, spec_ngram=3, ctx_checkpoints=4, cache_ram=16, scheduler_steps=2)
    assert SchedulerConfig.from_engine_config(engine) == SchedulerConfig(
        step_tokens=128, max_queue=9, signal_config=SignalConfig(window=8, high_entropy_threshold=1.5),
        prefix_cache=False, spec_ngram=3, ctx_checkpoints=4, checkpoint_budget=16 * 2**20,
        prompt_cache=16 * 2**20, min_tail=MIN_TAIL, scheduler_steps=2)
    plain = SchedulerConfig.from_engine_config(EngineConfig(model="x.gguf", cache_ram=-1, flash_attn="off"))
    assert (plain.checkpoint_budget, plain.prompt_cache, plain.min_tail) == (None, None, EXACT_TAIL)
    # --reader-wait: on and off as given; auto as host_bound says
    for setting, bound, wait in (("auto", True, True), ("auto", False, False), ("on", False, True),
                                 ("off", True, False)):
        cfg = EngineConfig(model="x.gguf", reader_wait=setting)
        assert SchedulerConfig.from_engine_config(cfg, host_bound=bound).reader_wait is wait
    rt, core = make(step_tokens=None)
    assert core.step_tokens == rt.meta.n_batch and core.config.step_tokens is None  # None: the runtime's batch


def test_host_bound_says_whether_llamas_threads_share_the_event_loops_cores():
    from skippy.engine.scheduling.config import host_bound

    def meta(offload=None, **load):
        rt = FakeRuntime()
        return attrs.evolve(rt.meta, devices=None if offload is None else {"offload": offload}, load=load or None)

    on_gpu = {"devices": ["CUDA0"], "n_gpu_layers": 31, "n_layer": 31}
    assert host_bound(meta(), 2, 2)  # a runtime that says nothing: all on the CPU
    assert host_bound(meta({"devices": [], "n_gpu_layers": 0, "n_layer": 31}), 16, 16)
    assert not host_bound(meta(), 1, 2)  # a core left for the loop
    assert not host_bound(meta(on_gpu), 16, 16)  # every layer on the GPU
    assert host_bound(meta(dict(on_gpu, n_gpu_layers=20)), 16, 16)  # 11 layers on the CPU
    assert host_bound(meta(on_gpu, n_cpu_moe=4), 16, 16)  # experts on the CPU
    assert host_bound(meta(on_gpu, override_tensor=["exps=CPU"]), 16, 16)
    assert not host_bound(meta(on_gpu, n_cpu_moe=0, override_tensor=[]), 16, 16)


# -- images (issue 38) -------------------------------------------------------------------------------------------

def _with_image(text_before, data, n, text_after):
    from skippy.engine.runtime.media import MediaChunk, MediaSpan, image_key, placeholder_ids

    key = image_key(data)
    span = MediaSpan(len(text_before), n, key, MediaChunk(0, n, n))
    return list(text_before) + placeholder_ids(key, n) + list(text_after), (span,)


def test_an_image_is_decoded_whole_and_a_second_prompt_with_it_reuses_its_kv():
    system, question = list(range(100, 124)), list(range(300, 310))
    prompt, media = _with_image(system, b"cat.png", 48, question)
    rt, core = make(n_seq_max=1, spec_ngram=4)
    core.add(req(1, prompt, max_tokens=3, media=media))
    out = run(rt, core)
    assert rt.media_decoded == [(0, 24, 48)] and len(tokens_of(out, 1)) == 3
    assert all(e.token >= 0 for batch in rt.batches for e in batch)  # placeholders never reach llama_decode
    assert rt.kv[0][24:72] == prompt[24:72]
    again, media2 = _with_image(system, b"cat.png", 48, list(range(400, 412)))
    core.add(req(2, again, max_tokens=3, media=media2))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 72 and len(rt.media_decoded) == 1  # the image's KV reused
    other, media3 = _with_image(system, b"dog.png", 48, question)
    core.add(req(3, other, max_tokens=3, media=media3))
    out = run(rt, core)
    assert finish_of(out, 3).cached_tokens == 24 and rt.media_decoded[-1] == (0, 24, 48)  # another image


def test_a_reused_prefix_that_would_end_inside_an_image_starts_at_the_image():
    prompt, media = _with_image(list(range(100, 124)), b"cat.png", 48, [7, 8])
    rt, core = make(n_seq_max=1)
    core.add(req(1, prompt[:24] + prompt[24:60] + [9] * 10, max_tokens=1))  # a text prompt sharing 60 ids
    run(rt, core)
    core.add(req(2, prompt, max_tokens=1, media=media))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 24 and rt.media_decoded == [(0, 24, 48)]


# -- M-RoPE images (Qwen2-VL and later): an image's cells share one position and take fewer positions ---------
# The fake runtime holds each cell's position and refuses a token, an image, a trim or a copy at any other
# position than llama.cpp would have it at (tests/support.py FakeRuntime).

def _with_mrope_image(text_before, data, n, n_pos, text_after):
    from skippy.engine.runtime.media import MediaChunk, MediaSpan, image_key, placeholder_ids

    key = image_key(data)
    span = MediaSpan(len(text_before), n, key, MediaChunk(0, n, n_pos, shared=True))
    return list(text_before) + placeholder_ids(key, n) + list(text_after), (span,)


def test_text_after_an_m_rope_image_takes_the_positions_the_image_left_and_a_second_prompt_reuses_it():
    system, question = list(range(100, 124)), list(range(300, 310))
    prompt, media = _with_mrope_image(system, b"cat.png", 48, 7, question)
    rt, core = make(n_seq_max=1, spec_ngram=4)
    core.add(req(1, prompt, max_tokens=3, media=media))
    out = run(rt, core)
    assert rt.media_decoded == [(0, 24, 48)] and len(tokens_of(out, 1)) == 3
    assert rt.pos[0][24:72] == [24] * 48 and rt.pos[0][72:82] == list(range(31, 41))  # after it: 24 + 7
    again, media2 = _with_mrope_image(system, b"cat.png", 48, 7, list(range(400, 412)))
    core.add(req(2, again, max_tokens=3, media=media2))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 72 and len(rt.media_decoded) == 1  # the image's KV reused
    assert rt.pos[0][72:84] == list(range(31, 43))
    other, media3 = _with_mrope_image(system, b"dog.png", 48, 7, question)
    core.add(req(3, other, max_tokens=3, media=media3))
    out = run(rt, core)
    assert finish_of(out, 3).cached_tokens == 24 and rt.media_decoded[-1] == (0, 24, 48)


def test_a_reused_prefix_ending_inside_an_m_rope_image_starts_at_the_image():
    prompt, media = _with_mrope_image(list(range(100, 124)), b"cat.png", 48, 6, [7, 8])
    rt, core = make(n_seq_max=1)
    core.add(req(1, prompt[:60] + [9] * 10, max_tokens=1))  # a text prompt sharing 60 ids, 36 of the image's
    run(rt, core)
    core.add(req(2, prompt, max_tokens=1, media=media))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 24 and rt.media_decoded == [(0, 24, 48)]
    assert rt.pos[0][72:] == [30, 31]  # the 2 question tokens: 24 + 6 on


def test_two_m_rope_images_and_their_positions_through_the_prompt_cache_and_a_unified_copy():
    from skippy.engine.runtime.media import MediaChunk, MediaSpan, image_key, placeholder_ids

    def prompt_with(tail):
        k1, k2 = image_key(b"one"), image_key(b"two")
        spans = (MediaSpan(10, 12, k1, MediaChunk(0, 12, 4, shared=True), 10),
                 MediaSpan(25, 20, k2, MediaChunk(0, 20, 5, shared=True), 17))  # 10 + 4 + 3 text
        return ([1] + list(range(100, 109)) + placeholder_ids(k1, 12) + [5, 6, 7] + placeholder_ids(k2, 20)
                + list(range(200, 220)) + tail), spans

    a, media_a = prompt_with([30, 31, 32, 33])
    b, media_b = prompt_with([40, 41, 42, 43, 44, 45])
    rt, core = make(n_seq_max=1, prompt_cache=None)
    core.add(req(1, a, max_tokens=2, media=media_a))
    run(rt, core)
    assert rt.pos[0][45:49] == [22, 23, 24, 25]  # 17 + 5 after the second image
    core.add(req(2, b[:10] + [1] * 40, max_tokens=2))  # text only, shares 10 tokens: a's state goes to host memory
    run(rt, core)
    core.add(req(3, b, max_tokens=2, media=media_b))  # restored from the prompt cache, trimmed to what b shares
    out = run(rt, core)
    assert rt.restored and finish_of(out, 3).cached_tokens == 65
    assert rt.pos[0][65:71] == list(range(42, 48))
    rt, core = make(n_seq_max=2, unified=True)
    core.add(req(1, a, max_tokens=2, media=media_a))
    run(rt, core)
    core.add(req(2, b, max_tokens=2, media=media_b))
    out = run(rt, core)
    assert rt.copies == [(0, 1, 65)] and finish_of(out, 2).cached_tokens == 65  # positions [0, 42): 65 cells
    assert rt.pos[1][65:71] == list(range(42, 48))


def test_a_prefill_takes_the_whole_batch_while_no_stream_decodes_and_step_tokens_beside_one():
    """step_tokens bounds the ITL of running streams; with none decoding, a prompt goes in n_batch-token
    decodes (llama-server's -b): cutting it finer only costs (a 270-token prompt after 1680 cached tokens as
    256 + 14 took 1.37 s against 1.06 s whole, on 2 CPU cores)."""
    rt, core = make(n_seq_max=2, step_tokens=8, n_batch=32, prefix_cache=False)
    core.add(req(1, list(range(100, 140)), max_tokens=20))
    step(rt, core)
    assert [len(b) for b in rt.batches] == [32]  # alone: the whole batch
    run_until = [step(rt, core) for _ in range(2)]
    assert run_until and core.phase(1) is Phase.DECODING
    core.add(req(2, list(range(200, 240)), max_tokens=2))
    step(rt, core)
    assert len(rt.batches[-1]) == 8 and sum(e.seq_id == rt.batches[-1][0].seq_id for e in rt.batches[-1]) >= 1
