import math

import attrs
import numpy as np
import pytest

from skippy.engine.hooks.signals import (
    FinishInfo,
    SignalConfig,
    SignalWindow,
    logprobs_top,
    token_logprob,
    token_signals,
)


def f32(*xs):
    return np.array(xs, dtype=np.float32)


# --- per-token signals -------------------------------------------------------


def test_uniform_over_four():
    h, m = token_signals(f32(0, 0, 0, 0))
    assert h == pytest.approx(math.log(4), abs=1e-6)
    assert m == 0.0 and math.copysign(1, m) == 1


def test_two_one_zero_hand_computed():
    # p = e^[2,1,0] / S, S = e^2 + e + 1; H = log S - (2 e^2 + e) / S
    s = math.e**2 + math.e + 1
    expected = math.log(s) - (2 * math.e**2 + math.e) / s
    assert expected == pytest.approx(0.8323955, abs=1e-6)
    h, m = token_signals(f32(2, 1, 0))
    assert h == pytest.approx(expected, abs=1e-6)
    assert m == pytest.approx(1.0)
    # permutation and shift invariance
    h2, m2 = token_signals(f32(1000, 1002, 1001))
    assert (h2, m2) == pytest.approx((expected, 1.0), abs=1e-5)


def test_peaked_and_large_logits_are_stable():
    h, m = token_signals(f32(100, 0, 0, 0))
    assert h == pytest.approx(0.0, abs=1e-6)
    assert m == pytest.approx(100.0)
    h, _ = token_signals(np.full(49152, 1e4, dtype=np.float32))
    assert h == pytest.approx(math.log(49152), rel=1e-6)


def test_float64_input_and_masked_logits():
    h, m = token_signals(np.array([0.0, 0.0, -np.inf, -np.inf]))
    assert h == pytest.approx(math.log(2))
    assert m == 0.0
    h, m = token_signals(f32(3, -np.inf))
    assert h == 0.0 and m == math.inf


@pytest.mark.parametrize(
    "bad",
    [f32(1), np.zeros((2, 2), np.float32), f32(np.nan, 1), f32(1, np.nan), f32(np.inf, 1), f32(-np.inf, -np.inf)],
)
def test_token_signals_rejects_bad_logits(bad):
    with pytest.raises(ValueError):
        token_signals(bad)


def test_logprobs_top_sorted_and_normalised():
    x = f32(0.5, 3.0, 1.0, 3.0, -2.0)
    ids, lps = logprobs_top(x, 3)
    assert ids.tolist() == [1, 3, 2]  # tie at 3.0 broken by lower id
    lse = math.log(sum(math.exp(v) for v in x.tolist()))
    assert lps.tolist() == pytest.approx([3.0 - lse, 3.0 - lse, 1.0 - lse], abs=1e-6)
    ids, lps = logprobs_top(x, 99)
    assert ids.tolist() == [1, 3, 2, 0, 4]
    assert float(np.exp(lps).sum()) == pytest.approx(1.0)
    assert logprobs_top(x, 0)[0].shape == (0,)
    assert token_logprob(x, 2) == pytest.approx(1.0 - lse, abs=1e-6)
    with pytest.raises(ValueError):
        logprobs_top(x, -1)
    with pytest.raises(ValueError):
        token_logprob(x, 5)


# --- config -------------------------------------------------------------------


def test_config_defaults_and_validation():
    c = SignalConfig()
    assert (c.window, c.high_entropy_threshold, c.min_decoded, c.min_interval) == (16, 2.0, 12, 32)
    assert (c.high_entropy_fraction, c.repetition_threshold) == (0.75, 3)
    SignalConfig(window=1)
    SignalConfig(window=4096)
    for kw in [dict(window=0), dict(window=4097), dict(high_entropy_fraction=0), dict(high_entropy_fraction=1.5),
               dict(high_entropy_threshold=-1.0), dict(repetition_threshold=0), dict(min_decoded=-1)]:
        with pytest.raises(ValueError):
            SignalConfig(**kw)
    with pytest.raises(TypeError):
        SignalConfig(window=2.5)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.window = 3


# --- window statistics ----------------------------------------------------------


def test_window_stats_slide():
    w = SignalWindow(SignalConfig(window=3, high_entropy_threshold=2.0))
    assert w.stats().token_count == 0
    for i, (h, m) in enumerate([(1.0, 5.0), (3.0, 0.5), (2.0, 1.0), (4.0, 2.0)]):
        w.push(i, h, m)
    s = w.stats()  # window holds the last three: (3,.5) (2,1) (4,2)
    assert s.token_count == 3
    assert s.mean_entropy == pytest.approx(3.0)
    assert s.max_entropy == 4.0
    assert s.mean_margin == pytest.approx(3.5 / 3)
    assert s.min_margin == 0.5
    assert s.high_entropy_count == 2  # 2.0 is not strictly above the threshold
    assert s.repetition_count == 0
    assert w.pushed == 4


def test_repetition_count_whole_generation_and_window():
    w = SignalWindow(SignalConfig(window=4))
    seq = [1, 2, 3, 4, 9, 1, 2, 3, 4, 1, 2, 3, 4]
    for t in seq:
        w.push(t, 0.0, 1.0)
    # 4-grams end at positions 3..12; 1234 repeats at positions 8 and 12.
    # The window (positions 9..12) holds one of them.
    grams = [tuple(seq[i - 3:i + 1]) for i in range(3, len(seq))]
    flags = [0, 0, 0] + [int(g in grams[:j]) for j, g in enumerate(grams)]
    assert [i for i, f in enumerate(flags) if f] == [8, 12]
    assert w.stats().repetition_count == 1
    # overlapping occurrences count: a a a a a -> the 5th position repeats
    w2 = SignalWindow(SignalConfig(window=16))
    for _ in range(5):
        w2.push(7, 0.0, 1.0)
    assert w2.stats().repetition_count == 1
    # a repeat that slid out of the window no longer counts, but history is kept
    w3 = SignalWindow(SignalConfig(window=2))
    for t in [1, 2, 3, 4, 1, 2, 3, 4, 5, 6]:
        w3.push(t, 0.0, 1.0)
    assert w3.stats().repetition_count == 0
    w3.push(7, 0.0, 1.0)
    for t in [4, 5, 6, 7]:
        w3.push(t, 0.0, 1.0)
    assert w3.stats().repetition_count == 1  # 4567 first ended at position 10


# --- firing rule ------------------------------------------------------------------


def filled(n_high, n_low=0, cfg=None):
    w = SignalWindow(cfg or SignalConfig())
    tok = 0
    for _ in range(n_low):
        w.push(tok, 0.5, 3.0)
        tok += 1
    for _ in range(n_high):
        w.push(tok, 5.0, 0.1)
        tok += 1
    return w


def test_fire_min_decoded_boundary():
    w = filled(16)
    assert not w.should_fire(11)
    assert w.should_fire(12)


def test_fire_interval_boundary():
    w = filled(16)
    assert w.should_fire(40)
    w.mark_fired(40)
    assert w.last_fired == 40
    assert not w.should_fire(40 + 31)
    assert w.should_fire(40 + 32)


def test_fire_fraction_exactly_75_percent():
    assert filled(12, 4).should_fire(16)  # 12/16 == 0.75
    assert not filled(11, 5).should_fire(16)  # 11/16 < 0.75
    # fraction is of the positions in the window (not yet full): 9/12 == 0.75
    assert filled(9, 3).should_fire(12)
    assert not filled(8, 4).should_fire(12)


def test_fire_repetition_boundary():
    def rep_window(n_repeats):
        w = SignalWindow(SignalConfig())
        toks = list(range(100, 112)) + [100, 101, 102] + list(range(103, 103 + n_repeats))
        for t in toks:
            w.push(t, 0.1, 5.0)
        return w

    assert rep_window(2).stats().repetition_count == 2
    assert not rep_window(2).should_fire(20)
    assert rep_window(3).stats().repetition_count == 3
    assert rep_window(3).should_fire(20)


def test_finish_info_status_validated():
    assert FinishInfo("success", "stop", 5, 0, None).status == "success"
    with pytest.raises(ValueError):
        FinishInfo("ok")
