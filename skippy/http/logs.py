"""Logging of ``skippy serve``: text or JSON lines, optionally to a file too, and the per-request line.

:func:`configure_logging` sets up the root logger once (hypercorn's own
loggers propagate to it). ``--log-format json`` writes one JSON object per
line (python-json-logger): ``time``, ``level``, ``logger``, ``message`` and,
for a request line, its fields (see :func:`log_request`).

:func:`log_request` writes the one line a request gets when its response
ends, as text::

    POST /v1/chat/completions 200 tokens=3 41.2ms id=5f0c... client=127.0.0.1:50412 prompt_tokens=25
    cached_tokens=0 completion_tokens=3 ttft_ms=30.1 finish_reason=stop

(one line), with ``code=... reason="..."`` for a 4xx/5xx (the error envelope's
``code``, else its ``type``, and its message), and ``client disconnected``
in place of the status when the client went away before the end (not a 4xx:
no status reached it, or the 200 it got was cut short). ``tokens`` is the
completion tokens generated (of all choices; for a stream too, however many
events carried them). A ``max_tokens`` clamped to the room left in the context
adds ``max_tokens_asked=32000 max_tokens_granted=1890``. The JSON form has the
same fields (``route`` is ``METHOD PATH``; ``status`` is ``null`` for a
disconnect, with ``"disconnected": true``).

A successful answer of the polled routes (:data:`QUIET_PATHS`: ``/health``,
``/metrics``; the playground asks both every 3 s) is logged at DEBUG; an
error answer of theirs, and every other line, at INFO.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger("skippy.http")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: paths that load balancers, supervisors and the playground poll: their successful answers log at DEBUG
QUIET_PATHS = frozenset({"/health", "/metrics"})


def configure_logging(level: str, fmt: str = "text", path: str | None = None) -> None:
    """Root logging at ``level`` (``debug``...``error``) to stderr, and also appended to ``path`` if given.

    ``fmt``: ``text`` (``TEXT_FORMAT``) or ``json`` (one object per line:
    ``time``, ``level``, ``logger``, ``message`` and the record's extra fields).
    Replaces handlers set up before (``logging.basicConfig(force=True)``).
    """
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if path is not None:
        handlers.append(logging.FileHandler(path, encoding="utf-8"))
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        formatter: logging.Formatter = JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"}, json_ensure_ascii=False)
    else:
        formatter = logging.Formatter(TEXT_FORMAT)
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=handlers, force=True)


#: control characters (C0, DEL, C1) -> ``\\xNN``: a request's path or an error's text never starts a line of
#: its own or writes a NUL into the log (a forged log line through ``%0A`` in a URL)
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}


def _printable(text: str) -> str:
    return text.translate(_CONTROL)


def _quote(text: str) -> str:
    return '"' + _printable(text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")) + '"'


def log_request(route: str, status: int | None, *, tokens: int, duration_ms: float, request_id: str,
                client: str | None, trace: Any = None, code: str | None = None, reason: str | None = None,
                disconnected: bool = False) -> None:
    """Write one request's line (see the module docstring) on ``skippy.http``: at INFO, or DEBUG for a
    status below 400 on one of :data:`QUIET_PATHS`.

    ``route``: ``METHOD PATH``; ``status``: the HTTP status sent; ``trace``: the
    request's :class:`~skippy.actors.trace.RequestTrace` (``None`` for routes
    that generate nothing); ``code`` / ``reason``: the error envelope's code and
    message of a 4xx/5xx; ``disconnected``: the client went away first.
    """
    fields: dict[str, Any] = {"route": route, "status": None if disconnected else status, "tokens": tokens,
                              "duration_ms": round(duration_ms, 1), "request_id": request_id, "client": client}
    text = [_printable(route), "client disconnected" if disconnected else str(status), f"tokens={tokens}",
            f"{duration_ms:.1f}ms", f"id={request_id}", f"client={client or '-'}"]
    if trace is not None and trace.prompt_tokens:
        ttft = None
        if trace.t_first_token is not None and trace.t_start is not None:
            ttft = round((trace.t_first_token - trace.t_start) * 1000.0, 1)
        fields.update(prompt_tokens=trace.prompt_tokens, cached_tokens=trace.cached_tokens,
                      completion_tokens=trace.completion_tokens, ttft_ms=ttft, finish_reason=trace.finish_reason)
        text += [f"prompt_tokens={trace.prompt_tokens}", f"cached_tokens={trace.cached_tokens}",
                 f"completion_tokens={trace.completion_tokens}"]
        if ttft is not None:
            text.append(f"ttft_ms={ttft}")
        if trace.finish_reason:
            text.append(f"finish_reason={trace.finish_reason}")
    consults = getattr(trace, "consults", None)
    if consults:  # which peer was consulted, how it went, how long it took; never what it said
        fields["consults"] = [{"peer": p, "outcome": o, "latency_ms": ms} for p, o, ms in consults]
        text += [f"consult={p}:{o}:{ms if ms is not None else '-'}ms" for p, o, ms in consults]
    clamped = getattr(trace, "max_tokens_clamped", None)
    if clamped is not None:
        fields.update(max_tokens_asked=clamped[0], max_tokens_granted=clamped[1])
        text += [f"max_tokens_asked={clamped[0]}", f"max_tokens_granted={clamped[1]}"]
    if disconnected:
        fields["disconnected"] = True
    elif code is not None or reason is not None:
        fields.update(code=code, reason=reason)
        text += [f"code={code or '-'}", f"reason={_quote(reason or '')}"]
    quiet = status is not None and status < 400 and not disconnected and route.partition(" ")[2] in QUIET_PATHS
    log.log(logging.DEBUG if quiet else logging.INFO, " ".join(text), extra=fields)
