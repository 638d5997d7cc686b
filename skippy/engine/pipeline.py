"""Per-request output pipeline (sans-IO): token ids -> OpenAI message deltas.

token -> piece bytes -> incremental UTF-8 decoding -> stop-string hold-back
-> chat-format partial parser -> :class:`Delta` objects. The same pipeline
serves streaming and non-streaming responses, so both give the same text.
"""

from __future__ import annotations

from typing import Callable

from skippy.engine.formats.base import Delta, ParsedMessage, StreamParser
from skippy.engine.textstream import StopMatcher, Utf8Stream


class OutputPipeline:
    """Turns sampled tokens into deltas for one request.

    ``piece(token) -> bytes`` gives a token's output bytes; ``stops`` are
    the request's stop strings plus any the chat format adds.
    """

    def __init__(self, piece: Callable[[int], bytes], stops: list[str] | tuple[str, ...],
                 parser: StreamParser) -> None:
        self._piece = piece
        self._utf8 = Utf8Stream()
        self._stop = StopMatcher(stops)
        self._parser = parser
        self.text = ""  # everything that passed the stop matcher (what the parser saw)

    @property
    def stopped(self) -> bool:
        """True once a stop string has matched: the caller ends the generation."""
        return self._stop.stopped

    def feed(self, token: int) -> list[Delta]:
        """Consume one sampled token; return the deltas that are now safe to emit."""
        text = self._utf8.feed(self._piece(token))
        if not text:
            return []
        safe, _ = self._stop.feed(text)
        return self._parse(safe)

    def finish(self) -> tuple[list[Delta], ParsedMessage]:
        """End of generation: flush held text; return the last deltas and the message."""
        deltas: list[Delta] = []
        if not self._stop.stopped:
            tail, _ = self._stop.feed(self._utf8.flush())
            deltas += self._parse(tail + self._stop.flush())
        more, message = self._parser.finish()
        return deltas + [d for d in more if not d.is_empty()], message

    def _parse(self, text: str) -> list[Delta]:
        if not text:
            return []
        self.text += text
        return [d for d in self._parser.feed(text) if not d.is_empty()]
