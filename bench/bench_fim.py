"""Code-completion benchmark: a llama.vim editing session replayed against skippy and llama-server.

An editor plugin such as llama.vim sends, as the cursor moves through a file, one ``/infill`` request per
position: the ``n_prefix`` lines above the cursor, the ``n_suffix`` lines below, a few ``input_extra``
chunks of other code (its ring buffer), ``n_indent``, the ``infill`` sampler and ``response_fields``; and
between moves a cache warm-up (``n_predict`` 0) with the extra chunks. Once the cursor is past
``n_prefix`` lines, each move drops the prefix's first line and adds one at its end: the prompt shares
only the extra chunks and the FIM prefix token with the previous one as a prefix, and the rest follows
one line further up. llama.vim tells llama-server users to start it with ``--cache-reuse 256``, which
moves those cached chunks instead of prefilling them again.

Arms (each a server with the same model, slots, per-slot context and threads, started one after the
other on an idle machine): ``skippy`` (``--cache-reuse 256``), ``skippy-no-reuse`` (``--cache-reuse 0``:
prefix reuse only) and ``llama-server`` (``--cache-reuse 256``; built by ``make bench-peer``, skipped
when it is not there). The default model has no FIM tokens; all arms are given three of its control
tokens as FIM tokens (``--override-kv``), so the model is no infiller, but every arm runs the same
prompts: the numbers are prefill work and latency, not completion quality.

Per arm: the requests' median and p90 wall time (ms), median ``timings.prompt_ms``, and the prompt tokens
prefilled (``timings.prompt_n``) and reused (``cache_n``: skippy reports it; llama-server's is
``prompt tokens - prompt_n``) over the session; the ratios are against llama-server (or, without it,
against skippy-no-reuse). Greedy and ``n_predict`` fixed (no time limit), so the arms decode the same
number of tokens. Samples go to bench/out/fim-<time>.json.

    python bench/bench_fim.py [--moves N] [--reps N] [--threads T] [--arms skippy,skippy-no-reuse,llama-server]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from peer import llama_server_binary, llama_server_cmd  # noqa: E402

from skippy.models import DEFAULT_MODEL, ensure_model  # noqa: E402

OUT = Path(__file__).parent / "out"
#: three control tokens of SmolLM2 declared as its FIM prefix, suffix and middle tokens
FIM_KV = ["tokenizer.ggml.fim_pre_token_id=int:6", "tokenizer.ggml.fim_suf_token_id=int:7",
          "tokenizer.ggml.fim_mid_token_id=int:8"]
N_PREFIX, N_SUFFIX, N_PREDICT, RING_CHUNKS, CHUNK_LINES = 64, 16, 16, 2, 32
#: a ring-buffer warm-up before every WARM_EVERY-th move (llama.vim sends one when a chunk is queued, at most
#: every ring_update_ms, in normal mode: not between the completions of one typing burst)
WARM_EVERY = 5
#: llama.vim's recommended batch sizes (the --fim-qwen-*-default presets): format_infill's prefix and suffix
#: budgets follow n_batch, so every arm gets the same ones and builds the same prompts
BATCH = ["-b", "1024", "-ub", "1024"]
FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n", "timings/cache_n",
          "tokens_evaluated", "truncated", "tokens_cached"]


def source_file(n_funcs: int, seed: int) -> list[str]:
    """A Python file of small, distinct functions (about 6 lines each)."""
    lines = ["import math", "import os", ""]
    for i in range(n_funcs):
        k = (i * 7 + seed) % 13 + 1
        lines += [f"def step_{seed}_{i}(values, scale={k}):",
                  f'    """Scale the values by {k} and keep those below {k * 10 + i}."""',
                  f"    out = [v * scale for v in values if v % {k} != {i % k}]",
                  f"    total = sum(out) + math.floor(len(out) / {k + 1})",
                  f"    return [v for v in out if v < {k * 10 + i}], total", ""]
    return lines


def session(moves: int) -> tuple[list[dict], list[dict]]:
    """The session's requests: per move, a warm-up of the extra chunks and a completion request at the
    cursor, which moves one line down each time (starting past N_PREFIX lines: the prefix slides); a warm-up
    (``None``: none) before every :data:`WARM_EVERY`-th."""
    main, other = source_file(40, 1), source_file(40, 2)
    extra = [{"filename": "util.py", "text": "\n".join(other[i * CHUNK_LINES:(i + 1) * CHUNK_LINES]) + "\n"}
             for i in range(RING_CHUNKS)]
    warm: list[dict | None] = []
    fim = []
    for m in range(moves):
        y = N_PREFIX + 10 + m  # the cursor's line
        line = main[y]
        indent = len(line) - len(line.lstrip())
        warm.append(None if m % WARM_EVERY else {
            "id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
            "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 1,
            "t_max_predict_ms": 1, "response_fields": [""]})
        fim.append({"id_slot": 0, "input_prefix": "\n".join(main[y - N_PREFIX:y]) + "\n",
                    "input_suffix": "\n" + "\n".join(main[y + 1:y + 1 + N_SUFFIX]) + "\n", "input_extra": extra,
                    "prompt": line[:indent], "n_predict": N_PREDICT, "n_indent": indent, "top_k": 1,
                    "samplers": ["top_k", "infill"], "stream": False, "cache_prompt": True,
                    "t_max_prompt_ms": 500, "response_fields": FIELDS})
    return warm, fim


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base: str, proc: subprocess.Popen, log: Path) -> None:
    """Poll ``/health`` until 200; fail when the server exits or 180 s pass."""
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server did not become healthy (exit code {proc.returncode}); see {log}")


def start(arm: str, model: str, port: int, threads: int, n_ctx: int, log: Path) -> subprocess.Popen:
    # one comma-separated value: llama-server keeps only the last of a repeated --override-kv
    kv = ["--override-kv", ",".join(FIM_KV)]
    if arm == "llama-server":
        binary = llama_server_binary()
        assert binary is not None
        cmd = llama_server_cmd(binary, model, host="127.0.0.1", port=port, parallel=1, n_ctx=n_ctx, threads=threads,
                               extra=[*kv, *BATCH, "--cache-reuse", "256"])
    else:
        cmd = [sys.executable, "-m", "skippy", "serve", "-m", model, "--host", "127.0.0.1", "--port", str(port),
               "-np", "1", "-c", str(n_ctx), "-t", str(threads), *kv, *BATCH,
               "--cache-reuse", "256" if arm == "skippy" else "0"]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)


def run_arm(arm: str, model: str, moves: int, threads: int) -> list[dict]:
    port, n_ctx = free_port(), 8192
    log = OUT / f"fim-{arm}.log"
    proc = start(arm, model, port, threads, n_ctx, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, log)
        warm, fim = session(moves)
        samples = []
        with httpx.Client(base_url=base, timeout=600) as client:
            for w, f in zip(warm, fim, strict=True):
                if w is not None:
                    client.post("/infill", json=w).raise_for_status()
                t0 = time.perf_counter()
                r = client.post("/infill", json=f)
                wall = (time.perf_counter() - t0) * 1000.0
                r.raise_for_status()
                a = r.json()
                n_prompt = a["tokens_evaluated"]
                prefilled = a["timings/prompt_n"]
                samples.append({"wall_ms": wall, "prompt_ms": a["timings/prompt_ms"], "prompt_tokens": n_prompt,
                                "prefilled": prefilled, "reused": a.get("timings/cache_n", n_prompt - prefilled),
                                "predicted": a["timings/predicted_n"]})
        return samples
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--moves", type=int, default=12, help="cursor moves (one completion each) per session")
    p.add_argument("--reps", type=int, default=2, help="sessions per arm (arms alternate)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--arms", default="skippy,skippy-no-reuse,llama-server")
    p.add_argument("--model", default=DEFAULT_MODEL)
    args = p.parse_args()
    arms = args.arms.split(",")
    if "llama-server" in arms and llama_server_binary() is None:
        print("llama-server is not built (make bench-peer): that arm is skipped", file=sys.stderr)
        arms.remove("llama-server")
    model = str(ensure_model(args.model))
    OUT.mkdir(exist_ok=True)
    results: dict[str, list[dict]] = {a: [] for a in arms}
    for rep in range(args.reps):
        for arm in arms if rep % 2 == 0 else arms[::-1]:
            results[arm] += run_arm(arm, model, args.moves, args.threads)
    base = "llama-server" if "llama-server" in arms else "skippy-no-reuse" if "skippy-no-reuse" in arms else arms[0]
    summary = {}
    for arm, s in results.items():
        walls = sorted(x["wall_ms"] for x in s)
        summary[arm] = {"wall_p50_ms": st.median(walls), "wall_p90_ms": walls[int(0.9 * (len(walls) - 1))],
                        "prompt_ms_p50": st.median(x["prompt_ms"] for x in s),
                        "prefilled": sum(x["prefilled"] for x in s), "reused": sum(x["reused"] for x in s),
                        "prompt_tokens_p50": st.median(x["prompt_tokens"] for x in s), "requests": len(s)}
    n_prompt = summary[arms[0]]["prompt_tokens_p50"]
    print(f"\nllama.vim session: {args.moves} moves x {args.reps} reps, prompt ~{n_prompt:.0f} tokens, "
          f"n_predict {N_PREDICT}, {args.threads} threads; ratios: {base} / arm (> 1: faster)")
    print(f"{'arm':<17}{'wall p50 ms':>12}{'wall p90 ms':>12}{'prompt_ms p50':>14}{'prefilled':>11}{'reused':>9}"
          f"{'p50 ratio':>11}")
    for arm, v in summary.items():
        ratio = summary[base]["wall_p50_ms"] / v["wall_p50_ms"]
        print(f"{arm:<17}{v['wall_p50_ms']:>12.0f}{v['wall_p90_ms']:>12.0f}{v['prompt_ms_p50']:>14.0f}"
              f"{v['prefilled']:>11}{v['reused']:>9}{ratio:>10.2f}x")
    out = OUT / f"fim-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "summary": summary, "samples": results}, indent=1))
    print(f"samples: {out}")


if __name__ == "__main__":
    main()
