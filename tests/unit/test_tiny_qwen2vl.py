"""The tiny random-weight Qwen2-VL pair (:func:`tests.tiny_models.write_tiny_qwen2vl` and
:func:`tests.tiny_models.write_tiny_qwen2vl_mmproj`) through libmtmd directly (:mod:`tests.mtmd_oracle`).

What tests of M-RoPE image positions rest on: libmtmd loads the projector for the text model (vision), the
text model has M-RoPE (``mtmd_decode_use_mrope``), an image is one chunk of nx x ny embeddings (resized to
multiples of 28 pixels, at least 8 embeddings) that takes max(nx, ny) positions, fewer than its embeddings,
and the KV position after the prompt counts those; the logits depend on the image and are the same for the
same input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.images import png_bytes
from tests.mtmd_oracle import MtmdOracle, first_logits, marker
from tests.tiny_models import (
    N_EMBD,
    default_tokenizer_source,
    ensure_tiny_qwen2vl,
    write_tiny_qwen2vl,
    write_tiny_qwen2vl_mmproj,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not default_tokenizer_source().is_file(),
                                 reason="default model not downloaded (skippy pull): the tiny model's vocabulary")]

IMAGE_A = png_bytes(32, 32, 1)
IMAGE_B = png_bytes(64, 48, lambda x, y: (x * 4, y * 5, 128))


def _prompt(with_image: bool = True) -> str:
    media = marker() + "\n" if with_image else ""
    return f"<|im_start|>user\n{media}What is in the image?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return ensure_tiny_qwen2vl(tmp_path_factory.mktemp("tiny-qwen2vl"))


@pytest.fixture(scope="module")
def oracle(pair: tuple[Path, Path]):
    with MtmdOracle(*pair) as o:
        yield o


def test_writers_are_deterministic(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    model, mmproj = pair
    assert write_tiny_qwen2vl(tmp_path / "m.gguf", default_tokenizer_source()).read_bytes() == model.read_bytes()
    assert write_tiny_qwen2vl_mmproj(tmp_path / "p.gguf", N_EMBD).read_bytes() == mmproj.read_bytes()


def test_projector_loads_with_vision_and_mrope(oracle: MtmdOracle) -> None:
    assert oracle.supports_vision()
    assert oracle.uses_mrope()


# (width, height) -> the grid of merged embeddings: the image resized, aspect kept, to multiples of 28 px
# (14 px patches, 2x2 merged) with at least 8 embeddings (32x32 -> 84x84; 64x48 -> 112x84; 200x120 -> 196x112)
@pytest.mark.parametrize(("size", "grid"), [((32, 32), (3, 3)), ((64, 48), (4, 3)), ((48, 64), (3, 4)),
                                            ((200, 120), (7, 4))], ids=["32x32", "64x48", "48x64", "200x120"])
def test_an_image_takes_max_nx_ny_positions(oracle: MtmdOracle, size: tuple[int, int],
                                            grid: tuple[int, int]) -> None:
    chunks = oracle.chunk_details(_prompt(), [png_bytes(*size, 1)])
    assert [c.kind for c in chunks] == ["text", "image", "text"]
    image = chunks[1]
    assert (image.nx, image.ny) == grid
    assert image.n_tokens == image.nx * image.ny
    assert image.n_pos == max(grid) < image.n_tokens
    assert all(c.n_pos == c.n_tokens for c in (chunks[0], chunks[2]))


def test_the_kv_position_counts_the_image_positions(oracle: MtmdOracle) -> None:
    chunks = oracle.chunk_details(_prompt(), [IMAGE_B])  # 64x48: 4x3 embeddings, 4 positions
    n_text = sum(c.n_tokens for c in chunks if c.kind == "text")
    oracle.first_logits(_prompt(), [IMAGE_B])
    assert oracle.n_past == sum(c.n_pos for c in chunks) == n_text + 4


def test_logits_depend_on_the_image(oracle: MtmdOracle) -> None:
    a = oracle.first_logits(_prompt(), [IMAGE_A])
    b = oracle.first_logits(_prompt(), [IMAGE_B])
    text = oracle.first_logits(_prompt(with_image=False), [])
    assert a.shape == b.shape == text.shape == (oracle.n_vocab,)
    assert a.dtype == np.float32 and np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(text).all()
    assert np.abs(a - b).max() > 0.1
    assert np.abs(a - text).max() > 0.1


def test_same_input_same_logits(oracle: MtmdOracle, pair: tuple[Path, Path]) -> None:
    a = oracle.first_logits(_prompt(), [IMAGE_A])
    oracle.first_logits(_prompt(), [IMAGE_B])  # something else in between
    assert np.array_equal(oracle.first_logits(_prompt(), [IMAGE_A]), a)
    assert np.array_equal(first_logits(*pair, _prompt(), [IMAGE_A]), a)
