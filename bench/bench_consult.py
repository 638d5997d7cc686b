"""Consult benchmark: does a small model that asks another model when it is unsure answer better, and at what cost?

Three arms on the same machine, one after another, each its own ``skippy serve`` subprocess on a free port:

a. ``SmolLM2-135M-Instruct`` alone (hooks off);
b. SmolLM2 consulting Gemma 3 270M on the same server: ``skippy serve --model SmolLM2-135M-Instruct --model
   gemma-3-270m --consult gemma-3-270m --hooks-default-on`` (requests name SmolLM2; Gemma answers only the
   consultations); with ``--thresholds`` once per (``--consult-entropy``, ``--consult-margin``) pair, a
   server per pair (``inf`` entropy = never consult on the first token: sent as 1e9 with margin 0, as
   the flags take finite values only);
c. ``gemma-3-270m`` alone (hooks off): the peer's own accuracy, the ceiling a perfect relay would reach.

Each question of ``bench/data/consult_questions.jsonl`` (short questions with exact answers, ``kind``
``fact`` or ``math``) is one greedy streaming chat request (system: answer with just the answer;
``max_tokens`` 24; ``return_hook_events`` in arm b), one at a time, ``--reps`` times (one warm-up request
per served model first, not counted).

Scoring (:func:`correct`): the reply and every accepted form (``answer`` and ``aliases``) are normalized
(:func:`normalize`): Unicode accents dropped, lowercase, thousands commas between digits removed, split
into words and numbers (punctuation, hyphens and apostrophes separate words), the articles a/an/the
dropped, and runs of number words turned into digits ("twenty-four" -> 24, "one hundred" -> 100).

- ``fact``: correct when some accepted form's words appear as a whole, contiguous run starting within
  the reply's first WINDOW (12) words ("The capital is Paris." and "Paris" count; "Parisian" does not).
- ``math``: correct when the first number within the reply's first WINDOW words that does not occur in
  the question equals the answer ("2 + 2 = 4" and "Four." count for "What is 2 + 2?"; "2 + 2 = 5" and a
  list "5 or 4" do not): echoed operands are skipped, a wrong first guess is not.

Measures per arm (and per threshold pair): accuracy (overall, fact, math); for arm b the share of
requests that consulted (a hook event with a consultation report whose outcome is not ``skipped``) and
whose hint was injected (outcome ``answered``), fixed / broken (questions arm a got wrong and b right,
and the other way), the peer's latency (``consult.latency_ms``) and the tokens the peer spent (the
consult report has no token count: the peer model's ``llamacpp:prompt_tokens_total`` +
``llamacpp:tokens_predicted_total`` on ``/metrics``, scraped before and after each request, outside the
timed span); TTFT (request sent -> first content chunk, as bench_decode.py) and total latency (-> end
of stream), p50 and p95. "other CPU" (bench_decode.py's check: cores used by other processes during the
arm) above ~0.1 voids the latencies, not the accuracies (greedy).

The registry's ``gemma-3-270m`` is the base model (no chat template: skippy serves it with ChatML, and it
mostly echoes the question); there is no instruction-tuned Gemma in the registry: ``--peer`` / ``--asker``
swap the models (a registry name or a GGUF path).

All samples go to bench/out/consult-<time>.json, the server logs to bench/out/consult-<arm>.log.
``--limit N``: the first N questions (taken alternately from both kinds); ``--reps R``; ``--thresholds
[E:M,...]`` (default pairs 1.5:0.5,2.0:0.5,2.5:0.3,3.5:0.2,inf:0).

The first-token signal table: from arm b's ``after_prefill`` hook events (the same prompt in every
arm-b server, so one value per question), the entropy and margin quantiles, and their means over the
questions arm a answered right and wrong: whether the thresholds can tell a wrong start at all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics as st
import subprocess
import sys
import time
import unicodedata
from functools import partial
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_decode import cpu_snapshot, other_cpu, wait_healthy  # noqa: E402

from tests.support import free_port  # noqa: E402

ASKER, PEER = "SmolLM2-135M-Instruct", "gemma-3-270m"  # registry names (skippy/models/registry.py)
QUESTIONS = HERE / "data" / "consult_questions.jsonl"
OUT = HERE / "out"
SYSTEM = "Answer with just the answer: a word, a name or a number. No explanation."
MAX_TOKENS, WINDOW, REPS, THREADS = 24, 12, 2, os.cpu_count() or 1
CONSULT_FLAGS = ("--consult", "--consult-entropy", "--consult-margin", "--consult-timeout")
DEFAULT_PAIRS = "1.5:0.5,2.0:0.5,2.5:0.3,3.5:0.2,inf:0"
NEVER = 1e9  # --consult-entropy takes finite values: 1e9 nats is never reached

# -- scoring ------------------------------------------------------------------------------------------------

UNITS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                    "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
ARTICLES = {"a", "an", "the"}


def _is_number_word(w: str) -> bool:
    return w in UNITS or w in TENS or w in SCALES


def _merge_number_words(words: list[str]) -> list[str]:
    """Runs of number words (with an ``and`` inside: "one hundred and six") as one number in digits."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if not _is_number_word(words[i]):
            out.append(words[i])
            i += 1
            continue
        total = current = 0
        while i < len(words) and (_is_number_word(words[i]) or (
                words[i] == "and" and current and i + 1 < len(words) and _is_number_word(words[i + 1]))):
            w = words[i]
            if w in UNITS:
                current += UNITS[w]
            elif w in TENS:
                current += TENS[w]
            elif w == "hundred":
                current = max(current, 1) * 100
            elif w in SCALES:
                total += max(current, 1) * SCALES[w]
                current = 0
            i += 1
        out.append(str(total + current))
    return out


def normalize(text: str) -> list[str]:
    """Words and numbers of ``text``: accents dropped, lowercase, articles out, number words as digits."""
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    words = [w for w in re.findall(r"\d+(?:\.\d+)?|[a-z]+", text) if w not in ARTICLES]
    return _merge_number_words(words)


def _numeric(w: str) -> float | None:
    return float(w) if re.fullmatch(r"\d+(?:\.\d+)?", w) else None


def correct(q: dict, reply: str) -> bool:
    """The scoring rule of the module docstring (fact: an accepted form as a whole run starting in the first
    WINDOW words; math: the first number there not in the question equals the answer)."""
    words = normalize(reply)
    if q["kind"] == "math":
        asked = {_numeric(w) for w in normalize(q["question"])} - {None}
        answer = _numeric(normalize(q["answer"])[0])
        for w in words[:WINDOW]:
            if (x := _numeric(w)) is not None and x not in asked:
                return x == answer
        return False
    for form in [q["answer"], *q["aliases"]]:
        f = normalize(form)
        if f and any(words[i:i + len(f)] == f for i in range(min(WINDOW, len(words)))):
            return True
    return False


def load_questions(limit: int | None) -> list[dict]:
    """The questions; ``limit``: the first N, alternating fact and math so a quick run has both kinds."""
    qs = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    for q in qs:  # a math answer that the question itself contains would be skipped as an echoed operand
        asked = {_numeric(w) for w in normalize(q["question"])}
        if q["kind"] == "math" and _numeric(normalize(q["answer"])[0]) in asked:
            raise ValueError(f"{q['id']}: the answer {q['answer']} occurs in the question")
    if limit is None:
        return qs
    facts, maths = [q for q in qs if q["kind"] == "fact"], [q for q in qs if q["kind"] == "math"]
    mixed = [q for pair in zip(facts, maths, strict=False) for q in pair]
    mixed += facts[len(maths):] + maths[len(facts):]
    return mixed[:limit]


# -- requests -----------------------------------------------------------------------------------------------

async def peer_tokens(client: httpx.AsyncClient, model: str) -> float | None:
    """Prompt tokens prefilled + tokens generated so far by ``model`` (its ``/metrics`` series), or None."""
    text = (await client.get("/metrics")).text
    total, seen = 0.0, False
    for line in text.splitlines():
        for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"):
            if line.startswith(name + "{") and f'model="{model}"' in line:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
    return total if seen else None


async def ask(client: httpx.AsyncClient, model: str, q: dict, hooks: bool) -> dict:
    """One greedy streaming chat request: reply, TTFT, total latency, hook events, usage."""
    body = {"model": model, "temperature": 0, "max_tokens": MAX_TOKENS, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q["question"]}]}
    if hooks:
        body["return_hook_events"] = True
    parts: list[str] = []
    events: list[dict] = []
    ttft, usage = None, None
    t0 = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code} for {q['id']}: {(await r.aread()).decode()}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"error event in the stream for {q['id']}: {line}")
            for c in chunk.get("choices", []):
                events += c.get("hook_events") or []
                if text := c.get("delta", {}).get("content"):
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    parts.append(text)
            usage = chunk.get("usage") or usage
    total = time.perf_counter() - t0
    reply = "".join(parts)
    reports = [e["consult"] for e in events if e.get("consult")]
    used = [c for c in reports if c.get("outcome") != "skipped"]
    return {"id": q["id"], "kind": q["kind"], "reply": reply, "correct": correct(q, reply),
            "ttft": ttft if ttft is not None else total, "total": total,
            "completion_tokens": (usage or {}).get("completion_tokens"),
            "consulted": bool(used), "answered": any(c.get("outcome") == "answered" for c in used),
            "outcomes": [c.get("outcome") for c in used],
            "peer_latency_ms": [c["latency_ms"] for c in used if "latency_ms" in c], "hook_events": events}


async def run_arm(name: str, models: list[str], extra: list[str], ask_model: str, questions: list[dict],
                  reps: int, hooks: bool, peer: str | None = None) -> dict:
    """Start ``skippy serve`` with ``models`` and ``extra`` flags, warm every model up, then ask each question
    ``reps`` times (one at a time); the server is stopped (SIGTERM) at the end."""
    port = free_port()
    cmd = [str(Path(sys.executable).parent / "skippy"), "serve", "--host", "127.0.0.1", "--port", str(port),
           "--threads", str(THREADS), "--parallel", "2", "--n-ctx", "1024", "--log-level", "warning"]
    for m in models:
        cmd += ["--model", m]
    cmd += extra
    log_path = OUT / f"consult-{name.replace(' ', '_').replace(':', '-')}.log"
    samples: list[dict] = []
    with open(log_path, "wb") as log:
        async with trio.open_nursery() as nursery:
            proc = await nursery.start(partial(trio.run_process, cmd, stdout=log, stderr=subprocess.STDOUT,
                                               check=False))
            try:
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
                    await wait_healthy(client, proc, log_path)
                    for m in models:  # loads each model (on demand) before anything is timed
                        await ask(client, m, {"id": "warm-up", "kind": "fact", "question": "Say hello.",
                                              "answer": "hello", "aliases": []}, hooks)
                    pids = [os.getpid(), proc.pid]
                    a = cpu_snapshot(pids)
                    for rep in range(reps):
                        for q in questions:
                            before = await peer_tokens(client, peer) if peer else None
                            s = await ask(client, ask_model, q, hooks)
                            after = await peer_tokens(client, peer) if peer else None
                            s["peer_tokens"] = after - before if before is not None and after is not None else None
                            s["rep"] = rep
                            samples.append(s)
                    b = cpu_snapshot(pids)
            finally:
                nursery.cancel_scope.cancel()  # run_process sends SIGTERM (SIGKILL after 5 s)
    arm = {"name": name, "cmd": cmd, "samples": samples, "wall": b[0] - a[0], "other_cpu": other_cpu(a, b)}
    print(f"{name}: {len(samples)} requests in {arm['wall']:.0f} s, accuracy "
          f"{100 * st.mean(s['correct'] for s in samples):.1f}%, other CPU {arm['other_cpu']:.2f}", flush=True)
    return arm


# -- tables -------------------------------------------------------------------------------------------------

def pct(xs: list[float], q: float) -> float:
    """``q``-quantile with linear interpolation (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(arm: dict, base: dict | None) -> dict:
    ss = arm["samples"]

    def acc(kind: str | None) -> float:
        sel = [s["correct"] for s in ss if kind is None or s["kind"] == kind]
        return 100 * st.mean(sel) if sel else float("nan")

    out = {"n": len(ss), "accuracy": acc(None), "fact": acc("fact"), "math": acc("math"),
           "consulted": 100 * st.mean(s["consulted"] for s in ss), "answered": 100 * st.mean(s["answered"] for s in ss),
           "ttft_p50": 1e3 * pct([s["ttft"] for s in ss], 0.5), "ttft_p95": 1e3 * pct([s["ttft"] for s in ss], 0.95),
           "total_p50": 1e3 * pct([s["total"] for s in ss], 0.5),
           "total_p95": 1e3 * pct([s["total"] for s in ss], 0.95), "other_cpu": arm["other_cpu"]}
    lat = [x for s in ss for x in s["peer_latency_ms"]]
    out["peer_latency_p50"] = pct(lat, 0.5) if lat else None
    toks = [s["peer_tokens"] for s in ss if s.get("peer_tokens") is not None]
    out["peer_tokens_per_request"] = st.mean(toks) if toks else None
    n_consulted = sum(s["consulted"] for s in ss)
    out["peer_tokens_per_consult"] = sum(toks) / n_consulted if toks and n_consulted else None
    if base is not None:  # per question (first rep: greedy, the reps agree), against arm a
        first = {s["id"]: s["correct"] for s in base["samples"] if s["rep"] == 0}
        mine = {s["id"]: s["correct"] for s in ss if s["rep"] == 0}
        out["fixed"] = sum(1 for i, ok in mine.items() if ok and not first.get(i, True))
        out["broken"] = sum(1 for i, ok in mine.items() if not ok and first.get(i, False))
    return out


def fmt(x: float | None, spec: str = ".0f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_table(rows: list[tuple[str, dict]]) -> None:
    print("\n| arm | requests | accuracy % | fact % | math % | consulted % | hint injected % | fixed / broken vs a "
          "| TTFT p50 ms | TTFT p95 ms | total p50 ms | total p95 ms | peer latency p50 ms | peer tokens / request "
          "| peer tokens / consultation | other CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in rows:
        fb = f"{s['fixed']} / {s['broken']}" if "fixed" in s else ""
        print(f"| {name} | {s['n']} | {s['accuracy']:.1f} | {s['fact']:.1f} | {s['math']:.1f} | {s['consulted']:.1f} "
              f"| {s['answered']:.1f} | {fb} | {s['ttft_p50']:.0f} | {s['ttft_p95']:.0f} | {s['total_p50']:.0f} "
              f"| {s['total_p95']:.0f} | {fmt(s['peer_latency_p50'])} | {fmt(s['peer_tokens_per_request'], '.1f')} "
              f"| {fmt(s['peer_tokens_per_consult'], '.1f')} | {s['other_cpu']:.2f} |")


def signal_table(arms: dict[str, dict], base: dict | None) -> dict | None:
    """First-token entropy / margin per question (arm b's ``after_prefill`` events, rep 0), their p10/p50/p90,
    and their means where arm a was right and wrong."""
    sig: dict[str, tuple[float, float]] = {}
    for name, arm in arms.items():
        if name.startswith("b"):
            for s in arm["samples"]:
                for e in s["hook_events"]:
                    if e.get("event") == "after_prefill" and e.get("entropy") is not None and s["id"] not in sig:
                        sig[s["id"]] = (e["entropy"], e["margin"])
    if not sig:
        return None
    ok = {s["id"]: s["correct"] for s in base["samples"] if s["rep"] == 0} if base else {}
    out: dict = {"questions": len(sig)}
    print("\n| first-token signal (arm b) | p10 | p50 | p90 | mean, arm a right | mean, arm a wrong |")
    print("|---|---:|---:|---:|---:|---:|")
    for k, label in ((0, "entropy (nats)"), (1, "margin (nats)")):
        xs = [v[k] for v in sig.values()]
        right = [v[k] for i, v in sig.items() if ok.get(i) is True]
        wrong = [v[k] for i, v in sig.items() if ok.get(i) is False]
        row = {"p10": pct(xs, 0.1), "p50": pct(xs, 0.5), "p90": pct(xs, 0.9),
               "right": st.mean(right) if right else None, "wrong": st.mean(wrong) if wrong else None}
        out[label.split()[0]] = row
        print(f"| {label} | {row['p10']:.2f} | {row['p50']:.2f} | {row['p90']:.2f} | {fmt(row['right'], '.2f')} "
              f"| {fmt(row['wrong'], '.2f')} |")
    return out


def consult_flags_available() -> bool:
    help_text = subprocess.run([str(Path(sys.executable).parent / "skippy"), "serve", "--help"],
                               capture_output=True, text=True, check=False).stdout
    return all(re.search(rf"(^|\s){re.escape(f)}\b", help_text) for f in CONSULT_FLAGS)


def parse_pairs(spec: str) -> list[tuple[float, float]]:
    pairs = []
    for item in spec.split(","):
        e, m = item.split(":")
        pairs.append((float(e), float(m)))
    return pairs


def main() -> None:
    global MAX_TOKENS, ASKER, PEER
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="the first N questions (fact and math alternated)")
    ap.add_argument("--reps", type=int, default=REPS, help="times each question is asked per arm")
    ap.add_argument("--thresholds", nargs="?", const=DEFAULT_PAIRS, default=None, metavar="E:M,...",
                    help=f"sweep (--consult-entropy, --consult-margin) pairs in arm b (default {DEFAULT_PAIRS}; "
                         "inf = never on the first token); without it arm b runs the server's defaults")
    ap.add_argument("--consult-timeout", type=float, default=10.0, help="arm b's --consult-timeout (seconds)")
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    ap.add_argument("--arms", default="a,b,c", help="which arms to run (comma-separated: a, b, c)")
    ap.add_argument("--asker", default=ASKER, help="the model that answers (and consults in arm b)")
    ap.add_argument("--peer", default=PEER, help="the model consulted (served beside the asker in arm b)")
    args = ap.parse_args()
    MAX_TOKENS, ASKER, PEER = args.max_tokens, args.asker, args.peer
    arms_wanted = set(args.arms.split(","))
    OUT.mkdir(exist_ok=True)
    questions = load_questions(args.limit)
    print(f"{len(questions)} questions ({sum(q['kind'] == 'fact' for q in questions)} fact, "
          f"{sum(q['kind'] == 'math' for q in questions)} math) x {args.reps} reps, {THREADS} threads", flush=True)
    t_start = time.monotonic()
    arms: dict[str, dict] = {}
    if "a" in arms_wanted:
        arms[f"a: {ASKER} alone"] = trio.run(run_arm, "a", [ASKER], [], ASKER, questions, args.reps, False)
    skipped_b = None
    if "b" in arms_wanted:
        if not consult_flags_available():
            skipped_b = "consult flags not available: arm b skipped"
            print(skipped_b, flush=True)
        else:
            pairs = parse_pairs(args.thresholds) if args.thresholds else [None]
            for pair in pairs:
                extra = ["--consult", PEER, "--hooks-default-on", "--consult-timeout", str(args.consult_timeout)]
                label = f"b: {ASKER} + consult {PEER} (server defaults)"
                if pair is not None:
                    e, m = pair
                    extra += ["--consult-entropy", str(e if math.isfinite(e) else NEVER), "--consult-margin", str(m)]
                    label = f"b: {ASKER} + consult {PEER} E>={e:g} M<={m:g}" + (" (never at the start)"
                                                                        if not math.isfinite(e) else "")
                arms[label] = trio.run(run_arm, f"b-{pair[0]:g}-{pair[1]:g}" if pair else "b", [ASKER, PEER],
                                       extra, ASKER, questions, args.reps, True, PEER)
                arms[label]["pair"] = pair
    if "c" in arms_wanted:
        arms[f"c: {PEER} alone"] = trio.run(run_arm, "c", [PEER], [], PEER, questions, args.reps, False)
    base = arms.get(f"a: {ASKER} alone")
    summary = {name: summarize(arm, base if name.startswith("b") else None) for name, arm in arms.items()}
    print_table(list(summary.items()))
    b_arms = [(n, s) for n, s in summary.items() if n.startswith("b")]
    if b_arms and not any(s["consulted"] for _, s in b_arms):
        print("\nwarning: arm b never consulted (no consultation report in hook_events): is the consult policy "
              "running?")
    if b_arms and base is not None:
        a = summary[f"a: {ASKER} alone"]
        print("\n| arm b setting | accuracy gain vs a (points) | TTFT p50 cost vs a (ms) | total p50 cost vs a (ms) "
              "| points per consulted % |")
        print("|---|---:|---:|---:|---:|")
        for n, s in b_arms:
            gain = s["accuracy"] - a["accuracy"]
            per = gain / s["consulted"] if s["consulted"] else float("nan")
            print(f"| {n[3:]} | {gain:+.1f} | {s['ttft_p50'] - a['ttft_p50']:+.0f} "
                  f"| {s['total_p50'] - a['total_p50']:+.0f} | {fmt(per, '.2f')} |")
    signals = signal_table(arms, base)
    if skipped_b:
        print(f"\n{skipped_b}")
    if any(s["other_cpu"] > 0.1 for s in summary.values()):
        print("\nwarning: other processes used CPU during the run (see 'other CPU'); latencies are not reliable")
    wall = time.monotonic() - t_start
    print(f"\nwall time: {wall:.0f} s ({len(questions)} questions x {args.reps} reps, {len(arms)} arms)")
    path = OUT / f"consult-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"questions": len(questions), "limit": args.limit, "reps": args.reps,
                                "max_tokens": MAX_TOKENS, "window": WINDOW, "system": SYSTEM, "threads": THREADS,
                                "thresholds": args.thresholds, "arm_b_skipped": skipped_b, "wall": wall,
                                "summary": summary, "signals": signals, "arms": arms}, indent=1))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
