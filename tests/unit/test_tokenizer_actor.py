"""The Tokenizer actor: short texts on the caller's thread, long ones in a worker thread (no model)."""

from __future__ import annotations

import threading

import trio

from skippy.actors.tokenizer import INLINE_CHARS, Tokenizer

BOS = 1


class ThreadRecordingVocab:
    """A vocabulary whose token ids are character codes, after a BOS; records the thread of each call."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        self.threads.append(threading.get_ident())
        return ([BOS] if add_special else []) + [ord(c) for c in text]


async def test_short_texts_are_tokenized_inline_and_long_ones_in_a_worker_thread() -> None:
    vocab = ThreadRecordingVocab()
    tok = Tokenizer(vocab, bos_id=BOS)  # type: ignore[arg-type]
    vocab.threads.clear()  # the constructor asked whether the vocabulary adds a BOS
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tok.run)
        short, long = "\x01hi", "x" * (INLINE_CHARS + 1)
        # a template that writes BOS itself plus add_special: one BOS, on both paths
        assert await tok.tokenize(short) == [BOS, ord("h"), ord("i")]
        assert await tok.tokenize("\x01" + long) == [BOS] + [ord("x")] * len(long)
        nursery.cancel_scope.cancel()
    here = threading.get_ident()
    assert vocab.threads[0] == here and vocab.threads[1] != here


class NoBosVocab(ThreadRecordingVocab):
    """A vocabulary whose BOS id is a token it never adds (SmolLM2's ``<|im_start|>``)."""

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return [ord(c) for c in text]


async def test_a_bos_the_vocabulary_does_not_add_is_never_dropped() -> None:
    tok = Tokenizer(NoBosVocab(), bos_id=BOS)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tok.run)
        assert await tok.tokenize("\x01\x01hi") == [BOS, BOS, ord("h"), ord("i")]  # both are the text's
        nursery.cancel_scope.cancel()
