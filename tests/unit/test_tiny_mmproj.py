"""The tiny random-weight vision projector (:func:`tests.tiny_models.write_tiny_mmproj`) on the real default
model, through libmtmd directly (:mod:`tests.mtmd_oracle`), the reference for image input (``--mmproj``).

What the image tests rest on: libmtmd loads the projector for SmolLM2-135M (vision, 576-wide
embeddings), any image becomes one image chunk of 16 embeddings (resized to the projector's 32x32),
the logits depend on the image, and the same input gives the same logits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.images import png_bytes
from tests.mtmd_oracle import MtmdOracle, first_logits, marker
from tests.tiny_models import MMPROJ_IMAGE_TOKENS, default_tokenizer_source, ensure_tiny_mmproj, write_tiny_mmproj

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not default_tokenizer_source().is_file(),
                                 reason="default model not downloaded (skippy pull): the projector's text model")]

IMAGE_A = png_bytes(32, 32, 1)
IMAGE_B = png_bytes(64, 48, lambda x, y: (x * 4, y * 5, 128))


def _prompt(with_image: bool = True) -> str:
    media = marker() + "\n" if with_image else ""
    return f"<|im_start|>user\n{media}What is in the image?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_mmproj(tmp_path_factory.mktemp("tiny-mmproj"))


@pytest.fixture(scope="module")
def oracle(mmproj: Path):
    with MtmdOracle(default_tokenizer_source(), mmproj) as o:
        yield o


def test_writer_is_deterministic(tmp_path: Path, mmproj: Path) -> None:
    assert write_tiny_mmproj(tmp_path / "again.gguf", 576).read_bytes() == mmproj.read_bytes()


def test_projector_loads_for_the_default_model(oracle: MtmdOracle) -> None:
    assert oracle.supports_vision()


@pytest.mark.parametrize("image", [IMAGE_A, IMAGE_B], ids=["32x32", "64x48"])
def test_an_image_is_one_chunk_of_the_projector_size(oracle: MtmdOracle, image: bytes) -> None:
    chunks = oracle.chunks(_prompt(), [image])
    assert [kind for kind, _ in chunks] == ["text", "image", "text"]
    assert chunks[1][1] == MMPROJ_IMAGE_TOKENS == 16
    # the text around the marker is tokenized in two pieces; without the marker it may merge at the seam
    [(kind, n_text)] = oracle.chunks(_prompt(with_image=False), [])
    assert kind == "text" and abs(n_text - (chunks[0][1] + chunks[2][1])) <= 1


def test_markers_and_images_must_match_in_number(oracle: MtmdOracle) -> None:
    with pytest.raises(ValueError, match="mtmd_tokenize"):
        oracle.chunks(_prompt(), [])
    with pytest.raises(ValueError, match="mtmd_tokenize"):
        oracle.chunks(_prompt(), [IMAGE_A, IMAGE_B])


def test_logits_depend_on_the_image(oracle: MtmdOracle) -> None:
    a = oracle.first_logits(_prompt(), [IMAGE_A])
    b = oracle.first_logits(_prompt(), [IMAGE_B])
    text = oracle.first_logits(_prompt(with_image=False), [])
    assert a.shape == b.shape == text.shape == (oracle.n_vocab,)
    assert a.dtype == np.float32 and np.isfinite(a).all() and np.isfinite(b).all()
    assert np.abs(a - b).max() > 0.1
    assert np.abs(a - text).max() > 0.1


def test_same_input_same_logits(oracle: MtmdOracle, mmproj: Path) -> None:
    a = oracle.first_logits(_prompt(), [IMAGE_A])
    oracle.first_logits(_prompt(), [IMAGE_B])  # something else in between
    assert np.array_equal(oracle.first_logits(_prompt(), [IMAGE_A]), a)
    assert np.array_equal(first_logits(default_tokenizer_source(), mmproj, _prompt(), [IMAGE_A]), a)
