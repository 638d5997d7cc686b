"""The vectorized sampler chain (skippy.engine.sampling.vector) against exact targets and llama.cpp's chain.

Logits are synthetic but shaped like a language model's (a few strong candidates over a
long Gaussian tail, 49152 tokens); llama.cpp's chain is driven on the same arrays with
``llama_sampler_apply`` (no model needed).
"""

import ctypes
import math

import numpy as np
import pytest

from skippy.engine.sampling.params import SamplingParams
from skippy.engine.sampling.vector import SeqSampler, chain_probs, mt19937_state, sample_rows, vectorizable

V = 49152


def lm_logits(rng: np.random.Generator, m: int, v: int = V) -> np.ndarray:
    x = rng.standard_normal((m, v)).astype(np.float32) * 3.0
    for i in range(m):
        top = rng.choice(v, 8, replace=False)
        x[i, top] = 12.0 + rng.standard_normal(8).astype(np.float32) * 2.5
    return x


def sampler(**kw) -> SeqSampler:
    return SeqSampler(SamplingParams(**kw))


# --- llama.cpp's chain on a given logits row ------------------------------------------------

def llama_chain(p: SamplingParams, n_vocab: int):
    llama_cpp = pytest.importorskip("llama_cpp")
    llama_cpp.llama_backend_init()
    sp = llama_cpp.llama_sampler_chain_default_params()
    chain = llama_cpp.llama_sampler_chain_init(sp)

    def add(s):
        llama_cpp.llama_sampler_chain_add(chain, s)

    if p.logit_bias:
        arr = (llama_cpp.llama_logit_bias * len(p.logit_bias))()
        for i, (t, b) in enumerate(p.logit_bias):
            arr[i].token, arr[i].bias = t, b
        add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(p.logit_bias), arr))
    if p.repeat_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
        add(llama_cpp.llama_sampler_init_penalties(n_vocab, p.penalty_last_n, p.repeat_penalty,
                                                   p.frequency_penalty, p.presence_penalty))
    if p.greedy:
        add(llama_cpp.llama_sampler_init_greedy())
    else:
        if p.top_k > 0:
            add(llama_cpp.llama_sampler_init_top_k(p.top_k))
        add(llama_cpp.llama_sampler_init_top_p(p.top_p, 1))
        add(llama_cpp.llama_sampler_init_min_p(p.min_p, 1))
        add(llama_cpp.llama_sampler_init_temp(p.temperature))
        add(llama_cpp.llama_sampler_init_dist(p.seed))
    return chain


def llama_sample(chain, row: np.ndarray) -> int:
    import llama_cpp

    v = row.shape[0]
    cand = np.zeros(v, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
    cand["id"] = np.arange(v)
    cand["logit"] = row
    cur = llama_cpp.llama_token_data_array(data=cand.ctypes.data_as(llama_cpp.llama_token_data_p), size=v,
                                           selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
    tok = int(cand["id"][cur.selected])
    llama_cpp.llama_sampler_accept(chain, tok)
    return tok


CHAINS = [
    {},  # llama-server's defaults: top_k 40, top_p 0.95, min_p 0.05, temperature 0.8
    {"temperature": 0.0},
    {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.05},  # unsorted: dist in token-id order
    {"temperature": 1.0, "top_k": 0, "top_p": 0.9, "min_p": 0.0},
    {"temperature": 1.0, "top_k": 0, "top_p": 0.9, "min_p": 0.1},
    {"temperature": 2.0, "top_k": 100, "top_p": 1.0, "min_p": 0.0},
    {"temperature": 0.7, "repeat_penalty": 1.3, "frequency_penalty": 0.5, "presence_penalty": 0.3, "penalty_last_n": 8},
    {"temperature": 1.0, "logit_bias": ((5, 8.0), (100, -3.0))},
    {"temperature": 0.0, "repeat_penalty": 1.5, "penalty_last_n": 4},
    {"temperature": 1.0, "top_k": 1},
    {"temperature": 1.0, "top_k": 3, "top_p": 1.0, "min_p": 0.0},
    {"temperature": 1.0, "top_k": 0, "top_p": 0.0, "min_p": 0.0},  # OpenAI's and llama-server's lowest top_p
]


@pytest.mark.parametrize("kw", CHAINS, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "defaults" for c in CHAINS])
def test_same_tokens_as_llama_cpp_chain(kw):
    """Same parameters, same seed, same logits: the same token at every step (the random stream is
    llama.cpp's std::mt19937, the chain its samplers), penalties and all, over 30 steps of 4 seeds."""
    rng = np.random.default_rng(1)
    x = lm_logits(rng, 16)
    for seed in range(4):
        p = SamplingParams(seed=seed, **kw)
        ours, chain = SeqSampler(p), llama_chain(p, V)
        try:
            for step in range(30):
                row = x[(seed + step) % 16]
                assert sample_rows(row[None, :], [ours])[0] == llama_sample(chain, row), (seed, step)
        finally:
            import llama_cpp

            llama_cpp.llama_sampler_free(chain)


@pytest.mark.parametrize("kw", CHAINS, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "defaults" for c in CHAINS])
def test_chain_probs_are_the_distribution_llama_cpp_draws_from(kw):
    """llama-server's post_sampling_probs: the candidates llama.cpp's chain keeps after ``dist`` (its ``p``,
    by probability descending) are :func:`chain_probs`' ids and probabilities (greedy: the token at 1), step
    after step with penalties; it draws nothing from the random stream, so the tokens stay llama.cpp's."""
    import llama_cpp

    rng = np.random.default_rng(2)
    x = lm_logits(rng, 8)
    p = SamplingParams(seed=5, **kw)
    ours, chain = SeqSampler(p), llama_chain(p, V)
    try:
        for step in range(6):
            row = x[step % 8]
            ids, probs = chain_probs(row, ours)
            cand = np.zeros(V, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
            cand["id"], cand["logit"] = np.arange(V), row
            cur = llama_cpp.llama_token_data_array(data=cand.ctypes.data_as(llama_cpp.llama_token_data_p), size=V,
                                                   selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
            tok = int(cand["id"][cur.selected])
            llama_cpp.llama_sampler_accept(chain, tok)
            if p.greedy:
                assert ids.tolist() == [tok] and probs.tolist() == [1.0]
            else:
                kept = cand[:cur.size][np.argsort(-cand["p"][:cur.size], kind="stable")]
                kept = kept[kept["p"] > 0]
                assert sorted(ids.tolist()) == sorted(kept["id"].tolist()), step
                theirs = dict(zip(kept["id"].tolist(), kept["p"].tolist(), strict=True))
                assert max(abs(q - theirs[t]) for t, q in zip(ids.tolist(), probs.tolist(), strict=True)) < 1e-5
                assert np.all(np.diff(probs) <= 0) and abs(probs.sum() - 1.0) < 1e-9
            assert sample_rows(row[None, :], [ours])[0] == tok, step
    finally:
        llama_cpp.llama_sampler_free(chain)


@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0])
def test_nucleus_over_the_whole_vocabulary_matches_llama_cpp_on_flat_rows(scale):
    """top_k 0 with top_p < 1: the sorted head that top_p reaches may be thousands of tokens long on a
    flat row (Gaussian logits; the smaller ``scale``, the flatter); the same tokens as llama.cpp's chain,
    with and without min_p, several rows at once."""
    rng = np.random.default_rng(int(scale * 10))
    x = (rng.standard_normal((4, V)) * scale).astype(np.float32)
    for kw in ({"top_p": 0.5, "min_p": 0.0}, {"top_p": 0.95, "min_p": 0.0}, {"top_p": 0.999, "min_p": 0.0},
               {"top_p": 0.9, "min_p": 0.3}):
        params = [SamplingParams(seed=seed, temperature=1.0, top_k=0, **kw) for seed in range(4)]
        ours = [SeqSampler(p) for p in params]
        chains = [llama_chain(p, V) for p in params]
        try:
            for step in range(6):
                rows = np.roll(x, step, axis=0)
                want = [llama_sample(c, rows[i]) for i, c in enumerate(chains)]
                assert sample_rows(rows, ours) == want, (kw, step)
        finally:
            import llama_cpp

            for c in chains:
                llama_cpp.llama_sampler_free(c)


@pytest.mark.parametrize("kw", [{"ignore_eos": True}, {"ignore_eos": True, "temperature": 0.0},
                                {"min_tokens": 12, "stop_token_ids": frozenset({77})},
                                {"min_tokens": 5, "temperature": 0.0, "repeat_penalty": 1.2, "penalty_last_n": 8}],
                         ids=["ignore_eos", "ignore_eos-greedy", "min_tokens", "min_tokens-greedy-penalty"])
def test_end_of_generation_suppression_matches_the_runtime_mask_before_llama_cpp_chain(kw):
    """``ignore_eos`` / ``min_tokens`` in the vectorized chain: the same tokens as LlamaRuntime's path
    (end-of-generation ids set to -inf, then llama.cpp's chain) on rows where those ids are the best,
    and after ``min_tokens`` tokens the end-of-generation ids come back."""
    eog = {3, 9}
    rng = np.random.default_rng(11)
    x = lm_logits(rng, 16)
    x[:, 3] = x.max(axis=1) + 4.0  # an end-of-generation token would win every row
    x[::2, 77] = x[::2, 3] + 1.0  # and a stop token id even more on half of them
    for seed in range(3):
        p = SamplingParams(seed=seed, **kw)
        ours, chain = SeqSampler(p, eog), llama_chain(p, V)
        suppress = sorted(eog | (p.stop_token_ids if not p.ignore_eos else set()))
        try:
            for step in range(20):
                row = x[(seed + step) % 16]
                masked = row.copy()
                if p.ignore_eos or step < p.min_tokens:
                    masked[suppress] = -np.inf
                got = sample_rows(row[None, :], [ours])[0]
                assert got == llama_sample(chain, masked), (seed, step)
                if p.ignore_eos or step < p.min_tokens:
                    assert got not in suppress
                elif p.temperature == 0.0 and p.repeat_penalty == 1.0:
                    assert got in (3, 77)
        finally:
            import llama_cpp

            llama_cpp.llama_sampler_free(chain)
    assert vectorizable(SamplingParams(ignore_eos=True)) and vectorizable(SamplingParams(min_tokens=3))


def test_suppression_keeps_a_row_that_it_would_leave_without_a_finite_logit():
    x = np.full((2, 6), -np.inf, dtype=np.float32)
    x[0, [1, 4]] = [2.0, 1.0]  # only end-of-generation tokens are finite: the row stays as it was
    x[1, [1, 5]] = [2.0, 1.0]
    s = [SeqSampler(SamplingParams(temperature=0.0, ignore_eos=True), {1, 4}) for _ in range(2)]
    assert sample_rows(x, s) == [1, 5]
    assert x[0, 1] == 2.0  # the caller's logits are not modified


def test_modified_logits_are_put_back_bit_for_bit_and_read_only_rows_are_copied():
    """Suppression, bias and penalties change the caller's (writable) rows only while sampling: the
    same bytes afterwards (NaN included); a read-only array gives the same tokens."""
    rng = np.random.default_rng(12)
    x = lm_logits(rng, 4)
    x[1, 50] = np.nan
    kws = [{"ignore_eos": True}, {"logit_bias": ((3, 5.0), (8, -2.0))},
           {"repeat_penalty": 1.5, "penalty_last_n": 4, "temperature": 0.0},
           {"min_tokens": 2, "logit_bias": ((3, 1.0),)}]
    a = [SeqSampler(SamplingParams(seed=1, **kw), {3, 8}) for kw in kws]
    b = [SeqSampler(SamplingParams(seed=1, **kw), {3, 8}) for kw in kws]
    frozen = x.copy()
    frozen.flags.writeable = False
    for _ in range(4):
        before = x.tobytes()
        assert sample_rows(x, a) == sample_rows(frozen, b)
        assert x.tobytes() == before


def test_rows_are_independent_of_their_neighbours():
    """A step's rows sampled together give what each gives alone (mixed greedy, sampled, biased rows)."""
    rng = np.random.default_rng(2)
    x = lm_logits(rng, 6)
    kws = [{}, {"temperature": 0.0}, {"top_k": 0, "top_p": 1.0}, {"logit_bias": ((7, 50.0),)}, {"top_k": 5},
           {"temperature": 0.0, "repeat_penalty": 2.0}]
    together = [sampler(seed=9, **kw) for kw in kws]
    alone = [sampler(seed=9, **kw) for kw in kws]
    for _ in range(5):
        a = sample_rows(x, together)
        b = [sample_rows(x[i:i + 1], [alone[i]])[0] for i in range(len(kws))]
        assert a == b
    assert a[3] == 7  # +50 bias wins


def test_greedy_is_argmax_lowest_id_on_ties():
    x = np.zeros((3, 10), dtype=np.float32)
    x[0, [4, 2, 7]] = 5.0
    x[1, 9] = 1.0
    x[2, :] = -1.0
    s = [sampler(temperature=0.0) for _ in range(3)]
    assert sample_rows(x, s) == [2, 9, 0]
    assert (x[2] == -1.0).all() and x[0, 4] == 5.0  # input untouched


def test_temperature_zero_ignores_top_k_p_and_draws_nothing():
    x = lm_logits(np.random.default_rng(3), 4)
    s = [sampler(temperature=0.0, top_k=1 + i, top_p=0.1, min_p=0.9, seed=i) for i in range(4)]
    assert sample_rows(x, s) == x.argmax(axis=1).tolist()
    assert all(t.bitgen is None for t in s)


def exact_distribution(row: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The chain's target distribution, computed independently in float64 from its definition."""
    x = row.astype(np.float64)
    order = np.argsort(-x, kind="stable")
    keep = np.zeros(len(x), dtype=bool)
    n = len(x) if p.top_k <= 0 else min(p.top_k, len(x))
    top = order[:n]
    if p.top_p < 1.0:
        q = np.exp(x[top] - x[top[0]])
        q /= q.sum()
        n = int(np.searchsorted(np.cumsum(q), p.top_p) + 1)
        top = top[:n]
    if p.min_p > 0:
        top = top[x[top] >= x[top[0]] + math.log(p.min_p)]
    keep[top] = True
    w = np.where(keep, np.exp((x - x[top[0]]) / p.temperature), 0.0)
    return w / w.sum()


@pytest.mark.parametrize("kw", [{}, {"top_k": 0, "top_p": 0.8, "min_p": 0.0, "temperature": 1.3},
                                {"top_k": 6, "top_p": 1.0, "min_p": 0.0, "temperature": 2.0},
                                {"top_k": 0, "top_p": 1.0, "min_p": 0.02, "temperature": 0.9}])
def test_empirical_distribution_matches_the_exact_target(kw):
    """20000 draws from one row: chi-square against the exact target (fixed seed, so deterministic)."""
    v = 2000
    rng = np.random.default_rng(4)
    row = (rng.standard_normal(v) * 1.5).astype(np.float32)
    row[:10] = np.linspace(4.0, 2.0, 10, dtype=np.float32)
    p = SamplingParams(seed=123, **kw)
    target = exact_distribution(row, p)
    s = SeqSampler(p)
    n = 20000
    x = np.repeat(row[None, :], 100, axis=0)
    counts = np.zeros(v)
    states = [SeqSampler(SamplingParams(seed=1000 + i, **kw)) for i in range(100)]
    for _ in range(n // 100):
        np.add.at(counts, sample_rows(x, states), 1)
    assert counts[target == 0].sum() == 0  # nothing outside the kept set
    support = target > 0
    # merge rare cells so every expected count is >= 5
    exp = target[support] * n
    obs = counts[support]
    order = np.argsort(exp)
    e_sorted, o_sorted = exp[order], obs[order]
    small = np.cumsum(e_sorted) < 5 * 10
    chi = ((o_sorted[~small] - e_sorted[~small]) ** 2 / e_sorted[~small]).sum()
    rest_e, rest_o = e_sorted[small].sum(), o_sorted[small].sum()
    if rest_e > 0:
        chi += (rest_o - rest_e) ** 2 / rest_e
    dof = int((~small).sum()) + (1 if rest_e > 0 else 0) - 1
    assert dof >= 1
    # 99.9th percentile of chi-square(dof) by the Wilson-Hilferty approximation
    z = 3.09
    crit = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    assert chi < crit, (chi, crit, dof)
    del s


def test_top_p_one_min_p_zero_top_k_zero_keep_everything():
    """No truncation at all: every token can come out (tiny vocabulary, many draws)."""
    x = np.log(np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32))
    s = sampler(top_k=0, top_p=1.0, min_p=0.0, temperature=1.0, seed=5)
    seen = {sample_rows(x, [s])[0] for _ in range(400)}
    assert seen == {0, 1, 2, 3}


def test_top_k_one_is_greedy_and_top_p_small_keeps_the_best():
    x = lm_logits(np.random.default_rng(6), 8)
    for kw in ({"top_k": 1}, {"top_k": 0, "top_p": 1e-6}, {"min_p": 1.0}):
        s = [sampler(seed=i, temperature=1.0, **kw) for i in range(8)]
        assert sample_rows(x, s) == x.argmax(axis=1).tolist(), kw


def _top_k_reference(row: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The k highest logits of a row without NaN by a full sort: logit descending, then id."""
    order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
    return order, [float(row[i]) for i in order]


@pytest.mark.parametrize("v", [7, 100, 1000, 4099, V])
def test_top_k_candidates_are_the_exact_top_k_for_any_shape(v):
    """The grouped threshold (vector._top_k) against a full sort: the same logits in the same order on
    every row, ties by id, for k from 1 to v - 1, with ties, -inf stretches and whole -inf rows;
    a NaN row still gets k distinct ids."""
    from skippy.engine.sampling.vector import _top_k

    rng = np.random.default_rng(v)
    ks = sorted({1, 2, min(40, v - 1), v // 2, v - 1} | set(rng.integers(1, v, 3).tolist()))
    x = lm_logits(rng, 6, v) if v >= 8 else rng.standard_normal((6, v)).astype(np.float32)
    x[1] = np.round(x[1])  # many exact ties
    x[2, : v // 2] = -np.inf  # half the vocabulary banned
    x[3] = -np.inf  # everything banned
    x[4, rng.choice(v, max(1, v // 3), replace=False)] = -np.inf
    x[5] = 0.0  # one tie over the whole row
    for k in ks:
        got = _top_k(x, k)
        alone = [_top_k(x[j:j + 1], k)[0] for j in range(6)]  # one row: its own path
        for j, (ids, vals) in [*enumerate(got), *enumerate(alone)]:
            ref_ids, ref_vals = _top_k_reference(x[j], k)
            assert vals.tolist() == ref_vals, (v, k, j)
            assert len(set(ids.tolist())) == k and (x[j][ids] == vals).all()
            same = [i for i in range(k - 1) if vals[i] == vals[i + 1]]
            assert all(ids[i] < ids[i + 1] for i in same), (v, k, j)
            # the tokens strictly above the k-th logit are the reference's
            assert {i for i, u in zip(ids.tolist(), vals.tolist(), strict=True) if u > vals[-1]} == \
                {i for i, u in zip(ref_ids, ref_vals, strict=True) if u > ref_vals[-1]}
    nan = x[:1].copy()
    nan[0, rng.choice(v, max(1, v // 10), replace=False)] = np.nan
    for k in ks:
        for ids, _ in (_top_k(nan, k)[0], _top_k(np.vstack([nan, x[:1]]), k)[0]):  # alone, and beside a row
            assert len(set(ids.tolist())) == k and ((0 <= ids) & (ids < v)).all()


def test_logit_bias_and_penalties_follow_llama_cpp():
    x = np.zeros((1, 6), dtype=np.float32)
    x[0] = [1.0, 2.0, -1.0, 0.5, 3.0, 0.0]
    s = sampler(temperature=0.0, repeat_penalty=2.0, frequency_penalty=0.25, presence_penalty=0.5, penalty_last_n=3)
    assert sample_rows(x, [s]) == [4]  # no history yet
    # 4 was accepted: 3.0 / 2 - (1 * 0.25 + 0.5) = 0.75 < 2.0 -> 1 wins
    assert sample_rows(x, [s]) == [1]
    assert s.counts == {4: 1, 1: 1}
    sample_rows(x, [s])
    sample_rows(x, [s])  # window of 3: the first 4 slid out
    assert sum(s.counts.values()) == 3 and len(s.recent) == 3
    # negative logits are multiplied by the repeat penalty
    row = np.array([-1.0, -1.5], dtype=np.float32)
    t = sampler(temperature=0.0, repeat_penalty=2.0, penalty_last_n=4)
    t.accept(0)
    row2 = row.copy()
    t.apply_modifiers(row2)
    assert row2.tolist() == [-2.0, -1.5]
    b = sampler(temperature=0.0, logit_bias=((2, 10.0),))
    assert sample_rows(x, [b]) == [2]
    assert x[0, 2] == -1.0  # the caller's logits are not modified


def test_penalty_window_zero_is_off():
    s = sampler(temperature=0.0, repeat_penalty=3.0, penalty_last_n=0)
    x = np.array([[0.0, 5.0]], dtype=np.float32)
    assert [sample_rows(x, [s])[0] for _ in range(3)] == [1, 1, 1]
    assert not s.counts


def test_same_seed_same_tokens_other_seed_differs():
    x = lm_logits(np.random.default_rng(7), 1)
    x = np.repeat(x, 1, axis=0)
    run = lambda seed: [sample_rows(x, [s])[0] for s in [sampler(seed=seed, temperature=1.5, top_k=0,  # noqa: E731
                                                                     top_p=1.0, min_p=0.0)] for _ in range(40)]
    a, b, c = run(11), run(11), run(12)
    assert a == b
    assert a != c


def test_mt19937_matches_the_cpp_standard():
    # C++11 [rand.predef]: the 10000th output of a default-constructed std::mt19937 (seed 5489)
    assert int(mt19937_state(5489).random_raw(10000)[-1]) == 4123659995


@pytest.mark.parametrize("seed", [0, 1, 5489, 2**31, 2**32 - 1, 2**32 + 5, 2**40 + 7])
def test_mt19937_state_is_random_states_legacy_seeding(seed):
    # the fast path (legacy seeding on a generator made without entropy) against RandomState's own state
    want = np.random.RandomState(seed & 0xFFFFFFFF).get_state(legacy=False)["state"]
    got = mt19937_state(seed).state["state"]
    assert got["pos"] == want["pos"]
    assert np.array_equal(got["key"], want["key"])


def test_mt19937_generators_of_one_seed_are_independent():
    a, b = mt19937_state(7), mt19937_state(7)
    first = a.random_raw(3)
    assert np.array_equal(b.random_raw(3), first)  # b did not move with a
    assert not np.array_equal(a.random_raw(3), first)


def test_nan_row_still_gives_a_valid_token():
    x = lm_logits(np.random.default_rng(8), 3)
    x[1] = np.nan
    s = [sampler(seed=i) for i in range(3)] + [sampler(temperature=0.0)]
    toks = sample_rows(np.vstack([x, x[1:2]]), s)
    assert all(0 <= t < V for t in toks)


def test_grammar_is_not_vectorizable():
    assert not vectorizable(SamplingParams(grammar='root ::= "a"'))
    with pytest.raises(ValueError):
        SeqSampler(SamplingParams(grammar='root ::= "a"'))
    with pytest.raises(ValueError):
        sample_rows(np.zeros((2, 4), dtype=np.float32), [sampler()])


# --- execute(): one sample_rows call per step, chain samplers one by one, extras per row ---------------

class RowsRuntime:
    """Logit rows per batch index; ``sample`` serves non-vector samplers (a grammar's chain) by argmin."""

    def __init__(self, x: np.ndarray):
        self.x = x
        self.rows = {2 * i: i for i in range(len(x))}  # outputs at even batch indices
        self.decoded = []
        self.chain_calls = []
        self.output_calls = 0

    def decode(self, entries):
        self.decoded.append(entries)

    def output_logits(self, indices):
        self.output_calls += 1
        return self.x[[self.rows[i] for i in indices]]

    def logits(self, index):
        return self.x[self.rows[index]]

    def sample(self, sampler, index):
        self.chain_calls.append(index)
        return int(self.x[self.rows[index]].argmin())


def test_execute_samples_vector_rows_together_and_grammar_rows_alone():
    from skippy.engine.hooks.signals import logprobs_top, token_logprob, token_signals
    from skippy.engine.scheduling.batch import BatchPlan
    from skippy.engine.scheduling.decode import execute
    from skippy.engine.scheduling.step import SampleTask, StepPlan

    x = lm_logits(np.random.default_rng(9), 4, v=3000)
    x[3] = np.nan
    rt = RowsRuntime(x)
    kws = [{"seed": 1}, {"temperature": 0.0}, None, {"seed": 2}]  # None: a chain (grammar) sampler
    samplers = [sampler(**kw) if kw is not None else object() for kw in kws]
    tasks = tuple(SampleTask(rid=i, index=2 * i, sampler=s, top_logprobs=[3, None, 0, 2][i], signals=i != 1)
                  for i, s in enumerate(samplers))
    step = StepPlan(BatchPlan(entries=["e"], outputs=[], advance=[]), tasks)
    mirror = [sampler(**kw) if kw is not None else None for kw in kws]
    result = execute(rt, step)
    assert all(len(t) == 1 for t in result.tokens) and result.decodes == 1
    events = [t[0] for t in result.tokens]
    assert rt.decoded == [["e"]] and rt.output_calls == 1 and rt.chain_calls == [4]
    assert events[0].token == sample_rows(x[0:1], [mirror[0]])[0]
    assert events[1].token == int(x[1].argmax())
    assert events[2].token == int(x[2].argmin())
    for i in (0, 2):
        ev = events[i]
        assert ev.logprob == pytest.approx(token_logprob(x[i], ev.token), abs=1e-5)
        ent, mar = token_signals(x[i])
        assert ev.entropy == pytest.approx(ent, abs=1e-4) and ev.margin == pytest.approx(mar, abs=1e-5)
    ids, lps = logprobs_top(x[0], 3)
    assert [t.token for t in events[0].top] == ids.tolist()
    assert [t.logprob for t in events[0].top] == pytest.approx(lps.tolist(), abs=1e-5)
    assert events[2].top == () and events[1].logprob is None and events[1].entropy is None
    nan = events[3]  # NaN logits: a valid token, no numbers, the other rows unharmed
    assert 0 <= nan.token < 3000 and nan.logprob is None and nan.entropy is None and nan.top == ()


# --- the real model: the vectorized sampler and llama.cpp's chain generate the same text ------------

MODEL = __import__("os").path.expanduser("~/.cache/skippy/models/SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").path.exists(MODEL), reason="default model not downloaded (skippy pull)")
@pytest.mark.parametrize("kw", [{"temperature": 0.0}, {"temperature": 1.0, "seed": 3},
                                {"temperature": 0.8, "seed": 4, "repeat_penalty": 1.2, "frequency_penalty": 0.4},
                                {"temperature": 1.2, "seed": 5, "top_k": 0, "top_p": 0.9, "min_p": 0.0}])
def test_real_model_generation_equals_llama_cpp_chain(kw):
    from skippy.engine.runtime.base import BatchEntry
    from skippy.engine.runtime.llama import LlamaRuntime

    outs = []
    for vector in (True, False):
        rt = LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, n_threads=2, vector_sampling=vector)
        try:
            prompt = rt.vocab.tokenize("<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n",
                                       add_special=False, parse_special=True)
            s = rt.new_sampler(SamplingParams(**kw))
            assert isinstance(s, SeqSampler) == vector
            rt.decode([BatchEntry(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
            out = [rt.sample(s, len(prompt) - 1)]
            for k in range(39):
                rt.decode([BatchEntry(out[-1], len(prompt) + k, 0, True)])
                out.append(sample_rows(rt.output_logits([0]), [s])[0] if vector else rt.sample(s, 0))
            rt.free_sampler(s)
            outs.append(out)
        finally:
            rt.close()
    assert outs[0] == outs[1]


@pytest.mark.parametrize("kw,exact", [
    ({"temperature": 0.0}, True), ({"temperature": 0.0, "repeat_penalty": 1.3, "seed": 0xFFFFFFFF}, True),
    ({}, True), ({"top_k": 0, "top_p": 1.0}, True), ({"top_k": 0, "top_p": 0.9, "min_p": 0.0}, True),
    ({"seed": 0xFFFFFFFF}, False), ({"seed": 2**63 - 1}, False), ({"min_p": 1.0}, False),
    ({"top_k": 40, "top_p": 1.0}, False), ({"top_k": 0, "top_p": 1.0, "min_p": 0.0}, False),
    ({"temperature": 0.0, "ignore_eos": True}, False),
])
def test_graph_exact_names_the_chains_the_decode_graph_samples_alike(kw, exact):
    """Backend sampling takes a chain only where llama.cpp's graph samples its tokens: the seed llama.cpp reads
    as random, ``min_p`` 1, ``top_k`` without ``top_p`` (unsorted candidates) and the whole vocabulary (float32
    sums) stay on the host, as does end-of-generation suppression."""
    assert SeqSampler(SamplingParams(**{"seed": 5, **kw}), eog_ids=(2,)).graph_exact is exact
