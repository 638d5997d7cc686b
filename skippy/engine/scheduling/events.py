"""The scheduler's edges: what a request asks of it, what it answers, what it reports.

:class:`SeqRequest` goes in (one tokenized prompt to generate from); per
sequence, :class:`TokenEvent` (one per accepted token) and one final
:class:`FinishEvent` come out. :class:`EmbedRequest` goes in (token ids to
embed) and one :class:`EmbeddingsEvent` comes out; a parked sequence's
:class:`HookRequest` goes to the hook evaluator (:data:`Output`: what the core
emits, per request id); :class:`SchedulerStats` is a frozen snapshot
of the scheduler's counters for ``/health`` and ``/metrics`` (as trio's
``MemoryChannelStatistics`` or vLLM's ``SchedulerStats``).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from skippy.engine.hooks.signals import GenerationSignals, PrefillSignals
from skippy.engine.lora import NO_LORA, LoraSet
from skippy.engine.runtime.media import MediaSpan
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.budget import ReasoningBudget
from skippy.engine.scheduling.prefix import MIN_REUSE


@attrs.frozen
class SeqRequest:
    """One tokenized prompt to admit and generate from.

    ``rid`` is unique per engine; ``prompt`` the token ids (not empty);
    ``max_tokens`` the tokens to generate at most (>= 0; 0: the prompt is prefilled into the
    KV cache and the sequence finishes ``length`` without sampling, llama-server's ``n_predict`` 0). ``hooks``: run the
    hook policy for this sequence (``request`` is what the policy sees);
    ``signals``: attach entropy and margin to token events. ``cache_key``
    groups prefix-cache eviction (OpenAI ``prompt_cache_key``);
    ``cache_prompt=False`` prefills cold, without prefix reuse (llama-server
    ``cache_prompt``). ``speculative``: draft tokens per step of prompt-lookup
    speculative decoding (0: off; ``None``: the scheduler's default).
    ``min_reuse``: the shortest shared prefix worth copying
    from another sequence (the choices of one ``n`` > 1 prompt lower it to their
    whole prompt, so even a short prompt is prefilled once and copied).
    ``save_replaced``: when the sequence reuses a resident prompt in place keeping less than 15/16
    of it, that prompt is saved to the host prompt cache first, or copied to a free slot without one
    (False: the resident prompt is reused in place and not kept; llama-server's ``/infill``, whose
    prompt is rebuilt around an editor's cursor at every request: llama-server saves prompts for
    completion tasks only).
    ``prompt_logprobs``: the logprob of every prompt token after the first is
    computed while prefilling (``None``: off; else how many alternatives per
    position) and sent as one :class:`PromptLogprobs` before the first token;
    such a prompt is prefilled whole, without prefix reuse.
    ``hook_events``: report each hook decision on this sequence as a
    :class:`HookEvent` before its effect (the client asked with ``return_hook_events``).
    ``reasoning_budget``: end the reasoning block after that many tokens by forcing its closing tag
    (:mod:`~skippy.engine.scheduling.budget`; ``None``: no cap).
    ``checkpoint_at``: prompt tokens before the generation prompt (a chat's history rendered
    without it, :attr:`~skippy.engine.chat.plan.ParsePlan.history_chars` tokenized): where the
    scheduler saves a context checkpoint for a later turn, on models whose cache cannot be trimmed
    (:mod:`~skippy.engine.scheduling.checkpoint`); ``None``: no boundary (a completion prompt).
    ``arrival``: the request's place in arrival order (increasing, taken when the request reached the
    engine, before its template and tokenizer work); the queue is kept in that order, so a request
    whose preprocessing took longer keeps its place (first come, first served, as llama-server's
    queue). 0: unknown: queued at the end, and no request submitted after it passes it.
    ``priority``: a lower one is admitted before a higher one, whatever their arrival (vLLM's ``priority``;
    0 by default; the server's consultations of a local model run at -1, ahead of the requests they serve).
    ``media``: the prompt's images (:class:`~skippy.engine.runtime.media.MediaSpan`: where each one's
    placeholder ids are in ``prompt``); each is decoded whole, in a step of its own kind.
    ``lora``: the LoRA adapter set it runs with (:data:`~skippy.engine.lora.LoraSet`; ``()``: the base
    model): a step decodes sequences of one set only, and its prompt is reused only by prompts of the same set.
    ``progress``: report each step of the prompt's prefill as a :class:`PrefillProgress`, the last one
    included (llama-server's ``return_progress``, and the live ``timings_per_token``).
    """

    rid: int
    prompt: tuple[int, ...] | list[int]
    params: SamplingParams
    max_tokens: int
    hooks: bool = False
    signals: bool = False
    request: Any = None
    cache_key: str | None = None
    cache_prompt: bool = True
    speculative: int | None = None
    min_reuse: int = MIN_REUSE
    save_replaced: bool = True
    prompt_logprobs: int | None = None
    hook_events: bool = False
    reasoning_budget: ReasoningBudget | None = None
    checkpoint_at: int | None = None
    arrival: int = 0
    priority: int = 0
    media: tuple[MediaSpan, ...] = ()
    lora: LoraSet = NO_LORA
    progress: bool = False


@attrs.frozen
class TopLogprob:
    """One of the most likely tokens at a position: id and natural-log probability."""

    token: int
    logprob: float


@attrs.frozen
class TokenEvent:
    """One sampled and accepted token.

    ``logprob``/``top`` (natural log, from the raw logits; with ``post_sampling_probs``, of the distribution
    the sampler chain drew the token from) when the request asked for logprobs; ``entropy``/``margin``
    (nats, from the raw logits) when it asked for signals or hooks. ``drafted``: the token is a speculative
    draft token that verification accepted (the output side counts those it keeps: a reply's
    ``draft_n_accepted`` leaves out the ones a stop string cut off).
    """

    token: int
    logprob: float | None = None
    top: tuple[TopLogprob, ...] = ()
    entropy: float | None = None
    margin: float | None = None
    drafted: bool = False


_PLAIN: dict[int, TokenEvent] = {}


def plain_event(token: int) -> TokenEvent:
    """``TokenEvent(token)`` (no logprobs, no signals): one shared instance per token id (the event is
    frozen), so a step's many plain tokens cost a dict lookup each, not an instance (~0.5 us). The cache
    holds at most 2**18 ids (more than any vocabulary here) and starts over when full."""
    ev = _PLAIN.get(token)
    if ev is None:
        if len(_PLAIN) >= 1 << 18:
            _PLAIN.clear()
        ev = _PLAIN[token] = TokenEvent(token)
    return ev


_DRAFTED: dict[int, TokenEvent] = {}


def drafted_event(ev: TokenEvent) -> TokenEvent:
    """``ev`` marked as an accepted draft token (``drafted``); a plain one from a shared instance per token id,
    as :func:`plain_event`."""
    if ev.logprob is not None or ev.top or ev.entropy is not None or ev.margin is not None:
        return attrs.evolve(ev, drafted=True)
    out = _DRAFTED.get(ev.token)
    if out is None:
        if len(_DRAFTED) >= 1 << 18:
            _DRAFTED.clear()
        out = _DRAFTED[ev.token] = TokenEvent(ev.token, drafted=True)
    return out


@attrs.frozen
class PrefillProgress:
    """A step of the prompt's prefill, of a sequence that asked for them (:attr:`SeqRequest.progress`):
    ``processed`` prompt tokens (KV cells) are in its KV cache now, ``cached`` of them reused from the prefix
    cache; ``prompt_ms`` since admission. The last one (``processed`` the whole prompt) comes just before the
    first token (an injection's prefill later sends none)."""

    processed: int
    cached: int
    prompt_ms: float = 0.0


@attrs.frozen
class FinishEvent:
    """End of a sequence; always its last event.

    ``reason``: ``stop`` (an end-of-generation token), ``length``,
    ``cancelled``, ``error`` (with ``error`` set), ``no_token`` (the grammar or constraint allowed no
    token: :data:`~skippy.engine.runtime.base.NO_TOKEN`), or a hook's stop reason
    (``stopped_by_hook``). Times are milliseconds: ``queue_ms`` from submission to
    admission (to the end for a request never admitted), ``prompt_ms`` from admission
    to the first sampled token, ``predicted_ms`` from then to the end.
    ``prompt_tokens`` counts the submitted prompt; ``cached_tokens`` of them
    came from the prefix cache; ``injected_tokens`` were added by hooks.
    ``draft_tokens`` were proposed by speculative decoding and
    ``draft_accepted`` of them verified (llama-server's ``draft_n`` and
    ``draft_n_accepted``). ``slot``: the slot the sequence ran in (-1: never admitted).
    """

    reason: str
    prompt_tokens: int
    completion_tokens: int
    prompt_ms: float
    predicted_ms: float
    error: str | None = None
    injected_tokens: int = 0
    stopped_by_hook: bool = False
    cached_tokens: int = 0
    draft_tokens: int = 0
    draft_accepted: int = 0
    queue_ms: float = 0.0
    slot: int = -1


@attrs.frozen
class PromptLogprobs:
    """The prompt's tokens scored by the model (a request with ``prompt_logprobs``): ``tokens[i]``
    is prompt token ``i + 1`` with its logprob given the tokens before it, and its top alternatives."""

    tokens: tuple[TokenEvent, ...]


@attrs.frozen
class EmbedRequest:
    """Inputs to embed on the embedding context (``/v1/embeddings``): ``rid`` is unique per engine (shared
    with :class:`SeqRequest`); ``inputs`` the token ids of each input, each 1..``meta.embeddings.n_ctx``
    tokens (an input is pooled within one batch)."""

    rid: int
    inputs: tuple[tuple[int, ...], ...]


@attrs.frozen(eq=False)
class EmbeddingsEvent:
    """The answer to an :class:`EmbedRequest`, its only event.

    ``vectors``: float32, shape ``(len(inputs), n_embd)``, the pooled vectors in input order, not
    normalized (llama.cpp ``llama_get_embeddings_seq``); ``None`` with ``error`` (``cancelled`` at
    shutdown, else llama.cpp's message). With pooling ``none``, ``(prompt_tokens, n_embd)``: every token's
    vector, the inputs' in order, ``lengths`` giving each input's rows (``None`` for pooled vectors).
    ``prompt_tokens``: tokens of all inputs. ``queue_ms``: from submission to the first batch;
    ``embed_ms``: from then to the last.
    """

    vectors: np.ndarray | None
    prompt_tokens: int
    error: str | None = None
    queue_ms: float = 0.0
    embed_ms: float = 0.0
    lengths: tuple[int, ...] | None = None

    def per_input(self) -> list[np.ndarray]:
        """Each input's rows: its pooled vector, shape ``(n_embd,)``, or with ``lengths`` its tokens' vectors,
        ``(len(input), n_embd)``. Raises ``ValueError`` on an event with no vectors."""
        if self.vectors is None:
            raise ValueError(self.error or "no vectors")
        if self.lengths is None:
            return list(self.vectors)
        return np.split(self.vectors, np.cumsum(self.lengths)[:-1])


@attrs.frozen
class HookEvent:
    """A hook policy's decision on a sequence (sent only to a request that asked: ``return_hook_events``).

    ``event``: ``before_chat``, ``after_prefill`` or ``mid_generation``; ``action``: ``none``
    (no action, a timeout or a failed call without ``--hook-fail-closed``), ``inject`` or ``stop``.
    ``text``: the injected text (``inject``; prefilled into the sequence, never sent as content);
    ``injected_tokens``: its length in tokens; ``reason``: the stop's ``finish_reason``.
    ``entropy`` / ``margin``: nats, of the token the hook saw (held while it ran, then emitted
    for ``none``, discarded for ``inject`` and ``stop``; ``None`` for ``before_chat``).
    ``window``: the signal window's statistics at a ``mid_generation`` firing
    (:class:`~skippy.engine.hooks.signals.WindowStats` as a dict). ``consult``: the outcome's
    ``report`` (a consultation: peer, model, latency, outcome), ``None`` when it has none; an event with
    one is sent even to a request that did not ask for hook events (the request's log line reads it).
    It arrives before the
    tokens that follow the decision, so the count of tokens received so far is its position.
    """

    event: str
    action: str
    text: str | None = None
    reason: str | None = None
    injected_tokens: int = 0
    entropy: float | None = None
    margin: float | None = None
    window: dict[str, Any] | None = None
    consult: dict[str, Any] | None = None


#: What a sequence's event stream carries.
SeqEvent = TokenEvent | FinishEvent | PromptLogprobs | HookEvent | EmbeddingsEvent | PrefillProgress


@attrs.frozen
class HookRequest:
    """Ask the hook policy about a parked sequence: ``event`` (``after_prefill`` or
    ``mid_generation``), the request the policy sees, and the signals payload."""

    event: str
    request: Any
    payload: PrefillSignals | GenerationSignals


#: What the scheduler core emits, per request id: the request's events, and hook calls.
Output = tuple[int, TokenEvent | FinishEvent | PromptLogprobs | HookEvent | HookRequest | EmbeddingsEvent
               | PrefillProgress]


@attrs.frozen
class SchedulerStats:
    """A snapshot of the scheduler (llama-server ``/health`` and ``/metrics`` names where they exist).

    Gauges: ``n_slots`` (``n_seq_max``), ``n_running`` (sequences holding a
    slot: prefilling, decoding or parked), ``n_waiting`` (queued for a slot),
    ``n_parked`` (waiting for a hook verdict), ``kv_cells_used`` (running
    sequences' and resident prefix-cache entries' tokens). Counters since
    start: ``steps`` (decode calls), ``prompt_tokens_total`` (prompt tokens
    prefilled, cached ones excluded, however the request ended),
    ``tokens_predicted_total`` (tokens decoded, however the request ended: those decoded after a stop string
    matched too, which only the output side knows, so ``/metrics`` counts the replies' tokens instead),
    ``prefix_queries`` / ``prefix_hits`` /
    ``cached_tokens_total`` (prefix-cache lookups at admission, hits, tokens reused),
    ``spec_draft_tokens_total`` / ``spec_accepted_tokens_total`` (speculative
    draft tokens verified, and accepted, after a stop string too), ``prompt_seconds_total`` /
    ``predicted_seconds_total`` (finished sequences' time from admission to their
    first token, and from it to their end: llama-server's
    ``prompt_seconds_total`` / ``tokens_predicted_seconds_total``) and the tokens
    prefilled and generated in those times (``timed_prompt_tokens`` /
    ``timed_predicted_tokens``, for throughput), ``busy_slots_total``
    (sequences in each decode batch, summed: over ``steps`` it is llama-server's
    ``n_busy_slots_per_decode``), ``n_tokens_max`` (the longest sequence seen, prompt + generated).
    Embeddings: ``n_embed_waiting`` (embedding requests not answered yet), ``embed_inputs_total`` /
    ``embed_tokens_total`` (inputs and their tokens embedded), ``embed_batches_total`` (batches on the
    embedding context; not in ``steps``).
    Context checkpoints (recurrent, hybrid and sliding-window models): ``checkpoints`` held and their
    ``checkpoint_bytes`` (gauges), ``checkpoints_saved_total`` / ``checkpoints_restored_total`` /
    ``checkpoints_evicted_total``, and ``checkpoint_budget`` (bytes; ``None``: no limit).
    """

    n_slots: int
    n_running: int = 0
    n_waiting: int = 0
    n_parked: int = 0
    kv_cells_used: int = 0
    steps: int = 0
    prompt_tokens_total: int = 0
    tokens_predicted_total: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    cached_tokens_total: int = 0
    spec_draft_tokens_total: int = 0
    spec_accepted_tokens_total: int = 0
    prompt_seconds_total: float = 0.0
    predicted_seconds_total: float = 0.0
    busy_slots_total: int = 0
    n_tokens_max: int = 0
    timed_prompt_tokens: int = 0
    timed_predicted_tokens: int = 0
    n_embed_waiting: int = 0
    embed_inputs_total: int = 0
    embed_tokens_total: int = 0
    embed_batches_total: int = 0
    checkpoints: int = 0
    checkpoint_bytes: int = 0
    checkpoints_saved_total: int = 0
    checkpoints_restored_total: int = 0
    checkpoints_evicted_total: int = 0
    checkpoint_budget: int | None = None


@attrs.define
class SchedulerCounters:
    """The scheduler's counters since start: the counter fields of :class:`SchedulerStats`, with the same
    names and meanings (see there), mutable. The core and its KV-cache manager add to one instance;
    :meth:`snapshot` freezes them with the gauges of the moment into a :class:`SchedulerStats`."""

    steps: int = 0
    prompt_tokens_total: int = 0
    tokens_predicted_total: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    cached_tokens_total: int = 0
    spec_draft_tokens_total: int = 0
    spec_accepted_tokens_total: int = 0
    prompt_seconds_total: float = 0.0
    predicted_seconds_total: float = 0.0
    busy_slots_total: int = 0
    n_tokens_max: int = 0
    timed_prompt_tokens: int = 0
    timed_predicted_tokens: int = 0
    embed_inputs_total: int = 0
    embed_tokens_total: int = 0
    embed_batches_total: int = 0
    checkpoints_saved_total: int = 0
    checkpoints_restored_total: int = 0

    def snapshot(self, **gauges: Any) -> SchedulerStats:
        """A :class:`SchedulerStats` of these counters and ``gauges`` (its other fields, by name)."""
        return SchedulerStats(**gauges, **attrs.asdict(self, recurse=False))
