"""Two ``skippy serve`` replicas behind HAProxy with deploy/haproxy.cfg (issue 20, replicas with prefix affinity).

The router is the distribution's HAProxy (``apt-get install haproxy``; ``.ci/run`` installs it) running
deploy/haproxy.cfg as it is, with the replicas' addresses and the bind ports replaced by loopback
ones. A conversation's turns land on one replica (affinity on the ``X-Session-Id`` header, or on
OpenAI's ``prompt_cache_key``), so its second turn reuses the first one's KV cache
(``cached_tokens`` > 0); when a replica stops, HAProxy's active health check (``GET /health``)
takes it out and its conversations continue on the other replica without a failed request. The replicas
share one Redis as their Responses store (``--responses-store redis://...``, as deploy/compose.yaml), so a
``previous_response_id`` made on the stopped replica continues on the other one.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import RedisServer, Server, free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
REPLICA_ARGS = ["--parallel", "4", "--n-ctx", "1024"]
SYSTEM = ("You are a patient assistant for a small bakery. You answer questions about bread, cakes, opening hours "
          "and orders in one or two short sentences, and you never invent prices.")


def haproxy() -> str:
    """The haproxy binary; a missing one fails the test under CI (``.ci/run`` installs it), else skips."""
    path = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("haproxy is not installed (.ci/run apt-installs it): the replica tests cannot run")
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    return path


def router_config(replicas: dict[str, int], port: int, stats_port: int) -> str:
    """deploy/haproxy.cfg with the replicas on loopback ports and the router on ``port`` / ``stats_port``."""
    text = (DEPLOY / "haproxy.cfg").read_text(encoding="utf-8")
    servers = re.findall(r"^    server (\S+) \S+ check$", text, flags=re.M)
    assert servers == list(replicas), servers  # the file names the replicas the test starts
    for name, p in replicas.items():
        text = text.replace(f"server {name} {name}:8080 check", f"server {name} 127.0.0.1:{p} check")
    assert text.count("bind :8080") == 1 and text.count("bind :8404") == 1
    return text.replace("bind :8080", f"bind 127.0.0.1:{port}").replace("bind :8404", f"bind 127.0.0.1:{stats_port}")


class Router:
    """HAProxy in the foreground (``-db``) on ``config``; ``status()`` reads its stats CSV."""

    def __init__(self, config: str, port: int, stats_port: int, workdir: Path) -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self.stats_url = f"http://127.0.0.1:{stats_port}/stats;csv"
        cfg = workdir / "haproxy.cfg"
        cfg.write_text(config, encoding="utf-8")
        self.log_path = workdir / "haproxy.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([haproxy(), "-db", "-f", str(cfg)], stdout=self._log, stderr=subprocess.STDOUT)

    def status(self) -> dict[str, str]:
        """Server name -> HAProxy status (``UP``, ``DOWN``, ``UP 1/2``...) of the backend's servers."""
        rows = csv.DictReader(io.StringIO(httpx.get(self.stats_url, timeout=5).text.lstrip("# ")))
        return {r["svname"]: r["status"] for r in rows if r["pxname"] == "skippy" and r["svname"] != "BACKEND"}

    def wait_status(self, want: dict[str, str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        got: dict[str, str] = {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
            try:
                got = self.status()
            except httpx.HTTPError:
                got = {}
            if all(got.get(k) == v for k, v in want.items()):
                return
            time.sleep(0.2)
        raise AssertionError(f"router status {got}, wanted {want}:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Router, dict[str, Server]]]:
    haproxy()
    work = tmp_path_factory.mktemp("replicas")
    redis = RedisServer(work)
    replicas = {name: Server(REPLICA_ARGS + ["--responses-store", redis.url], work / f"{name}.log")
                for name in ("replica-1", "replica-2")}
    router = None
    try:
        for srv in replicas.values():
            srv.wait_ready()
        port, stats_port = free_port(), free_port()
        router = Router(router_config({n: s.port for n, s in replicas.items()}, port, stats_port), port,
                        stats_port, work)
        router.wait_status({"replica-1": "UP", "replica-2": "UP"})
        yield router, replicas
    finally:
        if router is not None:
            router.stop()
        for srv in replicas.values():
            srv.stop()
        redis.stop()


def chat(client: httpx.Client, messages: list[dict], session: str | None = None,
         cache_key: str | None = None) -> httpx.Response:
    body: dict = {"model": "m", "messages": messages, "max_tokens": 12, "temperature": 0}
    if cache_key is not None:
        body["prompt_cache_key"] = cache_key
    headers = {"X-Session-Id": session} if session is not None else {}
    return client.post("/v1/chat/completions", json=body, headers=headers)


def conversation(client: httpx.Client, question: str, **key: str) -> tuple[list[dict], list[httpx.Response]]:
    """Two turns of one conversation; returns its messages and both replies."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    first = chat(client, messages, **key)
    assert first.status_code == 200, first.text
    messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "And on Sundays?"}]
    second = chat(client, messages, **key)
    assert second.status_code == 200, second.text
    return messages, [first, second]


def cached(reply: httpx.Response) -> int:
    return reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_conversation_stays_on_its_replica_and_moves_when_it_stops(cluster) -> None:
    router, replicas = cluster
    sessions = [f"conversation-{i}" for i in range(6)]
    with httpx.Client(base_url=router.base_url, timeout=120) as client:
        where: dict[str, str] = {}
        history: dict[str, list[dict]] = {}
        for i, s in enumerate(sessions):
            history[s], (first, second) = conversation(client, f"When do you open on day {i}?", session=s)
            assert first.headers["X-Skippy-Replica"] == second.headers["X-Skippy-Replica"], s  # affinity
            assert cached(second) > 0, (s, second.json()["usage"])  # the first turn's prefix is reused
            where[s] = second.headers["X-Skippy-Replica"]
        assert set(where.values()) == set(replicas), where  # consistent hashing spreads the sessions

        # OpenAI's prompt_cache_key in the body works as the key too
        _, (first, second) = conversation(client, "Do you bake rye bread?", cache_key="user-1234")
        assert first.headers["X-Skippy-Replica"] == second.headers["X-Skippy-Replica"]
        assert cached(second) > 0

        # a Responses turn on the replica about to stop
        gone = where[sessions[0]]
        body = {"model": "m", "input": "When do you open on Mondays?",
                "max_output_tokens": 8, "temperature": 0}
        first = client.post("/v1/responses", json=body, headers={"X-Session-Id": sessions[0]})
        assert first.status_code == 200 and first.headers["X-Skippy-Replica"] == gone, first.text

        # stop one replica (SIGTERM: skippy drains, /health answers 503, then it exits)
        replicas[gone].stop()
        router.wait_status({gone: "DOWN"})
        other = next(n for n in replicas if n != gone)
        for s in sessions:  # every conversation continues, the moved ones on the other replica
            r = chat(client, history[s] + [{"role": "user", "content": "Thanks!"}], session=s)
            assert r.status_code == 200, (s, r.text)
            assert r.headers["X-Skippy-Replica"] == other
            if where[s] == other:
                assert cached(r) > 0  # the conversations that did not move keep their cache
        # the Responses conversation continues on the other replica: the store is shared (Redis)
        body = {"model": "m", "input": "And on Sundays?", "previous_response_id": first.json()["id"],
                "max_output_tokens": 8, "temperature": 0}
        second = client.post("/v1/responses", json=body, headers={"X-Session-Id": sessions[0]})
        assert second.status_code == 200 and second.headers["X-Skippy-Replica"] == other, second.text
        used = first.json()["usage"]
        assert second.json()["usage"]["input_tokens"] > used["input_tokens"] + used["output_tokens"]
