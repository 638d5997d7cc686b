"""Token bytes -> text, and stop-string hold-back (sans-IO).

:class:`Utf8Stream` decodes token pieces incrementally: a multi-byte
character split across tokens is emitted only once complete, never as
U+FFFD (invalid bytes that can never complete still become U+FFFD, as
Python's ``errors="replace"`` does). At the end of generation (``max_tokens``
cutting a character's bytes, an end token after half a character) the
incomplete trailing character is dropped, not sent as U+FFFD: the text ends
at the last whole character (token logprobs keep every token's own bytes).

:class:`StopMatcher` implements OpenAI ``stop``: the stop text is not
returned, and text that may be the start of a stop string is held back
until decided (llama-server's partial-stop behaviour). :func:`partial_suffix`
is that hold-back rule alone; the chat-format parsers hold back the start of
their markers and tags with it too.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable


def partial_suffix(text: str, words: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``words``.

    That suffix may still grow into a whole word (a stop string, a marker, a tag), so a stream holds
    it back until more text decides: ``partial_suffix("Hello TOOL_C", ["TOOL_CALL"])`` is 6. A whole word
    at the end is not partial (finding whole words is the caller's part): ``partial_suffix("ab", ["ab"])``
    is 0, as is any ``text`` against no words or only empty ones. ``words`` is a collection of strings:
    pass one word as ``(word,)`` (a bare string raises ``TypeError``: its characters are no words).
    """
    if isinstance(words, str):
        raise TypeError("partial_suffix takes a collection of words, not one string")
    best = 0
    for word in words:
        for n in range(min(len(word) - 1, len(text)), best, -1):
            if text.endswith(word[:n]):
                best = n
                break
    return best


class Utf8Stream:
    """Incremental UTF-8 decoder over token pieces (``bytes`` in, ``str`` out)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        """Decode ``data``; an incomplete trailing character is kept for later."""
        return self._decoder.decode(data)

    @property
    def pending(self) -> bytes:
        """The bytes of an incomplete trailing character held for the next piece (``b""`` when none)."""
        return self._decoder.getstate()[0]

    def flush(self) -> str:
        """End of stream: the incomplete trailing character, if any, is dropped (its bytes are the start
        of a valid UTF-8 sequence that never completed); returns the text still to emit (always ``""``:
        the decoder holds back nothing else). The stream is reset for reuse."""
        self._decoder.reset()
        return ""


class StopMatcher:
    """Finds the earliest stop string in streamed text.

    ``feed(text) -> (safe_text, stopped)``: ``safe_text`` may be emitted now;
    once ``stopped`` is true, everything from the stop string on is dropped
    and later feeds return ``("", True)``. ``flush()`` returns text held back
    at the end of generation (it was not a stop string after all). With
    ``include`` the matched stop string itself is kept (vLLM
    ``include_stop_str_in_output``); of stop strings matching at the same
    place, the longest.
    """

    def __init__(self, stops: list[str] | tuple[str, ...], *, include: bool = False) -> None:
        self.stops = tuple(s for s in stops if s)
        self.include = include
        self._held = ""
        self.stopped = False
        self.matched = ""  # the stop string that matched (llama-server's ``stopping_word``)

    def feed(self, text: str) -> tuple[str, bool]:
        if self.stopped:
            return "", True
        if not self.stops:
            return text, False
        buf = self._held + text
        # earliest full match of any stop string
        cut, end = -1, -1
        for s in self.stops:
            i = buf.find(s)
            if i != -1 and (cut == -1 or i < cut or (i == cut and i + len(s) > end)):
                cut, end, self.matched = i, i + len(s), s
        if cut != -1:
            self.stopped = True
            self._held = ""
            return buf[:end if self.include else cut], True
        hold = partial_suffix(buf, self.stops)  # what may still start a stop string
        self._held = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return "" if self.stopped else held
