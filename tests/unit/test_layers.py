"""The sans-IO core loads without trio or an HTTP stack, even through the ``skippy`` package's own ``__init__``
(import-linter checks the imports between modules; this checks what a real import executes)."""

from __future__ import annotations

import subprocess
import sys

ENGINE_MODULES = ["skippy.engine.config", "skippy.engine.scheduling.core", "skippy.engine.scheduling.decode",
                  "skippy.engine.output.generation",
                  "skippy.engine.protocols.openai.wire", "skippy.engine.chat.prepare", "skippy.engine.hooks",
                  "skippy.engine.runtime.base", "skippy.engine.sampling.grammar"]


def test_importing_the_engine_imports_no_trio_or_http() -> None:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in ENGINE_MODULES) +
            "print(sorted(m for m in ('trio', 'quart', 'quart_trio', 'hypercorn', 'httpx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_public_names_still_load_from_skippy() -> None:
    code = "import skippy, sys; skippy.open_engine; skippy.EngineConfig; print('trio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"  # the facade is there, and it is what brings trio in
