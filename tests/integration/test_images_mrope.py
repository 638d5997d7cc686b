"""Images on an M-RoPE model (issue 38): ``skippy serve --mmproj`` with the tiny random-weight Qwen2-VL pair of
:func:`tests.tiny_models.ensure_tiny_qwen2vl` and the Qwen3-VL pair of :func:`tests.tiny_models.ensure_tiny_qwen3vl`
(no such GGUF can be pulled here). An image of nx x ny embeddings takes max(nx, ny) KV positions there, fewer than
its cells, so every token after it, every reused prefix and every generated token sits at a position other than
its index; on Qwen3-VL an image embedding is also wider than the model (DeepStack: ``llama_model_n_embd_inp``, three
times ``n_embd`` here) and the model's positions are interleaved M-RoPE. The oracle is llama.cpp's libmtmd driven
directly (:mod:`tests.mtmd_oracle`): the first token's logprobs, and the greedy tokens after it, equal the oracle's
for one image, for two, and for a later turn that reuses the first turn's KV, on both models.
"""

from __future__ import annotations

import base64
import contextlib

import httpx
import numpy as np
import pytest

from tests.images import image_messages as messages
from tests.images import png_bytes, solid
from tests.mtmd_oracle import MtmdOracle
from tests.support import NEAR_TIE, Server, first_top
from tests.tiny_models import default_tokenizer_source

pytestmark = pytest.mark.skipif(not default_tokenizer_source().is_file(),
                                reason="default model not downloaded (skippy pull): the tiny model's vocabulary")

RED = png_bytes(40, 30, solid((255, 0, 0)))  # 3 x 3 embeddings, 3 positions (Qwen3-VL: 4 x 3, 4)
WIDE = png_bytes(200, 120, lambda x, y: (x, y * 2, 90))  # 7 x 4: 28 embeddings, 7 positions (Qwen3-VL: 6 x 4, 6)


#: each tiny pair's writer (text model, projector), by the fixture that serves it
PAIRS = {"qwen2vl": "ensure_tiny_qwen2vl", "qwen3vl": "ensure_tiny_qwen3vl"}


@contextlib.contextmanager
def _serving(name: str, tmp_path_factory: pytest.TempPathFactory):
    """The pair ``name`` written, served (2 slots, 2048 cells each) and loaded by the oracle."""
    import tests.tiny_models

    model, mmproj = getattr(tests.tiny_models, PAIRS[name])(tmp_path_factory.mktemp(f"tiny-{name}"))
    with (Server(["--model", str(model), "--mmproj", str(mmproj), "--parallel", "2", "--n-ctx", "2048"],
                 tmp_path_factory.mktemp(name) / "server.log") as srv, MtmdOracle(model, mmproj) as oracle):
        yield (model, mmproj), srv, oracle


@pytest.fixture(scope="module")
def qwen2vl(tmp_path_factory: pytest.TempPathFactory):
    with _serving("qwen2vl", tmp_path_factory) as served:
        yield served


@pytest.fixture(scope="module")
def qwen3vl(tmp_path_factory: pytest.TempPathFactory):
    with _serving("qwen3vl", tmp_path_factory) as served:
        yield served


@pytest.fixture(params=list(PAIRS))
def served(request: pytest.FixtureRequest) -> tuple[Server, MtmdOracle]:
    """The server and the oracle of the Qwen2-VL pair or of the Qwen3-VL pair."""
    _, server, oracle = request.getfixturevalue(request.param)
    return server, oracle


def _image_cells(oracle: MtmdOracle, prompt: str, images: list[bytes]) -> int:
    return sum(c.n_tokens for c in oracle.chunk_details(prompt, images) if c.kind == "image")


def _logprobs(logits: np.ndarray) -> np.ndarray:
    return logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))


def _prompt(server: Server, msgs: list[dict]) -> str:
    return httpx.post(server.base_url + "/apply-template", json={"messages": msgs}).json()["prompt"]


def _assert_first_token_is_the_oracles(server: Server, oracle: MtmdOracle, msgs: list[dict], images: list[bytes],
                                       **extra) -> dict:
    prompt = _prompt(server, msgs)
    assert prompt.count("<__media__>") == len(images)
    logprobs = _logprobs(oracle.first_logits(prompt, images))
    top, usage = first_top(server.base_url, msgs, **extra)
    ids = np.argsort(-logprobs)[:5]
    assert [lp for _, lp in top] == pytest.approx([float(logprobs[i]) for i in ids], abs=2e-3)
    return usage


def test_the_model_takes_m_rope_positions_and_an_image_takes_fewer_positions_than_cells(
        served: tuple[Server, MtmdOracle], request: pytest.FixtureRequest) -> None:
    server, oracle = served
    assert oracle.uses_mrope()
    [image] = [c for c in oracle.chunk_details(_prompt(server, messages(WIDE)), [WIDE]) if c.kind == "image"]
    want = {"qwen2vl": (28, 7), "qwen3vl": (24, 6)}[request.node.callspec.params["served"]]  # 7 x 4, 6 x 4
    assert (image.n_tokens, image.n_pos) == want
    assert httpx.get(server.base_url + "/props").json()["modalities"]["vision"] is True


@pytest.mark.parametrize("images", [[RED], [WIDE], [RED, WIDE]], ids=["red", "wide", "two"])
def test_the_first_token_equals_libmtmd_driven_directly(served: tuple[Server, MtmdOracle],
                                                        images: list[bytes]) -> None:
    server, oracle = served
    msgs = messages(*images, text="Compare them.")
    usage = _assert_first_token_is_the_oracles(server, oracle, msgs, images, cache_prompt=False)
    assert usage["prompt_tokens"] > _image_cells(oracle, _prompt(server, msgs), images)  # cells, not positions


def test_generated_tokens_after_an_image_are_the_oracles_greedy_tokens(served: tuple[Server, MtmdOracle]) -> None:
    """Each generated token's logprob and its runner-up's equal the oracle's, which decodes each token at the
    position after the last (the tiny model's greedy text is one token over and over; the logprobs still
    depend on every position before)."""
    server, oracle = served
    msgs = messages(WIDE, RED, text="Describe both pictures.")
    prompt = _prompt(server, msgs)
    ref = oracle.greedy(prompt, [WIDE, RED], 12)
    body = {"prompt": {"prompt_string": prompt,
                       "multimodal_data": [base64.b64encode(i).decode() for i in (WIDE, RED)]},
            "n_predict": 12, "temperature": 0, "n_probs": 2, "cache_prompt": False, "ignore_eos": True}
    r = httpx.post(server.base_url + "/completion", json=body, timeout=60)
    assert r.status_code == 200, r.text
    got = [(p["id"], p["top_logprobs"][0]["logprob"], p["top_logprobs"][1]["logprob"])
           for p in r.json()["completion_probabilities"]]
    assert len(got) == len(ref) == 12
    for i, ((want, lp, runner_up), (tok, got_lp, got_runner_up)) in enumerate(zip(ref, got, strict=True)):
        if tok != want:  # only where the oracle's two best are nearly tied (other kernels round differently)
            assert lp - runner_up < NEAR_TIE, f"token {i}: {tok} instead of {want} ({lp - runner_up:.3f} ahead)"
            break
        assert (got_lp, got_runner_up) == pytest.approx((lp, runner_up), abs=2e-3), f"token {i}"


def test_a_later_turn_reuses_the_images_kv_at_its_positions(served: tuple[Server, MtmdOracle]) -> None:
    server, oracle = served
    first = messages(WIDE, text="What is this?")
    cold = _assert_first_token_is_the_oracles(server, oracle, first, [WIDE])
    warm = _assert_first_token_is_the_oracles(server, oracle, first, [WIDE])
    assert warm["prompt_tokens_details"]["cached_tokens"] >= warm["prompt_tokens"] - 2  # the image's cells too
    later = first + [{"role": "assistant", "content": "A gradient."},
                     {"role": "user", "content": "And what colour is it at the top?"}]
    usage = _assert_first_token_is_the_oracles(server, oracle, later, [WIDE])
    assert usage["prompt_tokens_details"]["cached_tokens"] >= cold["prompt_tokens"] - 2
    other_msgs = messages(RED, text="What is this?")
    other = _assert_first_token_is_the_oracles(server, oracle, other_msgs, [RED])
    red_cells = _image_cells(oracle, _prompt(server, other_msgs), [RED])
    assert other["prompt_tokens_details"]["cached_tokens"] < other["prompt_tokens"] - red_cells  # another image


def test_image_min_tokens_grows_the_grid_of_a_small_image(qwen2vl, tmp_path) -> None:
    """llama-server's ``--image-min-tokens``: the 40x30 image, 3 x 3 embeddings by the projector's own minimum
    (8), becomes at least 16; a minimum above the maximum stops the start naming both."""
    (model, mmproj), server, _ = qwen2vl
    _, default = first_top(server.base_url, messages(RED), cache_prompt=False)
    with Server(["--model", str(model), "--mmproj", str(mmproj), "--parallel", "1", "--n-ctx", "1024",
                 "--image-min-tokens", "16"], tmp_path / "min.log") as srv:
        _, bigger = first_top(srv.base_url, messages(RED), cache_prompt=False)
    assert bigger["prompt_tokens"] >= default["prompt_tokens"] - 9 + 16
    bad = Server(["--model", str(model), "--mmproj", str(mmproj), "--image-min-tokens", "64",
                  "--image-max-tokens", "32"], tmp_path / "bad.log")
    try:
        assert bad.proc.wait(timeout=120) != 0
        assert "image_min_tokens (64) is above image_max_tokens (32)" in bad.log()
    finally:
        bad.stop()


def test_image_and_text_requests_at_once_each_get_their_solo_first_token(served: tuple[Server, MtmdOracle]) -> None:
    """Six requests at once on two slots (three with images of two grids, three text only): llama.cpp takes every
    batch (it refuses a token at a position that does not follow its sequence's KV) and each first token is the
    one the request gets alone, within batched kernels' rounding."""
    from concurrent.futures import ThreadPoolExecutor

    server, _ = served
    asks = [messages(RED, text="One?"), messages(WIDE, text="Two?"), messages(RED, WIDE, text="Three?"),
            [{"role": "user", "content": "Four?"}], [{"role": "user", "content": "Five?"}],
            [{"role": "user", "content": "Six?"}]]
    solo = [first_top(server.base_url, m, cache_prompt=False)[0] for m in asks]
    with ThreadPoolExecutor(len(asks)) as pool:
        together = list(pool.map(lambda m: first_top(server.base_url, m, cache_prompt=False)[0], asks))
    for alone, at_once in zip(solo, together, strict=True):
        assert at_once[0][0] == alone[0][0] or alone[0][1] - alone[1][1] < NEAR_TIE
        assert at_once[0][1] == pytest.approx(alone[0][1], abs=2e-2)
