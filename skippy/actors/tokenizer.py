"""The Tokenizer actor: tokenize / detokenize in worker threads.

It owns only the read-only vocabulary (thread-safe in llama.cpp), so it
never waits on a decode step and a decode step never waits on it. A text of
at most :data:`INLINE_CHARS` characters is tokenized on the caller's thread
instead: that takes less than the trip to a worker thread and back. A longer
text with special tokens parsed goes through the
:class:`~skippy.engine.runtime.tokenization.TokenizationCache` when the
vocabulary allows one: only the pieces no earlier prompt had are tokenized, on
the caller's thread when they are short.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, assert_never

import attrs
import trio

from skippy.actors.base import DedicatedThread, ThreadActor
from skippy.engine.errors import EngineClosed, InvalidRequest
from skippy.engine.runtime.base import Vocab
from skippy.engine.runtime.media import MARKER, BadImage, MediaPrompt, Projector, tokenize_with_images
from skippy.engine.runtime.tokenization import Plan, TokenizationCache

log = logging.getLogger("skippy.tokenizer")

#: Texts up to this many characters are tokenized inline (on the trio thread): measured on 2 CPU cores
#: with SmolLM2's vocabulary, 150 characters took 0.05 ms and 2000 took 0.46 ms; the trip through the
#: actor and a worker thread cost a short chat request's tokenizing stage 0.71 ms (0.52 inline).
INLINE_CHARS = 1024

#: The niceness of the media thread that decodes and encodes images (and of the encoder's OpenMP threads
#: it starts): the image encoder yields the cores to decoding. bench/bench_images.py on 2 cores (8 text
#: streams beside 8 images, a ViT-B/16-sized projector): text ITL p99 beside images / alone 3.3-3.7x
#: at 0 (on the decode thread or this one), 2.96x at 10, 2.37x at 19.
MEDIA_NICE = 19


@attrs.frozen
class Tokenize:
    text: str
    add_special: bool
    parse_special: bool
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class Complete:
    plan: Plan
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


class Tokenizer(ThreadActor[Tokenize | Complete | Detokenize | CheckGrammar | CheckConstraint]):
    """Tokenizer actor over a :class:`Vocab`; ``cache``: the vocabulary's tokenization cache, if any
    (:func:`~skippy.engine.runtime.tokenization.cache_for`). ``bos_id``: the model's BOS; where the
    vocabulary adds it (``add_special``) and the text begins with it too (a template that writes it), one is
    dropped. A vocabulary that adds none (SmolLM2's BOS is ``<|im_start|>``) keeps every token the text has."""

    def __init__(self, vocab: Vocab, *, bos_id: int = -1, max_threads: int = 2, media: Projector | None = None,
                 cache: TokenizationCache | None = None) -> None:
        super().__init__(max_threads)
        self.vocab = vocab
        adds_bos = bos_id >= 0 and vocab.tokenize("", add_special=True, parse_special=False)[:1] == [bos_id]
        self.bos_id = bos_id if adds_bos else -1
        self.media = media
        self.cache = cache
        self._told = False  # the cache's self-check failure was logged
        #: set when the engine closes: the vocabulary is about to be freed with the model, so every call
        #: raises EngineClosed from then on (a text tokenized inline would read freed memory)
        self.closed = False
        # images are read and encoded on one long-lived thread: the encoder's OpenMP team stays with it
        # (a team per calling thread would pile up and spin beside the decode thread's), one image at a time
        self._media_thread = DedicatedThread("skippy-media", nice=MEDIA_NICE) if media is not None else None

    def handle(self, msg: Tokenize | Complete | Detokenize | CheckGrammar | CheckConstraint) -> Any:
        match msg:
            case CheckGrammar():
                return self.vocab.check_grammar(msg.gbnf, msg.lazy_patterns)
            case CheckConstraint():
                return self.vocab.check_constraint(msg.grammar)
            case Tokenize():
                return self._tokenize(msg.text, msg.add_special, msg.parse_special)
            case Complete():
                return self._complete(msg.plan)
            case Detokenize():
                return self.vocab.detokenize(msg.tokens)
            case _:
                assert_never(msg)

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return self._one_bos(self.vocab.tokenize(text, add_special=add_special, parse_special=parse_special),
                             add_special)

    def _complete(self, plan: Plan) -> list[int]:
        assert self.cache is not None
        ids = self.cache.complete(plan)
        if self.cache.disabled and not self._told:
            self._told = True
            log.warning("tokenization cache off: %s", self.cache.disabled)
        return self._one_bos(ids, plan.add_special)

    def _cached(self, text: str, add_special: bool) -> list[int]:
        """``text`` with special tokens parsed, through the cache where there is one (on any thread)."""
        if self.cache is None or len(text) <= INLINE_CHARS:
            return self._tokenize(text, add_special, True)
        return self._complete(self.cache.plan(text, add_special))

    def _one_bos(self, ids: list[int], add_special: bool) -> list[int]:
        # a template that writes BOS itself plus add_special would give two BOS tokens
        if add_special and len(ids) >= 2 and ids[0] == ids[1] == self.bos_id:
            ids = ids[1:]
        return ids

    async def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text -> token ids (``add_special``: the model's BOS when it wants one); a text of at most
        :data:`INLINE_CHARS` characters on this thread, a longer one in a worker thread, or, through the
        cache, its pieces no earlier text had: on this thread when they hold at most :data:`INLINE_CHARS`
        characters and the cache does not check this text against its whole tokenization."""
        self._check_open()
        if len(text) <= INLINE_CHARS:
            await trio.lowlevel.checkpoint()
            return self._tokenize(text, add_special, parse_special)
        if self.cache is None or not parse_special:
            return await self.ask(lambda r: Tokenize(text, add_special, parse_special, r))
        plan = self.cache.plan(text, add_special)
        if plan.uncached_chars <= INLINE_CHARS and not plan.check:
            await trio.lowlevel.checkpoint()
            return self._complete(plan)
        return await self.ask(lambda r: Complete(plan, r))

    async def tokenize_mixed(self, parts: Sequence[int | str], *, add_special: bool = True,
                             parse_special: bool = True) -> list[int]:
        """One prompt of token ids and strings as llama-server's ``tokenize_mixed``: each string tokenized
        (special tokens parsed with ``parse_special``), the model's BOS added (with ``add_special``) for a string
        that comes first; the ids as given (the caller checks their range)."""
        tokens: list[int] = []
        for i, part in enumerate(parts):
            tokens += await self.tokenize(part, add_special=add_special and i == 0, parse_special=parse_special) \
                if isinstance(part, str) else [part]
        return tokens

    def _tokenize_media(self, text: str, images: tuple[bytes, ...], param: str, encode: bool,
                        where: tuple[str, ...]) -> MediaPrompt:
        if self.media is None:  # the renderer refused image parts already
            raise InvalidRequest("this model reads text only", code="media_not_supported")
        pieces = text.split(MARKER)
        if len(pieces) != len(images) + 1:
            raise InvalidRequest(f"the prompt holds {len(pieces) - 1} media markers ({MARKER}) for {len(images)} "
                                 f"images: the text must not contain {MARKER}", param=param)
        texts = [self._cached(p, i == 0) for i, p in enumerate(pieces)]
        try:
            prompt = tokenize_with_images(self.media, texts, images, encode)
        except BadImage as exc:
            at = where[exc.index] if exc.index < len(where) else param
            raise InvalidRequest(f"{at}: the image could not be read: {exc}", param=at, code="invalid_image") from None
        except ValueError as exc:
            raise InvalidRequest(f"an image could not be read: {exc}", param=param, code="invalid_image") from None
        if prompt.spans and prompt.spans[-1].end == len(prompt.tokens):
            raise InvalidRequest("a prompt cannot end with an image", param=param)
        return prompt

    async def tokenize_media(self, text: str, images: tuple[bytes, ...], param: str = "messages", *,
                             encode: bool = True, where: tuple[str, ...] = ()) -> MediaPrompt:
        """A rendered prompt with media markers and its images -> token ids with each image's placeholder ids
        and spans (:func:`~skippy.engine.runtime.media.tokenize_with_images`), on the tokenizer's media
        thread (libmtmd decodes, resizes and encodes the images there, one request at a time). Raises
        :class:`InvalidRequest` for an image libmtmd cannot read (naming its field in ``where``, one per image,
        else ``param``) or a marker count that differs from the images' (naming ``param``, the request's
        field). ``encode`` off: the images are not encoded (a
        request that only counts its tokens); the decode encodes such a chunk if it ever gets one."""
        self._check_open()
        if self._media_thread is None:
            raise InvalidRequest("this model reads text only", param=param, code="media_not_supported")
        return await self._media_thread.run_sync(self._tokenize_media, text, tuple(images), param, encode,
                                                 tuple(where))

    def _check_open(self) -> None:
        if self.closed:
            raise EngineClosed("the engine is shutting down")

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            if self._media_thread is not None:
                self._media_thread.close()

    async def check_grammar(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> bool:
        """True when llama.cpp parses the GBNF ``gbnf`` (checked against the vocabulary)."""
        self._check_open()
        return await self.ask(lambda r: CheckGrammar(gbnf, tuple(lazy_patterns), r))

    async def check_constraint(self, grammar: str) -> str:
        """``""`` when llguidance compiles ``grammar`` for the vocabulary, else its error message."""
        self._check_open()
        return await self.ask(lambda r: CheckConstraint(grammar, r))

    async def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids -> text; raises ``ValueError`` for ids outside the vocabulary."""
        self._check_open()
        return await self.ask(lambda r: Detokenize(tuple(tokens), r))
