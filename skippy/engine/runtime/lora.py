"""LoRA adapters in llama.cpp: loading them onto a model, and the set applied to a context.

llama.cpp loads an adapter GGUF onto one model (``llama_adapter_lora_init``: ``general.type`` must be
``adapter``, ``general.architecture`` the model's, ``adapter.type`` ``lora``, and every ``W.lora_a`` /
``W.lora_b`` pair must name a tensor of the model with matching shapes, so an adapter for another model
or vocabulary is refused), and applies a *set* of them, each with a scale, to a whole context
(``llama_set_adapters_lora``: the weights ``W`` compute ``W x + scale * alpha / rank * B (A x)``). The
set belongs to the context, not to a sequence: every sequence of a ``llama_decode`` runs with it, so the
scheduler decodes one set per step (:attr:`~skippy.engine.scheduling.step.StepPlan.lora`), and a change
makes llama.cpp build its compute graph again at the next decode (``sched_reserve``; the cost measured by
``bench/bench_lora.py`` is in the LoRA guide).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import os
from collections.abc import Sequence

import llama_cpp

from skippy.engine.lora import NO_LORA, LoraSet
from skippy.engine.runtime.load import _capturing

log = logging.getLogger("skippy.runtime")

#: llama.cpp's words before the reason an adapter is refused (``llama_adapter_lora_init``'s error line)
_REFUSED = "failed to apply lora adapter: "


def load_adapters(model: llama_cpp.llama_model_p, paths: Sequence[str]) -> list[object]:
    """Load every adapter of ``paths`` onto ``model``, in order (ids 0, 1, ...); returns their handles.

    Raises ``ValueError`` naming a file that does not exist (or is not a file), else naming the file and
    llama.cpp's reason (``model arch and LoRA arch mismatch``,
    ``tensor 'token_embd.weight' has incorrect shape``, a file that is no GGUF...) for the first adapter
    llama.cpp refuses; the adapters loaded before it are freed (nothing stays loaded half-way).
    """
    handles: list[object] = []
    for path in paths:
        if not os.path.isfile(path):  # llama.cpp's refusal would not say why
            free_adapters(handles)
            what = "is not a file" if os.path.exists(path) else "does not exist"
            raise ValueError(f"--lora {path}: the LoRA adapter file {what}")
        handle, lines = _capturing(functools.partial(llama_cpp.llama_adapter_lora_init, model, path.encode()))
        if not handle:
            free_adapters(handles)
            reason = next((line.split(_REFUSED, 1)[1].strip() for _, line in lines if _REFUSED in line), "")
            raise ValueError(f"--lora {path}: llama.cpp cannot load this LoRA adapter onto the model"
                             f"{': ' + reason if reason else ''} (an adapter made for another model?)")
        handles.append(handle)
    return handles


def free_adapters(handles: list[object]) -> None:
    """Free adapters loaded by :func:`load_adapters` (before their model: some llama.cpp versions update the
    model's counters there); ``handles`` is emptied."""
    for handle in handles:
        llama_cpp.llama_adapter_lora_free(handle)
    handles.clear()


class LoraMixin:
    """:class:`~skippy.engine.runtime.llama.LlamaRuntime`'s adapter set (its ``_ctx`` and ``_lora``, the
    handles of :func:`load_adapters` in id order)."""

    _ctx: llama_cpp.llama_context_p
    _lora: list[object]
    _lora_set: LoraSet = NO_LORA

    def set_lora(self, lora: LoraSet) -> None:
        """Apply the adapter set ``lora`` (a canonical :data:`~skippy.engine.lora.LoraSet`) to the context
        before the next decode; nothing happens when it is already applied. Decode thread only.

        Raises ``ValueError`` for an id of no loaded adapter or a scale that is not finite (checked before
        llama.cpp sees them), ``RuntimeError`` when llama.cpp refuses the set.
        """
        lora = tuple(lora)
        if lora == self._lora_set:
            return
        for ident, scale in lora:
            if not 0 <= ident < len(self._lora) or not math.isfinite(scale):
                raise ValueError(f"LoRA set {lora!r}: adapter {ident} at scale {scale} (loaded: {len(self._lora)})")
        n = len(lora)
        handles = (llama_cpp.llama_adapter_lora_p_ctypes * max(n, 1))(*[self._lora[i] for i, _ in lora])  # type: ignore[misc]
        scales = (ctypes.c_float * max(n, 1))(*[s for _, s in lora])
        if llama_cpp.llama_set_adapters_lora(self._ctx, handles if n else None, n, scales if n else None) != 0:
            raise RuntimeError(f"llama.cpp refused the LoRA set {lora!r}")
        self._lora_set = lora
