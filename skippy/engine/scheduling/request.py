"""One request's state in the scheduler: its :class:`Phase` and :class:`RequestState` (sans-IO).

:class:`RequestState` is what :class:`~skippy.engine.scheduling.core.SchedulerCore` keeps per request
from its submission to its finish (vLLM's ``Request``, llama-server's ``server_slot``): the
:class:`~skippy.engine.scheduling.events.SeqRequest` it came as, its phase, its KV state once admitted
(:class:`~skippy.engine.scheduling.batch.SeqState`), its sampler, hook, speculation and reasoning-budget
state, and its times. Only the core changes it; its KV-cache manager
(:class:`~skippy.engine.scheduling.kv_cache.KVCacheManager`) reads the running ones.
"""

from __future__ import annotations

import collections
import enum

import attrs

from skippy.engine.hooks.signals import SignalWindow
from skippy.engine.scheduling.batch import SeqState
from skippy.engine.scheduling.budget import BudgetState
from skippy.engine.scheduling.events import HookRequest, SeqRequest, TokenEvent
from skippy.engine.scheduling.prefix import pack
from skippy.engine.scheduling.spec import SpecState


class Phase(enum.Enum):
    """Where a sequence is in its life (see the diagram in :mod:`~skippy.engine.scheduling.core`)."""

    WAITING = "waiting"        #: queued; no slot yet
    PREFILLING = "prefilling"  #: holds a slot; prompt (or injected) tokens left to put in the KV cache
    DECODING = "decoding"      #: holds a slot; its last sampled token goes into the next batch
    PARKED = "parked"          #: holds a slot; its sampled token is held until a hook verdict
    FINISHED = "finished"      #: its FinishEvent is out; slot freed or kept in the prefix cache


@attrs.define(eq=False)
class RequestState:
    """One request in the scheduler, from its submission to its finish.

    ``kv`` is its KV state once admitted (slot, tokens in the KV cache, pending
    token; ``None`` while waiting); ``sampler`` its llama.cpp sampler chain;
    ``held`` the sampled token held while parked, ``parked_on`` the hook call it waits for;
    ``injected`` tokens added by hooks; ``cached`` prompt tokens reused from the prefix cache; ``spec`` its
    speculative-decoding state (``None``: off); ``scored`` the prompt tokens scored so far
    (``prompt_logprobs``), sent before the first token; ``budget`` its reasoning budget's state and
    ``forced`` the tokens it forces next, in place of sampled ones (:mod:`.budget`). Times are the
    core clock's seconds.
    """

    request: SeqRequest
    phase: Phase = Phase.WAITING
    kv: SeqState | None = None
    sampler: object = None
    window: SignalWindow | None = None
    held: TokenEvent | None = None
    parked_on: HookRequest | None = None
    injected: int = 0
    cached: int = 0
    spec: SpecState | None = None
    budget: BudgetState | None = None
    forced: collections.deque[int] = attrs.Factory(collections.deque)
    t_queued: float = 0.0
    scored: list[TokenEvent] | None = attrs.Factory(list)  # None once sent
    t_admit: float = 0.0
    t_first: float = 0.0
    backend: bool = False  # sampled by llama.cpp's greedy sampler in the decode graph
    _packed: bytes | None = None  # the prompt packed for prefix comparisons (made once, when first asked)

    @property
    def rid(self) -> int:
        return self.request.rid

    @property
    def packed_prompt(self) -> bytes:
        """The request's prompt as :func:`~skippy.engine.scheduling.prefix.pack` gives it (made once)."""
        if self._packed is None:
            self._packed = pack(self.request.prompt)
        return self._packed

    @property
    def n_prefilled(self) -> int:
        """KV tokens computed by prefill from the prompt (not generated or injected text): the
        only ones offered for reuse.

        llama.cpp computes a token decoded alone (a generated token) with other kernels than a
        token inside a prefill batch, and the two KV values differ in their last bits (measured on
        CPU: a 32-token prefix decoded one token at a time moved the logits 600 tokens later by up
        to 0.3). Reusing generated tokens would make a cached prompt's greedy output differ from a
        cold run's; a prompt's tokens are prefilled alike on both paths.
        """
        return min(self.kv.n_past, len(self.request.prompt)) if self.kv is not None else 0
