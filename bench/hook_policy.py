"""Hook policy for bench/bench_hooks.py: requests with ``user == "wait"`` sleep 2 s in ``after_prefill``."""

import trio

from skippy.engine.hooks.policy import NO_ACTION


class WaitPolicy:
    async def after_prefill(self, request, signals):
        if request.user == "wait":
            await trio.sleep(2.0)
        return NO_ACTION


def make() -> WaitPolicy:
    return WaitPolicy()
