"""LoRA adapters of a served model (sans-IO): which adapters there are, their global scales, and the
adapter set each request runs with. llama-server's surface:

- ``--lora FILE`` / ``--lora-scaled FILE SCALE`` (repeatable) load adapters, numbered from 0 in command-line
  order, each with a *start-up scale* (1.0 for ``--lora``); ``--lora-init-without-apply`` loads them with
  global scale 0 until ``POST /lora-adapters`` sets one.
- ``GET /lora-adapters``: ``[{"id", "path", "scale"}]`` (the global scales); ``POST /lora-adapters`` with
  ``[{"id", "scale"}]`` sets them, an adapter left out going to 0 (llama-server's ``construct_lora_list``).
- A request's ``lora`` field (``[{"id", "scale"}]``, the same rule) picks its own scales; absent or empty,
  the request takes the global scales as they are when it is prepared.
- vLLM's naming: ``model: "BASE:ADAPTER"`` (``ADAPTER``: the adapter file's name without ``.gguf``) runs
  that adapter alone at its start-up scale (:meth:`LoraAdapters.named`), unless the request has a ``lora`` field.

What a request gets is a :data:`LoraSet`: the ``(id, scale)`` pairs of its adapters with a non-zero scale,
sorted by id; ``()`` is the base model (a scale of 0 adds nothing: llama.cpp's logits are the base
model's). llama.cpp applies adapters to a whole context (``llama_set_adapters_lora``), not per sequence,
so the scheduler decodes only sequences of one set in a step, and its prefix cache keys every cached
prompt on the set it was computed under (:mod:`skippy.engine.scheduling.core`).

Errors: :class:`~skippy.engine.errors.InvalidRequest` (400) naming the entry (``lora.1.id``: an id out
of range or not an integer, ``lora.0.scale``: not a finite number).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from skippy.engine.errors import InvalidRequest

#: The adapters a sequence runs with: ``(adapter id, scale)`` pairs, ids increasing, no zero scale
#: (``()``: none, the base model). Hashable: the scheduler groups sequences and keys its caches by it.
LoraSet = tuple[tuple[int, float], ...]

NO_LORA: LoraSet = ()


def lora_set(scales: Iterable[tuple[int, float]] | Mapping[int, float]) -> LoraSet:
    """The canonical :data:`LoraSet` of ``(id, scale)`` pairs (or an ``id -> scale`` mapping): zero scales
    dropped, ids in increasing order, scales as ``float`` (a later pair for an id replaces an earlier one)."""
    pairs = scales.items() if isinstance(scales, Mapping) else scales
    merged = {int(i): float(s) for i, s in pairs}
    return tuple((i, merged[i]) for i in sorted(merged) if merged[i] != 0.0)


def adapter_name(path: str) -> str:
    """An adapter's name in ``model: "BASE:ADAPTER"``: its file name without ``.gguf``."""
    name = Path(path).name
    return name[:-5] if name.lower().endswith(".gguf") else name


@attrs.frozen
class LoraAdapter:
    """One loaded adapter: ``id`` (its place on the command line, from 0), ``path`` (the GGUF), ``scale``
    (its start-up scale: 1.0 for ``--lora``, the ``--lora-scaled`` value)."""

    id: int
    path: str
    scale: float

    @property
    def name(self) -> str:
        return adapter_name(self.path)


#: the largest finite 32-bit float: llama.cpp takes a scale as a C ``float``, a larger one is infinite there
FLOAT32_MAX = 3.4028234663852886e38


def parse_scales(entries: Any, n_adapters: int, prefix: str = "lora.") -> dict[int, float]:
    """``[{"id": int, "scale": number}, ...]`` (a request's ``lora``, ``POST /lora-adapters``'s body) as an
    ``id -> scale`` mapping (a later entry for an id wins).

    Raises :class:`InvalidRequest` naming the entry (``prefix`` + ``N.id`` / ``N.scale``, or ``prefix``
    without its dot for the list itself): not a list, an entry that is no object, an ``id`` that is not an
    integer in ``0..n_adapters-1``, a ``scale`` that is not a finite number (of a 32-bit float's range).
    """
    if not isinstance(entries, list):
        where = prefix.rstrip(".")
        raise InvalidRequest(f'{where or "the body"} must be a list of {{"id": int, "scale": number}} objects',
                             param=where or None)
    out: dict[int, float] = {}
    for n, entry in enumerate(entries):
        where = f"{prefix}{n}"
        if not isinstance(entry, dict):
            raise InvalidRequest(f'{where} must be an object {{"id": int, "scale": number}}', param=where)
        ident, scale = entry.get("id"), entry.get("scale")
        if not isinstance(ident, int) or isinstance(ident, bool) or not 0 <= ident < n_adapters:
            known = f"0..{n_adapters - 1}" if n_adapters else "none: the server runs no --lora adapter"
            raise InvalidRequest(f"{where}.id must be the id of a loaded LoRA adapter ({known}), got {ident!r}",
                                 param=f"{where}.id")
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) \
                or abs(scale) > FLOAT32_MAX:
            raise InvalidRequest(f"{where}.scale must be a finite number of a 32-bit float's range (llama.cpp "
                                 f"takes one), got {scale!r}", param=f"{where}.scale")
        out[ident] = float(scale)
    return out


class LoraAdapters:
    """The LoRA adapters of one model and their global scales.

    ``adapters``: ``(path, start-up scale)`` per adapter, in id order (``EngineConfig.lora``).
    ``init_without_apply``: every global scale starts at 0 (llama-server's ``--lora-init-without-apply``);
    otherwise at the adapter's start-up scale. Only the engine's owner thread (the trio thread) changes the
    global scales; a request takes a copy (:meth:`for_request`).
    """

    def __init__(self, adapters: Sequence[tuple[str, float]] = (), init_without_apply: bool = False) -> None:
        self.adapters = tuple(LoraAdapter(i, str(p), float(s)) for i, (p, s) in enumerate(adapters))
        self.scales = [0.0 if init_without_apply else a.scale for a in self.adapters]

    def __len__(self) -> int:
        return len(self.adapters)

    @property
    def global_set(self) -> LoraSet:
        """The set of a request without a ``lora`` field (the global scales)."""
        return lora_set(enumerate(self.scales))

    def listing(self) -> list[dict[str, Any]]:
        """``GET /lora-adapters``: ``[{"id", "path", "scale"}]``, the global scales."""
        return [{"id": a.id, "path": a.path, "scale": s} for a, s in zip(self.adapters, self.scales, strict=True)]

    def set_global(self, entries: Any) -> None:
        """``POST /lora-adapters``: the listed adapters take their scale, the others 0 (llama-server's
        ``construct_lora_list``). Raises :class:`InvalidRequest` (nothing changed) as :func:`parse_scales`,
        with params ``N.id`` / ``N.scale``."""
        scales = parse_scales(entries, len(self), prefix="")
        self.scales = [scales.get(i, 0.0) for i in range(len(self))]

    def for_request(self, entries: Any) -> LoraSet:
        """The set of a request whose ``lora`` field is ``entries`` (``None`` or ``[]``: the global scales, as
        llama-server's empty list); raises :class:`InvalidRequest` as :func:`parse_scales` (``lora.N.id``...)."""
        if entries is None or (isinstance(entries, list) and not entries):
            return self.global_set
        return lora_set(parse_scales(entries, len(self)))

    def named(self, name: str) -> LoraAdapter | None:
        """The adapter ``name`` names (its file name without ``.gguf``, case-insensitive), else ``None``."""
        key = name.casefold()
        return next((a for a in self.adapters if a.name.casefold() == key), None)

    def entry(self, adapter: LoraAdapter) -> list[dict[str, Any]]:
        """The ``lora`` field of ``model: "BASE:ADAPTER"``: ``adapter`` alone at its start-up scale."""
        return [{"id": adapter.id, "scale": adapter.scale}]


def split_adapter_name(model: str | None) -> tuple[str, str] | None:
    """``"BASE:ADAPTER"`` -> ``("BASE", "ADAPTER")`` at the last colon (``None``: no colon, or an empty part)."""
    if not model or ":" not in model:
        return None
    base, _, adapter = model.rpartition(":")
    return (base, adapter) if base and adapter else None
