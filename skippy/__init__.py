"""skippy-trio: an OpenAI-compatible LLM server and embeddable trio engine on llama.cpp.

The public names load lazily (PEP 562), so ``import skippy.engine`` (the sans-IO core)
imports neither trio nor the actors.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ChatCompletionRequest", "CompletionRequest", "Engine", "EngineConfig", "Message", "open_engine"]
__version__ = "0.1.0"

_WHERE = {"Engine": "skippy.actors.engine", "open_engine": "skippy.actors.wiring",
          "EngineConfig": "skippy.engine.config", "ChatCompletionRequest": "skippy.engine.protocols.openai.types",
          "CompletionRequest": "skippy.engine.protocols.openai.types",
          "Message": "skippy.engine.protocols.openai.types"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'skippy' has no attribute {name!r}")
