"""One request's generation, sans-IO: scheduler events in, deltas and the finish accounting out.

A :class:`Generation` is made per request, before its :class:`SeqRequest`
is submitted to the decode scheduler. Its caller (the ``Engine`` facade)
moves each :class:`TokenEvent` / :class:`FinishEvent` of the sequence into
:meth:`Generation.feed` and gets back a :class:`Piece` (new deltas), a
:class:`Done` (the end: last deltas, final message, ``finish_reason``,
counts) or nothing. No trio, no clock, no I/O: the same events give
the same output, so it is unit-tested with hand-made events.

It owns the output pipeline (UTF-8 decoding, stop strings, the chat-format
parser, an early-stop rule), stop-string cancellation
(:attr:`Generation.wants_cancel`), finish accounting (``stop``, ``length``,
``tool_calls``, a hook's stop reason; an ``error`` finish raises
:class:`GenerationError`, a ``cancelled`` one :class:`EngineClosed`), the
:class:`Counts` behind OpenAI ``usage`` and llama-server ``timings``, the hook
:class:`FinishInfo` for ``on_finish``, and the hook decisions a request asked to see
(``return_hook_events``: :class:`HookReport`). It builds no wire Structs: each API's
``translate`` module (:mod:`skippy.engine.protocols`) turns its output into replies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from skippy.engine.chat.formats.base import Delta, ParsedMessage, StreamParser
from skippy.engine.errors import EngineClosed, EngineError, InvalidRequest
from skippy.engine.hooks.signals import FinishInfo
from skippy.engine.lora import NO_LORA, LoraSet
from skippy.engine.output.pipeline import EarlyStopRule, OutputPipeline
from skippy.engine.runtime.media import MediaSpan
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.budget import ReasoningBudget
from skippy.engine.scheduling.events import (
    EmbeddingsEvent,
    FinishEvent,
    HookEvent,
    PrefillProgress,
    PromptLogprobs,
    SeqEvent,
    SeqRequest,
    TokenEvent,
)
from skippy.engine.scheduling.prefix import MIN_REUSE


class GenerationError(EngineError):
    """500: the runtime failed while decoding (not caused by the request)."""


@attrs.frozen
class Counts:
    """What a generation used: tokens, and milliseconds (what OpenAI ``usage`` and llama-server ``timings`` report).

    ``prompt_tokens``: the prompt, without the tokens a ``before_chat`` hook appended;
    ``cached_tokens``: of them, reused from the prefix cache (the rest were prefilled);
    ``completion_tokens``: accepted tokens; ``injected_tokens``: every token hooks injected
    (``None``: the hook policy did not run for the request), ``prompt_injected`` of them by ``before_chat``
    (into the prompt, which the choices of one prompt share); ``prompt_ms``: from admission to the
    first sampled token; ``predicted_ms``: from then to the end; ``draft_tokens`` /
    ``draft_accepted``: speculative draft tokens verified / accepted (0: the request did not speculate; the
    accepted ones after a stop string are not counted, as the tokens there are not);
    ``slot``: the slot it ran in (-1: none).
    """

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    injected_tokens: int | None = None
    prompt_injected: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    draft_tokens: int = 0
    draft_accepted: int = 0
    slot: int = -1


@attrs.frozen
class HookReport:
    """A hook decision reported to the request (``return_hook_events``): the scheduler's
    :class:`HookEvent` and its ``position``, the completion tokens accepted before it."""

    event: HookEvent
    position: int


@attrs.frozen
class Piece:
    """Output of one accepted token: ``deltas`` now safe to send (may be empty), and ``tokens``, the token's
    event when the request asked for logprobs (else empty); or of one hook decision the request asked to
    see (``hook_events``, with no deltas or tokens); or of a prefill step the request asked to see
    (``progress``, :class:`~skippy.engine.scheduling.events.PrefillProgress`, with nothing else)."""

    deltas: list[Delta]
    tokens: list[TokenEvent]
    hook_events: list[HookReport] = attrs.field(factory=list)
    progress: PrefillProgress | None = None


@attrs.frozen
class Done:
    """The end of a generation.

    ``deltas``: the last deltas (text held back until the end); ``message``:
    the whole parsed assistant message (the same parser as streaming saw);
    ``finish_reason``: OpenAI's (``stop``, ``length``, ``tool_calls``) or a
    hook policy's stop reason; ``counts``: tokens and times; ``tokens``: every accepted token's event when the
    request asked for logprobs (for a non-streamed reply), else empty, without those whose text a stop string
    took (all of it in the stop string or after it: the content has none of it, as llama-server trims them);
    ``tail``: of them, the events held back until the end (their text was held as the possible start of a
    stop string, for a streamed reply's last chunk); ``hook_events``: every hook decision reported
    (``return_hook_events``, for a non-streamed reply).
    """

    deltas: list[Delta]
    message: ParsedMessage
    finish_reason: str
    counts: Counts
    tokens: list[TokenEvent] = attrs.field(factory=list)
    hook_events: list[HookReport] = attrs.field(factory=list)
    tail: list[TokenEvent] = attrs.field(factory=list)


@attrs.frozen
class GenerationOptions:
    """How a request's generations run and report: one object per request, shared by its choices
    (a choice that differs takes ``attrs.evolve(options, ...)``).

    Attributes:
        stops: the request's stop strings (OpenAI ``stop``); matched text is
            never sent (unless ``include_stop``, vLLM's ``include_stop_str_in_output``),
            and text that may start one is held back until decided.
        hooks: the hook policy runs for this request (``usage.injected_tokens`` is reported).
        signals: entropy and margin are computed per token (``return_signals``)
            and added to chat logprob entries.
        hook_request: the request object the hook policy sees.
        injected: how many trailing prompt tokens a ``before_chat`` hook appended.
        hook_events: report the hook policy's decisions (``return_hook_events``): the scheduler
            sends a :class:`HookEvent` per decision, which :meth:`Generation.feed` returns as a :class:`Piece`.
        before_chat: the ``before_chat`` decision, already taken (reported with ``hook_events``:
            :attr:`Generation.hook_events` starts with it).
        cache_key, cache_prompt: prefix-cache controls passed to the scheduler
            (OpenAI ``prompt_cache_key``, llama-server ``cache_prompt``).
        min_reuse: the shortest shared prefix the scheduler copies for this sequence
            (see :class:`SeqRequest`).
        save_replaced: a resident prompt this sequence reuses in place is saved to the host prompt cache
            first when it keeps too little of it (:attr:`SeqRequest.save_replaced`).
        checkpoint_at: prompt tokens before the generation prompt, where the scheduler may save a
            context checkpoint (:attr:`SeqRequest.checkpoint_at`; ``None``: none).
        speculative: draft tokens per step of speculative decoding (0: off;
            ``None``: the scheduler's default).
        prompt_logprobs: score the prompt tokens (``None``: off; else alternatives per
            position); they arrive in :attr:`Generation.prompt_tokens` before the first token.
        reasoning_budget: the cap on the reasoning block (:class:`~skippy.engine.scheduling.budget.ReasoningBudget`;
            ``None``: none).
        arrival: the request's place in arrival order (:attr:`SeqRequest.arrival`; 0: unknown).
        priority: lower is admitted first (:attr:`SeqRequest.priority`).
        media: the prompt's images (:attr:`SeqRequest.media`).
        lora: the LoRA adapter set the request runs with (:attr:`SeqRequest.lora`; ``()``: none).
        progress: report each step of the prompt's prefill (:attr:`SeqRequest.progress`; ``return_progress``,
            ``timings_per_token``), which :meth:`Generation.feed` returns as a :class:`Piece` with ``progress``.
    """

    stops: Sequence[str] = ()
    include_stop: bool = False
    hooks: bool = False
    signals: bool = False
    hook_request: object = None
    injected: int = 0
    hook_events: bool = False
    before_chat: HookEvent | None = None
    cache_key: str | None = None
    cache_prompt: bool = True
    min_reuse: int = MIN_REUSE
    save_replaced: bool = True
    checkpoint_at: int | None = None
    speculative: int | None = None
    prompt_logprobs: int | None = None
    reasoning_budget: ReasoningBudget | None = None
    arrival: int = 0
    priority: int = 0
    media: tuple[MediaSpan, ...] = ()
    lora: LoraSet = NO_LORA
    progress: bool = False


class Generation:
    """Per-request bookkeeping between the decode scheduler and the reply (see module docstring).

    Args:
        rid: the request id, unique per engine (the scheduler's sequence key).
        prompt: the prompt token ids to submit; its last ``options.injected`` tokens were
            appended by a ``before_chat`` hook (not counted in ``prompt_tokens``).
        params: validated sampling parameters (``params.logprobs`` asks the
            scheduler for logprobs on every token event).
        max_tokens: tokens to generate at most (>= 0; 0: the prompt only).
        piece: ``token id -> bytes`` the token renders as (the vocabulary).
        shown: ``token id -> bytes`` a token shows as in logprobs (:attr:`shown`); ``None``: ``piece``.
        parser: the chat-format stream parser (a fresh one per generation).
        early_stop: optional rule that ends generation early (emulated tool calls; a fresh one per
            generation: it keeps state).
        options: the request's :class:`GenerationOptions`.

    Raises :class:`InvalidRequest` (400, ``prompt``) for an empty ``prompt``: the scheduler needs a token to
    start from (every route's own checks come first; this one keeps an empty prompt from waiting forever).
    """

    def __init__(self, rid: int, prompt: Sequence[int], params: SamplingParams, max_tokens: int, *,
                 piece: Callable[[int], bytes], parser: StreamParser, early_stop: EarlyStopRule | None = None,
                 options: GenerationOptions = GenerationOptions(),  # noqa: B008 (frozen: one shared default)
                 shown: Callable[[int], bytes] | None = None) -> None:
        if not prompt:  # the scheduler would never start it (nothing to prefill, no token to decode)
            raise InvalidRequest("prompt is empty", param="prompt")
        o = options
        self.options = options
        self.request = SeqRequest(rid, list(prompt), params, max_tokens, hooks=o.hooks, signals=o.signals,
                                  request=o.hook_request, cache_key=o.cache_key, cache_prompt=o.cache_prompt,
                                  speculative=o.speculative, min_reuse=o.min_reuse, save_replaced=o.save_replaced,
                                  prompt_logprobs=o.prompt_logprobs,
                                  hook_events=o.hook_events and o.hooks, reasoning_budget=o.reasoning_budget,
                                  checkpoint_at=o.checkpoint_at, arrival=o.arrival, priority=o.priority, media=o.media,
                                  lora=o.lora, progress=o.progress)
        self._piece = piece
        self._shown = shown or piece
        self._pipeline = OutputPipeline(piece, list(o.stops), parser, early_stop, include_stop=o.include_stop)
        self._logprobs = params.logprobs
        self._hooks = o.hooks
        self._signals = o.signals
        self._injected = o.injected
        self._tokens: list[TokenEvent] = []
        #: logprob events whose text the output has not reached yet (held as a stop string's possible start),
        #: each with where its text starts in the decoded text
        self._held: list[tuple[TokenEvent, int]] = []
        #: tokens accepted so far (tokens decoded after a stop string matched are not)
        self.completion_tokens = 0
        #: of them, accepted speculative draft tokens (:attr:`TokenEvent.drafted`)
        self.draft_accepted = 0
        #: True right after the :meth:`feed` whose token matched a stop string (or the early-stop rule):
        #: the caller cancels the sequence once; its :class:`FinishEvent` follows.
        self.wants_cancel = False
        #: True once a :class:`FinishEvent` was fed (or :meth:`stopped_before` / :meth:`abandon` was called)
        self.finished = False
        #: the hook ``on_finish`` payload; ``cancelled`` until the generation ends another way
        self.finish_info = FinishInfo(status="cancelled")
        #: the scored prompt tokens after the first (``prompt_logprobs``), once the prompt is prefilled
        self.prompt_tokens: list[TokenEvent] | None = None
        #: the hook decisions reported so far (``return_hook_events``), ``before_chat``'s first
        self.hook_events: list[HookReport] = []
        if o.before_chat is not None and o.hook_events and o.hooks:
            self.hook_events.append(HookReport(o.before_chat, 0))

    @property
    def rid(self) -> int:
        return self.request.rid

    @property
    def piece(self) -> Callable[[int], bytes]:
        """``token id -> bytes`` the token renders as."""
        return self._piece

    @property
    def shown(self) -> Callable[[int], bytes]:
        """``token id -> bytes`` a token shows as in logprobs (``token``, ``bytes``, the alternatives): a control
        token as its text (``<|im_end|>``, the vocabulary's special pieces), as vLLM's logprobs and llama-server's
        with ``--special`` show it (its ``piece`` is empty: two such alternatives would show alike), the others as
        their ``piece``. The text itself (and legacy ``text_offset``) keeps to ``piece``."""
        return self._shown

    @property
    def signals(self) -> bool:
        """Entropy and margin are reported per token (``return_signals``)."""
        return self._signals

    @property
    def stopping_word(self) -> str:
        """The request's stop string that ended the generation ("" when none did; llama-server)."""
        return self._pipeline.stopping_word

    def feed(self, event: SeqEvent) -> Piece | Done | None:
        """Consume the sequence's next event.

        Returns a :class:`Piece` for a token that produced deltas (or carries
        logprobs), ``None`` for one that did not (or arrived after a stop string
        matched: it is discarded and not counted), a :class:`Done` for the
        :class:`FinishEvent`; a :class:`Piece` with ``progress`` for a :class:`PrefillProgress`.

        Raises :class:`GenerationError` (500) for an ``error`` finish, :class:`InvalidRequest` (400,
        ``no_token_allowed``) for a ``no_token`` one (the request's grammar left nothing to sample;
        ``constraint_too_large`` when the event's ``error`` says the constraint engine gave up), and
        :class:`EngineClosed` (503) for a ``cancelled`` one that no stop string
        asked for (the engine stopped); :attr:`finish_info` says so first.
        """
        self.wants_cancel = False
        if isinstance(event, TokenEvent):
            return self._token(event)
        if isinstance(event, PromptLogprobs):
            self.prompt_tokens = list(event.tokens)
            return None
        if isinstance(event, PrefillProgress):
            return None if self.finished else Piece([], [], progress=event)
        if isinstance(event, HookEvent):
            if not self.request.hook_events or self.finished or self._pipeline.stopped:
                return None
            info = HookReport(event, self.completion_tokens)
            self.hook_events.append(info)
            return Piece([], [], [info])
        if isinstance(event, EmbeddingsEvent):
            raise TypeError("an EmbeddingsEvent is not a generation's (embedding requests have no Generation)")
        return self._finish(event)

    def _token(self, ev: TokenEvent) -> Piece | None:
        pipeline = self._pipeline
        if pipeline.stopped or self.finished:
            return None  # decoded after the stop string matched; discarded
        self.completion_tokens += 1
        self.draft_accepted += ev.drafted
        start = pipeline.fed
        deltas = pipeline.feed(ev.token)
        self.wants_cancel = pipeline.stopped
        if not self._logprobs:
            return Piece(deltas, []) if deltas else None
        self._held.append((ev, start))
        return Piece(deltas, self._release())  # a Piece per token, even with nothing to send yet (its time)

    def _release(self, *, end: bool = False) -> list[TokenEvent]:
        """The held logprob events whose text the output reached (at the ``end``: all of them, unless a stop
        string ended it), in order. Once a stop string matched, the others are dropped: their text is all in
        the stop string or after it."""
        reached = len(self._pipeline.text)
        n = 0  # a prefix: the events stay in order; one with no text yet (half a character) waits for its character
        while n < len(self._held) and (end or self._held[n][1] < reached):
            n += 1
        out = [ev for ev, _ in self._held[:n]]
        self._held = [] if self._pipeline.stopped else self._held[n:]
        self._tokens += out
        return out

    def _finish(self, ev: FinishEvent) -> Done:
        self.finished = True
        n = self.completion_tokens
        if ev.reason == "error":
            self.finish_info = FinishInfo(status="error", completion_tokens=n, error=ev.error)
            raise GenerationError(f"generation failed: {ev.error}")
        if ev.reason == "no_token":
            self.finish_info = FinishInfo(status="error", completion_tokens=n, error=ev.error or "no token allowed")
            if ev.error:  # the constraint itself failed: llguidance reached a limit while enforcing it
                c = self.request.params.constraint
                raise InvalidRequest(f"after {n} generated token(s) the constraint could not be enforced any further "
                                     f"({ev.error}): it is too large for the constraint engine; simplify it",
                                     param=c.param if c is not None else None, code="constraint_too_large")
            raise InvalidRequest(f"after {n} generated token(s) the grammar or schema allows no token: it matches "
                                 "nothing there, or logit_bias bans every token it allows", code="no_token_allowed")
        if self._pipeline.stopped:
            reason = self._pipeline.finish_reason  # a stop string; an early-stop rule's (a limit: length)
        elif ev.reason == "cancelled":
            self.finish_info = FinishInfo(status="error", completion_tokens=n, error="engine stopped")
            raise EngineClosed("the engine stopped before the generation finished")
        else:
            reason = ev.reason
        deltas, message = self._pipeline.finish(truncated=reason == "length")
        tail = self._release(end=True)
        if message.tool_calls and not ev.stopped_by_hook and reason != "length":
            reason = "tool_calls"  # a generation cut off by max_tokens stays "length" (OpenAI, llama-server)
        n_injected = self._injected + ev.injected_tokens
        self.finish_info = FinishInfo(status="success", finish_reason=reason, completion_tokens=n,
                                      injected_tokens=n_injected)
        counts = Counts(prompt_tokens=len(self.request.prompt) - self._injected, completion_tokens=n,
                        cached_tokens=ev.cached_tokens, injected_tokens=n_injected if self._hooks else None,
                        prompt_injected=self._injected, prompt_ms=ev.prompt_ms, predicted_ms=ev.predicted_ms,
                        draft_tokens=ev.draft_tokens, slot=ev.slot,
                        # a stop string cut off the tokens after it, accepted draft tokens among them
                        draft_accepted=self.draft_accepted if self._pipeline.stopped else ev.draft_accepted)
        return Done(deltas, message, reason, counts, self._tokens, self.hook_events, tail)

    def stopped_before(self, reason: str) -> Done:
        """End without generating: a ``before_chat`` hook returned ``Stop(reason)`` (nothing was submitted)."""
        self.finished = True
        self.finish_info = FinishInfo(status="success", finish_reason=reason)
        counts = Counts(prompt_tokens=len(self.request.prompt), completion_tokens=0,
                        injected_tokens=0 if self._hooks else None)
        return Done([], ParsedMessage(), reason, counts, hook_events=self.hook_events)

    def abandon(self) -> FinishInfo:
        """The reply is closed before the finish (the client went away): the caller cancels the sequence.

        Returns (and keeps in :attr:`finish_info`) the ``cancelled`` finish info.
        """
        if not self.finished:
            self.finished = True
            self.finish_info = FinishInfo(status="cancelled", completion_tokens=self.completion_tokens)
        return self.finish_info
