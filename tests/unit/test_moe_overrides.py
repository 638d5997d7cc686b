"""``-ot`` / ``-ncmoe`` / ``-cmoe`` on a real llama.cpp load of a tiny generated Mixture-of-Experts GGUF
(:func:`tests.tiny_models.write_tiny_moe`: architecture ``llama`` with 4 experts, 4 layers).

This machine has no GPU, so every weight lands in a CPU buffer with or without an override: the
evidence that an override matched is llama.cpp's own load log, ``tensor blk.0.ffn_up_exps.weight (...)
buffer type overridden to CPU`` (a debug line, read here through skippy's log callback with
``verbose``), and the greedy tokens must not change with it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

from skippy.engine.config import EngineConfig
from skippy.engine.runtime.base import BatchEntry
from skippy.engine.runtime.params import RuntimeConfig
from tests.tiny_models import default_tokenizer_source, ensure_tiny

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not default_tokenizer_source().is_file(),
                                 reason="default model not downloaded (skippy pull): the tiny model's vocabulary")]

OVERRIDDEN = re.compile(r"tensor (blk\.\d+\.ffn_\w+_exps\.weight) \(.*\) buffer type overridden to CPU")


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny("moe", tmp_path_factory.mktemp("tiny-moe"))


def _load(path: Path, caplog: pytest.LogCaptureFixture, **settings: object):
    """(runtime, the tensors llama.cpp logged as overridden) for ``skippy serve`` settings."""
    from skippy.engine.runtime.llama import LlamaRuntime

    config = EngineConfig(model=str(path), n_ctx=256, parallel=1, n_batch=64, verbose=True, **settings)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="skippy.runtime"):
        rt = LlamaRuntime(str(path), RuntimeConfig.from_engine_config(config))
    return rt, sorted(m.group(1) for r in caplog.records if (m := OVERRIDDEN.search(r.getMessage())))


def _greedy(rt, n: int = 12) -> list[int]:
    prompt = [1, 42, 420, 4200, 7, 99]
    rt.decode([BatchEntry(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    out = [int(np.argmax(rt.logits(len(prompt) - 1)))]
    for _ in range(n - 1):
        rt.decode([BatchEntry(out[-1], len(prompt) + len(out) - 1, 0, True)])
        out.append(int(np.argmax(rt.logits(0))))
    return out


def test_n_cpu_moe_overrides_the_first_layers_experts_and_greedy_output_stays(moe: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    plain, none = _load(moe, caplog)
    try:
        assert none == []
        expected = _greedy(plain)
    finally:
        plain.close()
    rt, overridden = _load(moe, caplog, n_cpu_moe=2)
    try:
        assert overridden == sorted(f"blk.{i}.ffn_{k}_exps.weight" for i in (0, 1) for k in ("down", "gate", "up"))
        assert rt.meta.load is not None and rt.meta.load["n_cpu_moe"] == 2
        assert _greedy(rt) == expected
    finally:
        rt.close()


def test_cpu_moe_and_ot_match_as_llama_cpp(moe: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt, overridden = _load(moe, caplog, cpu_moe=True)
    rt.close()
    assert len(overridden) == 12  # 4 layers x gate, up, down
    rt, overridden = _load(moe, caplog, override_tensor=(r"blk\.3\.ffn_up_exps=CPU,blk\.1\.ffn_down.*=CPU",))
    try:
        assert overridden == ["blk.1.ffn_down_exps.weight", "blk.3.ffn_up_exps.weight"]
        assert rt.meta.load is not None and rt.meta.load["override_tensor"] == [
            r"blk\.3\.ffn_up_exps=CPU", r"blk\.1\.ffn_down.*=CPU"]
    finally:
        rt.close()


def test_more_cpu_moe_layers_than_the_model_has_is_a_load_error(moe: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match=r"--n-cpu-moe 5: the model has only 4 layers"):
        _load(moe, caplog, n_cpu_moe=5)


def test_an_unknown_buffer_type_is_refused_before_loading(moe: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match=r"unknown buffer type 'CUDA7'.*available buffer types: CPU"):
        _load(moe, caplog, override_tensor=("exps=CUDA7",))


def test_an_ot_pattern_that_matches_no_tensor_is_refused_before_loading(moe: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    # llama.cpp would ignore it silently: a typo in a guide's pattern would cost the GPU memory it meant to free
    with pytest.raises(ValueError, match=r"--override-tensor blk\\.9\\.ffn_up_exps=CPU: the pattern matches no tensor"):
        _load(moe, caplog, override_tensor=(r"blk\.9\.ffn_up_exps=CPU",))
    rt, overridden = _load(moe, caplog, override_tensor=(r"blk\.0\.ffn_up_exps=CPU",), n_cpu_moe=4)
    rt.close()  # -ncmoe's own patterns are not checked (nothing to move on a dense model), the user's matched
    assert "blk.0.ffn_up_exps.weight" in overridden


def test_no_mmap_rope_and_batches_reach_the_context(moe: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt, _ = _load(moe, caplog, mmap=False, n_ubatch=32, rope_scaling="linear", rope_scale=2.0)
    try:
        assert rt.meta.load is not None
        assert {k: rt.meta.load[k] for k in ("load_mode", "n_batch", "n_ubatch", "rope_scaling", "rope_freq_scale")} \
            == {"load_mode": "none", "n_batch": 64, "n_ubatch": 32, "rope_scaling": "linear", "rope_freq_scale": 0.5}
        lines = [r.getMessage() for r in caplog.records]
        assert any("freq_scale" in line and "0.5" in line for line in lines), "llama.cpp's context line"
        assert any("n_ubatch" in line and "32" in line for line in lines)
    finally:
        rt.close()
