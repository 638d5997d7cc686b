"""Shared types of the chat-format output parsers (sans-IO).

A chat format turns the model's generated text into an OpenAI assistant
message: ``content``, ``reasoning_content`` and ``tool_calls``. Every format
implements :class:`StreamParser`: text is fed in pieces as it is decoded and
the parser returns :class:`Delta` objects that are append-only (nothing
emitted is ever taken back). :meth:`StreamParser.finish` returns the last
deltas and the final :class:`ParsedMessage`.

Invariant (tested per format): for any split of the same text into pieces,
the concatenation of all deltas equals the final message field by field,
and tool-call ``arguments`` fragments concatenate to the final arguments
byte for byte. Non-streaming responses use the same parser fed the whole
text at once, so both paths agree by construction.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from collections.abc import Callable
from typing import Protocol

import attrs


def new_call_id() -> str:
    """Mint an OpenAI-style tool-call id: ``call_`` + 24 random hex chars."""
    return "call_" + secrets.token_hex(12)


_ALNUM = string.ascii_letters + string.digits


def new_short_call_id() -> str:
    """Mint a tool-call id of 9 random alphanumeric characters, the form Mistral's templates insist on (vLLM's
    ``MistralToolCall`` ids)."""
    return "".join(secrets.choice(_ALNUM) for _ in range(9))


def short_call_id(call_id: str) -> str:
    """``call_id`` as 9 alphanumeric characters for a template that refuses other ids: itself when it is one,
    else a digest of it (the same for a call and the tool result that names it), e.g. ``call_3f2a...`` of
    another server's or ``toolu_...`` of an Anthropic client."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    n = int.from_bytes(hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    out = []
    for _ in range(9):
        n, r = divmod(n, len(_ALNUM))
        out.append(_ALNUM[r])
    return "".join(out)


IdFactory = Callable[[], str]


@attrs.frozen
class ToolCallDelta:
    """One streamed tool-call fragment (OpenAI ``choices[].delta.tool_calls[]``).

    The first delta of a call carries ``index``, ``id`` and ``name`` (and
    possibly the start of ``arguments``); later deltas carry only ``index``
    and an ``arguments`` fragment.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@attrs.frozen
class Delta:
    """An append-only piece of the assistant message."""

    content: str = ""
    reasoning_content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()

    def is_empty(self) -> bool:
        return not (self.content or self.reasoning_content or self.tool_calls)


@attrs.frozen
class ToolCall:
    """A complete tool call: ``arguments`` is a JSON object serialised as text."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class ParsedMessage:
    """The final assistant message. Empty strings become ``None`` on the wire."""

    content: str = ""
    reasoning_content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


class StreamParser(Protocol):
    """Incremental parser of one generation's text."""

    def feed(self, text: str) -> list[Delta]:
        """Consume the next piece of generated text; return safe deltas."""
        ...

    def finish(self, *, truncated: bool = False) -> tuple[list[Delta], ParsedMessage]:
        """End of generation: flush held-back text, return the final message.

        ``truncated``: the text was cut by the token limit (finish ``length``). Held-back text then is the
        start of syntax the limit cut (a marker, a call's header or arguments) and is dropped, never given
        back as content, and a call whose arguments did not complete is left out of the message (a stream
        has already sent its fragments; its ``finish_reason: "length"`` says the call is cut).
        """
        ...


class ContentParser:
    """The content-only format: every character is content, nothing held back."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def feed(self, text: str) -> list[Delta]:
        if not text:
            return []
        self._parts.append(text)
        return [Delta(content=text)]

    def finish(self, *, truncated: bool = False) -> tuple[list[Delta], ParsedMessage]:
        return [], ParsedMessage(content="".join(self._parts))
