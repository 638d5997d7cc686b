"""The model pool's policy (skippy.engine.residency): LRU unload past --max-loaded, --keep-alive, draining."""

from __future__ import annotations

import math

import pytest

from skippy.engine.residency import FAILED, LOADED, LOADING, UNLOADED, Residency


def _load(res: Residency, name: str, now: float) -> None:
    """A request loads ``name`` and ends at ``now`` (reserve, load, release)."""
    assert res.reserve(name, now)
    res.begin_load(name)
    assert res.room(name) == (True, None)
    res.loaded(name, now)
    res.release(name, now)


def test_without_a_bound_every_model_may_load() -> None:
    res = Residency(["a", "b", "c"])
    for i, name in enumerate("abc"):
        _load(res, name, float(i))
    assert [res[n].state for n in "abc"] == [LOADED] * 3


def test_past_max_loaded_the_least_recently_used_is_unloaded_first() -> None:
    res = Residency(["a", "b", "c"], max_loaded=2)
    _load(res, "a", 1.0)
    _load(res, "b", 2.0)
    assert res.reserve("a", 3.0)  # a is used again: b is now the least recently used
    res.release("a", 3.5)
    assert res.reserve("c", 4.0)
    res.begin_load("c")
    assert res.room("c") == (False, "b")
    res.drain("b")
    assert res.may_close("b") and res.room("c") == (False, None)  # b still holds its memory until it closes
    res.unloaded("b")
    assert res.room("c") == (True, None)


def test_an_idle_model_is_unloaded_before_one_with_requests() -> None:
    res = Residency(["a", "b", "c"], max_loaded=2)
    _load(res, "a", 1.0)
    _load(res, "b", 2.0)
    assert res.reserve("a", 3.0)  # a stream of a runs: a is in use, b is idle (and more recent than a's start)
    res["a"].last_used = 0.5
    assert res.reserve("c", 4.0)
    res.begin_load("c")
    assert res.room("c") == (False, "b")


def test_could_load_says_whether_a_load_waits_only_for_running_requests() -> None:
    """A consultation of an unloaded model by a loaded one (``--max-loaded 1``): the load would wait for the
    asking model's request to end, which waits for the consultation, so the peer answers busy at once."""
    res = Residency(["a", "b", "c"], max_loaded=2)
    assert res.could_load("a")  # room
    _load(res, "a", 1.0)
    assert res.could_load("a") and res.could_load("b")  # resident; room for one more
    _load(res, "b", 2.0)
    assert res.could_load("c")  # a and b idle: one is unloaded for it
    assert res.reserve("a", 3.0) and res.reserve("b", 3.0)
    assert not res.could_load("c") and res.could_load("a")  # both in use: only their ends make room
    assert Residency(["a", "b"]).could_load("b")  # no bound


def test_a_model_in_use_is_drained_after_its_requests() -> None:
    res = Residency(["a", "b"], max_loaded=1)
    _load(res, "a", 1.0)
    assert res.reserve("a", 2.0)  # a request of a runs
    assert res.reserve("b", 3.0)
    res.begin_load("b")
    assert res.room("b") == (False, "a")  # the only candidate, though in use
    res.drain("a")
    assert not res.may_close("a")  # its request is still running
    assert not res.reserve("a", 3.5)  # a new request of a waits for the unload (then loads a again)
    res.release("a", 4.0)
    assert res.may_close("a")
    res.unloaded("a")
    assert res["a"].state == UNLOADED and not res["a"].draining
    assert res.room("b") == (True, None)
    assert res.reserve("a", 5.0)  # after the unload, a request may reserve a again


def test_two_loads_waiting_for_room_do_not_unload_each_other() -> None:
    res = Residency(["a", "b", "c"], max_loaded=1)
    _load(res, "a", 1.0)
    for name in "bc":
        assert res.reserve(name, 2.0)
        res.begin_load(name)
    assert res.room("b") == (False, "a")  # b asked first: a goes for it
    res.drain("a")
    assert res.room("c") == (False, None)  # a's close makes room for b, not for c: nothing more unloads
    res.unloaded("a")
    assert res.room("c") == (False, None) and res.room("b") == (True, None)  # first come, first admitted
    assert res.room("c") == (False, None)  # b reads its weights: no victim while it loads
    res.loaded("b", 3.0)
    assert res.room("c") == (False, "b")  # b's waiting request holds it: it drains after serving it
    res.drain("b")
    assert not res.may_close("b")
    res.release("b", 4.0)
    assert res.may_close("b")
    res.unloaded("b")
    assert res.room("c") == (True, None)


def test_more_loads_waiting_than_room_are_admitted_one_after_another() -> None:
    """--max-loaded 1, four models asked for at once while one is loaded (a burst over several models): each
    gets its turn in the order it asked; none waits forever (every waiting model used to count as holding
    memory, so once the loaded one had gone nothing was left to unload and nothing was admitted)."""
    res = Residency(["a", "b", "c", "d"], max_loaded=1)
    _load(res, "a", 0.0)
    for name in "bcd":
        assert res.reserve(name, 1.0)
        res.begin_load(name)
    order = []
    for step in range(20):
        for name in "abcd":
            m = res[name]
            if m.state == LOADING:
                ok, victim = res.room(name)
                if victim is not None:
                    res.drain(victim)
                if ok:  # it loads, serves its waiting request and is then idle
                    res.loaded(name, float(step))
                    res.release(name, float(step))
                    order.append(name)
            elif m.state == LOADED and res.may_close(name):
                res.unloaded(name)
        assert sum(res[n].holds_memory for n in "abcd") <= 1
    assert order == ["b", "c", "d"]


def test_keep_alive_unloads_idle_models_and_says_when_next() -> None:
    res = Residency(["a", "b"], keep_alive=10.0)
    _load(res, "a", 0.0)
    _load(res, "b", 5.0)
    assert res.next_expiry() == 10.0
    assert res.expired(9.9) == []
    assert res.expired(10.0) == ["a"]
    assert res.expired(20.0) == ["a", "b"]  # oldest first
    assert res.reserve("b", 12.0)  # a running request keeps b loaded however long it takes
    assert res.expired(100.0) == ["a"] and res.next_expiry() == 10.0
    res.release("b", 100.0)
    assert res.next_expiry() == 10.0 and res.expired(105.0) == ["a"]
    res.drain("a")
    assert res.next_expiry() == 110.0  # a drains: only b's idle time counts


def test_keep_alive_zero_unloads_when_the_last_request_ends_and_negative_never() -> None:
    res = Residency(["a"], keep_alive=0.0)
    _load(res, "a", 3.0)
    assert res.expired(3.0) == ["a"]
    never = Residency(["a"], keep_alive=-1.0)
    _load(never, "a", 3.0)
    assert never.expired(math.inf) == [] and never.next_expiry() is None


def test_a_request_keep_alive_is_that_models_own_until_changed() -> None:
    """Ollama's per-request keep_alive: the model a request named keeps its own idle time (0 unloads it once
    idle, negative never), the others keep the set's; None goes back to the set's."""
    res = Residency(["a", "b"], keep_alive=-1.0)
    _load(res, "a", 0.0)
    _load(res, "b", 0.0)
    res.set_keep_alive("a", 0.0)
    assert res.expired(0.0) == ["a"] and res.next_expiry() == 0.0
    res.set_keep_alive("a", 30.0)
    assert res.expired(29.0) == [] and res.expired(30.0) == ["a"] and res.keep_alive_of("b") == -1.0
    res.set_keep_alive("a", None)
    assert res.expired(1e9) == [] and res.next_expiry() is None
    forever = Residency(["a"], keep_alive=5.0)
    _load(forever, "a", 0.0)
    forever.set_keep_alive("a", -1.0)
    assert forever.expired(1e9) == [] and forever.next_expiry() is None


def test_a_failed_load_refuses_new_requests_with_its_error() -> None:
    res = Residency(["a", "bad"])
    assert res.reserve("bad", 0.0)
    res.begin_load("bad")
    assert res["bad"].state == LOADING
    res.failed("bad", "not a GGUF file")
    res.release("bad", 0.1)
    assert res["bad"].state == FAILED and res["bad"].error == "not a GGUF file"
    assert not res.reserve("bad", 1.0)
    assert res["bad"].users == 0 and not res["bad"].holds_memory  # it holds no memory, counts for no bound


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError):
        Residency([])
    with pytest.raises(ValueError):
        Residency(["a", "a"])
    with pytest.raises(ValueError):
        Residency(["a"], max_loaded=-1)
    res = Residency(["a"])
    with pytest.raises(ValueError):
        res.release("a", 0.0)
    res.begin_load("a")
    with pytest.raises(ValueError):
        res.begin_load("a")


def test_a_model_unloaded_while_it_loads_closes_once_loaded_and_its_waiting_requests_are_served() -> None:
    res = Residency(["a", "b"])
    assert res.reserve("a", 1.0)  # a request waits for a's load
    res.begin_load("a")
    res.drain("a")  # POST /models/unload while it loads
    assert not res.reserve("a", 1.5)  # a later request waits for the unload, then loads a again
    res.loaded("a", 2.0)
    assert not res.may_close("a")  # the waiting request is served first
    res.release("a", 3.0)
    assert res.may_close("a")
    res.unloaded("a")
    assert res["a"].state == UNLOADED and res.reserve("a", 4.0)
    res.drain("b")  # neither loaded nor loading: nothing to do
    assert not res["b"].draining


def test_a_swap_no_request_waits_for_any_more_does_not_happen() -> None:
    """--max-loaded 1: a request for b waits while a serves a stream (a drains for b); its client goes away
    before a has closed. b does not load and a stays loaded, serving again (it used to unload a and load b for
    nobody)."""
    res = Residency(["a", "b"], max_loaded=1)
    _load(res, "a", 1.0)
    assert res.reserve("a", 2.0)  # a stream of a runs
    assert res.reserve("b", 3.0)
    res.begin_load("b")
    assert res.room("b") == (False, "a")
    res.drain("a", for_="b")
    assert not res.reserve("a", 3.5)  # a new request of a waits for the unload
    assert res.release("b", 4.0) == ["a"]  # b's only waiting request is cancelled: a's drain is called off
    assert not res["a"].draining and res["a"].state == LOADED and res.reserve("a", 4.5)  # a serves again
    assert res.may_close("b") and res.room("b") == (False, None)  # b does not load
    res.unloaded("b")
    assert res["b"].state == UNLOADED and not res.may_close("a")
    assert res.reserve("b", 5.0)  # a later request of b loads it: a drains for it again
    res.begin_load("b")
    assert res.room("b") == (False, "a")


def test_a_swap_goes_on_while_a_request_waits_and_other_unloads_stand() -> None:
    res = Residency(["a", "b", "c"], max_loaded=1)
    _load(res, "a", 1.0)
    assert res.reserve("a", 2.0)
    assert res.reserve("b", 3.0) and res.reserve("b", 3.0)  # two requests wait for b
    res.begin_load("b")
    assert res.room("b") == (False, "a")
    res.drain("a", for_="b")
    assert res.release("b", 4.0) == [] and res["a"].draining and not res.may_close("b")  # one still waits
    res.drain("a")  # and an unload of a is asked for (POST /models/unload): it stands whatever b does
    assert res.release("b", 4.5) == [] and res["a"].draining and res.may_close("b")
    res.unloaded("b")
    res.release("a", 5.0)
    res.unloaded("a")
    # a victim whose requests have all ended may be closing already: its unload stands too
    _load(res, "a", 6.0)
    assert res.reserve("c", 7.0)
    res.begin_load("c")
    assert res.room("c") == (False, "a")
    res.drain("a", for_="c")
    assert res.may_close("a")  # idle: it closes now
    assert res.release("c", 7.5) == [] and res["a"].draining
    # a model admitted (reading its weights) loads whatever happens to its requests: llama.cpp cannot stop
    res.unloaded("a")
    assert res.reserve("b", 8.0)
    res.begin_load("b")
    assert res.room("b") == (True, None)
    assert res.release("b", 8.5) == [] and not res["b"].draining
