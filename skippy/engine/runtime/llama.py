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

This module loads the model and its contexts (:class:`LlamaRuntime`'s constructor) and frees them;
the rest of the runtime is one module per concern, whose names are re-exported here:

- :mod:`~skippy.engine.runtime.params`: :class:`RuntimeConfig` (the options) and the llama.cpp model
  and context parameters;
- :mod:`~skippy.engine.runtime.load`: the backend, llama.cpp's log, the KV cache lines of a new context;
- :mod:`~skippy.engine.runtime.vocab`: the vocabulary (:class:`LlamaVocab`);
- :mod:`~skippy.engine.runtime.decode`: decode and logits (:class:`~skippy.engine.runtime.decode.DecodeMixin`);
- :mod:`~skippy.engine.runtime.samplers`: sampler chains (:class:`LlamaSampler`,
  :class:`~skippy.engine.runtime.samplers.SamplerMixin`);
- :mod:`~skippy.engine.runtime.kv`: KV cache and sequence state (:func:`kv_cache_size`,
  :class:`~skippy.engine.runtime.kv.KVStateMixin`).
"""

from __future__ import annotations

import os
from typing import Any

import attrs
import llama_cpp
import numpy as np

from skippy.engine.runtime.backends import plan_offload, rpc_connections_alive
from skippy.engine.runtime.base import EmbeddingInfo, FimTokens, KVCacheInfo, ModelMeta, RerankFormat
from skippy.engine.runtime.decode import BatchColumns, DecodeMixin
from skippy.engine.runtime.kv import STATE_COPY_FRACTION, KVStateMixin, _meta_int, _meta_str, generates, kv_cache_size
from skippy.engine.runtime.load import (
    _OVERFLOW,
    _POOLING_OVERRIDE,
    _expecting,
    _init_backend,
    _kv_caches,
    log,
)
from skippy.engine.runtime.lora import LoraMixin, free_adapters, load_adapters
from skippy.engine.runtime.media import MediaSpan, Projector
from skippy.engine.runtime.overrides import unmatched_overrides
from skippy.engine.runtime.params import (
    _POOLING_NAMES,
    CACHE_TYPES,
    FLASH_ATTN,
    NUMA,
    POOLING,
    RuntimeConfig,
    _context_params,
    _model_params,
    _seq_context,
)
from skippy.engine.runtime.samplers import LlamaSampler, SamplerMixin
from skippy.engine.runtime.vocab import LLG_LIMITS, LlamaVocab

__all__ = ["CACHE_TYPES", "FLASH_ATTN", "LLG_LIMITS", "POOLING", "STATE_COPY_FRACTION", "LlamaRuntime",
           "LlamaSampler", "LlamaVocab", "RuntimeConfig", "kv_cache_size"]


def _load_info(config: RuntimeConfig, ctx: llama_cpp.llama_context_p, mparams: llama_cpp.llama_model_params) \
        -> dict[str, Any]:
    """``ModelMeta.load``: the context's batch sizes as llama.cpp took them, the load mode by llama.cpp's name,
    weight repacking (``--no-repack``), and the placement, NUMA, metadata overrides (``KEY=TYPE:VALUE``), RoPE
    and YaRN settings the model was loaded with (0 / -1 / ``model``: the GGUF's)."""
    mode = llama_cpp.llama_load_mode_name(mparams.load_mode)
    return {"n_batch": llama_cpp.llama_n_batch(ctx), "n_ubatch": llama_cpp.llama_n_ubatch(ctx),
            "load_mode": mode.decode() if mode else str(mparams.load_mode), "mmap": config.mmap,
            "mlock": config.mlock, "repack": bool(mparams.use_extra_bufts), "numa": config.numa,
            "override_tensor": list(config.override_tensor),
            "kv_overrides": [str(o) for o in config.kv_overrides],
            "n_cpu_moe": config.n_cpu_moe, "rope_scaling": config.rope_scaling,
            "rope_freq_base": config.rope_freq_base, "rope_freq_scale": config.rope_freq_scale,
            "yarn_orig_ctx": config.yarn_orig_ctx, "yarn_ext_factor": config.yarn_ext_factor,
            "yarn_attn_factor": config.yarn_attn_factor, "yarn_beta_slow": config.yarn_beta_slow,
            "yarn_beta_fast": config.yarn_beta_fast}


class LlamaRuntime(DecodeMixin, SamplerMixin, KVStateMixin, LoraMixin):
    """A llama.cpp model + context (see module docstring).

    ``config`` (a :class:`RuntimeConfig`) holds the options; keyword ``options`` are its fields
    (``LlamaRuntime(path, n_ctx_seq=512, n_seq_max=2)``) and, with a ``config``, replace its values.
    :attr:`config` is what it was made with. Raises ``ValueError`` for a refused option
    (:class:`RuntimeConfig`) and, from
    :func:`~skippy.engine.runtime.backends.plan_offload`, for a device this build lacks, and
    ``ConnectionError`` for an RPC worker that does not answer, all before loading anything;
    ``RuntimeError`` when the model or context cannot be created.
    Logs the KV cache size at start-up (total and per sequence, MiB), as llama-server does.
    ``meta.devices`` reports the backends, the devices and the offload. With ``backend_sampling``,
    the scheduler may sample sequences inside llama.cpp's decode graph (:meth:`set_backend_sampler`);
    ``meta.backend_sampling`` says whether llama.cpp took a greedy chain (it refuses with ``--split-mode
    tensor``), ``meta.backend_sampled`` whether it also samples a sampled chain there (a probe decode of
    one token at load). ``config.lora``'s adapters are loaded onto the model before its context
    (``ValueError`` naming the file for one llama.cpp refuses, the model freed); ``meta.lora`` lists their
    paths, and :meth:`set_lora` applies a set of them to the context.
    """

    def __init__(self, path: str, config: RuntimeConfig | None = None, **options: Any) -> None:
        # before loading: a refused option must not leak the model (RuntimeConfig checks them all)
        config = RuntimeConfig(**options) if config is None else attrs.evolve(config, **options)
        self.config = config
        n_seq_max, n_batch, type_k, type_v = config.n_seq_max, config.n_batch, config.type_k, config.type_v
        kv_unified, swa_full = config.kv_unified, config.swa_full
        _init_backend(config.verbose, NUMA[config.numa])
        offload = plan_offload(n_gpu_layers=config.n_gpu_layers, split_mode=config.split_mode,
                               main_gpu=config.main_gpu, tensor_split=config.tensor_split,
                               device_names=config.devices, rpc=config.rpc)
        self._rpc = offload.rpc
        mparams, arrays = _model_params(offload, config)  # ValueError: an -ot buffer type this build lacks
        for override in unmatched_overrides(config.override_tensor, path):
            raise ValueError(f"--override-tensor {override}: the pattern matches no tensor of {path}")
        self._model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
        self._model_arrays = arrays  # what mparams pointed into (-ot patterns, --override-kv), kept with the model
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load model {path!r}")
        n_layer = llama_cpp.llama_model_n_layer(self._model)
        if config.n_cpu_moe > n_layer:
            llama_cpp.llama_model_free(self._model)
            raise ValueError(f"--n-cpu-moe {config.n_cpu_moe}: the model has only {n_layer} layers")
        self._lora: list[object] = []
        try:  # before the context: a refused adapter costs no KV cache
            self._lora = load_adapters(self._model, config.lora)
        except ValueError:
            llama_cpp.llama_model_free(self._model)
            raise
        vocab = llama_cpp.llama_model_get_vocab(self._model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)
        n_ctx_seq = _seq_context(config.n_ctx_seq, n_ctx_train)
        if 0 < n_ctx_train < config.n_ctx_seq:
            log.warning("the context asked for (%d tokens per sequence) is beyond the model's training context: each "
                        "sequence gets %d tokens", config.n_ctx_seq, n_ctx_seq)
        cparams = _context_params(config, n_ctx_seq)
        # unified, llama.cpp takes the whole buffer for one sequence's context and warns past the training
        # context; each sequence still stays within n_ctx_seq (the KV cache line below says so)
        buffer_warned = kv_unified and 0 < n_ctx_train < n_ctx_seq * n_seq_max and n_ctx_seq <= n_ctx_train
        with _expecting(*((_OVERFLOW,) if buffer_warned else ())):
            self._ctx, caches, errors = _kv_caches(lambda: llama_cpp.llama_init_from_model(self._model, cparams))
        if not self._ctx:
            free_adapters(self._lora)
            llama_cpp.llama_model_free(self._model)
            why = errors[-1].removeprefix("llama_init_from_model: ") if errors else "out of memory?"
            raise RuntimeError(f"llama.cpp could not create a context ({why})")
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
        self._batch_columns = BatchColumns.over(self._batch, n_batch)
        self._outputs: list[bool] = []
        self._rows: dict[int, int] = {}  # batch index -> row of llama_get_logits, of the last decode
        self._backend: dict[int, object] = {}  # seq_id -> the backend sampler chain attached to it
        self._accepting: set[int] = set()  # those whose chain takes each token it sampled (dist, penalties)
        self._retired: list[object] = []  # detached chains, freed after the next decode (its graph drops them)
        self.vector_sampling = config.vector_sampling
        self._cand = np.zeros(n_vocab, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self.vocab = LlamaVocab(vocab, n_vocab)
        tmpl = llama_cpp.llama_model_chat_template(self._model, None)
        bos = llama_cpp.llama_vocab_bos(vocab)
        eos = llama_cpp.llama_vocab_eos(vocab)
        eog = frozenset(t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t))
        self.meta = ModelMeta(
            name=config.name or os.path.splitext(os.path.basename(path))[0],
            path=path,
            chat_template=tmpl.decode("utf-8", errors="replace") if tmpl else None,
            bos_id=bos, eos_id=eos, eog_ids=eog,
            bos_token=self.vocab.special_piece(bos).decode("utf-8", errors="replace") if bos >= 0 else "",
            eos_token=self.vocab.special_piece(eos).decode("utf-8", errors="replace") if eos >= 0 else "",
            n_vocab=n_vocab, n_ctx_train=n_ctx_train,
            n_ctx_seq=n_ctx_seq,
            n_seq_max=llama_cpp.llama_n_seq_max(self._ctx),
            n_batch=n_batch,
            generates=generates(self._model),
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
            embeddings=self._embedding_context(cparams, config.pooling, config.embeddings_batch, n_ctx_train)
            if config.embeddings             else None,
            load=_load_info(config, self._ctx, mparams),
            lora=tuple(config.lora),
            can_shift=bool(llama_cpp.llama_memory_can_shift(self._mem)),
        )
        self.media: Projector | None = None
        if config.mmproj:
            try:
                self.media = Projector(config.mmproj, self._model, use_gpu=config.mmproj_offload,
                                       n_threads=config.n_threads or os.cpu_count() or 1,
                                       verbose=config.verbose, image_min_tokens=config.image_min_tokens,
                                       image_max_tokens=config.image_max_tokens)
            except RuntimeError:
                self.close()
                raise
            self.meta = attrs.evolve(self.meta, vision=True)
        if config.backend_sampling:
            greedy, sampled = self._probe_backend_sampling()
            self.meta = attrs.evolve(self.meta, backend_sampling=greedy, backend_sampled=sampled)
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
        source = "the model's GGUF" if pooling == "model" else ("--reranking" if pooling == "rank" else
                                                                  f"--pooling {pooling}")
        if name == "none":  # llama-server's words; its native /embedding returns per-token vectors then
            error = (f"Pooling type 'none' is not OAI compatible: no vector per input (pooling from {source}); "
                     "start the server with --pooling mean, cls or last")
        elif name == "rank":
            error = (f"this server reranks (pooling type 'rank', from {source}): a reranker gives a relevance "
                     "score per query-document pair (POST /v1/rerank), not an embedding vector; for embeddings "
                     "start the server with --embeddings --pooling mean, cls or last, without --reranking")
        elif name not in ("mean", "cls", "last"):
            error = f"pooling type {name!r} (from {source}) is not one this server can serve"
        if error is not None and name not in ("rank", "none"):
            llama_cpp.llama_free(ctx)
            log.warning("embeddings: %s", error)
            return EmbeddingInfo(pooling=name, n_ctx=n_ctx, n_seq_max=n_seq, error=error)
        self._embd_ctx = ctx
        self._embd_mem = llama_cpp.llama_get_memory(ctx)
        self._embd_batch = llama_cpp.llama_batch_init(n_ctx, 0, 1)
        if name == "rank":
            return self._reranking(n_ctx, n_seq, source, error)
        if name == "none":
            log.info("embeddings: pooling none (%s): POST /embedding answers a vector per token, batches of up to "
                     "%d tokens and %d inputs; /v1/embeddings answers 400", source, n_ctx, n_seq)
            return EmbeddingInfo(pooling=name, n_ctx=n_ctx, n_seq_max=n_seq, error=error,
                                 n_out=llama_cpp.llama_model_n_embd_out(self._model))
        log.info("embeddings: pooling %s (%s), batches of up to %d tokens and %d inputs", name, source, n_ctx, n_seq)
        return EmbeddingInfo(pooling=name, n_ctx=n_ctx, n_seq_max=n_seq, n_out=llama_cpp.llama_model_n_embd_out(
            self._model))

    def _reranking(self, n_ctx: int, n_seq: int, source: str, error: str | None) -> EmbeddingInfo:
        """The :class:`EmbeddingInfo` of an embedding context with rank pooling: ``n_cls_out`` floats per pair
        (the score first, as llama-server reads it) and the vocabulary's :class:`RerankFormat`. A model whose
        GGUF declares another pooling gets a warning: llama.cpp's rank pooling runs its classification head
        (``cls`` / ``cls.output``) and, on a model without one, pools a hidden state whose first float means
        nothing (measured on SmolLM2: no error, a number)."""
        vocab = llama_cpp.llama_model_get_vocab(self._model)
        tmpl = llama_cpp.llama_model_chat_template(self._model, b"rerank")
        eos = llama_cpp.llama_vocab_eos(vocab)
        if eos < 0:  # llama-server: SEP stands in for a missing EOS
            eos = llama_cpp.llama_vocab_sep(vocab)
        fmt = RerankFormat(
            template=tmpl.decode("utf-8", errors="replace") if tmpl else None,
            bos=llama_cpp.llama_vocab_bos(vocab) if llama_cpp.llama_vocab_get_add_bos(vocab) else None,
            eos=eos if llama_cpp.llama_vocab_get_add_eos(vocab) and eos >= 0 else None,
            sep=llama_cpp.llama_vocab_sep(vocab) if llama_cpp.llama_vocab_get_add_sep(vocab) else None)
        fmt = attrs.evolve(fmt, **{k: None for k in ("bos", "sep") if (getattr(fmt, k) or 0) < 0})  # no such token
        arch = _meta_str(self._model, "general.architecture") or ""
        declared = _meta_int(self._model, f"{arch}.pooling_type")
        if declared != POOLING["rank"]:
            log.warning("reranking: the GGUF declares pooling type %s, not rank: scores come from llama.cpp's rank "
                        "pooling of this model as it is, meaningless unless it has a classification head",
                        _POOLING_NAMES.get(declared, "none") if declared is not None else "none")
        n_out = max(1, int(llama_cpp.llama_model_n_cls_out(self._model)))
        log.info("reranking: pooling rank (%s), %s, batches of up to %d tokens and %d pairs", source,
                 "the GGUF's rerank template" if fmt.template else "pairs as [BOS] query [EOS] [SEP] document [EOS]",
                 n_ctx, n_seq)
        return EmbeddingInfo(pooling="rank", n_ctx=n_ctx, n_seq_max=n_seq, error=error, n_out=n_out, rerank=fmt)

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

    def decode_media(self, span: MediaSpan, seq_id: int) -> None:
        """Put the image of ``span`` in sequence ``seq_id``'s KV cache from its first position ``span.pos``
        (the projector's encoder, then a ``llama_decode`` of its embeddings: :meth:`Projector.decode`). Decode
        thread only; raises ``RuntimeError`` when no projector is loaded or libmtmd fails."""
        if self.media is None:
            raise RuntimeError("an image in a prompt, but no --mmproj projector is loaded")
        self.media.decode(self._ctx, span.chunk, span.pos, seq_id, self._n_batch)
        self._outputs, self._rows = [], {}

    def close(self) -> None:
        if self._rpc and self._ctx and self.device_problem():
            # freeing RPC buffers talks to the workers; llama.cpp aborts when one is gone: leave them to the OS
            log.warning("not freeing the model: %s", self.device_problem())
            self._ctx = None
            return
        if getattr(self, "media", None) is not None:
            self.media.close()  # type: ignore[union-attr]
            self.media = None
        if self._embd_ctx is not None:
            llama_cpp.llama_batch_free(self._embd_batch)
            llama_cpp.llama_free(self._embd_ctx)
            self._embd_ctx = None
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            for chain in [*self._backend.values(), *self._retired]:  # after the context, which may point at them
                llama_cpp.llama_sampler_free(chain)
            self._backend.clear()
            self._accepting.clear()
            self._retired.clear()
            free_adapters(self._lora)
            llama_cpp.llama_model_free(self._model)
            self._ctx = None
