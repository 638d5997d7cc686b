"""Mistral FIM onto the legacy Completions path, and its ``text_completion`` back as Mistral's ``chat.completion``.

Pure functions and one stream translator, no I/O: :func:`to_completion_request` (the request),
:func:`to_fim_completion` (the reply), :class:`FimStream` (the chunks). Mistral's FIM reply has the Chat
Completions shape (``choices[].message.content``; streamed, ``choices[].delta.content``); its last stream chunk
carries ``usage`` without being asked for it.
"""

from __future__ import annotations

from skippy.engine.protocols.mistral.types import FimCompletionRequest
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import CompletionRequest, StreamOptions


def to_completion_request(req: FimCompletionRequest) -> CompletionRequest:
    """The legacy Completions request a FIM request is: ``suffix`` as OpenAI's (fill in the middle with the FIM
    tokens), ``random_seed`` as ``seed``; a stream asks for the usage chunk (Mistral's last chunk has it)."""
    return CompletionRequest(
        prompt=req.prompt, suffix=req.suffix, model=req.model, max_tokens=req.max_tokens, min_tokens=req.min_tokens,
        temperature=req.temperature, top_p=req.top_p, stop=req.stop, seed=req.random_seed, stream=req.stream,
        stream_options=StreamOptions(include_usage=True) if req.stream else None)


def to_fim_completion(completion: wire.TextCompletion) -> wire.ChatCompletion:
    """The ``chat.completion`` Mistral answers a FIM request with: one choice, the filled text as the assistant
    message's ``content``; ``usage`` and llama-server's ``timings`` as the text completion's."""
    usage, timings = completion.usage, completion.timings
    assert isinstance(usage, wire.Usage) and isinstance(timings, wire.Timings)  # a reply has both
    return wire.ChatCompletion(
        id=completion.id, created=completion.created, model=completion.model,
        choices=[wire.ChatChoice(index=c.index, message=wire.ChatMessage(content=c.text),
                                 finish_reason=c.finish_reason or "stop") for c in completion.choices],
        usage=usage, timings=timings)


class FimStream:
    """``text_completion`` chunks (from a request with ``include_usage``) as Mistral's ``chat.completion.chunk``
    events, one :meth:`events` call a chunk.

    The first event carries ``delta.role`` (``assistant``); each text piece becomes a ``delta.content``; the
    finish chunk is held back until the usage chunk, and goes out with its ``usage`` (and ``timings``), as
    Mistral's last chunk does. ``done`` is true once that last event was made.
    """

    def __init__(self) -> None:
        self._started = False
        self._finish: wire.ChatCompletionChunk | None = None
        self.done = False

    def _chunk(self, source: wire.TextCompletion, choices: list[wire.ChatChunkChoice]) -> wire.ChatCompletionChunk:
        return wire.ChatCompletionChunk(id=source.id, created=source.created, model=source.model, choices=choices)

    def events(self, chunk: wire.TextCompletion) -> list[wire.ChatCompletionChunk]:
        """The events for one chunk: none, one, or two (the role's, then the first text)."""
        out: list[wire.ChatCompletionChunk] = []
        if not self._started:
            self._started = True
            out.append(self._chunk(chunk, [wire.ChatChunkChoice(delta=wire.ChatDelta(role="assistant", content=""))]))
        if not chunk.choices:  # the usage chunk: the held finish chunk goes with it
            last = self._finish or self._chunk(chunk, [])
            last.usage, last.timings = chunk.usage, chunk.timings
            self._finish, self.done = None, True
            return [*out, last]
        for c in chunk.choices:
            if c.text:
                delta = wire.ChatDelta(content=c.text)
                out.append(self._chunk(chunk, [wire.ChatChunkChoice(index=c.index, delta=delta)]))
            if c.finish_reason is not None:
                self._finish = self._chunk(chunk, [wire.ChatChunkChoice(index=c.index, delta=wire.ChatDelta(),
                                                                         finish_reason=c.finish_reason)])
        return out
