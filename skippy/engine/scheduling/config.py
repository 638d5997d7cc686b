"""What a :class:`~skippy.engine.scheduling.core.SchedulerCore` is asked for: :class:`SchedulerConfig`,
its options as one frozen value, made from an engine's settings by
:meth:`SchedulerConfig.from_engine_config`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from skippy.engine.hooks.signals import SignalConfig
from skippy.engine.scheduling.prefix import EXACT_TAIL, MIN_TAIL

if TYPE_CHECKING:
    from skippy.engine.config import EngineConfig
    from skippy.engine.runtime.base import ModelMeta


@attrs.frozen
class SchedulerConfig:
    """Every option of a :class:`~skippy.engine.scheduling.core.SchedulerCore` (and of the
    :class:`~skippy.actors.scheduler.DecodeScheduler` actor around it); the defaults are those of a
    core made in a test, :meth:`from_engine_config` those of a server.

    - ``step_tokens``: tokens of one step, prefill chunks and decoding sequences together (``None``: the
      runtime's ``n_batch``; never more than it).
    - ``max_queue``: requests waiting for a slot, beyond the free ones (generation and embedding requests together)
      before :class:`~skippy.engine.errors.QueueFull`.
    - ``signal_config``: the hook signal window (tokens) and its mid-generation firing rule.
    - ``prefix_cache``: keep finished sequences' KV resident and reuse shared prompt prefixes (off by
      itself for recurrent and hybrid models, whose KV cannot be trimmed: they reuse through context
      checkpoints).
    - ``spec_ngram``: draft tokens per step of prompt-lookup speculation for requests that do not
      choose (0: off; a request's ``speculative`` overrides it; never for recurrent models).
    - ``ctx_checkpoints``: context checkpoints kept per slot for recurrent, hybrid and sliding-window
      models (llama-server's ``--ctx-checkpoints``; 0: none); only with ``prefix_cache``.
    - ``checkpoint_budget``: bytes of host memory the checkpoints may hold (``None``: no limit;
      llama-server's ``--cache-ram``).
    - ``prompt_cache``: bytes of host memory for the prompt cache of attention models (llama-server's
      ``--cache-ram`` there: resident prompts saved before their KV is overwritten and restored for a
      later prompt that shares more with them than with anything resident; at most
      :data:`~skippy.engine.scheduling.kv_cache.PROMPT_CACHE_ENTRIES` prompts; ``None``: no byte
      limit; 0: off; only with ``prefix_cache``, not for recurrent or sliding-window caches, which use
      checkpoints).
    - ``min_tail``: prompt tokens prefilled even when cached
      (:data:`~skippy.engine.scheduling.prefix.MIN_TAIL`, or
      :data:`~skippy.engine.scheduling.prefix.EXACT_TAIL` for a cached answer equal to a cold run's).
    - ``cache_reuse``: llama-server's ``--cache-reuse``: past the shared prefix, chunks of at least this
      many tokens of a slot's cached prompt that the new prompt holds further on are moved to their new
      positions instead of prefilled again (0: off; see
      :meth:`~skippy.engine.scheduling.kv_cache.KVCacheManager.allocate`).
    - ``scheduler_steps``: decodes (steps) a decode-only batch may run back to back on the decode
      thread (a multi-step run, see :class:`~skippy.engine.scheduling.step.StepPlan`; 1, or less: one
      step per plan).
    - ``reader_wait``: before a decode the loop waits (boundedly) until the request tasks have written the
      tokens of the last one, so their Python does not run beside llama.cpp's threads on shared cores
      (``--reader-wait``; :func:`host_bound` decides ``auto``); ``False``: they write while the next decode runs.
    """

    step_tokens: int | None = None
    max_queue: int = 1024
    signal_config: SignalConfig = attrs.field(factory=SignalConfig)
    prefix_cache: bool = True
    spec_ngram: int = 0
    ctx_checkpoints: int = 0
    checkpoint_budget: int | None = None
    prompt_cache: int | None = 0
    min_tail: int = MIN_TAIL
    cache_reuse: int = 0
    scheduler_steps: int = 1
    reader_wait: bool = True

    @classmethod
    def from_engine_config(cls, config: EngineConfig, *, host_bound: bool = True) -> SchedulerConfig:
        """The scheduler options of an engine's settings: ``--step-tokens``, ``--max-queue``, the signal
        window and threshold, ``--prefix-cache``, ``--spec-ngram``, ``--ctx-checkpoints``, ``--cache-reuse``,
        ``--scheduler-steps``; ``--cache-ram`` (MiB, -1: no limit) is the byte budget of both the
        checkpoints and the prompt cache (a model uses one of them); with ``--flash-attn off`` a cached
        prompt's last :data:`~skippy.engine.scheduling.prefix.EXACT_TAIL` tokens are prefilled again
        (its greedy output then equals a cold run's); ``--reader-wait`` (``auto``: ``host_bound``, what
        :func:`host_bound` says of the loaded model)."""
        cache_ram = None if config.cache_ram < 0 else config.cache_ram * 2**20  # bytes; None: no limit
        return cls(step_tokens=config.step_tokens, max_queue=config.max_queue,
                   signal_config=SignalConfig(window=config.signal_window,
                                              high_entropy_threshold=config.high_entropy_threshold),
                   prefix_cache=config.prefix_cache, spec_ngram=config.spec_ngram,
                   ctx_checkpoints=config.ctx_checkpoints, checkpoint_budget=cache_ram, prompt_cache=cache_ram,
                   min_tail=EXACT_TAIL if config.flash_attn == "off" else MIN_TAIL, cache_reuse=config.cache_reuse,
                   scheduler_steps=config.scheduler_steps,
                   reader_wait=config.reader_wait == "on" or (config.reader_wait == "auto" and host_bound))


def host_bound(meta: ModelMeta, n_threads: int, n_cores: int) -> bool:
    """llama.cpp's decode computes on the cores the event loop runs on: some of the model stays on the CPU
    (a layer not offloaded, ``--n-cpu-moe`` experts, a tensor override) and its ``n_threads`` threads take
    all ``n_cores`` cores this process may run on. Then the request tasks' Python (SSE framing, socket
    writes) beside llama.cpp's threads, which spin on barriers, stalls every step, and the loop had better
    let them finish before it decodes; otherwise (every layer on a GPU or an RPC worker, or a core left
    free) they write while the next decode runs. From ``meta.devices["offload"]`` and ``meta.load``
    (a runtime that reports neither counts as all on the CPU)."""
    offload = (meta.devices or {}).get("offload") or {}
    load = meta.load or {}
    on_device = (bool(offload.get("devices")) and offload.get("n_gpu_layers", 0) >= offload.get("n_layer", 1)
                 and not load.get("n_cpu_moe") and not load.get("override_tensor"))
    return not on_device and n_threads >= n_cores
