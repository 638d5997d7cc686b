"""llama-server's ``samplers`` field mapped onto our sampler chain (sans-IO).

llama-server lets a request choose which samplers run, and in which order,
by name (``["top_k", "top_p", "min_p", "temperature"]``) or as a string of
one-letter codes (``"kpmt"``), after llama.cpp's
``common_sampler_types_from_names`` / ``_from_chars``. Our chain is fixed:
penalties -> top_k -> top_p -> min_p -> temperature -> dist
(:mod:`skippy.engine.sampling.params`). So:

- a sampler left out of the list is turned off (``top_k`` 0, ``top_p`` 1,
  ``min_p`` 0, no penalties, temperature 1 as when llama.cpp's chain has no
  temperature sampler);
- ``dry``, ``typ_p``, ``xtc`` and ``top_n_sigma`` are accepted and do nothing:
  at llama-server's defaults (which are the only values we take) they are
  identity samplers;
- an order our chain cannot run (e.g. ``temperature`` before ``top_k``),
  ``infill`` or an unknown name is a 400 naming ``samplers``.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from skippy.engine.errors import InvalidRequest
from skippy.engine.types import SamplingFields

T = TypeVar("T", bound=SamplingFields)

#: our chain, in order
CHAIN = ("penalties", "top_k", "top_p", "min_p", "temperature")
#: identity at llama-server's defaults: accepted, nothing to run
NEUTRAL = frozenset({"dry", "typ_p", "xtc", "top_n_sigma"})
#: llama.cpp's names and aliases -> canonical name
NAMES = {
    "penalties": "penalties", "dry": "dry", "top_k": "top_k", "top-k": "top_k",
    "top_p": "top_p", "top-p": "top_p", "nucleus": "top_p", "min_p": "min_p", "min-p": "min_p",
    "temperature": "temperature", "temp": "temperature", "typ_p": "typ_p", "typ-p": "typ_p",
    "typical_p": "typ_p", "typical-p": "typ_p", "typical": "typ_p", "xtc": "xtc",
    "top_n_sigma": "top_n_sigma", "top-n-sigma": "top_n_sigma", "infill": "infill",
}
#: llama.cpp's one-letter codes
CHARS = {"e": "penalties", "d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma",
         "m": "min_p", "t": "temperature", "x": "xtc", "i": "infill"}


def sampler_names(samplers: list[str] | str) -> list[str]:
    """Canonical names of a ``samplers`` field (a list of names, or a string of one-letter codes).

    Raises :class:`InvalidRequest` (``param="samplers"``) for an unknown name or code.
    """
    items = list(samplers) if isinstance(samplers, str) else samplers
    table = CHARS if isinstance(samplers, str) else NAMES
    out = []
    for item in items:
        name = table.get(item if isinstance(samplers, str) else item.lower())
        if name is None:
            raise InvalidRequest(f"unknown sampler {item!r} in samplers (known: {', '.join(sorted(NAMES))})",
                                 param="samplers")
        out.append(name)
    return out


def apply_samplers(req: T, samplers: list[str] | str | None) -> T:
    """``req`` with the samplers left out of ``samplers`` turned off (see module docstring).

    Raises :class:`InvalidRequest` (``param="samplers"``) for what our chain cannot run.
    """
    if samplers is None:
        return req
    names = [n for n in sampler_names(samplers) if n not in NEUTRAL]
    if "infill" in names:
        raise InvalidRequest("the infill sampler is not supported", param="samplers")
    order = [CHAIN.index(n) for n in names]
    if order != sorted(set(order)):
        raise InvalidRequest(f"samplers must keep this server's chain order {list(CHAIN)} (each once), "
                             f"got {names}", param="samplers")
    changes: dict[str, object] = {}
    if "penalties" not in names:
        changes.update(repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    if "top_k" not in names:
        changes["top_k"] = 0
    if "top_p" not in names:
        changes["top_p"] = 1.0
    if "min_p" not in names:
        changes["min_p"] = 0.0
    if "temperature" not in names:
        changes["temperature"] = 1.0
    return msgspec.structs.replace(req, **changes)
