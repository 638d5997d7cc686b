"""libmtmd called directly, as the reference for image input (llama-server's ``--mmproj``).

:class:`MtmdOracle` loads a text model with llama-cpp-python's low-level API (one sequence, n_ctx
512, n_batch 512) and a projector with ``mtmd_init_from_file`` (CPU, no timings), then does what
llama-server does with a prompt holding media markers: ``mtmd_helper_bitmap_init_from_buf`` for each
image (PNG/JPEG bytes), ``mtmd_tokenize`` with the marker ``mtmd_default_marker()`` (``<__media__>``)
where each image goes, and ``mtmd_helper_eval_chunks`` (images encoded by the projector, text decoded,
logits for the last position only). :func:`first_logits` is the one-shot form: load, evaluate, free.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

N_CTX = 512
N_BATCH = 512


def marker() -> str:
    """libmtmd's default media marker, the place of one image in a prompt."""
    from llama_cpp import mtmd_cpp

    return mtmd_cpp.mtmd_default_marker().decode()


class Chunk(NamedTuple):
    """One chunk of a tokenized prompt (:meth:`MtmdOracle.chunk_details`): ``kind`` ``text``, ``image`` or
    ``audio``; ``n_tokens`` tokens or embeddings; ``n_pos`` the positions it takes (``n_tokens`` but for an
    image on an M-RoPE model: max(nx, ny)); ``nx`` x ``ny`` an image's grid of embeddings (0 for text)."""

    kind: str
    n_tokens: int
    n_pos: int
    nx: int
    ny: int


class MtmdOracle:
    """A text model, its llama context and an mtmd context on one projector; :meth:`close` frees them."""

    def __init__(self, model_path: str | Path, mmproj_path: str | Path, n_threads: int = 2) -> None:
        import llama_cpp
        from llama_cpp import mtmd_cpp

        from skippy.engine.runtime.llama import _init_backend
        from skippy.engine.runtime.load import _llama_log

        _init_backend(False)  # llama.cpp's log into logging (warnings only), as the server does
        mtmd_cpp.mtmd_helper_log_set(_llama_log, ctypes.c_void_p(0))  # and libmtmd's (else all of it on stderr)
        self.model = self.ctx = self.mctx = None
        self.n_past = 0  # the position after the last first_logits call's input
        try:
            self.model = llama_cpp.llama_model_load_from_file(os.fsencode(model_path),
                                                              llama_cpp.llama_model_default_params())
            if not self.model:
                raise RuntimeError(f"llama_model_load_from_file failed: {model_path}")
            cp = llama_cpp.llama_context_default_params()
            cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = N_CTX, N_BATCH, N_BATCH, 1
            cp.n_threads = cp.n_threads_batch = n_threads
            self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
            if not self.ctx:
                raise RuntimeError("llama_init_from_model failed")
            self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
            mp = mtmd_cpp.mtmd_context_params_default()
            mp.use_gpu, mp.print_timings, mp.n_threads = False, False, n_threads
            self.mctx = mtmd_cpp.mtmd_init_from_file(os.fsencode(mmproj_path), self.model, mp)
            if not self.mctx:
                raise RuntimeError(f"mtmd_init_from_file failed: {mmproj_path}")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        import llama_cpp
        from llama_cpp import mtmd_cpp

        if self.mctx:
            mtmd_cpp.mtmd_free(self.mctx)
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
        if self.model:
            llama_cpp.llama_model_free(self.model)
        self.model = self.ctx = self.mctx = None

    def __enter__(self) -> MtmdOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def supports_vision(self) -> bool:
        from llama_cpp import mtmd_cpp

        return bool(mtmd_cpp.mtmd_support_vision(self.mctx))

    def _tokenize(self, prompt: str, images: list[bytes]) -> int:
        """``mtmd_tokenize`` of ``prompt`` (special tokens parsed, BOS as the vocabulary says) with
        ``images`` in marker order: an ``mtmd_input_chunks`` pointer, which the caller frees with
        ``mtmd_input_chunks_free``."""
        from llama_cpp import mtmd_cpp

        bitmaps = []
        try:
            for data in images:
                buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                bitmap = mtmd_cpp.mtmd_helper_bitmap_init_from_buf(self.mctx, buf, len(data), False)
                if not bitmap:
                    raise ValueError("mtmd_helper_bitmap_init_from_buf could not decode an image")
                bitmaps.append(bitmap)
            text = mtmd_cpp.mtmd_input_text()
            raw = prompt.encode()
            text.text, text.text_len, text.add_special, text.parse_special = raw, len(raw), True, True
            arr = (mtmd_cpp.mtmd_bitmap_p_ctypes * max(len(bitmaps), 1))(*bitmaps)
            chunks = mtmd_cpp.mtmd_input_chunks_init()
            rc = mtmd_cpp.mtmd_tokenize(self.mctx, chunks, ctypes.byref(text), arr, len(bitmaps))
            if rc != 0:
                mtmd_cpp.mtmd_input_chunks_free(chunks)
                raise ValueError(f"mtmd_tokenize returned {rc} (1: markers and images differ in number)")
            return chunks
        finally:
            for bitmap in bitmaps:
                mtmd_cpp.mtmd_bitmap_free(bitmap)

    def chunks(self, prompt: str, images: list[bytes]) -> list[tuple[str, int]]:
        """The chunks ``mtmd_tokenize`` makes of ``prompt`` and ``images``: ``(kind, n_tokens)``, kind
        ``text``, ``image`` or ``audio``."""
        return [(c.kind, c.n_tokens) for c in self.chunk_details(prompt, images)]

    def chunk_details(self, prompt: str, images: list[bytes]) -> list[Chunk]:
        """The chunks ``mtmd_tokenize`` makes of ``prompt`` and ``images``, with the positions each takes
        (``mtmd_input_chunk_get_n_pos``) and an image's grid of embeddings: :class:`Chunk` each."""
        from llama_cpp import mtmd_cpp

        kinds = {mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT: "text", mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE: "image",
                 mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_AUDIO: "audio"}
        chunks = self._tokenize(prompt, images)
        try:
            out = []
            for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
                chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
                kind = kinds[mtmd_cpp.mtmd_input_chunk_get_type(chunk)]
                nx = ny = 0
                if kind == "image":
                    tokens = mtmd_cpp.mtmd_input_chunk_get_tokens_image(chunk)
                    nx, ny = mtmd_cpp.mtmd_image_tokens_get_nx(tokens), mtmd_cpp.mtmd_image_tokens_get_ny(tokens)
                out.append(Chunk(kind, mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk),
                                 mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk), nx, ny))
            return out
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)

    def image_embeddings(self, image: bytes) -> np.ndarray:
        """The projector's output for ``image`` alone (``mtmd_encode_chunk``, ``mtmd_get_output_embd``): float32,
        one row per embedding, ``llama_model_n_embd_inp`` wide (the text model's input width: ``n_embd``, or
        more with DeepStack, Qwen3-VL)."""
        import llama_cpp
        from llama_cpp import mtmd_cpp

        width = llama_cpp.llama_model_n_embd_inp(self.model)
        chunks = self._tokenize(marker(), [image])
        try:
            for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
                chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
                if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    n = mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
                    if mtmd_cpp.mtmd_encode_chunk(self.mctx, chunk) != 0:
                        raise RuntimeError("mtmd_encode_chunk failed")
                    out = np.ctypeslib.as_array(mtmd_cpp.mtmd_get_output_embd(self.mctx), shape=(n * width,))
                    return out.reshape(n, width).copy()
            raise ValueError("libmtmd made no image chunk of the image")
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)

    def uses_mrope(self) -> bool:
        """``mtmd_decode_use_mrope``: the text model has M-RoPE (Qwen2-VL), so an image's embeddings sit on a
        2-D grid of positions and it takes max(nx, ny) positions, not one per embedding."""
        from llama_cpp import mtmd_cpp

        return bool(mtmd_cpp.mtmd_decode_use_mrope(self.mctx))

    def first_logits(self, prompt: str, images: list[bytes]) -> np.ndarray:
        """The logits (float32, n_vocab) after ``prompt`` with ``images`` from an empty KV cache; :attr:`n_past`
        is then the position after them (``mtmd_helper_eval_chunks``'s ``new_n_past``)."""
        import llama_cpp
        from llama_cpp import mtmd_cpp

        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        chunks = self._tokenize(prompt, images)
        try:
            n_past = llama_cpp.llama_pos(0)
            rc = mtmd_cpp.mtmd_helper_eval_chunks(self.mctx, self.ctx, chunks, 0, 0, N_BATCH, True,
                                                  ctypes.byref(n_past))
            if rc != 0:
                raise RuntimeError(f"mtmd_helper_eval_chunks returned {rc}")
            self.n_past = n_past.value
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float32, copy=True)

    def greedy(self, prompt: str, images: list[bytes], n: int) -> list[tuple[int, float, float]]:
        """``n`` greedy tokens after ``prompt`` with ``images`` (from an empty KV cache), each decoded at the
        position after the one before (from :attr:`n_past`, so after an M-RoPE image at its n_pos): per token
        ``(id, its logprob, the runner-up's logprob)``."""
        import llama_cpp

        logits = self.first_logits(prompt, images)
        out = []
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        try:
            for i in range(n):
                lp = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
                best, second = np.argsort(-lp)[:2]
                out.append((int(best), float(lp[best]), float(lp[second])))
                if i == n - 1:
                    break
                batch.n_tokens = 1
                batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = int(best), self.n_past + i, 1, True
                batch.seq_id[0][0] = 0
                if llama_cpp.llama_decode(self.ctx, batch) != 0:
                    raise RuntimeError("llama_decode of a generated token failed")
                ptr = llama_cpp.llama_get_logits_ith(self.ctx, -1)
                logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float32, copy=True)
        finally:
            llama_cpp.llama_batch_free(batch)
        return out


def first_logits(model_path: str | Path, mmproj_path: str | Path, prompt: str, images: list[bytes]) -> np.ndarray:
    """The last position's logits (float32, n_vocab) of ``prompt``, whose media markers
    (:func:`marker`) take ``images`` in order, evaluated by libmtmd on a freshly loaded model and projector."""
    with MtmdOracle(model_path, mmproj_path) as oracle:
        return oracle.first_logits(prompt, images)
