"""A scanner for formats whose calls are read once their section is whole (LFM2, Gemma 4, MiniMax M3).

The section (from the opener to ``syntax.close``, or to the end of the output) is held back, then handed
to :meth:`SectionScanner.calls`; its calls are sent whole, one delta each. A section that does not parse,
names a tool the request does not allow, or grows past :data:`MAX_SECTION` characters without its close is
content verbatim.
"""

from __future__ import annotations

import json
from typing import Any

from skippy.engine.chat.formats.core import _CONTENT, ToolScanner

MAX_SECTION = 1 << 16  # characters a call section may take before it is given up as content


class SectionScanner(ToolScanner):
    """Holds a call section until its close, then emits its calls whole (subclasses read the section)."""

    def calls(self, section: str) -> list[tuple[str, dict[str, Any]]] | None:
        """The section's calls, ``[(name, arguments)]``; ``None`` when it is not calls of this format."""
        raise NotImplementedError

    def close_at(self, buf: str, pos: int) -> int:
        """Where the section's ``close`` is in ``buf`` from ``pos`` (-1: not yet); subclasses whose arguments
        may quote it override this."""
        assert self.syntax.close is not None  # a syntax with this scanner ends its call section with ``close``
        return buf.find(self.syntax.close, pos)

    def _step_header(self, final: bool) -> bool:
        close, buf, pos = self.syntax.close, self.buf, self.pos
        assert close is not None
        i = self.close_at(buf, pos)
        if i < 0 and not final:
            if len(buf) - pos > MAX_SECTION:
                self._fail()
                return True
            return False
        calls = self.calls(buf[pos:i if i >= 0 else len(buf)])
        if calls is None or any(name not in self.allowed for name, _ in calls):
            self._fail()
            return True
        for name, args in calls:
            self._args(self._call_start(name), json.dumps(args, ensure_ascii=False))
        self.pos = i + len(close) if i >= 0 else len(buf)
        self.state = _CONTENT
        return True
