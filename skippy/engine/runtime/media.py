"""Image input through libmtmd (llama.cpp's ``tools/mtmd``, shipped with llama-cpp-python): the projector
of ``--mmproj``, prompts with images, and decoding an image into a sequence's KV cache.

A prompt with images is a token list in which each image stands as a run of *placeholder ids*: negative
numbers (never a vocabulary id) derived from the image's SHA-256, one per position the image takes in
the KV cache, and a :class:`MediaSpan` per image saying where its run starts and which encoded chunk
fills it. Everything that compares prompts (the prefix cache, the host prompt cache) then compares
images by their bytes for free: the same image gives the same ids, so a second question about it
reuses its KV (llama-server keys its cache on the image hash the same way); another image differs at
its first position. The image encoder runs when the prompt is tokenized (a worker thread, one encode
at a time); only the decode thread turns a span into KV (:meth:`Projector.decode`: a ``llama_decode`` of
the embeddings, libmtmd's ``mtmd_helper_decode_image_chunk``).

Formats are what libmtmd's ``mtmd_helper_bitmap_init_from_buf`` decodes (stb_image: PNG, JPEG, BMP,
GIF's first frame, PSD, TGA, HDR, PIC, PNM), and what Pillow decodes beyond those (WebP, TIFF, AVIF, ICO...:
the first frame, as RGB pixels handed to libmtmd's ``mtmd_bitmap_init``, as vLLM reads images with
Pillow); anything else is a ``ValueError``.

**Positions.** A prompt index counts KV cells (one per token, one per image embedding); a KV position
is what llama.cpp attends by. They are the same except after an image of an M-RoPE model (Qwen2-VL and
later: libmtmd's ``MTMD_POS_TYPE_MROPE``), whose embeddings all sit at the image's first position
(2-D positions inside it) and which advances the position by ``max(nx, ny)`` of its grid
(``mtmd_image_tokens_get_n_pos``), fewer than its embeddings. Each span records its first position and
how many positions it takes; :func:`position` maps a prompt index to its KV position, as llama-server's
``server_tokens::pos_next`` does, and everything that decodes, trims or copies KV goes through it.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import threading
from collections.abc import Sequence

import attrs
import numpy as np

log = logging.getLogger("skippy.runtime")

#: libmtmd's default media marker: where a rendered prompt holds an image (``mtmd_default_marker``)
MARKER = "<__media__>"

_ID_SPACE = 1 << 30


def placeholder_ids(key: str, n: int) -> list[int]:
    """The ``n`` placeholder ids of the image whose SHA-256 (hex) is ``key``: distinct negative numbers
    in ``[-2**31, -1]``, the same for the same image, so prompt comparison sees the image's bytes."""
    base = int(key[:15], 16)
    return [-1 - ((base + i) % _ID_SPACE) for i in range(n)]


def is_placeholder(token: int) -> bool:
    """An id that stands for an image position, not a vocabulary token."""
    return token < 0


class MediaChunk:
    """One image, preprocessed and tokenized by libmtmd (an owned ``mtmd_input_chunk``), and its encoder
    output once :meth:`Projector.image` encoded it (``embd``: float32, ``n_tokens`` x the model's input
    width; ``None``: not encoded, the decode encodes it). ``n_pos``: the KV positions it takes
    (``n_tokens``, or fewer with M-RoPE); ``shared``: its embeddings' KV cells all hold its first position
    (M-RoPE), else one position each, in order. Freed when the last reference goes."""

    def __init__(self, ptr: int, n_tokens: int, n_pos: int, embd: np.ndarray | None = None, *,
                 shared: bool = False) -> None:
        self.ptr = ptr
        self.n_tokens = n_tokens
        self.n_pos = n_pos
        self.shared = shared
        self.embd = embd

    def __del__(self) -> None:
        if self.ptr:
            from llama_cpp import mtmd_cpp

            mtmd_cpp.mtmd_input_chunk_free(self.ptr)
            self.ptr = 0


@attrs.frozen
class MediaSpan:
    """One image in a prompt: its placeholder ids are ``prompt[start:start + n]``; ``key`` the SHA-256 of
    its bytes (hex); ``chunk`` what :meth:`Projector.decode` encodes and decodes there; ``pos`` its first
    KV position (``start`` unless an earlier image took fewer positions than embeddings)."""

    start: int
    n: int
    key: str
    chunk: MediaChunk = attrs.field(eq=False, repr=False)
    pos: int = attrs.field(default=attrs.Factory(lambda self: self.start, takes_self=True))

    @property
    def end(self) -> int:
        return self.start + self.n

    @property
    def n_pos(self) -> int:
        """The KV positions the image takes: the next token's position is ``pos + n_pos``."""
        return self.chunk.n_pos

    @property
    def end_pos(self) -> int:
        return self.pos + self.chunk.n_pos


@attrs.frozen
class MediaPrompt:
    """A tokenized prompt with images: ``tokens`` (placeholder ids at the images) and one span per image,
    in order."""

    tokens: list[int]
    spans: tuple[MediaSpan, ...]


def span_start(spans: Sequence[MediaSpan], n: int) -> int:
    """``n`` moved back to the start of the image it falls inside (a reused prefix never ends inside an
    image: its embeddings are decoded whole); ``n`` itself when it falls on no image or on its start."""
    for span in spans:
        if span.start < n < span.end:
            return span.start
    return n


def position(spans: Sequence[MediaSpan], n: int) -> int:
    """The KV position of prompt index ``n`` (a token's, or the next one's when ``n`` is the prompt's
    length) in a prompt whose images are ``spans`` (in order): ``n`` itself unless an earlier image takes
    fewer positions than embeddings (M-RoPE). Inside an image, the position of its ``n``-th embedding's
    cell, so removing the KV from there on (``llama_memory_seq_rm``) removes the image from that cell: the
    whole image when its cells share one position."""
    shift = 0
    for span in spans:
        if n <= span.start:
            break
        if n < span.end:
            return span.pos if span.chunk.shared else span.pos + (n - span.start)
        shift = span.end - span.end_pos
    return n - shift


class Projector:
    """A loaded ``--mmproj`` projector (an ``mtmd_context``) over the text model ``model`` (a
    ``llama_model *``). Raises ``RuntimeError`` when libmtmd cannot load ``path`` or the projector is
    one this runtime does not drive yet (no image input: audio only).

    ``tokenize`` may run on any thread (image decoding and preprocessing happen there, as in
    llama-server's HTTP threads); ``decode`` only on the thread that owns the llama.cpp context.
    """

    def __init__(self, path: str, model: int, *, use_gpu: bool, n_threads: int, verbose: bool = False,
                 image_min_tokens: int | None = None, image_max_tokens: int | None = None) -> None:
        from llama_cpp import mtmd_cpp

        from skippy.engine.runtime.load import _llama_log

        mtmd_cpp.mtmd_helper_log_set(_llama_log, ctypes.c_void_p(0))  # libmtmd's log joins llama.cpp's
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = verbose
        params.warmup = False
        params.image_min_tokens = image_min_tokens or -1  # -1: the projector's own (dynamic-resolution models)
        params.image_max_tokens = image_max_tokens or -1
        self._ctx = mtmd_cpp.mtmd_init_from_file(path.encode(), model, params)
        if not self._ctx:
            bounds = (" or refused --image-min-tokens / --image-max-tokens (outside the projector's own range: "
                      "llama.cpp's log line above says which)" if image_min_tokens or image_max_tokens else "")
            raise RuntimeError(f"llama.cpp's libmtmd could not load the projector {path!r} (--mmproj){bounds}")
        self.path = path
        from llama_cpp import llama_cpp

        self.n_embd = int(llama_cpp.llama_model_n_embd_inp(model))  # an image embedding's width
        self._encoding = threading.Lock()  # one encode at a time: the encoder's buffers are the context's
        self.vision = bool(mtmd_cpp.mtmd_support_vision(self._ctx))
        self.audio = bool(mtmd_cpp.mtmd_support_audio(self._ctx))
        if not self.vision:
            self.close()
            raise RuntimeError(f"--mmproj {path}: the projector has no image encoder (audio input is not "
                               "supported yet)")
        #: the model takes M-RoPE positions (Qwen2-VL and later): an image's cells share one position
        self.mrope = bool(mtmd_cpp.mtmd_decode_use_mrope(self._ctx))

    def close(self) -> None:
        if self._ctx:
            from llama_cpp import mtmd_cpp

            mtmd_cpp.mtmd_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        self.close()

    def image(self, data: bytes, key: str, encode: bool = True) -> list[tuple[list[int], MediaChunk | None]]:
        """One image (file bytes) as libmtmd tokenizes it alone: the pieces in order, each either text
        tokens around the image (a model's image begin/end tokens; ``(ids, None)``) or the image
        (``([], chunk)``). Raises ``ValueError`` when libmtmd cannot decode the bytes as an image."""
        from llama_cpp import mtmd_cpp

        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = mtmd_cpp.mtmd_helper_bitmap_init_from_buf(self._ctx, buf, len(data), False) or _pillow_bitmap(data)
        if not bitmap:
            raise ValueError("not an image libmtmd or Pillow can decode (PNG, JPEG, WebP, GIF, BMP, TIFF, ...)")
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        try:
            mtmd_cpp.mtmd_bitmap_set_id(bitmap, key.encode())
            text = mtmd_cpp.mtmd_input_text(MARKER.encode(), len(MARKER.encode()), False, True)
            bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd_cpp.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
            if rc != 0:
                raise ValueError(f"libmtmd could not preprocess the image (mtmd_tokenize returned {rc})")
            out: list[tuple[list[int], MediaChunk | None]] = []
            for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
                chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
                kind = mtmd_cpp.mtmd_input_chunk_get_type(chunk)
                if kind == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t()
                    ids = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    out.append(([int(ids[j]) for j in range(n.value)], None))
                elif kind == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    n_tokens = int(mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk))
                    n_pos = int(mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk))
                    own = MediaChunk(mtmd_cpp.mtmd_input_chunk_copy(chunk), n_tokens, n_pos,
                                     shared=self._shared(chunk, n_tokens, n_pos))
                    if encode:  # not for a request that only counts its tokens
                        own.embd = self._encode(own)
                    out.append(([], own))
                else:
                    raise ValueError("libmtmd read the input as audio, which is not supported")
            return out
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
            mtmd_cpp.mtmd_bitmap_free(bitmap)

    def _shared(self, chunk: int, n_tokens: int, n_pos: int) -> bool:
        """Whether the image ``chunk``'s KV cells all hold its first position (libmtmd's decoder positions:
        M-RoPE's temporal position is the image's first for every embedding) rather than one position
        each in order (every other layout, HunyuanVL's M-RoPE included). Raises ``ValueError`` for a layout
        that is neither, which the position bookkeeping (:func:`position`) cannot follow."""
        from llama_cpp import mtmd_cpp

        if not self.mrope:
            return False
        tokens = mtmd_cpp.mtmd_input_chunk_get_tokens_image(chunk)
        t = [int(mtmd_cpp.mtmd_image_tokens_get_decoder_pos(tokens, 0, i).t) for i in range(n_tokens)]
        if not any(t) and n_pos >= 1:
            return True
        if t == list(range(n_tokens)) and n_pos == n_tokens:
            return False
        raise ValueError("libmtmd lays out this image's positions in a way skippy does not follow")

    def _encode(self, chunk: MediaChunk) -> np.ndarray:
        """The image encoder's output for ``chunk`` (``mtmd_encode_chunk``), copied out: run here, on the
        thread that tokenizes, so the decode thread never waits for an encoder (``bench/bench_images.py``,
        a ViT-B/16-sized projector on 2 cores: encoding on the decode thread took 8 text streams' ITL p99
        from 0.28 s to about 1.0 s). Raises ``ValueError`` when libmtmd fails."""
        from llama_cpp import mtmd_cpp

        with self._encoding:
            if mtmd_cpp.mtmd_encode_chunk(self._ctx, chunk.ptr) != 0:
                raise ValueError("libmtmd could not encode the image")
            out = mtmd_cpp.mtmd_get_output_embd(self._ctx)
            return np.ctypeslib.as_array(out, shape=(chunk.n_tokens * self.n_embd,)).copy()

    def decode(self, lctx: int, chunk: MediaChunk, pos: int, seq_id: int, n_batch: int) -> None:
        """Decode ``chunk``'s embeddings into sequence ``seq_id`` at positions ``pos ..``
        (``mtmd_helper_decode_image_chunk``: ``llama_decode`` of the embeddings in ``n_batch`` pieces,
        non-causal where the model wants it); a chunk not encoded yet is encoded first
        (``mtmd_helper_eval_chunk_single``). Decode thread only. Raises ``RuntimeError`` when libmtmd or
        llama.cpp fails."""
        from llama_cpp import llama_cpp, mtmd_cpp

        new_n_past = llama_cpp.llama_pos(0)
        if chunk.embd is not None:
            embd = chunk.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            rc = mtmd_cpp.mtmd_helper_decode_image_chunk(self._ctx, lctx, chunk.ptr, embd, pos, seq_id, n_batch,
                                                         ctypes.byref(new_n_past),
                                                         mtmd_cpp.mtmd_helper_post_decode_callback(), None)
        else:
            rc = mtmd_cpp.mtmd_helper_eval_chunk_single(self._ctx, lctx, chunk.ptr, pos, seq_id, n_batch, False,
                                                        ctypes.byref(new_n_past))
        if rc != 0:
            raise RuntimeError(f"libmtmd could not encode or decode an image (returned {rc})")


def _pillow_bitmap(data: bytes) -> int | None:
    """An ``mtmd_bitmap`` of the image file ``data`` as Pillow decodes it (its first frame, RGB), for the formats
    libmtmd's stb_image does not read (WebP, TIFF, AVIF...); ``None`` when Pillow cannot read it either."""
    import io

    from llama_cpp import mtmd_cpp
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            rgb = image.convert("RGB")
    except Exception:  # Pillow raises many kinds for a broken file (UnidentifiedImageError, OSError, SyntaxError...)
        return None
    raw = rgb.tobytes()
    pixels = (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw)
    bitmap: int | None = mtmd_cpp.mtmd_bitmap_init(rgb.width, rgb.height, pixels)
    return bitmap or None


class BadImage(ValueError):
    """libmtmd could not read image number ``index`` (0-based, in prompt order) of a prompt."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def image_key(data: bytes) -> str:
    """The SHA-256 of an image's bytes, hex: its identity in prompts and caches."""
    return hashlib.sha256(data).hexdigest()


def tokenize_with_images(projector: Projector, text_tokens: Sequence[list[int]],
                         images: Sequence[bytes], encode: bool = True) -> MediaPrompt:
    """A prompt whose text was split at its :data:`MARKER`\\ s and tokenized piece by piece
    (``text_tokens``: one list more than ``images``), with each image's pieces (:meth:`Projector.image`)
    between them. Raises :class:`BadImage` (a ``ValueError``) for an image libmtmd cannot read, ``ValueError``
    when the pieces and images do not match."""
    if len(text_tokens) != len(images) + 1:
        raise ValueError(f"{len(images)} images for {len(text_tokens) - 1} markers")
    tokens: list[int] = list(text_tokens[0])
    spans: list[MediaSpan] = []
    shift = 0  # prompt index - KV position after the images so far
    for k, (data, after) in enumerate(zip(images, text_tokens[1:], strict=True)):
        key = image_key(data)
        try:
            pieces = projector.image(data, key, encode)
        except ValueError as exc:
            raise BadImage(k, str(exc)) from None
        for ids, chunk in pieces:
            if chunk is None:
                tokens.extend(ids)
                continue
            spans.append(MediaSpan(len(tokens), chunk.n_tokens, key, chunk, len(tokens) - shift))
            shift += chunk.n_tokens - chunk.n_pos
            tokens.extend(placeholder_ids(key, chunk.n_tokens))
        tokens.extend(after)
    return MediaPrompt(tokens, tuple(spans))
