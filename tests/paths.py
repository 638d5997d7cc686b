"""Where the shared test fixtures live.

The real chat templates are in ``shared/fixtures/chat-templates`` beside
the repository (CI lays a copy of ``shared/`` next to its clone). Override
with ``SKIPPY_FIXTURES`` (the ``chat-templates`` folder itself).
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]


def _find() -> Path:
    env = os.environ.get("SKIPPY_FIXTURES")
    candidates = [Path(env)] if env else []
    candidates += [_REPO.parent / "shared" / "fixtures" / "chat-templates",
                   Path("/work/shared/fixtures/chat-templates")]
    for c in candidates:
        if c.is_dir():
            return c
    raise RuntimeError("chat-template fixtures not found: set SKIPPY_FIXTURES to the chat-templates folder "
                       f"(looked in {', '.join(map(str, candidates))})")


CHAT_TEMPLATES = _find()
