"""Context checkpoints (issue 21): a 6-turn conversation on a recurrent / hybrid model, checkpoints on vs off.

Arms (``skippy serve`` started here on a free loopback port, the same model and flags apart from these):
  on    the defaults (``--ctx-checkpoints 32 --cache-ram 8192``): each turn's state is saved at its
        history boundary and the next turn restores it
  off   ``--ctx-checkpoints 0``: every turn prefills the whole conversation again (skippy before issue 21)

The conversation: a system prompt, then 6 user turns of about ``--turn-words`` words each; the
assistant answers are fixed texts (the same for both arms), so both arms get byte-identical prompts.
Each turn is one non-streaming chat request with ``max_tokens: 1``, so its end-to-end time is the TTFT
(client-side, ``time.perf_counter``); ``timings.prompt_n`` / ``cache_n`` are the tokens prefilled and
reused. Arms alternate per turn (on, off, off, on...), and the whole conversation runs ``--repeat``
times with a fresh conversation text each time; the table gives medians.

Model: ``--model`` (a GGUF path or cache name; default: the tiny random-weight ``lfm2`` GGUF that
tests/tiny_models.py writes to bench/out/, a hybrid model of short-convolution and attention layers).

Usage: ``.venv/bin/python bench/bench_checkpoints.py [--model PATH] [--repeat 3]``. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support import free_port  # noqa: E402

WORDS = ("harbour river signal lantern copper meadow winter engine pattern ledger orbit canvas thunder "
         "garden marble falcon velvet quarry ribbon summit").split()


def start(model: str, extra: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "skippy", "serve", "--model", model, "--port", str(port),
                             "--parallel", "2", "--n-ctx", "8192", *extra],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("server not ready")


def text(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * i) % len(WORDS)] for i in range(n)) + "."


def turn(url: str, messages: list[dict]) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/chat/completions", timeout=600,
                   json={"messages": messages, "max_tokens": 1, "temperature": 0})
    dt = time.perf_counter() - t0
    r.raise_for_status()
    t = r.json()["timings"]
    return dt, t["prompt_n"], t["cache_n"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path or cache name [default: the generated tiny lfm2]")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--turn-words", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        from tests.tiny_models import ensure_tiny

        model = str(ensure_tiny("lfm2", out))
    arms = {"on": [], "off": ["--ctx-checkpoints", "0"]}
    servers = {name: start(model, extra, out / f"checkpoints-{name}.log") for name, extra in arms.items()}
    rows: dict[tuple[int, str], list[tuple[float, int, int]]] = {}
    try:
        for rep in range(args.repeat):
            msgs: list[dict] = [{"role": "system", "content": f"Conversation {rep}. Answer briefly."}]
            for k in range(args.turns):
                msgs.append({"role": "user", "content": text(rep * 100 + k, args.turn_words)})
                order = ["on", "off"] if (rep + k) % 2 == 0 else ["off", "on"]
                for name in order:
                    rows.setdefault((k, name), []).append(turn(servers[name][1], msgs))
                msgs.append({"role": "assistant", "content": text(rep * 100 + k + 50, 12)})
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    print(f"model: {model}; {args.turns} turns of ~{args.turn_words} words, medians of {args.repeat} conversations\n")
    print("| turn | prompt tokens | prefilled (on) | prefilled (off) | cached (on) | TTFT on ms | TTFT off ms "
          "| TTFT off/on |")
    print("|---|---|---|---|---|---|---|---|")
    for k in range(args.turns):
        on, off = rows[(k, "on")], rows[(k, "off")]
        t_on, t_off = st.median(r[0] for r in on), st.median(r[0] for r in off)
        n_on, n_off = st.median(r[1] for r in on), st.median(r[1] for r in off)
        c_on = st.median(r[2] for r in on)
        print(f"| {k + 1} | {n_on + c_on:.0f} | {n_on:.0f} | {n_off:.0f} | {c_on:.0f} | {t_on * 1e3:.0f} | "
              f"{t_off * 1e3:.0f} | {t_off / t_on:.2f}x |")


if __name__ == "__main__":
    main()
