"""llama-server's ``samplers`` field mapped onto our sampler chain (sans-IO).

llama-server lets a request choose which samplers run, and in which order,
by name (``["top_k", "top_p", "min_p", "temperature"]``) or as a string of
one-letter codes (``"kpmt"``), after llama.cpp's
``common_sampler_types_from_names`` / ``_from_chars``. Our chain is fixed:
penalties -> dry -> top_n_sigma -> top_k -> typ_p -> top_p -> min_p (-> infill) -> xtc
-> temperature -> dist (:mod:`skippy.engine.sampling.params`; llama.cpp's default order, with
``infill`` before ``xtc``). So:

- a sampler left out of the list is turned off, as llama.cpp's chain then has no such sampler
  (``top_k`` 0, ``top_p`` 1, ``min_p`` 0, no penalties, ``dry_multiplier`` 0, ``typical_p`` 1,
  ``xtc_probability`` 0, ``top_n_sigma`` -1, temperature 1); so a temperature of 0 or below is
  greedy only when ``temperature`` is named;
- ``infill`` (llama.cpp's infill sampler, which code-completion clients such as
  llama.vim ask for) runs between ``min_p`` and ``xtc``
  (:attr:`SamplingParams.infill <skippy.engine.sampling.params.SamplingParams>`, see
  :func:`wants_infill`); with temperature 0 it runs first too, and temperature then keeps the highest
  logit it left;
- an unknown name or code is skipped with a logged warning, as llama.cpp's
  ``common_sampler_types_from_names`` does (older llama.cpp web UI settings hold
  ``tfs_z`` / ``f``, since removed);
- an order our chain cannot run (e.g. ``temperature`` before ``top_k``) is a 400
  naming ``samplers``; ``dry``, ``typ_p``, ``xtc`` and ``top_n_sigma`` count there only when the request
  turns them on (off, they change nothing wherever they stand).

llama-server's ``logit_bias`` forms (``[[id, bias]]``, ``[[id, false]]``,
``[["text", bias]]``, ``{"id": bias}``, ``{"text": bias}``) are read by
:func:`native_logit_bias` and resolved to token ids by :func:`resolve_logit_bias`
(the OpenAI routes keep their ``{"id": bias}`` maps: :mod:`skippy.engine.sampling.params`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

import msgspec

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.llama_server.types import NativeLogitBias
from skippy.engine.protocols.openai.types import SamplingFields

T = TypeVar("T", bound=SamplingFields)

log = logging.getLogger(__name__)

#: our chain, in order
CHAIN = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "infill", "xtc", "temperature")
#: identity at llama-server's defaults (off unless a request turns them on): their place matters only when on
OPTIONAL = frozenset({"dry", "typ_p", "xtc", "top_n_sigma"})
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

    An unknown name or code is left out, with a logged warning (llama.cpp's rule).
    """
    items = list(samplers) if isinstance(samplers, str) else samplers
    table = CHARS if isinstance(samplers, str) else NAMES
    out = []
    for item in items:
        name = table.get(item if isinstance(samplers, str) else item.lower())
        if name is None:
            log.warning("samplers: unknown sampler %r left out (known: %s)", item, ", ".join(sorted(NAMES)))
            continue
        out.append(name)
    return out


def apply_samplers(req: T, samplers: list[str] | str | None) -> T:
    """``req`` with the samplers left out of ``samplers`` turned off (see module docstring).

    Raises :class:`InvalidRequest` (``param="samplers"``) for what our chain cannot run.
    """
    if samplers is None:
        return req
    on = {"dry": (req.dry_multiplier or 0.0) > 0.0, "typ_p": req.typical_p is not None and req.typical_p < 1.0,
          "xtc": (req.xtc_probability or 0.0) > 0.0 and (req.xtc_threshold is None or req.xtc_threshold <= 0.5),
          "top_n_sigma": (req.top_n_sigma if req.top_n_sigma is not None else -1.0) > 0.0}
    named = sampler_names(samplers)
    names = [n for n in named if n not in OPTIONAL or on[n]]
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
    for name, field, off in (("dry", "dry_multiplier", 0.0), ("typ_p", "typical_p", 1.0),
                             ("xtc", "xtc_probability", 0.0), ("top_n_sigma", "top_n_sigma", -1.0)):
        if name not in named:
            changes[field] = off
    return msgspec.structs.replace(req, **changes)


def wants_infill(samplers: list[str] | str | None) -> bool:
    """Whether ``samplers`` names llama.cpp's infill sampler (checked by :func:`apply_samplers`)."""
    return samplers is not None and "infill" in sampler_names(samplers)


#: one ``logit_bias`` entry before tokenization: a token id or a text, and its additive bias (``-inf``: banned)
BiasEntry = tuple[int | str, float]

#: a bias beyond float32's range would turn a logit into +-inf (and a softmax into NaN)
MAX_BIAS = 3.4e38

_ID = re.compile(r"-?[0-9]+")


def _bias(value: object, where: str) -> float:
    """A bias value: a finite number, or ``false`` (-inf: the token is never sampled)."""
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"logit_bias {where}: the bias must be a number or false (ban), got {value!r}",
                             param="logit_bias")
    if not (math.isfinite(value) and abs(value) <= MAX_BIAS):
        raise InvalidRequest(f"logit_bias {where}: the bias must be a finite number (at most {MAX_BIAS:g} "
                             "in magnitude) or false (ban)", param="logit_bias")
    return float(value)


def native_logit_bias(raw: NativeLogitBias | None) -> list[BiasEntry]:
    """llama-server's ``logit_bias`` (``params_from_json_cmpl``) as ``(token id or text, bias)`` entries, in order.

    Forms: a list of ``[id, bias]`` / ``[text, bias]`` pairs, or an object ``{"id": bias}`` /
    ``{"text": bias}`` (a key that is a decimal integer is a token id, any other a text). ``bias``:
    a number added to the logit, or ``false``: ``-inf`` (never sampled). A text's bias goes to every
    token of its tokenization (:func:`resolve_logit_bias`). Where llama-server silently skips a
    malformed entry, this raises :class:`InvalidRequest` (400, ``param="logit_bias"``): a pair that is not
    ``[id or text, bias]``, an id that is not an integer, an empty text, a bias that is ``true``, not a
    number or not finite. Token id ranges are checked by :func:`resolve_logit_bias`.
    """
    if raw is None:
        return []
    out: list[BiasEntry] = []
    if isinstance(raw, dict):
        for key, value in raw.items():
            if not key:
                raise InvalidRequest("logit_bias keys must be token ids or non-empty texts", param="logit_bias")
            out.append((int(key) if _ID.fullmatch(key) else key, _bias(value, f"key {key!r}")))
        return out
    for i, pair in enumerate(raw):
        where = f"entry {i}"
        if len(pair) != 2:
            raise InvalidRequest(f"logit_bias {where}: expected [token id or text, bias], got {pair!r}",
                                 param="logit_bias")
        first, bias = pair
        if isinstance(first, bool) or not isinstance(first, int | str) or first == "":
            raise InvalidRequest(f"logit_bias {where}: the first item must be a token id (an integer) or a "
                                 f"non-empty text, got {first!r}", param="logit_bias")
        out.append((first, _bias(bias, where)))
    return out


def resolve_logit_bias(entries: Sequence[BiasEntry], tokenized: Mapping[str, Sequence[int]],
                       n_vocab: int) -> tuple[tuple[int, float], ...]:
    """Entries of :func:`native_logit_bias` as ``(token id, bias)`` pairs for :class:`SamplingParams`.

    ``tokenized`` maps each text entry to its token ids (llama-server: ``common_tokenize`` without
    special tokens, special-token text not parsed); each of them gets the entry's bias. A token named more
    than once gets the sum of its biases, as llama.cpp's ``logit_bias`` sampler adds every entry (``-inf``
    stays a ban); first-seen order. Raises :class:`InvalidRequest` (``param="logit_bias"``) for a token id
    outside ``0..n_vocab - 1`` (llama-server skips it).
    """
    total: dict[int, float] = {}
    for key, bias in entries:
        if isinstance(key, str):
            ids: Sequence[int] = tokenized[key]
        else:
            if not 0 <= key < n_vocab:
                raise InvalidRequest(f"logit_bias token id {key} is not a token id (0..{n_vocab - 1})",
                                     param="logit_bias")
            ids = (key,)
        for tok in ids:
            total[tok] = total.get(tok, 0.0) + bias
    return tuple(total.items())
