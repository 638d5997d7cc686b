"""The benchmarks' GPU-like stand-in (:func:`tests.tiny_models.write_tiny_dense`) as llama.cpp loads it:
a dense ``llama`` whose greedy generation never picks a special token, so every benchmark request runs
to ``max_tokens``."""

from __future__ import annotations

import numpy as np
import pytest

from skippy.engine.runtime.base import BatchEntry
from tests.tiny_models import default_tokenizer_source, ensure_tiny

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not default_tokenizer_source().is_file(),
                                 reason="default model not downloaded (skippy pull): the tiny model's vocabulary")]


def test_greedy_generation_on_the_dense_model_never_reaches_a_special_token(tmp_path) -> None:
    from skippy.engine.runtime.llama import LlamaRuntime

    rt = LlamaRuntime(str(ensure_tiny("dense", tmp_path)), n_ctx_seq=128, n_seq_max=8, n_threads=2)
    try:
        assert rt.meta.n_vocab == 49152
        tokens = [1 + 997 * s % 40000 for s in range(8)]
        for pos in range(48):
            rt.decode([BatchEntry(t, pos, s, True) for s, t in enumerate(tokens)])
            rows = rt.output_logits(range(8))
            assert np.isfinite(rows).all()
            tokens = rows.argmax(axis=1).tolist()
            assert min(tokens) >= 17, tokens  # SmolLM2's special tokens are ids 0..16
    finally:
        rt.close()


def test_a_context_llama_cpp_refuses_says_why(tmp_path) -> None:
    """A quantized K cache whose block (32) does not divide the head size (8 here): the start-up error gives
    llama.cpp's reason, not only a guess at memory."""
    from skippy.engine.runtime.llama import LlamaRuntime

    with pytest.raises(RuntimeError, match=r"could not create a context \(K cache type q4_0 with block size 32 "
                                           r"does not divide n_embd_head_k=8\)"):
        LlamaRuntime(str(ensure_tiny("dense", tmp_path)), n_ctx_seq=128, n_seq_max=1, type_k="q4_0")
