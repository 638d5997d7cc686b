"""A model split over llama.cpp RPC workers on loopback (issue 20): ``skippy rpc-worker`` x2 + ``skippy serve --rpc``.

The workers run llama.cpp's RPC server (``ggml_backend_rpc_start_server``) on this machine's CPU;
the server puts all the model's layers on the two RPC devices (split by their free memory, as
llama.cpp does) and keeps only the token embeddings. Greedy output must equal a local server's
with the same settings, token for token. A worker that is down at start is a start-up error
(exit 1); a worker lost while serving turns ``/health`` and every request into 503 ``device_lost``
instead of the abort llama.cpp would do (``GGML_ABORT`` in its RPC client).

These tests need llama-cpp-python built with ``GGML_RPC`` (``make venv`` does); under CI a build
without it fails them instead of skipping.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skippy.engine.runtime import backends as be
from tests.support import Server, free_port

ARGS = ["--parallel", "2", "--n-ctx", "1024"]
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "Explain in one sentence what a compiler does.",
]


@pytest.fixture(scope="module", autouse=True)
def rpc_backend() -> None:
    if be.backend_library("rpc") is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"llama-cpp-python was built without the RPC backend (no libggml-rpc in "
                        f"{be.llama_cpp_lib_dir()}): make venv builds it with CMAKE_ARGS=-DGGML_RPC=ON")
        pytest.skip("llama-cpp-python was built without GGML_RPC (make venv builds it)")


class Worker:
    """A ``skippy rpc-worker`` subprocess on a free loopback port, ready once it answers the RPC HELLO."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "skippy", "rpc-worker", "--port", str(self.port),
                                      "--threads", "1"], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rpc-worker exited with {self.proc.returncode}:\n{log_path.read_text()}")
            try:
                be.rpc_hello(self.endpoint, timeout=2)
                return
            except ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        for i in range(2):
            started.append(Worker(tmp_path / f"worker-{i}.log"))
        yield started
    finally:
        for w in started:
            w.stop()


def greedy(base_url: str, prompt: str) -> str:
    r = httpx.post(base_url + "/v1/chat/completions", timeout=120, json={
        "model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 24, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_a_model_split_over_two_rpc_workers_answers_like_the_local_one(workers: list[Worker],
                                                                         tmp_path: Path) -> None:
    with Server(ARGS, tmp_path / "local.log") as local:
        expected = [greedy(local.base_url, p) for p in PROMPTS]
        assert httpx.get(local.base_url + "/props").json()["offload"]["devices"] == []
    rpc = ",".join(w.endpoint for w in workers)
    with Server([*ARGS, "--rpc", rpc], tmp_path / "rpc.log") as split:
        props = httpx.get(split.base_url + "/props").json()
        assert "RPC" in props["backends"]
        rpc_devices = [d for d in props["devices"] if d["backend"] == "RPC"]
        assert [d["description"] for d in rpc_devices] == [w.endpoint for w in workers]
        assert all(d["type"] == "gpu" and d["memory_total"] > 0 for d in rpc_devices)
        assert props["offload"]["devices"] == [d["name"] for d in rpc_devices]
        assert props["offload"]["rpc"] == [w.endpoint for w in workers]
        assert props["offload"]["n_gpu_layers"] == props["offload"]["n_layer"] == 31  # every layer is remote
        assert [greedy(split.base_url, p) for p in PROMPTS] == expected
        log = split.log()
    for w in workers:  # llama.cpp computes on each worker (its start-up line, kept in skippy's log)
        assert f"[{w.endpoint}] compute buffer size" in log


def test_a_worker_down_at_start_is_a_clear_start_up_error(workers: list[Worker], tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    out = subprocess.run([sys.executable, "-m", "skippy", "serve", "--port", str(free_port()), *ARGS,
                          "--rpc", f"{workers[0].endpoint},{dead}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"cannot reach RPC worker {dead}" in out.stdout + out.stderr
    assert "GGML_ABORT" not in out.stdout + out.stderr and "Failed to connect" not in out.stdout + out.stderr


def test_a_worker_lost_while_serving_turns_health_and_requests_into_503(workers: list[Worker],
                                                                        tmp_path: Path) -> None:
    rpc = ",".join(w.endpoint for w in workers)
    with Server([*ARGS, "--rpc", rpc], tmp_path / "rpc.log") as split:
        assert greedy(split.base_url, PROMPTS[0])
        workers[1].stop()
        deadline = time.monotonic() + 10
        while (health := httpx.get(split.base_url + "/health")).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert health.status_code == 503, health.text
        error = health.json()["error"]
        assert error["code"] == "device_lost" and workers[1].endpoint in error["message"]
        r = httpx.post(split.base_url + "/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert r.status_code == 503 and r.json()["error"]["code"] == "device_lost"
        assert split.proc.poll() is None  # refused, not aborted by llama.cpp
        split.proc.terminate()
        assert split.proc.wait(timeout=30) == 0, split.log()[-2000:]
