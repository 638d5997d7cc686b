"""The tokenization cache against llama.cpp's own tokenizer as the oracle (SmolLM2's BPE vocabulary and
Gemma 3's SentencePiece one, loaded vocabulary-only), its marker rules, eviction and self-check."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator

import pytest
import trio

from skippy.actors.tokenizer import INLINE_CHARS, Tokenizer
from skippy.engine.runtime.tokenization import SpecialTokens, TokenizationCache, cache_for, marker_problem
from tests.support import VocabOnly, gemma_path

SMOLLM = os.path.expanduser("~/.cache/skippy/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def _vocab(path: str | None) -> Iterator[VocabOnly]:
    if path is None or not os.path.exists(path):
        pytest.skip("model not downloaded (make pull)")
    with VocabOnly(path) as v:
        yield v


@pytest.fixture(scope="module")
def smollm() -> Iterator[VocabOnly]:
    yield from _vocab(SMOLLM)


@pytest.fixture(scope="module")
def gemma() -> Iterator[VocabOnly]:
    path = gemma_path()
    yield from _vocab(str(path) if path else None)


# turn markers as the models' templates write them, and content meant to trip a cut: the markers themselves
# inside messages, halves of them, whitespace on both sides, other special tokens, text that is not ASCII
FORMATS = {
    "chatml": ("", "<|im_start|>{role}\n{text}<|im_end|>\n", "<|im_start|>assistant\n"),
    "gemma": ("<bos>", "<start_of_turn>{role}\n{text}<end_of_turn>\n", "<start_of_turn>model\n"),
}
FRAGMENTS = ["Hello there.", " leading space", "trailing space ", "\n\n", "   ", "\t", "x", "naïve café — 東京 🚀",
             "<|im_end|>", "<|im_start|>", "<|im_", "im_end|>", "<end_of_turn>", "<start_of_turn>", "<start_of",
             "<|endoftext|>", "<bos>", "<eos>", "<pad>", "<unused3>", " <|im_end|> ", "\n<end_of_turn>\n",
             '{"name": "get_weather", "arguments": {"city": "Paris"}}', "def f(x):\n    return x  # ok\n",
             "a" * 300, "word " * 80, "<|im_end|><|im_start|>", "<end_of_turn><start_of_turn>"]


def _message(rnd: random.Random) -> str:
    return "".join(rnd.choice(FRAGMENTS) for _ in range(rnd.randint(0, 8)))


def _render(fmt: str, messages: list[tuple[str, str]], generation: bool = True) -> str:
    head, turn, gen = FORMATS[fmt]
    return head + "".join(turn.format(role=r, text=t) for r, t in messages) + (gen if generation else "")


def _whole(v: VocabOnly, text: str, add_special: bool) -> list[int]:
    return v.vocab.tokenize(text, add_special=add_special, parse_special=True)


def _conversations(fmt: str, seed: int) -> Iterator[tuple[str, bool]]:
    """Texts as a server sees them: conversations that grow a turn at a time, beside new ones that share the
    system prompt, a history without its generation prompt, edits of an earlier message, repeats."""
    rnd = random.Random(seed)
    system = ("system", "You are a careful assistant. " * 20 + _message(rnd))
    chats: list[list[tuple[str, str]]] = []
    for _ in range(60):
        r = rnd.random()
        if not chats or r < 0.2:
            chats.append([system] if rnd.random() < 0.8 else [])
        chat = rnd.choice(chats)
        if r < 0.1 and len(chat) > 2:
            chat[rnd.randrange(1, len(chat))] = ("user", _message(rnd))  # an earlier message edited
        chat.append(("user", _message(rnd)))
        add_special = rnd.random() < 0.8
        yield _render(fmt, chat), add_special
        yield _render(fmt, chat, generation=False), add_special  # the checkpoint boundary's history
        if rnd.random() < 0.2:
            yield _render(fmt, chat), add_special  # the same prompt again
        chat.append(("assistant", _message(rnd)))


@pytest.mark.parametrize("max_chars", [8 << 20, 3000])
@pytest.mark.parametrize("model", ["smollm", "gemma"])
def test_the_cache_gives_llama_cpp_s_tokens_for_every_text(model: str, max_chars: int,
                                                           request: pytest.FixtureRequest) -> None:
    v: VocabOnly = request.getfixturevalue(model)
    cache = cache_for(v.vocab, max_chars=max_chars, check_first=0, check_every=1 << 30)
    assert cache is not None
    fmt = "chatml" if model == "smollm" else "gemma"
    texts = 0
    for text, add_special in _conversations(fmt, seed=7 if max_chars > 3000 else 8):
        assert cache.tokenize(text, add_special) == _whole(v, text, add_special), text
        assert cache.cached_chars <= max_chars
        texts += 1
    stats = cache.stats()
    assert not stats["disabled"]
    markers = {"chatml": {"<|im_start|>", "<|im_end|>"}, "gemma": {"<start_of_turn>", "<end_of_turn>"}}[fmt]
    assert markers <= set(stats["markers"])  # type: ignore[arg-type]
    assert stats["reused_chars"] > stats["tokenized_chars"]  # type: ignore[operator]
    if max_chars == 3000:
        assert stats["cached_chars"] <= 3000  # type: ignore[operator]


def test_a_conversation_tokenizes_only_its_new_pieces(smollm: VocabOnly) -> None:
    calls: list[str] = []

    def tokenize(text: str, add_special: bool) -> list[int]:
        calls.append(text)
        return _whole(smollm, text, add_special)

    special = smollm.vocab.special_tokens()
    assert special is not None
    cache = TokenizationCache(tokenize, special, check_first=0, check_every=1 << 30)
    warm = _render("chatml", [("user", "Hi!")])
    assert cache.tokenize(warm, True) == _whole(smollm, warm, True)
    assert calls == [warm]  # no marker is known before the first text: it is tokenized whole
    assert set(cache.markers.values()) == {"<|im_start|>", "<|im_end|>"}
    assert cache.plan(warm, True).uncached_chars == 0  # its tokens cut after each marker (the counts agree)
    chat = [("system", "You are terse. " * 200), ("user", "Hi!")]
    first = _render("chatml", chat)
    calls.clear()
    assert cache.tokenize(first, True) == _whole(smollm, first, True)
    assert calls == ["system\n" + chat[0][1] + "<|im_end|>", "\n<|im_start|>", "user\nHi!<|im_end|>",
                     "\n<|im_start|>", "assistant\n"]  # "<|im_start|>": the warm-up's first piece
    calls.clear()
    chat += [("assistant", "Hello."), ("user", "What is 2 + 2?")]
    second = _render("chatml", chat)
    plan = cache.plan(second, True)
    assert plan.cached_chars == len(first) - len("assistant\n")  # up to the generation prompt's <|im_start|>
    assert cache.complete(plan) == _whole(smollm, second, True)
    assert "".join(calls) == second[plan.cached_chars:] and all(len(c) < 40 for c in calls)
    calls.clear()
    other = _render("chatml", [chat[0], ("user", "A new conversation.")])  # the same system prompt
    assert cache.tokenize(other, True) == _whole(smollm, other, True)
    assert "You are terse" not in "".join(calls)
    assert cache.plan(other, True).uncached_chars == 0 and cache.plan(other, False).cached_chars == 0


def test_gemma_s_sentencepiece_vocabulary_and_its_bos(gemma: VocabOnly) -> None:
    cache = cache_for(gemma.vocab, check_first=0, check_every=1 << 30)
    assert cache is not None
    chat = [("user", " spaced  out " * 40)]
    for add_special in (True, False, True):
        for _ in range(3):
            text = _render("gemma", chat)
            assert cache.tokenize(text, add_special) == _whole(gemma, text, add_special)
            chat += [("model", "  ok  "), ("user", "\n more \n")]


def test_markers_are_tokens_whose_every_occurrence_is_a_cut() -> None:
    special = SpecialTokens({1: "<|end|>", 2: " <sp>", 3: "<nl>\n", 4: "<rs>", 5: "<x><x", 6: "<tag>", 7: "<tag>s",
                             8: "<a|", 10: "a|b>", 11: "<e>", 12: "e>>", 13: ""}, rstrip=frozenset({4}))
    assert marker_problem(1, special) == ""
    assert "whitespace" in marker_problem(2, special)
    assert "whitespace" in marker_problem(3, special)
    assert "empty" in marker_problem(13, special)
    assert "strips" in marker_problem(4, special)
    assert "each other" in marker_problem(5, special)  # "<x><x<x><x": where would the second one begin?
    assert "'<tag>s'" in marker_problem(6, special)  # a longer token holds it: llama.cpp looks for that first
    assert marker_problem(7, special) == ""  # a shorter one inside it never takes its characters
    assert "'a|b>'" in marker_problem(8, special)  # "<a|b>": the longer "a|b>" is found first, over its end
    assert marker_problem(10, special) == ""  # "<a|" is shorter: looked for after "a|b>" was cut out
    assert "'e>>'" in marker_problem(11, special)  # "<e>>": an equal length, in no order llama.cpp promises
    # lengths in bytes, as llama.cpp sorts them: "céé" (3 characters, 5 bytes) is looked for before "<abc"
    # (4 and 4), and takes the "c" of "<abcéé"
    accents = SpecialTokens({20: "<abc", 21: "céé"})
    assert "'céé'" in marker_problem(20, accents) and marker_problem(21, accents) == ""


def test_a_marker_that_strips_whitespace_is_never_a_cut() -> None:
    # a toy tokenizer with llama.cpp's rule: text between special tokens alone, whitespace after "<r>" dropped
    special = SpecialTokens({100: "<r>", 101: "<k>"}, rstrip=frozenset({100}))

    def tokenize(text: str, add_special: bool) -> list[int]:
        out, rest = ([1] if add_special else []), text
        while rest:
            at = min((i for i in (rest.find("<r>"), rest.find("<k>")) if i >= 0), default=-1)
            if at < 0:
                return out + [ord(c) for c in rest]
            out += [ord(c) for c in rest[:at]] + [100 if rest.startswith("<r>", at) else 101]
            rest = rest[at + 3:].lstrip() if rest.startswith("<r>", at) else rest[at + 3:]
        return out

    cache = TokenizationCache(tokenize, special, check_first=0, check_every=1 << 30)
    for text in ("a<r> b<k> c", "a<r> b<k> c<r>  d", "a<r> b<k> e<r>  d<k>"):
        assert cache.tokenize(text, True) == tokenize(text, True)
    assert cache.markers == {101: "<k>"}


def test_the_self_check_turns_the_cache_off_where_pieces_differ_from_the_whole() -> None:
    # a tokenizer whose last token counts the text's characters: no text is the sum of its pieces
    special = SpecialTokens({7: "<k>"})

    def tokenize(text: str, add_special: bool) -> list[int]:
        return [7 if text.startswith("<k>", i) else ord(c) for i, c in enumerate(text)] + [1000 + len(text)]

    cache = TokenizationCache(tokenize, special, check_first=2, check_every=5)
    texts = [f"<k>{i} apples<k>" * 3 for i in range(12)]
    plans = [cache.plan(t, True) for t in texts[:3]]
    assert [p.check for p in plans] == [True, True, False]
    assert cache.complete(plans[0]) == tokenize(texts[0], True)  # one piece: no marker known yet
    assert cache.markers == {7: "<k>"} and not cache.disabled
    assert cache.complete(plans[1]) == tokenize(texts[1], True)  # planned before the marker was known
    got = [cache.tokenize(t, True) for t in texts[3:]]  # the cut ones: wrong until the check on the 5th
    assert got[1] == tokenize(texts[4], True)
    assert "differ" in cache.disabled and cache.cached_chars == 0
    assert all(g == tokenize(t, True) for g, t in zip(got[1:], texts[4:], strict=True))
    assert cache.plan(texts[0], True).pieces == (texts[0],)


def test_no_cache_for_a_vocabulary_that_appends_an_eos() -> None:
    class EosVocab:
        def special_tokens(self) -> None:
            return None

    assert cache_for(EosVocab()) is None  # type: ignore[arg-type]


async def test_the_tokenizer_actor_tokenizes_a_cached_prompt_s_new_pieces_inline(smollm: VocabOnly) -> None:
    cache = cache_for(smollm.vocab, check_first=1)
    assert cache is not None
    threads: list[int] = []
    complete = cache.complete

    def recording(plan):  # type: ignore[no-untyped-def]
        threads.append(threading.get_ident())
        return complete(plan)

    cache.complete = recording  # type: ignore[method-assign]
    tok = Tokenizer(smollm.vocab, bos_id=-1, cache=cache)
    chat = [("system", "Be brief. " * (INLINE_CHARS // 5)), ("user", "Hi")]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tok.run)
        for _ in range(3):
            text = _render("chatml", chat)
            assert await tok.tokenize(text) == _whole(smollm, text, True)
            chat += [("assistant", "Hello!"), ("user", "And then?")]
        nursery.cancel_scope.cancel()
    here = threading.get_ident()
    # the first (checked, and all new) in a worker thread; the next two have a few new characters: inline
    assert threads[0] != here and threads[1:] == [here, here]
    # the text between two images of a prompt (the media thread's pieces) goes through the cache too
    before = cache.reused_chars
    assert tok._cached(text + "<|im_end|>\n", True) == _whole(smollm, text + "<|im_end|>\n", True)
    assert cache.reused_chars - before == len(text) - len("assistant\n")
