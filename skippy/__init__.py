"""skippy-trio: an OpenAI-compatible LLM server and embeddable trio engine on llama.cpp."""

from skippy.actors.engine import Engine, open_engine
from skippy.engine.config import EngineConfig
from skippy.engine.types import ChatCompletionRequest, CompletionRequest, Message

__all__ = ["ChatCompletionRequest", "CompletionRequest", "Engine", "EngineConfig", "Message", "open_engine"]
__version__ = "0.1.0"
