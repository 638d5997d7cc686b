"""Engine configuration (what ``skippy serve`` flags and embedders set)."""

from __future__ import annotations

import attrs


@attrs.frozen
class EngineConfig:
    """How to load and serve one model.

    ``model``: a GGUF path or a model-cache name (``skippy pull``).
    ``n_ctx``: context of each sequence in tokens (prompt + completion),
    clamped to the model's training context; the llama.cpp context holds
    ``n_ctx * parallel`` KV cells (as Ollama's ``num_ctx`` x ``num_parallel``).
    ``parallel``: sequences decoding at once (slots). ``threads``: CPU
    threads for llama.cpp (``None``: all cores). ``chat_template``: jinja2
    text overriding the GGUF's. ``step_tokens``: token budget of one decode
    step, shared by prefill chunks and generating sequences. ``max_queue``:
    requests waiting for a slot before 429. ``chat_template_kwargs``: default
    template variables (requests override them). ``force_tool_emulation``:
    use ``TOOL_CALL`` emulation even when the template supports tools.
    """

    model: str
    model_name: str | None = None
    n_ctx: int = 4096
    parallel: int = 8
    threads: int | None = None
    chat_template: str | None = None
    n_batch: int = 512
    step_tokens: int = 256
    max_queue: int = 1024
    chat_template_kwargs: dict = attrs.field(factory=dict)
    force_tool_emulation: bool = False
    verbose: bool = False
