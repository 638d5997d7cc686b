"""HTTP-layer settings: authentication, CORS, request limits, deadlines, shutdown.

One frozen :class:`ServerSettings` carries what the ``skippy serve`` flags
set for the HTTP layer (the engine's own settings are
:class:`~skippy.engine.config.EngineConfig`).
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import attrs

MIB = 1024 * 1024
KIB = 1024


def _strings(value: object) -> tuple[str, ...]:
    return tuple(value) if not isinstance(value, str) else (value,)


@attrs.frozen
class ServerSettings:
    """What the HTTP layer enforces.

    ``api_keys``: accepted bearer tokens (empty: no authentication).
    ``cors_origins``: browser origins allowed by CORS (``"*"`` for any;
    empty: CORS off). ``max_body_bytes``: larger request bodies get 413.
    ``max_messages``, ``max_tools``: longest ``messages`` / ``tools`` arrays;
    ``max_chat_template_bytes``, ``max_grammar_bytes``: largest request
    ``chat_template`` / ``grammar`` in UTF-8 bytes (400 beyond each).
    ``request_timeout``: seconds a request may run, from its arrival to its
    last byte (``0``: no deadline). ``shutdown_grace``: seconds running
    requests may take to finish after SIGINT/SIGTERM before they are
    cancelled.
    """

    api_keys: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    cors_origins: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    max_body_bytes: int = 4 * MIB
    max_messages: int = 2048
    max_tools: int = 128
    max_chat_template_bytes: int = 128 * KIB
    max_grammar_bytes: int = 128 * KIB
    request_timeout: float = 600.0
    shutdown_grace: float = 30.0
    _key_digests: tuple[bytes, ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_key_digests", tuple(_digest(k) for k in self.api_keys))

    @property
    def auth_required(self) -> bool:
        return bool(self.api_keys)

    def key_accepted(self, token: str) -> bool:
        """True if ``token`` is one of ``api_keys``.

        Constant time: every key is compared (``hmac.compare_digest``) on
        SHA-256 digests, so neither the matching key's position nor any
        key's length or prefix shows in the timing.
        """
        presented = _digest(token)
        ok = False
        for digest in self._key_digests:
            ok |= hmac.compare_digest(presented, digest)
        return ok

    def origin_allowed(self, origin: str) -> bool:
        """True if CORS allows ``origin`` (exact match, or ``*`` configured)."""
        return "*" in self.cors_origins or origin in self.cors_origins


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def read_api_key_file(path: str | Path) -> list[str]:
    """API keys from a file: one per line; blank lines and ``#`` comments are skipped.

    Raises ``ValueError`` when the file holds no key.
    """
    keys = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(line)
    if not keys:
        raise ValueError(f"{path} holds no API key (one per line; '#' starts a comment)")
    return keys


def split_origins(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``--cors-origins`` values, each possibly comma-separated, as one tuple without trailing slashes."""
    out: list[str] = []
    for value in values:
        for origin in value.replace(",", " ").split():
            origin = origin.rstrip("/")
            if origin and origin not in out:
                out.append(origin)
    return tuple(out)
