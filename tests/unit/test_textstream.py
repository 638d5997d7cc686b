"""Utf8Stream, partial_suffix and StopMatcher (sans-IO, no event loop)."""

import itertools

import pytest

from skippy.engine.output.textstream import StopMatcher, Utf8Stream, partial_suffix

REPLACEMENT = "\ufffd"


# --- Utf8Stream --------------------------------------------------------------


@pytest.mark.parametrize("text", ["é", "日", "😀", "aé日😀z", "😀😀", "naïve 日本語 🎉!"])
def test_utf8_every_two_way_split_never_emits_replacement(text):
    data = text.encode("utf-8")
    for cut in range(len(data) + 1):
        s = Utf8Stream()
        out = [s.feed(data[:cut]), s.feed(data[cut:]), s.flush()]
        joined = "".join(out)
        assert REPLACEMENT not in joined, (cut, out)
        assert joined == text


@pytest.mark.parametrize("text", ["é", "日", "😀", "a😀日é"])
def test_utf8_byte_by_byte(text):
    data = text.encode("utf-8")
    s = Utf8Stream()
    outs = [s.feed(data[i:i + 1]) for i in range(len(data))]
    assert all(REPLACEMENT not in o for o in outs)
    assert "".join(outs) == text
    assert s.flush() == ""
    # a multi-byte character is emitted once, whole, at its last byte
    if len(text) == 1 and len(data) > 1:
        assert outs[:-1] == [""] * (len(data) - 1)
        assert outs[-1] == text


def test_utf8_all_splits_into_three_pieces():
    data = "x😀y".encode()  # 6 bytes
    for i, j in itertools.combinations(range(len(data) + 1), 2):
        s = Utf8Stream()
        joined = s.feed(data[:i]) + s.feed(data[i:j]) + s.feed(data[j:]) + s.flush()
        assert joined == "x😀y"


def test_utf8_incomplete_char_held_until_complete():
    s = Utf8Stream()
    assert s.feed(b"ab\xf0\x9f") == "ab"
    assert s.feed(b"\x98") == ""
    assert s.feed(b"\x80c") == "😀c"


@pytest.mark.parametrize("partial", [b"\xc3", b"\xe6\x97", b"\xf0\x9f\x98"])
def test_utf8_flush_drops_an_incomplete_trailing_char(partial):
    s = Utf8Stream()
    assert s.feed(b"ok" + partial) == "ok"
    assert s.pending == partial
    assert s.flush() == ""  # the character the end cut is dropped, never U+FFFD
    assert s.pending == b"" and s.feed(b"x") == "x"  # reset: the dropped bytes do not reach later text


def test_utf8_flush_after_an_invalid_byte_keeps_its_replacement():
    s = Utf8Stream()
    assert s.feed(b"a\xf0\x9fb\xe6") == "a" + REPLACEMENT + "b"  # an interrupted sequence: U+FFFD at once
    assert s.flush() == ""


def test_utf8_invalid_byte_becomes_replacement_immediately():
    s = Utf8Stream()
    assert s.feed(b"a\xffb") == "a" + REPLACEMENT + "b"
    assert s.flush() == ""


# --- partial_suffix ----------------------------------------------------------


@pytest.mark.parametrize(("text", "words", "n"), [
    ("Hello TOOL_C", ["TOOL_CALL"], 6),        # the start of a marker
    ("Hello T", ["TOOL_CALL"], 1),
    ("Hello", ["TOOL_CALL"], 0),
    ("TOOL_CALL", ["TOOL_CALL"], 0),           # a whole word is not partial
    ("x</thi", ["</think>"], 5),
    ("ab", ["b", "abc"], 2),                   # the longest over every word
    ("xab", ["abc", "bcd"], 2),
    ("", ["abc"], 0),
    ("abc", [], 0),
    ("abc", ["", "c"], 0),                     # empty and one-character words never hold anything
    ("aaa", ["aaaa"], 3),                      # the suffix may be the whole text
    ("aab", ["ab", "aab!"], 3),
])
def test_partial_suffix(text, words, n):
    assert partial_suffix(text, words) == n
    assert partial_suffix(text, tuple(words)) == n == partial_suffix(text, iter(words))


def test_partial_suffix_is_the_longest_suffix_prefix_pair_for_every_small_case():
    def brute(text, words):
        return max((k for w in words for k in range(1, min(len(text), len(w) - 1) + 1)
                    if w.startswith(text[len(text) - k:])), default=0)
    for text in ("".join(p) for r in range(5) for p in itertools.product("ab", repeat=r)):
        for words in (["ab"], ["aab", "bab"], ["abab"], ["ba", "aaaa"]):
            assert partial_suffix(text, words) == brute(text, words), (text, words)


def test_partial_suffix_refuses_a_bare_string():
    with pytest.raises(TypeError):
        partial_suffix("TOOL_C", "TOOL_CALL")


# --- StopMatcher -------------------------------------------------------------


def test_stop_partial_prefix_held_then_released():
    m = StopMatcher(["</s>"])
    assert m.feed("a<") == ("a", False)
    assert m.feed("/") == ("", False)
    assert m.feed("x") == ("</x", False)
    assert not m.stopped
    assert m.flush() == ""


def test_stop_text_not_returned_and_rest_dropped():
    m = StopMatcher(["STOP"])
    assert m.feed("hello STOP world") == ("hello ", True)
    assert m.stopped
    assert m.feed("more text") == ("", True)
    assert m.flush() == ""


def test_stop_split_across_many_feeds():
    m = StopMatcher(["<|end|>"])
    outs = [m.feed(c) for c in "ab<|end|>cd"]
    assert outs[:2] == [("a", False), ("b", False)]
    # every piece of the stop string is held back, never emitted
    assert [o for o, _ in outs[2:8]] == [""] * 6
    assert [st for _, st in outs[2:8]] == [False] * 6
    assert outs[8] == ("", True)  # the '>' completes the stop
    assert outs[9:] == [("", True), ("", True)]
    assert m.stopped
    assert "".join(o for o, _ in outs) == "ab"


def test_stop_earliest_of_several_wins():
    m = StopMatcher(["world", "lo"])
    assert m.feed("hello world") == ("hel", True)
    m = StopMatcher(["zzz", "b", "a"])
    assert m.feed("xxabzzz") == ("xx", True)


def test_matched_names_the_stop_string_that_ended_the_text():
    m = StopMatcher(["zzz", "b", "a"])
    assert m.matched == ""
    m.feed("xxabzzz")
    assert m.matched == "a"  # the earliest, not the last one tried
    m = StopMatcher(["abcd", "bc"])
    m.feed("xab")
    assert m.matched == ""  # only held back so far
    m.feed("c")
    assert m.matched == "bc"
    m = StopMatcher(["q"])
    m.feed("no stop here")
    m.flush()
    assert m.matched == ""


def test_stop_earliest_wins_when_longer_stop_was_pending():
    m = StopMatcher(["abcd", "bc"])
    assert m.feed("xab") == ("x", False)  # "ab" could start "abcd"
    assert m.feed("c") == ("a", True)  # "bc" completes inside the held "abc"


def test_stop_hold_back_only_proper_prefix_suffix():
    m = StopMatcher(["abc"])
    assert m.feed("xxab") == ("xx", False)
    assert m.feed("d") == ("abd", False)
    assert m.feed("a") == ("", False)
    assert m.feed("bc tail") == ("", True)


def test_stop_held_prefix_longest_of_several_stops():
    m = StopMatcher(["<end>", "<e"])
    # "<" is a prefix of both; nothing can be emitted yet
    assert m.feed("hi <") == ("hi ", False)
    assert m.feed("e") == ("", True)


def test_flush_returns_held_text_when_no_stop():
    m = StopMatcher(["</s>"])
    assert m.feed("end </") == ("end ", False)
    assert m.flush() == "</"
    assert m.flush() == ""


def test_empty_stop_strings_ignored():
    m = StopMatcher(["", ""])
    assert m.stops == ()
    assert m.feed("abc") == ("abc", False)
    assert not m.stopped
    m = StopMatcher(["", "x"])
    assert m.stops == ("x",)
    assert m.feed("abc") == ("abc", False)
    assert m.feed("yxz") == ("y", True)


def test_no_stops_passes_everything_through():
    m = StopMatcher([])
    assert m.feed("</s>") == ("</s>", False)
    assert m.flush() == ""


def test_concatenation_equals_truncated_text_for_any_split():
    text = "the answer is 42<|im_end|>junk"
    for cut in range(len(text) + 1):
        for cut2 in range(cut, len(text) + 1):
            m = StopMatcher(["<|im_end|>", "<|endoftext|>"])
            out = [m.feed(text[:cut])[0], m.feed(text[cut:cut2])[0], m.feed(text[cut2:])[0], m.flush()]
            assert "".join(out) == "the answer is 42"
            assert m.stopped


def test_include_keeps_the_matched_stop_string():
    """vLLM ``include_stop_str_in_output``: the text ends with the stop string (the longest at a tie)."""
    m = StopMatcher(["wor", "world", "!"], include=True)
    assert m.feed("hello ") == ("hello ", False)
    assert m.feed("wo") == ("", False)
    assert m.feed("rld and more") == ("world", True)
    assert m.feed("x") == ("", True)
    plain = StopMatcher(["world"])
    assert plain.feed("hello world") == ("hello ", True)
