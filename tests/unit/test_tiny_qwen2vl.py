"""The tiny random-weight Qwen2-VL and Qwen3-VL pairs (:func:`tests.tiny_models.write_tiny_qwen2vl` /
:func:`tests.tiny_models.write_tiny_qwen2vl_mmproj`, :func:`tests.tiny_models.write_tiny_qwen3vl` /
:func:`tests.tiny_models.write_tiny_qwen3vl_mmproj`) through libmtmd directly (:mod:`tests.mtmd_oracle`).

What tests of M-RoPE image positions rest on: libmtmd loads the projector for the text model (vision), the
text model has M-RoPE (``mtmd_decode_use_mrope``), an image is one chunk of nx x ny embeddings (resized to
multiples of 28 pixels for Qwen2-VL, 32 for Qwen3-VL, at least 8 embeddings) that takes max(nx, ny) positions,
fewer than its embeddings, and the KV position after the prompt counts those; an image embedding is as wide as
the text model's input (``llama_model_n_embd_inp``: ``n_embd`` for Qwen2-VL, ``n_embd`` times 1 + the DeepStack
layers for Qwen3-VL, each slice a merger's output); the logits depend on the image and are the same for the same
input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.images import png_bytes
from tests.mtmd_oracle import MtmdOracle, first_logits, marker
from tests.tiny_models import (
    N_EMBD,
    QWEN3VL_N_DEEPSTACK,
    default_tokenizer_source,
    ensure_tiny_qwen2vl,
    ensure_tiny_qwen3vl,
    write_tiny_qwen2vl,
    write_tiny_qwen2vl_mmproj,
    write_tiny_qwen3vl,
    write_tiny_qwen3vl_mmproj,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not default_tokenizer_source().is_file(),
                                 reason="default model not downloaded (skippy pull): the tiny model's vocabulary")]

IMAGE_A = png_bytes(32, 32, 1)
IMAGE_B = png_bytes(64, 48, lambda x, y: (x * 4, y * 5, 128))

#: family -> (ensure the pair, write the text model, write the projector, DeepStack layers)
FAMILIES = {"qwen2vl": (ensure_tiny_qwen2vl, write_tiny_qwen2vl, write_tiny_qwen2vl_mmproj, 0),
            "qwen3vl": (ensure_tiny_qwen3vl, write_tiny_qwen3vl, write_tiny_qwen3vl_mmproj, QWEN3VL_N_DEEPSTACK)}


def _prompt(with_image: bool = True) -> str:
    media = marker() + "\n" if with_image else ""
    return f"<|im_start|>user\n{media}What is in the image?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def pair(family: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return FAMILIES[family][0](tmp_path_factory.mktemp(f"tiny-{family}"))


@pytest.fixture(scope="module")
def oracle(pair: tuple[Path, Path]):
    with MtmdOracle(*pair) as o:
        yield o


def test_writers_are_deterministic(tmp_path: Path, family: str, pair: tuple[Path, Path]) -> None:
    _, write_model, write_mmproj, _ = FAMILIES[family]
    model, mmproj = pair
    assert write_model(tmp_path / "m.gguf", default_tokenizer_source()).read_bytes() == model.read_bytes()
    assert write_mmproj(tmp_path / "p.gguf", N_EMBD).read_bytes() == mmproj.read_bytes()


def test_projector_loads_with_vision_and_mrope(oracle: MtmdOracle) -> None:
    assert oracle.supports_vision()
    assert oracle.uses_mrope()


# (width, height) -> the grid of merged embeddings: the image resized, aspect kept, to multiples of 28 px for
# Qwen2-VL (14 px patches, 2x2 merged), of 32 px for Qwen3-VL (16 px), with at least 8 embeddings (32x32 -> 84x84
# or 96x96; 64x48 -> 112x84 or 128x96; 96x96 -> 84x84 or 96x96; 200x120 -> 196x112 or 192x128); Qwen3-VL's
# 96x96 is the grid of its learned position embedding (6 x 6 patches: not interpolated), the others interpolate it
@pytest.mark.parametrize(("size", "grids"), [((32, 32), {"qwen2vl": (3, 3), "qwen3vl": (3, 3)}),
                                             ((64, 48), {"qwen2vl": (4, 3), "qwen3vl": (4, 3)}),
                                             ((48, 64), {"qwen2vl": (3, 4), "qwen3vl": (3, 4)}),
                                             ((96, 96), {"qwen2vl": (3, 3), "qwen3vl": (3, 3)}),
                                             ((200, 120), {"qwen2vl": (7, 4), "qwen3vl": (6, 4)})],
                         ids=["32x32", "64x48", "48x64", "96x96", "200x120"])
def test_an_image_takes_max_nx_ny_positions(oracle: MtmdOracle, family: str, size: tuple[int, int],
                                            grids: dict[str, tuple[int, int]]) -> None:
    chunks = oracle.chunk_details(_prompt(), [png_bytes(*size, 1)])
    assert [c.kind for c in chunks] == ["text", "image", "text"]
    image = chunks[1]
    assert (image.nx, image.ny) == grids[family]
    assert image.n_tokens == image.nx * image.ny
    assert image.n_pos == max(grids[family]) < image.n_tokens
    assert all(c.n_pos == c.n_tokens for c in (chunks[0], chunks[2]))


def test_the_kv_position_counts_the_image_positions(oracle: MtmdOracle) -> None:
    chunks = oracle.chunk_details(_prompt(), [IMAGE_B])  # 64x48: 4x3 embeddings, 4 positions
    n_text = sum(c.n_tokens for c in chunks if c.kind == "text")
    oracle.first_logits(_prompt(), [IMAGE_B])
    assert oracle.n_past == sum(c.n_pos for c in chunks) == n_text + 4


def test_an_image_embedding_is_the_text_models_input_width(oracle: MtmdOracle, family: str) -> None:
    """Qwen3-VL's DeepStack: the text model takes ``n_embd * (1 + n_deepstack)`` per input embedding (a token's
    is padded with zeros), and the projector gives that: its main merger's ``n_embd``, then each DeepStack
    merger's (added to the output of text layer 0, 1, ...); Qwen2-VL's is ``n_embd``."""
    import llama_cpp

    n_deepstack = FAMILIES[family][3]
    n_embd, n_inp = llama_cpp.llama_model_n_embd(oracle.model), llama_cpp.llama_model_n_embd_inp(oracle.model)
    assert (n_embd, n_inp) == (N_EMBD, N_EMBD * (1 + n_deepstack))
    embd = oracle.image_embeddings(IMAGE_B)
    assert embd.shape == (12, n_inp) and np.isfinite(embd).all()
    parts = [embd[:, i * n_embd:(i + 1) * n_embd] for i in range(1 + n_deepstack)]
    assert all(np.abs(p).max() > 0.01 for p in parts)  # no slice left empty
    assert all(np.abs(a - b).max() > 0.01 for i, a in enumerate(parts) for b in parts[i + 1:])


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
