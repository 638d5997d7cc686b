"""llama-server's code-completion limits and answer fields, sans-IO: ``n_indent``, ``t_max_predict_ms``
(:class:`LineLimits` alone and inside a :class:`Generation`), ``response_fields`` (:func:`select_fields`)
and the ``infill`` sampler in ``samplers``."""

from __future__ import annotations

import pytest

from skippy.engine.chat.formats.base import ContentParser
from skippy.engine.errors import InvalidRequest
from skippy.engine.output.generation import Done, Generation
from skippy.engine.output.line_limits import LineLimits
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.llama_server.translate import select_fields
from skippy.engine.protocols.llama_server.types import NativeCompletionRequest
from skippy.engine.protocols.openai.wire import Timings
from skippy.engine.sampling.native import apply_samplers, wants_infill
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.events import FinishEvent, TokenEvent


class Clock:
    """Seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def feed_all(rule: LineLimits, pieces: list[str]) -> tuple[int, str]:
    """Feed ``pieces`` until the rule fires: (how many were fed, the text kept)."""
    text = ""
    for i, p in enumerate(pieces, 1):
        text += p
        if rule.feed(p):
            assert rule.keep is not None
            return i, text[:rule.keep]
    return len(pieces), text


@pytest.mark.parametrize(("pieces", "fed", "kept"), [
    # the first line is never checked; the second is indented enough, the third is not: cut before its text
    (["x = 1", "\n    y", " = 2\n", "z = 3\n"], 4, "x = 1\n    y = 2\n"),
    # a line's indentation split over pieces is decided by the first other character
    (["a\n", "  ", "  ", "b\n", " c"], 5, "a\n    b\n "),
    # a blank line counts (its newline is its first character), as in llama-server
    (["a\n    b\n", "\n", "    c"], 2, "a\n    b\n"),
    # tabs count as one each
    (["a\n\t\t\t\tb\n\t\t\t\tc"], 1, "a\n\t\t\t\tb\n\t\t\t\tc"),
    # several lines in one piece: the first short one cuts
    (["a\n    b\n  c\n    d\n"], 1, "a\n    b\n  "),
])
def test_n_indent_cuts_at_the_first_line_indented_less(pieces: list[str], fed: int, kept: str) -> None:
    rule = LineLimits(n_indent=4, clock=Clock())
    assert feed_all(rule, pieces) == (fed, kept)


def test_n_indent_0_and_no_time_limit_never_fire() -> None:
    rule = LineLimits(clock=Clock())
    assert not rule.active
    assert feed_all(rule, ["a\n", "b\n", "\n"]) == (3, "a\nb\n\n")
    assert rule.keep is None


def test_t_max_predict_ms_ends_at_a_newline_after_the_budget() -> None:
    clock = Clock()
    rule = LineLimits(t_max_predict_ms=100, clock=clock)
    assert rule.active
    assert not rule.feed("def f():")  # the first piece starts the clock
    clock.now = 0.05
    assert not rule.feed("\n    return")  # a newline within the budget
    clock.now = 0.2
    assert not rule.feed(" 1")  # past the budget, but inside a line
    assert rule.feed(" + 2\n")  # the next newline ends it, and the piece is kept whole
    assert rule.keep == len("def f():\n    return 1 + 2\n")
    assert rule.feed("more")  # stays fired


def make(rule: LineLimits) -> Generation:
    pieces = {1: b"if x:\n", 2: b"    y()\n", 3: b"z()\n", 4: b"w()"}
    return Generation(1, [100, 101], SamplingParams(), 16, piece=pieces.__getitem__, parser=ContentParser(),
                      early_stop=rule)


def test_a_line_limit_in_a_generation_cancels_it_and_finishes_length() -> None:
    gen = make(LineLimits(n_indent=4, clock=Clock()))
    wants = []
    for tok in (1, 2, 3):
        gen.feed(TokenEvent(tok))
        wants.append(gen.wants_cancel)
    assert wants == [False, False, True]
    done = gen.feed(FinishEvent("cancelled", prompt_tokens=2, completion_tokens=3, prompt_ms=1.0, predicted_ms=2.0))
    assert isinstance(done, Done)
    assert done.finish_reason == "length" and done.message.content == "if x:\n    y()\n"
    assert done.counts.completion_tokens == 3


def answer() -> wire.NativeCompletion:
    return wire.NativeCompletion(content="x = 1", stop=True, tokens_predicted=3, tokens_evaluated=7,
                                 tokens_cached=5, truncated=False, timings=Timings.of(7, 10.0, 3, 30.0))


def test_response_fields_keep_the_named_fields_and_nested_paths_as_keys() -> None:
    got = select_fields(answer(), ["content", "timings/prompt_n", "timings/predicted_ms", "truncated",
                                   "tokens_cached", "timings/nope", "nope", "content/deeper"])
    assert got == {"content": "x = 1", "timings/prompt_n": 7, "timings/predicted_ms": 30.0, "truncated": False,
                   "tokens_cached": 5}


def test_response_fields_of_one_empty_path_keep_nothing() -> None:
    assert select_fields(answer(), [""]) == {}  # llama.vim's cache warm-up asks so
    assert select_fields(answer(), []) == {}


def test_the_infill_sampler_is_taken_after_min_p() -> None:
    req = NativeCompletionRequest(prompt="x", top_k=40, top_p=0.9)
    assert wants_infill(["top_k", "top_p", "infill"]) and wants_infill("kpi") and not wants_infill(None)
    got = apply_samplers(req, ["top_k", "top_p", "infill"])
    assert (got.top_k, got.top_p, got.min_p, got.temperature) == (40, 0.9, 0.0, 1.0)
    assert SamplingParams(infill=True).extended  # llama.cpp's chain runs it, not the vectorized sampler
    with pytest.raises(InvalidRequest) as err:
        apply_samplers(req, ["infill", "top_k"])
    assert err.value.param == "samplers"
