"""The decode scheduler's policy as a sans-IO state machine (no trio, no threads, no clock of its own).

:class:`SchedulerCore` owns every rule of a request's life in the decode
scheduler; the :class:`~skippy.actors.scheduler.DecodeScheduler` actor only
moves messages (as vLLM v1's ``EngineCore.step()`` drives its ``Scheduler``,
and h11's ``Connection`` leaves all I/O to its caller). One step is three calls::

    step = core.plan()                            # admit, then plan one batch (a StepPlan)
    result = execute(runtime, step)               # llama_decode + sampling (decode thread): a StepResult
    outputs = core.update(step, result)           # tokens, finishes, hook parks

Inputs: :meth:`~SchedulerCore.add`, :meth:`~SchedulerCore.cancel`,
:meth:`~SchedulerCore.on_verdict`. Outputs are ``(rid, event)`` pairs, in
order: :class:`TokenEvent` and :class:`FinishEvent` go to the request;
:class:`HookRequest` asks the hook evaluator for a verdict on a parked sequence.

Each sequence has an explicit :class:`Phase` (llama.cpp's server names its
``slot_state``)::

    WAITING --admit--> PREFILLING --last prompt chunk--> DECODING <--verdict-- PARKED
                             ^                               |  --hook fires-->   |
                             +-------- hook injection -------+-------------------+
    any phase --cancel / EOG / length / stop verdict / error--> FINISHED

The rules, each with a unit test in ``tests/unit/test_scheduler_core.py`` (those of prefix reuse,
sliding-window models, context checkpoints and slot order are carried out by the core's
:class:`~skippy.engine.scheduling.kv_cache.KVCacheManager`):

- **Admission** in arrival order (``SeqRequest.arrival``, else submission order) while a slot
  is free or a prefix-cache entry can be evicted; at most ``max_queue`` requests wait
  (:class:`QueueFull`).
- **Prefix reuse** (:mod:`skippy.engine.scheduling.prefix`): the resident or
  running sequence sharing the longest prefix is reused in place (resident: when no
  slot is free, or when the new prompt keeps nearly all of it or the host prompt cache
  saves it, as in llama-server, since a copy between KV streams moves the source's cells twice
  or a whole stream),
  or copied into a free slot (``llama_memory_seq_cp``); with no
  match, a free slot, else the least recently used entry is evicted (of the
  same ``prompt_cache_key`` first). Among equally long matches, and among entries to evict,
  the one the next waiting requests could reuse least goes first (``claim``), so a request
  that shares only a system prompt does not take the entry holding another's whole prompt.
  A request whose prefix a running prefill will soon hold waits for it without holding back
  the requests behind it.
  A prefix is worth reusing from ``MIN_REUSE`` tokens, or from the request's
  ``min_reuse`` (the choices of an ``n`` > 1 prompt share even a short one).
- **Sliding-window models** (Gemma 2/3...: ``meta.n_swa`` > 0, without
  ``meta.swa_full``): llama.cpp's SWA layers overwrite cells that fell out of the
  window, so a source is reused only when its KV still holds the window the first
  prefilled position needs (``llama_memory_seq_pos_min(slot) <= max(0, n - n_swa)``,
  llama-server's rule; else the next best source, else a full prefill); a finished
  sequence whose trimmed KV can serve no prefix is not kept; no speculation (a
  rejected draft's trim would leave a hole in the window).
- **Context checkpoints** (:mod:`skippy.engine.scheduling.checkpoint`; recurrent and
  hybrid models, whose state cannot be trimmed, and sliding-window caches, with
  ``ctx_checkpoints`` > 0): a request with a boundary (``checkpoint_at``: its chat
  history without the generation prompt) and ``cache_prompt`` stops its prefill
  there for one step, and its state is copied to host memory right after that step's
  decode (``StepPlan.saves``, on the decode thread); at admission, a checkpoint whose
  tokens are a prefix of the prompt (at most ``len - min_tail``) and longer than any
  reusable cached prefix is restored into the new slot, and only the rest is prefilled
  (``cached_tokens``). ``cache_prompt: false`` neither saves nor restores. At most
  ``ctx_checkpoints`` per slot and ``checkpoint_budget`` bytes are kept, least
  recently used first out.
- **Prompt logprobs**: a request with ``prompt_logprobs`` gets the logits of
  every prompt position in its prefill batches, and one :class:`PromptLogprobs`
  before its first token.
- **Slot order**: the lowest free slot is taken, so running slots stay compact
  (llama.cpp decodes each run of consecutive sequence ids as one micro-batch).
- **Prefill budget**: :func:`~skippy.engine.scheduling.batch.plan_step`
  (shortest remaining prompt first, the oldest prefill's guaranteed share).
- **Hooks**: after the first sampled token (``after_prefill``) and when the
  signal window fires (``mid_generation``) the sequence is parked with its
  token held; the verdict emits it (no action), discards it and finishes
  (``Stop``), or discards it and appends the injected tokens to the sequence,
  prefilled at the next steps (``Inject``; never sent to the client).
- **Speculation** (:mod:`skippy.engine.scheduling.spec`, prompt lookup as
  vLLM's ``ngram``): a decoding sequence with speculation on drafts up to
  ``k`` tokens from an earlier occurrence of its last n-gram; the batch holds
  its pending token and the draft (after prefill in the budget), and
  :func:`~.decode.verify_draft` samples while the draft matches. Every sampled token
  takes the same path as one without speculation (EOG, length, logprobs), in
  order; the KV cache is trimmed past the accepted prefix. Never for hooked
  sequences (a park would leave sampled tokens unemitted), recurrent models
  (no trim) or sliding-window caches (see above); drafts never reach past ``max_tokens`` or the context, adapt
  their length, and back off when acceptance is low.
- **Multi-step runs** (``scheduler_steps`` > 1, vLLM's ``num_scheduler_steps``): a batch in which
  every running sequence decodes one token (no prefill, no embedding batch, no hook window,
  reasoning budget or speculation) runs up to that many decodes back to back on the decode
  thread (:func:`~.decode.run_steps`), each with the tokens just sampled; a sequence leaves the run at its
  end-of-generation or stop token, or at its last token under ``max_tokens`` and the context, so
  nothing is decoded past a finish; a run is no longer than the tokens its youngest sequence has
  generated (a stream's first tokens come a step apart); it ends early once a sequence finishes
  while requests wait, or when an input arrives (``interrupt``). Its tokens are applied in order,
  as single steps'.
- **LoRA adapter sets** (``SeqRequest.lora``): llama.cpp applies adapters to the whole context, so a
  step decodes the sequences of one set (its :attr:`~.step.StepPlan.lora`, applied before the decode);
  with several sets running, the steps go round them, the set served longest ago first. A cached prefix,
  context checkpoint or prompt-cache state is reused only by a prompt of the set it was computed under.
- **Finish**: an end-of-generation token (``stop``), ``max_tokens`` or a full
  context (``length``; ``max_tokens`` 0 finishes once the prompt is prefilled), a cancel, a hook stop,
  or a failed decode (``error``);
  the prefilled prompt's KV stays resident for reuse, the rest is removed.
- **Embeddings** (:mod:`skippy.engine.scheduling.embed`, the core's
  :class:`~skippy.engine.scheduling.embed.EmbedQueue`): :meth:`~SchedulerCore.add_embedding` queues a request's
  inputs; each step carries at most one embedding batch for the
  embedding context, a quarter of the step's token budget while anything generates
  (the oldest input always goes), and a request gets one :class:`EmbeddingsEvent`
  once all its inputs are embedded.
"""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from skippy.engine.errors import QueueFull
from skippy.engine.hooks.policy import Inject, Outcome, Stop
from skippy.engine.hooks.signals import GenerationSignals, PrefillSignals, SignalWindow
from skippy.engine.lora import NO_LORA, LoraSet
from skippy.engine.runtime.base import NO_TOKEN, Runtime
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.sampling.vector import SeqSampler
from skippy.engine.scheduling.batch import BatchPlan, SeqState, plan_step
from skippy.engine.scheduling.budget import BudgetState
from skippy.engine.scheduling.checkpoint import CheckpointStore
from skippy.engine.scheduling.config import SchedulerConfig
from skippy.engine.scheduling.embed import EmbedQueue
from skippy.engine.scheduling.events import (
    EmbedRequest,
    FinishEvent,
    HookEvent,
    HookRequest,
    Output,
    PrefillProgress,
    PromptLogprobs,
    SchedulerCounters,
    SchedulerStats,
    SeqRequest,
    TokenEvent,
    drafted_event,
)
from skippy.engine.scheduling.kv_cache import KVCacheManager
from skippy.engine.scheduling.request import Phase, RequestState
from skippy.engine.scheduling.spec import MAX_DRAFT, SpecState
from skippy.engine.scheduling.step import SampleTask, ScoreTask, StepPlan, StepResult

#: the key of a slot whose backend chain is the plain greedy one (any plain greedy sequence may use it)
GREEDY_CHAIN = -1

log = logging.getLogger("skippy.scheduler")

@attrs.frozen
class SlotInfo:
    """One slot as llama-server's ``GET /slots`` shows it (a snapshot).

    ``rid``: the request holding the slot (``None``: idle); ``phase`` its phase; ``n_prompt`` its prompt
    tokens, ``n_cached`` of them reused from the prefix cache, ``n_decoded`` tokens generated so far,
    ``max_tokens`` its limit, ``params`` its sampling parameters. ``n_kv``: tokens in the slot's KV
    cache (a running sequence's, or an idle slot's resident prefix-cache entry). ``speculative``: the running
    sequence speculates; an idle slot, whether a request that does not say would (llama-server's
    ``speculative``: the slot can speculate).
    """

    id: int
    rid: int | None = None
    phase: Phase | None = None
    n_prompt: int = 0
    n_cached: int = 0
    n_decoded: int = 0
    max_tokens: int = 0
    params: Any = None
    n_kv: int = 0
    speculative: bool = False


class SchedulerCore:
    """Continuous-batching policy over one :class:`Runtime` (see the module docstring).

    ``config`` (a :class:`~.config.SchedulerConfig`) holds its options: the step's token budget, the
    queue bound, the signal window, speculation, multi-step runs, and the KV options (``prefix_cache``,
    ``ctx_checkpoints``, ``checkpoint_budget``, ``prompt_cache``, ``min_tail``) of :attr:`kv_cache`, the
    :class:`~.kv_cache.KVCacheManager` the core delegates slots, prefix reuse, the prompt cache and
    context checkpoints to. ``hooks`` says whether a hook evaluator is there to park sequences for;
    ``clock`` gives seconds (tests pass a fake).

    The core calls the runtime's sampler methods (``new_sampler``, ``free_sampler``, through
    :attr:`kv_cache` its KV methods) and the vocabulary (hook injections) itself, from the caller's
    thread; only :func:`~.decode.execute` decodes. Not thread-safe: one owner drives it.
    """

    def __init__(self, runtime: Runtime, config: SchedulerConfig, *, hooks: bool = False,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.runtime = runtime
        self.config = config
        meta = runtime.meta
        self.n_slots = meta.n_seq_max
        #: tokens of one step while a sequence decodes (``config.step_tokens``, at most ``n_batch``): the prefill
        #: chunks beside running streams are cut to it, which bounds their ITL
        self.step_tokens = min(config.step_tokens or meta.n_batch, meta.n_batch)
        #: tokens of one step while none decodes (llama.cpp's ``n_batch``, llama-server's ``-b``): no stream's ITL
        #: to bound, and a prompt cut in more decodes costs more (on 2 CPU cores a 270-token prompt after 1680
        #: cached tokens took 1055 ms + 319 ms as 256 + 14 tokens)
        self.n_batch = meta.n_batch
        self.max_queue = config.max_queue
        self.hooks = hooks
        self.signal_config = config.signal_config
        self.min_tail = config.min_tail
        self.spec_ngram = config.spec_ngram
        self.scheduler_steps = max(1, config.scheduler_steps)
        self._clock = clock
        self.counters = SchedulerCounters()  # what stats() snapshots
        # slot -> what its backend chain samples for: GREEDY (any plain greedy sequence) or a request id
        self._backend_slots: dict[int, int] = {}  # (attached, or about to be)
        self._sampler_changes: dict[int, SamplingParams | None] = {}  # slot -> attach / detach, for the next batch
        self._waiting: collections.deque[RequestState] = collections.deque()
        self._running: dict[int, RequestState] = {}  # admitted, in admission order
        self._seqs: dict[int, RequestState] = {}  # waiting or running, by rid
        self._lora_served: dict[LoraSet, int] = {}  # LoRA set -> the plan that last served it (_lora_group)
        self._lora_steps = 0
        #: slots, prefix reuse, the prompt cache and context checkpoints (reads the running sequences)
        self.kv_cache = KVCacheManager(runtime, self._running, self.counters, config)
        #: embedding requests, their inputs and the embedding batch in flight
        self.embeds = EmbedQueue(runtime, self.counters, clock)

    # -- inputs --------------------------------------------------------------------
    def add(self, request: SeqRequest) -> None:
        """Queue ``request`` (phase WAITING); raises :class:`QueueFull` when ``max_queue`` wait.

        ``request.rid`` must not be in use.
        """
        if self.n_queued() >= self.max_queue:
            raise QueueFull(f"the queue is full ({self.max_queue} requests waiting); retry later")
        assert request.rid not in self._seqs and request.rid not in self.embeds, f"rid {request.rid} is in use"
        seq = RequestState(request, t_queued=self._clock())
        self._seqs[request.rid] = seq
        # priority, then arrival order (SeqRequest.priority, .arrival): behind every request of a lower priority
        # and every one of its own that came earlier, ahead of the rest
        k = len(self._waiting)
        while k and _queued_after(self._waiting[k - 1].request, request):
            k -= 1
        self._waiting.insert(k, seq)

    def add_embedding(self, request: EmbedRequest) -> None:
        """Queue an embedding request's inputs (they go into embedding batches in arrival order).

        Raises :class:`QueueFull` when ``max_queue`` requests wait (generation and embedding requests
        together), ``ValueError`` when the runtime has no usable embedding context, or an input is empty
        or longer than its ``n_ctx``. ``request.rid`` must not be in use.
        """
        self.embeds.validate(request)
        if self.n_queued() >= self.max_queue:
            raise QueueFull(f"the queue is full ({self.max_queue} requests waiting); retry later")
        assert request.rid not in self._seqs and request.rid not in self.embeds, f"rid {request.rid} is in use"
        self.embeds.add(request)

    def cancel(self, rid: int) -> list[Output]:
        """Finish ``rid`` as ``cancelled`` in whatever phase (no-op when unknown or finished).

        A waiting request leaves the queue silently (its caller is gone); an
        admitted one gets its :class:`FinishEvent` and its slot back. An embedding
        request's inputs leave the queue silently (those in a running batch are dropped when it ends).
        """
        if self.embeds.cancel(rid):
            return []
        seq = self._seqs.get(rid)
        if seq is None:
            return []
        if seq.phase is Phase.WAITING:
            self._waiting.remove(seq)
            del self._seqs[rid]
            seq.phase = Phase.FINISHED
            return []
        return [self._finish(seq, "cancelled")]

    def is_parked(self, rid: int) -> bool:
        """Whether ``rid`` is parked on a hook call (its :class:`HookRequest` out, no verdict yet)."""
        seq = self._seqs.get(rid)
        return seq is not None and seq.phase is Phase.PARKED

    def on_verdict(self, rid: int, outcome: Outcome) -> list[Output]:
        """Resume parked ``rid`` with a hook ``outcome`` (ignored unless it is parked).

        No action (or anything but Stop/Inject): the held token is emitted and
        decoding resumes. ``Stop(reason)``: the held token is discarded and the
        request finishes with that reason. ``Inject(text)``: the held token is
        discarded and ``text`` (tokenized without special tokens) is appended,
        prefilled at the next steps where the hook fired; an injection that
        does not fit the context is ignored like no action. A sequence with a grammar or constraint keeps
        its held token (emitted, then the injection after it in the KV cache): the grammar took it when it
        was sampled and cannot take it back, so discarding it would leave the output outside the grammar
        (a lazy grammar only once its trigger appeared: :meth:`_grammar_took`).

        A request that asked for hook events (``SeqRequest.hook_events``) gets a
        :class:`HookEvent` first, saying what was done; so does any request when the outcome has a
        ``report`` (a consultation), carried as the event's ``consult``.
        """
        seq = self._seqs.get(rid)
        if seq is None or seq.phase is not Phase.PARKED:
            return []  # finished or cancelled while parked
        held, seq.held = seq.held, None
        call, seq.parked_on = seq.parked_on, None
        assert held is not None and seq.kv is not None
        extra = getattr(outcome, "report", None)  # a consultation's report: the log line reads it too
        # the call a HookEvent reports (asked for, or a consultation's), or None: no HookEvent
        report = call if seq.request.hook_events or extra is not None else None
        consult = dict(extra) if extra is not None else None
        if isinstance(outcome, Stop):
            head = [(rid, _hook_event(report, held, "stop", reason=outcome.reason))] if report is not None else []
            return head + [self._finish(seq, outcome.reason, stopped_by_hook=True)]
        if isinstance(outcome, Inject):
            tokens = self.runtime.vocab.tokenize(outcome.text, add_special=False, parse_special=False)
            # a grammar or constraint took the held token when it was sampled (neither can take one back): it is
            # kept, before the injection, so the output stays in the grammar's language
            keep = self._grammar_took(seq, held)
            room = self.runtime.meta.n_ctx_seq - 1 - len(seq.kv.prompt) - keep
            if tokens and len(tokens) <= room and not (keep and seq.kv.n_generated + 1 >= seq.kv.max_tokens):
                out: list[Output] = [(rid, _hook_event(report, held, "inject", text=outcome.text,
                                                       injected_tokens=len(tokens), consult=consult))] \
                    if report is not None else []
                if keep:
                    out.append(self._count(seq, held))
                    seq.kv.prompt.append(held.token)
                seq.kv.prompt.extend(tokens)
                seq.injected += len(tokens)
                seq.phase = Phase.PREFILLING
                return out
            log.warning("hook injection of %d tokens does not fit (room %d); ignored", len(tokens), room)
            if consult is not None:  # the peer answered, but nothing was injected
                consult.update(chars=0, error="no_room")
        head = [(rid, _hook_event(report, held, "none", consult=consult))] if report is not None else []
        return head + self._accept(seq, held)

    def _grammar_took(self, seq: RequestState, held: TokenEvent) -> bool:
        """Whether ``seq``'s grammar or constraint constrained its ``held`` token (a hook's injection keeps it
        then): always, except a lazy grammar (emulated ``auto`` tool calls) whose trigger has not appeared in the
        text sampled so far, ``held`` included (llama.cpp's full match of each pattern; injected text counts as
        sampled, a rare false trigger)."""
        params = seq.request.params
        if params.constraint is not None:
            return True
        if params.grammar is None:
            return False
        if not params.grammar_lazy_patterns:
            return True
        assert seq.kv is not None
        piece = self.runtime.vocab.piece
        text = b"".join(piece(t) for t in [*seq.kv.prompt[len(seq.request.prompt):], held.token])
        decoded = text.decode("utf-8", errors="replace")
        return any(re.fullmatch(p, decoded) for p in params.grammar_lazy_patterns)

    # -- one step ------------------------------------------------------------------
    def plan(self) -> StepPlan:
        """Admit waiting requests, then plan one batch.

        ``batch`` is ``None`` when nothing can decode (no sequences, or every
        one parked); ``outputs`` holds admission's finishes (a request whose
        sampler llama.cpp refuses finishes with ``error``).
        """
        outputs = self._admit()
        for s in self._running.values():
            if s.spec is not None and s.phase is Phase.DECODING:
                s.kv.draft = () if s.forced else self._draft(s)  # type: ignore[union-attr]  # forced: no sampling
        lora, active = self._lora_group()
        embed = self.embeds.plan(active, self.step_tokens)
        streaming = any(s.phase is Phase.DECODING or s.phase is Phase.PARKED for s in self._running.values())
        budget = (self.step_tokens if streaming or embed is not None else self.n_batch) - \
            (embed.n_tokens if embed is not None else 0)
        batch = plan_step(active, max(budget, len(active))) if active else None
        if batch is None:
            return StepPlan(None, (), tuple(outputs), embed=embed)
        samples = []
        for kv, index in batch.outputs:
            seq = self._running[kv.rid]
            req = seq.request
            forced = seq.forced[0] if seq.forced else None  # the reasoning budget's: accepted, not sampled
            samples.append(SampleTask(kv.rid, index, seq.sampler,
                                      req.params.top_logprobs if req.params.logprobs else None,
                                      req.signals or seq.window is not None, kv.draft,
                                      backend=seq.backend and forced is None, forced=forced,
                                      post_probs=req.params.logprobs and req.params.post_sampling_probs))
        batch, scores = self._scores(batch)
        saves = tuple((kv.rid, kv.slot) for kv, n in batch.advance
                      if kv.checkpoint_at and kv.n_past + n == kv.checkpoint_at)
        samplers: tuple[tuple[int, SamplingParams | None], ...] = ()
        if self._sampler_changes:
            samplers, self._sampler_changes = tuple(self._sampler_changes.items()), {}
        if (self.scheduler_steps > 1 and embed is None and not scores and not saves and not samplers
                and len(batch.entries) == len(samples) == len(active)):
            return self._multi_step(batch, samples, tuple(outputs), lora)
        return StepPlan(batch, tuple(samples), tuple(outputs), scores, embed, saves, samplers=samplers, lora=lora)

    def _lora_group(self) -> tuple[LoraSet | None, list[SeqState]]:
        """The LoRA adapter set this step decodes (``None`` when the runtime has no adapters: nothing to apply),
        and the prefilling and decoding sequences of that set.

        llama.cpp applies adapters to the whole context (``llama_set_adapters_lora``), not per sequence, so a
        step holds the sequences of one set; with several sets running, the steps go round them: the set
        served longest ago goes next (a new one first, ties in admission order), so every set progresses and
        each step switches at most once (a multi-step run stays on its set for its decodes).
        """
        live = [s for s in self._running.values() if s.phase in (Phase.PREFILLING, Phase.DECODING)]
        sets = list(dict.fromkeys(s.request.lora for s in live))
        if len(sets) <= 1:
            self._lora_served.clear()
            one = sets[0] if sets else NO_LORA
            return (one if self.runtime.meta.lora else None), [s.kv for s in live if s.kv is not None]
        self._lora_served = {k: self._lora_served.get(k, -1) for k in sets}
        lora = min(sets, key=self._lora_served.__getitem__)
        self._lora_steps += 1
        self._lora_served[lora] = self._lora_steps
        return lora, [s.kv for s in live if s.kv is not None and s.request.lora == lora]

    def _multi_step(self, batch: BatchPlan, samples: list[SampleTask], outputs: tuple[Output, ...],
                    lora: LoraSet | None = None) -> StepPlan:
        """A decode-only batch as a multi-step run of up to ``scheduler_steps`` decodes, when every sequence in
        it may take one: no hook window (a park would hold tokens already decoded past), no reasoning budget (a
        forced token replaces a sampled one), no speculation (its own multi-token path), nothing else to run."""
        # a run is no longer than the tokens its youngest sequence has: a stream's first tokens come one
        # step apart (its first text may wait on the next token: a stop string or a tag could begin there)
        steps = min(self.scheduler_steps, *(kv.n_generated for kv, _ in batch.outputs))
        if steps <= 1:
            return StepPlan(batch, tuple(samples), outputs, lora=lora)
        n_ctx = self.runtime.meta.n_ctx_seq
        eog = self.runtime.meta.eog_ids
        tasks = []
        for task, (kv, _) in zip(samples, batch.outputs, strict=True):
            seq = self._running[kv.rid]
            if seq.window is not None or seq.budget is not None or seq.spec is not None:
                return StepPlan(batch, tuple(samples), outputs, lora=lora)
            # the i-th token of the run finishes the sequence once n_generated + i reaches max_tokens or
            # n_past + i + 1 the context (SchedulerCore._accept): no token is decoded past a finish
            n = min(steps, kv.max_tokens - kv.n_generated, n_ctx - 1 - kv.n_past)
            stop_ids = seq.request.params.stop_token_ids
            tasks.append(attrs.evolve(task, steps=max(n, 1), ends=eog | frozenset(stop_ids) if stop_ids else eog))
        return StepPlan(batch, tuple(tasks), outputs, steps=steps, until_finish=bool(self._waiting), lora=lora)

    def _scores(self, batch: BatchPlan) -> tuple[BatchPlan, tuple[ScoreTask, ...]]:
        """Ask for the logits of every prompt position of the sequences with ``prompt_logprobs``."""
        scoring = {kv.slot: (self._running[kv.rid].request, kv.n_past) for kv, _ in batch.advance
                   if self._running[kv.rid].request.prompt_logprobs is not None}
        if not scoring:
            return batch, ()
        entries, scores = list(batch.entries), []
        for i, e in enumerate(entries):  # a sequence's entries are its prompt from n_past on, in order
            if (got := scoring.get(e.seq_id)) is None:
                continue
            req, at = got
            scoring[e.seq_id] = req, at + 1
            if at < len(req.prompt) - 1 and req.prompt[at + 1] >= 0:  # no score for an image's placeholder
                entries[i] = attrs.evolve(e, logits=True)
                scores.append(ScoreTask(req.rid, i, req.prompt[at + 1], req.prompt_logprobs or 0))
        return attrs.evolve(batch, entries=tuple(entries)), tuple(scores)

    def update(self, step: StepPlan, result: StepResult) -> list[Output]:
        """Apply a decoded ``step`` and its ``result`` (from
        :func:`~.decode.execute`): the saved checkpoints, the sampled and scored
        tokens, then the embedding batch's result."""
        assert len(result.tokens) == len(step.samples) and len(result.scores) == len(step.scores)
        assert len(result.saved) == len(step.saves) and (result.embedded is None) == (step.embed is None)
        if step.saves:  # before the tokens: a finish below may end the sequence that saved
            self._on_saved(step.saves, result.saved)
        outputs = self._update_batch(step, result) if step.batch is not None else []
        if step.embed is not None:
            outputs += self.embeds.update(step.embed, result.embedded)  # type: ignore[arg-type]
        return outputs

    def _on_saved(self, saves: Sequence[tuple[int, int]], states: Sequence[bytes | bytearray | None]) -> None:
        """Keep the context checkpoints saved after a step: each sequence's prompt up to its ``checkpoint_at``."""
        for (rid, slot), data in zip(saves, states, strict=True):
            seq = self._running.get(rid)
            if data is not None and seq is not None and seq.kv is not None:
                self.kv_cache.keep_checkpoint(slot, seq.kv.prompt[:seq.kv.checkpoint_at], data, seq.request.lora)

    def _update_batch(self, step: StepPlan, result: StepResult) -> list[Output]:
        assert step.batch is not None
        self.counters.steps += result.decodes  # a multi-step run's decodes count one by one
        self.counters.busy_slots_total += len(step.batch.advance)
        for score, ev in zip(step.scores, result.scores, strict=True):
            seq = self._running.get(score.rid)
            if seq is not None and seq.scored is not None:
                seq.scored.append(ev)
        outputs: list[Output] = []
        for kv, n in step.batch.advance:
            if kv.n_past >= len(kv.prompt):  # a generated token entered the KV cache
                kv.prompt.append(kv.pending)  # type: ignore[arg-type]
            else:
                self.counters.prompt_tokens_total += n
                if (seq := self._running.get(kv.rid)) is not None and seq.request.progress and not seq.t_first:
                    outputs.append((kv.rid, PrefillProgress(kv.n_past + n, seq.cached, (
                        self._clock() - seq.t_admit) * 1000.0 if seq.t_admit else 0.0)))
            kv.n_past += n
            self.counters.n_tokens_max = max(self.counters.n_tokens_max, kv.n_past)
        for kv, _ in step.batch.advance:  # max_tokens 0: the prompt is in the KV cache, nothing to sample
            if kv.max_tokens == 0 and not kv.prefilling and (seq := self._running.get(kv.rid)) is not None:
                if seq.request.prompt_logprobs is not None and seq.scored is not None:
                    outputs.append((seq.rid, PromptLogprobs(tuple(seq.scored))))
                    seq.scored = None
                outputs.append(self._finish(seq, "length"))
        for task, events in zip(step.samples, result.tokens, strict=True):
            seq = self._running.get(task.rid)
            if seq is None:
                continue
            if seq.request.prompt_logprobs is not None and seq.scored is not None:
                # the prompt is prefilled: its scores go before its first token
                outputs.append((seq.rid, PromptLogprobs(tuple(seq.scored))))
                seq.scored = None
            if task.draft:
                outputs += self._on_verified(seq, task.draft, events)
            elif step.steps > 1:  # a multi-step run's tokens
                outputs += self._on_run(seq, events)
            else:
                outputs += self._on_token(seq, events[0])
        return outputs

    def fail(self, error: str) -> list[Output]:
        """The decode of the planned step raised: every admitted sequence finishes with ``error``; the step's
        embedding batch did not run, and its inputs go back to the front of the queue."""
        self.embeds.put_back()
        return [self._finish(seq, "error", error=error) for seq in list(self._running.values())]

    def close(self) -> list[Output]:
        """Finish everything as ``cancelled`` (shutdown): admitted sequences first, then the queue, then
        the embedding requests."""
        outputs = [self._finish(seq, "cancelled") for seq in list(self._running.values())]
        for seq in self._waiting:
            outputs.append((seq.rid, self._finish_event(seq, "cancelled")))
            seq.phase = Phase.FINISHED
            del self._seqs[seq.rid]
        self._waiting.clear()
        return outputs + self.embeds.close()

    # -- reading -------------------------------------------------------------------
    @property
    def checkpoints(self) -> CheckpointStore | None:
        """The context-checkpoint store (``None``: this model or configuration keeps none)."""
        return self.kv_cache.checkpoints

    @property
    def idle(self) -> bool:
        """Nothing waits and nothing runs: the owner may block until the next input."""
        return not self._running and not self._waiting and not self.embeds.has_inputs

    @property
    def n_waiting(self) -> int:
        """Requests queued for a slot."""
        return len(self._waiting)

    @property
    def n_embed_waiting(self) -> int:
        """Embedding requests not answered yet."""
        return len(self.embeds)

    def n_queued(self, incoming: int = 0, incoming_embeds: int = 0) -> int:
        """What ``max_queue`` bounds: the generation requests that wait for a slot no running sequence holds (the
        queued ones plus ``incoming`` not added yet, less the slots free for them), and the embedding requests not
        answered yet (plus ``incoming_embeds``) beyond the embedding context's sequences. A burst on an idle server
        is not refused while it fills free places."""
        free = self.n_slots - len(self._running)
        info = self.runtime.meta.embeddings
        embed_places = info.n_seq_max if info is not None else 0
        return (max(0, len(self._waiting) + incoming - free)
                + max(0, len(self.embeds) + incoming_embeds - embed_places))

    def phase(self, rid: int) -> Phase:
        """The phase of ``rid`` (FINISHED once it has left, or when it never came)."""
        seq = self._seqs.get(rid)
        return seq.phase if seq is not None else Phase.FINISHED

    def slot(self, rid: int) -> int | None:
        """The slot ``rid`` holds, or ``None``."""
        seq = self._seqs.get(rid)
        return seq.kv.slot if seq is not None and seq.kv is not None else None

    def stats(self) -> SchedulerStats:
        """A frozen snapshot of the queue, slots and counters."""
        ck = self.kv_cache.states
        return self.counters.snapshot(
            n_slots=self.n_slots, n_running=len(self._running), n_waiting=len(self._waiting),
            n_parked=sum(s.phase is Phase.PARKED for s in self._running.values()),
            kv_cells_used=sum(s.kv.n_past for s in self._running.values() if s.kv is not None) + self.kv_cache.cells,
            n_embed_waiting=len(self.embeds),
            checkpoints=len(ck) if ck is not None else 0, checkpoint_bytes=ck.nbytes if ck is not None else 0,
            checkpoints_evicted_total=ck.evicted if ck is not None else 0,
            checkpoint_budget=ck.budget if ck is not None else None)

    @property
    def can_speculate(self) -> bool:
        """Whether this model's sequences may speculate (not a recurrent model, nor a sliding-window cache
        without ``--swa-full``: their KV cannot drop a rejected draft)."""
        return not self.runtime.meta.is_recurrent and not self.kv_cache.swa_check

    def slots(self) -> tuple[SlotInfo, ...]:
        """Every slot's :class:`SlotInfo`, by slot id (llama-server ``GET /slots``)."""
        idle = self.spec_ngram > 0 and self.can_speculate
        out = [SlotInfo(i, n_kv=len(self.kv_cache.resident(i) or ()), speculative=idle) for i in range(self.n_slots)]
        for seq in self._running.values():
            kv = seq.kv
            assert kv is not None
            out[kv.slot] = SlotInfo(kv.slot, seq.rid, seq.phase, len(seq.request.prompt), seq.cached,
                                    kv.n_generated, kv.max_tokens, seq.request.params, kv.n_past,
                                    speculative=seq.spec is not None)
        return tuple(out)

    def cached(self, rid: int) -> int:
        """Prompt tokens of ``rid`` reused from the prefix cache (0 while waiting or once finished)."""
        seq = self._seqs.get(rid)
        return seq.cached if seq is not None else 0

    # -- slot state (llama-server POST /slots/{id}?action=save|restore|erase) ---------
    def slot_busy(self, slot: int) -> bool:
        """True while a sequence runs in ``slot`` (its KV cannot be saved, restored or erased then)."""
        return any(s.kv is not None and s.kv.slot == slot for s in self._running.values())

    def slot_tokens(self, slot: int) -> list[int]:
        """The tokens whose KV an idle ``slot`` holds (its prefix-cache entry; empty when free)."""
        return self.kv_cache.slot_tokens(slot)

    def erase_slot(self, slot: int) -> int:
        """Clear idle ``slot``'s KV and prefix-cache entry; returns how many tokens it held."""
        assert not self.slot_busy(slot), f"slot {slot} is running"
        return self.kv_cache.erase_slot(slot)

    def adopt_slot(self, slot: int, tokens: list[int]) -> None:
        """Idle ``slot``'s KV now holds ``tokens`` (a restored state file): offer them for prefix reuse.

        Call :meth:`erase_slot` first; with no tokens (a failed restore) the slot stays free.
        """
        assert not self.slot_busy(slot) and self.kv_cache.resident(slot) is None, f"slot {slot} is not cleared"
        self.kv_cache.adopt_slot(slot, tokens)

    # -- idle saves (KVCacheManager.idle_saves, while nothing waits or runs) ----------
    def idle_saves(self) -> list[tuple[int, list[int]]]:
        """Resident entries to copy to the host prompt cache while the owner is idle, as ``(slot, tokens)``
        (:meth:`KVCacheManager.idle_saves`); empty while anything waits or runs. The owner reads each state
        (:meth:`Runtime.state_seq_get_data`) and hands it to :meth:`add_idle_save`, asking
        :meth:`needs_idle_save` first (an earlier save may cover it by then)."""
        return self.kv_cache.idle_saves() if self.idle else []

    def needs_idle_save(self, slot: int, tokens: Sequence[int]) -> bool:
        """The owner is idle and :meth:`KVCacheManager.needs_idle_save`."""
        return self.idle and self.kv_cache.needs_idle_save(slot, tokens)

    def add_idle_save(self, slot: int, tokens: Sequence[int], data: bytes | bytearray) -> None:
        """Keep ``data``, the state of ``slot`` read for :meth:`idle_saves`, in the prompt cache (if the owner
        is still idle and ``slot`` still holds ``tokens``)."""
        if self.idle:
            self.kv_cache.add_idle_save(slot, tokens, data)

    # -- admission -----------------------------------------------------------------
    def _admit(self) -> list[Output]:
        """Start waiting requests in arrival order while a slot (free or cached) is there.

        A request whose prefix a running prefill will soon hold waits for it (and keeps its
        place), but does not hold back the requests behind it: those that share nothing with
        a running prefill start now. At most ``n_seq_max`` such waiters are looked past per step.
        """
        outputs: list[Output] = []
        deferred: list[RequestState] = []
        while self._waiting and self.kv_cache.can_allocate:
            seq = self._waiting.popleft()
            req = seq.request
            got = self.kv_cache.allocate(req, (s.request for s in self._waiting))
            if got is None:  # a running prefill will soon hold its prefix: copy it then
                deferred.append(seq)
                if len(deferred) >= self.n_slots:
                    break
                continue
            slot, n_cached = got  # never inside an image (KVCacheManager.allocate): it is decoded whole
            try:
                seq.sampler = self.runtime.new_sampler(req.params)
            except ValueError as exc:
                self.kv_cache.release(slot)
                del self._seqs[req.rid]
                seq.phase = Phase.FINISHED
                outputs.append((req.rid, self._finish_event(seq, "error", error=str(exc))))
                continue
            if n_cached:
                self.counters.prefix_hits += 1
                self.counters.cached_tokens_total += n_cached
            seq.cached = n_cached
            seq.kv = SeqState(rid=req.rid, slot=slot, prompt=list(req.prompt), max_tokens=req.max_tokens,
                              n_past=n_cached, checkpoint_at=self.kv_cache.checkpoint_at(req, n_cached),
                              media=req.media)
            seq.phase = Phase.PREFILLING
            seq.t_admit = self._clock()
            if req.hooks and self.hooks:
                seq.window = SignalWindow(self.signal_config)
            k = self.spec_ngram if req.speculative is None else req.speculative
            if (k > 0 and seq.window is None and self.can_speculate
                    and not req.media):  # a draft from the prompt could hold an image's placeholder ids
                seq.spec = SpecState(min(k, MAX_DRAFT))
            if req.reasoning_budget is not None:
                seq.budget = BudgetState(req.reasoning_budget)
                seq.forced.extend(seq.budget.at_start())
            if self.runtime.meta.backend_sampling:
                self._use_backend(seq, slot)
            self._running[req.rid] = seq
        self._waiting.extendleft(reversed(deferred))
        return outputs

    def _use_backend(self, seq: RequestState, slot: int) -> None:
        """Whether llama.cpp samples ``seq`` in the decode graph: a vectorized sampler whose tokens it samples
        alike (:attr:`SeqSampler.graph_exact`), greedy or (``meta.backend_sampled``) sampled, and no logprobs,
        prompt logprobs, signals or speculation (they read the raw logits or several outputs); a chain with state
        (a sampled or penalized one) also no reasoning budget, whose forced tokens the chain never sampled
        (llama.cpp's rule). The slot's chain is attached or detached in the next step when that differs from its
        state (one graph reserve, ~10 ms on 2 cores): a plain greedy chain is kept for the next plain greedy
        sequence, a chain with state is its request's (its seed's random stream)."""
        req, sampler = seq.request, seq.sampler
        plain = isinstance(sampler, SeqSampler) and sampler.plain_greedy
        seq.backend = (isinstance(sampler, SeqSampler) and sampler.graph_exact and not req.params.logprobs
                       and req.prompt_logprobs is None and not req.signals and seq.window is None and seq.spec is None
                       and (plain or (self.runtime.meta.backend_sampled and seq.budget is None)))
        key = None if not seq.backend else GREEDY_CHAIN if plain else req.rid
        if key != self._backend_slots.get(slot):
            if key is None:
                del self._backend_slots[slot]
            else:
                self._backend_slots[slot] = key
            self._sampler_changes[slot] = None if key is None else req.params

    # -- speculation ---------------------------------------------------------------
    def _draft(self, seq: RequestState) -> tuple[int, ...]:
        """Draft tokens to verify after ``seq``'s pending token at this step (``()``: none).

        At most ``k``, and few enough that every token verification may sample is
        emitted: the last of them still leaves room for one more under
        ``max_tokens`` and the context (so no sampled token is beyond a finish).
        """
        kv, spec = seq.kv, seq.spec
        assert kv is not None and spec is not None and kv.pending is not None
        if seq.budget is not None and (seq.budget.active or seq.forced):
            return ()  # a forced close would replace tokens a draft assumed
        k = min(spec.n, kv.max_tokens - kv.n_generated - 1, self.runtime.meta.n_ctx_seq - kv.n_past - 2)
        if k <= 0 or not spec.ready():
            return ()
        return spec.drafter.propose(kv.prompt, kv.pending, k, self.runtime.meta.eog_ids)

    def _on_verified(self, seq: RequestState, draft: tuple[int, ...], events: tuple[TokenEvent, ...]) -> list[Output]:
        """Emit a verified draft's tokens in order (each as :meth:`_on_token`), then trim the KV cache.

        ``events[i]`` was sampled with ``draft[:i]`` in the KV cache after the
        pending token; each token after the first moves the previous one (the
        matching draft token) into the sequence for good. Stops at a finish or
        park; the draft tokens not accepted are removed from the KV cache.
        """
        kv, spec = seq.kv, seq.spec
        assert kv is not None and spec is not None
        kv.draft = ()
        # counted first, so a finish among these tokens reports them: only the last token can finish
        # (a draft holds no EOG, and _draft left room under max_tokens and the context) or park (no hooks)
        spec.record(len(draft), len(events) - 1)
        self.counters.spec_draft_tokens_total += len(draft)
        self.counters.spec_accepted_tokens_total += len(events) - 1
        outputs: list[Output] = []
        last = len(events) - 1
        for i, ev in enumerate(events):
            if i:
                kv.prompt.append(kv.pending)  # type: ignore[arg-type]  # == draft[i - 1], already in the KV
                kv.n_past += 1
            # every token but the last is an accepted draft token (== draft[i]); the last was sampled past them
            outputs += self._on_token(seq, drafted_event(ev) if i < last else ev)
            if seq.phase is not Phase.DECODING:
                break
        if seq.phase is not Phase.FINISHED:  # a finish trimmed the KV already
            self.kv_cache.trim(kv.slot, kv.n_past, kv.media)
        return outputs

    def _on_run(self, seq: RequestState, events: tuple[TokenEvent, ...]) -> list[Output]:
        """Emit a multi-step run's tokens in order, each as :meth:`_on_token` after the one before entered the
        KV cache (``events[i]`` was sampled with ``events[:i]`` decoded); a finish ends them (the run
        decoded no further for it: :func:`~.decode.run_steps` checks the same ends and limits)."""
        kv = seq.kv
        assert kv is not None
        head = events[:-1]
        if head and seq.window is None and seq.budget is None and not seq.forced:
            # the tokens before the last neither end the sequence nor reach a limit (the run stopped it there),
            # checked here at once: they enter the KV cache and go out in one go, the last as any token
            toks = [ev.token for ev in head]
            n = len(toks)
            if (kv.n_generated + n < kv.max_tokens and kv.n_past + n < self.runtime.meta.n_ctx_seq
                    and self.runtime.meta.eog_ids.isdisjoint(toks)
                    and seq.request.params.stop_token_ids.isdisjoint(toks)):
                kv.prompt.extend(toks)
                kv.n_past += n
                kv.n_generated += n
                self.counters.busy_slots_total += n
                self.counters.tokens_predicted_total += n
                kv.pending = toks[-1]
                self.counters.n_tokens_max = max(self.counters.n_tokens_max, kv.n_past)
                rid = seq.rid
                return [(rid, ev) for ev in head] + self._on_token(seq, events[-1])
        outputs: list[Output] = []
        for i, ev in enumerate(events):
            if i:
                kv.prompt.append(kv.pending)  # type: ignore[arg-type]
                kv.n_past += 1
                self.counters.busy_slots_total += 1
            outputs += self._on_token(seq, ev)
            if seq.phase is not Phase.DECODING:
                break
        self.counters.n_tokens_max = max(self.counters.n_tokens_max, kv.n_past)
        return outputs

    # -- tokens --------------------------------------------------------------------
    def _on_token(self, seq: RequestState, ev: TokenEvent) -> list[Output]:
        kv = seq.kv
        assert kv is not None
        if kv.n_generated == 0 and not seq.t_first:
            seq.t_first = self._clock()
        if seq.forced:  # the reasoning budget is spent: this position takes the next forced token instead
            forced = TokenEvent(seq.forced.popleft(), logprob=0.0 if seq.request.params.logprobs else None)
            return self._accept(seq, forced, forced=True)  # logprob 0: the forcing left no other choice
        if ev.token == NO_TOKEN:  # its grammar or constraint allows no token: nothing more can be sampled
            return [self._finish(seq, "no_token", self.runtime.sampler_error(seq.sampler))]
        if ev.token in self.runtime.meta.eog_ids or ev.token in seq.request.params.stop_token_ids:
            return [self._finish(seq, "stop")]
        if seq.window is not None and ev.entropy is not None and ev.margin is not None:  # none: non-finite logits
            first = kv.n_generated == 0 and seq.injected == 0
            seq.window.push(ev.token, ev.entropy, ev.margin)
            n_decoded = kv.n_generated + 1
            if first:
                return self._park(seq, ev, HookRequest("after_prefill", seq.request.request,
                                                        PrefillSignals(ev.entropy, ev.margin, ev.token)))
            if seq.window.should_fire(n_decoded):
                seq.window.mark_fired(n_decoded)
                return self._park(seq, ev, HookRequest("mid_generation", seq.request.request,
                                                        GenerationSignals(seq.window.stats(), n_decoded)))
        return self._accept(seq, ev)

    def _count(self, seq: RequestState, ev: TokenEvent, forced: bool = False) -> Output:
        """``ev`` as a generated token: counted, seen by the reasoning budget (unless ``forced``), and its output."""
        if seq.budget is not None and not forced:
            seq.forced.extend(seq.budget.on_token(ev.token))
        seq.kv.n_generated += 1  # type: ignore[union-attr]
        self.counters.tokens_predicted_total += 1
        return (seq.rid, ev)

    def _accept(self, seq: RequestState, ev: TokenEvent, forced: bool = False) -> list[Output]:
        kv = seq.kv
        assert kv is not None
        outputs: list[Output] = [self._count(seq, ev, forced)]
        kv.pending = ev.token
        seq.phase = Phase.DECODING
        if kv.n_generated >= kv.max_tokens or kv.n_past + 1 >= self.runtime.meta.n_ctx_seq:
            outputs.append(self._finish(seq, "length"))
        return outputs

    def _park(self, seq: RequestState, ev: TokenEvent, call: HookRequest) -> list[Output]:
        seq.held = ev
        seq.parked_on = call
        seq.kv.pending = None  # type: ignore[union-attr]
        seq.phase = Phase.PARKED
        return [(seq.rid, call)]

    # -- finish --------------------------------------------------------------------
    def _finish_event(self, seq: RequestState, reason: str, error: str | None = None,
                      stopped_by_hook: bool = False) -> FinishEvent:
        now = self._clock()
        t_first = seq.t_first or now
        prompt_s = t_first - seq.t_admit if seq.t_admit else 0.0
        predicted_s = now - t_first if seq.t_first else 0.0
        self.counters.prompt_seconds_total += prompt_s
        self.counters.predicted_seconds_total += predicted_s
        self.counters.timed_prompt_tokens += max(seq.n_prefilled - seq.cached, 0)
        self.counters.timed_predicted_tokens += seq.kv.n_generated if seq.kv else 0
        return FinishEvent(
            reason=reason, prompt_tokens=len(seq.request.prompt),
            completion_tokens=seq.kv.n_generated if seq.kv else 0,
            prompt_ms=prompt_s * 1000.0, predicted_ms=predicted_s * 1000.0, error=error,
            injected_tokens=seq.injected, stopped_by_hook=stopped_by_hook, cached_tokens=seq.cached,
            queue_ms=((seq.t_admit or now) - seq.t_queued) * 1000.0,
            draft_tokens=seq.spec.drafted if seq.spec else 0, draft_accepted=seq.spec.accepted if seq.spec else 0,
            slot=seq.kv.slot if seq.kv else -1)

    def _finish(self, seq: RequestState, reason: str, error: str | None = None,
                stopped_by_hook: bool = False) -> Output:
        """Finish an admitted sequence: its event, then its sampler and slot (kept as a cache entry
        when its prefilled prompt is long enough to reuse)."""
        event = self._finish_event(seq, reason, error, stopped_by_hook)
        seq.phase = Phase.FINISHED
        seq.held = seq.parked_on = None
        self._running.pop(seq.rid, None)
        self._seqs.pop(seq.rid, None)
        if seq.sampler is not None:
            self.runtime.free_sampler(seq.sampler)
            seq.sampler = None
        kv = seq.kv
        if kv is not None:  # the prefilled prompt stays resident when it is worth reusing
            n_keep = seq.n_prefilled
            worth = reason != "error" and n_keep >= seq.request.min_reuse
            self.kv_cache.release(kv.slot, kv.prompt, n_keep if worth else None, seq.request.cache_key,
                                  seq.request.lora, kv.media)
        return seq.rid, event


def _queued_after(queued: SeqRequest, new: SeqRequest) -> bool:
    """``queued`` waits behind ``new``: a higher priority, or the same and a later arrival (a new request of
    arrival 0, unknown, goes behind every one of its priority)."""
    if queued.priority != new.priority:
        return queued.priority > new.priority
    return bool(new.arrival) and (queued.arrival or 0) > new.arrival


def _hook_event(call: HookRequest, held: TokenEvent, action: str, **fields: Any) -> HookEvent:
    """The :class:`HookEvent` of ``call``'s verdict: ``action`` on the ``held`` token the hook saw."""
    window = attrs.asdict(call.payload.window) if isinstance(call.payload, GenerationSignals) else None
    return HookEvent(call.event, action, entropy=held.entropy, margin=held.margin, window=window, **fields)
