"""llama-server's line limits for code completion (sans-IO): ``n_indent`` and ``t_max_predict_ms``.

Editor plugins that complete code in place (llama.vim, llama.vscode) send both with their
``/infill`` requests, and llama-server applies them to ``/completion`` too (``tools/server``
``process_token``):

- ``n_indent`` > 0: every line after the first must be indented by at least ``n_indent``
  spaces or tabs. Once a later line shows its first other character (a blank line's newline
  counts) with less indentation, the generation ends there: the text keeps the newline and that
  line's indentation, and loses the rest.
- ``t_max_predict_ms`` > 0: a piece of text that holds a newline and arrives more than
  ``t_max_predict_ms`` milliseconds after the first piece ends the generation after that piece
  (a completion that takes too long stops at a line's end, never inside one).

Either ends it as a token limit does: finish ``length`` (llama-server's ``stop_type``
``limit``). :class:`LineLimits` is an :class:`~skippy.engine.output.pipeline.EarlyStopRule`; its
clock is injected (seconds), so the rule is tested with a fake one.
"""

from __future__ import annotations

from collections.abc import Callable

_BLANK = " \t"


class LineLimits:
    """The ``n_indent`` and ``t_max_predict_ms`` rule over one generation's text (see module docstring).

    ``n_indent``: the minimum indentation in characters (0: none); ``t_max_predict_ms``: the time budget
    in milliseconds (<= 0: none); ``clock``: seconds, monotonic. After :meth:`feed` returned True,
    :attr:`keep` is how many characters of all text fed belong to the answer.
    """

    finish_reason = "length"

    def __init__(self, n_indent: int = 0, t_max_predict_ms: int = -1, *, clock: Callable[[], float]) -> None:
        self.n_indent = n_indent
        self.t_max_predict_ms = t_max_predict_ms
        self._clock = clock
        self._t0: float | None = None
        self._text = ""
        self._line = -1  # where the line to check begins (after a newline); -1: none pending
        self.keep: int | None = None

    @property
    def active(self) -> bool:
        """Whether either limit is set (a rule that can never fire need not run)."""
        return self.n_indent > 0 or self.t_max_predict_ms > 0

    def feed(self, text: str) -> bool:
        """Take the next piece of generated text; True once the generation should end."""
        if self.keep is not None:
            return True
        if self._t0 is None:
            self._t0 = self._clock()
        start = len(self._text)
        self._text += text
        if self.n_indent > 0 and (cut := self._short_line(start)) is not None:
            self.keep = cut
            return True
        if (self.t_max_predict_ms > 0 and "\n" in text
                and (self._clock() - self._t0) * 1000.0 > self.t_max_predict_ms):
            self.keep = len(self._text)
            return True
        return False

    def _short_line(self, start: int) -> int | None:
        """Where the text is cut for the first line (begun at or after ``start``, or pending before it) that
        shows too little indentation; ``None`` while every line holds enough or is not decided yet."""
        text = self._text
        at = self._line if self._line >= 0 else text.find("\n", start) + 1 or -1
        while at >= 0:
            pos = at
            while pos < len(text) and text[pos] in _BLANK:
                pos += 1
            if pos == len(text):  # only indentation so far: decided by a later piece
                self._line = at
                return None
            if pos - at < self.n_indent:
                return pos
            at = text.find("\n", at) + 1 or -1
        self._line = -1
        return None
