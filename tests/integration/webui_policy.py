"""A hook policy for the browser tests of the playground, loaded with
``--hook-policy tests.integration.webui_policy:make``: at a request's first
``mid_generation`` firing it injects :data:`INJECTED`, at the second it stops
the generation (``finish_reason`` ``policy_stop``); every other decision is no
action. With ``--high-entropy-threshold 0`` it fires at the 12th decoded token
and 32 tokens later.
"""

from __future__ import annotations

from skippy.engine.hooks.policy import NO_ACTION, Inject, Stop

INJECTED = " (A hook asked me to double-check this.)"


class Policy:
    def __init__(self) -> None:
        self.firings: dict[int, int] = {}

    async def mid_generation(self, request, signals):
        n = self.firings[id(request)] = self.firings.get(id(request), 0) + 1
        if n == 1:
            return Inject(INJECTED)
        if n == 2:
            return Stop("policy_stop")
        return NO_ACTION

    async def on_finish(self, request, info):
        self.firings.pop(id(request), None)


def make() -> Policy:
    return Policy()
