"""KV cache and sequence state: what the KV cache of a context takes in memory (:func:`kv_cache_size`),
and the runtime's sequence operations (:class:`KVStateMixin`): ``seq_rm`` / ``seq_cp`` (through the
source's state when that moves fewer bytes, :data:`STATE_COPY_FRACTION`), positions, states saved and
restored in memory (context checkpoints) and in files (slot save / restore).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp

from skippy.engine.runtime.base import ModelMeta
from skippy.engine.runtime.params import CACHE_TYPES, _ggml_base

#: A sequence copy between KV streams (:meth:`LlamaRuntime.seq_cp`) goes through the source's state
#: (its own cells, copied twice) while the source holds at most this fraction of its stream's cells,
#: and through llama.cpp's whole-stream copy otherwise (measured in bench/bench_kv_copy.py).
STATE_COPY_FRACTION = 0.4


def _meta_str(model: llama_cpp.llama_model_p, key: str) -> str | None:
    """A GGUF metadata value of the model as llama.cpp writes it out (``llama_model_meta_val_str``: a
    boolean is ``true`` / ``false``; at most 127 bytes), else ``None``."""
    buf = ctypes.create_string_buffer(128)
    if llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, 128) < 0:
        return None
    return buf.value.decode("utf-8", errors="replace")


def _meta_int(model: llama_cpp.llama_model_p, key: str) -> int | None:
    """An integer GGUF metadata value of the model (``llama_model_meta_val_str``), else ``None``."""
    value = _meta_str(model, key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def generates(model: llama_cpp.llama_model_p) -> bool:
    """Whether the model can generate text: it has a decoder and causal attention. An encoder (BERT and
    its kin: ``<arch>.attention.causal`` false; T5's encoder alone) embeds and ranks but has no next token:
    llama.cpp computes logits for it all the same, from attention over the whole input, and sampling them
    gives noise."""
    arch = _meta_str(model, "general.architecture") or ""
    return bool(llama_cpp.llama_model_has_decoder(model)) and _meta_str(model, f"{arch}.attention.causal") != "false"


def kv_cache_size(model: llama_cpp.llama_model_p, type_k: str, type_v: str, n_cells: int,
                  caches: Sequence[tuple[int, int]] = ()) -> tuple[int, int]:
    """Bytes of the K and V cache of ``n_cells`` cells, as llama.cpp allocates them.

    llama-cpp-python exposes no size of the KV buffers (``llama_get_memory_breakdown``
    is C++ only; ``llama_state_get_size`` is the size of a saved state), so this computes
    what ``llama_kv_cache`` allocates: per layer one K tensor of ``n_embd_k_gqa x n_cells``
    and one V tensor of ``n_embd_v_gqa x n_cells``, a row of each taking
    ``ggml_row_size(type, n_embd_*_gqa)`` bytes (quantized types in blocks: q8_0 is 34 bytes
    per 32 values, f16 64). ``n_embd_k_gqa = n_embd_head_k x n_head_kv``, with
    ``n_embd_head_k`` from the GGUF's ``<arch>.attention.key_length`` (default
    ``n_embd / n_head``), likewise V with ``value_length``. Assumes every layer has
    attention with layer 0's ``n_head_kv``. ``caches``: ``(cells, layers)`` of each KV cache
    llama.cpp made (:func:`_kv_caches`), for models whose layers do not all hold ``n_cells``
    (sliding-window layers hold only their window); empty: every layer holds ``n_cells``.
    Recurrent state is not counted. Checked against llama.cpp's own start-up line
    ``llama_kv_cache: size = ...`` by an integration test, on SmolLM2 and Gemma 3.
    """
    lib = _ggml_base()
    arch = _meta_str(model, "general.architecture") or ""
    n_layer = llama_cpp.llama_model_n_layer(model)
    n_head = max(1, llama_cpp.llama_model_n_head(model))
    n_head_kv = llama_cpp.llama_model_n_head_kv(model)
    n_embd = llama_cpp.llama_model_n_embd(model)
    head_k = _meta_int(model, f"{arch}.attention.key_length") or n_embd // n_head
    head_v = _meta_int(model, f"{arch}.attention.value_length") or n_embd // n_head
    row_k = lib.ggml_row_size(CACHE_TYPES[type_k], head_k * n_head_kv)
    row_v = lib.ggml_row_size(CACHE_TYPES[type_v], head_v * n_head_kv)
    cell_layers = sum(c * n for c, n in caches) if caches else n_layer * n_cells
    return row_k * cell_layers, row_v * cell_layers


class KVStateMixin:
    """:class:`~skippy.engine.runtime.llama.LlamaRuntime`'s KV cache and sequence state: removing and
    copying a sequence's cells, its positions, its state as bytes (context checkpoints) and as a file
    (llama-server's slot save / restore)."""

    _ctx: Any
    _mem: Any
    _copying: set[int]
    _copy_buf: bytearray
    meta: ModelMeta

    # -- KV cache -----------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """``llama_memory_seq_rm``; False when a partial removal is impossible (recurrent models)."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        return bool(llama_cpp.llama_memory_seq_rm(self._mem, seq_id, p0, p1))

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        """``llama_memory_seq_add``: move positions ``[p0, p1)`` of ``seq_id`` by ``delta`` (``ValueError``
        for a sequence id out of range or a model whose KV cannot shift)."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        if not self.meta.can_shift:
            raise ValueError("this model's KV cache cannot shift positions")
        llama_cpp.llama_memory_seq_add(self._mem, seq_id, p0, p1, delta)

    def seq_cp(self, src: int, dst: int, n: int | None = None) -> None:
        """Copy sequence ``src`` to ``dst``: positions ``[0, n)``, or all (``n=None``)
        (``llama_memory_seq_cp``; ``dst`` must be empty).

        A prefix copy (``n``) only with a unified KV cache, where it marks the source's
        cells as also belonging to ``dst`` (no data moves, nearly free). With one stream
        per sequence llama.cpp copies whole streams only and aborts on a partial copy, so
        ``n`` raises ``ValueError`` there: copy all, then trim the tail with :meth:`seq_rm`.

        Between streams llama.cpp's copy moves the whole stream (``n_ctx_seq`` cells, 47 MB for
        SmolLM2-135M at 2048 cells, GiBs for an 8B model) inside the next ``llama_decode``, however
        few cells ``src`` uses; so, with the KV cache in host memory (no layer offloaded), a source
        using at most :data:`STATE_COPY_FRACTION` of its stream is copied through its state instead
        (:meth:`_state_copy`: its own cells only, now).
        """
        for s in (src, dst):
            if not 0 <= s < self.meta.n_seq_max:
                raise ValueError(f"sequence id {s} out of range")
        if src == dst:
            raise ValueError("source and destination sequence are the same")
        if n is None:
            if self.meta.kv_unified:
                llama_cpp.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
            elif not self._state_copy(src, dst):
                llama_cpp.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
                self._copying.add(dst)
            return
        if not self.meta.kv_unified:
            raise ValueError("a prefix copy needs a unified KV cache (llama.cpp aborts on a partial copy "
                             "between streams)")
        if not 0 < n <= self.meta.n_ctx_seq:
            raise ValueError(f"prefix of {n} tokens outside the sequence context {self.meta.n_ctx_seq}")
        llama_cpp.llama_memory_seq_cp(self._mem, src, dst, 0, n)

    def _state_copy(self, src: int, dst: int) -> bool:
        """Copy ``src``'s cells into ``dst`` through a reused host buffer (``llama_state_seq_get_data_ext``
        then ``..._set_data_ext``); False, copying nothing, when llama.cpp's whole-stream copy is the
        better one (``src`` uses more than :data:`STATE_COPY_FRACTION` of its stream, or layers are
        offloaded: their KV is on the device, where the stream copy stays and the state would not),
        when either sequence still waits for such a copy (its cells' data arrive only at the next
        ``llama_decode``) or when llama.cpp refuses the state."""
        if not self.meta.kv_on_host or src in self._copying or dst in self._copying:
            return False
        n_pos = llama_cpp.llama_memory_seq_pos_max(self._mem, src) + 1
        if n_pos > STATE_COPY_FRACTION * self.meta.n_ctx_seq:
            return False
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, src, 0)
        if len(self._copy_buf) < size:  # grown, never shrunk: its pages stay faulted in
            self._copy_buf = bytearray(max(size, 2 * len(self._copy_buf)))
        buf = (ctypes.c_uint8 * len(self._copy_buf)).from_buffer(self._copy_buf)
        n = llama_cpp.llama_state_seq_get_data_ext(self._ctx, buf, size, src, 0)
        self.seq_rm(dst)
        if n == 0 or llama_cpp.llama_state_seq_set_data_ext(self._ctx, buf, n, dst, 0) == 0:
            self.seq_rm(dst)
            return False
        return True

    def seq_pos_min(self, seq_id: int) -> int:
        """Smallest position held for ``seq_id`` in the KV cache, -1 when empty (``llama_memory_seq_pos_min``).

        With a sliding-window (iSWA) cache this is the SWA layers' smallest position: llama.cpp
        keeps every position from it to the largest one, and overwrites older ones once they are
        out of every query's window (unless ``swa_full``).
        """
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        pos: int = llama_cpp.llama_memory_seq_pos_min(self._mem, seq_id)
        return pos

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position held for ``seq_id`` in the KV cache, -1 when empty."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        pos: int = llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id)
        return pos

    # -- sequence state in memory (context checkpoints) ----------------------
    def state_seq_get_data(self, seq_id: int) -> bytearray:
        """Sequence ``seq_id``'s whole state (KV cells, recurrent state) as bytes (llama.cpp
        ``llama_state_seq_get_data_ext`` with no flags, as ``llama_state_seq_save_file`` writes it).

        llama.cpp writes straight into the returned ``bytearray``: one allocation, no second copy
        (fresh pages cost more than the copy itself here: 11 ms to fault in a 905-token state of
        SmolLM2, 21 MB, against 1.5 ms to copy it). Raises ``ValueError`` for a bad sequence id,
        ``RuntimeError`` when llama.cpp copies nothing or a whole-stream copy into ``seq_id`` waits for
        the next ``llama_decode``.
        """
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        if seq_id in self._copying:
            raise RuntimeError(f"sequence {seq_id} waits for a whole-stream copy: its cells hold no data yet")
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, seq_id, 0)
        data = bytearray(max(1, size))
        n = llama_cpp.llama_state_seq_get_data_ext(self._ctx, (ctypes.c_uint8 * len(data)).from_buffer(data),
                                                   size, seq_id, 0)
        if n == 0:
            raise RuntimeError(f"llama.cpp copied no state of sequence {seq_id}")
        if n < len(data):
            del data[n:]
        return data

    def state_seq_set_data(self, seq_id: int, data: bytes | bytearray) -> bool:
        """Put a state from :meth:`state_seq_get_data` into sequence ``seq_id`` (cleared first;
        llama.cpp ``llama_state_seq_set_data_ext``; a ``bytearray`` is passed without a copy).
        Returns False when llama.cpp refuses it, or when a whole-stream copy into ``seq_id`` waits for the
        next ``llama_decode`` (the sequence is then left empty); raises
        ``ValueError`` for a bad sequence id."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        self.seq_rm(seq_id)
        if not data or seq_id in self._copying:  # a pending whole-stream copy would overwrite the cells
            return False
        arr = ctypes.c_uint8 * len(data)
        buf = arr.from_buffer(data) if isinstance(data, bytearray) else arr.from_buffer_copy(data)
        if llama_cpp.llama_state_seq_set_data_ext(self._ctx, buf, len(data), seq_id, 0) == 0:
            self.seq_rm(seq_id)
            return False
        return True

    # -- sequence state files (llama-server /slots save / restore) ---------------
    def state_seq_save(self, path: str, seq_id: int, tokens: Sequence[int]) -> int:
        """Write sequence ``seq_id``'s KV state and its ``tokens`` to ``path`` (``llama_state_seq_save_file``).

        Returns the bytes written; raises ``ValueError`` for a bad sequence id or token count,
        ``OSError`` when llama.cpp wrote nothing.
        """
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        if len(tokens) > self.meta.n_ctx_seq:
            raise ValueError(f"{len(tokens)} tokens do not fit the sequence context {self.meta.n_ctx_seq}")
        arr = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        n = llama_cpp.llama_state_seq_save_file(self._ctx, path.encode(), seq_id, arr, len(tokens))
        if n == 0:
            raise OSError(f"llama.cpp could not write {path!r}")
        return int(n)

    def state_seq_load(self, path: str, seq_id: int) -> tuple[int, list[int]]:
        """Read a state file written by :meth:`state_seq_save` into sequence ``seq_id``
        (``llama_state_seq_load_file``; the sequence is cleared first).

        Returns ``(bytes read, tokens)``; ``(0, [])`` when the file is not a sequence state of this
        model or does not fit the sequence's KV stream (the sequence is then left empty).
        """
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        self.seq_rm(seq_id)
        cap = self.meta.n_ctx_seq
        arr = (llama_cpp.llama_token * cap)()
        count = ctypes.c_size_t(0)
        n = llama_cpp.llama_state_seq_load_file(self._ctx, path.encode(), seq_id, arr, cap, ctypes.byref(count))
        if n == 0:
            self.seq_rm(seq_id)
            return 0, []
        return int(n), list(arr[: count.value])
