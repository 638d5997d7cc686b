"""What the engine reports about the request being served, for its log line: :class:`RequestTrace` in
the context variable :data:`TRACE`, and the reply ids that carry the request's id."""

from __future__ import annotations

import contextvars

import attrs

from skippy.engine.protocols.openai.translate import new_id


@attrs.define
class RequestTrace:
    """What the engine reports about one request while it runs, for a request log line.

    The caller (the HTTP layer, or an embedder) sets one in :data:`TRACE` before
    calling the engine; every generation started in that context fills it in:
    ``prompt_tokens`` / ``cached_tokens`` (of them reused from the prefix cache),
    ``completion_tokens``, ``t_first_token`` (trio clock seconds of the first
    accepted token, ``None`` before it), ``finish_reason`` (``None`` until the
    end; ``cancelled`` when the reply was closed first). ``request_id`` (a client's
    ``X-Request-Id``) becomes the reply ids' suffix: ``chatcmpl-<request_id>``,
    ``cmpl-<request_id>``. ``t_start``: trio clock seconds when the request
    arrived (set by the caller; TTFT is ``t_first_token - t_start``).
    ``max_tokens_clamped``: ``(asked, granted)`` when a ``max_tokens`` beyond the
    context was clamped to the room left (``clamp_max_tokens``; the smallest
    ``granted`` when the request has several prompts), else ``None``.
    ``consults``: the consultations of another model (``--consult``) of its generations, one
    ``(peer, outcome, latency_ms)`` each (the log line names them; never their content).
    """

    request_id: str | None = None
    t_start: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    t_first_token: float | None = None
    finish_reason: str | None = None
    max_tokens_clamped: tuple[int, int] | None = None
    consults: list[tuple[str, str, float | None]] = attrs.field(factory=list)


#: The :class:`RequestTrace` of the request being served in this context (``None``: nobody is listening).
TRACE: contextvars.ContextVar[RequestTrace | None] = contextvars.ContextVar("skippy_request_trace", default=None)


def request_id() -> str | None:
    trace = TRACE.get()
    return trace.request_id if trace is not None else None


def reply_id(prefix: str) -> str:
    """``<prefix>-<X-Request-Id>`` when the request carries one (or the server gave it one), else a new id."""
    rid = request_id()
    return f"{prefix}-{rid}" if rid else new_id(prefix)
