"""Per-request output pipeline (sans-IO): token ids -> OpenAI message deltas.

token -> piece bytes -> incremental UTF-8 decoding -> stop-string hold-back
-> chat-format partial parser -> :class:`Delta` objects. The same pipeline
serves streaming and non-streaming responses, so both give the same text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from skippy.engine.chat.formats.base import Delta, ParsedMessage, StreamParser
from skippy.engine.output.textstream import StopMatcher, Utf8Stream


class EarlyStopRule(Protocol):
    """Decides from the text so far that generation is complete (e.g. a finished tool call).

    ``feed(text) -> bool``; once true, ``keep`` is how many characters of
    all text fed belong to the answer, and ``finish_reason`` the generation's finish
    (``stop``; ``length`` for a limit, as llama-server's ``n_indent``).
    """

    keep: int | None
    finish_reason: str

    def feed(self, text: str) -> bool: ...


class OutputPipeline:
    """Turns sampled tokens into deltas for one request.

    ``piece(token) -> bytes`` gives a token's output bytes; ``stops`` are
    the request's stop strings plus any the chat format adds (``include_stop``:
    a matched one is kept in the text); ``early_stop`` an optional :class:`EarlyStopRule`.
    """

    def __init__(self, piece: Callable[[int], bytes], stops: list[str] | tuple[str, ...],
                 parser: StreamParser, early_stop: EarlyStopRule | None = None, *, include_stop: bool = False) -> None:
        self._piece = piece
        self._utf8 = Utf8Stream()
        self._stop = StopMatcher(stops, include=include_stop)
        self._parser = parser
        self._early = early_stop
        self._early_stopped = False
        self.text = ""  # everything that passed the stop matcher (what the parser saw)
        self.fed = 0  # characters decoded from the tokens so far (the stop matcher's input)

    @property
    def stopped(self) -> bool:
        """True once a stop string matched or the early-stop rule fired: the caller ends the generation."""
        return self._stop.stopped or self._early_stopped

    @property
    def finish_reason(self) -> str:
        """The finish a stop gives: the early-stop rule's once it fired, else ``stop`` (a stop string)."""
        return self._early.finish_reason if self._early_stopped and self._early is not None else "stop"

    @property
    def stopping_word(self) -> str:
        """The stop string that ended the generation ("" when none did)."""
        return self._stop.matched

    def feed(self, token: int) -> list[Delta]:
        """Consume one sampled token; return the deltas that are now safe to emit."""
        if self.stopped:
            return []
        text = self._utf8.feed(self._piece(token))
        if not text:
            return []
        self.fed += len(text)
        safe, _ = self._stop.feed(text)
        return self._parse(safe)

    def finish(self, *, truncated: bool = False) -> tuple[list[Delta], ParsedMessage]:
        """End of generation: flush held text; return the last deltas and the message.

        ``truncated``: the token limit ended it (finish ``length``); the parser then drops the syntax the
        limit cut instead of giving it back as content (:meth:`StreamParser.finish`). A stop string that
        ended it cuts the same way: a tool call it cut is dropped (its arguments were never whole JSON), not
        reported with them or left as content.

        The bytes of a character the end cut (``max_tokens`` inside a multi-byte character) are
        dropped, never sent as U+FFFD; ``text`` and the message end at the last whole character.
        """
        deltas: list[Delta] = []
        if not self.stopped:
            tail, _ = self._stop.feed(self._utf8.flush())
            deltas += self._parse(tail + self._stop.flush())
        more, message = self._parser.finish(truncated=truncated or self._stop.stopped)
        return deltas + [d for d in more if not d.is_empty()], message

    def _parse(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self._early is not None and self._early.feed(text):
            text = text[: max(0, (self._early.keep or 0) - len(self.text))]
            self._early_stopped = True
        self.text += text
        return [d for d in self._parser.feed(text) if not d.is_empty()]
