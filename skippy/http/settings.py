"""HTTP-layer settings: authentication, CORS, request limits, deadlines, shutdown.

One frozen :class:`ServerSettings` carries what the ``skippy serve`` flags
set for the HTTP layer (the engine's own settings are
:class:`~skippy.engine.config.EngineConfig`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from pathlib import Path

import attrs

from skippy.engine.config import FloatRange, IntRange, IsBool, IsText, setting, settings_doc

MIB = 1024 * 1024
KIB = 1024


def _strings(value: str | Iterable[str]) -> tuple[str, ...]:
    return tuple(value) if not isinstance(value, str) else (value,)


def _api_keys(inst: object, attr: attrs.Attribute, value: tuple[str, ...]) -> None:
    if not all(isinstance(k, str) for k in value):
        raise TypeError(f"{attr.name} must be strings, got {value!r}")
    if any(not k.strip() or any(c.isspace() for c in k) for k in value):
        raise ValueError("API keys may not be empty or contain whitespace")


#: a browser origin as the ``Origin`` header sends it: ``scheme://host[:port]``, no path (RFC 6454)
_ORIGIN = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s?#]+")


def _origins(inst: object, attr: attrs.Attribute, value: tuple[str, ...]) -> None:
    if not all(isinstance(o, str) and o for o in value):
        raise TypeError(f"{attr.name} must be non-empty strings, got {value!r}")
    bad = [o for o in value if o not in ("*", "localhost") and not _ORIGIN.fullmatch(o)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not an origin: give scheme://host[:port] as browsers send it "
                         "(e.g. https://app.example.com), 'localhost' or '*'")


def _directory(inst: object, attr: attrs.Attribute, value: str | None) -> None:
    """``None``, or a path that is a directory or not there yet (made on first use)."""
    IsText()(inst, attr, value)
    if value is not None and (not value or (Path(value).exists() and not Path(value).is_dir())):
        raise ValueError(f"{attr.name} must be a directory (made when missing), got {value!r}")


@attrs.frozen
class ServerSettings:
    """What the HTTP layer enforces; every field is validated at construction.

    Each field's default, range and help text are declared once below
    (:func:`~skippy.engine.config.setting`); ``skippy serve`` derives its
    flags from them (``--max-body-bytes`` / ``SKIPPY_MAX_BODY_BYTES`` for
    ``max_body_bytes``). ``api_keys`` and ``cors_origins`` come from
    adapters (``--api-key`` with ``--api-key-file``; ``--cors-origins``,
    comma-separated or repeated). A bad value raises ``TypeError`` or
    ``ValueError`` naming the field and its range, also through
    ``attrs.evolve``. ``request_timeout`` runs from a request's arrival to
    its last byte, the body's upload included; ``body_timeout`` bounds each wait for the body's next bytes.
    """

    api_keys: tuple[str, ...] = setting((), converter=_strings, check=_api_keys, flag=False,
                                        help="Accepted bearer tokens (empty: no authentication).")
    cors_origins: tuple[str, ...] = setting((), converter=_strings, check=_origins, flag=False,
                                            help="Browser origins allowed by CORS ('*' for any; empty: CORS off).")
    max_body_bytes: int = setting(32 * MIB, check=IntRange(1024),
                                  help="Largest request body in bytes; larger ones get 413 (32 MiB: one image of "
                                       "20 MiB, OpenAI's limit, base64-encoded).")
    max_messages: int = setting(2048, check=IntRange(1), help="Most messages in one chat request; more get 400.")
    max_tools: int = setting(128, check=IntRange(0), help="Most tools in one chat request; more get 400.")
    max_chat_template_bytes: int = setting(128 * KIB, check=IntRange(0),
                                           help="Largest request 'chat_template' in bytes; larger ones get 400.")
    max_grammar_bytes: int = setting(128 * KIB, check=IntRange(0),
                                     help="Largest request grammar or regex ('grammar', 'guided_grammar', "
                                          "'guided_regex', 'structured_outputs') in bytes; larger ones get 400.")
    request_timeout: float = setting(600.0, check=FloatRange(0.0),
                                     help="Seconds a request may run from its arrival, its body's upload included "
                                          "(0: no limit). Past it the generation stops and the client gets 504, "
                                          "or a final SSE error event once streaming has started.")
    body_timeout: float = setting(60.0, check=FloatRange(0.0, min_open=True, finite=True),
                                  help="Seconds a request body may go without a byte arriving; past it 408. The "
                                       "whole upload may take longer (as nginx's client_body_timeout), within "
                                       "--request-timeout.")
    shutdown_grace: float = setting(30.0, check=FloatRange(0.0),
                                    help="Seconds running requests may take to finish after SIGINT/SIGTERM; then "
                                         "they are cancelled (streams get a final SSE error event). A second "
                                         "signal cancels at once.")
    metrics: bool = setting(True, check=IsBool(),
                            help="Serve GET /metrics (Prometheus); --no-metrics answers it 501, as llama-server "
                                 "without --metrics.")
    props: bool = setting(False, check=IsBool(),
                          help="Accept POST /props (llama-server's --props; it changes nothing there either and "
                               "answers {\"success\": true}); without it POST /props answers 501.")
    slots: bool = setting(True, check=IsBool(),
                          help="Serve GET /slots (llama-server's per-slot state); --no-slots answers it 501.")
    slot_save_path: str | None = setting(None, check=_directory, metavar="DIR",
                                         help="Directory of slot state files: enables POST /slots/{id}?action="
                                              "save|restore|erase (llama-server; without it they answer 501).")
    ssl_key_file: str | None = setting(None, check=IsText(), metavar="FILE",
                                       help="PEM private key for HTTPS (with --ssl-cert-file); every listen "
                                            "address then serves TLS only.")
    ssl_cert_file: str | None = setting(None, check=IsText(), metavar="FILE",
                                        help="PEM certificate chain for HTTPS (with --ssl-key-file).")
    sse_ping_interval: float = setting(15.0, check=FloatRange(0.0, finite=True),
                                       help="Seconds between SSE keep-alive comments while a stream waits for its "
                                            "next chunk (queue wait, long prefill), so proxies with idle timeouts "
                                            "keep it open (0: off).")
    strict_fields: bool = setting(False, check=IsBool(),
                                  help="Refuse request fields this server does not know with 400 naming the field "
                                       "(OpenAI's behaviour) instead of ignoring them (logged and listed in the "
                                       "X-Skippy-Ignored-Fields response header).")
    responses_store: str | None = setting(
        None, check=IsText(), metavar="URL", show_default="sqlite:$SKIPPY_HOME/responses.db",
        help="Where stored responses (store: true, OpenAI's default) are kept for GET /v1/responses/{id} and "
             "previous_response_id: sqlite:PATH (a file that survives restarts and crashes), "
             "redis://HOST:PORT[/DB] (shared by replicas) or memory: (nothing on disk, lost at exit).")
    responses_store_size: int = setting(10000, check=IntRange(0),
                                        help="Most stored responses; past it the oldest is forgotten first "
                                             "(0: none are kept).")
    responses_ttl: float = setting(30 * 24 * 3600.0, check=FloatRange(0.0, min_open=True, finite=True),
                                   metavar="SECONDS",
                                   help="Seconds a stored response is kept after its creation (OpenAI's 30 "
                                        "days); an expired one answers 404 like a deleted one.")
    webui: bool = setting(True, check=IsBool(), flag=False,
                          help="Serve the web playground at GET / (--no-webui: off; /webui/ files answer 404 and / "
                               "Ollama's 'Ollama is running').")
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
        """True if CORS allows ``origin``: an exact match, ``*`` configured, or the keyword ``localhost``
        configured and ``origin`` a loopback origin (:func:`is_localhost_origin`, llama-server's
        ``--cors-origins localhost``)."""
        origins = self.cors_origins
        return ("*" in origins or origin in origins
                or ("localhost" in origins and is_localhost_origin(origin)))


ServerSettings.__doc__ = (ServerSettings.__doc__ or "") + settings_doc(ServerSettings)


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


LOCALHOST_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_localhost_origin(origin: str) -> bool:
    """True if ``origin`` (``scheme://host[:port]``) is ``http``/``https`` on ``localhost``, ``127.0.0.1`` or
    ``[::1]``, any port (llama-server's ``origin_is_localhost``); ``False`` for anything that does not parse."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and (parts.hostname or "") in LOCALHOST_NAMES


def split_origins(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``--cors-origins`` values, each possibly comma-separated, as one tuple without trailing slashes."""
    out: list[str] = []
    for value in values:
        for origin in value.replace(",", " ").split():
            origin = origin.rstrip("/")
            if origin and origin not in out:
                out.append(origin)
    return tuple(out)
