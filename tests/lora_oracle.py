"""llama.cpp's own LoRA result, as the reference for the adapter tests (llama-server's ``--lora``).

:func:`lora_logits` loads a model with llama-cpp-python's low-level API (one sequence, n_ctx 512), loads the
adapters with ``llama_adapter_lora_init``, applies them with ``llama_set_adapters_lora`` at the given scales
(none: the base model), decodes the prompt's token ids in one batch and returns the logits of its last
position. With random adapter weights the text means nothing, so the tests compare these logits (or the
logprobs made from them) with what the server computes.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

N_CTX = 512


def lora_logits(model_path: str | Path, tokens: Sequence[int], adapters: Sequence[tuple[str | Path, float]] = (),
                n_threads: int = 2) -> np.ndarray:
    """The last position's logits (float32, ``(n_vocab,)``) of ``tokens`` under ``adapters`` (path, scale)."""
    import llama_cpp

    from skippy.engine.runtime.llama import _init_backend

    _init_backend(False)
    model = llama_cpp.llama_model_load_from_file(os.fsencode(model_path), llama_cpp.llama_model_default_params())
    assert model, model_path
    handles: list[object] = []
    ctx = None
    try:
        for path, _ in adapters:
            handle = llama_cpp.llama_adapter_lora_init(model, os.fsencode(path))
            assert handle, path
            handles.append(handle)
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = N_CTX, N_CTX, N_CTX, 1
        cp.n_threads = cp.n_threads_batch = n_threads
        ctx = llama_cpp.llama_init_from_model(model, cp)
        assert ctx
        n = len(handles)
        if n:
            arr = (llama_cpp.llama_adapter_lora_p_ctypes * n)(*handles)
            scales = (ctypes.c_float * n)(*[s for _, s in adapters])
            assert llama_cpp.llama_set_adapters_lora(ctx, arr, n, scales) == 0
        ids = (llama_cpp.llama_token * len(tokens))(*tokens)
        assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(ids, len(tokens))) == 0
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()
    finally:
        if ctx:
            llama_cpp.llama_free(ctx)
        for handle in handles:
            llama_cpp.llama_adapter_lora_free(handle)
        llama_cpp.llama_model_free(model)


def logprobs(logits: np.ndarray) -> np.ndarray:
    """Natural-log softmax of ``logits`` (float64)."""
    x = logits.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))
