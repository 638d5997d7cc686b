"""What loading a llama.cpp model needs process-wide: the backend initialised once
(:func:`_init_backend`), llama.cpp's log routed into the ``skippy.runtime`` logger (warnings that
skippy's own options make expected at DEBUG, while :func:`_expecting` holds them), and the KV cache
lines llama.cpp logs while a context is created (:func:`_kv_caches`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import llama_cpp

log = logging.getLogger("skippy.runtime")

_backend_lock = threading.Lock()
_backend_ready = False


_llama_verbose = False
#: ggml_log_level (ggml.h: NONE, DEBUG, INFO, WARN, ERROR) -> logging levels; CONT (5) continues the
#: previous line's level
_GGML_LEVELS = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_last_level = logging.INFO
#: llama.cpp info lines worth a start-up log line even when not verbose (llama-server prints them)
_KEEP = ("compute buffer size",)
#: llama.cpp warnings that skippy's own flags make expected (logged at DEBUG while :data:`_expected` holds
#: them; the start-up lines say what they mean in our words): a unified KV buffer (--kv-unified, and the
#: embedding context) counted as one sequence's context, and ``--pooling`` over the GGUF's pooling type
_OVERFLOW = "possible training context overflow"
_POOLING_OVERRIDE = "model default pooling_type is"
#: fragments of the warnings expected while the context being created now is (see :func:`_expecting`)
_expected: tuple[str, ...] = ()
_expect_lock = threading.Lock()


T = TypeVar("T")

#: llama.cpp's lines logged while a context is created (logging level, text), when :func:`_kv_caches` collects them
_captured: list[tuple[int, str]] | None = None
_capture_lock = threading.Lock()
#: one KV cache's start-up line (llama_kv_cache's constructor): cells per stream, layers, seqs per stream
_KV_LINE = re.compile(r"llama_kv_cache: size = .*?\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\)")


def _on_llama_log(level: int, text: bytes, user_data: object) -> None:
    """llama.cpp's log into ``skippy.runtime``: everything with ``verbose``; else warnings, errors and
    the compute buffer sizes (what llama-server's start-up log shows)."""
    global _last_level
    lvl = _last_level if level == 5 else _GGML_LEVELS.get(level, logging.INFO)
    _last_level = lvl
    msg = text.decode("utf-8", "replace").rstrip()
    if not msg:
        return
    if _captured is not None:
        _captured.append((lvl, msg))
    if lvl >= logging.WARNING and any(k in msg for k in _expected):
        log.debug("llama.cpp (expected): %s", msg.strip())
    elif _llama_verbose or lvl >= logging.WARNING or any(k in msg for k in _KEEP):
        log.log(max(lvl, logging.INFO) if not _llama_verbose else lvl, "llama.cpp: %s", msg.strip())


#: :func:`_on_llama_log` as llama.cpp's C log callback (``llama_log_set``); this module keeps it alive
_llama_log = llama_cpp.llama_log_callback(_on_llama_log)


@contextlib.contextmanager
def _expecting(*fragments: str) -> Iterator[None]:
    """While a context is created: llama.cpp warnings containing one of ``fragments`` log at DEBUG (one
    context at a time: models loading in parallel create their contexts in turn)."""
    global _expected
    with _expect_lock:
        _expected = fragments
        try:
            yield
        finally:
            _expected = ()


def _init_backend(verbose: bool, numa: int = 0) -> None:
    """Initialise llama.cpp's backend once per process, with its log routed here; ``numa`` (a
    ``ggml_numa_strategy``, llama-server's ``--numa``) is applied with ``llama_numa_init`` at the first
    call that asks for one (ggml sets NUMA up once per process, as llama-server does at start)."""
    global _backend_ready, _llama_verbose, _numa_done
    with _backend_lock:
        _llama_verbose = verbose
        if not _backend_ready:
            import llama_cpp._logger  # noqa: F401 - it installs its own callback on import; ours replaces it

            llama_cpp.llama_log_set(_llama_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True
        if numa and not _numa_done:
            llama_cpp.llama_numa_init(numa)
            _numa_done = True


_numa_done = False


def _capturing(create: Callable[[], T]) -> tuple[T, list[tuple[int, str]]]:
    """``create()`` and the lines llama.cpp logged meanwhile, with their logging levels (one capture at a
    time)."""
    global _captured
    with _capture_lock:
        _captured = []
        try:
            made = create()
        finally:
            lines, _captured = _captured, None
    return made, lines


def _kv_caches(create: Callable[[], T]) -> tuple[T, list[tuple[int, int]], list[str]]:
    """``create()`` (a llama.cpp context), the KV caches it logged: ``(cells, layers)`` per cache,
    cells over all streams, and the errors it logged (why a context was not made: a KV cache type whose
    block size does not divide the head size...). An iSWA model (Gemma 3) has two caches: the full-context
    layers and the sliding-window layers, the latter with ``n_swa + n_ubatch`` cells per stream (padded
    to 256)."""
    made, lines = _capturing(create)
    caches = []
    for _, line in lines:
        m = _KV_LINE.search(line)
        if m:
            cells, layers, n_seq_max, n_stream = (int(g) for g in m.groups())
            caches.append((cells * max(1, n_stream), layers))
    return made, caches, [line.strip() for lvl, line in lines if lvl >= logging.ERROR]
