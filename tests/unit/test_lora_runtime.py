"""LoRA adapters on the real default model (SmolLM2-135M) with random adapters written at test time
(:func:`tests.tiny_models.write_tiny_lora`); the oracle is llama.cpp itself, driven directly
(:func:`tests.lora_oracle.lora_logits`: ``llama_adapter_lora_init`` + ``llama_set_adapters_lora``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from skippy.engine.runtime.base import BatchEntry
from tests.lora_oracle import lora_logits
from tests.tiny_models import write_tiny_lora

MODEL = os.path.expanduser("~/.cache/skippy/models/SmolLM2-135M-Instruct.Q4_1.gguf")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(MODEL), reason="default model not downloaded (skippy pull)")]

TOKENS = [1, 504, 3575, 282, 4649, 314, 2]  # any ids of the vocabulary: the logits are compared, not read


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("lora")
    return (str(write_tiny_lora(d / "first.gguf", MODEL, seed=1)),
            str(write_tiny_lora(d / "second.gguf", MODEL, layers=(3, 5), seed=2)))


@pytest.fixture(scope="module")
def runtime(adapters):
    from skippy.engine.runtime.llama import LlamaRuntime

    rt = LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=2, n_threads=2, lora=adapters)
    yield rt
    rt.close()


def _last_logits(rt, lora, seq: int = 0) -> np.ndarray:
    rt.seq_rm(seq)
    rt.set_lora(lora)
    rt.decode([BatchEntry(t, i, seq, i == len(TOKENS) - 1) for i, t in enumerate(TOKENS)])
    return rt.logits(len(TOKENS) - 1).copy()


def test_the_logits_with_adapters_equal_llama_cpps_own(runtime, adapters) -> None:
    first, second = adapters
    assert runtime.meta.lora == adapters
    for lora, oracle in ((((0, 1.0),), [(first, 1.0)]),
                         (((0, 0.5), (1, 2.0)), [(first, 0.5), (second, 2.0)]),
                         ((), [])):
        got = _last_logits(runtime, lora)
        want = lora_logits(MODEL, TOKENS, oracle)
        np.testing.assert_allclose(got, want, atol=2e-3, err_msg=str(lora))
    base = lora_logits(MODEL, TOKENS)
    assert np.abs(lora_logits(MODEL, TOKENS, [(first, 1.0)]) - base).max() > 0.1  # the adapter matters


def test_scale_zero_is_the_base_model(runtime, adapters) -> None:
    base = _last_logits(runtime, ())
    zero = lora_logits(MODEL, TOKENS, [(adapters[0], 0.0)])
    np.testing.assert_array_equal(zero, lora_logits(MODEL, TOKENS))
    np.testing.assert_allclose(base, zero, atol=2e-3)


def test_set_lora_refuses_unknown_ids_and_bad_scales(runtime) -> None:
    with pytest.raises(ValueError):
        runtime.set_lora(((2, 1.0),))
    with pytest.raises(ValueError):
        runtime.set_lora(((0, float("nan")),))


@pytest.mark.parametrize(("options", "reason"), [
    ({"arch": "gemma3"}, "arch"),
    ({"n_vocab": 1000}, "token_embd.weight"),
])
def test_an_adapter_for_another_model_is_a_load_error_naming_the_file(tmp_path, options, reason) -> None:
    from skippy.engine.runtime.llama import LlamaRuntime

    good = write_tiny_lora(tmp_path / "good.gguf", MODEL)
    bad = write_tiny_lora(tmp_path / "bad.gguf", MODEL, **options)
    with pytest.raises(ValueError) as err:
        LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, lora=(str(good), str(bad)))
    assert str(bad) in str(err.value) and reason in str(err.value)
    missing = tmp_path / "missing.gguf"
    with pytest.raises(ValueError, match="missing.gguf: the LoRA adapter file does not exist"):
        LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, lora=(str(good), str(missing)))
    with pytest.raises(ValueError, match="the LoRA adapter file is not a file"):
        LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, lora=(str(tmp_path),))
