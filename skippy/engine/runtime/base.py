"""What the decode scheduler needs from a model runtime.

A runtime owns one model and one inference context. Only the decode
scheduler calls :meth:`Runtime.decode` and the sampler/KV methods (from
one worker thread at a time); :class:`Vocab` is read-only and thread-safe,
so the tokenizer actor may use it from any thread concurrently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs
import numpy as np

from skippy.engine.sampling.params import SamplingParams


@attrs.frozen
class ModelMeta:
    """Model metadata read once at load.

    ``n_ctx_seq`` is the context of one sequence (tokens), ``n_seq_max`` the
    number of sequence slots, ``n_batch`` the most tokens one decode call
    takes. Token ids are ``int``; ``eog_ids`` are all end-of-generation ids.
    """

    name: str
    path: str
    chat_template: str | None
    bos_id: int
    eos_id: int
    eog_ids: frozenset[int]
    bos_token: str
    eos_token: str
    n_vocab: int
    n_ctx_train: int
    n_ctx_seq: int
    n_seq_max: int
    n_batch: int
    is_recurrent: bool


class Vocab(Protocol):
    """Read-only, thread-safe vocabulary access."""

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Text -> token ids (llama.cpp ``llama_tokenize``)."""
        ...

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids -> text, special tokens rendered (llama.cpp ``llama_detokenize``)."""
        ...

    def piece(self, token: int) -> bytes:
        """The bytes of one token as generated output (control tokens render as b"")."""
        ...

    def check_grammar(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> bool:
        """True when the runtime's grammar sampler accepts ``gbnf`` (root rule ``root``)."""
        ...


@attrs.frozen
class BatchEntry:
    """One token of a decode batch: ``pos`` in sequence ``seq_id``; ``logits`` requested or not."""

    token: int
    pos: int
    seq_id: int
    logits: bool


class Runtime(Protocol):
    meta: ModelMeta
    vocab: Vocab

    def decode(self, entries: Sequence[BatchEntry]) -> None:
        """One ``llama_decode`` over ``entries``; raises ``RuntimeError`` on failure."""
        ...

    def logits(self, index: int) -> np.ndarray:
        """Raw logits (float32, shape ``(n_vocab,)``) at batch index ``index`` of the last decode."""
        ...

    def new_sampler(self, params: SamplingParams) -> object:
        """Build a per-sequence sampler; raises ``ValueError`` for a grammar llama.cpp rejects."""
        ...

    def sample(self, sampler: object, index: int) -> int:
        """Sample (and accept) a token from the logits at batch index ``index`` of the last decode."""
        ...

    def free_sampler(self, sampler: object) -> None: ...

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions ``[p0, p1)`` of ``seq_id`` from the KV cache (-1: open end).

        Returns False when a partial removal is impossible (recurrent models).
        """
        ...

    def seq_cp(self, src: int, dst: int) -> None:
        """Copy the whole sequence ``src`` to ``dst`` in the KV cache."""
        ...

    def state_seq_save(self, path: str, seq_id: int, tokens: Sequence[int]) -> int:
        """Write ``seq_id``'s KV state and ``tokens`` to ``path``; returns the bytes written (llama.cpp
        ``llama_state_seq_save_file``). Optional: only llama-server's slot save needs it."""
        ...

    def state_seq_load(self, path: str, seq_id: int) -> tuple[int, list[int]]:
        """Load a state file into ``seq_id``; returns ``(bytes read, tokens)``, ``(0, [])`` on failure
        (llama.cpp ``llama_state_seq_load_file``). Optional: only llama-server's slot restore needs it."""
        ...

    def close(self) -> None: ...
