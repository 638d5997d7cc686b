"""The model cache on disk: where it is (:func:`skippy_home`, :func:`models_dir`), which file a model
argument names (:func:`resolve_model`, :func:`find_model`), what it holds (:func:`list_models`) and
deleting from it (:func:`remove_model`): ``skippy list`` / ``skippy rm``.

A model is named either by a path to a local GGUF file or by a name from
:data:`~skippy.models.registry.REGISTRY` (case-insensitive, aliases allowed). Registry models live
in the cache at ``skippy_home() / "models" / <file name>``; so do the GGUFs pulled from a URL or
Hugging Face, under their file names.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

from skippy.models.gguf import _check_gguf
from skippy.models.registry import REGISTRY, ModelError, ModelSpec, _known_names, lookup


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


def _cache_path(spec: ModelSpec) -> Path:
    return models_dir() / spec.filename


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """Turn a model argument into the path of its GGUF file.

    Args:
        name_or_path: a path to an existing GGUF file, or a registry name or
            alias (see :data:`~skippy.models.registry.REGISTRY`, matched case-insensitively), or the
            name of another GGUF file in the cache (e.g. pulled from a URL),
            with or without ``.gguf``, or an ``/api/copy`` alias of either
            (:func:`resolve_alias`).

    Returns:
        For an existing file, that path (``~`` expanded, otherwise as
        given). For a registry name, the cache path
        ``skippy_home()/models/<file>``, which may not exist yet (see
        :func:`~skippy.models.sources.ensure_model` / :func:`~skippy.models.wheels.pull`); for
        another cached file, its path.

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
    target = resolve_alias(raw)
    if target != raw:  # an /api/copy alias of a registry model or a cached file (one step: no alias of an alias)
        spec = lookup(target)
        cached = _cache_path(spec) if spec is not None else _find_cached(target)
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


def registry_file(path: str | os.PathLike[str]) -> ModelSpec | None:
    """The registry entry whose GGUF file ``path`` is, else ``None``: the entry's file in the cache (``path``
    itself, or a link to it named as the file), or a copy of that file elsewhere, recognised by the registry's
    file name and size (the file ``skippy pull`` writes: e.g. the default cache's while ``SKIPPY_HOME`` names
    another). A copy or link under another file name is not recognised: it keeps its own name."""
    p = Path(path).expanduser()
    for spec in REGISTRY.values():
        if p.name != spec.filename:
            continue
        try:
            if p.resolve() == _cache_path(spec).resolve() or p.stat().st_size == spec.size:
                return spec
        except (OSError, RuntimeError):  # a missing file, a link loop: not that file
            continue
    return None


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
    """The model files of ``directory``: its ``*.gguf`` files but the ``NAME.mmproj.gguf`` projectors (a model's
    image input, ``skippy serve --models-dir`` pairs them with ``NAME.gguf``)."""
    try:
        return sorted((p for p in directory.iterdir() if p.suffix.lower() == ".gguf" and p.is_file()
                       and not p.name.lower().endswith(".mmproj.gguf")), key=lambda p: p.name.casefold())
    except OSError:
        return []


def list_models(models_dirs: Iterable[str | os.PathLike[str]] = ()) -> list[CachedModel]:
    """Every model ``skippy list`` shows, in order: the registry's (pulled or not), the cache's other GGUF
    files, then the GGUF files directly in each of ``models_dirs`` (not recursive; a missing directory
    raises :class:`~skippy.models.registry.ModelError`)."""
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


def cached_file(name: str) -> Path | None:
    """The cache's GGUF file a name names, as :func:`remove_model` takes it (a registry name or alias: its
    cache path, existing or not; another cached GGUF by file name, with or without ``.gguf``), else ``None``
    (a path is not looked at)."""
    spec = lookup(name)
    return _cache_path(spec) if spec is not None else _find_cached(name)


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


#: the file beside the cached models that records the names of Ollama's ``/api/copy`` (``{"name": "target"}``)
ALIASES_FILE = "aliases.json"


def read_aliases() -> dict[str, str]:
    """The model aliases recorded in ``models_dir() / ALIASES_FILE``: ``name -> target`` (a model name, e.g. a
    registry name, a served model's id or a cached file's name). A missing or unreadable file is no alias."""
    import json

    try:
        data = json.loads((models_dir() / ALIASES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def alias_target(name: str) -> str | None:
    """What the alias ``name`` (case-insensitive) names, or ``None`` when it is no alias."""
    key = name.casefold()
    return next((target for alias, target in read_aliases().items() if alias.casefold() == key), None)


def resolve_alias(name: str) -> str:
    """The model name ``name`` stands for: the target of the ``/api/copy`` alias ``name`` (case-insensitive, with
    or without Ollama's ``:latest`` tag, which an alias is recorded without) when ``name`` is no registry name,
    no cached GGUF's name and no existing path; else ``name`` itself. One step: an alias records a model's own
    name (``/api/copy`` of an alias records that alias's target), never another alias."""
    raw = name.strip()
    if not raw or lookup(raw) is not None or _find_cached(raw) is not None or Path(raw).expanduser().exists():
        return name
    for key in dict.fromkeys((raw, raw[: -len(":latest")] if raw.casefold().endswith(":latest") else raw)):
        target = alias_target(key)
        if target is not None and target.casefold() != key.casefold():
            return target
    return name


def _write_aliases(aliases: dict[str, str]) -> None:
    import json
    import tempfile

    directory = models_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{ALIASES_FILE}.", suffix=".part", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(aliases, f, indent=1, sort_keys=True)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the names are no secret
        os.replace(tmp, directory / ALIASES_FILE)
    except OSError as e:
        raise ModelError(f"cannot write the model aliases in {directory}: {e.strerror or e}") from e


def add_alias(name: str, target: str) -> None:
    """Record ``name`` as another name of ``target`` (replacing an alias of the same name, case-insensitive);
    written atomically. Raises :class:`~skippy.models.registry.ModelError` when the cache is not writable."""
    aliases = {k: v for k, v in read_aliases().items() if k.casefold() != name.casefold()}
    aliases[name] = target
    _write_aliases(aliases)


def remove_alias(name: str) -> bool:
    """Forget the alias ``name`` (case-insensitive); ``False`` when there was none."""
    aliases = read_aliases()
    kept = {k: v for k, v in aliases.items() if k.casefold() != name.casefold()}
    if len(kept) == len(aliases):
        return False
    _write_aliases(kept)
    return True
