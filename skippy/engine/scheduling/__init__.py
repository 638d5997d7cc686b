"""Scheduling: the sans-IO request lifecycle of the decode scheduler (admission, prefix reuse,
prefill budget, hook parking, finish) and batch planning.

``config`` (SchedulerConfig: the scheduler's options, from an engine's settings), ``core``
(SchedulerCore: the policy), ``step`` (the plan and result of one step), ``decode`` (the
decode thread's half: execute, multi-step runs, draft verification, sampling), ``kv_cache``
(KVCacheManager: slots, prefix cache, prompt cache, context checkpoints), ``request`` (a request's
state and phase), ``events`` (what goes in and comes out, the counters and stats), and the rules
they use: ``batch``, ``prefix``, ``checkpoint``, ``spec``, ``budget``, ``embed``."""

from skippy.engine.scheduling.config import SchedulerConfig

__all__ = ["SchedulerConfig"]
