"""sampling_from_request: defaults, validation (400 with param), seeds."""

import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message
from skippy.engine.protocols.openai.wire import ErrorEnvelope
from skippy.engine.sampling.params import MAX_TOP_LOGPROBS, SamplingParams, sampling_from_request

N_VOCAB = 49152


def req(**kw) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[Message(role="user", content="hi")], **kw)


def params(_n_vocab=N_VOCAB, _logprobs=False, _top_logprobs=0, **kw) -> SamplingParams:
    return sampling_from_request(req(**kw), n_vocab=_n_vocab, logprobs=_logprobs, top_logprobs=_top_logprobs)


def invalid(param: str, **kw) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as ei:
        params(**kw)
    assert ei.value.param == param
    assert ei.value.status == 400
    assert ErrorEnvelope.of(ei.value)["error"]["param"] == param
    assert ErrorEnvelope.of(ei.value)["error"]["type"] == "invalid_request_error"
    return ei.value


def test_defaults_follow_llama_server():
    p = params()
    assert p.temperature == 0.8
    assert p.top_k == 40
    assert p.top_p == 0.95
    assert p.min_p == 0.05
    assert p.repeat_penalty == 1.0
    assert p.presence_penalty == 0.0
    assert p.frequency_penalty == 0.0
    assert p.penalty_last_n == 64
    assert p.logit_bias == ()
    assert p.logprobs is False
    assert p.top_logprobs == 0
    assert p.grammar is None
    assert not p.greedy


def test_temperature_zero_is_greedy():
    p = params(temperature=0.0)
    assert p.temperature == 0.0
    assert p.greedy
    assert not params(temperature=0.01).greedy


@pytest.mark.parametrize("t", [-0.1, -1.0, -100.0, -1e9])
def test_negative_temperature_is_greedy_as_in_llama_server(t):
    """llama-server takes a temperature below 0 (its README: greedy, on every route): as 0 here."""
    p = params(temperature=t)
    assert p.temperature == t and p.greedy


@pytest.mark.parametrize("t", [0.0, -1.0])
@pytest.mark.parametrize("extra,plain", [
    ({}, True), ({"top_k": 1}, True), ({"top_p": 0.1}, True), ({"min_p": 0.9}, True), ({"top_n_sigma": 0.5}, True),
    ({"typical_p": 0.5}, False), ({"xtc_probability": 0.5}, False), ({"dynatemp_range": 0.5}, False),
    ({"xtc_probability": 0.5, "xtc_threshold": 0.6}, True),  # XTC off above 0.5
    ({"typical_p": 0.5, "mirostat": 2}, True),  # mirostat runs temperature then itself, no typical_p
])
def test_greedy_only_where_no_sampler_before_temperature_can_move_the_argmax(t, extra, plain):
    """llama.cpp runs the whole chain and then keeps the highest logit left: typical_p, XTC and a dynamic
    temperature can change that token, top_k, top_p, min_p and top_n_sigma keep it."""
    assert params(temperature=t, **extra).greedy is plain
    assert SamplingParams(temperature=t, infill=True).greedy is False


def test_explicit_values_are_kept():
    p = params(temperature=0.3, top_p=0.5, top_k=7, min_p=0.2, presence_penalty=1.5,
               frequency_penalty=-1.0, repeat_penalty=1.1, _logprobs=True, _top_logprobs=5)
    assert (p.temperature, p.top_p, p.top_k, p.min_p) == (0.3, 0.5, 7, 0.2)
    assert (p.presence_penalty, p.frequency_penalty, p.repeat_penalty) == (1.5, -1.0, 1.1)
    assert p.logprobs is True and p.top_logprobs == 5


def test_n_is_the_engines_not_the_samplers():
    assert params(n=1).temperature == 0.8 and params(n=4).temperature == 0.8  # choices: Engine._n


@pytest.mark.parametrize("field,value", [
    ("temperature", 100.5),
    ("top_p", 1.01),
    ("top_p", -0.5),
    ("top_k", -1),
    ("min_p", -0.01),
    ("min_p", 1.5),
    ("presence_penalty", 2.01),
    ("presence_penalty", -2.5),
    ("frequency_penalty", 3.0),
    ("frequency_penalty", -2.01),
    ("repeat_penalty", 0.0),
    ("repeat_penalty", -1.0),
])
def test_out_of_range_names_the_param(field, value):
    invalid(field, **{field: value})


@pytest.mark.parametrize("field,value", [
    ("temperature", 0.0), ("temperature", 2.0), ("temperature", -0.5), ("top_p", 1.0), ("top_p", 0.01), ("top_p", 0.0),
    ("top_k", 0),
    ("min_p", 0.0), ("min_p", 1.0), ("presence_penalty", -2.0), ("presence_penalty", 2.0),
    ("frequency_penalty", -2.0), ("frequency_penalty", 2.0), ("repeat_penalty", 0.5),
])
def test_boundary_values_accepted(field, value):
    assert getattr(params(**{field: value}), field) == value


@pytest.mark.parametrize("top_logprobs", [-1, MAX_TOP_LOGPROBS + 1, 100])
def test_top_logprobs_out_of_range(top_logprobs):
    invalid("top_logprobs", _logprobs=True, _top_logprobs=top_logprobs)


def test_top_logprobs_max_accepted():
    assert params(_logprobs=True, _top_logprobs=MAX_TOP_LOGPROBS).top_logprobs == MAX_TOP_LOGPROBS


def test_logit_bias_parsed_to_int_ids():
    p = params(logit_bias={"15": 5.0, "0": -100, str(N_VOCAB - 1): 100})
    assert dict(p.logit_bias) == {15: 5.0, 0: -100.0, N_VOCAB - 1: 100.0}
    assert all(isinstance(t, int) and isinstance(b, float) for t, b in p.logit_bias)


@pytest.mark.parametrize("key", ["abc", "1.5", "", "0x10", str(N_VOCAB), "-1", "99999999", " 15", "1_5", "15 ",
                                 "\uff11\uff15", "+15", "1" * 5000])
def test_logit_bias_bad_key(key):
    err = invalid("logit_bias", logit_bias={key: 1.0})
    assert "logit_bias" in err.message


def test_logit_bias_out_of_vocab_depends_on_vocab_size():
    assert dict(params(_n_vocab=100, logit_bias={"99": 1.0}).logit_bias) == {99: 1.0}
    invalid("logit_bias", _n_vocab=100, logit_bias={"100": 1.0})


@pytest.mark.parametrize("value", [100.5, -101.0])
def test_logit_bias_value_out_of_range(value):
    invalid("logit_bias", logit_bias={"5": value})


def test_seed_given_is_kept():
    assert params(seed=1234).seed == 1234
    assert params(seed=0).seed == 0
    assert params(seed=2**32 - 2).seed == 2**32 - 2
    assert params(seed=-2).seed == 2**32 - 2  # llama.cpp's uint32_t


@pytest.mark.parametrize("given", [{}, {"seed": -1}, {"seed": 2**32 - 1}])
def test_seed_absent_or_llama_cpps_random_one_is_random_u32(given):
    """No seed, or llama.cpp's ``LLAMA_DEFAULT_SEED`` (-1, 0xFFFFFFFF: llama-server's default, "random")."""
    seeds = {params(**given).seed for _ in range(20)}
    for s in seeds:
        assert isinstance(s, int)
        assert 0 <= s <= 2**32 - 1
    assert len(seeds) > 1  # 20 draws from 2^32 values: collision-only is ~impossible


def test_temperature_out_of_range_names_the_range():
    for t in (100.5, 1e308, float("inf"), float("-inf"), float("nan")):
        with pytest.raises(InvalidRequest, match=r"temperature must be a finite number <= 100"):
            params(temperature=t)


# -- llama-server and vLLM samplers ------------------------------------------------


def test_extended_samplers_default_off_as_in_llama_server():
    p = params()
    assert (p.typical_p, p.mirostat, p.dry_multiplier, p.xtc_probability, p.top_n_sigma, p.dynatemp_range) == \
        (1.0, 0, 0.0, 0.0, -1.0, 0.0)
    assert p.dry_sequence_breakers == ("\n", ":", '"', "*")
    assert (p.ignore_eos, p.min_tokens, p.stop_token_ids, p.constraint) == (False, 0, frozenset(), None)
    assert not p.extended


def test_extended_samplers_are_kept():
    p = params(typical_p=0.5, mirostat=2, mirostat_tau=3.0, mirostat_eta=0.2, dry_multiplier=0.8, dry_base=2.0,
               dry_allowed_length=4, dry_penalty_last_n=100, dry_sequence_breakers=["."], xtc_probability=0.3,
               xtc_threshold=0.2, top_n_sigma=1.5, dynatemp_range=0.4, dynatemp_exponent=2.0, min_keep=3,
               ignore_eos=True, min_tokens=2, stop_token_ids=[5, 6])
    assert (p.typical_p, p.mirostat, p.mirostat_tau, p.mirostat_eta) == (0.5, 2, 3.0, 0.2)
    assert (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, p.dry_sequence_breakers) == \
        (0.8, 2.0, 4, 100, (".",))
    assert (p.xtc_probability, p.xtc_threshold, p.top_n_sigma, p.dynatemp_range, p.dynatemp_exponent) == \
        (0.3, 0.2, 1.5, 0.4, 2.0)
    assert (p.min_keep, p.ignore_eos, p.min_tokens, p.stop_token_ids) == (3, True, 2, frozenset({5, 6}))
    assert p.extended


def test_minus_one_windows_mean_the_whole_context():
    p = sampling_from_request(req(repeat_last_n=-1, dry_penalty_last_n=-1), n_vocab=N_VOCAB, n_ctx=2048)
    assert (p.penalty_last_n, p.dry_penalty_last_n) == (2048, 2048)
    assert params(repeat_last_n=0).penalty_last_n == 0


def test_repetition_penalty_is_repeat_penalty():
    assert params(repetition_penalty=1.3).repeat_penalty == 1.3
    assert params(repetition_penalty=1.3, repeat_penalty=1.3).repeat_penalty == 1.3
    invalid("repetition_penalty", repetition_penalty=1.3, repeat_penalty=1.1)


@pytest.mark.parametrize("field,value", [
    ("typical_p", 0.0), ("typical_p", 1.01), ("mirostat", 3), ("mirostat_tau", -0.1), ("mirostat_eta", 0.0),
    ("dry_multiplier", -1.0), ("dry_base", 0.99), ("dry_allowed_length", -1), ("dry_penalty_last_n", -2),
    ("dry_sequence_breakers", []), ("dry_sequence_breakers", ["a", ""]), ("dry_sequence_breakers", ["x"] * 65),
    ("xtc_probability", 1.01), ("xtc_threshold", -0.1), ("top_n_sigma", -0.5), ("dynatemp_range", -0.1),
    ("dynatemp_exponent", -0.1), ("repeat_last_n", -2), ("min_keep", -1), ("min_keep", N_VOCAB + 1),
    ("n_probs", 21), ("repetition_penalty", 0.0), ("repetition_penalty", float("inf")), ("min_tokens", -1),
    ("stop_token_ids", [N_VOCAB]), ("stop_token_ids", [-1]), ("stop_token_ids", list(range(65))),
])
def test_out_of_range_extended_sampler_is_400(field, value):
    invalid(field, **{field: value})


def test_min_tokens_may_not_exceed_max_tokens():
    invalid("min_tokens", min_tokens=10, max_tokens=5)
    invalid("min_tokens", min_tokens=10, max_completion_tokens=5)
    assert params(min_tokens=5, max_tokens=5).min_tokens == 5


def test_a_negative_max_tokens_is_named_not_blamed_on_min_tokens():
    invalid("max_tokens", max_tokens=-5)
    invalid("max_tokens", max_completion_tokens=0)


def test_n_probs_out_of_range_names_n_probs_even_when_it_sets_top_logprobs():
    with pytest.raises(InvalidRequest) as ei:
        sampling_from_request(req(n_probs=21), n_vocab=N_VOCAB, logprobs=True, top_logprobs=21)
    assert ei.value.param == "n_probs"


# -- llama-server's samplers field: what it leaves out is off, temperature 0 after what it names ------------


def test_samplers_left_out_are_off_and_their_order_counts_when_on():
    from skippy.engine.protocols.llama_server.types import NativeCompletionRequest
    from skippy.engine.sampling.native import apply_samplers

    req = NativeCompletionRequest(prompt="x", typical_p=0.05, xtc_probability=1.0, dry_multiplier=0.8,
                                  top_n_sigma=1.0, temperature=0.0)
    got = apply_samplers(req, ["top_k", "top_p", "temperature"])  # llama.cpp's chain holds none of them
    assert (got.typical_p, got.xtc_probability, got.dry_multiplier, got.top_n_sigma) == (1.0, 0.0, 0.0, -1.0)
    kept = apply_samplers(req, "edskypmxt")  # llama-server's default order
    assert (kept.typical_p, kept.xtc_probability, kept.dry_multiplier, kept.top_n_sigma) == (0.05, 1.0, 0.8, 1.0)
    with pytest.raises(InvalidRequest) as err:  # typical after temperature: not this chain's order
        apply_samplers(req, ["top_k", "temperature", "typ_p"])
    assert err.value.param == "samplers"
    off = NativeCompletionRequest(prompt="x", top_k=40)  # off, they change nothing wherever they stand
    assert apply_samplers(off, ["xtc", "top_k", "temperature", "typ_p", "dry"]).top_k == 40


@pytest.mark.parametrize("samplers,greedy", [(["top_k", "top_p", "infill", "temperature"], False),
                                             (["top_k", "top_p", "temperature"], True),
                                             (["top_k", "typ_p", "temperature"], False)])
def test_temperature_0_with_infill_or_typical_named_runs_the_chain(samplers, greedy):
    """llama-server's ``samplers`` naming ``infill`` (code-completion clients) or ``typ_p`` with typical_p set:
    llama.cpp runs them before temperature 0, which keeps the highest logit they left (no plain argmax)."""
    from skippy.engine.preparation import Limits, sampling
    from skippy.engine.protocols.llama_server.types import NativeCompletionRequest

    req = NativeCompletionRequest(prompt="x", temperature=0.0, typical_p=0.3, samplers=samplers)
    p = sampling(req, Limits(n_ctx=2048, n_vocab=N_VOCAB, n_seq_max=1), logprobs=False, top_logprobs=0)
    assert p.greedy is greedy and p.infill == ("infill" in samplers)
