"""Hook parking benchmark: a sequence waiting in its hook must not slow the others.

One ``skippy serve --hook-policy bench.hook_policy:make --hook-timeout 5`` run;
two waves of 8 concurrent streaming chats (greedy, 128 max tokens), alternated
REPS times:

- control: 8 streams, hooks off;
- parked: the same 8 streams with hooks on, one of them (``user == "wait"``)
  parked 2 s in ``after_prefill``.

Aggregate output tok/s of the 7 unparked streams over their own wall time is
compared with the same 7 streams in the control wave (target >= 0.90): while
one sequence waits on its policy, the decode loop keeps serving the others.
Run on an otherwise idle machine.
"""

from __future__ import annotations

import json
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support import free_port  # noqa: E402

REPS = 3
PROMPTS = [f"Write a long story about a {w}." for w in
           ("dragon", "robot", "pirate", "wizard", "astronaut", "detective", "knight", "sailor")]


async def stream(client: httpx.AsyncClient, prompt: str, user: str | None, hooks: bool) -> tuple[int, float, float]:
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 128,
            "stream": True, "stream_options": {"include_usage": True}, "mesh_hooks": hooks}
    if user:
        body["user"] = user
    t0 = time.perf_counter()
    tokens = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    return tokens, t0, time.perf_counter()


async def wave(base_url: str, hooks: bool) -> float:
    """Aggregate tok/s of the 7 streams that never wait (stream 0 waits when ``hooks``)."""
    results: list[tuple[int, float, float]] = [None] * 8  # type: ignore[list-item]
    async with httpx.AsyncClient(base_url=base_url, timeout=300) as client:
        async def one(i: int) -> None:
            results[i] = await stream(client, PROMPTS[i], "wait" if (hooks and i == 0) else None, hooks)

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(one, i)
    others = results[1:]
    tokens = sum(r[0] for r in others)
    wall = max(r[2] for r in others) - min(r[1] for r in others)
    return tokens / wall


async def main() -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "skippy", "serve", "--port", str(port), "--parallel", "8",
                               "--n-ctx", "1024", "--hook-policy", "bench.hook_policy:make", "--hook-timeout", "5",
                               "--log-level", "warning"], cwd=ROOT, env={"PYTHONPATH": str(ROOT),
                                                                          **__import__("os").environ})
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            for _ in range(600):
                try:
                    if (await client.get("/health")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await trio.sleep(0.1)
        await wave(base, hooks=False)  # warm-up
        control, parked = [], []
        for rep in range(REPS):
            control.append(await wave(base, hooks=False))
            parked.append(await wave(base, hooks=True))
            print(f"rep {rep + 1}: control {control[-1]:.1f} tok/s, one parked 2 s {parked[-1]:.1f} tok/s",
                  file=sys.stderr)
    finally:
        server.terminate()
        server.wait()
    c, p = st.median(control), st.median(parked)
    print("| measure | value | target | ok |\n|---|---:|---|---|")
    print(f"| 7 streams, control (tok/s) | {c:.1f} | | |")
    print(f"| 7 streams beside one parked 2 s in its hook (tok/s) | {p:.1f} | | |")
    print(f"| ratio | {p / c:.2f} | >= 0.90 | {'yes' if p / c >= 0.9 else 'no'} |")


if __name__ == "__main__":
    trio.run(main)
