"""Mixed-load soak: every kind of request at once for a long time; no 5xx, no leak, nothing lost.

Starts ``skippy serve`` (the default model, ``--parallel 8``, ``--embeddings --pooling mean``, a SQLite
Responses store in a temporary folder) unless ``--base-url`` names a running server, then keeps
``--concurrency`` clients (default 32) busy for ``--duration`` seconds (default 1200) with a weighted mix:

- chat completions: plain, streamed, with a forced tool call, with a ``json_schema`` response format;
- legacy completions; Anthropic messages; embeddings;
- Responses chains: a turn, then one continuing it with ``previous_response_id`` (every other one streamed);
- clients that disconnect mid-stream (after the first event);
- bad inputs (malformed JSON, missing fields, out-of-range values, an unknown ``previous_response_id``):
  each must get a 4xx.

It prints one table: requests by route and status, latency p50 / p99 per route in the first and the
last window (5 minutes, or half the run when it is shorter), the server's RSS (and how much of it is the
prompt cache, held by design up to ``--cache-ram``) at start, at the end of the first window (warmed up: the
baseline a leak grows from) and at the end, and open file descriptors at start and end
(``/metrics``: ``process_resident_memory_bytes``, ``skippy:ctx_checkpoint_bytes``, ``process_open_fds``) and the rows in
the Responses store (when it started the server). Exit status 1 when any request got a 5xx, failed in
transport (other than the intended disconnects) or a bad input was not refused with a 4xx.

Usage: ``python bench/soak_mixed.py [--duration 120] [--concurrency 32] [--base-url URL]``;
``make soak`` (``SOAK_ARGS=...``). Not part of ``make test``. The server log goes to bench/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import httpx
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import free_port  # noqa: E402

OUT = Path(__file__).parent / "out"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {"color": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["color", "n"]}
QUESTIONS = ["Name three colors.", "What is the capital of France?", "Write a haiku about rain.",
             "What is 12 times 3?", "Describe a cat in one sentence.", "List two rivers."]


# -- accounting (sans-IO: tests/unit/test_soak_mixed.py) ---------------------------------------------

@attrs.frozen
class Sample:
    """One request: ``route`` (``METHOD /path`` or a scenario's name), ``status`` (HTTP code, or ``error``
    for a transport failure, ``disconnect`` for an intended one), ``seconds`` its latency, ``at`` seconds
    since the soak started, ``expect_4xx`` (a bad input)."""

    route: str
    status: int | str
    seconds: float
    at: float
    expect_4xx: bool = False

    @property
    def failed(self) -> bool:
        """A 5xx, a transport error, or a bad input that was not refused with a 4xx."""
        if self.status == "error":
            return True
        if isinstance(self.status, int):
            return self.status >= 500 or (self.expect_4xx and not 400 <= self.status < 500)
        return False


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


@attrs.define
class Tally:
    """The samples of one soak and what they add up to."""

    duration: float
    samples: list[Sample] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    #: :func:`process_stats` at the end of the first window: the server warmed up (its compute buffers,
    #: templates, grammars, store), the baseline a leak would grow from
    warm: tuple[float, float, float] | None = None

    def add(self, sample: Sample, error: str | None = None) -> None:
        self.samples.append(sample)
        if error is not None and len(self.errors) < 20:
            self.errors.append(f"{sample.route}: {error}")

    @property
    def window(self) -> float:
        """Seconds of the first and last windows: 5 minutes, or half the run when it is shorter."""
        return min(300.0, self.duration / 2)

    @property
    def failures(self) -> list[Sample]:
        return [s for s in self.samples if s.failed]

    def rows(self) -> list[dict[str, object]]:
        """Per route and status: count; per route, latency p50 / p99 (ms) in the first and last window."""
        by_route: dict[str, list[Sample]] = defaultdict(list)
        for s in self.samples:
            by_route[s.route].append(s)
        out: list[dict[str, object]] = []
        for route in sorted(by_route):
            ss = by_route[route]
            statuses: dict[str, int] = defaultdict(int)
            for s in ss:
                statuses[str(s.status)] += 1
            first = [s.seconds * 1000 for s in ss if s.at < self.window]
            last = [s.seconds * 1000 for s in ss if s.at >= self.duration - self.window]
            out.append({"route": route, "n": len(ss),
                        "statuses": ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())),
                        "first_p50": percentile(first, 0.5), "first_p99": percentile(first, 0.99),
                        "last_p50": percentile(last, 0.5), "last_p99": percentile(last, 0.99),
                        "failed": sum(s.failed for s in ss)})
        return out

    def table(self) -> str:
        w = f"{self.window:g} s"
        lines = [f"| route | requests | statuses | p50 / p99 ms, first {w} | p50 / p99 ms, last {w} | failed |",
                 "|---|---:|---|---:|---:|---:|"]
        for r in self.rows():
            lines.append(f"| {r['route']} | {r['n']} | {r['statuses']} | {r['first_p50']:.0f} / {r['first_p99']:.0f} "
                         f"| {r['last_p50']:.0f} / {r['last_p99']:.0f} | {r['failed']} |")
        return "\n".join(lines)


# -- the scenarios -----------------------------------------------------------------------------------

Scenario = Callable[[httpx.AsyncClient, random.Random, Callable[..., None]], Awaitable[None]]


async def _post(client: httpx.AsyncClient, record: Callable[..., None], route: str, path: str, body: object,
                expect_4xx: bool = False) -> httpx.Response | None:
    t0 = time.monotonic()
    try:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = await client.post(path, content=content, headers={"content-type": "application/json"})
    except httpx.HTTPError as exc:
        record(route, "error", time.monotonic() - t0, error=repr(exc))
        return None
    record(route, r.status_code, time.monotonic() - t0, expect_4xx=expect_4xx,
           error=r.text[:200] if r.status_code >= 500 else None)
    return r


async def _stream(client: httpx.AsyncClient, record: Callable[..., None], route: str, path: str, body: dict,
                  stop_after: int | None = None) -> list[dict]:
    """Stream ``body``; the ``data:`` events as JSON (``stop_after``: disconnect after that many)."""
    t0 = time.monotonic()
    events: list[dict] = []
    try:
        async with client.stream("POST", path, json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
                record(route, resp.status_code, time.monotonic() - t0,
                       error=resp.text[:200] if resp.status_code >= 500 else None)
                return events
            async for line in resp.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[6:]))
                    if stop_after is not None and len(events) >= stop_after:
                        record(route, "disconnect", time.monotonic() - t0)
                        return events
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        record(route, "error", time.monotonic() - t0, error=repr(exc))
        return events
    failed = any(e.get("type") in ("error", "response.failed") or "error" in e for e in events)
    record(route, 500 if failed else 200, time.monotonic() - t0, error="error event" if failed else None)
    return events


def _chat(rng: random.Random, **extra: object) -> dict:
    return {"messages": [{"role": "user", "content": rng.choice(QUESTIONS)}], "max_tokens": 24, **extra}


async def chat(client, rng, record):
    await _post(client, record, "chat", "/v1/chat/completions", _chat(rng))


async def chat_stream(client, rng, record):
    await _stream(client, record, "chat stream", "/v1/chat/completions", _chat(rng, stream=True))


async def chat_tools(client, rng, record):
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": [WEATHER],
            "tool_choice": "required", "max_tokens": 48}
    await _post(client, record, "chat tools", "/v1/chat/completions", body)


async def chat_json(client, rng, record):
    body = _chat(rng, max_tokens=48, response_format={"type": "json_schema", "json_schema": {
        "name": "pick", "schema": SCHEMA}})
    await _post(client, record, "chat json_schema", "/v1/chat/completions", body)


async def completions(client, rng, record):
    await _post(client, record, "completions", "/v1/completions",
                {"prompt": rng.choice(QUESTIONS), "max_tokens": 24})


async def responses_chain(client, rng, record):
    stream = rng.random() < 0.5
    body = {"input": rng.choice(QUESTIONS), "max_output_tokens": 16}
    if stream:
        events = await _stream(client, record, "responses stream", "/v1/responses", {**body, "stream": True})
        done = [e for e in events if e.get("type") in ("response.completed", "response.incomplete")]
        rid = done[-1]["response"]["id"] if done else None
    else:
        r = await _post(client, record, "responses", "/v1/responses", body)
        rid = r.json()["id"] if r is not None and r.status_code == 200 else None
    if rid is not None:
        await _post(client, record, "responses previous_response_id", "/v1/responses",
                    {"input": "Say more.", "previous_response_id": rid, "max_output_tokens": 16})


async def anthropic(client, rng, record):
    await _post(client, record, "anthropic messages", "/v1/messages", {
        "model": "m", "max_tokens": 24, "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}]})


async def embeddings(client, rng, record):
    await _post(client, record, "embeddings", "/v1/embeddings", {"input": rng.sample(QUESTIONS, 3)})


async def disconnect(client, rng, record):
    await _stream(client, record, "disconnect mid-stream", "/v1/chat/completions",
                  _chat(rng, stream=True, max_tokens=200), stop_after=1)


BAD_INPUTS: list[tuple[str, bytes | dict]] = [
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}'),  # truncated JSON
    ("/v1/chat/completions", {"max_tokens": 8}),  # no messages
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": "get_weather"}),
    ("/v1/completions", {"prompt": "hi", "n": 0}),
    ("/v1/responses", {"input": "hi", "previous_response_id": "resp_never_stored"}),
    ("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),  # no max_tokens
    ("/v1/embeddings", {"input": []}),
]


async def bad_input(client, rng, record):
    path, body = rng.choice(BAD_INPUTS)
    await _post(client, record, "bad input", path, body, expect_4xx=True)


#: scenario -> weight
MIX: dict[Scenario, int] = {chat: 14, chat_stream: 12, chat_tools: 6, chat_json: 5, completions: 8,
                            responses_chain: 10, anthropic: 8, embeddings: 6, disconnect: 6, bad_input: 8}


async def soak(base_url: str, duration: float, concurrency: int, seed: int = 0) -> Tally:
    """Run the mix against ``base_url`` for ``duration`` seconds with ``concurrency`` clients."""
    tally = Tally(duration)
    t0 = time.monotonic()
    end = t0 + duration

    def record(route: str, status: int | str, seconds: float, expect_4xx: bool = False,
               error: str | None = None) -> None:
        tally.add(Sample(route, status, seconds, time.monotonic() - t0 - seconds, expect_4xx), error)

    async def worker(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        scenarios, weights = list(MIX), list(MIX.values())
        limits = httpx.Limits(max_connections=4)
        async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as client:
            while time.monotonic() < end:
                await rng.choices(scenarios, weights)[0](client, rng, record)

    async def warmed() -> None:
        await trio.sleep(tally.window)
        tally.warm = await trio.to_thread.run_sync(process_stats, base_url)

    async with trio.open_nursery() as nursery:
        for i in range(concurrency):
            nursery.start_soon(worker, i)
        with trio.move_on_after(duration):
            await warmed()
    return tally


# -- the server -------------------------------------------------------------------------------------

def process_stats(base_url: str) -> tuple[float, float, float]:
    """(RSS MiB, open file descriptors, MiB of the prompt cache and context checkpoints: host memory held by
    design, bounded by --cache-ram) of the server, from its /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    text = httpx.get(base_url + "/metrics", timeout=30).text
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return (values.get("process_resident_memory_bytes", float("nan")) / 2**20,
            values.get("process_open_fds", float("nan")), values.get("skippy:ctx_checkpoint_bytes", 0.0) / 2**20)


def start_server(store: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "skippy", "serve", "--port", str(port), "--parallel", "8",
                             "--n-ctx", "4096", "--embeddings", "--pooling", "mean", "--max-queue", "1024",
                             "--responses-store", f"sqlite:{store}"], stdout=log, stderr=subprocess.STDOUT,
                            env=os.environ.copy())
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the server did not start; see {log_path}")
        time.sleep(0.2)


def report(tally: Tally, start: tuple[float, float, float], end: tuple[float, float, float],
           rows: int | None) -> str:
    n = len(tally.samples)
    warm = tally.warm or (float("nan"),) * 3
    lines = [tally.table(), "",
             "| requests | failed | RSS MiB start -> warm -> end | of it prompt cache MiB "
             "| RSS outside it, warm -> end | open fds start -> end | Responses store rows |",
             "|---:|---:|---:|---:|---:|---:|---:|",
             f"| {n} | {len(tally.failures)} | {start[0]:.0f} -> {warm[0]:.0f} -> {end[0]:.0f} "
             f"| {start[2]:.0f} -> {warm[2]:.0f} -> {end[2]:.0f} | {warm[0] - warm[2]:.0f} -> {end[0] - end[2]:.0f} "
             f"| {start[1]:.0f} -> {end[1]:.0f} | {rows if rows is not None else 'n/a'} |",
             "", f"warm: at the end of the first window ({tally.window:g} s); a leak grows the RSS outside the "
             "prompt cache from there (the first requests' one-time allocations come before it)"]
    if tally.errors:
        lines += ["", "first failures:", *(f"- {e}" for e in tally.errors)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="mixed-load soak (see the module docstring)")
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds [default: 1200]")
    parser.add_argument("--concurrency", type=int, default=32, help="clients at once [default: 32]")
    parser.add_argument("--base-url", default=None, help="a running server (default: start one)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    proc = None
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        store = Path(tmp) / "responses.db"
        if args.base_url is None:
            OUT.mkdir(exist_ok=True)
            proc, url = start_server(store, OUT / "soak-mixed-server.log")
        else:
            url = args.base_url.rstrip("/")
        try:
            before = process_stats(url)
            tally = trio.run(soak, url, args.duration, args.concurrency, args.seed)
            after = process_stats(url)
            rows = None
            if proc is not None:
                with sqlite3.connect(store) as db:
                    rows = db.execute("SELECT count(*) FROM responses").fetchone()[0]
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=60)
    print(f"soak: {args.duration:g} s, {args.concurrency} clients, {url}")
    print(report(tally, before, after, rows))
    return 1 if tally.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
