"""Decode and logits: one ``llama_decode`` of a validated batch (sizes, sequence ids, positions,
tokens checked first: llama.cpp aborts on misuse), the logit rows of its outputs without a copy, and
the embedding batch (:class:`DecodeMixin`).
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Sequence
from typing import Any

import attrs
import llama_cpp
import numpy as np

from skippy.engine.runtime.base import BatchEntry, ModelMeta, NextTokens

_TOKEN, _POS, _SEQ, _LOGITS = (operator.attrgetter(k) for k in ("token", "pos", "seq_id", "logits"))


@attrs.define
class BatchColumns:
    """numpy views of a ``llama_batch``'s ``token``, ``pos`` and ``logits`` arrays (``n_batch`` entries each, no
    copy), so a decode fills them a column at a time, and the sequence id each index holds now
    (``seq_id[i][0]``: a pointer per token, written only where it changes; llama.cpp reads the batch and never
    writes it). Every ``n_seq_id`` is 1 (each token in one sequence), written once by :meth:`over`."""

    token: np.ndarray
    pos: np.ndarray
    logits: np.ndarray
    seq: list[int]
    _identity: dict[int, dict[int, int]] = attrs.field(factory=dict)

    def identity(self, n: int) -> dict[int, int]:
        """``{i: i for i in range(n)}``, made once per ``n`` (the rows of a batch whose every token has logits;
        read, never changed, by its users)."""
        rows = self._identity.get(n)
        if rows is None:
            rows = self._identity[n] = {i: i for i in range(n)}
        return rows

    @classmethod
    def over(cls, batch: Any, n_batch: int) -> BatchColumns:
        """The columns of ``batch`` (``llama_batch_init(n_batch, 0, 1)``: one sequence id per token)."""
        for i in range(n_batch):
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
        return cls(np.ctypeslib.as_array(batch.token, shape=(n_batch,)),
                   np.ctypeslib.as_array(batch.pos, shape=(n_batch,)),
                   np.ctypeslib.as_array(batch.logits, shape=(n_batch,)), [0] * n_batch)


def _check_range(values: np.ndarray, stop: int, message: str) -> None:
    """``ValueError(message.format(v))`` for the first of ``values`` outside ``0 .. stop - 1``."""
    if values.min() < 0 or values.max() >= stop:
        bad = values[(values < 0) | (values >= stop)]
        raise ValueError(message.format(int(bad[0])))


class DecodeMixin:
    """:class:`~skippy.engine.runtime.llama.LlamaRuntime`'s decode: one validated ``llama_decode`` of
    a batch, the logit rows it output (views of llama.cpp's buffer), and a batch of the embedding
    context."""

    _ctx: Any
    _batch: Any
    _batch_columns: BatchColumns
    _n_batch: int
    _n_vocab: int
    _outputs: list[bool]
    _rows: dict[int, int]
    _views: dict[tuple[int | None, int], np.ndarray]
    _copying: set[int]
    _retired: list[object]
    _embd_ctx: Any
    _embd_mem: Any
    _embd_batch: Any
    meta: ModelMeta

    # -- decode -------------------------------------------------------------
    def decode(self, entries: Sequence[BatchEntry]) -> None:
        """One ``llama_decode`` (see :meth:`Runtime.decode`). Validates before calling: a batch of 0 or more than
        ``n_batch`` entries, a sequence id, position or token out of range is a ``ValueError`` (llama.cpp would
        abort); nothing is decoded then. The batch is written a column at a time (:class:`BatchColumns`); a
        :class:`~skippy.engine.runtime.base.NextTokens` batch gives its columns as they are."""
        n = len(entries)
        if not 0 < n <= self._n_batch:
            raise ValueError(f"batch of {n} tokens (allowed 1..{self._n_batch})")
        out: np.ndarray | None
        if isinstance(entries, NextTokens):  # a multi-step run's: columns already, every token an output
            seq, pos, tok, out = entries.seq_ids, entries.pos, entries.tokens, None
            if pos.shape != (n,) or tok.shape != (n,):
                raise ValueError(f"a batch of {n} sequences with {tok.shape} tokens at {pos.shape} positions")
        else:
            seq = list(map(_SEQ, entries))
            pos = np.fromiter(map(_POS, entries), np.int64, n)
            tok = np.fromiter(map(_TOKEN, entries), np.int64, n)
            out = np.fromiter(map(_LOGITS, entries), np.bool_, n)
        if min(seq) < 0 or max(seq) >= self.meta.n_seq_max:
            raise ValueError(f"sequence id {next(s for s in seq if not 0 <= s < self.meta.n_seq_max)} out of range")
        _check_range(pos, self.meta.n_ctx_seq, "position {} outside the sequence context " + str(self.meta.n_ctx_seq))
        _check_range(tok, self._n_vocab, "token id {} out of range")
        b, cols = self._batch, self._batch_columns
        cols.token[:n] = tok
        cols.pos[:n] = pos
        cols.logits[:n] = True if out is None else out
        held = cols.seq
        if seq != held[:n]:  # a multi-step run's decodes keep the sequences where they were
            for i, s in enumerate(seq):
                if s != held[i]:
                    b.seq_id[i][0] = held[i] = s
        b.n_tokens = n
        rc = llama_cpp.llama_decode(self._ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc}")
        self._copying.clear()  # the KV update at the start of llama_decode applied them
        while self._retired:
            llama_cpp.llama_sampler_free(self._retired.pop())
        if out is None or out.all():  # batch index -> row of llama_get_logits
            self._outputs = [True] * n
            self._rows = cols.identity(n)
        else:
            self._outputs = out.tolist()
            rows = np.flatnonzero(out).tolist()
            self._rows = dict(zip(rows, range(len(rows)), strict=True))

    def _check_output(self, index: int) -> None:
        if not (0 <= index < len(self._outputs) and self._outputs[index]):
            raise IndexError(f"batch index {index} has no logits in the last decode")

    def logits(self, index: int) -> np.ndarray:
        self._check_output(index)
        row: np.ndarray = self._float_view(llama_cpp.llama_get_logits(self._ctx), len(self._rows))[self._rows[index]]
        return row

    def output_logits(self, indices: Sequence[int]) -> np.ndarray:
        """The logit rows of batch ``indices`` of the last decode, shape ``(len(indices), n_vocab)``.

        A view of ``llama_get_logits`` (no copy) when ``indices`` are all the outputs in batch
        order, a copy otherwise; valid until the next decode. Raises ``IndexError`` for an index
        without logits.
        """
        rows = self._rows
        try:
            sel = [rows[i] for i in indices]
        except KeyError as exc:
            raise IndexError(f"batch index {exc.args[0]} has no logits in the last decode") from None
        view = self._float_view(llama_cpp.llama_get_logits(self._ctx), len(rows))
        if len(sel) == len(rows) and sel == list(range(len(rows))):
            return view
        return view[sel]

    def _float_view(self, ptr: ctypes.Array[ctypes.c_float], n_rows: int) -> np.ndarray:
        """A float32 ``(n_rows, n_vocab)`` array over llama.cpp's buffer at ``ptr`` (no copy).

        llama.cpp keeps its logits buffer between decodes (it moves only when the output buffer
        grows), so the views are kept by address: ``np.ctypeslib.as_array`` builds a ctypes array
        type per call, ~70 us, against ~1 us for the lookup.
        """
        key = (ctypes.cast(ptr, ctypes.c_void_p).value, n_rows)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= 64:  # one entry per output count seen at this address
                self._views.clear()
            view = self._views[key] = np.ctypeslib.as_array(ptr, shape=(n_rows, self._n_vocab))
        return view

    # -- embeddings ---------------------------------------------------------
    def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """One batch on the embedding context (see :meth:`Runtime.embed`): every input is its own sequence,
        every token an output (llama.cpp pools all of a sequence's outputs, and warns and overrides when a
        token is not one); the KV cache is cleared first (``llama_memory_clear``), so inputs never see each
        other or an earlier batch. Returns a new array, shape ``(len(inputs), n_out)`` (``EmbeddingInfo.n_out``:
        ``n_embd``, or with rank pooling the classifier's outputs); with pooling ``none``, ``(n_tokens, n_out)``,
        every token's row in batch order."""
        info = self.meta.embeddings
        if self._embd_ctx is None or info is None or not info.usable:
            raise ValueError(info.error if info is not None and info.error else "embeddings are off")
        n = sum(len(t) for t in inputs)
        if not 0 < len(inputs) <= info.n_seq_max:
            raise ValueError(f"{len(inputs)} inputs in one embedding batch (allowed 1..{info.n_seq_max})")
        if not 0 < n <= info.n_ctx or any(not t for t in inputs):
            raise ValueError(f"embedding batch of {n} tokens (allowed 1..{info.n_ctx}, no empty input)")
        b = self._embd_batch
        k = 0
        for seq, tokens in enumerate(inputs):
            for pos, token in enumerate(tokens):
                if not 0 <= token < self._n_vocab:
                    raise ValueError(f"token id {token} out of range")
                b.token[k] = token
                b.pos[k] = pos
                b.n_seq_id[k] = 1
                b.seq_id[k][0] = seq
                b.logits[k] = True
                k += 1
        b.n_tokens = k
        llama_cpp.llama_memory_clear(self._embd_mem, True)
        rc = llama_cpp.llama_decode(self._embd_ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode of the embedding batch failed with code {rc}")
        width = info.n_out or self.meta.n_embd  # rank pooling: the classifier's outputs, the score first
        if info.per_token:  # every token is an output, in batch order
            ptr = llama_cpp.llama_get_embeddings(self._embd_ctx)
            if not ptr:
                raise RuntimeError("llama.cpp has no per-token embeddings for the batch")
            return np.ctypeslib.as_array(ptr, shape=(k, width)).copy()
        out = np.empty((len(inputs), width), dtype=np.float32)
        for seq in range(len(inputs)):
            ptr = llama_cpp.llama_get_embeddings_seq(self._embd_ctx, seq)
            if not ptr:
                raise RuntimeError(f"llama.cpp has no pooled embedding for sequence {seq}")
            out[seq] = np.ctypeslib.as_array(ptr, shape=(width,))
        return out
