"""A hook policy for the integration tests, loaded by the server with
``--hook-policy tests.integration.hook_policy:make``.

What it does depends on the request's ``user`` field, so one server serves
every scenario: ``inject`` (inject once at the first mid-generation firing),
``stop``, ``deny``, ``deny400``, ``slow`` (sleeps past the timeout),
``raise``, ``block`` (parks until a request with ``user=release`` arrives),
``release``, ``inject_always`` (injects at the first token and at every mid-generation firing).
Other users get no action.
"""

from __future__ import annotations

import trio

from skippy.engine.hooks.policy import NO_ACTION, Deny, Inject, Stop

INJECTED = " Wait, let me reconsider this carefully and answer in French."


class Policy:
    def __init__(self) -> None:
        self.released = trio.Event()
        self.injected: list[object] = []  # the requests themselves: an id() is reused once one is freed

    async def before_chat(self, request):
        if request.user == "deny":
            return Deny("requests from deny are not allowed")
        if request.user == "deny400":
            return Deny("bad request says the policy", status=400)
        if request.user == "release":
            self.released.set()
        return NO_ACTION

    async def after_prefill(self, request, signals):
        if request.user == "raise":
            raise RuntimeError("policy bug")
        if request.user == "inject_always":
            return Inject(INJECTED)
        return NO_ACTION

    async def mid_generation(self, request, signals):
        if request.user == "inject" and not any(r is request for r in self.injected):
            self.injected.append(request)
            return Inject(INJECTED)
        if request.user == "inject_always":
            return Inject(INJECTED)
        if request.user == "stop":
            return Stop("policy_stop")
        if request.user == "slow":
            await trio.sleep(30)
        if request.user == "block":
            await self.released.wait()
        return NO_ACTION

    async def on_finish(self, request, info):
        return None


def make() -> Policy:
    return Policy()
