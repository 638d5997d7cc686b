"""The scanner of formats whose output is a sequence of headed messages (gpt-oss's Harmony, Muse Glimmer).

Each message is ``HEADER BODY END``: the header (a format's regular expression, ending in its message
marker) decides where the body goes (a subclass's :meth:`MessageScanner._open` sets the route), the body runs
to one of the format's end markers or to the next message's start marker. Text that is no header is content,
a stray start marker too. Routes: ``content``; ``reasoning``; ``raw`` (content, header and end marker
included: ``reasoning_format: none``, a call the request does not allow); ``call`` (the subclass's
:meth:`MessageScanner._call_text`); ``drop``. With ``reasoning_format: deepseek-legacy`` a reasoning body is
also content, as its end marker is.
"""

from __future__ import annotations

import re
from typing import Any

from skippy.engine.chat.formats.base import Delta
from skippy.engine.chat.formats.core import HEADER_LIMIT, ToolScanner, find_first
from skippy.engine.output.textstream import partial_suffix

#: how far the header-mode buffer may run before the text already read is dropped (characters)
_KEEP = 4096


class MessageScanner(ToolScanner):
    """Routes headed messages (see the module docstring). Subclasses set :attr:`header` (matching a whole header,
    ``MESSAGE`` last), :attr:`message` (that marker), :attr:`start` (the marker that may begin the next message),
    :attr:`ends`, :attr:`may_be_header` (True while a text can still grow into a header) and :meth:`_open`.

    ``reasoning_format`` is set by :class:`~skippy.engine.chat.formats.core.ChatParser` (the syntax's
    ``own_reasoning``).
    """

    reasoning_format = "auto"
    header: re.Pattern[str]
    message: str
    start: str
    ends: tuple[str, ...]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.mode = "header"
        self.route = "content"  # content | reasoning | raw | call | drop
        self._stops = (*self.ends, self.start)  # where a body ends

    def skip_leading_space(self) -> None:  # the reasoning splitter is off: headers decide
        pass

    def feed(self, text: str, final: bool = False) -> list[Delta]:
        self.buf += text
        while self._step(final):
            pass
        if self.mode == "header" and self.pos > _KEEP:
            self.buf, self.pos = self.buf[self.pos:], 0
        out, self.out = self.out, []
        return out

    def finish(self) -> list[Delta]:
        return self.feed("", final=True)

    def _emit(self, route: str, text: str) -> None:
        if not text:
            return
        if route in ("content", "raw"):
            self.out.append(Delta(content=text))
        elif route == "reasoning":
            self.out.append(Delta(reasoning_content=text))
        elif route == "call":
            self._call_text(text)

    def may_be_header(self, text: str) -> bool:
        """True while ``text`` (what follows the last message) can still grow into a header."""
        raise NotImplementedError

    def _call_text(self, text: str) -> None:
        """A piece of a call message's body (the route ``call``)."""
        raise NotImplementedError

    def _message_end(self) -> None:
        """The current message's body ended (before its end marker is read)."""

    def _open(self, m: re.Match[str]) -> None:
        """A header ``m`` was read: set :attr:`route` (and emit what the route keeps of the header)."""
        raise NotImplementedError

    def _step(self, final: bool) -> bool:
        buf, pos, message, start = self.buf, self.pos, self.message, self.start
        if self.mode == "header":
            if pos >= len(buf):
                return False
            rest = buf[pos:]  # every test below answers alike whatever the split (the window is bounded)
            i = buf.find(message, pos, pos + HEADER_LIMIT + len(message)) if self.may_be_header(rest) else -1
            m = self.header.fullmatch(buf, pos, i + len(message)) if i >= 0 else None
            if m is not None:
                self.pos, self.mode = m.end(), "body"
                self._open(m)
                return True
            if i >= 0 or final or len(rest) > HEADER_LIMIT + len(message) or not self.may_be_header(rest):
                self.mode, self.route = "body", "content"  # no header: plain content
                if buf.startswith(start, pos):  # a stray start marker is content too (and the scan moves on)
                    self._emit("content", start)
                    self.pos += len(start)
                return True
            return False
        stops = self._stops
        i, marker = find_first(buf, stops, pos)
        if i < 0:
            end = len(buf) if final else len(buf) - partial_suffix(buf[pos:], stops)
            self._body(buf[pos:end])
            self.pos = end
            return False
        self._body(buf[pos:i])
        self._message_end()
        if marker == start:
            self.pos = i
        else:
            self.pos = i + len(marker)
            if self.route == "raw" or (self.route == "reasoning" and self.reasoning_format == "deepseek-legacy"):
                self._emit("content", marker)
        self.mode = "header"
        return True

    def _body(self, text: str) -> None:
        self._emit(self.route, text)
        if self.route == "reasoning" and self.reasoning_format == "deepseek-legacy":
            self._emit("content", text)
