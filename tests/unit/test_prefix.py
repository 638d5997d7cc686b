"""Prefix-cache index (sans-IO)."""

from skippy.engine.scheduling.prefix import (
    EXACT_TAIL,
    MIN_REUSE,
    MIN_TAIL,
    Match,
    PrefixIndex,
    common_prefix_len,
    common_prefix_packed,
    longest_prefix_among,
    pack,
)


def test_common_prefix_len() -> None:
    a = list(range(200))
    assert common_prefix_len(a, a) == 200
    assert common_prefix_len(a, a[:70] + [-1] + a[71:]) == 70
    assert common_prefix_len(a, []) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


def test_best_prefers_longest_and_keeps_the_tail_for_prefill() -> None:
    for tail in (MIN_TAIL, EXACT_TAIL):
        idx = PrefixIndex(tail)
        base = list(range(100))
        idx.keep(0, base[:40])
        idx.keep(1, base[:90] + [7, 7])
        assert idx.best(base) == Match(1, 90, True)
        # the whole prompt is cached: its last token (two for an exact answer) is still prefilled
        assert idx.best(base[:90]) == Match(1, 90 - tail, True)
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


def test_a_tie_takes_the_entry_no_waiting_request_claims() -> None:
    """Three entries share a 20-token system prompt; the one holding another waiting request's whole prompt
    is passed over for a request that shares only the system prompt, and evicted last."""
    system = list(range(20))
    idx = PrefixIndex()
    idx.keep(0, system + [100, 101, 102])  # a waiting request's whole prompt: claimed
    idx.keep(1, system + [200, 201, 202])
    idx.keep(2, system + [300, 301, 302])
    claims = {0: 23, 1: 20, 2: 20}
    prompt = system + [400, 401, 402]
    assert idx.best(prompt) == Match(0, 20, True)  # without claims: the first of the tie
    assert idx.best(prompt, claim=claims.__getitem__) == Match(1, 20, True)
    # a longer match still wins over a less claimed one
    assert idx.best(system + [100, 101, 102, 5, 6], claim=claims.__getitem__) == Match(0, 23, True)
    assert idx.lru() == 0
    assert idx.lru(claim=claims.__getitem__) == 1  # least claimed, then least recently used
    idx.touch(1)
    assert idx.lru(claim=claims.__getitem__) == 2


def test_longest_prefix_among_sorted_prompts_equals_the_scan_over_all() -> None:
    """The bisection's answer is the longest prefix shared with any of the prompts, found by scanning them all."""
    import random

    rng = random.Random(7)
    for _ in range(300):
        system = [rng.randrange(5) for _ in range(rng.randrange(0, 40))]
        prompts = sorted(system[:rng.randrange(len(system) + 1)] + [rng.randrange(5) for _ in range(rng.randrange(6))]
                         for _ in range(rng.randrange(0, 12)))
        tokens = system[:rng.randrange(len(system) + 1)] + [rng.randrange(5) for _ in range(rng.randrange(6))]
        want = max((common_prefix_len(tokens, p) for p in prompts), default=0)
        assert longest_prefix_among(tokens, prompts) == want


def test_packed_prefixes_equal_the_list_scan() -> None:
    """:func:`common_prefix_packed` on packed token lists gives :func:`common_prefix_len`'s answer, token ids of any
    size included (a difference in any byte of a token ends the prefix at that token)."""
    import random

    rng = random.Random(3)
    for _ in range(500):
        n = rng.randrange(0, 300)
        a = [rng.randrange(1 << 31) for _ in range(n)]
        b = list(a[:rng.randrange(n + 1)])
        if rng.random() < 0.7:
            b += [rng.choice((a[len(b)] ^ (1 << rng.randrange(31)), rng.randrange(1 << 31))) if len(b) < n
                  else rng.randrange(1 << 31)]
        b += [rng.randrange(5) for _ in range(rng.randrange(4))]
        assert common_prefix_packed(pack(a), pack(b)) == common_prefix_len(a, b)
        assert common_prefix_packed(pack(b), pack(a)) == common_prefix_len(a, b)


def test_best_with_packed_running_sequences_matches_lists() -> None:
    idx = PrefixIndex()
    base = list(range(1000, 1100))
    idx.keep(0, base[:40])
    idx.keep(1, base[:90] + [7, 7])
    running = [(5, base, 95), (6, base[:60] + [3] * 50, 110)]
    for prompt in (base, base[:90], base[:60] + [3] * 30, [9] * 20):
        want = idx.best(prompt, running)
        assert idx.best(prompt, [(s, pack(t), n) for s, t, n in running]) == want
    assert idx.best(base, running) == Match(5, 95, False)
