import logging
import math
import textwrap

import httpx
import msgspec
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import request as quart_request
from quart_trio import QuartTrio

from skippy.actors.hooks import HookCall, HookCancel, HookEvaluator, HookVerdict, WebhookPolicy
from skippy.engine.hooks.policy import (
    NO_ACTION,
    Deny,
    Inject,
    NoAction,
    Stop,
    check_outcome,
    event_body,
    load_policy_factory,
    outcome_from_json,
    outcome_to_json,
)
from skippy.engine.hooks.signals import FinishInfo, GenerationSignals, PrefillSignals, WindowStats

WINDOW = WindowStats(16, 2.5, 4.0, 0.3, 0.01, 13, 0)
GEN = GenerationSignals(WINDOW, 40)


# --- the evaluator actor -------------------------------------------------------------


async def test_slow_call_does_not_delay_another():
    gate = trio.Event()
    order = []

    class Policy:
        async def mid_generation(self, request, signals):
            if request == "slow":
                await gate.wait()
            order.append(request)
            return Inject(request)

    ev = HookEvaluator(Policy(), timeout=30)
    send = ev.inbox
    reply_send, reply_recv = trio.open_memory_channel(float("inf"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ev.run)
        await send.send(HookCall(1, "mid_generation", "slow", GEN, reply_send))
        await send.send(HookCall(2, "mid_generation", "fast", GEN, reply_send))
        first = await reply_recv.receive()
        assert first == HookVerdict(2, Inject("fast"))
        assert order == ["fast"]  # the slow one is still blocked
        gate.set()
        second = await reply_recv.receive()
        assert second == HookVerdict(1, Inject("slow"))
        await send.aclose()  # run() returns once the inbox is closed
    assert order == ["fast", "slow"]
    assert ev.stats.calls["mid_generation"] == 2


async def test_a_cancelled_call_ends_and_sends_no_verdict(autojump_clock):
    """A :class:`HookCancel` of a running call's ticket (its sequence was cancelled) cancels the call: the
    policy sees ``trio.Cancelled`` at once, nothing is counted as a timeout or error, no verdict is sent; the
    other calls go on. A cancel for a ticket with no call running is ignored."""
    seen = []

    class Slow:
        async def after_prefill(self, request, signals):
            try:
                await trio.sleep(request)
            except trio.Cancelled:
                seen.append(("cancelled", request, trio.current_time()))
                raise
            seen.append(("done", request, trio.current_time()))
            return NO_ACTION

    ev = HookEvaluator(Slow(), timeout=100.0)
    send, recv = trio.open_memory_channel(math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ev.run)
        ev.inbox.send_nowait(HookCall(1, "after_prefill", 50.0, None, send))
        ev.inbox.send_nowait(HookCall(2, "after_prefill", 5.0, None, send))
        ev.inbox.send_nowait(HookCancel(9))  # unknown: ignored
        await trio.sleep(1.0)
        ev.inbox.send_nowait(HookCancel(1))
        verdict = await recv.receive()
        assert verdict.ticket == 2
        await trio.sleep(100.0)
        assert recv.statistics().current_buffer_used == 0  # no verdict for 1
        ev.inbox.send_nowait(HookCall(3, "after_prefill", 1.0, None, send))
        ev.inbox.send_nowait(HookCancel(3))  # cancelled before its task even started
        await trio.sleep(5.0)
        assert recv.statistics().current_buffer_used == 0
        nursery.cancel_scope.cancel()
    assert seen == [("cancelled", 50.0, 1.0), ("done", 5.0, 5.0), ("cancelled", 1.0, 105.0)]
    assert ev.stats.timeouts["after_prefill"] == ev.stats.errors["after_prefill"] == 0 and not ev._running


async def test_timeout_gives_no_action_and_counts(autojump_clock, caplog):
    class Policy:
        async def after_prefill(self, request, signals):
            await trio.sleep_forever()

    ev = HookEvaluator(Policy(), timeout=2.0)
    send = ev.inbox
    reply_send, reply_recv = trio.open_memory_channel(float("inf"))
    caplog.set_level(logging.WARNING, logger="skippy.hooks")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ev.run)
        t0 = trio.current_time()
        await send.send(HookCall(7, "after_prefill", {}, PrefillSignals(1.0, 0.5, 42), reply_send))
        verdict = await reply_recv.receive()
        assert trio.current_time() - t0 == pytest.approx(2.0)
        await send.aclose()
    assert verdict == HookVerdict(7, NO_ACTION)
    assert ev.stats.timeouts["after_prefill"] == 1
    assert ev.stats.calls["after_prefill"] == 1
    assert ev.stats.errors["after_prefill"] == 0
    assert any("timed out" in r.getMessage() for r in caplog.records if r.name == "skippy.hooks")


async def test_exception_gives_no_action_and_counts(caplog):
    class Policy:
        async def mid_generation(self, request, signals):
            raise RuntimeError("boom")

    ev = HookEvaluator(Policy(), timeout=5)
    caplog.set_level(logging.WARNING, logger="skippy.hooks")
    assert await ev.call("mid_generation", {}, GEN) is NO_ACTION
    assert ev.stats.errors["mid_generation"] == 1
    assert ev.stats.timeouts["mid_generation"] == 0
    assert any("boom" in r.getMessage() for r in caplog.records if r.name == "skippy.hooks")
    snap = ev.stats.snapshot()
    assert snap["mid_generation"] == {"calls": 1, "timeouts": 0, "errors": 1}
    assert snap["before_chat"] == {"calls": 0, "timeouts": 0, "errors": 0}


async def test_fail_closed_stops(autojump_clock):
    class Policy:
        async def before_chat(self, request):
            await trio.sleep(10)

        async def mid_generation(self, request, signals):
            raise RuntimeError("boom")

        async def on_finish(self, request, info):
            raise RuntimeError("boom")

    ev = HookEvaluator(Policy(), timeout=1, fail_closed=True)
    assert await ev.call("before_chat", {}) == Stop("hook_error")
    assert await ev.call("mid_generation", {}, GEN) == Stop("hook_error")
    # nothing to stop after the fact: on_finish failures are only counted
    assert await ev.call("on_finish", {}, FinishInfo("success", "stop", 3, 0)) is NO_ACTION
    assert ev.stats.timeouts["before_chat"] == 1
    assert ev.stats.errors["mid_generation"] == 1
    assert ev.stats.errors["on_finish"] == 1


async def test_missing_method_is_not_a_call():
    class Policy:
        async def on_finish(self, request, info):
            pass

    ev = HookEvaluator(Policy())
    assert await ev.call("mid_generation", {}, GEN) is NO_ACTION
    assert ev.stats.calls["mid_generation"] == 0
    assert await HookEvaluator(None).call("before_chat", {}) is NO_ACTION
    with pytest.raises(ValueError):
        await ev.call("bogus", {}, None)
    with pytest.raises(ValueError):
        HookEvaluator(None, timeout=0)


async def test_outcome_validation_per_event():
    class Policy:
        async def before_chat(self, request):
            return Deny("no thanks", 400)

        async def after_prefill(self, request, signals):
            return Deny("too late")  # not allowed here -> error

        def mid_generation(self, request, signals):  # sync methods are accepted
            return None

        async def on_finish(self, request, info):
            return Stop("ignored")

    ev = HookEvaluator(Policy())
    assert await ev.call("before_chat", {}) == Deny("no thanks", 400)
    assert await ev.call("after_prefill", {}, PrefillSignals(0.1, 3.0, 5)) is NO_ACTION
    assert ev.stats.errors["after_prefill"] == 1
    assert await ev.call("mid_generation", {}, GEN) is NO_ACTION
    assert ev.stats.errors["mid_generation"] == 0
    assert await ev.call("on_finish", {}, FinishInfo("cancelled")) is NO_ACTION


async def test_closed_reply_channel_is_tolerated(caplog):
    """A caller that went away (its reply channel closed) loses its verdict; the actor keeps serving."""

    class Policy:
        async def mid_generation(self, request, signals):
            return Stop(request)

    ev = HookEvaluator(Policy())
    send = ev.inbox
    gone_send, gone_recv = trio.open_memory_channel(float("inf"))
    await gone_recv.aclose()
    reply_send, reply_recv = trio.open_memory_channel(float("inf"))
    caplog.set_level(logging.DEBUG, logger="skippy.hooks")
    async with trio.open_nursery() as nursery:  # a verdict sent to the closed channel would raise here
        nursery.start_soon(ev.run)
        await send.send(HookCall(1, "mid_generation", "gone", GEN, gone_send))
        await send.send(HookCall(2, "mid_generation", "here", GEN, reply_send))
        assert await reply_recv.receive() == HookVerdict(2, Stop("here"))
        await send.aclose()  # run() returns once both calls are done
    assert ev.stats.calls["mid_generation"] == 2
    assert [r.getMessage() for r in caplog.records if "caller gone" in r.getMessage()] == [
        "hook mid_generation ticket 1: caller gone, verdict dropped"]


def test_check_outcome():
    assert check_outcome("mid_generation", None) is NO_ACTION
    assert check_outcome("mid_generation", Stop("r")) == Stop("r")
    with pytest.raises(TypeError):
        check_outcome("mid_generation", "stop")
    with pytest.raises(ValueError):
        check_outcome("mid_generation", Deny("m"))


# --- outcome_from_json -------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj, expected",
    [
        ({"action": "none"}, NoAction()),
        ({"action": "none", "text": "ignored", "extra": 1}, NO_ACTION),
        ({"action": "inject", "text": " Wait,"}, Inject(" Wait,")),
        ({"action": "stop", "reason": "uncertain"}, Stop("uncertain")),
        ({"action": "stop"}, Stop("hook_stop")),
        ({"action": "deny", "message": "blocked"}, Deny("blocked", 403)),
        ({"action": "deny", "message": "bad", "status": 400}, Deny("bad", 400)),
    ],
)
def test_outcome_from_json_valid(obj, expected):
    out = outcome_from_json(obj)
    assert out == expected
    assert outcome_from_json(outcome_to_json(out)) == out


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        "none",
        {},
        {"action": "explode"},
        {"action": "inject"},
        {"action": "inject", "text": ""},
        {"action": "inject", "text": 5},
        {"action": "stop", "reason": None},
        {"action": "stop", "reason": ""},
        {"action": "deny"},
        {"action": "deny", "message": "m", "status": 500},
        {"action": "deny", "message": "m", "status": "403"},
        {"action": "deny", "message": "m", "status": True},
    ],
)
def test_outcome_from_json_invalid(obj):
    with pytest.raises(ValueError):
        outcome_from_json(obj)


def test_outcome_constructors_validate():
    with pytest.raises(ValueError):
        Inject("")
    with pytest.raises(ValueError):
        Deny("m", 500)
    assert (NoAction.action, Inject.action, Stop.action, Deny.action) == ("none", "inject", "stop", "deny")


# --- load_policy_factory ----------------------------------------------------------------------


@pytest.fixture
def policy_module(tmp_path, monkeypatch):
    (tmp_path / "skippy_test_policy_mod.py").write_text(
        textwrap.dedent(
            """
            class Policy:
                async def mid_generation(self, request, signals):
                    return None

            def make():
                return Policy()

            def broken():
                raise RuntimeError("no config")

            def empty():
                return object()

            class Holder:
                @staticmethod
                def create():
                    return Policy()

            NOT_CALLABLE = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "skippy_test_policy_mod"


def test_load_policy_factory(policy_module):
    assert type(load_policy_factory(f"{policy_module}:make")).__name__ == "Policy"
    assert type(load_policy_factory(f"{policy_module}:Policy")).__name__ == "Policy"
    assert type(load_policy_factory(f"{policy_module}:Holder.create")).__name__ == "Policy"


@pytest.mark.parametrize(
    "spec, match",
    [
        ("nocolon", "package.module:factory"),
        ("a:b:c", "package.module:factory"),
        (":make", "package.module:factory"),
        ("{mod}:", "package.module:factory"),
        ("{mod}:1bad", "package.module:factory"),
        ("skippy_no_such_module_xyz:make", "cannot import"),
        ("{mod}:missing", "not found"),
        ("{mod}:NOT_CALLABLE", "not callable"),
        ("{mod}:broken", "factory raised RuntimeError"),
        ("{mod}:empty", "none of"),
    ],
)
def test_load_policy_factory_errors(policy_module, spec, match):
    with pytest.raises(ValueError, match=match):
        load_policy_factory(spec.format(mod=policy_module))


# --- webhook payloads and WebhookPolicy over real HTTP ------------------------------------------


class ChatRequest(msgspec.Struct):
    model: str
    messages: list


def test_event_body_json_forms():
    req = ChatRequest("m", [{"role": "user", "content": "hi"}])
    assert event_body("before_chat", req, None) == {
        "event": "before_chat",
        "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "signals": {},
    }
    body = event_body("after_prefill", {"model": "m"}, PrefillSignals(1.5, math.inf, 3))
    assert body["signals"] == {"entropy": 1.5, "margin": None, "token_id": 3}  # JSON has no inf
    body = event_body("mid_generation", {}, GEN)
    assert body["signals"]["n_decoded"] == 40
    assert body["signals"]["window"]["high_entropy_count"] == 13


@pytest.fixture
async def webhook_url(nursery):
    app = QuartTrio("skippy-test-hook")
    app.config["received"] = []

    @app.post("/hook")
    async def hook():
        body = await quart_request.get_json()
        app.config["received"].append(body)
        return {
            "before_chat": {"action": "none"},
            "after_prefill": {"action": "inject", "text": " Hmm."},
            "mid_generation": {"action": "stop", "reason": "uncertain"},
            "on_finish": {"ok": True},
        }[body["event"]]

    @app.post("/garbage")
    async def garbage():
        return {"action": "explode"}

    @app.post("/fail")
    async def fail():
        return {"error": "nope"}, 500

    @app.post("/slow")
    async def slow():
        await trio.sleep(2)
        return {"action": "stop", "reason": "late"}

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5
    shutdown = trio.Event()
    binds = await nursery.start(
        lambda task_status: serve(app, config, shutdown_trigger=shutdown.wait, task_status=task_status)
    )
    yield binds[0], app.config["received"]
    shutdown.set()


async def test_webhook_policy_end_to_end(webhook_url):
    base, received = webhook_url
    req = ChatRequest("smollm2", [{"role": "user", "content": "hello"}])
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        ev = HookEvaluator(WebhookPolicy(f"{base}/hook", client), timeout=5)
        assert await ev.call("before_chat", req) is NO_ACTION
        assert await ev.call("after_prefill", req, PrefillSignals(2.5, 0.125, 17)) == Inject(" Hmm.")
        assert await ev.call("mid_generation", req, GEN) == Stop("uncertain")
        assert await ev.call("on_finish", req, FinishInfo("success", "uncertain", 20, 3)) is NO_ACTION
        assert [b["event"] for b in received] == ["before_chat", "after_prefill", "mid_generation", "on_finish"]
        assert received[0] == {"event": "before_chat", "request": msgspec.to_builtins(req), "signals": {}}
        assert received[1]["signals"] == {"entropy": 2.5, "margin": 0.125, "token_id": 17}
        assert received[2]["signals"]["window"]["token_count"] == 16
        assert received[3]["signals"]["finish_reason"] == "uncertain"
        assert all(ev.stats.errors[e] == 0 for e in ev.stats.snapshot())

        # invalid body and HTTP errors count as errors; a slow hook times out
        bad = HookEvaluator(WebhookPolicy(f"{base}/garbage", client), timeout=5)
        assert await bad.call("mid_generation", req, GEN) is NO_ACTION
        assert bad.stats.errors["mid_generation"] == 1
        failing = HookEvaluator(WebhookPolicy(f"{base}/fail", client), timeout=5)
        assert await failing.call("after_prefill", req, PrefillSignals(0.0, 1.0, 1)) is NO_ACTION
        assert failing.stats.errors["after_prefill"] == 1
        slow = HookEvaluator(WebhookPolicy(f"{base}/slow", client), timeout=0.2, fail_closed=True)
        assert await slow.call("mid_generation", req, GEN) == Stop("hook_error")
        assert slow.stats.timeouts["mid_generation"] == 1
