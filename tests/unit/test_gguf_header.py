"""The GGUF header reader (skippy/models/gguf_header.py): the same metadata and parameter count as gguf-py's
GGUFReader, on the real models and on tiny GGUFs of every value type; a cheap ``general.type``; errors for a
file that is no GGUF or ends inside its header."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from skippy.models import ModelError, gguf_metadata, gguf_type, read_gguf_header
from tests.tiny_models import write_tiny_lora

MODELS = [os.path.expanduser(f"~/.cache/skippy/models/{name}")  # `skippy pull` (make test)
          for name in ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf")]


def _reference(path: str | Path, max_array: int | None) -> tuple[dict[str, Any], int]:
    """What gguf-py's GGUFReader reads (the reader skippy used before): the oracle."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if len(field.types) > 1 and max_array is not None and len(field.data) > max_array:
            out[key] = []
            continue
        value = field.contents()
        out[key] = value.item() if hasattr(value, "item") else value
    return out, sum(int(t.n_elements) for t in reader.tensors)


def _every_type(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -7)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool", True)
    w.add_uint64("t.u64", 2**63)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 0.1)
    w.add_string("t.str", "héllo")
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.strs", ["a", "bé", ""])
    w.add_array("t.long", list(range(100)))
    w.add_array("t.floats", [0.5, 1.5])
    w.add_tensor("a", np.zeros((3, 4), dtype=np.float32))
    w.add_tensor("b", np.zeros((5,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("max_array", [5, 0, None])
def test_every_value_type_reads_as_gguf_py_reads_it(tmp_path, max_array) -> None:
    path = _every_type(tmp_path / "types.gguf")
    assert read_gguf_header(path, max_array=max_array) == _reference(path, max_array)
    meta, n_params = read_gguf_header(path, max_array=None)
    assert meta["t.str"] == "héllo" and meta["t.strs"] == ["a", "bé", ""] and n_params == 17


@pytest.mark.parametrize("path", MODELS)
@pytest.mark.parametrize("max_array", [5, None])
def test_the_real_models_read_as_gguf_py_reads_them(path, max_array) -> None:
    assert read_gguf_header(path, max_array=max_array) == _reference(path, max_array)
    assert gguf_metadata(path, max_array=max_array) == _reference(path, max_array)


def test_general_type_is_read_cheaply_and_tells_an_adapter(tmp_path) -> None:
    adapter = write_tiny_lora(tmp_path / "adapter.gguf", Path(MODELS[0]))
    assert gguf_type(adapter) == "adapter"
    assert gguf_type(MODELS[0]) == "model"
    meta, n_params = read_gguf_header(MODELS[1], max_array=0, stop_at="general.type", tensors=False)
    assert meta["general.type"] == "model" and n_params == 0 and "tokenizer.ggml.tokens" not in meta


def test_no_gguf_or_a_truncated_one_is_a_model_error(tmp_path) -> None:
    text = tmp_path / "text.gguf"
    text.write_text("hi\n")
    with pytest.raises(ModelError, match="not a GGUF"):
        read_gguf_header(text)
    with pytest.raises(ModelError, match="not a GGUF"):
        gguf_type(text)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(Path(MODELS[1]).read_bytes()[:100_000])
    with pytest.raises(ModelError, match="truncated"):
        read_gguf_header(truncated)
    assert gguf_type(truncated) == "model"  # general.type comes before the vocabulary
    with pytest.raises(ModelError, match="cannot read"):
        read_gguf_header(tmp_path / "missing.gguf")
