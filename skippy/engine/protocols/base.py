"""What every API package shares (sans-IO): the base of the wire Structs, and request decoding.

:class:`WireStruct` is the base of every reply, stream chunk and error object the
server sends (msgspec Structs, encoded with ``msgspec.json``, described in
``/openapi.json``). :func:`decode_request` decodes a request body into an API's
request Struct in one validating pass (any failure: :class:`InvalidRequest`, 400,
naming the field); :func:`unknown_fields` names the fields a body sends that the
Struct does not have (reported, or refused with ``--strict-fields``).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from skippy.engine.errors import InvalidRequest

__all__ = ["MAX_NESTING", "UNSET", "UnsetType", "WireStruct", "decode_request", "nesting", "unknown_fields"]


class WireStruct(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of the wire Structs: fields encode in declaration order; read access like a dict.

    ``s[key]`` is the field's value and raises ``KeyError`` for a field that is
    left out of the JSON (:data:`msgspec.UNSET`) or does not exist; ``s.get(key,
    default)``, ``key in s`` and ``len(s)`` follow. ``forbid_unknown_fields`` only makes the
    OpenAPI schema say ``additionalProperties: false``.
    """

    def __getitem__(self, key: str) -> Any:
        if key in self.__struct_fields__:
            value = getattr(self, key)
            if value is not UNSET:
                return value
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, UNSET) is not UNSET

    def __len__(self) -> int:
        """How many keys the JSON object has (so an empty delta is falsy, like ``{}``)."""
        return sum(1 for name in self.__struct_fields__ if getattr(self, name) is not UNSET)


T = TypeVar("T")


#: Deepest nesting of lists and objects accepted in ``tools``, ``tool_choice``,
#: ``response_format`` and ``chat_template_kwargs``: JSON schemas are walked recursively
#: (grammar conversion, templates' ``tojson``), and real ones nest a handful of levels.
MAX_NESTING = 64


def nesting(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (a scalar is 0, ``[]`` is 1); iterative."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        stack.extend((x, d + 1) for x in v)
    return deepest


def decode_request(body: bytes, type_: type[T]) -> T:
    """Decode and validate a JSON body into ``type_``.

    Raises :class:`InvalidRequest` (400) for malformed JSON, a non-object
    body, a missing required field or a field of the wrong type; the
    message is msgspec's, which names the field path (e.g. ``$.messages[0].role``).
    """
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        path = str(exc).rsplit("`$.", 1)
        param = path[1].rstrip("`").split("[")[0].split(".")[0] if len(path) == 2 else None
        if param is None:
            # a missing top-level field: "Object missing required field `messages`"
            missing = str(exc).split("missing required field `", 1)
            param = missing[1].split("`", 1)[0] if len(missing) == 2 else None
        raise InvalidRequest(f"invalid request: {exc}", param=param) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"malformed JSON body: {exc}") from exc
    except RecursionError as exc:  # msgspec recurses per level, in fields it skips too
        raise InvalidRequest("the JSON body is nested too deeply") from exc


def unknown_fields(body: bytes, type_: type) -> list[str]:
    """Top-level keys of the JSON object ``body`` that are not fields of the Struct ``type_``, in body order.

    Decoding validates nothing else (values stay raw bytes); a body that is
    not a JSON object, or a ``type_`` that is no Struct (a free-form ``dict``), gives ``[]``.
    """
    if not hasattr(type_, "__struct_fields__"):
        return []
    try:
        keys = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
    except (msgspec.MsgspecError, RecursionError):
        return []
    known = set(type_.__struct_fields__)
    return [k for k in keys if k not in known]
