"""OpenAI replies from a :class:`~skippy.engine.output.generation.Generation`'s output (sans-IO builders).

:class:`ChatReply` turns :class:`Piece` / :class:`Done` items into OpenAI
``chat.completion.chunk`` objects or one ``chat.completion``;
:class:`TextReply` into legacy ``text_completion`` objects. They build the
:mod:`skippy.engine.protocols.openai.wire` Structs, nothing else: one ``id`` and
``created`` per reply, every chunk with ``logprobs`` and ``finish_reason``
(``null`` until the end), as OpenAI streams them. :class:`Choices` joins
the replies of a request's several choices (``n`` > 1, or a list of prompts)
into one reply and one stream. :func:`embedding_list` builds the
``/v1/embeddings`` reply from pooled vectors (float lists, or base64 of
little-endian float32 with ``encoding_format: "base64"``).
"""

from __future__ import annotations

import base64
import codecs
import math
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec
import numpy as np

from skippy.engine.chat.formats.base import Delta, ParsedMessage
from skippy.engine.output.embeddings import normalize_embd
from skippy.engine.output.generation import Counts, Done, Generation, HookReport, Piece
from skippy.engine.protocols.openai import wire
from skippy.engine.scheduling.events import PrefillProgress, TokenEvent


def new_id(prefix: str) -> str:
    """``chatcmpl-`` / ``cmpl-`` + 24 random hex chars."""
    return f"{prefix}-{secrets.token_hex(12)}"


def usage(c: Counts) -> wire.Usage:
    """OpenAI ``usage`` of one generation (``injected_tokens`` only when hooks ran for it)."""
    return wire.Usage(prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                      total_tokens=c.prompt_tokens + c.completion_tokens,
                      prompt_tokens_details=wire.PromptTokensDetails(cached_tokens=c.cached_tokens),
                      injected_tokens=c.injected_tokens if c.injected_tokens is not None else wire.UNSET)


def timings(c: Counts) -> wire.Timings:
    """llama-server ``timings`` of one generation: ``prompt_n`` counts the prompt tokens actually prefilled;
    ``draft_n`` / ``draft_n_accepted`` only when it speculated (as llama-server reports them)."""
    t = wire.Timings.of(c.prompt_tokens - c.cached_tokens, c.prompt_ms, c.completion_tokens, c.predicted_ms,
                        cache_n=c.cached_tokens)
    if c.draft_tokens:
        t.draft_n, t.draft_n_accepted = c.draft_tokens, c.draft_accepted
    return t


class LiveTimings:
    """llama-server's live ``timings`` (``timings_per_token``) and ``prompt_progress`` (``return_progress``)
    of one streamed generation, as its reply sees them.

    ``n_prompt``: the prompt's tokens (KV cells). The scheduler's prefill steps (:meth:`step`, a
    :class:`~skippy.engine.scheduling.events.PrefillProgress` each, the last with the whole prompt) give the
    cached tokens, the prompt's time since admission and the first token's moment, even when the first tokens
    show nothing yet (a tool call held back). A reply without them (the request did not ask the scheduler)
    takes the first token's moment from its first item (:meth:`observe`) and the prompt's time from when this
    was built. ``slot_info()`` gives ``(slot, cached prompt tokens)`` of the running sequence (``(-1, 0)``:
    unknown), read once, at the first item. ``clock`` gives seconds. The final ``timings`` (:func:`timings`) are
    the scheduler's.
    """

    def __init__(self, n_prompt: int, slot_info: Callable[[], tuple[int, int]] = lambda: (-1, 0),
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.n_prompt = n_prompt
        self._slot_info = slot_info
        self._clock = clock
        self._t0 = clock()
        self.t_first: float | None = None
        self.prompt_ms: float | None = None  # the scheduler's, from the last prefill step
        self.stepped = False  # a prefill step came: its progress was sent where asked
        self._observed = False
        self.slot = -1
        self.cached = 0

    def step(self, step: PrefillProgress) -> wire.PromptProgress:
        """Note one of the scheduler's prefill steps; its ``prompt_progress``. The last (the whole prompt) is the
        first token's moment."""
        now = self._clock()
        self.stepped, self.cached = True, step.cached
        if step.processed >= self.n_prompt and self.t_first is None:
            self.t_first, self.prompt_ms = now, step.prompt_ms
        return wire.PromptProgress(total=self.n_prompt, cache=step.cached, processed=step.processed,
                                   time_ms=int((now - self._t0) * 1000.0))

    def observe(self) -> bool:
        """Note a generation item; True for the first (without prefill steps, the first token's moment)."""
        if self._observed:
            return False
        self._observed = True
        slot, cached = self._slot_info()
        self.slot = slot
        if self.t_first is None:
            self.t_first, self.cached = self._clock(), cached
        return True

    def timings(self, predicted_n: int) -> wire.Timings:
        """``timings`` now, after ``predicted_n`` generated tokens."""
        now = self._clock()
        first = self.t_first if self.t_first is not None else now
        prompt_ms = self.prompt_ms if self.prompt_ms is not None else (first - self._t0) * 1000.0
        return wire.Timings.of(self.n_prompt - self.cached, prompt_ms, predicted_n, (now - first) * 1000.0,
                               cache_n=self.cached)

    def progress(self) -> wire.PromptProgress:
        """``prompt_progress`` with the whole prompt processed, at the first token (without prefill steps)."""
        first = self.t_first if self.t_first is not None else self._clock()
        return wire.PromptProgress(total=self.n_prompt, cache=self.cached, processed=self.n_prompt,
                                   time_ms=int((first - self._t0) * 1000.0))


def hook_event(r: HookReport) -> wire.HookEvent:
    """A reported hook decision on the wire (``hook_events[]`` of a chat choice or chunk)."""
    ev, unset = r.event, wire.UNSET
    return wire.HookEvent(
        event=ev.event, action=ev.action, position=r.position,  # type: ignore[arg-type]
        text=ev.text if ev.text is not None else unset,
        injected_tokens=ev.injected_tokens if ev.action == "inject" else unset,
        reason=ev.reason if ev.reason is not None else unset,
        entropy=ev.entropy if ev.event != "before_chat" else unset,
        margin=ev.margin if ev.event != "before_chat" else unset,
        window=wire.HookWindow(**ev.window) if ev.window is not None else unset,
        consult=hook_consult(ev.consult) if ev.consult is not None else unset)


def hook_consult(report: dict[str, Any]) -> wire.HookConsult:
    """A consultation's report (:mod:`skippy.actors.consult`) on the wire; unset keys stay absent."""
    fields = {k: v for k, v in report.items() if v is not None and k in wire.HookConsult.__struct_fields__}
    return wire.HookConsult(**fields)


class TopText(NamedTuple):
    """One alternative at a token's position as logprobs show it (:class:`TokenText`)."""

    id: int
    text: str
    bytes: list[int]
    logprob: float


class TokenText(NamedTuple):
    """One token as logprobs show it, OpenAI's and llama-server's alike (:func:`token_text`).

    ``id`` the token id; ``text`` its bytes decoded as UTF-8, invalid bytes as U+FFFD (a token that holds
    part of a multi-byte character); ``bytes`` those bytes as ints (0..255); ``logprob`` the natural-log
    probability (``None``: nothing scored it, the first token of an echoed prompt); ``top`` the
    alternatives at its position, most likely first, rendered the same way.
    """

    id: int
    text: str
    bytes: list[int]
    logprob: float | None
    top: list[TopText]


def _decoded(piece: Callable[[int], bytes], token: int) -> tuple[str, list[int]]:
    data = piece(token)
    return data.decode("utf-8", errors="replace"), list(data)


def token_text(ev: TokenEvent, piece: Callable[[int], bytes]) -> TokenText:
    """``ev`` and its alternatives (``ev.top``) rendered with ``piece`` (token id -> its bytes): the one
    token-rendering path of every logprobs shape (chat, legacy Completions, llama-server's
    ``completion_probabilities``), which differ only in the fields they send."""
    return TokenText(ev.token, *_decoded(piece, ev.token), ev.logprob,
                     [TopText(alt.token, *_decoded(piece, alt.token), alt.logprob) for alt in ev.top])


def chat_logprobs(tokens: Sequence[TokenEvent], piece: Callable[[int], bytes], *,
                  signals: bool = False, post: bool = False) -> wire.ChatLogprobs:
    """OpenAI chat ``logprobs`` for ``tokens`` (``piece``: token id -> its bytes); with ``signals`` each entry
    also carries ``entropy`` and ``margin`` (nats, from the raw logits; skippy extension). With ``post``
    (llama-server's ``post_sampling_probs``: the events hold the log-probabilities of the distribution each
    token was drawn from), llama-server's shape: ``id``, ``prob`` and ``top_probs``."""
    content = []
    for ev in tokens:
        tok = token_text(ev, piece)
        if post:
            entry = wire.ChatTokenLogprob(
                id=tok.id, token=tok.text, bytes=tok.bytes, prob=probability(tok.logprob),
                top_probs=[wire.TopLogprob(id=alt.id, token=alt.text, bytes=alt.bytes, prob=probability(alt.logprob))
                           for alt in tok.top])
        else:
            top = [wire.TopLogprob(token=alt.text, logprob=alt.logprob, bytes=alt.bytes) for alt in tok.top]
            entry = wire.ChatTokenLogprob(token=tok.text, logprob=tok.logprob, bytes=tok.bytes, top_logprobs=top)
        if signals:
            entry.entropy, entry.margin = ev.entropy, ev.margin
        content.append(entry)
    return wire.ChatLogprobs(content=content)


def probability(logprob: float | None) -> float:
    """A natural-log probability as a probability (``None``: a token nothing scored, 1 as llama-server's)."""
    return 1.0 if logprob is None else math.exp(logprob)


class TextOffsets:
    """Legacy Completions ``text_offset``: where each token starts in the text, in characters from ``start``.

    A character whose bytes span several tokens is counted once, when its last byte comes: the tokens before
    it start where it starts (the offsets never go backwards and stay within the text, which a count of each
    token's U+FFFD made them). Keeps its state across a stream's chunks."""

    def __init__(self, start: int = 0) -> None:
        self.offset = start
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def next(self, data: bytes) -> int:
        """The offset of the token whose bytes are ``data``; the text's end moves past them. A character left
        unfinished before it that ``data`` does not continue is replaced (U+FFFD) before this token starts."""
        pending = self._decoder.getstate()[0]
        at = self.offset
        if pending and data and not _continues(pending, data):
            at += len(pending.decode("utf-8", errors="replace"))
        self.offset += len(self._decoder.decode(data))
        return at


def _continues(pending: bytes, data: bytes) -> bool:
    """Whether ``data`` starts with continuation bytes (``10xxxxxx``) of the character ``pending`` began (as
    many as its lead byte still asks for, or all of ``data`` when it is shorter)."""
    lead = pending[0]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    head = data[:size - len(pending)]
    return bool(head) and all(0x80 <= b < 0xC0 for b in head)


def legacy_logprobs(tokens: Sequence[TokenEvent], piece: Callable[[int], bytes],
                    offsets: TextOffsets | Sequence[int] | None = None, *,
                    shown: Callable[[int], bytes] | None = None) -> wire.CompletionLogprobs:
    """OpenAI legacy Completions ``logprobs`` for ``tokens`` (``top_logprobs``: text -> logprob).

    ``tokens`` and the keys of ``top_logprobs`` are the tokens as ``shown`` renders them (``piece`` when not
    given; a control token as its text: :attr:`~skippy.engine.output.generation.Generation.shown`).
    ``text_offset[i]`` is the character offset of token ``i`` in the reply's text, which holds ``piece``'s bytes
    of each token: counted by ``offsets`` (a new :class:`TextOffsets` from 0 by default; OpenAI counts from the
    start of the prompt text), or ``offsets`` itself when it is a list (an echoed prompt's: :func:`echo_offsets`).
    A token without a logprob (the first token of an echoed prompt, which nothing predicts) has ``null`` in
    ``token_logprobs`` and ``top_logprobs``, as OpenAI sends it.
    """
    rendered = [token_text(ev, shown or piece) for ev in tokens]
    if offsets is None or isinstance(offsets, TextOffsets):
        counter = offsets if offsets is not None else TextOffsets()
        at = [counter.next(piece(ev.token)) for ev in tokens]
    else:
        at = list(offsets)
    return wire.CompletionLogprobs(
        tokens=[tok.text for tok in rendered],
        token_logprobs=[tok.logprob for tok in rendered],
        top_logprobs=[{alt.text: alt.logprob for alt in tok.top} if tok.logprob is not None else None
                      for tok in rendered],
        text_offset=at)


def echo_offsets(tokens: Sequence[int], text: str, piece: Callable[[int], bytes],
                 shown: Callable[[int], bytes]) -> list[int]:
    """``text_offset`` of an echoed prompt's ``tokens`` in ``text``, the prompt as the reply echoes it (the
    request's string, or its token ids detokenized with their special tokens' text).

    A token that shows other than its ``piece`` (a control token: ``<|im_start|>``, ``<start_of_turn>``,
    ``<bos>``) counts as its shown text where ``text`` holds that text at the token's offset (typed in the
    prompt, or detokenized from ids), else as nothing (a BOS the tokenizer added); other tokens count as their
    ``piece``. OpenAI's contract: ``text_offset[i]`` is where token ``i`` starts in the text."""
    offsets = TextOffsets()
    out = []
    for token in tokens:
        data, seen = piece(token), shown(token)
        if seen != data and text.startswith(seen.decode("utf-8", errors="replace"), offsets.offset):
            data = seen
        out.append(offsets.next(data))
    return out


def chat_delta(d: Delta) -> wire.ChatDelta:
    """A :class:`Delta` as an OpenAI ``choices[].delta``: only its non-empty fields; a tool call's first
    fragment carries ``id`` and ``type``, its name when known, and always ``arguments``."""
    calls = [wire.ToolCallDelta(index=tc.index, id=tc.id if tc.id is not None else wire.UNSET,
                                type="function" if tc.id is not None else wire.UNSET,
                                function=wire.FunctionCallDelta(name=tc.name if tc.name is not None else wire.UNSET,
                                                                arguments=tc.arguments))
             for tc in d.tool_calls]
    return wire.ChatDelta(content=d.content or wire.UNSET, reasoning_content=d.reasoning_content or wire.UNSET,
                          tool_calls=calls or wire.UNSET)


def chat_message(m: ParsedMessage, *, tools: bool = False) -> wire.ChatMessage:
    """The final assistant message (OpenAI ``choices[].message``): ``content`` is ``null`` when the model
    only called tools, else a string, empty where nothing was generated (a stop string or an end at the first
    token: as the stream's and llama-server's), except for a request that offers tools (``tools``), whose
    stream starts with ``content: null`` (:meth:`ChatReply.first_chunks`): ``null`` there too."""
    calls = [wire.ToolCall(id=c.id, function=wire.FunctionCall(name=c.name, arguments=c.arguments))
             for c in m.tool_calls]
    return wire.ChatMessage(content=m.content or (None if calls or tools else ""),
                            reasoning_content=m.reasoning_content or wire.UNSET, tool_calls=calls or wire.UNSET)


class ChatReply:
    """OpenAI chat replies for one request's :class:`Generation`.

    ``logprobs``: the request asked for them (OpenAI ``logprobs``);
    ``include_usage``: the stream ends with a usage chunk
    (``stream_options.include_usage``); ``tools``: the request offers tools the reply may call (the stream's
    first delta then has ``content: null``: :meth:`first_chunks`). ``created`` is Unix seconds (now by default).
    ``index`` is the choice's ``choices[].index``; ``id`` the reply's (a new one by default).
    When the generation reports hook decisions (``return_hook_events``), each streamed one rides
    as ``hook_events`` on the chunk of the token that follows it (the role chunk for ``before_chat``),
    and a ``chat.completion`` lists them all. llama-server's ``timings_per_token`` puts the timings so far
    (``live``, :class:`LiveTimings`) on each item's last chunk, and ``return_progress`` sends a chunk with an
    empty delta and ``prompt_progress`` for each prefill step the generation reports. The logprobs are in
    llama-server's ``post_sampling_probs`` shape when the generation's sampling asked for it.
    """

    def __init__(self, model: str, generation: Generation, *, logprobs: bool = False,
                 include_usage: bool = False, created: int | None = None, index: int = 0,
                 id: str | None = None, timings_per_token: bool = False, return_progress: bool = False,
                 live: LiveTimings | None = None, tools: bool = False) -> None:
        self.id = id or new_id("chatcmpl")
        self.tools = tools
        self.index = index
        self.created = int(time.time()) if created is None else created
        self.model = model
        self.generation = generation
        self.logprobs = logprobs
        self.post = generation.request.params.post_sampling_probs
        self.include_usage = include_usage
        self.timings_per_token = timings_per_token
        self.return_progress = return_progress
        self.live = live or LiveTimings(len(generation.request.prompt))

    def _chunk(self, choices: list[wire.ChatChunkChoice], **extra: object) -> wire.ChatCompletionChunk:
        return wire.ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=choices,
                                        **extra)  # type: ignore[arg-type]

    def _choice(self, delta: wire.ChatDelta, tokens: list[TokenEvent], finish_reason: str | None = None,
                hook_events: list[HookReport] | None = None) -> wire.ChatChunkChoice:
        gen = self.generation
        lp = chat_logprobs(tokens, gen.shown, signals=gen.signals, post=self.post) if self.logprobs and tokens \
            else None
        stop = self.generation.stopping_word if finish_reason is not None else ""
        return wire.ChatChunkChoice(index=self.index, delta=delta, logprobs=lp, finish_reason=finish_reason,
                                    stop_reason=stop or wire.UNSET,
                                    hook_events=[hook_event(r) for r in hook_events] if hook_events else wire.UNSET)

    def first_chunks(self) -> list[wire.ChatCompletionChunk]:
        """The chunk every stream starts with (with the ``before_chat`` hook event when one is reported):
        ``delta`` ``{"role": "assistant", "content": ""}``, as OpenAI starts a text reply; ``content`` is
        ``null`` when the request offers tools (``tools``), as OpenAI starts a tool-call reply (and llama-server
        every reply), so that a reply that only calls tools never carries an empty string: a client that
        accumulates the deltas (the ``openai`` package's stream helpers) ends with ``content`` null, as the
        non-streamed reply has it, and with the text when there is one."""
        delta = wire.ChatDelta(role="assistant", content=None if self.tools else "")
        return [self._chunk([self._choice(delta, [], hook_events=list(self.generation.hook_events))])]

    def chunks(self, item: Piece | Done) -> list[wire.ChatCompletionChunk]:
        """The chunks for one generation item.

        One chunk per delta (the item's logprobs and hook events ride on the first); a token
        without deltas but with logprobs (or a hook event) gets a chunk with an empty delta. A
        :class:`Done` ends with the finish chunk (empty delta, ``finish_reason``, and the choice's llama-server
        ``timings``, which the llama.cpp web UI reads) and, with ``include_usage``, a chunk with empty
        ``choices``, ``usage`` and ``timings``. A prefill step gives its progress chunk (with ``return_progress``;
        else none).
        """
        if isinstance(item, Piece) and item.progress is not None:  # a prefill step: noted, sent where asked
            step = self.live.step(item.progress)
            return [self._progress(step)] if self.return_progress else []
        pending = list(item.tokens) if isinstance(item, Piece) else list(item.tail)
        hooks = list(item.hook_events) if isinstance(item, Piece) else []
        out = []
        if self.live.observe() and self.return_progress and not self.live.stepped:
            out.append(self._progress(self.live.progress()))
        n = len(out)
        for d in item.deltas:
            out.append(self._chunk([self._choice(chat_delta(d), pending, hook_events=hooks)]))
            pending, hooks = [], []
        if isinstance(item, Done):  # the finish chunk carries the choice's timings, as llama-server's does
            if pending:  # logprobs held back to the end, without a delta left to ride on
                out.append(self._chunk([self._choice(wire.ChatDelta(), pending)]))
            out.append(self._chunk([self._choice(wire.ChatDelta(), [], item.finish_reason)],
                                   timings=timings(item.counts)))
            if self.include_usage:
                out.append(self.usage_chunk(usage(item.counts), timings(item.counts)))
            return out
        if pending or hooks:
            out.append(self._chunk([self._choice(wire.ChatDelta(), pending, hook_events=hooks)]))
        if self.timings_per_token and len(out) > n:  # on the item's last chunk, as llama-server's
            out[-1].timings = self.live.timings(self.generation.completion_tokens)
        return out

    def _progress(self, progress: wire.PromptProgress) -> wire.ChatCompletionChunk:
        return self._chunk([self._choice(wire.ChatDelta(), [])], prompt_progress=progress)

    def usage_chunk(self, usage: wire.Usage, timings: wire.Timings) -> wire.ChatCompletionChunk:
        """The stream's last chunk with ``include_usage``: empty ``choices``, ``usage`` and ``timings``."""
        return self._chunk([], usage=usage, timings=timings)

    def completion(self, done: Done) -> wire.ChatCompletion:
        """The whole ``chat.completion`` (non-streamed): ``logprobs`` cover every generated token."""
        gen = self.generation
        lp = chat_logprobs(done.tokens, gen.shown, signals=gen.signals, post=self.post) if self.logprobs else None
        return wire.ChatCompletion(
            id=self.id, created=self.created, model=self.model,
            choices=[wire.ChatChoice(index=self.index, message=chat_message(done.message, tools=self.tools),
                                     logprobs=lp, finish_reason=done.finish_reason,
                                     stop_reason=self.generation.stopping_word or wire.UNSET,
                                     hook_events=[hook_event(r) for r in done.hook_events]
                                     if self.generation.request.hook_events else wire.UNSET)],
            usage=usage(done.counts), timings=timings(done.counts))


class TextReply:
    """OpenAI legacy Completions replies for one request's :class:`Generation`.

    ``logprobs``: the request asked for them (its ``logprobs`` is not null);
    ``echo``: the prompt text is sent first / prepended; ``include_usage``: the
    stream ends with a usage chunk (``usage`` only, no ``timings``). ``index``
    is the choice's ``choices[].index``, ``id`` the reply's (a new one by default).

    With ``echo`` and ``logprobs`` the prompt's tokens lead the logprobs (the
    first with ``null`` logprob, the others scored by ``prompt_source``, the
    generation that asked for ``prompt_logprobs``: this one, or the first choice
    of the same prompt). Streamed, the echo chunk then waits until they are
    scored: :meth:`ready` says when. ``text_offset`` counts characters from the
    start of the prompt text, echoed or not (OpenAI).
    """

    def __init__(self, model: str, generation: Generation, *, prompt_text: str = "", echo: bool = False,
                 logprobs: bool = False, include_usage: bool = False, created: int | None = None,
                 index: int = 0, id: str | None = None, prompt_source: Generation | None = None,
                 timings_per_token: bool = False, return_progress: bool = False,
                 live: LiveTimings | None = None) -> None:
        self.id = id or new_id("cmpl")
        self.index = index
        self.created = int(time.time()) if created is None else created
        self.model = model
        self.generation = generation
        self.prompt_text = prompt_text
        self.echo = echo
        self.logprobs = logprobs
        self.include_usage = include_usage
        self.prompt_source = prompt_source or generation
        self._offsets = TextOffsets(len(prompt_text))  # text_offset of the generated tokens
        self._echo_pending = echo and logprobs  # streamed: the echo chunk waits for the prompt's scores
        self.timings_per_token = timings_per_token
        self.return_progress = return_progress
        self.live = live or LiveTimings(len(generation.request.prompt))

    def _chunk(self, choices: list[wire.CompletionChoice], **extra: object) -> wire.TextCompletion:
        return wire.TextCompletion(id=self.id, created=self.created, model=self.model, choices=choices,
                                   **extra)  # type: ignore[arg-type]

    def _logprobs(self, tokens: list[TokenEvent]) -> wire.CompletionLogprobs:
        return legacy_logprobs(tokens, self.generation.piece, self._offsets, shown=self.generation.shown)

    def _choice(self, text: str, tokens: list[TokenEvent], finish_reason: str | None = None) -> wire.CompletionChoice:
        lp = self._logprobs(tokens) if self.logprobs and tokens else None
        return wire.CompletionChoice(index=self.index, text=text, logprobs=lp, finish_reason=finish_reason)

    def _prompt_logprobs(self) -> wire.CompletionLogprobs:
        """The echoed prompt's logprobs: its first token ``null``, the rest as scored; ``text_offset`` into the
        prompt text (:func:`echo_offsets`)."""
        gen = self.generation
        prompt = gen.request.prompt
        scored = self.prompt_source.prompt_tokens or []
        events = ([TokenEvent(prompt[0])] if prompt else []) + scored
        offsets = echo_offsets([ev.token for ev in events], self.prompt_text, gen.piece, gen.shown)
        return legacy_logprobs(events, gen.piece, offsets, shown=gen.shown)

    def ready(self) -> bool:
        """The next chunks can be rendered: no echo chunk waits for prompt scores that are not there yet."""
        return not self._echo_pending or self.prompt_source.prompt_tokens is not None or self.prompt_source.finished

    def first_chunks(self) -> list[wire.TextCompletion]:
        """With ``echo``, a first chunk with the prompt text (with ``logprobs`` later: :meth:`ready`); else none."""
        if self.echo and self.prompt_text and not self._echo_pending:
            return [self._chunk([wire.CompletionChoice(index=self.index, text=self.prompt_text)])]
        return []

    def chunks(self, item: Piece | Done) -> list[wire.TextCompletion]:
        """The chunks for one generation item: its text and logprobs in one chunk (none when it has
        neither); a :class:`Done` always gives the finish chunk (with the choice's llama-server ``timings``),
        then the usage chunk with ``include_usage``. The echo chunk that waited for the prompt's scores goes first."""
        if isinstance(item, Piece) and item.progress is not None:  # a prefill step: noted, sent where asked
            step = self.live.step(item.progress)
            return [self._progress(step)] if self.return_progress else []
        out = []
        if self._echo_pending:
            self._echo_pending = False
            out.append(self._chunk([wire.CompletionChoice(index=self.index, text=self.prompt_text,
                                                          logprobs=self._prompt_logprobs())]))
        if self.live.observe() and self.return_progress and not self.live.stepped:
            out.append(self._progress(self.live.progress()))
        text = "".join(d.content for d in item.deltas)
        if isinstance(item, Done):  # the finish chunk carries the choice's timings, as llama-server's does
            out.append(self._chunk([self._choice(text, item.tail, item.finish_reason)], timings=timings(item.counts)))
            if self.include_usage:
                out.append(self.usage_chunk(usage(item.counts), timings(item.counts)))
            return out
        if text or item.tokens:
            out.append(self._chunk([self._choice(text, item.tokens)], **(
                {"timings": self.live.timings(self.generation.completion_tokens)} if self.timings_per_token else {})))
        return out

    def _progress(self, progress: wire.PromptProgress) -> wire.TextCompletion:
        return self._chunk([wire.CompletionChoice(index=self.index, text="")], prompt_progress=progress)

    def usage_chunk(self, usage: wire.Usage, timings: wire.Timings) -> wire.TextCompletion:
        """The stream's last chunk with ``include_usage``: empty ``choices`` and ``usage`` (no ``timings``)."""
        return self._chunk([], usage=usage)

    def completion(self, done: Done) -> wire.TextCompletion:
        """The whole ``text_completion`` (non-streamed); with ``echo`` the text starts with the prompt
        (and with ``logprobs`` so do the logprobs)."""
        text = (self.prompt_text if self.echo else "") + done.message.content
        lp = None
        if self.logprobs:
            lp = self._logprobs(done.tokens)
            if self.echo:
                head = self._prompt_logprobs()
                lp = wire.CompletionLogprobs(tokens=head.tokens + lp.tokens,
                                             token_logprobs=head.token_logprobs + lp.token_logprobs,
                                             top_logprobs=head.top_logprobs + lp.top_logprobs,
                                             text_offset=head.text_offset + lp.text_offset)
        return self._chunk([wire.CompletionChoice(index=self.index, text=text, logprobs=lp,
                                                  finish_reason=done.finish_reason)],
                           usage=usage(done.counts), timings=timings(done.counts))


class Reply(Protocol):
    """What :class:`Choices` needs of one choice's reply (:class:`ChatReply`, :class:`TextReply`)."""

    generation: Generation

    def first_chunks(self) -> list[Any]: ...
    def chunks(self, item: Piece | Done) -> list[Any]: ...
    def usage_chunk(self, usage: wire.Usage, timings: wire.Timings) -> object: ...
    def completion(self, done: Done) -> msgspec.Struct: ...


def ready(reply: Reply) -> bool:
    return reply.ready() if isinstance(reply, TextReply) else True


class Choices:
    """The replies of one request's choices as one reply (OpenAI ``n``; a list of prompts).

    ``replies[i]`` renders choice ``i`` (built with its ``index``, the shared
    ``id`` and ``created``, and without ``include_usage``); ``prompt_of[i]`` is
    the prompt it answers. ``usage`` counts each prompt once and every choice's
    completion tokens (OpenAI): ``prompt_tokens`` and ``cached_tokens`` are
    each prompt's first choice's, summed over prompts; ``timings`` likewise, with
    ``predicted_n`` summed and the longest ``prompt_ms`` / ``predicted_ms`` (the rates
    count every choice's decode steps after its first token over the longest ``predicted_ms``), and
    ``draft_n`` / ``draft_n_accepted`` summed over the choices when one of them speculated.
    Streamed, each choice's chunks carry its ``index`` and interleave as its
    tokens come; with ``include_usage`` one usage chunk follows the last finish.
    """

    def __init__(self, replies: Sequence[Reply], prompt_of: Sequence[int], *, include_usage: bool = False) -> None:
        self.replies = list(replies)
        self.prompt_of = list(prompt_of)
        self.include_usage = include_usage
        self._dones: dict[int, Done] = {}
        self._held: dict[int, list[Piece | Done]] = {}  # items of choices that are not ready yet

    def usage(self, dones: Sequence[Done]) -> tuple[wire.Usage, wire.Timings]:
        """Usage and timings of the whole request from every choice's :class:`Done` (by choice)."""
        if len(dones) == 1:
            return usage(dones[0].counts), timings(dones[0].counts)
        firsts: dict[int, Counts] = {}
        for p, d in zip(self.prompt_of, dones, strict=True):
            firsts.setdefault(p, d.counts)
        prompt = sum(c.prompt_tokens for c in firsts.values())
        cached = sum(c.cached_tokens for c in firsts.values())
        completion = sum(d.counts.completion_tokens for d in dones)
        # a prompt's before_chat injection once, every choice's own injections
        injected = [c.prompt_injected for c in firsts.values() if c.injected_tokens is not None] + \
            [d.counts.injected_tokens - d.counts.prompt_injected for d in dones if d.counts.injected_tokens is not None]
        total = usage(Counts(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached,
                             injected_tokens=sum(injected) if injected else None))
        times = wire.Timings.of(prompt - cached, max(c.prompt_ms for c in firsts.values()), completion,
                                max(d.counts.predicted_ms for d in dones), cache_n=cached,
                                predicted_steps=sum(max(d.counts.completion_tokens - 1, 0) for d in dones))
        drafted = sum(d.counts.draft_tokens for d in dones)
        if drafted:  # as predicted_n: every choice's drafts, when one speculated
            times.draft_n, times.draft_n_accepted = drafted, sum(d.counts.draft_accepted for d in dones)
        return total, times

    def completion(self, dones: Sequence[Done]) -> msgspec.Struct:
        """The whole reply (non-streamed): every choice in order, the request's usage and timings."""
        wholes = [r.completion(d) for r, d in zip(self.replies, dones, strict=True)]
        if len(wholes) == 1:
            return wholes[0]
        total, times = self.usage(dones)
        whole = wholes[0]
        extra = {"timings": times} if whole.timings is not wire.UNSET else {}  # type: ignore[attr-defined]
        return msgspec.structs.replace(whole, choices=[c for w in wholes for c in w.choices],  # type: ignore[attr-defined]
                                       usage=total, **extra)

    def first_chunks(self) -> list[Any]:
        """Every choice's first chunks, in choice order."""
        return [c for r in self.replies for c in r.first_chunks()]

    def chunks(self, index: int, item: Piece | Done) -> list[Any]:
        """The chunks for choice ``index``'s next item (held back while that choice is not ready, but a prefill
        step's progress, which goes out at once); after the last choice's finish, the usage chunk with
        ``include_usage``."""
        if isinstance(item, Piece) and item.progress is not None and not self._held.get(index):
            return self.replies[index].chunks(item)  # an echo waiting for its prompt's scores holds no progress
        self._held.setdefault(index, []).append(item)
        out = []
        for i in list(self._held):
            reply = self.replies[i]
            if ready(reply):
                for held in self._held.pop(i):
                    out += reply.chunks(held)
                    if isinstance(held, Done):
                        self._dones[i] = held
        if self.include_usage and len(self._dones) == len(self.replies) and not self._held:
            total, times = self.usage([self._dones[i] for i in range(len(self.replies))])
            out.append(self.replies[0].usage_chunk(total, times))
            self.include_usage = False
        return out


def embedding_list(vectors: np.ndarray, *, model: str, prompt_tokens: int, encoding_format: str, rid: str,
                   created: int, embd_normalize: int = 2) -> wire.EmbeddingList:
    """The OpenAI reply for pooled ``vectors`` (float32, ``(n_inputs, n_embd)``, not normalized yet), each
    normalized as ``embd_normalize`` says (:func:`~skippy.engine.output.embeddings.normalize_embd`; 2: unit
    length, OpenAI's); ``rid`` and ``created`` (Unix seconds) are its ``id`` and ``created``."""
    unit = normalize_embd(vectors, embd_normalize)
    if encoding_format == "base64":
        data = [wire.Embedding(index=i, embedding=base64.b64encode(row.astype("<f4").tobytes()).decode("ascii"))
                for i, row in enumerate(unit)]
    else:
        data = [wire.Embedding(index=i, embedding=row.tolist()) for i, row in enumerate(unit)]
    return wire.EmbeddingList(id=rid, created=created, data=data, model=model,
                              usage=wire.EmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens))
