"""Prefix-cache index (sans-IO)."""

from skippy.engine.scheduling.prefix import MIN_REUSE, Match, PrefixIndex, common_prefix_len


def test_common_prefix_len() -> None:
    a = list(range(200))
    assert common_prefix_len(a, a) == 200
    assert common_prefix_len(a, a[:70] + [-1] + a[71:]) == 70
    assert common_prefix_len(a, []) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


def test_best_prefers_longest_and_keeps_the_last_two_tokens_for_prefill() -> None:
    idx = PrefixIndex()
    base = list(range(100))
    idx.keep(0, base[:40])
    idx.keep(1, base[:90] + [7, 7])
    assert idx.best(base) == Match(1, 90, True)
    # the whole prompt is cached: its last two tokens are still prefilled (MIN_TAIL)
    assert idx.best(base[:90]) == Match(1, 88, True)
    # a running sequence with a longer shared prefix wins
    assert idx.best(base, running=[(5, base, 95)]) == Match(5, 95, False)


def test_short_prefixes_are_not_reused() -> None:
    idx = PrefixIndex()
    idx.keep(0, list(range(MIN_REUSE - 1)))
    assert idx.best(list(range(100))) is None


def test_lru_order_and_cells() -> None:
    idx = PrefixIndex()
    idx.keep(0, [1] * 20)
    idx.keep(1, [2] * 30)
    assert idx.lru() == 0 and idx.cells == 50 and len(idx) == 2
    idx.touch(0)
    assert idx.lru() == 1
    assert idx.take(1) == [2] * 30
    assert idx.lru() == 0 and idx.cells == 20


def test_eviction_prefers_the_same_prompt_cache_key() -> None:
    idx = PrefixIndex()
    idx.keep(0, [1] * 20, key="a")
    idx.keep(1, [2] * 20, key="b")
    idx.keep(2, [3] * 20, key="b")
    assert idx.lru() == 0
    assert idx.lru("b") == 1
    assert idx.lru("zzz") == 0
