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
until decided (llama-server's partial-stop behaviour).
"""

from __future__ import annotations

import codecs


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
        # hold back the longest suffix that is a proper prefix of a stop string
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:n]):
                    hold = n
                    break
        self._held = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return "" if self.stopped else held
