"""llama.cpp runtime through llama-cpp-python's low-level API.

One :class:`LlamaRuntime` holds one ``llama_model`` and one
``llama_context`` with ``n_seq_max`` sequence slots. By default the KV
cache is non-unified (``kv_unified=false``): each sequence gets its own KV
stream of ``n_ctx_seq`` cells, which batches better and keeps a sequence's
output independent of its neighbours (see DESIGN.md, "Runtime facts").
With ``kv_unified=True`` all sequences share one buffer of
``n_ctx_seq x n_seq_max`` cells, and a prefix copy shares cells instead of
copying them (llama-server's ``--kv-unified``).

llama.cpp aborts the whole process on misuse (``GGML_ASSERT``), so every
call is validated here first: batch size <= ``n_batch``, sequence ids <
``n_seq_max``, positions < ``n_ctx_seq``, output indices in range.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import attrs
import llama_cpp
import numpy as np

from skippy.engine.runtime.backends import SPLIT_MODES, plan_offload, rpc_connections_alive
from skippy.engine.runtime.base import BatchEntry, EmbeddingInfo, FimTokens, KVCacheInfo, ModelMeta
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.sampling.vector import SeqSampler, sample_rows, vectorizable

log = logging.getLogger("skippy.runtime")

_backend_lock = threading.Lock()
_backend_ready = False


_llama_verbose = False
#: ggml_log_level (ggml.h: NONE, DEBUG, INFO, WARN, ERROR) -> logging levels; CONT (5) continues the
#: previous line's level
_GGML_LEVELS = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_last_level = logging.INFO
#: llama.cpp info lines worth a start-up log line even when not verbose (llama-server prints them)
_KEEP = ("compute buffer size",)
#: llama.cpp warnings that skippy's own flags make expected (logged at DEBUG while :data:`_expected` holds
#: them; the start-up lines say what they mean in our words): a unified KV buffer (--kv-unified, and the
#: embedding context) counted as one sequence's context, and ``--pooling`` over the GGUF's pooling type
_OVERFLOW = "possible training context overflow"
_POOLING_OVERRIDE = "model default pooling_type is"
#: fragments of the warnings expected while the context being created now is (see :func:`_expecting`)
_expected: tuple[str, ...] = ()
_expect_lock = threading.Lock()


T = TypeVar("T")

#: llama.cpp's lines logged while a context is created, when :func:`_kv_caches` collects them
_captured: list[str] | None = None
_capture_lock = threading.Lock()
#: one KV cache's start-up line (llama_kv_cache's constructor): cells per stream, layers, seqs per stream
_KV_LINE = re.compile(r"llama_kv_cache: size = .*?\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\)")


@llama_cpp.llama_log_callback
def _llama_log(level: int, text: bytes, user_data: object) -> None:
    """llama.cpp's log into ``skippy.runtime``: everything with ``verbose``; else warnings, errors and
    the compute buffer sizes (what llama-server's start-up log shows)."""
    global _last_level
    lvl = _last_level if level == 5 else _GGML_LEVELS.get(level, logging.INFO)
    _last_level = lvl
    msg = text.decode("utf-8", "replace").rstrip()
    if not msg:
        return
    if _captured is not None:
        _captured.append(msg)
    if lvl >= logging.WARNING and any(k in msg for k in _expected):
        log.debug("llama.cpp (expected): %s", msg.strip())
    elif _llama_verbose or lvl >= logging.WARNING or any(k in msg for k in _KEEP):
        log.log(max(lvl, logging.INFO) if not _llama_verbose else lvl, "llama.cpp: %s", msg.strip())


@contextlib.contextmanager
def _expecting(*fragments: str) -> Iterator[None]:
    """While a context is created: llama.cpp warnings containing one of ``fragments`` log at DEBUG (one
    context at a time: models loading in parallel create their contexts in turn)."""
    global _expected
    with _expect_lock:
        _expected = fragments
        try:
            yield
        finally:
            _expected = ()


def _init_backend(verbose: bool) -> None:
    global _backend_ready, _llama_verbose
    with _backend_lock:
        _llama_verbose = verbose
        if not _backend_ready:
            import llama_cpp._logger  # noqa: F401 - it installs its own callback on import; ours replaces it

            llama_cpp.llama_log_set(_llama_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True


class LlamaVocab:
    """Thread-safe, read-only vocabulary of a loaded model (see :class:`Vocab`)."""

    def __init__(self, vocab: llama_cpp.llama_vocab_p, n_vocab: int) -> None:
        self._vocab = vocab
        self.n_vocab = n_vocab
        self._pieces = [self._piece(t, special=False) for t in range(n_vocab)]
        self._llg: object | None = None
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
        match on (``llama_sampler_init_grammar_lazy_patterns``).
        """
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

    def lltokenizer(self) -> object:
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

    def special_piece(self, token: int) -> str:
        return self._piece(token, special=True).decode("utf-8", errors="replace")


def LLG_LIMITS() -> object:  # noqa: N802 - a constant built on first use (llguidance loads lazily)
    """llguidance parser limits: its defaults, with grammar internals kept out of error messages."""
    from llguidance import LLParserLimits

    return LLParserLimits(verbose_errors=False)


class LlamaSampler:
    """One sequence's sampling state: the llama.cpp chain, a GBNF grammar sampler kept apart,
    an llguidance matcher (``constraint``), and the end-of-generation suppression of
    ``ignore_eos`` / ``min_tokens`` (token ids, numpy int array, or ``None``)."""

    __slots__ = ("chain", "grammar", "matcher", "suppress", "suppress_until", "n_sampled", "stop_id")

    def __init__(self, chain: object, grammar: object | None, matcher: object | None,
                 suppress: np.ndarray | None, suppress_until: int, stop_id: int) -> None:
        self.chain = chain
        self.grammar = grammar
        self.matcher = matcher
        self.suppress = suppress
        self.suppress_until = suppress_until  # -1: always (ignore_eos)
        self.n_sampled = 0
        self.stop_id = stop_id  # the end-of-generation token a finished constraint produces

    def suppressed(self) -> np.ndarray | None:
        if self.suppress is None or (0 <= self.suppress_until < self.n_sampled):  # n_sampled counts this one
            return None
        return self.suppress


#: ``flash_attn`` names -> llama.cpp ``llama_flash_attn_type`` values
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}

#: KV cache type names (llama-server's ``--cache-type-k`` values) -> ``ggml_type`` enum values
CACHE_TYPES = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16, "bf16": 30,
               "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0,
               "q4_1": llama_cpp.GGML_TYPE_Q4_1, "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL,
               "q5_0": llama_cpp.GGML_TYPE_Q5_0, "q5_1": llama_cpp.GGML_TYPE_Q5_1}

#: ``pooling`` names (llama-server's ``--pooling`` values; ``model``: the GGUF's, llama.cpp's
#: ``LLAMA_POOLING_TYPE_UNSPECIFIED``) -> ``llama_pooling_type`` values
POOLING = {"model": -1, "none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
_POOLING_NAMES = {v: k for k, v in POOLING.items() if v >= 0}

#: A sequence copy between KV streams (:meth:`LlamaRuntime.seq_cp`) goes through the source's state
#: (its own cells, copied twice) while the source holds at most this fraction of its stream's cells,
#: and through llama.cpp's whole-stream copy otherwise (measured in bench/bench_kv_copy.py).
STATE_COPY_FRACTION = 0.4

_ggml_lock = threading.Lock()
_ggml: ctypes.CDLL | None = None


def _ggml_base() -> ctypes.CDLL:
    """libggml-base, shipped next to libllama by llama-cpp-python (``ggml_row_size``, ``ggml_type_name``...)."""
    global _ggml
    with _ggml_lock:
        if _ggml is None:
            from pathlib import Path

            from llama_cpp._ctypes_extensions import load_shared_library

            lib = load_shared_library("ggml-base", Path(llama_cpp.__file__).parent / "lib")
            lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
            lib.ggml_row_size.restype = ctypes.c_size_t
            lib.ggml_type_name.argtypes = [ctypes.c_int]
            lib.ggml_type_name.restype = ctypes.c_char_p
            lib.ggml_is_quantized.argtypes = [ctypes.c_int]
            lib.ggml_is_quantized.restype = ctypes.c_bool
            for name, value in CACHE_TYPES.items():  # the enum values above are ggml's
                assert lib.ggml_type_name(value).decode() == name, (name, value)
            _ggml = lib
        return _ggml


def _meta_int(model: llama_cpp.llama_model_p, key: str) -> int | None:
    """An integer GGUF metadata value of the model (``llama_model_meta_val_str``), else ``None``."""
    buf = ctypes.create_string_buffer(64)
    if llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, 64) < 0:
        return None
    try:
        return int(buf.value)
    except ValueError:
        return None


def _kv_caches(create: Callable[[], T]) -> tuple[T, list[tuple[int, int]]]:
    """``create()`` (a llama.cpp context) and the KV caches it logged: ``(cells, layers)`` per cache,
    cells over all streams. An iSWA model (Gemma 3) has two caches: the full-context layers and the
    sliding-window layers, the latter with ``n_swa + n_ubatch`` cells per stream (padded to 256)."""
    global _captured
    with _capture_lock:
        _captured = []
        try:
            made = create()
        finally:
            lines, _captured = _captured, None
    caches = []
    for line in lines:
        m = _KV_LINE.search(line)
        if m:
            cells, layers, n_seq_max, n_stream = (int(g) for g in m.groups())
            caches.append((cells * max(1, n_stream), layers))
    return made, caches


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
    buf = ctypes.create_string_buffer(128)
    n = llama_cpp.llama_model_meta_val_str(model, b"general.architecture", buf, 128)
    arch = buf.value.decode() if n >= 0 else ""
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


class LlamaRuntime:
    """A llama.cpp model + context (see module docstring).

    ``n_ctx_seq`` tokens per sequence (clamped to the training context; ``0``:
    the training context), ``n_seq_max`` sequences; the llama.cpp
    context holds ``n_ctx_seq * n_seq_max`` cells (llama.cpp rounds ``n_ctx_seq``
    up to a multiple of 256), one stream per sequence or, with ``kv_unified``,
    one shared buffer; either way a sequence's positions stay below ``n_ctx_seq``.
    ``n_threads`` defaults to the number of CPUs. ``flash_attn`` is ``"on"``,
    ``"off"`` or ``"auto"`` (llama.cpp's ``flash_attn_type``). ``type_k`` /
    ``type_v`` are KV cache types (:data:`CACHE_TYPES`; llama-server's
    ``--cache-type-k`` / ``--cache-type-v``). ``swa_full``: a full-size cache for the
    sliding-window attention layers of an iSWA model (llama-server's ``--swa-full``; off as in
    llama-server, though llama.cpp's own context default is on: those layers then keep about
    ``n_swa`` positions per sequence, see :meth:`seq_pos_min`). ``vector_sampling`` samples requests
    without a grammar with :mod:`skippy.engine.sampling.vector` (all of a step's rows at
    once; the same chain and random stream as llama.cpp's); ``False`` keeps llama.cpp's
    sampler chain for every request (for comparisons). Raises ``RuntimeError`` when the
    model or context cannot be created, ``ValueError`` for an unknown
    ``flash_attn`` or cache type, or a quantized ``type_v`` with
    ``flash_attn="off"`` (llama.cpp refuses it), before loading anything.
    Logs the KV cache size at start-up (total and per sequence, MiB), as llama-server does.
    ``n_gpu_layers``, ``split_mode``, ``main_gpu``, ``tensor_split``, ``devices`` and ``rpc`` are
    llama-server's ``-ngl``, ``--split-mode``, ``--main-gpu``, ``--tensor-split``, ``--device`` and
    ``--rpc`` (:func:`~skippy.engine.runtime.backends.plan_offload`, which raises ``ValueError`` for a
    device this build lacks and ``ConnectionError`` for an RPC worker that does not answer, before
    loading); ``meta.devices`` reports the backends, the devices and the offload.
    ``backend_sampling`` lets the scheduler sample plain greedy sequences inside llama.cpp's decode graph
    (:meth:`set_backend_greedy`; llama-server's ``--backend-sampling``); ``meta.backend_sampling`` says
    whether llama.cpp took it (it refuses with ``--split-mode tensor``).
    """

    def __init__(self, path: str, *, n_ctx_seq: int = 2048, n_seq_max: int = 16, n_batch: int = 512,
                 n_threads: int | None = None, flash_attn: str = "auto", type_k: str = "f16",
                 type_v: str = "f16", kv_unified: bool = False, swa_full: bool = False, name: str | None = None,
                 verbose: bool = False, vector_sampling: bool = True, embeddings: bool = False,
                 pooling: str = "model", embeddings_batch: int = 512, n_gpu_layers: int | None = None,
                 split_mode: str = "layer", main_gpu: int = 0, tensor_split: Sequence[float] = (),
                 devices: Sequence[str] = (), rpc: Sequence[str] = (), backend_sampling: bool = False) -> None:
        # before loading: a refused argument must not leak the model
        if pooling not in POOLING:
            raise ValueError(f"pooling must be one of {sorted(POOLING)}, not {pooling!r}")
        if embeddings and embeddings_batch < 1:
            raise ValueError(f"embeddings_batch must be >= 1, not {embeddings_batch}")
        if flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash_attn must be one of {sorted(FLASH_ATTN)}, not {flash_attn!r}")
        for what, t in (("type_k", type_k), ("type_v", type_v)):
            if t not in CACHE_TYPES:
                raise ValueError(f"{what} must be one of {sorted(CACHE_TYPES)}, not {t!r}")
        if flash_attn == "off" and _ggml_base().ggml_is_quantized(CACHE_TYPES[type_v]):
            raise ValueError(f"a quantized V cache ({type_v}) needs flash attention (auto or on)")
        _init_backend(verbose)
        offload = plan_offload(n_gpu_layers=n_gpu_layers, split_mode=split_mode, main_gpu=main_gpu,
                               tensor_split=tensor_split, device_names=devices, rpc=rpc)
        self._rpc = offload.rpc
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = offload.n_gpu_layers
        mparams.split_mode = SPLIT_MODES[offload.split_mode]
        mparams.main_gpu = offload.main_gpu
        if offload.tensor_split:  # llama.cpp reads llama_max_devices() floats
            n_max = llama_cpp.llama_max_devices()
            split = (ctypes.c_float * n_max)(*offload.tensor_split[:n_max])
            mparams.tensor_split = split
        if offload.explicit:  # --device: a NULL-terminated list (only NULL: no offload)
            devs = (ctypes.c_void_p * (len(offload.requested) + 1))(*[d.handle for d in offload.requested], None)
            mparams.devices = ctypes.cast(devs, ctypes.c_void_p)
        self._model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load model {path!r}")
        vocab = llama_cpp.llama_model_get_vocab(self._model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)
        if n_ctx_seq <= 0:  # llama-server -c 0: the training context
            n_ctx_seq = n_ctx_train if n_ctx_train > 0 else 4096
        elif n_ctx_train > 0:
            n_ctx_seq = min(n_ctx_seq, n_ctx_train)
        n_ctx_seq = -(-n_ctx_seq // 256) * 256  # llama.cpp pads a stream to 256 cells; unified mode alike
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx_seq * n_seq_max
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq_max
        cparams.kv_unified = kv_unified
        cparams.swa_full = swa_full  # llama.cpp's context default is True; llama-server's (common) is False
        cparams.type_k = CACHE_TYPES[type_k]
        cparams.type_v = CACHE_TYPES[type_v]
        threads = n_threads or os.cpu_count() or 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        cparams.flash_attn_type = FLASH_ATTN[flash_attn]
        # unified, llama.cpp takes the whole buffer for one sequence's context and warns past the training
        # context; each sequence still stays within n_ctx_seq (the KV cache line below says so)
        buffer_warned = kv_unified and 0 < n_ctx_train < n_ctx_seq * n_seq_max and n_ctx_seq <= n_ctx_train
        with _expecting(*((_OVERFLOW,) if buffer_warned else ())):
            self._ctx, caches = _kv_caches(lambda: llama_cpp.llama_init_from_model(self._model, cparams))
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise RuntimeError("llama.cpp could not create a context (out of memory?)")
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        n_cells = llama_cpp.llama_n_ctx(self._ctx)
        # llama.cpp's own n_ctx_seq: a stream's cells, or the whole buffer when unified
        assert llama_cpp.llama_n_ctx_seq(self._ctx) == (n_cells if kv_unified else n_ctx_seq), "llama.cpp padding"
        kv_k, kv_v = kv_cache_size(self._model, type_k, type_v, n_cells, caches)
        kv = KVCacheInfo(type_k=type_k, type_v=type_v, n_cells=n_cells, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq_max,
                         unified=kv_unified, bytes_k=kv_k, bytes_v=kv_v)
        self._n_vocab = n_vocab
        self._views: dict[tuple[int | None, int], np.ndarray] = {}
        self._n_batch = n_batch
        self._embd_ctx: llama_cpp.llama_context_p | None = None  # made by _embedding_context
        self._copying: set[int] = set()  # sequences whose whole-stream copy llama_decode has yet to apply
        self._copy_buf = bytearray()  # _state_copy's buffer
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._outputs: list[bool] = []
        self._rows: dict[int, int] = {}  # batch index -> row of llama_get_logits, of the last decode
        self._greedy: dict[int, object] = {}  # seq_id -> the backend greedy chain attached to it
        self._retired: list[object] = []  # detached chains, freed after the next decode (its graph drops them)
        self.vector_sampling = vector_sampling
        self._cand = np.zeros(n_vocab, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self.vocab = LlamaVocab(vocab, n_vocab)
        tmpl = llama_cpp.llama_model_chat_template(self._model, None)
        bos = llama_cpp.llama_vocab_bos(vocab)
        eos = llama_cpp.llama_vocab_eos(vocab)
        eog = frozenset(t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t))
        self.meta = ModelMeta(
            name=name or os.path.splitext(os.path.basename(path))[0],
            path=path,
            chat_template=tmpl.decode("utf-8", errors="replace") if tmpl else None,
            bos_id=bos, eos_id=eos, eog_ids=eog,
            bos_token=self.vocab.special_piece(bos) if bos >= 0 else "",
            eos_token=self.vocab.special_piece(eos) if eos >= 0 else "",
            n_vocab=n_vocab, n_ctx_train=n_ctx_train,
            n_ctx_seq=n_ctx_seq,
            n_seq_max=llama_cpp.llama_n_seq_max(self._ctx),
            n_batch=n_batch,
            is_recurrent=bool(llama_cpp.llama_model_is_recurrent(self._model)
                              or llama_cpp.llama_model_is_hybrid(self._model)),
            kv_unified=kv_unified,
            kv_cache=kv,
            n_swa=max(0, int(llama_cpp.llama_model_n_swa(self._model))),
            swa_full=swa_full,
            fim=FimTokens(*(int(getattr(llama_cpp, f"llama_vocab_fim_{k}")(vocab))
                            for k in ("pre", "suf", "mid", "pad", "rep", "sep"))),
            n_embd=llama_cpp.llama_model_n_embd_out(self._model),
            devices={"backends": list(offload.backends), "devices": [d.as_dict() for d in offload.found],
                     "offload": offload.as_dict(llama_cpp.llama_model_n_layer(self._model))},
            embeddings=self._embedding_context(cparams, pooling, embeddings_batch, n_ctx_train) if embeddings
            else None,
        )
        if backend_sampling and self._probe_backend_sampling():
            self.meta = attrs.evolve(self.meta, backend_sampling=True)
        log.info("KV cache: %s, K %s + V %s, %d cells (%d sequences x %d): %.2f MiB total, %.2f MiB per sequence%s",
                 "unified" if kv_unified else "one stream per sequence", type_k, type_v, kv.n_cells, n_seq_max,
                 n_ctx_seq, kv.bytes / 2**20, kv.bytes_per_seq / 2**20,
                 f"; llama.cpp counts the shared buffer as one context of {n_cells} positions, past the training "
                 f"context ({n_ctx_train}), but each sequence stays within {n_ctx_seq}" if buffer_warned else "")

    def _embedding_context(self, gen: llama_cpp.llama_context_params, pooling: str, n_batch: int,
                           n_ctx_train: int) -> EmbeddingInfo:
        """Make the embedding context beside the generation context, on the same ``llama_model`` (the weights
        are shared; it has its own KV cache and compute buffers): llama.cpp ``embeddings = true``, the
        ``pooling`` asked for (``model``: the GGUF's), ``n_ctx = n_batch = n_ubatch`` tokens (clamped to the
        training context) in one KV buffer that the inputs of a batch share (``kv_unified``), and as many
        sequences as llama.cpp allows, up to one per token (llama-cpp-python's ``Llama(embedding=True)``
        does the same); ``n_ctx`` is rounded down to a multiple of the sequences (llama.cpp aborts
        otherwise; only a training context can need it, see ``check_embeddings_batch``). Threads and
        flash attention follow the generation context.

        Never raises: a model or pooling that cannot embed leaves no context and an
        :class:`EmbeddingInfo` whose ``error`` says why (the route answers 400 with it).
        """
        n_ctx = min(n_batch, n_ctx_train) if n_ctx_train > 0 else n_batch
        n_seq = max(1, min(n_ctx, llama_cpp.llama_max_parallel_sequences()))
        if n_ctx % n_seq:  # llama.cpp aborts unless the batch splits evenly over the sequences (config.py's
            # check_embeddings_batch refuses such an --embeddings-batch; a training context can still be one)
            log.info("embeddings: batches of %d tokens, not %d: a batch must be a multiple of its %d sequences",
                     n_ctx - n_ctx % n_seq, n_ctx, n_seq)
            n_ctx -= n_ctx % n_seq
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_ctx
        cparams.n_ubatch = n_ctx
        cparams.n_seq_max = n_seq
        cparams.kv_unified = True
        cparams.embeddings = True
        cparams.pooling_type = POOLING[pooling]
        cparams.n_threads = gen.n_threads
        cparams.n_threads_batch = gen.n_threads_batch
        cparams.flash_attn_type = gen.flash_attn_type
        cparams.no_perf = True
        # expected: the shared buffer counted as one sequence (inputs stay within n_ctx), --pooling over the GGUF's
        with _expecting(_OVERFLOW, *((_POOLING_OVERRIDE,) if pooling != "model" else ())):
            ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not ctx:
            log.warning("llama.cpp could not create the embedding context; /v1/embeddings answers 400")
            return EmbeddingInfo(pooling=pooling, n_ctx=n_ctx, n_seq_max=n_seq,
                                 error="llama.cpp could not create an embedding context for this model")
        name = _POOLING_NAMES.get(llama_cpp.llama_pooling_type(ctx), "unknown")
        error = None
        source = "the model's GGUF" if pooling == "model" else f"--pooling {pooling}"
        if name == "none":  # llama-server's words; its native /embedding returns per-token vectors then
            error = (f"Pooling type 'none' is not OAI compatible: no vector per input (pooling from {source}); "
                     "start the server with --pooling mean, cls or last")
        elif name not in ("mean", "cls", "last"):
            error = (f"pooling type {name!r} (from {source}) gives a relevance score per input (a reranker), not an "
                     "embedding vector; start the server with --pooling mean, cls or last")
        if error is not None:
            llama_cpp.llama_free(ctx)
            log.warning("embeddings: %s", error)
            return EmbeddingInfo(pooling=name, n_ctx=n_ctx, n_seq_max=n_seq, error=error)
        self._embd_ctx = ctx
        self._embd_mem = llama_cpp.llama_get_memory(ctx)
        self._embd_batch = llama_cpp.llama_batch_init(n_ctx, 0, 1)
        log.info("embeddings: pooling %s (%s), batches of up to %d tokens and %d inputs", name, source, n_ctx, n_seq)
        return EmbeddingInfo(pooling=name, n_ctx=n_ctx, n_seq_max=n_seq)

    # -- decode -------------------------------------------------------------
    def decode(self, entries: Sequence[BatchEntry]) -> None:
        """One ``llama_decode`` (see :meth:`Runtime.decode`). Validates before calling."""
        n = len(entries)
        if not 0 < n <= self._n_batch:
            raise ValueError(f"batch of {n} tokens (allowed 1..{self._n_batch})")
        b = self._batch
        outputs = []
        rows = {}
        for i, e in enumerate(entries):
            if not 0 <= e.seq_id < self.meta.n_seq_max:
                raise ValueError(f"sequence id {e.seq_id} out of range")
            if not 0 <= e.pos < self.meta.n_ctx_seq:
                raise ValueError(f"position {e.pos} outside the sequence context {self.meta.n_ctx_seq}")
            if not 0 <= e.token < self._n_vocab:
                raise ValueError(f"token id {e.token} out of range")
            b.token[i] = e.token
            b.pos[i] = e.pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = e.seq_id
            b.logits[i] = e.logits
            outputs.append(e.logits)
            if e.logits:
                rows[i] = len(rows)
        b.n_tokens = n
        rc = llama_cpp.llama_decode(self._ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc}")
        self._copying.clear()  # the KV update at the start of llama_decode applied them
        while self._retired:
            llama_cpp.llama_sampler_free(self._retired.pop())
        self._outputs = outputs
        self._rows = rows

    def _check_output(self, index: int) -> None:
        if not (0 <= index < len(self._outputs) and self._outputs[index]):
            raise IndexError(f"batch index {index} has no logits in the last decode")

    def logits(self, index: int) -> np.ndarray:
        self._check_output(index)
        return self._float_view(llama_cpp.llama_get_logits(self._ctx), len(self._rows))[self._rows[index]]

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

    def _float_view(self, ptr: object, n_rows: int) -> np.ndarray:
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
            view = self._views[key] = np.ctypeslib.as_array(ptr, shape=(n_rows, self._n_vocab))  # type: ignore[arg-type]
        return view

    # -- sampling -----------------------------------------------------------
    def new_sampler(self, params: SamplingParams) -> object:
        """The sampler of one sequence: a :class:`~skippy.engine.sampling.vector.SeqSampler`
        (sampled with the step's other rows by ``sample_rows``) when ``vector_sampling`` is on and
        the request needs nothing beyond the common chain (:func:`vectorizable`); else a
        :class:`LlamaSampler`: llama.cpp's chain, plus a grammar or constraint kept apart.

        Chain order is llama.cpp ``common_sampler``'s (see
        :mod:`skippy.engine.sampling.params`). A GBNF grammar is checked the
        way ``common_sampler`` does it: sample from the chain first and test
        only the chosen token; only when the grammar rejects it, apply the
        grammar to the whole vocabulary and sample again. An llguidance
        ``constraint`` is applied as a token mask before the chain (as vLLM
        does). Raises ``ValueError`` when llama.cpp rejects the grammar or
        llguidance the constraint.
        """
        if self.vector_sampling and vectorizable(params):
            return SeqSampler(params, self.meta.eog_ids)
        matcher = None
        if params.constraint is not None:
            from llguidance import LLMatcher

            matcher = LLMatcher(self.vocab.lltokenizer(), params.constraint.grammar, log_level=0,
                                limits=LLG_LIMITS())
            if matcher.is_error():
                raise ValueError(f"the constraint in {params.constraint.param} does not compile")
        grammar = None
        if params.grammar:
            grammar = self.vocab.grammar_sampler(params.grammar, params.grammar_lazy_patterns)
            if not grammar:
                raise ValueError("llama.cpp rejected the grammar")
        chain = self._chain(params)
        eog = sorted(self.meta.eog_ids)
        suppress, until = None, 0
        if params.ignore_eos:
            suppress, until = np.array(eog, dtype=np.int64), -1
        elif params.min_tokens > 0:
            suppress = np.array(sorted(set(eog) | params.stop_token_ids), dtype=np.int64)
            until = params.min_tokens
        stop_id = self.meta.eos_id if self.meta.eos_id in self.meta.eog_ids else (eog[0] if eog else 0)
        return LlamaSampler(chain, grammar, matcher, suppress, until, stop_id)

    def _chain(self, params: SamplingParams) -> object:
        sparams = llama_cpp.llama_sampler_chain_default_params()
        sparams.no_perf = True
        chain = llama_cpp.llama_sampler_chain_init(sparams)
        add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731
        if params.logit_bias:
            arr = (llama_cpp.llama_logit_bias * len(params.logit_bias))()
            for i, (tok, bias) in enumerate(params.logit_bias):
                arr[i].token = tok
                arr[i].bias = bias
            add(llama_cpp.llama_sampler_init_logit_bias(self._n_vocab, len(params.logit_bias), arr))
        if params.penalty_last_n != 0 and (params.repeat_penalty != 1.0 or params.frequency_penalty
                                           or params.presence_penalty):
            add(llama_cpp.llama_sampler_init_penalties(self._n_vocab, params.penalty_last_n, params.repeat_penalty,
                                                       params.frequency_penalty, params.presence_penalty))
        if params.dry_multiplier > 0.0 and params.dry_penalty_last_n != 0:
            breakers = [b.encode() for b in params.dry_sequence_breakers]
            arr = (ctypes.c_char_p * len(breakers))(*breakers)
            add(llama_cpp.llama_sampler_init_dry(self.vocab._vocab, params.dry_multiplier, params.dry_base,
                                                 params.dry_allowed_length, params.dry_penalty_last_n,
                                                 arr, len(breakers)))
        keep = max(1, params.min_keep)
        if params.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        elif params.mirostat == 1:
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_mirostat(self._n_vocab, params.seed, params.mirostat_tau,
                                                      params.mirostat_eta, 100))
        elif params.mirostat == 2:
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_mirostat_v2(params.seed, params.mirostat_tau, params.mirostat_eta))
        else:
            if params.top_n_sigma > 0.0:
                add(llama_cpp.llama_sampler_init_top_n_sigma(params.top_n_sigma))
            if params.top_k > 0:
                add(llama_cpp.llama_sampler_init_top_k(params.top_k))
            if params.typical_p < 1.0:
                add(llama_cpp.llama_sampler_init_typical(params.typical_p, keep))
            add(llama_cpp.llama_sampler_init_top_p(params.top_p, keep))
            add(llama_cpp.llama_sampler_init_min_p(params.min_p, keep))
            if params.xtc_probability > 0.0 and params.xtc_threshold <= 0.5:
                add(llama_cpp.llama_sampler_init_xtc(params.xtc_probability, params.xtc_threshold, keep,
                                                     params.seed))
            if params.dynatemp_range > 0.0:
                add(llama_cpp.llama_sampler_init_temp_ext(params.temperature, params.dynatemp_range,
                                                          params.dynatemp_exponent))
            else:
                add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_dist(params.seed))
        return chain

    def _candidates(self, index: int) -> tuple[np.ndarray, llama_cpp.llama_token_data_array]:
        cand = self._cand
        cand["id"] = self._ids
        cand["logit"] = self.logits(index)
        cand["p"] = 0.0
        cur = llama_cpp.llama_token_data_array(
            data=cand.ctypes.data_as(llama_cpp.llama_token_data_p), size=self._n_vocab, selected=-1, sorted=False)
        return cand, cur

    def _mask(self, s: LlamaSampler, logits: np.ndarray) -> None:
        """The token mask before the chain: the constraint's allowed tokens, then end-of-generation
        suppression unless it would leave nothing (a finished constraint allows only those)."""
        if s.matcher is not None:
            bits = np.frombuffer(s.matcher.compute_bitmask(), dtype=np.uint8)
            allowed = np.unpackbits(bits, bitorder="little")[: self._n_vocab].astype(bool)
            logits[~allowed] = -np.inf
        ids = s.suppressed()
        if ids is not None:
            kept = logits[ids].copy()
            logits[ids] = -np.inf
            if not np.isfinite(logits).any():
                logits[ids] = kept

    def sample(self, sampler: object, index: int) -> int:
        self._check_output(index)
        if isinstance(sampler, SeqSampler):
            return sample_rows(self.logits(index)[None, :], [sampler])[0]
        s: LlamaSampler = sampler  # type: ignore[assignment]
        s.n_sampled += 1
        if s.matcher is not None and s.matcher.is_stopped():
            return s.stop_id  # the constraint is complete (or broken): only end of generation is left
        if s.grammar is None and s.matcher is None and s.suppressed() is None:
            return llama_cpp.llama_sampler_sample(s.chain, self._ctx, index)
        cand, cur = self._candidates(index)
        self._mask(s, cand["logit"])
        llama_cpp.llama_sampler_apply(s.chain, ctypes.byref(cur))
        token = int(cand["id"][cur.selected])
        if s.grammar is not None:
            one = llama_cpp.llama_token_data(id=token, logit=1.0, p=0.0)
            single = llama_cpp.llama_token_data_array(data=ctypes.pointer(one), size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(s.grammar, ctypes.byref(single))
            if single.data[0].logit == float("-inf"):
                cand, cur = self._candidates(index)
                llama_cpp.llama_sampler_apply(s.grammar, ctypes.byref(cur))
                self._mask(s, cand["logit"])
                llama_cpp.llama_sampler_apply(s.chain, ctypes.byref(cur))
                token = int(cand["id"][cur.selected])
            llama_cpp.llama_sampler_accept(s.grammar, token)
        if s.matcher is not None:
            s.matcher.consume_token(token)
        llama_cpp.llama_sampler_accept(s.chain, token)
        return token

    def _probe_backend_sampling(self) -> bool:
        """Whether llama.cpp offloads a greedy chain to the decode graph here (attached to sequence 0, then
        detached again)."""
        try:
            self.set_backend_greedy(0, True)
        except RuntimeError as exc:
            log.info("backend sampling off: %s", exc)
            return False
        self.set_backend_greedy(0, False)
        return True

    def set_backend_greedy(self, seq_id: int, on: bool) -> None:
        """Attach or detach ``seq_id``'s greedy chain (see :meth:`Runtime.set_backend_greedy`). A fresh chain
        per attachment (llama.cpp initializes a chain's backend part once); a detached one is freed after the
        next decode, whose graph no longer holds it."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        if on == (seq_id in self._greedy):
            return
        chain = None
        if on:
            sparams = llama_cpp.llama_sampler_chain_default_params()
            sparams.no_perf = True
            chain = llama_cpp.llama_sampler_chain_init(sparams)
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        else:
            self._retired.append(self._greedy.pop(seq_id))
        if not llama_cpp.llama_set_sampler(self._ctx, seq_id, chain):
            if chain is not None:
                llama_cpp.llama_sampler_free(chain)
            raise RuntimeError("llama.cpp cannot run the greedy sampler in the decode graph on this backend")
        if chain is not None:
            self._greedy[seq_id] = chain

    def sampled_token(self, index: int) -> int:
        self._check_output(index)
        token = llama_cpp.llama_get_sampled_token_ith(self._ctx, index)
        if token < 0:
            raise RuntimeError(f"no backend-sampled token at batch index {index}")
        return int(token)

    def free_sampler(self, sampler: object) -> None:
        if isinstance(sampler, SeqSampler):
            return
        s: LlamaSampler = sampler  # type: ignore[assignment]
        llama_cpp.llama_sampler_free(s.chain)
        if s.grammar is not None:
            llama_cpp.llama_sampler_free(s.grammar)
        s.matcher = None

    # -- KV cache -----------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """``llama_memory_seq_rm``; False when a partial removal is impossible (recurrent models)."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        return bool(llama_cpp.llama_memory_seq_rm(self._mem, seq_id, p0, p1))

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
        return llama_cpp.llama_memory_seq_pos_min(self._mem, seq_id)

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position held for ``seq_id`` in the KV cache, -1 when empty."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        return llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id)

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

    # -- embeddings ---------------------------------------------------------
    def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """One batch on the embedding context (see :meth:`Runtime.embed`): every input is its own sequence,
        every token an output (llama.cpp pools all of a sequence's outputs, and warns and overrides when a
        token is not one); the KV cache is cleared first (``llama_memory_clear``), so inputs never see each
        other or an earlier batch. Returns a new array, shape ``(len(inputs), n_embd)``."""
        info = self.meta.embeddings
        if self._embd_ctx is None or info is None:
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
        out = np.empty((len(inputs), self.meta.n_embd), dtype=np.float32)
        for seq in range(len(inputs)):
            ptr = llama_cpp.llama_get_embeddings_seq(self._embd_ctx, seq)
            if not ptr:
                raise RuntimeError(f"llama.cpp has no pooled embedding for sequence {seq}")
            out[seq] = np.ctypeslib.as_array(ptr, shape=(self.meta.n_embd,))
        return out

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

    def device_problem(self) -> str | None:
        """Why the model can no longer run, else None: an RPC worker holding some of its layers is gone
        (:func:`~skippy.engine.runtime.backends.rpc_connections_alive`; no byte is sent to it).

        llama.cpp cannot lose a worker: its RPC client aborts the whole process
        (``GGML_ABORT("Remote RPC server crashed or returned malformed response")``) at the next
        call that needs the worker, and the layers the worker held are gone. Callers report this
        (``/health`` answers 503) so that a supervisor restarts the set.
        """
        if not self._rpc:
            return None
        lost = [e for e, alive in rpc_connections_alive(self._rpc).items() if not alive]
        if lost:
            return (f"lost the llama.cpp RPC worker{'s' if len(lost) > 1 else ''} {', '.join(lost)} holding layers "
                    "of the model: restart the workers and this server")
        return None

    def close(self) -> None:
        if self._rpc and self._ctx and self.device_problem():
            # freeing RPC buffers talks to the workers; llama.cpp aborts when one is gone: leave them to the OS
            log.warning("not freeing the model: %s", self.device_problem())
            self._ctx = None
            return
        if self._embd_ctx is not None:
            llama_cpp.llama_batch_free(self._embd_batch)
            llama_cpp.llama_free(self._embd_ctx)
            self._embd_ctx = None
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            for chain in [*self._greedy.values(), *self._retired]:  # after the context, which may point at them
                llama_cpp.llama_sampler_free(chain)
            self._greedy.clear()
            self._retired.clear()
            llama_cpp.llama_model_free(self._model)
            self._ctx = None
