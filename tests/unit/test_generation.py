"""Generation (sans-IO): hand-made scheduler events against a tiny fake vocabulary, no model, no event loop."""

from __future__ import annotations

import json

import msgspec
import pytest

from skippy.engine.chat.emulation import EarlyStop
from skippy.engine.chat.formats.base import ContentParser
from skippy.engine.chat.formats.emulated import EmulatedToolParser
from skippy.engine.errors import EngineClosed, InvalidRequest
from skippy.engine.output.generation import Done, Generation, GenerationError, GenerationOptions, Piece
from skippy.engine.protocols.base import UNSET
from skippy.engine.protocols.llama_server.translate import NativeReply, generation_settings
from skippy.engine.protocols.openai.translate import (
    ChatReply,
    Choices,
    LiveTimings,
    TextReply,
    TokenText,
    TopText,
    chat_logprobs,
    legacy_logprobs,
    timings,
    token_text,
    usage,
)
from skippy.engine.protocols.openai.wire import ChatDelta
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.events import (
    FinishEvent,
    HookEvent,
    PrefillProgress,
    PromptLogprobs,
    TokenEvent,
    TopLogprob,
)

PIECES = {
    1: b"Hello",
    2: b" wor",
    3: b"ld",
    4: b" EN",
    5: b"D",
    6: b" more",
    7: b"\xc3",  # the first byte of "\xc3\xa9" (e-acute): invalid UTF-8 alone
    8: b"\xa9",
    9: b"TOOL_CALL ",
    10: b'{"name": "get_weather", "arguments": {"city": "Paris"}}',
    11: b"\nThe end",
    12: b"",  # a control token: renders as nothing
    13: b"",  # another one
    14: b"",  # a BOS
}
CALL = [9, 10, 11]
#: the control tokens' text (the vocabulary's special pieces: what logprobs show)
SPECIAL = {12: b"<|im_end|>", 13: b"<|im_start|>", 14: b"<s>"}


def piece(token: int) -> bytes:
    return PIECES[token]


def shown(token: int) -> bytes:
    return SPECIAL.get(token) or PIECES[token]


def make(prompt: list[int] | None = None, *, logprobs: bool = False, stops=(),
         parser=None, early_stop=None, shown=None, **options) -> Generation:
    params = SamplingParams(logprobs=logprobs, top_logprobs=2 if logprobs else 0)
    return Generation(7, prompt or [100, 101, 102, 103], params, 32, piece=piece, parser=parser or ContentParser(),
                      early_stop=early_stop, options=GenerationOptions(stops=stops, **options), shown=shown)


def finish(reason: str = "stop", n: int = 0, **kw) -> FinishEvent:
    kw.setdefault("prompt_ms", 40.0)
    kw.setdefault("predicted_ms", 100.0)
    return FinishEvent(reason, prompt_tokens=4, completion_tokens=n, **kw)


def run(gen: Generation, tokens: list[int], end: FinishEvent | None = None) -> tuple[str, Done, list[bool]]:
    """Feed ``tokens`` then ``end``; the sent text, the Done, and wants_cancel after each token."""
    text, cancels = [], []
    for t in tokens:
        item = gen.feed(TokenEvent(t))
        cancels.append(gen.wants_cancel)
        if item is not None:
            assert isinstance(item, Piece)
            text += [d.content for d in item.deltas]
    done = gen.feed(end or finish(n=len(tokens)))
    assert isinstance(done, Done)
    text += [d.content for d in done.deltas]
    return "".join(text), done, cancels


def test_the_submitted_request_carries_the_generation_settings() -> None:
    gen = make([1, 2, 3], hooks=True, signals=True, hook_request="req", cache_key="k", cache_prompt=False)
    r = gen.request
    assert (r.rid, list(r.prompt), r.max_tokens, r.hooks, r.signals, r.request, r.cache_key, r.cache_prompt) == (
        7, [1, 2, 3], 32, True, True, "req", "k", False)


def test_eog_stop_sends_every_token_and_reports_stop() -> None:
    text, done, cancels = run(make(), [1, 2, 3])
    assert text == "Hello world" and done.message.content == "Hello world"
    assert done.finish_reason == "stop" and not any(cancels)


def test_a_stop_string_asks_to_cancel_once_and_its_text_is_never_sent() -> None:
    gen = make(stops=["END"])
    sent = []
    for t in [1, 4]:  # "EN" may start "END": held back
        item = gen.feed(TokenEvent(t))
        sent += [d.content for d in item.deltas] if item else []
        assert not gen.wants_cancel
    assert "".join(sent) == "Hello "
    item = gen.feed(TokenEvent(5))  # "D" completes the stop string
    assert gen.wants_cancel and (item is None or not item.deltas)
    assert gen.feed(TokenEvent(6)) is None  # decoded before the cancel took effect: dropped, not counted
    assert not gen.wants_cancel and gen.completion_tokens == 3
    done = gen.feed(finish("cancelled", n=4))  # the cancel's finish is a normal stop
    assert isinstance(done, Done) and done.finish_reason == "stop"
    assert done.deltas == [] and done.message.content == "Hello "  # neither the held "EN" nor " more"
    assert usage(done.counts).completion_tokens == 3
    assert gen.finish_info.status == "success" and gen.finish_info.finish_reason == "stop"


def test_the_matched_stop_string_is_the_replies_stop_reason() -> None:
    gen = make(stops=["zzz", "END"])
    text, done, _ = run(gen, [1, 4, 5, 6], finish("cancelled", n=4))
    assert gen.stopping_word == "END"
    reply = ChatReply("m", gen)
    assert reply.completion(done).choices[0].stop_reason == "END"  # vLLM's choices[].stop_reason
    finish_chunk = reply.chunks(done)[-1].choices[0]
    assert finish_chunk.finish_reason == "stop" and finish_chunk.stop_reason == "END"
    assert b'"stop_reason":"END"' in msgspec.json.encode(finish_chunk)


def test_no_stop_reason_without_a_matched_stop_string() -> None:
    gen = make(stops=["END"])
    _, done, _ = run(gen, [1, 2, 3])
    assert gen.stopping_word == ""
    reply = ChatReply("m", gen)
    assert "stop_reason" not in msgspec.json.decode(msgspec.json.encode(reply.completion(done)))["choices"][0]
    assert all("stop_reason" not in msgspec.json.decode(msgspec.json.encode(c))["choices"][0]
               for c in reply.chunks(done))


def test_live_timings_ride_on_each_tokens_last_chunk_after_one_progress_chunk() -> None:
    """llama-server's ``timings_per_token`` / ``return_progress`` on chat chunks: a progress chunk (empty
    delta) at the first item, then the timings so far on each token's last chunk; seconds from ``clock``."""
    ticks = iter([10.0, 10.25, 10.5, 11.0, 11.5])  # built, first token, then one read per timed chunk

    gen = make()
    live = LiveTimings(4, lambda: (1, 3), clock=lambda: next(ticks))
    reply = ChatReply("m", gen, timings_per_token=True, return_progress=True, live=live)
    first = reply.chunks(gen.feed(TokenEvent(1)))
    assert [c.prompt_progress is not UNSET for c in first] == [True, False]
    p = first[0].prompt_progress
    assert (p.total, p.cache, p.processed, p.time_ms) == (4, 3, 4, 250)
    assert first[0].choices[0].delta == ChatDelta() and first[0].timings is UNSET
    t = first[1].timings
    assert (t.prompt_n, t.cache_n, t.prompt_ms, t.predicted_n, t.predicted_ms) == (1, 3, 250.0, 1, 250.0)
    second = reply.chunks(gen.feed(TokenEvent(2)))
    assert len(second) == 1 and second[0].timings.predicted_n == 2 and second[0].timings.predicted_ms == 750.0
    assert second[0].prompt_progress is UNSET
    done = gen.feed(finish(n=2))
    last = reply.chunks(done)
    assert last[-1].timings == timings(done.counts)  # the finish chunk's are the scheduler's, as before


def test_prefill_steps_are_progress_chunks_where_asked_and_the_last_one_starts_the_live_timings() -> None:
    """The scheduler's prefill steps (the last with the whole prompt) give ``prompt_progress`` and the live
    timings' prompt time, cached tokens and first-token moment: right even when the first tokens show nothing
    (a tool call held back), where the first item would come late."""
    ticks = iter([0.0, 0.1, 0.3, 0.5, 0.9])  # built, step 1, step 2 (the last), first item's timings, ...
    gen = make(progress=True)
    step = gen.feed(PrefillProgress(2, 1, 40.0))
    assert isinstance(step, Piece) and step.progress == PrefillProgress(2, 1, 40.0) and not step.deltas
    reply = ChatReply("m", gen, return_progress=True, timings_per_token=True,
                      live=LiveTimings(4, lambda: (0, 0), clock=lambda: next(ticks)))
    [chunk] = reply.chunks(step)
    p = chunk.prompt_progress
    assert (p.total, p.cache, p.processed, p.time_ms) == (4, 1, 2, 100)
    [last] = reply.chunks(gen.feed(PrefillProgress(4, 1, 95.0)))
    assert (last.prompt_progress.processed, last.prompt_progress.time_ms) == (4, 300)
    assert gen.feed(TokenEvent(12)) is None  # a token that shows nothing yet (held back)
    out = reply.chunks(gen.feed(TokenEvent(1)))  # no progress again: the scheduler's last step said it
    assert [c.prompt_progress is UNSET for c in out] == [True] and out[0].choices[0].delta.content == "Hello"
    t = out[0].timings
    assert (t.prompt_ms, t.cache_n, t.prompt_n, t.predicted_n) == (95.0, 1, 3, 2)
    assert abs(t.predicted_ms - 200.0) < 1e-6  # from the last step's moment, not the first item's
    assert ChatReply("m", gen).chunks(step) == []  # a reply that did not ask sends nothing for a step
    native = NativeReply("m", gen, prompt_text="", settings=generation_settings(SamplingParams(), n_predict=4),
                         return_progress=True, clock=lambda: 1.0)
    assert [c.prompt_progress.processed for c in native.chunks(step)] == [2]


def test_live_timings_off_by_default_and_on_text_completions() -> None:
    gen = make()
    plain = ChatReply("m", gen)
    assert all(c.timings is UNSET and c.prompt_progress is UNSET for c in plain.chunks(gen.feed(TokenEvent(1))))
    gen = make()
    text = TextReply("m", gen, timings_per_token=True, return_progress=True, live=LiveTimings(4, clock=lambda: 1.0))
    out = text.chunks(gen.feed(TokenEvent(1)))
    assert out[0].prompt_progress.total == 4 and out[0].choices[0].text == ""
    assert out[1].choices[0].text == "Hello" and out[1].timings.predicted_n == 1


def test_held_back_text_that_was_not_a_stop_is_sent_at_the_end() -> None:
    text, done, _ = run(make(stops=["END"]), [1, 4], finish("length", n=2))
    assert text == "Hello EN" and done.finish_reason == "length"


def test_length_finish_and_a_split_utf8_character() -> None:
    gen = make()
    assert gen.feed(TokenEvent(7)) is None  # half a character: nothing to send yet, but counted
    item = gen.feed(TokenEvent(8))
    assert [d.content for d in item.deltas] == ["é"]
    done = gen.feed(finish("length", n=2))
    assert done.finish_reason == "length" and usage(done.counts).completion_tokens == 2


@pytest.mark.parametrize("tokens", [[1, 7], [7], [1, 8, 7], [1, 12, 7, 12]])
def test_a_character_cut_by_the_end_is_dropped_not_sent_as_u_fffd(tokens: list[int]) -> None:
    """max_tokens ends the generation after the first byte of "é" (token 7): the text ends at the last
    whole character in the stream's last delta and in the message; the cut token's logprob keeps its
    own bytes. (Token 8 alone, a continuation byte, is invalid UTF-8 and stays U+FFFD.)"""
    gen = make(logprobs=True)
    reply = ChatReply("m", gen, logprobs=True, created=5)
    chunks = []
    for t in tokens:
        chunks += [encode(c) for c in reply.chunks(gen.feed(lp_event(t, -0.25, [(t, -0.25)])))]
    done = gen.feed(finish("length", n=len(tokens)))
    chunks += [encode(c) for c in reply.chunks(done)]
    expected = b"".join(PIECES[t] for t in tokens[:tokens.index(7)]).decode("utf-8", "replace")
    streamed = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]]
    whole = encode(reply.completion(done))
    assert done.finish_reason == "length" and usage(done.counts).completion_tokens == len(tokens)
    assert "".join(streamed) == (whole["choices"][0]["message"]["content"] or "") == done.message.content == expected
    entries = whole["choices"][0]["logprobs"]["content"]
    assert [e["bytes"] for e in entries] == [list(PIECES[t]) for t in tokens]
    assert entries[tokens.index(7)]["token"] == "\ufffd"  # the token alone is half a character
    text = TextReply("m", make(logprobs=False))
    for t in tokens:
        text.generation.feed(TokenEvent(t))
    assert encode(text.completion(text.generation.feed(finish("length", n=len(tokens)))))["choices"][0][
        "text"] == expected


def test_tool_calls_finish_and_the_early_stop_rule() -> None:
    allowed = {"get_weather"}
    gen = make(parser=EmulatedToolParser(allowed), early_stop=EarlyStop(allowed, True))
    _, done, cancels = run(gen, CALL, finish("cancelled", n=3))
    assert cancels[-1]  # "\nThe end" after the call: the rule ends the generation
    assert done.finish_reason == "tool_calls"
    [call] = done.message.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert "The end" not in done.message.content



@pytest.mark.parametrize("stop", ["Paris", "}}", "_CALL", "\n"])
def test_a_call_a_stop_string_cuts_is_dropped_as_one_max_tokens_cuts(stop: str) -> None:
    """A stop string inside a tool call ends the generation there: the call is left out (its arguments are
    not whole) and none of its syntax is content, as at a ``length`` finish; one after the call keeps it."""
    allowed = {"get_weather"}
    gen = make(parser=EmulatedToolParser(allowed), stops=(stop,))
    text, done, _ = run(gen, CALL)
    if stop == "\n":  # after the call
        assert done.finish_reason == "tool_calls" and len(done.message.tool_calls) == 1
        return
    assert done.message.tool_calls == () and done.finish_reason == "stop"
    assert "TOOL" not in done.message.content and "TOOL" not in text and "{" not in done.message.content

def test_a_hook_stop_reason_is_kept_even_with_tool_calls() -> None:
    allowed = {"get_weather"}
    gen = make(parser=EmulatedToolParser(allowed), hooks=True)
    _, done, _ = run(gen, CALL[:2], finish("policy_stop", n=2, stopped_by_hook=True, injected_tokens=3))
    assert done.message.tool_calls and done.finish_reason == "policy_stop"
    info = gen.finish_info
    assert (info.status, info.finish_reason, info.completion_tokens, info.injected_tokens) == (
        "success", "policy_stop", 2, 3)


def test_an_error_finish_raises_and_reports_the_error() -> None:
    gen = make()
    gen.feed(TokenEvent(1))
    with pytest.raises(GenerationError) as err:
        gen.feed(finish("error", n=1, error="llama_decode returned -1"))
    assert err.value.status == 500 and "llama_decode returned -1" in err.value.message
    assert gen.finished
    assert (gen.finish_info.status, gen.finish_info.error, gen.finish_info.completion_tokens) == (
        "error", "llama_decode returned -1", 1)


def test_a_cancelled_finish_nobody_asked_for_means_the_engine_stopped() -> None:
    gen = make()
    with pytest.raises(EngineClosed):
        gen.feed(finish("cancelled"))
    assert gen.finish_info.status == "error" and gen.finish_info.error == "engine stopped"


def test_abandon_reports_cancelled_with_the_tokens_so_far() -> None:
    gen = make()
    gen.feed(TokenEvent(1))
    gen.feed(TokenEvent(2))
    assert gen.finish_info.status == "cancelled"  # until it ends
    info = gen.abandon()
    assert (info.status, info.completion_tokens) == ("cancelled", 2) and gen.finished


def test_usage_and_timings_count_cached_and_injected_tokens() -> None:
    # 10 prompt tokens, the last 2 appended by a before_chat hook; 6 came from the prefix cache
    gen = make(list(range(10)), hooks=True, injected=2)
    _, done, _ = run(gen, [1, 2, 3], finish("stop", n=3, cached_tokens=6, injected_tokens=5,
                                            prompt_ms=20.0, predicted_ms=300.0))
    u = usage(done.counts)
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (8, 3, 11)
    assert u.prompt_tokens_details.cached_tokens == 6 and u.injected_tokens == 7
    t = timings(done.counts)
    assert (t.cache_n, t.prompt_n, t.predicted_n) == (6, 2, 3)
    assert (t.prompt_ms, t.prompt_per_token_ms, t.prompt_per_second) == (20.0, 10.0, 100.0)
    # llama-server: the first token comes from the prompt's logits; the rates count the 2 decode steps after it
    assert (t.predicted_ms, t.predicted_per_token_ms, t.predicted_per_second) == (300.0, 150.0, 2000.0 / 300.0)
    assert gen.finish_info.injected_tokens == 7


@pytest.mark.parametrize(("n", "per_token_ms", "per_second"), [(1, 0.0, 0.0), (2, 50.0, 20.0), (5, 12.5, 80.0)])
def test_generation_rates_count_the_decode_steps_after_the_first_token(n: int, per_token_ms: float,
                                                                       per_second: float) -> None:
    """llama-server's ``predicted_per_token_ms`` / ``predicted_per_second``: ``predicted_ms`` (from the first
    token to the end) covers ``n - 1`` decodes; a one-token reply has no rate (not n tokens / ~0 ms)."""
    _, done, _ = run(make(), [1, 2, 3, 6, 11][:n], finish("length", n=n, predicted_ms=50.0))
    t = timings(done.counts)
    assert (t.predicted_n, t.predicted_ms, t.predicted_per_token_ms, t.predicted_per_second) == (
        n, 50.0, per_token_ms, per_second)
    one = timings(run(make(), [1], finish("length", n=1, predicted_ms=0.001))[1].counts)  # 1 us, as llama-server clamps
    assert one.predicted_per_second == 0.0 and one.predicted_per_token_ms == 0.0


def test_usage_has_no_injected_tokens_when_hooks_are_off() -> None:
    _, done, _ = run(make(), [1], finish("stop", n=1, prompt_ms=0.0, predicted_ms=0.0))
    body = json.loads(msgspec.json.encode(usage(done.counts)))
    assert body == {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5,
                     "prompt_tokens_details": {"cached_tokens": 0}}
    assert timings(done.counts).prompt_per_second == 0.0 and timings(done.counts).predicted_per_token_ms == 0.0


def test_stopped_before_generating() -> None:
    gen = make(hooks=True)
    done = gen.stopped_before("policy_says_no")
    assert done.finish_reason == "policy_says_no" and done.message.content == ""
    u = usage(done.counts)
    assert (u.prompt_tokens, u.completion_tokens, u.injected_tokens) == (4, 0, 0)
    assert gen.finished and gen.finish_info.finish_reason == "policy_says_no"


# -- logprobs ---------------------------------------------------------------------------------------

def lp_event(token: int, lp: float, alts: list[tuple[int, float]], entropy=1.5, margin=0.25) -> TokenEvent:
    return TokenEvent(token, logprob=lp, top=tuple(TopLogprob(t, v) for t, v in alts), entropy=entropy,
                      margin=margin)


def test_with_logprobs_every_accepted_token_is_a_piece() -> None:
    # half a character: a piece without logprobs yet; they go out with the token that completes the character
    gen = make(logprobs=True)
    first = lp_event(7, -0.5, [(7, -0.5), (1, -1.0)])
    item = gen.feed(first)
    assert isinstance(item, Piece) and item.deltas == [] and item.tokens == []
    second = lp_event(8, -0.1, [])
    assert gen.feed(second).tokens == [first, second]
    done = gen.feed(finish(n=2))
    assert done.tokens == [first, second]


def test_logprobs_leave_out_the_tokens_a_stop_string_took_and_wait_for_held_text() -> None:
    """A stop string's tokens are not in the content, so not in the logprobs (llama-server trims them), streamed
    or not; a token held back as the possible start of a stop string sends its logprobs once its text goes
    out (or at the end), never before."""
    def run(stop: str, tokens: list[int]) -> tuple[list[list[int]], Done]:
        gen = make(logprobs=True, stops=[stop])
        pieces = []
        for t in tokens:
            item = gen.feed(lp_event(t, -0.5, []))
            pieces.append([ev.token for ev in item.tokens] if isinstance(item, Piece) else [])
        return pieces, gen.feed(finish("stop", n=len(tokens)))

    pieces, done = run(" EN", [1, 2, 4, 5])  # "Hello wor EN...": " EN" stops it; "D" comes after
    assert done.message.content == "Hello wor" and [ev.token for ev in done.tokens] == [1, 2]
    assert pieces == [[1], [2], [], []]
    pieces, done = run("ld EN", [1, 2, 3, 6])  # "ld" held as the start of "ld EN", then " more": not a stop
    assert done.message.content == "Hello world more" and pieces == [[1], [2], [], [3, 6]]
    assert [ev.token for ev in done.tokens] == [1, 2, 3, 6]
    pieces, done = run("ld EN", [1, 2, 3])  # held to the end, not a stop: its logprobs ride on the end
    assert pieces == [[1], [2], []] and [ev.token for ev in done.tail] == [3]
    assert [ev.token for ev in done.tokens] == [1, 2, 3]
    pieces, done = run("\u00e9", [1, 7, 8])  # a stop string of one character in two tokens: both left out
    assert done.message.content == "Hello" and [ev.token for ev in done.tokens] == [1] and pieces == [[1], [], []]
    pieces, done = run("orld", [1, 2, 3])  # " wor" is partly content (" w"): kept; "ld" is all stop string
    assert done.message.content == "Hello w" and [ev.token for ev in done.tokens] == [1, 2]
    reply = ChatReply("m", make(logprobs=True), logprobs=True)
    gen = reply.generation
    chunks = [c for t in (1, 2) for c in reply.chunks(gen.feed(lp_event(t, -0.5, [])))]
    gen._pipeline._stop.stops = ("ld EN",)  # the next token is held: its logprobs go with the end
    chunks += reply.chunks(gen.feed(lp_event(3, -0.5, []))) + reply.chunks(gen.feed(finish("length", n=3)))
    streamed = [e.token for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert streamed == ["Hello", " wor", "ld"]


def test_chat_logprobs_shape_with_and_without_signals() -> None:
    ev = lp_event(7, -0.5, [(7, -0.5), (1, -1.25)])
    plain = json.loads(msgspec.json.encode(chat_logprobs([ev], make(logprobs=True).piece)))
    assert plain == {"content": [{"token": "\ufffd", "logprob": -0.5, "bytes": [0xC3], "top_logprobs": [
        {"token": "\ufffd", "logprob": -0.5, "bytes": [0xC3]},
        {"token": "Hello", "logprob": -1.25, "bytes": list(b"Hello")}]}]}
    signals = json.loads(msgspec.json.encode(chat_logprobs([ev], make(logprobs=True).piece, signals=True)))
    entry = signals["content"][0]
    assert entry["entropy"] == 1.5 and entry["margin"] == 0.25
    assert {k: v for k, v in entry.items() if k not in ("entropy", "margin")} == plain["content"][0]


def test_legacy_logprobs_shape() -> None:
    evs = [lp_event(1, -0.5, [(1, -0.5), (2, -2.0)]), lp_event(3, -0.25, [(3, -0.25)])]
    out = json.loads(msgspec.json.encode(legacy_logprobs(evs, make(logprobs=True).piece)))
    assert out == {"tokens": ["Hello", "ld"], "token_logprobs": [-0.5, -0.25],
                   "top_logprobs": [{"Hello": -0.5, " wor": -2.0}, {"ld": -0.25}], "text_offset": [0, 5]}


def test_every_logprobs_shape_renders_a_token_the_same_way() -> None:
    """Chat, legacy and llama-server's ``completion_probabilities`` take a token's text and bytes from one
    path (token_text): a lone lead byte is U+FFFD with its raw byte in each, only the fields differ."""
    ev = lp_event(7, -0.5, [(7, -0.5), (1, -1.25)])
    gen = make(logprobs=True)
    assert token_text(ev, gen.piece) == TokenText(7, "\ufffd", [0xC3], -0.5, [
        TopText(7, "\ufffd", [0xC3], -0.5), TopText(1, "Hello", list(b"Hello"), -1.25)])
    reply = NativeReply("m", gen, prompt_text="p", settings=generation_settings(SamplingParams(), n_predict=4),
                        n_probs=2)
    item = Piece([], [ev])  # the token's logprobs alone (the generation holds them until the character ends)
    [chunk] = reply.chunks(item)
    native = json.loads(msgspec.json.encode(chunk))["completion_probabilities"]
    assert native == [{"id": 7, "token": "\ufffd", "bytes": [0xC3], "logprob": -0.5, "top_logprobs": [
        {"id": 7, "token": "\ufffd", "bytes": [0xC3], "logprob": -0.5},
        {"id": 1, "token": "Hello", "bytes": list(b"Hello"), "logprob": -1.25}]}]
    chat = json.loads(msgspec.json.encode(chat_logprobs([ev], gen.piece)))["content"]
    assert [{k: v for k, v in e.items() if k != "id"} for e in native[0]["top_logprobs"]] == chat[0]["top_logprobs"]
    assert legacy_logprobs([ev], gen.piece).top_logprobs == [{"\ufffd": -0.5, "Hello": -1.25}]


def test_a_control_token_shows_its_text_in_every_logprobs_shape() -> None:
    """A control token (``<|im_end|>``) renders as nothing in the text, but logprobs show its text, as vLLM's do
    (llama-server's with ``--special``): the chosen token and every alternative, in the chat, legacy and
    llama-server shapes. Shown empty, two control alternatives looked alike, and a legacy ``top_logprobs`` dict
    kept only one of them."""
    def alts(*tokens: int) -> list[tuple[int, float]]:
        return [(t, -1.0 - i) for i, t in enumerate(tokens)]
    want = [("<|im_end|>", list(b"<|im_end|>")), ("<|im_start|>", list(b"<|im_start|>")), ("Hello", list(b"Hello"))]
    gen = make(logprobs=True, shown=shown)
    chat = ChatReply("m", gen, logprobs=True)
    [c1] = chat.chunks(gen.feed(lp_event(1, -0.5, alts(12, 13, 1))))
    entry = encode(c1)["choices"][0]["logprobs"]["content"][0]
    assert entry["token"] == "Hello" and [(a["token"], a["bytes"]) for a in entry["top_logprobs"]] == want
    done = gen.feed(finish(n=1))  # the end: the next token was <|im_end|>
    whole = encode(chat.completion(done))["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert [(a["token"], a["bytes"]) for a in whole] == want

    gen = make([1], logprobs=True, shown=shown)
    text = TextReply("m", gen, prompt_text="Hello", logprobs=True)
    assert text.chunks(gen.feed(lp_event(12, -0.5, alts(12, 13, 1)))) == []  # a control token, not the end:
    [c1] = text.chunks(gen.feed(lp_event(3, -0.5, alts(3))))  # its logprobs go with the next token's text
    lp = encode(c1)["choices"][0]["logprobs"]
    assert encode(c1)["choices"][0]["text"] == "ld" and lp["tokens"] == ["<|im_end|>", "ld"]
    assert lp["top_logprobs"] == [{"<|im_end|>": -1.0, "<|im_start|>": -2.0, "Hello": -3.0}, {"ld": -1.0}]
    assert lp["text_offset"] == [5, 5]  # text_offset indexes the text, which does not hold the control token

    gen = make([1], logprobs=True, shown=shown)
    native = NativeReply("m", gen, prompt_text="Hello", settings=generation_settings(SamplingParams(), n_predict=4),
                         n_probs=3)
    [chunk] = native.chunks(Piece([], [lp_event(13, -0.5, alts(12, 13, 1))]))  # the token's logprobs alone
    [probs] = encode(chunk)["completion_probabilities"]
    assert (probs["id"], probs["token"], probs["bytes"]) == (13, "<|im_start|>", list(b"<|im_start|>"))
    assert [(a["token"], a["bytes"]) for a in probs["top_logprobs"]] == want


def test_an_echoed_prompts_text_offset_counts_the_control_tokens_its_text_holds() -> None:
    """OpenAI's ``text_offset[i]``: where token ``i`` starts in ``text``. A control token typed in the prompt
    (``<|im_start|>``) is in the echoed text, so the tokens after it start after it; a BOS the tokenizer added
    is not, so it takes no room (it counted as nothing, and the offsets after a typed one pointed into it)."""
    gen = make([13, 1, 12, 2], logprobs=True, prompt_logprobs=1, shown=shown)
    prompt_text = "<|im_start|>Hello<|im_end|> wor"
    gen.feed(PromptLogprobs((TokenEvent(1, -1.0, ()), TokenEvent(12, -2.0, ()), TokenEvent(2, -3.0, ()))))
    reply = TextReply("m", gen, prompt_text=prompt_text, echo=True, logprobs=True)
    [echo, chunk] = [encode(c) for c in reply.chunks(gen.feed(lp_event(3, -0.5, [])))]
    lp = echo["choices"][0]["logprobs"]
    text = echo["choices"][0]["text"]
    assert text == prompt_text and lp["tokens"] == ["<|im_start|>", "Hello", "<|im_end|>", " wor"]
    assert lp["text_offset"] == [0, 12, 17, 27]
    assert [text[o:o + len(t)] for o, t in zip(lp["text_offset"], lp["tokens"], strict=True)] == lp["tokens"]
    assert chunk["choices"][0]["logprobs"]["text_offset"] == [len(prompt_text)]
    done = gen.feed(finish("length", n=1))
    whole = encode(TextReply("m", gen, prompt_text=prompt_text, echo=True, logprobs=True).completion(done))
    assert whole["choices"][0]["logprobs"]["text_offset"] == [0, 12, 17, 27, 31]
    assert whole["choices"][0]["text"][31:] == "ld"
    # a BOS the tokenizer put before "Hello": in the tokens, not in the text
    gen = make([14, 1], logprobs=True, prompt_logprobs=1, shown=shown)
    gen.feed(PromptLogprobs((TokenEvent(1, -1.0, ()),)))
    done = gen.feed(finish("length", n=0))
    whole = encode(TextReply("m", gen, prompt_text="Hello", echo=True, logprobs=True).completion(done))
    lp = whole["choices"][0]["logprobs"]
    assert lp["tokens"] == ["<s>", "Hello"] and lp["text_offset"] == [0, 0]


def test_native_answer_is_truncated_only_when_the_context_ended_it() -> None:
    """llama-server's ``truncated``: the generation stopped at the end of the context (4 prompt tokens + a
    budget of 32 fill a context of 36), not at the request's own n_predict, nor at a stop."""
    def answer(reason: str, n_ctx: int) -> bool:
        gen = make()
        reply = NativeReply("m", gen, prompt_text="p", settings=generation_settings(SamplingParams(), n_predict=-1),
                            n_ctx=n_ctx)
        _, done, _ = run(gen, [1], finish(reason, n=1))
        return reply.answer(done).truncated
    assert answer("length", 36) and answer("length", 20)
    assert not answer("length", 37) and not answer("stop", 36) and not answer("length", 0)


# -- replies ----------------------------------------------------------------------------------------

def encode(obj) -> dict:
    return json.loads(msgspec.json.encode(obj))


def test_chat_stream_chunks() -> None:
    gen = make(logprobs=True)
    reply = ChatReply("m", gen, logprobs=True, include_usage=True, created=5)
    chunks = [encode(c) for c in reply.first_chunks()]
    ev = lp_event(1, -0.5, [])
    chunks += [encode(c) for c in reply.chunks(gen.feed(ev))]
    chunks += [encode(c) for c in reply.chunks(gen.feed(finish(n=1)))]
    head = {"id": reply.id, "object": "chat.completion.chunk", "created": 5, "model": "m",
            "system_fingerprint": "skippy-trio"}
    assert reply.id.startswith("chatcmpl-")
    assert [{k: c[k] for k in head} for c in chunks] == [head] * 4
    assert chunks[0]["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                     "finish_reason": None}]
    assert chunks[1]["choices"][0]["delta"] == {"content": "Hello"}
    assert chunks[1]["choices"][0]["logprobs"]["content"][0]["token"] == "Hello"
    assert chunks[2]["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]
    assert chunks[3]["choices"] == [] and chunks[3]["usage"]["completion_tokens"] == 1
    assert chunks[3]["timings"]["predicted_n"] == 1
    assert "usage" not in chunks[2] and "timings" not in chunks[0] and "timings" not in chunks[1]
    assert chunks[2]["timings"]["predicted_n"] == 1  # the finish chunk's, as llama-server's (its web UI reads it)


def test_hook_events_ride_on_the_chunk_where_they_happen_and_the_completion_lists_them() -> None:
    window = {"token_count": 2, "mean_entropy": 1.0, "max_entropy": 1.5, "mean_margin": 0.5, "min_margin": 0.1,
              "high_entropy_count": 1, "repetition_count": 0}

    def streamed(hook_events: bool):
        gen = make(logprobs=True, hooks=True, hook_events=hook_events,
                   before_chat=HookEvent("before_chat", "inject", text=" psst", injected_tokens=2))
        reply = ChatReply("m", gen, logprobs=True)
        chunks = [encode(c) for c in reply.first_chunks()]
        chunks += [encode(c) for c in reply.chunks(gen.feed(lp_event(1, -0.5, [])))]
        item = gen.feed(HookEvent("mid_generation", "inject", text=" Wait.", injected_tokens=2, entropy=2.5,
                                  margin=0.1, window=window))
        if item is not None:
            chunks += [encode(c) for c in reply.chunks(item)]
        chunks += [encode(c) for c in reply.chunks(gen.feed(lp_event(2, -0.25, [])))]
        item = gen.feed(HookEvent("mid_generation", "stop", reason="enough", entropy=3.0, margin=0.0,
                                  window=window))
        if item is not None:
            chunks += [encode(c) for c in reply.chunks(item)]
        done = gen.feed(finish("enough", n=2, stopped_by_hook=True))
        chunks += [encode(c) for c in reply.chunks(done)]
        return chunks, encode(reply.completion(done))

    chunks, completion = streamed(True)
    assert [c["choices"][0].get("hook_events") for c in chunks] == [
        [{"event": "before_chat", "action": "inject", "position": 0, "text": " psst", "injected_tokens": 2}],
        None,
        [{"event": "mid_generation", "action": "inject", "position": 1, "text": " Wait.", "injected_tokens": 2,
          "entropy": 2.5, "margin": 0.1, "window": window}],
        None,
        [{"event": "mid_generation", "action": "stop", "position": 2, "reason": "enough", "entropy": 3.0,
          "margin": 0.0, "window": window}],
        None]
    assert [c["choices"][0]["delta"] for c in chunks] == [{"role": "assistant", "content": ""}, {"content": "Hello"},
                                                          {}, {"content": " wor"}, {}, {}]
    assert [e["position"] for e in completion["choices"][0]["hook_events"]] == [0, 1, 2]
    assert completion["choices"][0]["message"]["content"] == "Hello wor"
    # not asked (or hooks off for the request): no field anywhere
    chunks, completion = streamed(False)
    assert not any("hook_events" in c["choices"][0] for c in chunks)
    assert "hook_events" not in completion["choices"][0] and len(chunks) == 4

def test_a_streamed_tool_call_delta() -> None:
    allowed = {"get_weather"}
    gen = make(parser=EmulatedToolParser(allowed))
    reply = ChatReply("m", gen)
    deltas = []
    for t in CALL[:2]:
        item = gen.feed(TokenEvent(t))
        deltas += [c.choices[0].delta for c in reply.chunks(item)] if item else []
    deltas += [c.choices[0].delta for c in reply.chunks(gen.feed(finish(n=2)))]
    calls = [encode(d)["tool_calls"] for d in deltas if "tool_calls" in d]
    first = calls[0][0]
    assert first["index"] == 0 and first["type"] == "function" and first["id"]
    assert first["function"]["name"] == "get_weather"
    args = "".join(c[0]["function"]["arguments"] for c in calls)
    assert json.loads(args) == {"city": "Paris"}
    assert all("id" not in c[0] and "type" not in c[0] for c in calls[1:])
    assert encode(deltas[-1]) == {}


@pytest.mark.parametrize("tokens, content", [(CALL[:2], None), ([1, 2], "Hello wor"), ([], None)])
def test_a_reply_that_may_call_tools_starts_with_content_null_and_never_sends_an_empty_string(tokens, content) -> None:
    """OpenAI starts a tool-call reply with ``{"role": "assistant", "content": null}`` and never sends an empty
    string: a client accumulating the deltas (the ``openai`` package's stream helpers) ends with ``content`` null,
    as the non-streamed reply has it (it ended with ``""``), and with the text when the model answers in text.
    A reply with neither text nor a call (cut before its first token) is ``null`` both ways (the non-streamed
    one said ``""``)."""
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    gen = make(parser=EmulatedToolParser({"get_weather"}))
    reply = ChatReply("m", gen, tools=True, created=1)
    chunks = reply.first_chunks()
    for t in tokens:
        item = gen.feed(TokenEvent(t))
        chunks += reply.chunks(item) if item else []
    done = gen.feed(finish(n=len(tokens)))
    chunks += reply.chunks(done)
    deltas = [encode(c)["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": None}
    assert all("content" not in d or d["content"] for d in deltas[1:])
    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(encode(c)))
    message = state.get_final_completion().choices[0].message
    assert message.content == content == encode(reply.completion(done))["choices"][0]["message"]["content"]
    assert bool(message.tool_calls) == (content is None and bool(tokens))
    # without tools (or with tool_choice "none") the stream starts as OpenAI starts a text reply
    assert encode(ChatReply("m", make()).first_chunks()[0])["choices"][0]["delta"] == {"role": "assistant",
                                                                                          "content": ""}


def test_an_empty_reply_without_tool_calls_has_empty_string_content() -> None:
    gen = make(stops=("TOOL_CALL",))  # the stop string is the first token: nothing is generated
    text, done, _ = run(gen, [9], finish(n=1))
    message = encode(ChatReply("m", gen, created=1).completion(done))["choices"][0]["message"]
    assert text == "" and message["content"] == "" and "tool_calls" not in message


def test_a_native_answer_names_its_slot_also_without_a_token() -> None:
    gen = make()  # llama-server's /completion: the end of generation was the first token sampled
    reply = NativeReply("m", gen, prompt_text="p", settings=generation_settings(SamplingParams(), n_predict=4),
                        slot_info=lambda: (-1, 0))  # read at the first token, which never came
    [answer] = reply.chunks(gen.feed(finish(n=0, slot=3)))
    assert encode(answer)["id_slot"] == 3


def test_chat_completion_message_and_null_content() -> None:
    allowed = {"get_weather"}
    gen = make(parser=EmulatedToolParser(allowed))
    _, done, _ = run(gen, CALL[:2])
    out = encode(ChatReply("m", gen, created=1).completion(done))
    choice = out["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"] is None
    assert "reasoning_content" not in choice["message"]
    assert choice["message"]["tool_calls"][0]["type"] == "function"
    assert choice["logprobs"] is None and choice["finish_reason"] == "tool_calls"
    assert out["object"] == "chat.completion" and set(out) == {
        "id", "object", "created", "model", "system_fingerprint", "choices", "usage", "timings"}


def test_text_replies_echo_and_usage_chunk_without_timings() -> None:
    gen = make([1, 2], logprobs=True, prompt_logprobs=2)  # prompt "Hello wor"
    reply = TextReply("m", gen, prompt_text="Hello wor", echo=True, logprobs=True, include_usage=True, created=1)
    assert reply.first_chunks() == [] and not reply.ready()  # the echo chunk waits for the prompt's scores
    assert gen.feed(PromptLogprobs((TokenEvent(2, -1.5, (TopLogprob(2, -1.5), TopLogprob(3, -2.0))),))) is None
    assert reply.ready()
    chunks = [encode(c) for c in reply.chunks(gen.feed(lp_event(3, -0.5, [])))]
    done = gen.feed(finish(n=1))
    chunks += [encode(c) for c in reply.chunks(done)]
    assert [c["choices"][0]["text"] for c in chunks[:3]] == ["Hello wor", "ld", ""]
    assert chunks[0]["choices"][0]["logprobs"] == {  # the first prompt token has no logprob (OpenAI: null)
        "tokens": ["Hello", " wor"], "token_logprobs": [None, -1.5],
        "top_logprobs": [None, {" wor": -1.5, "ld": -2.0}], "text_offset": [0, 5]}
    assert chunks[1]["choices"][0]["logprobs"]["tokens"] == ["ld"]
    assert chunks[1]["choices"][0]["logprobs"]["text_offset"] == [9]  # after the prompt text
    assert chunks[2]["choices"][0]["finish_reason"] == "stop" and chunks[2]["choices"][0]["logprobs"] is None
    assert chunks[3]["choices"] == [] and "usage" in chunks[3] and "timings" not in chunks[3]
    full = encode(TextReply("m", gen, prompt_text="Hello wor", echo=True, logprobs=True).completion(done))
    lp = full["choices"][0]["logprobs"]
    assert full["choices"][0]["text"] == "Hello world"
    assert (lp["tokens"], lp["token_logprobs"], lp["text_offset"]) == (["Hello", " wor", "ld"], [None, -1.5, -0.5],
                                                                       [0, 5, 9])
    assert full["object"] == "text_completion" and "timings" in full


def test_text_echo_without_logprobs_is_sent_first_and_text_offset_counts_from_the_prompt() -> None:
    gen = make([1], logprobs=True)
    reply = TextReply("m", gen, prompt_text="Hello", echo=True, logprobs=False, created=1)
    assert [encode(c)["choices"][0]["text"] for c in reply.first_chunks()] == ["Hello"]
    noecho = TextReply("m", gen, prompt_text="Hello", logprobs=True, created=1)
    [chunk] = noecho.chunks(gen.feed(lp_event(2, -0.5, [])))
    [chunk2] = noecho.chunks(gen.feed(lp_event(3, -0.5, [])))
    assert chunk.choices[0].logprobs.text_offset == [5] and chunk2.choices[0].logprobs.text_offset == [9]


def test_text_offset_counts_a_character_of_several_tokens_once() -> None:
    """OpenAI's ``text_offset``: a character whose bytes span tokens starts them all; the offsets never go back
    and stay within the text (each half counted as a U+FFFD went past it, and an echo's went backwards)."""
    gen = make([7, 8], logprobs=True, prompt_logprobs=2)  # prompt "\xe9" (e-acute): two tokens
    reply = TextReply("m", gen, prompt_text="\xe9", echo=True, logprobs=True, created=1)
    gen.feed(PromptLogprobs((TokenEvent(8, -1.5, ()),)))
    streamed = []
    for t in (7, 8, 1, 7, 8):
        streamed += [encode(c) for c in reply.chunks(gen.feed(lp_event(t, -0.5, [])))]
    done = gen.feed(finish("length", n=5))
    text = "\xe9\xe9Hello\xe9"
    offsets = [o for c in streamed for o in (c["choices"][0]["logprobs"] or {}).get("text_offset", [])]
    assert offsets == [0, 0, 1, 1, 2, 7, 7]
    whole = encode(TextReply("m", gen, prompt_text="\xe9", echo=True, logprobs=True).completion(done))
    assert whole["choices"][0]["text"] == text and whole["choices"][0]["logprobs"]["text_offset"] == offsets
    # half a character that the next token does not finish is a U+FFFD of its own: the next token starts after it
    gen = make([1], logprobs=True)
    reply = TextReply("m", gen, prompt_text="", logprobs=True)
    for t in (7, 1, 12, 7, 12, 8):
        reply.chunks(gen.feed(lp_event(t, -0.5, [])))
    done = gen.feed(finish("length", n=6))
    whole = encode(TextReply("m", gen, prompt_text="", logprobs=True).completion(done))
    assert whole["choices"][0]["text"] == "\ufffdHello\xe9"
    assert whole["choices"][0]["logprobs"]["text_offset"] == [0, 1, 6, 6, 6, 6]


def test_choices_interleave_with_their_index_and_count_usage_once_per_prompt() -> None:
    gens = [make([1, 2, 3], logprobs=False) for _ in range(4)]
    replies = [ChatReply("m", g, index=i, id="chatcmpl-x", created=1) for i, g in enumerate(gens)]
    choices = Choices(replies, [0, 0, 1, 1], include_usage=True)  # two prompts, two choices each
    first = [encode(c) for c in choices.first_chunks()]
    assert [c["choices"][0]["index"] for c in first] == [0, 1, 2, 3] and {c["id"] for c in first} == {"chatcmpl-x"}
    out = []
    for i in (1, 0, 3, 2):
        out += choices.chunks(i, gens[i].feed(TokenEvent(1 + i % 3)))
    dones = []
    for i, cached in ((2, 0), (0, 5), (1, 1), (3, 1)):
        done = gens[i].feed(finish(n=1, cached_tokens=cached, predicted_ms=10.0 * (i + 1)))
        dones.append((i, done))
        out += choices.chunks(i, done)
    chunks = [encode(c) for c in out]
    assert [c["choices"][0]["index"] for c in chunks if c["choices"]][:4] == [1, 0, 3, 2]
    assert chunks[-1]["choices"] == [] and [c for c in chunks if "usage" in c] == [chunks[-1]]
    usage = chunks[-1]["usage"]
    # prompts of 3 tokens, counted once per prompt; every choice's token; the first choices' cached tokens
    assert usage == {"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10,
                     "prompt_tokens_details": {"cached_tokens": 5}}
    assert chunks[-1]["timings"]["predicted_n"] == 4 and chunks[-1]["timings"]["predicted_ms"] == 40.0
    # every choice's one token came from its prompt's logits: no decode step, no rate
    assert chunks[-1]["timings"]["predicted_per_second"] == chunks[-1]["timings"]["predicted_per_token_ms"] == 0.0
    whole = encode(Choices(replies, [0, 0, 1, 1]).completion([d for _, d in sorted(dones)]))
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2, 3] and whole["usage"] == usage
    assert [c["message"]["content"] for c in whole["choices"]] == ["Hello", " wor", "ld", "Hello"]


def test_choices_timings_sum_every_choices_draft_counts_as_predicted_n() -> None:
    """n > 1: the request's ``timings`` keep ``draft_n`` / ``draft_n_accepted`` (they were dropped), summed over
    the choices as ``predicted_n``; without speculation they stay out."""
    for drafts, accepted in (((0, 0), (0, 0)), ((6, 4), (3, 1))):
        gens = [make([1, 2, 3]) for _ in range(2)]
        replies = [TextReply("m", g, index=i, id="cmpl-x", created=1) for i, g in enumerate(gens)]
        dones = [run(g, [1, 2], finish(n=2, draft_tokens=d, draft_accepted=a))[1]
                 for g, d, a in zip(gens, drafts, accepted, strict=True)]
        whole = encode(Choices(replies, [0, 0]).completion(dones))
        t = {k: whole["timings"][k] for k in ("draft_n", "draft_n_accepted") if k in whole["timings"]}
        assert t == ({"draft_n": 10, "draft_n_accepted": 4} if drafts[0] else {})
        assert whole["timings"]["predicted_n"] == 4


def test_choices_count_a_prompts_before_chat_injection_once_and_every_choices_own() -> None:
    # two choices of one prompt whose before_chat hook appended 2 tokens; the choices injected 3 and 5 more
    gens = [make(list(range(10)), hooks=True, injected=2) for _ in range(2)]
    replies = [ChatReply("m", g, index=i, id="chatcmpl-x", created=1) for i, g in enumerate(gens)]
    dones = [run(g, [1], finish("stop", n=1, injected_tokens=k))[1] for g, k in zip(gens, (3, 5), strict=True)]
    usage = encode(Choices(replies, [0, 0]).completion(dones))["usage"]
    assert usage["injected_tokens"] == 2 + 3 + 5 and usage["prompt_tokens"] == 8


def test_replies_read_like_the_dicts_they_encode_to() -> None:
    gen = make()
    _, done, _ = run(gen, [1])
    reply = ChatReply("m", gen).completion(done)
    assert reply["choices"][0]["message"]["content"] == "Hello"
    assert reply["usage"]["completion_tokens"] == 1
    assert "injected_tokens" not in reply["usage"] and reply["usage"].get("injected_tokens", 0) == 0
    with pytest.raises(KeyError):
        reply["usage"]["injected_tokens"]
    finish_chunk = ChatReply("m", gen).chunks(done)[-1]
    assert not finish_chunk["choices"][0]["delta"] and finish_chunk["choices"][0]["delta"].get("content", "") == ""


def test_an_empty_prompt_is_refused_before_it_can_wait_forever() -> None:
    with pytest.raises(InvalidRequest) as err:
        Generation(1, [], SamplingParams(), 4, piece=piece, parser=ContentParser())
    assert err.value.param == "prompt"


def test_generation_settings_show_every_sampler_as_it_ran() -> None:
    """``/props``, ``/slots`` and ``/completion``'s ``generation_settings``: DRY, XTC, mirostat, typical...
    as the request (or the server's defaults) set them; they used to show llama-server's defaults always."""
    params = SamplingParams(mirostat=2, mirostat_tau=4.0, mirostat_eta=0.2, dry_multiplier=0.8, dry_base=2.0,
                            dry_allowed_length=3, dry_penalty_last_n=128, xtc_probability=0.5, xtc_threshold=0.2,
                            typical_p=0.9, top_n_sigma=2.0, dynatemp_range=0.5, dynatemp_exponent=1.5, min_keep=2)
    s = generation_settings(params, n_predict=8)
    assert (s.mirostat, s.mirostat_tau, s.mirostat_eta) == (2, 4.0, 0.2)
    assert (s.dry_multiplier, s.dry_base, s.dry_allowed_length, s.dry_penalty_last_n) == (0.8, 2.0, 3, 128)
    assert (s.xtc_probability, s.xtc_threshold, s.typical_p, s.top_n_sigma) == (0.5, 0.2, 0.9, 2.0)
    assert (s.dynatemp_range, s.dynatemp_exponent, s.min_keep) == (0.5, 1.5, 2)
