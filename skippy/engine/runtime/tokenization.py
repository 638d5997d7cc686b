"""Tokenization reused across prompts that begin alike (:class:`TokenizationCache`).

llama.cpp tokenizes a text whose special tokens it parses (``parse_special``) in two stages
(``llama_vocab::impl::tokenize``): it first cuts the text at every occurrence of a special token's text
(``tokenizer_st_partition``: control, user-defined and unknown tokens, the longest first, each leftmost
first), then tokenizes each stretch of plain text between two of them on its own, with nothing carried from
one stretch to the next (BPE's pre-tokenizer and merges, SentencePiece's space prefix after a special
token alike). So a text cut right after a special token tokenizes as its two halves do, the first with the
BOS, the second without. A rendered chat prompt holds a turn marker (``<|im_end|>``, ``<end_of_turn>``)
every few hundred characters: the cache cuts it after each, keeps the tokens of its pieces in a trie keyed
by the pieces before them, and tokenizes only the pieces it has not seen. The next request of a
conversation, or another with the same system prompt and tools, pays for its new messages only; llama.cpp
spends ~0.8 us a token on SmolLM2's vocabulary and ~2.2 on Gemma 3's (6414 special tokens, each searched
for through the whole text), 33 and 82 ms for a 38k-token agent prompt.

A special token is a cut point (a *marker*) only where the cut provably changes nothing:

- its text starts and ends with no whitespace and is not empty, and the token does not strip the
  whitespace after it (``rstrip``: the next piece would keep what the whole text loses);
- no special token of at least its length in bytes (those llama.cpp looks for before it, or in an unspecified
  order beside it) can overlap one of its occurrences: not containing it, nor sharing a border with it, nor it
  with itself. Then every occurrence of the marker in any text is a token of llama.cpp's partition, and no
  other token's occurrence crosses the cut, so the partition of the whole is the partitions of the pieces.

Markers are learned from the special tokens found in the tokens of the texts tokenized so far (a template's
turn markers show up in the first prompt). The vocabulary must be BPE or SentencePiece (the types whose
code was read for this) and must not append an EOS when asked for special tokens (each piece would end
with one). The self-check: the first :attr:`TokenizationCache.check_first` texts and then one in
:attr:`TokenizationCache.check_every` are also tokenized whole and compared; a difference turns the cache
off for good (:attr:`TokenizationCache.disabled` says why) and the whole text's tokens are returned.

Thread-safe: the trie is read and written under a lock, the tokenizer runs outside it.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final

import attrs
import numpy as np

if TYPE_CHECKING:
    from skippy.engine.runtime.base import Vocab

#: What C's ``isspace`` calls whitespace (llama.cpp's lstrip and rstrip strip these).
_C_SPACE: Final = " \t\n\v\f\r"


@attrs.frozen
class SpecialTokens:
    """The tokens llama.cpp cuts a text at when it parses special tokens (attribute ``CONTROL``,
    ``USER_DEFINED`` or ``UNKNOWN``): ``texts`` maps each id to its text as the partition looks for it
    (``llama_vocab_get_text``); ``rstrip`` holds the ids whose attributes strip the whitespace after them."""

    texts: Mapping[int, str]
    rstrip: frozenset[int] = frozenset()


def _border(a: str, b: str) -> bool:
    """True when a proper suffix of ``a`` is a proper prefix of ``b`` (an occurrence of ``a`` may end inside
    one of ``b``)."""
    return any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b))))


def marker_problem(token: int, special: SpecialTokens) -> str:
    """``""`` when ``token`` can be a cut point (see the module's rules), else why not."""
    text = special.texts[token]
    if not text or text[0] in _C_SPACE or text[-1] in _C_SPACE:
        return "its text is empty or begins or ends with whitespace"
    if token in special.rstrip:
        return "it strips the whitespace after it"
    if _border(text, text):
        return "its occurrences can overlap each other"
    size = len(text.encode())  # llama.cpp orders the special tokens by their length in bytes
    for other, t in special.texts.items():
        if other == token or len(t.encode()) < size:
            continue
        if text in t or _border(t, text) or _border(text, t):
            return f"the special token {t!r} can overlap it"
    return ""


@attrs.define(eq=False)
class _Node:
    """One piece of a cached text: its text, its tokens, the node of the piece before it."""

    parent: _Node | None
    key: int
    piece: str
    tokens: array[int]
    depth: int
    used: int


@attrs.frozen
class Plan:
    """What :meth:`TokenizationCache.plan` found for a text: the node of its longest cached beginning
    (``None``: nothing cached), the number of characters that node covers, and the pieces after it (the
    text cut after each marker known at ``version``); ``check``: :meth:`TokenizationCache.complete` also
    tokenizes the text whole and compares (the self-check)."""

    text: str
    add_special: bool
    node: _Node | None
    cached_chars: int
    pieces: tuple[str, ...]
    version: int = 0
    check: bool = False

    @property
    def uncached_chars(self) -> int:
        """Characters left to tokenize."""
        return len(self.text) - self.cached_chars


class TokenizationCache:
    """Tokens of text pieces between markers, reused across texts (see the module docstring).

    ``tokenize(text, add_special)`` is llama.cpp's tokenizer with special tokens parsed. ``max_chars``
    bounds the characters held (the pieces' texts; their tokens take about as many bytes again): past it,
    the least recently used pieces go (a piece never before the pieces that follow it).
    """

    def __init__(self, tokenize: Callable[[str, bool], list[int]], special: SpecialTokens, *,
                 max_chars: int = 8 << 20, check_first: int = 4, check_every: int = 64) -> None:
        self._tokenize = tokenize
        self._special = special
        self._is_special = np.zeros(max(special.texts, default=-1) + 1, dtype=np.bool_)
        self._is_special[list(special.texts)] = True
        self.max_chars = max_chars
        self.check_first = check_first
        self.check_every = check_every
        self._lock = threading.Lock()
        self._nodes: dict[int, _Node] = {}
        self._children: dict[int, int] = {}  # node key -> how many nodes have it as parent
        self._chars = 0
        self._clock = 0
        self._texts = 0
        self._markers: dict[int, str] = {}
        self._refused: set[int] = set()
        self._pattern: re.Pattern[str] | None = None
        self._version = 0  # of the markers: one more each time one is learned
        #: why the cache turned itself off (``""`` while it is on)
        self.disabled = ""
        #: characters whose tokens came from the cache, and characters tokenized, over all texts
        self.reused_chars = 0
        self.tokenized_chars = 0

    @property
    def markers(self) -> dict[int, str]:
        """The cut points learned so far: token id -> text."""
        return dict(self._markers)

    @property
    def cached_chars(self) -> int:
        """Characters of the pieces held now."""
        return self._chars

    def stats(self) -> dict[str, object]:
        """``markers`` (the cut points' texts), ``pieces`` and ``cached_chars`` held, ``reused_chars`` and
        ``tokenized_chars`` over all texts, ``disabled`` (why the self-check turned the cache off, else ``""``)."""
        with self._lock:
            return {"markers": sorted(self._markers.values()), "pieces": len(self._nodes),
                    "cached_chars": self._chars, "reused_chars": self.reused_chars,
                    "tokenized_chars": self.tokenized_chars, "disabled": self.disabled}

    # -- the two halves -------------------------------------------------------
    def plan(self, text: str, add_special: bool) -> Plan:
        """Cut ``text`` after each marker and find its longest cached beginning (a few microseconds per
        piece: each piece is hashed once)."""
        with self._lock:
            if self.disabled:
                return Plan(text, add_special, None, 0, (text,))
            self._texts += 1
            check = self._texts <= self.check_first or self._texts % self.check_every == 0
            pieces: list[str] = []
            start = 0
            if self._pattern is not None:
                for m in self._pattern.finditer(text):
                    pieces.append(text[start:m.end()])
                    start = m.end()
            if start < len(text) or not pieces:
                pieces.append(text[start:])
            key: int | bool = add_special
            node: _Node | None = None
            matched = done = 0
            nodes = self._nodes
            self._clock += 1
            for piece in pieces:
                key = hash((key, piece))
                found = nodes.get(key)
                if found is None or found.parent is not node or found.piece != piece:
                    break
                node = found
                node.used = self._clock
                matched += 1
                done += len(piece)
            return Plan(text, add_special, node, done, tuple(pieces[matched:]), self._version, check)

    def complete(self, plan: Plan) -> list[int]:
        """The tokens of ``plan.text``: the cached beginning's and the new pieces', which are cached in turn.
        Also tokenized whole and compared where the self-check says so."""
        tokens: list[int] = []
        if plan.node is not None:
            parts = []
            node: _Node | None = plan.node
            while node is not None:
                parts.append(node.tokens)
                node = node.parent
            for part in reversed(parts):
                tokens.extend(part)
        new: list[array[int]] = []
        for i, piece in enumerate(plan.pieces):
            ids = self._tokenize(piece, plan.add_special and plan.node is None and i == 0)
            new.append(array("i", ids))
            tokens.extend(ids)
        with self._lock:
            self.reused_chars += plan.cached_chars
            self.tokenized_chars += plan.uncached_chars
        if plan.check and not self.disabled:
            whole = self._tokenize(plan.text, plan.add_special)
            if whole != tokens:
                self._disable(plan, whole, tokens)
                return whole
        self._learn(new)
        self._insert(plan, new)
        return tokens

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        """:meth:`plan` then :meth:`complete`."""
        return self.complete(self.plan(text, add_special))

    # -- inside ---------------------------------------------------------------
    def _disable(self, plan: Plan, whole: list[int], got: list[int]) -> None:
        at = next((i for i, (a, b) in enumerate(zip(whole, got, strict=False)) if a != b), min(len(whole), len(got)))
        with self._lock:
            if not self.disabled:
                self.disabled = (f"the pieces' tokens differ from the whole text's at token {at} of {len(whole)} "
                                 f"(cut after {sorted(self._markers.values())}); tokenizing whole texts from now on")
            self._nodes.clear()
            self._children.clear()
            self._chars = 0
            self._pattern = None

    def _learn(self, new: list[array[int]]) -> None:
        """Take the special tokens found in the new pieces' tokens as markers where they qualify."""
        seen: set[int] = set()
        flags = self._is_special
        for ids in new:
            a = np.frombuffer(ids, dtype=np.int32) if ids.itemsize == 4 else np.asarray(ids, dtype=np.int64)
            a = a[a < len(flags)]
            seen.update(np.unique(a[flags[a]]).tolist())
        with self._lock:
            fresh = seen - self._markers.keys() - self._refused
            if not fresh:
                return
            for token in fresh:
                if marker_problem(token, self._special):
                    self._refused.add(token)
                else:
                    self._markers[token] = self._special.texts[token]
            if self._markers and not self.disabled:
                texts = sorted(self._markers.values(), key=len, reverse=True)
                self._pattern = re.compile("|".join(map(re.escape, texts)))
                self._version += 1

    def _insert(self, plan: Plan, new: list[array[int]]) -> None:
        with self._lock:
            if self.disabled:
                return
            parent = plan.node
            if parent is not None and self._nodes.get(parent.key) is not parent:
                return  # evicted meanwhile
            depth = parent.depth if parent is not None else 0
            pairs: Iterable[tuple[str, array[int]]] = zip(plan.pieces, new, strict=True)
            if plan.version != self._version:  # planned before a marker was learned: cut further
                pairs = [cut for i, (piece, ids) in enumerate(pairs)
                         for cut in self._recut(piece, ids, plan.add_special and plan.node is None and i == 0)]
            for piece, ids in pairs:
                key = hash((parent.key if parent is not None else plan.add_special, piece))
                node = self._nodes.get(key)
                if node is None or node.piece != piece or node.parent is not parent:
                    if node is not None:  # a hash collision or an older chain: keep the older
                        return
                    node = _Node(parent, key, piece, ids, depth + 1, self._clock)
                    self._nodes[key] = node
                    self._chars += len(piece)
                    if parent is not None:
                        self._children[parent.key] = self._children.get(parent.key, 0) + 1
                node.used = self._clock
                parent, depth = node, depth + 1
            if self._chars > self.max_chars:
                self._evict()

    def _recut(self, piece: str, ids: array[int], bos: bool) -> list[tuple[str, array[int]]]:
        """``piece`` and its tokens cut after each marker known now: the i-th occurrence of a marker in the text
        is the i-th marker among the tokens (after the BOS that ``add_special`` put first, ``bos``). Uncut where
        the counts differ."""
        assert self._pattern is not None
        ends = [m.end() for m in self._pattern.finditer(piece)]
        marks = [i for i, t in enumerate(ids) if t in self._markers]
        if bos and marks[:1] == [0] and len(marks) == len(ends) + 1:
            marks = marks[1:]
        if not ends or len(marks) != len(ends) or (ends[-1] == len(piece)) != (marks[-1] == len(ids) - 1):
            return [(piece, ids)]
        cuts = []
        start = first = 0
        for end, mark in zip(ends, marks, strict=True):
            cuts.append((piece[start:end], ids[first:mark + 1]))
            start, first = end, mark + 1
        if start < len(piece):
            cuts.append((piece[start:], ids[first:]))
        return cuts

    def _evict(self) -> None:
        """Drop the least recently used leaves until 3/4 of ``max_chars`` is held."""
        order = sorted(self._nodes.values(), key=lambda n: (n.used, -n.depth))
        target = self.max_chars * 3 // 4
        for node in order:  # a parent is used no earlier than its children: it comes after them
            if self._chars <= target:
                break
            if self._children.get(node.key):
                continue
            del self._nodes[node.key]
            self._chars -= len(node.piece)
            if node.parent is not None:
                left = self._children.pop(node.parent.key) - 1
                if left:
                    self._children[node.parent.key] = left


def cache_for(vocab: Vocab, **options: int) -> TokenizationCache | None:
    """A :class:`TokenizationCache` over ``vocab`` (special tokens parsed), or ``None`` where it does not apply
    (:meth:`~skippy.engine.runtime.base.Vocab.special_tokens`). Reads every token's attributes: ~0.1 s for a
    262k-token vocabulary."""
    special = vocab.special_tokens()
    if special is None:
        return None
    return TokenizationCache(lambda text, add_special: vocab.tokenize(text, add_special=add_special,
                                                                      parse_special=True), special, **options)
