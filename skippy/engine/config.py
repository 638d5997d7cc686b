"""Engine configuration (what ``skippy serve`` flags and embedders set)."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class EngineConfig:
    """How to load and serve one model.

    ``model``: a GGUF path or a model-cache name (``skippy pull``).
    ``n_ctx``: context of each sequence in tokens (prompt + completion),
    clamped to the model's training context; the llama.cpp context holds
    ``n_ctx * parallel`` KV cells (as Ollama's ``num_ctx`` x ``num_parallel``).
    ``parallel``: sequences decoding at once (slots). ``threads``: CPU
    threads for llama.cpp (``None``: all cores). ``flash_attn``: llama.cpp's
    flash attention, ``"on"``, ``"off"`` or ``"auto"`` (llama-server's
    ``--flash-attn``); off by default because on CPU it made batched decode
    about 1.4x slower (bench/bench_decode.py, SmolLM2, 16 sequences). ``chat_template``: jinja2
    text overriding the GGUF's. ``step_tokens``: token budget of one decode
    step, shared by prefill chunks and generating sequences. ``max_queue``:
    requests waiting for a slot before 429. ``chat_template_kwargs``: default
    template variables (requests override them). ``force_tool_emulation``:
    use ``TOOL_CALL`` emulation even when the template supports tools.

    ``prefix_cache``: keep finished sequences' KV and reuse shared prompt
    prefixes. ``clamp_max_tokens``: a ``max_tokens`` beyond the context is
    clamped to the room left (llama-server) instead of a 400 (OpenAI, vLLM). Hooks: ``hook_policy`` is a policy object or a ``package.module:factory``
    spec, ``hook_url`` a webhook policy URL (one of them at most);
    ``hook_timeout`` seconds per call; ``hook_fail_closed`` turns a failed
    call into a stop; ``hooks_default_on`` runs hooks for requests that do
    not say ``mesh_hooks``; ``signal_window`` (1..4096 tokens) and
    ``high_entropy_threshold`` (nats) configure the firing rule.
    """

    model: str
    model_name: str | None = None
    n_ctx: int = 4096
    parallel: int = 8
    threads: int | None = None
    flash_attn: str = "off"
    chat_template: str | None = None
    n_batch: int = 512
    step_tokens: int = 256
    max_queue: int = 1024
    chat_template_kwargs: dict = attrs.field(factory=dict)
    force_tool_emulation: bool = False
    prefix_cache: bool = True
    clamp_max_tokens: bool = False
    hook_policy: Any = None
    hook_url: str | None = None
    hook_timeout: float = 2.0
    hook_fail_closed: bool = False
    hooks_default_on: bool = False
    signal_window: int = 16
    high_entropy_threshold: float = 2.0
    verbose: bool = False
