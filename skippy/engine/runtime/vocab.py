"""The vocabulary of a loaded model (:class:`LlamaVocab`: tokenize, detokenize, pieces, GBNF grammar
samplers, the llguidance tokenizer) and llguidance's parser limits (:func:`LLG_LIMITS`).
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import llama_cpp

from skippy.engine.runtime.tokenization import SpecialTokens
from skippy.engine.sampling.grammar import MAX_GBNF_DEPTH, gbnf_depth

if TYPE_CHECKING:
    from llguidance import LLParserLimits, LLTokenizer


#: The token attributes llama.cpp cuts a text at when it parses special tokens (``cache_special_tokens``).
_SPLIT: Final = (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
                 | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN)


class LlamaVocab:
    """Thread-safe, read-only vocabulary of a loaded model (see :class:`Vocab`)."""

    def __init__(self, vocab: llama_cpp.llama_vocab_p, n_vocab: int) -> None:
        self._vocab = vocab
        self.n_vocab = n_vocab
        self._pieces = [self._piece(t, special=False) for t in range(n_vocab)]
        self._special: dict[int, bytes] = {}  # special_piece's, as they are asked for (logprobs show them)
        self._llg: LLTokenizer | None = None
        self._llg_lock = threading.Lock()

    def _piece(self, token: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        arr = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), arr, cap, add_special, parse_special)
        return list(arr[:n])

    def special_tokens(self) -> SpecialTokens | None:
        """The tokens llama.cpp cuts a text at (see :class:`~skippy.engine.runtime.tokenization.SpecialTokens`),
        or ``None`` where :class:`~skippy.engine.runtime.tokenization.TokenizationCache` does not apply: a
        vocabulary other than BPE or SentencePiece, or one that appends an EOS to a tokenized text."""
        kind = llama_cpp.llama_vocab_type(self._vocab)
        if kind not in (llama_cpp.LLAMA_VOCAB_TYPE_BPE, llama_cpp.LLAMA_VOCAB_TYPE_SPM) \
                or llama_cpp.llama_vocab_get_add_eos(self._vocab):
            return None
        texts: dict[int, str] = {}
        rstrip = set()
        for t in range(self.n_vocab):
            attr = llama_cpp.llama_vocab_get_attr(self._vocab, t)
            if attr & _SPLIT:
                texts[t] = (llama_cpp.llama_vocab_get_text(self._vocab, t) or b"").decode("utf-8", errors="replace")
                if attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP:
                    rstrip.add(t)
        return SpecialTokens(texts, frozenset(rstrip))

    def detokenize(self, tokens: Sequence[int]) -> str:
        for t in tokens:
            if not 0 <= t < self.n_vocab:
                raise ValueError(f"token id {t} is out of range (0..{self.n_vocab - 1})")
        arr = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        cap = 16 * len(tokens) + 16
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(self._vocab, arr, len(tokens), buf, cap, False, True)
        if n < 0:
            cap = -n
            buf = ctypes.create_string_buffer(cap)
            n = llama_cpp.llama_detokenize(self._vocab, arr, len(tokens), buf, cap, False, True)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def piece(self, token: int) -> bytes:
        return self._pieces[token]

    def grammar_sampler(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> object:
        """A llama.cpp grammar sampler (root rule ``root``), or a null pointer when the GBNF does not parse.

        With ``lazy_patterns`` the grammar applies only from the first regex
        match on (``llama_sampler_init_grammar_lazy_patterns``). A grammar nested deeper than
        :data:`~skippy.engine.sampling.grammar.MAX_GBNF_DEPTH` is not handed to llama.cpp, whose parser would
        overflow the stack (null).
        """
        if gbnf_depth(gbnf) > MAX_GBNF_DEPTH:
            return None
        if not lazy_patterns:
            return llama_cpp.llama_sampler_init_grammar(self._vocab, gbnf.encode(), b"root")
        pats = (ctypes.c_char_p * len(lazy_patterns))(*[p.encode() for p in lazy_patterns])
        return llama_cpp.llama_sampler_init_grammar_lazy_patterns(
            self._vocab, gbnf.encode(), b"root", pats, len(lazy_patterns), None, 0)

    def check_grammar(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> bool:
        """True when llama.cpp parses ``gbnf`` (and its lazy trigger patterns)."""
        g = self.grammar_sampler(gbnf, lazy_patterns)
        if not g:
            return False
        llama_cpp.llama_sampler_free(g)
        return True

    def lltokenizer(self) -> LLTokenizer:
        """llguidance's tokenizer of this vocabulary (built once, about 0.3 s; thread-safe).

        Its end-of-sequence tokens are all end-of-generation tokens, so a
        finished constraint allows exactly those.
        """
        with self._llg_lock:
            if self._llg is None:
                from llguidance.llamacpp import lltokenizer_from_vocab

                eog = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t)]
                with warnings.catch_warnings():  # it reads token attributes with a deprecated binding, per token
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self._llg = lltokenizer_from_vocab(self._vocab, n_vocab=self.n_vocab,
                                                       eos_token=eog or llama_cpp.llama_vocab_eos(self._vocab))
            return self._llg

    def check_constraint(self, grammar: str) -> str:
        """``""`` when llguidance compiles ``grammar`` for this vocabulary, else its error message."""
        from llguidance import LLMatcher

        is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, self.lltokenizer(),
                                                                       limits=LLG_LIMITS())
        return messages[0] if is_error and messages else ""

    def special_piece(self, token: int) -> bytes:
        data = self._special.get(token)
        if data is None:  # a race computes it twice, the same bytes
            data = self._special[token] = self._piece(token, special=True)
        return data


def LLG_LIMITS() -> LLParserLimits:  # noqa: N802 - a constant built on first use (llguidance loads lazily)
    """llguidance parser limits: its defaults, with grammar internals kept out of error messages."""
    from llguidance import LLParserLimits

    return LLParserLimits(verbose_errors=False)
