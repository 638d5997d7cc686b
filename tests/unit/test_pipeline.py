"""OutputPipeline with a fake piece table (sans-IO: no model, no event loop)."""

import pytest

from skippy.engine.chat.formats import make_parser
from skippy.engine.chat.formats.base import ContentParser, Delta, ParsedMessage
from skippy.engine.output.pipeline import OutputPipeline

SMILE = "😀".encode()  # f0 9f 98 80
NIHON = "日".encode()  # e6 97 a5

PIECES = {
    1: b"Hello",
    2: b" wor",
    3: b"ld",
    # 😀 split over three tokens
    4: SMILE[:1],
    5: SMILE[1:3],
    6: SMILE[3:],
    # 日 split over two tokens
    7: NIHON[:2],
    8: NIHON[2:],
    # a stop string "<|end|>" split over tokens
    10: b"<|",
    11: b"en",
    12: b"d|>",
    13: b" after",
    14: b"<",
    15: b"x",
    16: b"",  # control token: renders as nothing
    17: "é".encode()[:1],
}


def piece(tok: int) -> bytes:
    return PIECES[tok]


def content(deltas: list[Delta]) -> str:
    assert all(not d.is_empty() for d in deltas), deltas
    assert all(not d.reasoning_content and not d.tool_calls for d in deltas)
    return "".join(d.content for d in deltas)


def run(tokens, stops=(), parser=None):
    p = OutputPipeline(piece, list(stops), parser or ContentParser())
    per_token = []
    for t in tokens:
        per_token.append(content(p.feed(t)))
        if p.stopped:
            break
    last, message = p.finish()
    return p, per_token, content(last), message


def test_plain_tokens_stream_immediately():
    p, outs, tail, msg = run([1, 2, 3])
    assert outs == ["Hello", " wor", "ld"]
    assert tail == ""
    assert msg == ParsedMessage(content="Hello world")
    assert p.text == "Hello world"
    assert not p.stopped


def test_multibyte_split_over_tokens():
    p, outs, tail, msg = run([1, 4, 5, 6, 7, 8, 3])
    assert outs == ["Hello", "", "", "😀", "", "日", "ld"]
    assert "\ufffd" not in "".join(outs)
    assert msg.content == "Hello😀日ld"


def test_incomplete_multibyte_at_finish_is_dropped():
    p, outs, tail, msg = run([1, 4, 5])
    assert outs == ["Hello", "", ""]
    assert tail == ""
    assert msg.content == "Hello" and p.text == "Hello"


def test_stop_string_across_tokens_sets_stopped_and_is_excluded():
    p = OutputPipeline(piece, ["<|end|>"], ContentParser())
    assert content(p.feed(1)) == "Hello"
    assert content(p.feed(10)) == ""
    assert not p.stopped
    assert content(p.feed(11)) == ""
    assert not p.stopped
    assert content(p.feed(12)) == ""
    assert p.stopped
    # tokens after the stop produce nothing
    assert p.feed(13) == []
    last, msg = p.finish()
    assert last == []
    assert msg.content == "Hello"
    assert p.text == "Hello"


def test_stop_after_multibyte_split():
    p, outs, tail, msg = run([7, 8, 10, 11, 12, 13], stops=["<|end|>"])
    assert p.stopped
    assert "".join(outs) + tail == "日"
    assert msg.content == "日"


def test_finish_flushes_held_back_text():
    # "<|en" could still become "<|end|>": held back until finish
    p = OutputPipeline(piece, ["<|end|>"], ContentParser())
    outs = [content(p.feed(t)) for t in (1, 10, 11)]
    assert outs == ["Hello", "", ""]
    last, msg = p.finish()
    assert content(last) == "<|en"
    assert msg.content == "Hello<|en"
    assert not p.stopped


def test_held_prefix_released_when_it_diverges():
    p = OutputPipeline(piece, ["<|end|>"], ContentParser())
    assert content(p.feed(14)) == ""
    assert content(p.feed(15)) == "<x"
    last, msg = p.finish()
    assert last == []
    assert msg.content == "<x"


def test_held_prefix_flushed_and_incomplete_char_dropped():
    p = OutputPipeline(piece, ["<|end|>"], ContentParser())
    for t in (1, 10, 17):
        p.feed(t)
    last, msg = p.finish()
    assert msg.content == "Hello<|"
    assert content(last) == "<|"


def test_empty_pieces_produce_no_deltas():
    p = OutputPipeline(piece, [], ContentParser())
    assert p.feed(16) == []
    assert content(p.feed(1)) == "Hello"
    assert p.feed(16) == []
    _, msg = p.finish()
    assert msg.content == "Hello"


@pytest.mark.parametrize("tokens,stops,expected", [
    ([1, 2, 3], [], "Hello world"),
    ([1, 4, 5, 6, 2, 3], ["<|end|>"], "Hello😀 world"),
    ([1, 10, 11, 12, 13], ["<|end|>"], "Hello"),
    ([1, 10, 11, 13], ["<|end|>"], "Hello<|en after"),
    ([1, 2, 3, 10, 11], ["<|end|>", "wor"], "Hello "),
    ([7, 8, 14, 15, 10], ["<|end|>"], "日<x<|"),
])
def test_deltas_concatenate_to_final_message(tokens, stops, expected):
    p, outs, tail, msg = run(tokens, stops=stops)
    assert "".join(outs) + tail == expected
    assert msg.content == expected
    assert p.text == expected


def test_with_chat_parser_content_only():
    parser = make_parser("content_only")
    p, outs, tail, msg = run([1, 4, 5, 6, 10, 11, 12, 13], stops=["<|end|>"], parser=parser)
    assert p.stopped
    assert "".join(outs) + tail == "Hello😀"
    assert msg.content == "Hello😀"
    assert msg.tool_calls == ()
