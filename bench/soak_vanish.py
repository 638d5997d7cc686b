"""Soak: many clients that start a stream and vanish mid-way; nothing may be left behind.

The test suite runs the same scenario with 100 clients
(tests/integration/test_hardening.py::test_vanishing_clients_leave_no_live_sequence);
this is the larger version. It starts ``skippy serve`` (default model, ``--parallel 8``),
then:

1. a baseline batch: 8 greedy requests at once (temperature 0, max_tokens 48);
2. CLIENTS clients, CONCURRENCY at a time, each streaming a request (max_tokens 200, end of
   sequence banned) and vanishing (TCP RST) at one of four points: right after sending, after
   the response headers, after the first content token, a few chunks in;
3. waits until ``/health`` shows no running and no waiting sequence;
4. the same greedy batch again: it must decode exactly as the baseline (no stale KV in any slot).

Prints a markdown table (duration, client rate, 499s logged, time to idle, server RSS before and
after, outputs identical). Usage: ``python bench/soak_vanish.py [--clients 1000] [--concurrency 64]
[--threads N]`` (``--threads 1`` keeps llama.cpp from collapsing when other processes share the
cores). The server log goes to bench/out/soak-server.log.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import free_port  # noqa: E402

OUT = Path(__file__).parent / "out"
PARALLEL = 8
PROMPTS = ["What is the capital of France?", "Name three colors.", "Write a haiku about the sea.",
           "What is 2 + 2?", "Give me a word that rhymes with cat.", "Describe a dog in one sentence.",
           "What is the opposite of hot?", "List two fruits."]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def idle(url: str) -> bool:
    stats = httpx.get(url + "/health", timeout=10).json()
    return stats["slots_processing"] == 0 and stats["requests_waiting"] == 0


def greedy_batch(url: str) -> list[str]:
    def one(prompt: str) -> str:
        body = {"messages": [SYSTEM, {"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 48}
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=600).json()
        return reply["choices"][0]["message"]["content"]

    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(one, PROMPTS))


def vanishing_client(port: int, i: int, ban_eos: dict[str, float]) -> str:
    body = json.dumps({"messages": [{"role": "user", "content": f"Write a story about the number {i}."}],
                       "max_tokens": 200, "logit_bias": ban_eos, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        mode = i % 4
        if mode == 0:
            return "sent"
        sock.settimeout(600)
        want, need = {1: (b"\r\n\r\n", 1), 2: (b'"content":"', 1), 3: (b"data: ", 6)}[mode]
        seen = b""
        while seen.count(want) < need:
            chunk = sock.recv(4096)
            if not chunk:
                return "closed by server"
            seen += chunk
        return ("headers", "first token", "a few chunks")[mode - 1]
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="vanishing-clients soak")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads of the server")
    args = parser.parse_args()
    clients, concurrency = args.clients, args.concurrency
    OUT.mkdir(exist_ok=True)
    log_path = OUT / "soak-server.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        threads = ["--threads", str(args.threads)] if args.threads else []
        proc = subprocess.Popen([sys.executable, "-m", "skippy", "serve", "--port", str(port), "--parallel",
                                 str(PARALLEL), "--n-ctx", "2048", "--max-queue", str(max(1024, clients)), *threads],
                                stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"server did not start; see {log_path}")
                time.sleep(0.2)
            eos = httpx.get(url + "/props", timeout=30).json()["eos_token"]
            eos_id = httpx.post(url + "/tokenize", json={"content": eos}, timeout=30).json()["tokens"][0]
            ban_eos = {str(eos_id): -100}
            before = greedy_batch(url)
            rss_before = rss_mib(proc.pid)
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                outcomes = list(pool.map(lambda i: vanishing_client(port, i, ban_eos), range(clients)))
            t_storm = time.monotonic() - t0
            while not idle(url):
                time.sleep(0.1)
            t_idle = time.monotonic() - t0
            rss_after = rss_mib(proc.pid)
            after = greedy_batch(url)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    n499 = log_path.read_text().count(" 499 ")
    print("| clients | concurrency | storm s | clients/s | 499 logged | idle after s | RSS MiB before -> after "
          "| closed by server | greedy batch identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {clients} | {concurrency} | {t_storm:.1f} | {clients / t_storm:.1f} | {n499} | {t_idle:.1f} "
          f"| {rss_before:.0f} -> {rss_after:.0f} | {outcomes.count('closed by server')} | {after == before} |")
    if after != before or outcomes.count("closed by server"):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
