"""The GPU run's one table (bench/gpu/run.sh prints it last): skippy against llama-server, from the run's JSON.

    python bench/gpu/report.py OUTDIR

Reads ``OUTDIR/phases.tsv`` (run.sh: phase, status, seconds, note), ``OUTDIR/tests.xml`` (pytest's JUnit
report of the GPU tests) and every ``decode-*.json`` (bench_decode.py ``--no-raw``) and ``burst-*.json``
(bench_burst.py) under ``OUTDIR/<model>/``; prints the phases, the tests' counts, then one table of ratios
(skippy arm / llama-server, the same run): output tok/s at each concurrency (target >= 1.2x at c16 and
above, >= 1.0x at c1), TTFT at c1 (<= 1.0x) and, from bench_decode's step histograms, the per-step overhead
over the decode time at B = 64 (<= 10%). Writes the same as ``OUTDIR/summary.md``. Standard library only.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def phases(out: Path) -> list[list[str]]:
    p = out / "phases.tsv"
    if not p.is_file():
        return []
    return [line.split("\t") for line in p.read_text().splitlines() if line.strip()]


def tests(out: Path) -> str:
    p = out / "tests.xml"
    if not p.is_file():
        return "GPU tests: no report (not run)"
    root = ET.parse(p).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    bad = [f"{c.get('classname', '')}.{c.get('name')}" for s in suites for c in s.iter("testcase")
           if c.find("failure") is not None or c.find("error") is not None]
    return (f"GPU tests: {passed} passed, {n['failures']} failed, {n['errors']} errors, {n['skipped']} skipped"
            + (f" (failed: {', '.join(bad)})" if bad else ""))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _met(r: float | None, target: str) -> str:
    if r is None or not target:
        return ""
    op, lim = target.split()
    lim_v = float(lim.rstrip("x%")) / (100 if lim.endswith("%") else 1)
    return "yes" if (r >= lim_v if op == ">=" else r <= lim_v) else "NO"


def overhead_over_decode(waves: list[dict], c: int) -> float | None:
    """Sum of ``skippy:step_overhead_seconds`` over sum of ``skippy:decode_seconds`` in the waves at ``c``."""
    hs = [w["steps"] for w in waves if w["c"] == c and w.get("steps")]
    dec = sum(h["skippy:decode_seconds"]["sum"] for h in hs)
    return sum(h["skippy:step_overhead_seconds"]["sum"] for h in hs) / dec if dec else None


def decode_rows(model: str, path: Path) -> list[list[str]]:
    d = json.loads(path.read_text())
    levels = {arm: {int(c): v for c, v in lv.items()} for arm, lv in d["levels"].items()}
    peer = levels.get("llama-server", {})
    rows = []
    for arm, lv in levels.items():
        if arm == "llama-server":
            continue
        for c, v in sorted(lv.items()):
            p = peer.get(c, {})
            r = _ratio(v["aggregate"], p.get("aggregate"))
            target = ">= 1.2x" if c >= 16 else ">= 1.0x"
            rows.append([model, "decode", arm, f"c{c}", "out tok/s", _fmt(v["aggregate"], 1),
                         _fmt(p.get("aggregate"), 1), _fmt(r), target, _met(r, target)])
            if c == 1:
                r = _ratio(v["ttft_ms"], p.get("ttft_ms"))
                rows.append([model, "decode", arm, "c1", "TTFT ms", _fmt(v["ttft_ms"], 1), _fmt(p.get("ttft_ms"), 1),
                             _fmt(r), "<= 1.0x", _met(r, "<= 1.0x")])
        for c in sorted(lv):
            if c == 64 or (c == max(lv) and 64 not in lv):
                r = overhead_over_decode(d["waves"][arm], c)
                rows.append([model, "decode", arm, f"B={c}", "step overhead / decode", _fmt(r, 3), "", "",
                             "<= 10%", _met(r, "<= 10%")])
    for arm, err in d.get("errors", {}).items():
        rows.append([model, "decode", arm, "", f"FAILED: {err[:80]}", "", "", "", "", "NO"])
    return rows


def burst_rows(model: str, path: Path) -> list[list[str]]:
    d = json.loads(path.read_text())
    summ = [s for s in d["summaries"] if s["workload"] == "short"]
    peer = {s["c"]: s for s in summ if s["arm"] == "llama-server"}
    rows = []
    for s in summ:
        if s["arm"] == "llama-server":
            continue
        p = peer.get(s["c"], {})
        r = _ratio(s["tok_per_s"], p.get("tok_per_s"))
        target = ">= 1.2x" if s["c"] >= 16 else ">= 1.0x"
        ok = f" ({s['ok']}/{s['n']} ok)" if s["ok"] != s["n"] else ""
        rows.append([model, "burst", s["arm"], f"c{s['c']}", "out tok/s" + ok, _fmt(s["tok_per_s"], 1),
                     _fmt(p.get("tok_per_s"), 1), _fmt(r), target, _met(r, target)])
        if s["c"] == 1:
            r = _ratio(s["ttft_p50"], p.get("ttft_p50"))
            rows.append([model, "burst", s["arm"], "c1", "TTFT p50 ms", _fmt(s["ttft_p50"] and s["ttft_p50"] * 1e3, 1),
                         _fmt(p.get("ttft_p50") and p["ttft_p50"] * 1e3, 1), _fmt(r), "<= 1.0x",
                         _met(r, "<= 1.0x")])
    if d.get("error"):
        rows.append([model, "burst", "", "", f"FAILED: {d['error'][:80]}", "", "", "", "", "NO"])
    return rows


def table(out: Path) -> str:
    lines = []
    ph = phases(out)
    if ph:
        lines += ["| phase | status | seconds | note |", "|---|---|---:|---|"]
        lines += ["| " + " | ".join((p + ["", "", "", ""])[:4]) + " |" for p in ph]
        lines.append("")
    lines += [tests(out), ""]
    rows: list[list[str]] = []
    for model_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        for path in sorted(model_dir.glob("**/decode-*.json")):
            rows += decode_rows(model_dir.name, path)
        for path in sorted(model_dir.glob("**/burst-*.json")):
            rows += burst_rows(model_dir.name, path)
    lines += ["| model | bench | arm | level | measure | skippy | llama-server | ratio | target | met |",
              "|---|---|---|---|---|---:|---:|---:|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows] or ["| (no benchmark results) |||||||||"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(args[0])
    text = table(out)
    (out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
