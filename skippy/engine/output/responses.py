"""Replies from a :class:`~skippy.engine.output.generation.Generation`'s output (sans-IO builders).

:class:`ChatReply` turns :class:`Piece` / :class:`Done` items into OpenAI
``chat.completion.chunk`` objects or one ``chat.completion``;
:class:`TextReply` into legacy ``text_completion`` objects. They build the
:mod:`skippy.engine.output.wire` Structs, nothing else: one ``id`` and
``created`` per reply, every chunk with ``logprobs`` and ``finish_reason``
(``null`` until the end), as OpenAI streams them.
"""

from __future__ import annotations

import secrets
import time

from skippy.engine.chat.formats.base import Delta, ParsedMessage
from skippy.engine.output import wire
from skippy.engine.output.generation import Done, Generation, Piece
from skippy.engine.scheduling.events import TokenEvent


def new_id(prefix: str) -> str:
    """``chatcmpl-`` / ``cmpl-`` + 24 random hex chars."""
    return f"{prefix}-{secrets.token_hex(12)}"


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


def chat_message(m: ParsedMessage) -> wire.ChatMessage:
    """The final assistant message (OpenAI ``choices[].message``): empty ``content`` is ``null``."""
    calls = [wire.ToolCall(id=c.id, function=wire.FunctionCall(name=c.name, arguments=c.arguments))
             for c in m.tool_calls]
    return wire.ChatMessage(content=m.content or None, reasoning_content=m.reasoning_content or wire.UNSET,
                            tool_calls=calls or wire.UNSET)


class ChatReply:
    """OpenAI chat replies for one request's :class:`Generation`.

    ``logprobs``: the request asked for them (OpenAI ``logprobs``);
    ``include_usage``: the stream ends with a usage chunk
    (``stream_options.include_usage``). ``created`` is Unix seconds (now by default).
    ``request_id``: the reply ``id`` is ``chatcmpl-<request_id>`` (a client's
    ``X-Request-Id``); ``None``: 24 random hex chars.
    """

    def __init__(self, model: str, generation: Generation, *, logprobs: bool = False,
                 include_usage: bool = False, created: int | None = None, request_id: str | None = None) -> None:
        self.id = f"chatcmpl-{request_id}" if request_id else new_id("chatcmpl")
        self.created = int(time.time()) if created is None else created
        self.model = model
        self.generation = generation
        self.logprobs = logprobs
        self.include_usage = include_usage

    def _chunk(self, choices: list[wire.ChatChunkChoice], **extra: object) -> wire.ChatCompletionChunk:
        return wire.ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=choices,
                                        **extra)  # type: ignore[arg-type]

    def _choice(self, delta: wire.ChatDelta, tokens: list[TokenEvent],
                finish_reason: str | None = None) -> wire.ChatChunkChoice:
        lp = self.generation.chat_logprobs(tokens) if self.logprobs and tokens else None
        return wire.ChatChunkChoice(delta=delta, logprobs=lp, finish_reason=finish_reason)

    def first_chunks(self) -> list[wire.ChatCompletionChunk]:
        """The chunk every stream starts with: ``delta`` ``{"role": "assistant", "content": ""}``."""
        return [self._chunk([self._choice(wire.ChatDelta(role="assistant", content=""), [])])]

    def chunks(self, item: Piece | Done) -> list[wire.ChatCompletionChunk]:
        """The chunks for one generation item.

        One chunk per delta (the item's logprobs ride on the first); a token
        without deltas but with logprobs gets a chunk with an empty delta. A
        :class:`Done` ends with the finish chunk (empty delta, ``finish_reason``)
        and, with ``include_usage``, a chunk with empty ``choices``, ``usage`` and
        ``timings``.
        """
        pending = list(item.tokens) if isinstance(item, Piece) else []
        out = []
        for d in item.deltas:
            out.append(self._chunk([self._choice(chat_delta(d), pending)]))
            pending = []
        if isinstance(item, Done):
            out.append(self._chunk([self._choice(wire.ChatDelta(), [], item.finish_reason)]))
            if self.include_usage:
                out.append(self._chunk([], usage=item.usage, timings=item.timings))
        elif pending:
            out.append(self._chunk([self._choice(wire.ChatDelta(), pending)]))
        return out

    def completion(self, done: Done) -> wire.ChatCompletion:
        """The whole ``chat.completion`` (non-streamed): ``logprobs`` cover every generated token."""
        lp = self.generation.chat_logprobs(done.tokens) if self.logprobs else None
        return wire.ChatCompletion(
            id=self.id, created=self.created, model=self.model,
            choices=[wire.ChatChoice(message=chat_message(done.message), logprobs=lp,
                                     finish_reason=done.finish_reason)],
            usage=done.usage, timings=done.timings)


class TextReply:
    """OpenAI legacy Completions replies for one request's :class:`Generation`.

    ``logprobs``: the request asked for them (its ``logprobs`` is not null);
    ``echo``: the prompt text is sent first / prepended; ``include_usage``: the
    stream ends with a usage chunk (``usage`` only, no ``timings``); ``request_id``:
    the reply ``id`` is ``cmpl-<request_id>`` (``None``: random).
    """

    def __init__(self, model: str, generation: Generation, *, prompt_text: str = "", echo: bool = False,
                 logprobs: bool = False, include_usage: bool = False, created: int | None = None,
                 request_id: str | None = None) -> None:
        self.id = f"cmpl-{request_id}" if request_id else new_id("cmpl")
        self.created = int(time.time()) if created is None else created
        self.model = model
        self.generation = generation
        self.prompt_text = prompt_text
        self.echo = echo
        self.logprobs = logprobs
        self.include_usage = include_usage

    def _chunk(self, choices: list[wire.CompletionChoice], **extra: object) -> wire.TextCompletion:
        return wire.TextCompletion(id=self.id, created=self.created, model=self.model, choices=choices,
                                   **extra)  # type: ignore[arg-type]

    def _choice(self, text: str, tokens: list[TokenEvent], finish_reason: str | None = None) -> wire.CompletionChoice:
        lp = self.generation.legacy_logprobs(tokens) if self.logprobs and tokens else None
        return wire.CompletionChoice(text=text, logprobs=lp, finish_reason=finish_reason)

    def first_chunks(self) -> list[wire.TextCompletion]:
        """With ``echo``, a first chunk with the prompt text; else none."""
        return [self._chunk([self._choice(self.prompt_text, [])])] if self.echo and self.prompt_text else []

    def chunks(self, item: Piece | Done) -> list[wire.TextCompletion]:
        """The chunks for one generation item: its text and logprobs in one chunk (none when it has
        neither); a :class:`Done` always gives the finish chunk, then the usage chunk with ``include_usage``."""
        text = "".join(d.content for d in item.deltas)
        if isinstance(item, Done):
            out = [self._chunk([self._choice(text, [], item.finish_reason)])]
            if self.include_usage:
                out.append(self._chunk([], usage=item.usage))
            return out
        if text or item.tokens:
            return [self._chunk([self._choice(text, item.tokens)])]
        return []

    def completion(self, done: Done) -> wire.TextCompletion:
        """The whole ``text_completion`` (non-streamed); with ``echo`` the text starts with the prompt."""
        text = (self.prompt_text if self.echo else "") + done.message.content
        lp = self.generation.legacy_logprobs(done.tokens) if self.logprobs else None
        return self._chunk([wire.CompletionChoice(text=text, logprobs=lp, finish_reason=done.finish_reason)],
                           usage=done.usage, timings=done.timings)
