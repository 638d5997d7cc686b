"""HookEvaluator actor and the webhook hook policy.

The :class:`HookEvaluator` owns the hook policy. The decode scheduler sends
it :class:`HookCall` messages for ``after_prefill`` / ``mid_generation``
and keeps decoding the other sequences while the calling sequence is parked;
the verdict comes back on the call's own reply channel as a
:class:`HookVerdict`. A :class:`HookCancel` for a call's ticket (the
scheduler sends one when a parked sequence is cancelled: its client went
away, a Responses cancel) cancels that call where it is (a consultation's
peer requests with it) and no verdict is sent. Request tasks await
:meth:`HookEvaluator.call` directly for ``before_chat`` and ``on_finish``.

Failure rule (both paths): each policy call runs under
``trio.move_on_after(timeout)``. A timeout, an exception, or an invalid
return value yields :data:`~skippy.engine.hooks.policy.NO_ACTION` (logged on the
``skippy.hooks`` logger and counted in :class:`HookStats`), so a broken
policy never fails a generation. With ``fail_closed=True``
(``--hook-fail-closed``) it yields ``Stop("hook_error")`` instead for
``before_chat``, ``after_prefill`` and ``mid_generation`` (the request
finishes with ``finish_reason="hook_error"``); ``on_finish`` failures are
always only logged.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import Counter
from typing import Any

import attrs
import httpx
import trio

from skippy.actors.base import Actor
from skippy.engine.hooks.policy import (
    EVENTS,
    NO_ACTION,
    Outcome,
    Stop,
    check_outcome,
    event_body,
    outcome_from_json,
)

__all__ = ["WebhookPolicy", "HookStats", "HookCall", "HookCancel", "HookMsg", "HookVerdict", "HookEvaluator",
           "HOOK_ERROR_REASON"]

log = logging.getLogger("skippy.hooks")

#: ``Stop`` reason used for failed hook calls when ``fail_closed`` is set.
HOOK_ERROR_REASON = "hook_error"


class WebhookPolicy:
    """Hook policy that POSTs each event to ``url`` (``--hook-url``).

    Body: ``{"event": ..., "request": <request as JSON>, "signals": {...}}``
    (see :func:`skippy.engine.hooks.policy.event_body`). The response must be a
    JSON object accepted by :func:`skippy.engine.hooks.policy.outcome_from_json`;
    for ``on_finish`` the response body is ignored. A non-2xx status or an
    invalid body raises (the evaluator counts it as an error).

    ``client`` is owned by the caller (close it on shutdown). Its own
    timeout should be at least the evaluator's ``--hook-timeout``.
    """

    def __init__(self, url: str, client: httpx.AsyncClient):
        self.url = url
        self.client = client

    async def _post(self, event: str, request: Any, payload: Any) -> Any:
        resp = await self.client.post(self.url, json=event_body(event, request, payload))
        resp.raise_for_status()
        return resp

    async def before_chat(self, request: Any) -> Outcome:
        return outcome_from_json((await self._post("before_chat", request, None)).json())

    async def after_prefill(self, request: Any, signals: Any) -> Outcome:
        return outcome_from_json((await self._post("after_prefill", request, signals)).json())

    async def mid_generation(self, request: Any, signals: Any) -> Outcome:
        return outcome_from_json((await self._post("mid_generation", request, signals)).json())

    async def on_finish(self, request: Any, info: Any) -> None:
        await self._post("on_finish", request, info)


@attrs.define
class HookStats:
    """Counters per event kind (keys are :data:`~skippy.engine.hooks.policy.EVENTS`).

    ``calls`` counts policy invocations (a missing method is not a call);
    ``timeouts`` calls that hit the timeout; ``errors`` calls that raised or
    returned an invalid outcome. Mutated only by the evaluator's tasks.
    """

    calls: Counter = attrs.field(factory=Counter)
    timeouts: Counter = attrs.field(factory=Counter)
    errors: Counter = attrs.field(factory=Counter)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{event: {"calls", "timeouts", "errors"}}`` for every event (for metrics)."""
        return {
            ev: {"calls": self.calls[ev], "timeouts": self.timeouts[ev], "errors": self.errors[ev]}
            for ev in EVENTS
        }


@attrs.frozen
class HookCall:
    """A request to evaluate one hook event.

    Attributes:
        ticket: caller-chosen id echoed in the verdict (e.g. the sequence id).
        event: one of :data:`~skippy.engine.hooks.policy.EVENTS`.
        request: the chat request object passed to the policy.
        payload: the event payload (PrefillSignals, GenerationSignals,
            FinishInfo or None).
        reply: where the :class:`HookVerdict` goes; should be unbounded.
    """

    ticket: int
    event: str
    request: Any
    payload: Any
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class HookCancel:
    """Cancel the running :class:`HookCall` ``ticket`` (its sequence was cancelled while parked): the policy
    call is cancelled and no verdict is sent. A ticket with no call running is ignored."""

    ticket: int


#: What the evaluator's inbox takes.
HookMsg = HookCall | HookCancel


@attrs.frozen
class HookVerdict:
    """The outcome of :class:`HookCall` ``ticket``."""

    ticket: int
    outcome: Outcome


class HookEvaluator(Actor[HookMsg]):
    """Actor that owns the hook policy and runs its callbacks concurrently.

    Args:
        policy: a :class:`~skippy.engine.hooks.policy.HookPolicy` (methods looked up
            with ``getattr``; missing ones mean no action), or None.
        timeout: seconds per policy call (``--hook-timeout``), > 0.
        fail_closed: on timeout/error return ``Stop("hook_error")`` instead
            of NoAction (``--hook-fail-closed``); see the module docstring.
        stats: counters to update (a fresh :class:`HookStats` by default).
    """

    def __init__(
        self,
        policy: Any,
        timeout: float = 2.0,
        fail_closed: bool = False,
        stats: HookStats | None = None,
    ):
        if not (isinstance(timeout, (int, float)) and timeout > 0 and not math.isnan(timeout)):
            raise ValueError(f"hook timeout must be > 0 seconds, got {timeout!r}")
        super().__init__()
        self.policy = policy
        self.timeout = float(timeout)
        self.fail_closed = fail_closed
        self.stats = stats if stats is not None else HookStats()
        self._running: dict[int, trio.CancelScope] = {}  # ticket -> its call's scope, until its verdict

    async def run(self) -> None:
        """Serve :class:`HookCall` and :class:`HookCancel` messages (sent to :attr:`inbox`) until cancelled.

        Each call runs in its own task, so a slow policy call never delays
        another; each is bounded by the timeout, and cancelled by a
        :class:`HookCancel` of its ticket.
        """
        async with trio.open_nursery() as nursery:
            async with self._inbox:
                async for msg in self._inbox:
                    if isinstance(msg, HookCancel):
                        scope = self._running.pop(msg.ticket, None)
                        if scope is not None:
                            scope.cancel()
                        continue
                    scope = trio.CancelScope()  # registered now: a cancel may come before the task starts
                    self._running[msg.ticket] = scope
                    nursery.start_soon(self._serve, msg, scope)

    async def _serve(self, hc: HookCall, scope: trio.CancelScope | None = None) -> None:
        outcome = None
        try:
            with scope or trio.CancelScope():
                outcome = await self.call(hc.event, hc.request, hc.payload, ticket=hc.ticket)
        finally:
            if scope is not None and self._running.get(hc.ticket) is scope:
                del self._running[hc.ticket]
        if outcome is None:  # cancelled (HookCancel): the sequence is gone, no verdict
            log.debug("hook %s ticket %s: cancelled with its sequence", hc.event, hc.ticket)
            return
        verdict = HookVerdict(hc.ticket, outcome)
        try:
            try:
                hc.reply.send_nowait(verdict)
            except trio.WouldBlock:
                await hc.reply.send(verdict)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("hook %s ticket %s: caller gone, verdict dropped", hc.event, hc.ticket)

    async def call(self, event: str, request: Any, payload: Any = None, *, ticket: Any = None) -> Outcome:
        """Run one policy callback with the timeout/error rules; never raises for policy faults.

        Args:
            event: one of :data:`~skippy.engine.hooks.policy.EVENTS`.
            request: the chat request. payload: the event payload (ignored
                for ``before_chat``).
            ticket: only used in log messages.

        Returns:
            The validated outcome (NoAction for ``on_finish``).

        Raises:
            ValueError: unknown ``event`` (a programming error).
        """
        if event not in EVENTS:
            raise ValueError(f"unknown hook event {event!r}")
        method = getattr(self.policy, event, None)
        if not callable(method):
            return NO_ACTION
        self.stats.calls[event] += 1
        args = (request,) if event == "before_chat" else (request, payload)
        result: Any = None
        with trio.move_on_after(self.timeout):
            try:
                result = method(*args)
                if inspect.isawaitable(result):
                    result = await result
                return check_outcome(event, result)
            except Exception as exc:
                self.stats.errors[event] += 1
                log.warning("hook %s (ticket %s) failed: %s: %s", event, ticket, type(exc).__name__, exc)
                return self._failed(event)
        self.stats.timeouts[event] += 1
        log.warning("hook %s (ticket %s) timed out after %.3g s", event, ticket, self.timeout)
        return self._failed(event)

    def _failed(self, event: str) -> Outcome:
        if self.fail_closed and event != "on_finish":
            return Stop(HOOK_ERROR_REASON)
        return NO_ACTION
