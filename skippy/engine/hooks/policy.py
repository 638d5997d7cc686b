"""Hook policy protocol, outcomes and loading (sans-IO; no trio).

A hook policy watches a request and may steer it at four points:

==================  ===========================  =============================
event               payload                      allowed outcomes
==================  ===========================  =============================
``before_chat``     None                         NoAction, Inject, Stop, Deny
``after_prefill``   :class:`PrefillSignals`      NoAction, Inject, Stop
``mid_generation``  :class:`GenerationSignals`   NoAction, Inject, Stop
``on_finish``       :class:`FinishInfo`          (return value ignored)
==================  ===========================  =============================

``after_prefill`` runs once, after the first token is sampled and before it
is emitted. ``mid_generation`` runs when the signal window's firing rule
says so (``skippy.engine.hooks.signals.SignalWindow.should_fire``). ``on_finish``
runs exactly once per request, whatever the outcome (success, error,
cancelled, denied).

Outcomes: :class:`NoAction`; :class:`Inject` (insert text into the
generation; the model continues after it); :class:`Stop` (end the
generation; OpenAI ``finish_reason`` reports ``reason``); :class:`Deny`
(``before_chat`` only: the client gets an OpenAI error envelope with
``message`` and HTTP ``status`` 400 or 403).

Policies are loaded with ``--hook-policy package.module:factory``
(:func:`load_policy_factory`) or are a webhook (``--hook-url``, see
``skippy.actors.hooks.WebhookPolicy`` and :func:`outcome_from_json`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import attrs

if TYPE_CHECKING:  # payload types only; keeps this module free of numpy
    from skippy.engine.hooks.signals import FinishInfo, GenerationSignals, PrefillSignals

__all__ = [
    "EVENTS",
    "NoAction",
    "NO_ACTION",
    "Inject",
    "Stop",
    "Deny",
    "Outcome",
    "HookPolicy",
    "check_outcome",
    "outcome_from_json",
    "outcome_to_json",
    "load_policy_factory",
    "to_jsonable",
    "event_body",
]

#: The hook events, in the order they happen for one request.
EVENTS = ("before_chat", "after_prefill", "mid_generation", "on_finish")


def _nonempty_str(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{type(inst).__name__}.{attr.name} must be a non-empty string, got {value!r}")


def _report(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not (isinstance(value, Mapping) and all(isinstance(k, str) for k in value)):
        raise TypeError(f"{type(inst).__name__}.{attr.name} must be a mapping with str keys or None, got {value!r}")


@attrs.frozen
class NoAction:
    """Do nothing; the generation continues unchanged.

    ``report``: what a built-in policy tells ``return_hook_events`` about the decision (a consultation's
    peer, latency and outcome: :mod:`skippy.actors.consult`), ``None`` otherwise.
    """

    report: Mapping[str, Any] | None = attrs.field(default=None, validator=_report, kw_only=True)
    action: ClassVar[str] = "none"


#: The shared :class:`NoAction` instance.
NO_ACTION = NoAction()


@attrs.frozen
class Inject:
    """Insert ``text`` (tokenized, not sampled) into the generation, then continue; ``report`` as for
    :class:`NoAction`."""

    text: str = attrs.field(validator=_nonempty_str)
    report: Mapping[str, Any] | None = attrs.field(default=None, validator=_report, kw_only=True)
    action: ClassVar[str] = "inject"


@attrs.frozen
class Stop:
    """End the generation now; ``finish_reason`` becomes ``reason``."""

    reason: str = attrs.field(validator=_nonempty_str)
    action: ClassVar[str] = "stop"


@attrs.frozen
class Deny:
    """Refuse the request (``before_chat`` only) with an OpenAI error envelope.

    ``status`` is the HTTP status: 403 (``permission_error``, default) or
    400 (``invalid_request_error``).
    """

    message: str = attrs.field(validator=_nonempty_str)
    status: int = attrs.field(default=403, validator=attrs.validators.in_((400, 403)))
    action: ClassVar[str] = "deny"


Outcome = NoAction | Inject | Stop | Deny

_ALLOWED: dict[str, tuple[type, ...]] = {
    "before_chat": (NoAction, Inject, Stop, Deny),
    "after_prefill": (NoAction, Inject, Stop),
    "mid_generation": (NoAction, Inject, Stop),
    "on_finish": (NoAction,),
}


class HookPolicy(Protocol):
    """What a hook policy may implement. Every method is optional.

    The evaluator (``skippy.actors.hooks.HookEvaluator``) looks each method
    up with ``getattr``/``hasattr`` and treats a missing one as "no action"
    without calling anything. Methods should be ``async``; a plain function
    is also accepted but then cannot be interrupted by the timeout. A method
    may return None for "no action". ``request`` is the engine's chat
    request object (OpenAI chat.completions body); treat it as read-only.
    Exceptions and timeouts never fail the generation (unless the server
    runs with ``--hook-fail-closed``).
    """

    async def before_chat(self, request: Any) -> Outcome | None: ...

    async def after_prefill(self, request: Any, signals: PrefillSignals) -> Outcome | None: ...

    async def mid_generation(self, request: Any, signals: GenerationSignals) -> Outcome | None: ...

    async def on_finish(self, request: Any, info: FinishInfo) -> None: ...


def check_outcome(event: str, result: Any) -> Outcome:
    """Validate a policy's return value for ``event``.

    None becomes :data:`NO_ACTION`; for ``on_finish`` any return value is
    ignored (NO_ACTION).

    Raises:
        ValueError: unknown event, or an outcome not allowed for the event
            (e.g. Deny outside ``before_chat``).
        TypeError: the value is not an outcome.
    """
    if event not in _ALLOWED:
        raise ValueError(f"unknown hook event {event!r}")
    if result is None or event == "on_finish":
        return NO_ACTION
    if not isinstance(result, (NoAction, Inject, Stop, Deny)):
        raise TypeError(f"hook {event} returned {type(result).__name__}, expected an Outcome or None")
    if not isinstance(result, _ALLOWED[event]):
        raise ValueError(f"outcome {result.action!r} is not allowed for hook event {event!r}")
    return result


def outcome_from_json(obj: Any) -> Outcome:
    """Parse a webhook response body (already JSON-decoded).

    Accepted shapes::

        {"action": "none"}
        {"action": "inject", "text": "<non-empty string>"}
        {"action": "stop", "reason": "<non-empty string>"}   # reason defaults to "hook_stop"
        {"action": "deny", "message": "<non-empty string>", "status": 403}  # status 400|403, optional

    ``deny`` is an extension so a webhook can refuse in ``before_chat``.
    Unknown extra keys are ignored.

    Raises:
        ValueError: not an object, unknown ``action``, or a missing /
            mistyped field.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"hook response must be a JSON object, got {type(obj).__name__}")
    action = obj.get("action")
    try:
        if action == "none":
            return NO_ACTION
        if action == "inject":
            text: Any = obj.get("text")  # missing or not a string: Inject's validator raises ValueError
            return Inject(text)
        if action == "stop":
            return Stop(obj.get("reason", "hook_stop"))
        if action == "deny":
            status = obj.get("status", 403)
            if isinstance(status, bool) or not isinstance(status, int):
                raise ValueError(f"deny status must be 400 or 403, got {status!r}")
            message: Any = obj.get("message")  # checked by Deny's validator, like text
            return Deny(message, status)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid hook response: {exc}") from None
    raise ValueError(f"invalid hook response: action must be none|inject|stop|deny, got {action!r}")


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    """Inverse of :func:`outcome_from_json` (for logs and tests); a ``report`` is left out when unset."""
    fields = attrs.asdict(outcome)
    if fields.get("report", 0) is None:
        del fields["report"]
    return {"action": outcome.action, **fields}


def check_policy_spec(spec: str) -> tuple[str, str]:
    """``package.module:factory`` -> ``(module, attribute path)``, without importing anything.

    Raises ``ValueError`` unless ``spec`` is a str with one ``:``, a module name before it and a dotted
    path of identifiers after it.
    """
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"--hook-policy must look like 'package.module:factory', got {spec!r}")
    mod_name, attr_path = spec.split(":")
    if not mod_name or not attr_path or not all(p.isidentifier() for p in attr_path.split(".")):
        raise ValueError(f"--hook-policy must look like 'package.module:factory', got {spec!r}")
    return mod_name, attr_path


def load_policy_factory(spec: str) -> Any:
    """Import ``package.module:factory`` and call ``factory()`` to get a policy.

    ``factory`` may be a dotted attribute path (``pkg.mod:Class.create``);
    a class works as a factory if its constructor takes no arguments.

    Raises:
        ValueError: malformed spec, module not importable, attribute
            missing or not callable, the factory raised, or the result has
            none of the hook methods (:data:`EVENTS`).
    """
    mod_name, attr_path = check_policy_spec(spec)
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"--hook-policy {spec!r}: cannot import {mod_name!r}: {exc}") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"--hook-policy {spec!r}: {part!r} not found") from None
    if not callable(obj):
        raise ValueError(f"--hook-policy {spec!r}: {attr_path!r} is not callable")
    try:
        policy = obj()
    except Exception as exc:
        raise ValueError(f"--hook-policy {spec!r}: factory raised {type(exc).__name__}: {exc}") from exc
    if not any(callable(getattr(policy, ev, None)) for ev in EVENTS):
        raise ValueError(f"--hook-policy {spec!r}: result defines none of {', '.join(EVENTS)}")
    return policy


def to_jsonable(obj: Any) -> Any:
    """Convert a request / payload to JSON-able builtins.

    Handles attrs classes, msgspec Structs (and anything else
    ``msgspec.to_builtins`` accepts), dicts, lists/tuples and numpy
    scalars. Non-finite floats become None (JSON has no inf/NaN).
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if attrs.has(type(obj)):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in attrs.fields(type(obj))}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return to_jsonable(obj.item())
    import msgspec

    return to_jsonable(msgspec.to_builtins(obj))


def event_body(event: str, request: Any, payload: Any) -> dict[str, Any]:
    """The webhook POST body: ``{"event", "request", "signals"}``.

    ``signals`` is the JSON form of the event's payload (``{}`` for
    ``before_chat``): ``{"entropy", "margin", "token_id"}`` for
    ``after_prefill``, ``{"window": {...WindowStats}, "n_decoded"}`` for
    ``mid_generation``, the :class:`FinishInfo` fields for ``on_finish``.
    """
    signals = to_jsonable(payload) if payload is not None else {}
    return {"event": event, "request": to_jsonable(request), "signals": signals}
