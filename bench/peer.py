"""The llama-server peer arm: where ``make bench-peer`` puts it, and the command line that matches skippy's.

``bench/build_llama_server.sh`` builds llama-server from the llama.cpp sources vendored in the pinned
llama-cpp-python sdist (the same llama.cpp skippy runs on) into
``${SKIPPY_HOME:-~/.cache/skippy}/llama-server/<version>/bin/llama-server``. The benchmarks start it
with the same model, threads, slots and per-slot context as skippy: llama-server's ``-c`` is the total
context, shared by ``-np`` slots, so it gets ``n_ctx * parallel``; everything else stays at
llama-server's defaults (flash attention ``auto``, ``-b 2048 -ub 512``, prompt cache on, ``--jinja``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pinned_version() -> str:
    """The ``llama-cpp-python==X`` pin of pyproject.toml."""
    m = re.search(r'"llama-cpp-python==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    if not m:
        raise RuntimeError("no llama-cpp-python==X pin in pyproject.toml")
    return m.group(1)


def llama_server_path() -> Path:
    """Where ``make bench-peer`` leaves the llama-server binary (it may not exist yet)."""
    home = Path(os.environ.get("SKIPPY_HOME") or Path.home() / ".cache" / "skippy")
    return home / "llama-server" / pinned_version() / "bin" / "llama-server"


def llama_server_binary() -> Path | None:
    """The built llama-server binary, or ``None`` when ``make bench-peer`` has not run."""
    p = llama_server_path()
    return p if os.access(p, os.X_OK) else None


def llama_server_cmd(binary: Path, model: str, *, host: str, port: int, parallel: int, n_ctx: int,
                     threads: int, extra: list[str] | None = None) -> list[str]:
    """llama-server's command line for ``parallel`` slots of ``n_ctx`` tokens each, ``threads`` threads."""
    return [str(binary), "-m", model, "--host", host, "--port", str(port), "-c", str(n_ctx * parallel),
            "-np", str(parallel), "-t", str(threads), "-tb", str(threads), "--jinja", "-a", Path(model).stem,
            *(extra or [])]
