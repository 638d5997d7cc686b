"""bench/gpu/run.sh cannot rot between GPU runs: its dry run here (GPU=none), and the parts it is made of.

The dry run takes the script's real path with this venv and the CPU: its argument handling, the phases in order
under their time caps, a model rebuilt from the real one's skeleton (bench/gpu/gguf_skeleton.py), the GPU tests'
file (its CPU tests run, the GPU ones skip), bench_decode --no-raw and bench_burst at one level against
llama-server (when ``make bench-peer`` built it), packing for the device tool's $OUT, and the table printed last
from the JSON the benchmarks wrote (bench/gpu/report.py). About a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "gpu" / "run.sh"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
HOME = Path(os.environ.get("SKIPPY_HOME") or Path.home() / ".cache" / "skippy")

sys.path.insert(0, str(ROOT / "bench" / "gpu"))
import gguf_skeleton  # noqa: E402
import report  # noqa: E402


def test_the_script_wants_one_outdir_and_a_known_gpu(tmp_path: Path) -> None:
    out = subprocess.run(["bash", str(RUN)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "usage: bench/gpu/run.sh OUTDIR" in out.stderr
    out = subprocess.run(["bash", str(RUN), str(tmp_path)], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "GPU": "rocm"})
    assert out.returncode == 2 and "GPU=rocm is not cuda or none" in out.stderr


@pytest.mark.slow
def test_a_skeleton_rebuilds_a_model_of_the_same_layout(tmp_path: Path) -> None:
    import gguf

    real = HOME / "models" / SMOL
    if not real.is_file():
        pytest.skip(f"{SMOL} is not in the model cache (skippy pull)")
    head, table = gguf_skeleton.skeleton(real, tmp_path / "skel")
    assert head.stat().st_size < 1 << 20
    out = gguf_skeleton.synth(tmp_path / "skel" / SMOL, tmp_path / SMOL)
    assert out.stat().st_size == real.stat().st_size
    a, b = gguf.GGUFReader(real), gguf.GGUFReader(out)
    assert [(t.name, t.tensor_type, list(t.shape)) for t in a.tensors] == \
           [(t.name, t.tensor_type, list(t.shape)) for t in b.tensors]
    assert a.fields["tokenizer.chat_template"].contents() == b.fields["tokenizer.chat_template"].contents()
    zero = json.loads(table.read_text())["zero_rows"]
    assert 2 in zero  # <|im_end|>, SmolLM2's EOS: its output row is zero, its logit 0
    embd = next(t for t in b.tensors if t.name == "token_embd.weight")
    assert 1000 not in zero and not embd.data[2].any() and embd.data[1000].any()


@pytest.mark.slow
def test_the_dry_run_goes_through_every_phase_and_prints_the_table_last(tmp_path: Path) -> None:
    if not (HOME / "models" / SMOL).is_file():
        pytest.skip(f"{SMOL} is not in the model cache (skippy pull)")
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "GPU": "none", "WORK": str(work), "PYTHON": sys.executable, "PACK": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("CI", None)  # the GPU tests skip here, as on any machine without a GPU
    proc = subprocess.run(["bash", str(RUN), str(out)], capture_output=True, text=True, timeout=240, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    phases = [line.split("\t") for line in (out / "phases.tsv").read_text().splitlines()]
    assert [p[0] for p in phases] == ["build", "venv", "models", "tests", "decode-smollm2", "burst-smollm2",
                                       "sampling-smollm2"], log
    assert all(p[1] == "ok" for p in phases), phases
    assert "GPU tests: 2 passed, 0 failed, 0 errors, 6 skipped" in log
    # packed for the device tool's $OUT (at most 8 files come back): the table, the log, the phases, the archive
    assert sorted(p.name for p in out.iterdir()) == ["phases.tsv", "results.tar.gz", "run.log", "summary.md",
                                                     "tests.xml"]
    with tarfile.open(out / "results.tar.gz") as tar:
        names = tar.getnames()
    assert any(n.startswith("./smollm2/decode/decode-") and n.endswith(".json") for n in names), names
    assert any(n.startswith("./smollm2/burst/burst-") and n.endswith(".json") for n in names), names
    assert any(n.startswith("./smollm2/sampling/sampling-") and n.endswith(".json") for n in names), names
    assert "| default | 1 |" in log and "scheduler host loop, B = 1" in log  # the sampling tables, printed
    table = (out / "summary.md").read_text().strip()
    assert proc.stdout.rstrip().endswith(table.splitlines()[-1])  # the table comes last
    rows = [r for r in table.splitlines() if r.startswith("| smollm2 |")]
    assert any("| decode | skippy | c1 | out tok/s |" in r for r in rows), table
    assert any("| decode | skippy-bs | c1 | out tok/s |" in r for r in rows), table
    assert any("| burst | skippy | c1 | out tok/s |" in r for r in rows), table
    peer = (HOME / "llama-server").glob("*/bin/llama-server")
    if any(os.access(p, os.X_OK) for p in peer):  # make bench-peer built it: the ratios are there
        assert all(r.split("|")[8].strip() not in ("", "-") for r in rows if "out tok/s" in r), table


def test_the_report_reads_the_benchmarks_json(tmp_path: Path) -> None:
    """report.py's ratios and targets from JSON shaped as bench_decode --no-raw and bench_burst write it."""
    steps = {"skippy:decode_seconds": {"sum": 1.0}, "skippy:step_overhead_seconds": {"sum": 0.05}}
    lv = {"aggregate": 120.0, "ttft_ms": 9.0, "tpot_ms": 1.0}
    (tmp_path / "m" / "decode").mkdir(parents=True)
    (tmp_path / "m" / "decode" / "decode-1.json").write_text(json.dumps({
        "levels": {"skippy": {"1": lv, "64": {**lv, "aggregate": 1300.0}},
                   "llama-server": {"1": {**lv, "aggregate": 100.0, "ttft_ms": 10.0},
                                    "64": {**lv, "aggregate": 1000.0}}},
        "waves": {"skippy": [{"c": 64, "steps": steps}]}, "errors": {}}))
    (tmp_path / "m" / "burst").mkdir()
    wave = {"workload": "short", "c": 16, "ttft_p50": 0.01, "ok": 16, "n": 16}
    (tmp_path / "m" / "burst" / "burst-1.json").write_text(json.dumps({"error": None, "summaries": [
        {**wave, "arm": "skippy", "tok_per_s": 100.0}, {**wave, "arm": "llama-server", "tok_per_s": 90.0}]}))
    (tmp_path / "phases.tsv").write_text("build\tok\t200\t\n")
    text = report.table(tmp_path)
    assert "| build | ok | 200 |  |" in text and "GPU tests: no report (not run)" in text
    assert "| m | decode | skippy | c1 | out tok/s | 120.0 | 100.0 | 1.20 | >= 1.0x | yes |" in text
    assert "| m | decode | skippy | c1 | TTFT ms | 9.0 | 10.0 | 0.90 | <= 1.0x | yes |" in text
    assert "| m | decode | skippy | c64 | out tok/s | 1300.0 | 1000.0 | 1.30 | >= 1.2x | yes |" in text
    assert "| m | decode | skippy | B=64 | step overhead / decode | 0.050 |  |  | <= 10% | yes |" in text
    assert "| m | burst | skippy | c16 | out tok/s | 100.0 | 90.0 | 1.11 | >= 1.2x | NO |" in text
