"""``model: "auto"``: which served model answers a request that lets the server choose (sans-IO).

mesh-llm's virtual LLM has an ``auto`` model; so does this server. A request whose ``model`` is
``auto`` (case-insensitive, unless a served model itself answers to that name) is routed by
:func:`choose_model` from two inputs:

- the request's :class:`RequestTraits` (:func:`chat_traits`: does it hold image parts, does it
  offer ``tools``), and
- the served models as :class:`Candidate` values, each with its :class:`ModelCapabilities`
  (``None`` while unknown: a model's capabilities come from its chat template and runtime, known
  once it has loaded in this server run).

The rules, in order (the first that picks a model wins; :attr:`Route.rule` names it):

1. ``images``: the request has image parts -> a model with image input (a ``--mmproj`` projector in
   its settings, :attr:`Candidate.vision`, known before it loads); with none, the rule falls through.
2. ``tools``: the request has ``tools`` -> a model whose chat template calls tools natively
   (:attr:`~skippy.engine.chat.capabilities.TemplateCaps.supports_tools`; the others emulate tool
   calls). Loaded models are preferred: a loaded one with native tools first, else one known to
   have them (it loaded before; it loads again on demand, as for a request naming it); a model
   whose capabilities are unknown (never loaded) is not considered.
3. ``default``: otherwise, and when a rule found no model, the default model (the first
   ``--model``). An input the rules do not cover falls back to it as well. When the default model's
   load failed (it is not among the candidates), the first candidate stands in for it (a loaded one
   first, then the configured order).

Among several models that fit a rule, loaded models come first, then the configured order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import attrs

#: the model name that asks the server to choose
AUTO = "auto"

#: content part types that carry an image (OpenAI chat ``image_url``, Responses ``input_image``,
#: Anthropic ``image``)
IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})


def is_auto(model: str | None) -> bool:
    """Whether a request's ``model`` is ``auto`` (case-insensitive)."""
    return model is not None and model.casefold() == AUTO


@attrs.frozen
class RequestTraits:
    """What the routing rules read from a request: ``has_images`` (an image content part in some
    message), ``has_tools`` (a non-empty ``tools`` list)."""

    has_images: bool = False
    has_tools: bool = False


@attrs.frozen
class ModelCapabilities:
    """What a served model can do, for routing: ``native_tools`` (its chat template renders tool
    calls itself: ``chat_template_caps.supports_tools``), ``image_input`` (it takes image parts: a
    ``--mmproj`` projector is loaded)."""

    native_tools: bool = False
    image_input: bool = False


@attrs.frozen
class Candidate:
    """One served model: ``id``, ``loaded`` (its engine is up now), ``caps`` (``None``: not known yet,
    the model has not loaded in this server run)."""

    id: str
    loaded: bool = False
    caps: ModelCapabilities | None = None
    #: it reads images by its settings (a ``--mmproj`` projector), known before it ever loaded
    vision: bool = False


@attrs.frozen
class Route:
    """The choice: ``model`` (a candidate's id) and ``rule`` (``images``, ``tools`` or ``default``)."""

    model: str
    rule: Literal["images", "tools", "default"]


def chat_traits(messages: Iterable[Any], tools: Sequence[Any] | None) -> RequestTraits:
    """The :class:`RequestTraits` of a chat request's ``messages`` (message Structs or dicts whose
    ``content`` is a string or a list of parts, each a Struct or dict with a ``type``) and ``tools``."""
    has_images = False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
        if isinstance(content, list) and any(_part_type(p) in IMAGE_PARTS for p in content):
            has_images = True
            break
    return RequestTraits(has_images=has_images, has_tools=bool(tools))


def _part_type(part: Any) -> Any:
    return part.get("type") if isinstance(part, dict) else getattr(part, "type", None)


def choose_model(traits: RequestTraits, candidates: Sequence[Candidate], default: str) -> Route:
    """The model an ``auto`` request goes to (the rules in this module's docstring).

    ``candidates``: the served models that may take requests (a model whose load failed left out),
    in configured order; ``default``: the default model's id, the answer whenever no rule picks one; when it
    is not among ``candidates`` (its load failed), the first candidate (loaded first) answers instead, and
    ``default`` itself only when there is no candidate at all. Pure: the same inputs give the same route.
    """
    ordered = sorted(candidates, key=lambda c: not c.loaded)  # stable: loaded first, then configured order
    if traits.has_images:
        for c in ordered:
            if c.vision or (c.caps is not None and c.caps.image_input):
                return Route(c.id, "images")
    if traits.has_tools:
        for c in ordered:
            if c.caps is not None and c.caps.native_tools:
                return Route(c.id, "tools")
    if ordered and not any(c.id == default for c in ordered):
        return Route(ordered[0].id, "default")
    return Route(default, "default")
