"""What a :class:`~skippy.engine.runtime.llama.LlamaRuntime` is asked for and how llama.cpp is told:
:class:`RuntimeConfig` (every option, checked once), the names of llama.cpp's enums as llama-server's
flags give them (:data:`FLASH_ATTN`, :data:`CACHE_TYPES`, :data:`POOLING`), and the model and
context parameters made from them (:func:`_model_params`, :func:`_seq_context`,
:func:`_context_params`).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs
import llama_cpp

from skippy.engine.runtime.backends import SPLIT_MODES

if TYPE_CHECKING:
    from skippy.engine.config import EngineConfig
    from skippy.engine.runtime.backends import Offload
    from skippy.engine.runtime.overrides import KVOverride


#: ``flash_attn`` names -> llama.cpp ``llama_flash_attn_type`` values
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}

#: KV cache type names (llama-server's ``--cache-type-k`` values) -> ``ggml_type`` enum values
CACHE_TYPES = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16, "bf16": 30,
               "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0,
               "q4_1": llama_cpp.GGML_TYPE_Q4_1, "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL,
               "q5_0": llama_cpp.GGML_TYPE_Q5_0, "q5_1": llama_cpp.GGML_TYPE_Q5_1}

#: ``numa`` names (llama-server's ``--numa`` values) -> ``ggml_numa_strategy`` values
NUMA = {"disabled": llama_cpp.GGML_NUMA_STRATEGY_DISABLED, "distribute": llama_cpp.GGML_NUMA_STRATEGY_DISTRIBUTE,
        "isolate": llama_cpp.GGML_NUMA_STRATEGY_ISOLATE, "numactl": llama_cpp.GGML_NUMA_STRATEGY_NUMACTL}

#: ``rope_scaling`` names (llama-server's ``--rope-scaling``; ``model``: the GGUF's) -> ``llama_rope_scaling_type``
ROPE_SCALING = {"model": llama_cpp.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, "none": llama_cpp.LLAMA_ROPE_SCALING_TYPE_NONE,
                "linear": llama_cpp.LLAMA_ROPE_SCALING_TYPE_LINEAR, "yarn": llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN}


def load_mode(mmap: bool, mlock: bool) -> int:
    """``llama_model_params.load_mode`` of llama-server's ``--no-mmap`` / ``--mlock`` (mmap on, mlock off:
    llama.cpp's default, ``LLAMA_LOAD_MODE_AUTO``; the pinned llama.cpp has this enum instead of the
    ``use_mmap`` / ``use_mlock`` booleans)."""
    if mmap and not mlock:
        return int(llama_cpp.LLAMA_LOAD_MODE_AUTO)
    if mmap:
        return int(llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK)
    return int(llama_cpp.LLAMA_LOAD_MODE_MLOCK if mlock else llama_cpp.LLAMA_LOAD_MODE_NONE)


#: ``pooling`` names (llama-server's ``--pooling`` values; ``model``: the GGUF's, llama.cpp's
#: ``LLAMA_POOLING_TYPE_UNSPECIFIED``) -> ``llama_pooling_type`` values
POOLING = {"model": -1, "none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
_POOLING_NAMES = {v: k for k, v in POOLING.items() if v >= 0}


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


def _floats(values: Iterable[float]) -> tuple[float, ...]:
    return tuple(values)


def _strs(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _kv_overrides(values: str | KVOverride | Iterable[str | KVOverride] | None) -> tuple[KVOverride, ...]:
    from skippy.engine.runtime.overrides import parse_kv_overrides

    return parse_kv_overrides(values)  # ValueError for an item it refuses


@attrs.frozen
class RuntimeConfig:
    """Every option of a :class:`~skippy.engine.runtime.llama.LlamaRuntime`, checked once when made,
    before anything loads (a refused option must not leak a model).

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
    ``n_swa`` positions per sequence, see :meth:`~skippy.engine.runtime.kv.KVStateMixin.seq_pos_min`).
    ``name``: the model's name in :class:`~skippy.engine.runtime.base.ModelMeta` (default: the file
    name without its extension); ``verbose``: all of llama.cpp's log. ``vector_sampling`` samples
    requests without a grammar with :mod:`skippy.engine.sampling.vector` (all of a step's rows at
    once; the same chain and random stream as llama.cpp's); ``False`` keeps llama.cpp's
    sampler chain for every request (for comparisons). ``embeddings``, ``pooling`` (:data:`POOLING`)
    and ``embeddings_batch``: the embedding context beside the generation one (llama-server's
    ``--embeddings``, ``--pooling``, and its batch in tokens).
    ``n_gpu_layers``, ``split_mode``, ``main_gpu``, ``tensor_split``, ``devices`` and ``rpc`` are
    llama-server's ``-ngl``, ``--split-mode``, ``--main-gpu``, ``--tensor-split``, ``--device`` and
    ``--rpc`` (:func:`~skippy.engine.runtime.backends.plan_offload`).
    ``backend_sampling`` lets the scheduler sample plain greedy sequences inside llama.cpp's decode graph
    (llama-server's ``--backend-sampling``).

    ``n_ubatch``: llama.cpp's physical batch (``-ub``; ``None``: ``n_batch``, never more).
    ``override_tensor``: ``PATTERN=BUFFER`` tensor buffer overrides (``-ot``, and ``-cmoe`` / ``-ncmoe``
    made into them by :meth:`from_engine_config`; :mod:`~skippy.engine.runtime.overrides`);
    ``n_cpu_moe`` is kept to check it against the model's layers. ``kv_overrides``: GGUF metadata
    overrides (llama-server's ``--override-kv``; ``KEY=TYPE:VALUE`` strings or
    :class:`~skippy.engine.runtime.overrides.KVOverride` objects, made into the latter). ``mmap`` /
    ``mlock``: the load mode (:func:`load_mode`); ``numa``: :data:`NUMA`; ``rope_scaling`` (:data:`ROPE_SCALING`),
    ``rope_freq_base``, ``rope_freq_scale`` and the ``yarn_*`` values go to the context as they are
    (0, -1 or ``model``: the GGUF's), as llama-server's ``--rope-*`` / ``--yarn-*`` flags.
    ``mmproj``: the multimodal projector GGUF (llama-server's ``--mmproj``; ``None``: text only),
    on the GPU unless ``mmproj_offload`` is off (:mod:`~skippy.engine.runtime.media`).
    ``lora``: LoRA adapter GGUFs loaded onto the model, ids in this order (llama-server's ``--lora``;
    :mod:`~skippy.engine.runtime.lora`); their scales are the scheduler's, per step.

    Raises ``ValueError`` for an unknown ``flash_attn``, cache type, ``pooling``, ``numa`` or
    ``rope_scaling``, an ``override_tensor`` that is not ``PATTERN=BUFFER`` with a valid pattern, a
    ``kv_overrides`` item :func:`~skippy.engine.runtime.overrides.parse_kv_override` refuses, an
    ``embeddings_batch`` below 1 with ``embeddings``, or a quantized ``type_v`` with
    ``flash_attn="off"`` (llama.cpp refuses it).
    """

    n_ctx_seq: int = 2048
    n_seq_max: int = 16
    n_batch: int = 512
    n_threads: int | None = None
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    kv_unified: bool = False
    swa_full: bool = False
    name: str | None = None
    verbose: bool = False
    vector_sampling: bool = True
    embeddings: bool = False
    pooling: str = "model"
    embeddings_batch: int = 512
    n_gpu_layers: int | None = None
    split_mode: str = "layer"
    main_gpu: int = 0
    tensor_split: tuple[float, ...] = attrs.field(default=(), converter=_floats)
    devices: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    rpc: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    backend_sampling: bool = False
    n_ubatch: int | None = None
    override_tensor: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    n_cpu_moe: int = 0
    kv_overrides: tuple[KVOverride, ...] = attrs.field(default=(), converter=_kv_overrides)
    mmap: bool = True
    mlock: bool = False
    repack: bool = True
    numa: str = "disabled"
    rope_scaling: str = "model"
    rope_freq_base: float = 0.0
    rope_freq_scale: float = 0.0
    yarn_orig_ctx: int = 0
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = -1.0
    yarn_beta_slow: float = -1.0
    yarn_beta_fast: float = -1.0
    mmproj: str | None = None
    mmproj_offload: bool = True
    image_min_tokens: int | None = None
    image_max_tokens: int | None = None
    lora: tuple[str, ...] = attrs.field(default=(), converter=_strs)

    def __attrs_post_init__(self) -> None:
        if self.numa not in NUMA:
            raise ValueError(f"numa must be one of {sorted(NUMA)}, not {self.numa!r}")
        if self.rope_scaling not in ROPE_SCALING:
            raise ValueError(f"rope_scaling must be one of {sorted(ROPE_SCALING)}, not {self.rope_scaling!r}")
        from skippy.engine.runtime.overrides import parse_overrides

        parse_overrides(self.override_tensor)  # ValueError for a bad pattern; the buffer is checked at load
        if self.pooling not in POOLING:
            raise ValueError(f"pooling must be one of {sorted(POOLING)}, not {self.pooling!r}")
        if self.embeddings and self.embeddings_batch < 1:
            raise ValueError(f"embeddings_batch must be >= 1, not {self.embeddings_batch}")
        if self.flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash_attn must be one of {sorted(FLASH_ATTN)}, not {self.flash_attn!r}")
        for what, t in (("type_k", self.type_k), ("type_v", self.type_v)):
            if t not in CACHE_TYPES:
                raise ValueError(f"{what} must be one of {sorted(CACHE_TYPES)}, not {t!r}")
        if self.flash_attn == "off" and _ggml_base().ggml_is_quantized(CACHE_TYPES[self.type_v]):
            raise ValueError(f"a quantized V cache ({self.type_v}) needs flash attention (auto or on)")

    @classmethod
    def from_engine_config(cls, config: EngineConfig) -> RuntimeConfig:
        """The runtime options of an engine's settings (``--n-ctx`` is per sequence, ``--parallel`` the
        sequences, ``--cache-type-k`` / ``-v`` the KV types, ``--device`` the devices, ``--reranking`` the
        embedding context with rank pooling (llama-server's ``--embedding --pooling rank``)...; ``-ot`` then
        ``-cmoe`` / ``-ncmoe`` as tensor overrides, in that order; ``--rope-scale N`` as a frequency
        scale of 1/N, as llama-server; ``-ub`` above ``-b`` clamped to ``-b``, as llama.cpp does)."""
        from skippy.engine.runtime.overrides import moe_overrides

        freq_scale = 1.0 / config.rope_scale if config.rope_scale > 0 else config.rope_freq_scale
        n_ubatch = None if config.n_ubatch is None else min(config.n_ubatch, config.n_batch)  # llama.cpp's clamp
        return cls(n_ubatch=n_ubatch,
                   override_tensor=(*config.override_tensor, *moe_overrides(config.cpu_moe, config.n_cpu_moe)),
                   n_cpu_moe=config.n_cpu_moe, kv_overrides=config.override_kv, mmap=config.mmap, mlock=config.mlock,
                   repack=config.repack, numa=config.numa,
                   rope_scaling=config.rope_scaling, rope_freq_base=config.rope_freq_base, rope_freq_scale=freq_scale,
                   yarn_orig_ctx=config.yarn_orig_ctx, yarn_ext_factor=config.yarn_ext_factor,
                   yarn_attn_factor=config.yarn_attn_factor, yarn_beta_slow=config.yarn_beta_slow,
                   yarn_beta_fast=config.yarn_beta_fast, mmproj=config.mmproj, mmproj_offload=config.mmproj_offload,
                   image_min_tokens=config.image_min_tokens, image_max_tokens=config.image_max_tokens,
                   lora=tuple(path for path, _ in config.lora),
                   n_ctx_seq=config.n_ctx, n_seq_max=config.parallel, n_batch=config.n_batch,
                   n_threads=config.threads, flash_attn=config.flash_attn, type_k=config.cache_type_k,
                   type_v=config.cache_type_v, kv_unified=config.kv_unified, swa_full=config.swa_full,
                   name=config.model_name or None, verbose=config.verbose,
                   embeddings=config.embeddings or config.reranking,
                   pooling="rank" if config.reranking else config.pooling, embeddings_batch=config.embeddings_batch,
                   n_gpu_layers=config.n_gpu_layers, split_mode=config.split_mode, main_gpu=config.main_gpu,
                   tensor_split=config.tensor_split, devices=config.device, rpc=config.rpc,
                   backend_sampling=config.backend_sampling)


def _model_params(offload: Offload, config: RuntimeConfig | None = None) -> tuple[llama_cpp.llama_model_params,
                                                                                  list[object]]:
    """llama.cpp's model parameters for an offload plan (layers on the devices, split mode, main device,
    tensor split, the devices asked for) and ``config``'s load mode (``--no-mmap``, ``--mlock``), weight repacking
    (``--no-repack``: ``use_extra_bufts``), tensor
    overrides (``-ot``, ``-cmoe``, ``-ncmoe``) and metadata overrides (``--override-kv``), and the ctypes
    arrays they point into: keep those alive as long as the model. Raises ``ValueError`` for an override
    naming an unknown buffer type."""
    from skippy.engine.runtime.overrides import kv_override_array, override_array

    mparams = llama_cpp.llama_model_default_params()
    keep: list[object] = []
    if config is not None:
        mparams.load_mode = load_mode(config.mmap, config.mlock)
        mparams.use_extra_bufts = config.repack  # llama-server's --no-repack: False
        array, refs = override_array(config.override_tensor)
        if array is not None:
            mparams.tensor_buft_overrides = ctypes.cast(array, ctypes.c_void_p)
            keep += refs
        kv = kv_override_array(config.kv_overrides)
        if kv is not None:  # llama.cpp reads it up to the element with an empty key
            mparams.kv_overrides = kv
            keep.append(kv)
    mparams.n_gpu_layers = offload.n_gpu_layers
    mparams.split_mode = SPLIT_MODES[offload.split_mode]
    mparams.main_gpu = offload.main_gpu
    if offload.tensor_split:  # llama.cpp reads llama_max_devices() floats
        n_max = llama_cpp.llama_max_devices()
        split = (ctypes.c_float * n_max)(*offload.tensor_split[:n_max])
        mparams.tensor_split = split
        keep.append(split)
    if offload.explicit:  # --device: a NULL-terminated list (only NULL: no offload)
        devs = (ctypes.c_void_p * (len(offload.requested) + 1))(*[d.handle for d in offload.requested], None)
        mparams.devices = ctypes.cast(devs, ctypes.c_void_p)
        keep.append(devs)
    return mparams, keep


def _seq_context(n_ctx_seq: int, n_ctx_train: int) -> int:
    """The cells of one sequence: ``n_ctx_seq`` clamped to the training context ``n_ctx_train`` (``0``:
    the training context, else 4096), rounded up to a multiple of 256 as llama.cpp pads a stream."""
    if n_ctx_seq <= 0:  # llama-server -c 0: the training context
        n_ctx_seq = n_ctx_train if n_ctx_train > 0 else 4096
    elif n_ctx_train > 0:
        n_ctx_seq = min(n_ctx_seq, n_ctx_train)
    return -(-n_ctx_seq // 256) * 256  # llama.cpp pads a stream to 256 cells; unified mode alike


def _context_params(config: RuntimeConfig, n_ctx_seq: int) -> llama_cpp.llama_context_params:
    """llama.cpp's parameters of the generation context: ``n_ctx_seq`` cells for each of the
    ``config.n_seq_max`` sequences, the batch, the KV cache layout and types, threads, flash attention."""
    cparams: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    cparams.n_ctx = n_ctx_seq * config.n_seq_max
    cparams.n_batch = config.n_batch
    cparams.n_ubatch = min(config.n_ubatch or config.n_batch, config.n_batch)  # llama.cpp clamps it so too
    cparams.n_seq_max = config.n_seq_max
    cparams.rope_scaling_type = ROPE_SCALING[config.rope_scaling]
    cparams.rope_freq_base = config.rope_freq_base
    cparams.rope_freq_scale = config.rope_freq_scale
    cparams.yarn_orig_ctx = config.yarn_orig_ctx
    cparams.yarn_ext_factor = config.yarn_ext_factor
    cparams.yarn_attn_factor = config.yarn_attn_factor
    cparams.yarn_beta_slow = config.yarn_beta_slow
    cparams.yarn_beta_fast = config.yarn_beta_fast
    cparams.kv_unified = config.kv_unified
    cparams.swa_full = config.swa_full  # llama.cpp's context default is True; llama-server's (common) is False
    cparams.type_k = CACHE_TYPES[config.type_k]
    cparams.type_v = CACHE_TYPES[config.type_v]
    threads = config.n_threads or os.cpu_count() or 1
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    cparams.no_perf = True
    cparams.flash_attn_type = FLASH_ATTN[config.flash_attn]
    return cparams
