"""The ASGI layer in front of the Quart app: what is settled from the raw request target before Quart builds its
request (:func:`~skippy.http.app.create_app` wraps ``app.asgi_app`` in :func:`normalise`).

- Repeated slashes in the path are merged (``/v1//chat/completions`` is served as ``/v1/chat/completions``), as
  nginx's ``merge_slashes`` (on by default) does: a client's ``base_url`` ending in ``/`` joined with
  ``/chat/completions`` reaches its route, and no redirect is answered (Werkzeug would answer 308 with an HTML page
  and a ``Location`` built from the client's ``Host`` header).
"""

from __future__ import annotations

import re
from typing import Any

#: a run of slashes in a path, merged into one
_SLASHES = re.compile(r"//+")
_RAW_SLASHES = re.compile(rb"//+")

Scope = dict[str, Any]


def merged_slashes(scope: Scope) -> Scope:
    """``scope`` with each run of slashes in its ``path`` and ``raw_path`` merged into one (nginx's
    ``merge_slashes``); ``scope`` itself when there is none. A path not in origin form (``/...``) is left alone."""
    path = scope.get("path", "")
    if not path.startswith("/") or "//" not in path:
        return scope
    merged = {**scope, "path": _SLASHES.sub("/", path)}
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        merged["raw_path"] = _RAW_SLASHES.sub(b"/", raw)
    return merged


def normalise(asgi_app: Any) -> Any:
    """``asgi_app`` behind the rules of this module, for HTTP requests (lifespan events pass unchanged)."""
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            scope = merged_slashes(scope)
        await asgi_app(scope, receive, send)

    return app
