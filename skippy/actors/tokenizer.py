"""The Tokenizer actor: tokenize / detokenize in worker threads.

It owns only the read-only vocabulary (thread-safe in llama.cpp), so it
never waits on a decode step and a decode step never waits on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

import attrs
import trio

from skippy.actors.base import ThreadActor
from skippy.engine.runtime.base import Vocab


@attrs.frozen
class Tokenize:
    text: str
    add_special: bool
    parse_special: bool
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class CheckGrammar:
    gbnf: str
    lazy_patterns: tuple[str, ...]
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class CheckConstraint:
    grammar: str
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class Detokenize:
    tokens: tuple[int, ...]
    reply: trio.MemorySendChannel[Any]


class Tokenizer(ThreadActor[Tokenize | Detokenize | CheckGrammar | CheckConstraint]):
    """Tokenizer actor over a :class:`Vocab`."""

    def __init__(self, vocab: Vocab, *, bos_id: int = -1, max_threads: int = 2) -> None:
        super().__init__(max_threads)
        self.vocab = vocab
        self.bos_id = bos_id

    def handle(self, msg: Tokenize | Detokenize | CheckGrammar | CheckConstraint) -> Any:
        match msg:
            case CheckGrammar():
                return self.vocab.check_grammar(msg.gbnf, msg.lazy_patterns)
            case CheckConstraint():
                return self.vocab.check_constraint(msg.grammar)
            case Tokenize():
                ids = self.vocab.tokenize(msg.text, add_special=msg.add_special, parse_special=msg.parse_special)
                # a template that writes BOS itself plus add_special would give two BOS tokens
                if msg.add_special and len(ids) >= 2 and ids[0] == ids[1] == self.bos_id:
                    ids = ids[1:]
                return ids
            case Detokenize():
                return self.vocab.detokenize(msg.tokens)
            case _:
                assert_never(msg)

    async def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text -> token ids (``add_special``: the model's BOS when it wants one)."""
        return await self.ask(lambda r: Tokenize(text, add_special, parse_special, r))

    async def check_grammar(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> bool:
        """True when llama.cpp parses the GBNF ``gbnf`` (checked against the vocabulary)."""
        return await self.ask(lambda r: CheckGrammar(gbnf, tuple(lazy_patterns), r))

    async def check_constraint(self, grammar: str) -> str:
        """``""`` when llguidance compiles ``grammar`` for the vocabulary, else its error message."""
        return await self.ask(lambda r: CheckConstraint(grammar, r))

    async def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids -> text; raises ``ValueError`` for ids outside the vocabulary."""
        return await self.ask(lambda r: Detokenize(tuple(tokens), r))
