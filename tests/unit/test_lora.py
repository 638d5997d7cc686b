"""LoRA adapters, sans-IO: the adapter table and request sets (:mod:`skippy.engine.lora`), and the scheduler's
rules over a fake runtime (:class:`tests.support.FakeRuntime` records the set each KV position was computed
under, and fails a decode whose sequence's KV was computed under another set than the one applied): a step
decodes one set, the steps go round the sets, and cached prefixes, context checkpoints and prompt-cache
states serve only prompts of their own set.
"""

from __future__ import annotations

import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.lora import LoraAdapters, adapter_name, lora_set, parse_scales, split_adapter_name
from skippy.engine.scheduling.checkpoint import CheckpointStore
from skippy.engine.scheduling.decode import execute
from skippy.engine.scheduling.prefix import PrefixIndex
from tests.support import PROMPT, finish_of, make, req, run, tokens_of

A, B = ((0, 1.0),), ((1, 0.5),)
ADAPTERS = ("a.gguf", "b.gguf")


# -- the table -------------------------------------------------------------------------------------

def test_sets_are_canonical_zero_scales_dropped_and_ids_sorted() -> None:
    assert lora_set([(1, 0.5), (0, 1), (2, 0.0)]) == ((0, 1.0), (1, 0.5))
    assert lora_set({0: 0.0}) == () and lora_set([]) == ()
    assert lora_set([(0, 1.0), (0, 2.0)]) == ((0, 2.0),)  # a later entry wins


def test_global_scales_start_at_the_startup_scales_or_zero_without_apply() -> None:
    table = LoraAdapters([("/x/a.gguf", 1.0), ("/x/b.GGUF", 0.25)])
    assert table.listing() == [{"id": 0, "path": "/x/a.gguf", "scale": 1.0},
                               {"id": 1, "path": "/x/b.GGUF", "scale": 0.25}]
    assert table.global_set == ((0, 1.0), (1, 0.25))
    off = LoraAdapters([("/x/a.gguf", 1.0)], init_without_apply=True)
    assert off.global_set == () and off.listing()[0]["scale"] == 0.0
    assert [a.name for a in table.adapters] == ["a", "b"] and adapter_name("dir/my.lora.gguf") == "my.lora"


def test_a_request_list_sets_the_listed_adapters_and_zeroes_the_others() -> None:
    table = LoraAdapters([("a.gguf", 1.0), ("b.gguf", 1.0)])
    assert table.for_request(None) == table.for_request([]) == ((0, 1.0), (1, 1.0))  # the global scales
    assert table.for_request([{"id": 1, "scale": 0.5}]) == ((1, 0.5),)
    assert table.for_request([{"id": 0, "scale": 0}]) == ()
    table.set_global([{"id": 1, "scale": 2}])
    assert table.global_set == ((1, 2.0),) and table.listing()[0]["scale"] == 0.0


@pytest.mark.parametrize(("entries", "param"), [
    ([{"id": 2, "scale": 1.0}], "lora.0.id"),
    ([{"id": 0, "scale": 1.0}, {"id": -1, "scale": 1.0}], "lora.1.id"),
    ([{"id": "0", "scale": 1.0}], "lora.0.id"),
    ([{"id": True, "scale": 1.0}], "lora.0.id"),
    ([{"id": 0, "scale": "big"}], "lora.0.scale"),
    ([{"id": 0}], "lora.0.scale"),
    ([{"id": 0, "scale": float("nan")}], "lora.0.scale"),
    ([{"id": 0, "scale": float("inf")}], "lora.0.scale"),
    ([{"id": 0, "scale": 1e39}], "lora.0.scale"),  # finite here, infinite as the C float llama.cpp takes
    ([{"id": 0, "scale": -1e300}], "lora.0.scale"),
    ([3], "lora.0"),
    ({"id": 0, "scale": 1.0}, "lora"),
])
def test_bad_entries_are_400s_naming_the_entry(entries, param) -> None:
    table = LoraAdapters([("a.gguf", 1.0), ("b.gguf", 1.0)])
    with pytest.raises(InvalidRequest) as err:
        table.for_request(entries)
    assert err.value.param == param and param in err.value.message


def test_a_refused_post_changes_nothing_and_names_the_entry() -> None:
    table = LoraAdapters([("a.gguf", 1.0)])
    with pytest.raises(InvalidRequest) as err:
        table.set_global([{"id": 0, "scale": 0.5}, {"id": 1, "scale": 1.0}])
    assert err.value.param == "1.id" and table.global_set == ((0, 1.0),)
    with pytest.raises(InvalidRequest):
        parse_scales([{"id": 0, "scale": 1.0}], 0)


def test_names_of_adapters() -> None:
    table = LoraAdapters([("/m/French.gguf", 0.5)])
    assert table.named("french").id == 0 and table.named("german") is None
    assert table.entry(table.named("French")) == [{"id": 0, "scale": 0.5}]
    assert split_adapter_name("smol:french") == ("smol", "french")
    assert split_adapter_name("host/x:y:french") == ("host/x:y", "french")
    assert split_adapter_name("smol") is None and split_adapter_name("smol:") is None
    assert split_adapter_name(None) is None


# -- the caches' keys ------------------------------------------------------------------------------

def test_prefix_index_matches_only_entries_of_the_prompts_set() -> None:
    index = PrefixIndex()
    index.keep(0, PROMPT, lora=A)
    assert index.best(PROMPT + [1], lora=B) is None and index.best(PROMPT + [1]) is None
    assert index.best(PROMPT + [1], lora=A).slot == 0 and index.lora(0) == A


def test_checkpoint_store_keys_states_on_the_set() -> None:
    store = CheckpointStore(4)
    store.add(0, PROMPT, b"a", A)
    store.add(1, PROMPT, b"b", B)
    assert len(store) == 2 and store.has(PROMPT, A) and not store.has(PROMPT)
    assert store.best(PROMPT + [1], 100, lora=B).data == b"b"
    assert store.best_prefix(PROMPT + [1], 100, lora=A)[0].data == b"a"
    assert store.best(PROMPT + [1], 100) is None and store.best_prefix(PROMPT, 100) is None


# -- the scheduler ---------------------------------------------------------------------------------

def _steps(rt, core, n):
    plans = []
    for _ in range(n):
        plan = core.plan()
        if plan.empty:
            break
        plans.append(plan)
        core.update(plan, execute(rt, plan))
    return plans


def test_a_step_decodes_one_set_and_the_steps_go_round_the_sets() -> None:
    rt, core = make(n_seq_max=4, lora=ADAPTERS, scheduler_steps=1)
    core.add(req(1, [11] * 4, max_tokens=6, lora=A))
    core.add(req(2, [12] * 4, max_tokens=6))
    core.add(req(3, [13] * 4, max_tokens=6, lora=A))
    core.add(req(4, [14] * 4, max_tokens=6, lora=B))
    plans = _steps(rt, core, 9)
    by_slot = {1: A, 2: (), 3: A, 4: B}  # rid -> set; the fake asserts the KV side on every decode
    for plan in plans:
        rids = {kv.rid for kv, _ in plan.batch.advance}
        assert {by_slot[r] for r in rids} == {plan.lora}
    assert [p.lora for p in plans[:6]] == [A, (), B, A, (), B]  # admission order first, then round the sets
    assert rt.lora_sets[:3] == [A, (), B]
    out = run(rt, core)
    assert all(finish_of(out, r).reason == "length" for r in (1, 2, 3, 4))
    assert [len(tokens_of(out, r)) for r in (1, 2, 3, 4)] == [6 - sum(1 for p in plans if r in
                                                                      {kv.rid for kv, _ in p.batch.outputs})
                                                                  for r in (1, 2, 3, 4)]


def test_one_set_alone_runs_multi_step_and_is_applied_once() -> None:
    rt, core = make(n_seq_max=2, lora=ADAPTERS, scheduler_steps=4)
    core.add(req(1, [11] * 4, max_tokens=12, lora=A))
    core.add(req(2, [12] * 4, max_tokens=12, lora=A))
    out = run(rt, core)
    assert set(rt.lora_sets) == {A} and len(tokens_of(out, 1)) == len(tokens_of(out, 2)) == 12


def test_a_cached_prompt_is_reused_only_under_its_own_set() -> None:
    rt, core = make(n_seq_max=3, lora=ADAPTERS)
    cached = {}
    for rid, lora in ((1, A), (2, B), (3, ()), (4, A), (5, B), (6, ())):  # the same prompt, a new last token
        core.add(req(rid, PROMPT + [rid], max_tokens=2, lora=lora))
        cached[rid] = finish_of(run(rt, core), rid).cached_tokens
    assert cached == {1: 0, 2: 0, 3: 0, 4: len(PROMPT), 5: len(PROMPT), 6: len(PROMPT)}


def test_a_running_prefill_of_another_set_is_not_waited_for_nor_copied() -> None:
    rt, core = make(n_seq_max=3, lora=ADAPTERS, step_tokens=16)
    core.add(req(1, PROMPT, max_tokens=2, lora=A))
    _steps(rt, core, 1)
    core.add(req(2, PROMPT + [5], max_tokens=2, lora=B))
    core.add(req(3, PROMPT + [6], max_tokens=2, lora=A))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 0 and finish_of(out, 3).cached_tokens > 0
    assert all(len(c) == 2 for c in rt.copies)  # whole-stream copies only, and none from set A to B


def test_the_prompt_cache_restores_only_states_of_the_prompts_set() -> None:
    rt, core = make(n_seq_max=1, lora=ADAPTERS, prompt_cache=None)
    core.add(req(1, PROMPT, max_tokens=2, lora=A))
    run(rt, core)
    core.add(req(2, [60] * 40, max_tokens=2))  # evicts rid 1's entry into the host prompt cache
    run(rt, core)
    assert rt.saved
    core.add(req(3, PROMPT + [1], max_tokens=2, lora=B))
    out = run(rt, core)
    assert finish_of(out, 3).cached_tokens == 0 and not rt.restored
    core.add(req(4, PROMPT + [2], max_tokens=2, lora=A))
    out = run(rt, core)
    assert finish_of(out, 4).cached_tokens > 0 and rt.restored


def test_context_checkpoints_are_restored_only_under_their_set() -> None:
    rt, core = make(n_seq_max=1, recurrent=True, lora=ADAPTERS, ctx_checkpoints=4, checkpoint_budget=None)
    history = PROMPT
    core.add(req(1, history + [1, 2, 3], max_tokens=2, lora=A, checkpoint_at=len(history)))
    run(rt, core)
    assert len(core.checkpoints) == 1
    core.add(req(2, history + [4, 5, 6], max_tokens=2, lora=B, checkpoint_at=len(history)))
    out = run(rt, core)
    assert finish_of(out, 2).cached_tokens == 0
    core.add(req(3, history + [7, 8, 9], max_tokens=2, lora=A, checkpoint_at=len(history)))
    out = run(rt, core)
    assert finish_of(out, 3).cached_tokens == len(history)
