"""skippy.engine.preparation: request preparation without I/O (choices, budget, stops, prompts, seeds)."""

from __future__ import annotations

import attrs
import pytest

from skippy.engine.errors import ContextLengthExceeded, InvalidRequest
from skippy.engine.hooks.policy import Inject, Stop
from skippy.engine.preparation import (
    MAX_STOPS,
    Budget,
    Limits,
    before_chat_event,
    choice_count,
    choice_seed,
    completion_budget,
    completion_logprobs,
    completion_prompt_items,
    min_reuse,
    sampling,
    stop_strings,
)
from skippy.engine.protocols.openai.types import ChatCompletionRequest, CompletionRequest, Message
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.prefix import MIN_REUSE

LIMITS = Limits(n_vocab=100, n_ctx=64, n_seq_max=4, max_queue=8, min_tail=1)


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[Message("user", "hi")], **fields)


@pytest.mark.parametrize(("n", "expected"), [(None, 1), (1, 1), (4, 4)])
def test_choice_count_defaults_to_one_and_allows_up_to_the_sequence_slots(n, expected) -> None:
    assert choice_count(chat(n=n), LIMITS) == expected


@pytest.mark.parametrize(("n", "message"), [(0, "n must be >= 1"), (5, "at most 4 sequences")])
def test_choice_count_refuses_what_the_slots_cannot_hold(n, message) -> None:
    with pytest.raises(InvalidRequest, match=message) as ei:
        choice_count(chat(n=n), LIMITS)
    assert ei.value.param == "n"


def test_budget_is_the_room_left_the_asked_tokens_or_a_clamp() -> None:
    assert completion_budget(chat(), 10, LIMITS) == Budget(54)  # no max_tokens: until the context is full
    assert completion_budget(chat(max_tokens=20), 10, LIMITS) == Budget(20)
    assert completion_budget(chat(max_tokens=20, max_completion_tokens=5), 10, LIMITS) == Budget(5)
    assert completion_budget(chat(max_tokens=500), 10, LIMITS) == Budget(54, (500, 54))


def test_budget_refuses_a_full_prompt_a_bad_max_tokens_and_without_clamping_too_many() -> None:
    with pytest.raises(ContextLengthExceeded) as ei:
        completion_budget(chat(), 64, LIMITS)
    assert ei.value.param == "messages"
    assert "exceeds the available context size (64 tokens)" in ei.value.message  # llama-server's words
    assert "maximum context length is 64 tokens" in ei.value.message  # OpenAI's
    assert "the model was trained for no more" in ei.value.message  # LIMITS knows no training context
    with pytest.raises(ContextLengthExceeded, match="larger --ctx-size") as ei:  # there is room to grow
        completion_budget(chat(), 64, attrs.evolve(LIMITS, n_ctx_train=8192), prompt_param="prompt")
    assert ei.value.param == "prompt"
    with pytest.raises(InvalidRequest, match="max_tokens must be >= 1"):
        completion_budget(chat(max_tokens=0), 10, LIMITS)
    strict = Limits(n_vocab=100, n_ctx=64, n_seq_max=4, clamp_max_tokens=False)
    with pytest.raises(ContextLengthExceeded, match="at most 54") as ei:
        completion_budget(chat(max_tokens=500), 10, strict)
    assert ei.value.param == "max_tokens"


def test_stop_strings_drop_empty_ones_and_refuse_too_many() -> None:
    assert stop_strings(None) == [] and stop_strings("x") == ["x"] and stop_strings(["a", "", "b"]) == ["a", "b"]
    with pytest.raises(InvalidRequest, match=f"at most {MAX_STOPS}") as ei:
        stop_strings(["s"] * (MAX_STOPS + 1))
    assert ei.value.param == "stop"


def test_choice_seeds_differ_and_the_first_keeps_the_request_seed() -> None:
    params = SamplingParams(seed=0xFFFFFFFF)
    assert choice_seed(params, 0) is params
    assert [choice_seed(params, j).seed for j in (1, 2)] == [0, 1]  # wraps at 32 bits


def test_min_reuse_lowers_for_several_choices_of_a_short_prompt() -> None:
    assert min_reuse(1, 3, 1) == MIN_REUSE
    assert min_reuse(2, 3, 1) == 2 and min_reuse(2, 1, 1) == 1
    assert min_reuse(2, 10 * MIN_REUSE, 1) == MIN_REUSE


def test_completion_logprobs_take_logprobs_or_llama_servers_n_probs_within_0_to_5() -> None:
    assert completion_logprobs(CompletionRequest(prompt="x")) is None
    assert completion_logprobs(CompletionRequest(prompt="x", logprobs=0)) == 0
    assert completion_logprobs(CompletionRequest(prompt="x", n_probs=3)) == 3
    for fields, param in (({"logprobs": 6}, "logprobs"), ({"n_probs": 9}, "n_probs")):
        with pytest.raises(InvalidRequest) as ei:
            completion_logprobs(CompletionRequest(prompt="x", **fields))
        assert ei.value.param == param


def test_completion_prompt_items_check_token_ids_and_the_queue() -> None:
    assert completion_prompt_items(CompletionRequest(prompt=["a", "b"]), 2, LIMITS) == ["a", "b"]
    assert completion_prompt_items(CompletionRequest(prompt=[[1, 2], [99]]), 1, LIMITS) == [[1, 2], [99]]
    with pytest.raises(InvalidRequest, match="outside the vocabulary"):
        completion_prompt_items(CompletionRequest(prompt=[1, 100]), 1, LIMITS)
    with pytest.raises(InvalidRequest, match="at most 8 choices") as ei:
        completion_prompt_items(CompletionRequest(prompt=["a"] * 3), 3, LIMITS)
    assert ei.value.param == "prompt"


def test_before_chat_event_reports_what_the_policy_did() -> None:
    assert before_chat_event(Inject("note"), 3).injected_tokens == 3
    assert before_chat_event(Stop("no"), 0).reason == "no"
    assert before_chat_event(None, 0).action == "none"


def test_the_servers_sampling_defaults_fill_in_what_a_request_leaves_out() -> None:
    """llama-server's --temp, --top-k... (EngineConfig's sampling defaults): a request's own value wins."""
    from skippy.engine.config import EngineConfig

    config = EngineConfig(model="m.gguf", temperature=0.6, top_k=20, top_p=0.95, min_p=0.0, seed=-1,
                          repeat_penalty=1.1)
    assert config.sampling_defaults == (("temperature", 0.6), ("top_k", 20), ("top_p", 0.95), ("min_p", 0.0),
                                        ("repeat_penalty", 1.1))  # seed -1: a random one, as unset
    limits = attrs.evolve(LIMITS, sampling_defaults=config.sampling_defaults)
    msg = [Message("user", "hi")]
    p = sampling(ChatCompletionRequest(messages=msg), limits, logprobs=False, top_logprobs=0)
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty) == (0.6, 20, 0.95, 0.0, 1.1)
    own = sampling(ChatCompletionRequest(messages=msg, temperature=0.0, top_k=5), limits, logprobs=False,
                   top_logprobs=0)
    assert (own.temperature, own.top_k, own.top_p) == (0.0, 5, 0.95)
    # vLLM's repetition_penalty is the request's own repeat penalty: the server's does not conflict with it
    vllm = sampling(ChatCompletionRequest(messages=msg, repetition_penalty=1.3), limits, logprobs=False, top_logprobs=0)
    assert vllm.repeat_penalty == 1.3
    plain = sampling(ChatCompletionRequest(messages=msg), LIMITS, logprobs=False, top_logprobs=0)
    assert (plain.temperature, plain.top_k) == (0.8, 40)  # no defaults: llama-server's own


@pytest.mark.parametrize("seed,default", [(-1, None), (0xFFFFFFFF, None), (-5, 4294967291), (1 << 32 | 7, 7), (42, 42)])
def test_the_servers_seed_is_taken_modulo_2_32_as_a_requests(seed, default) -> None:
    """llama-server's -s reads its seed with std::stoul into a uint32_t (-5: 4294967291), as a request's seed of -5
    is read; -1 and 4294967295 (LLAMA_DEFAULT_SEED) are its random one: no default."""
    from skippy.engine.config import EngineConfig

    assert dict(EngineConfig(model="m.gguf", seed=seed).sampling_defaults).get("seed") == default
    limits = attrs.evolve(LIMITS, sampling_defaults=EngineConfig(model="m.gguf", seed=seed).sampling_defaults)
    got = sampling(ChatCompletionRequest(messages=[Message("user", "hi")]), limits, logprobs=False, top_logprobs=0)
    mine = sampling(ChatCompletionRequest(messages=[Message("user", "hi")], seed=seed), LIMITS, logprobs=False,
                    top_logprobs=0)
    if default is not None:
        assert got.seed == mine.seed == default
