"""What every API package shares (sans-IO): the base of the wire Structs, and request decoding.

:class:`WireStruct` is the base of every reply, stream chunk and error object the
server sends (msgspec Structs, encoded with ``msgspec.json``, described in
``/openapi.json``). :func:`decode_request` decodes a request body into an API's
request Struct in one validating pass (any failure: :class:`InvalidRequest`, 400,
naming the field); :func:`unknown_fields` names the fields a body sends that the
Struct does not have (reported, or refused with ``--strict-fields``).
"""

from __future__ import annotations

import functools
import typing
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from skippy.engine.errors import InvalidRequest

__all__ = ["MAX_NESTING", "UNSET", "UnsetType", "WireStruct", "convert_nested", "decode_request", "nesting",
           "unknown_fields"]


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


def _struct_classes(type_: Any) -> tuple[type, ...]:
    """The Struct classes a field's type names anywhere (``list[Message]``, ``StreamOptions | None`` ...)."""
    found: list[type] = []
    stack = [type_]
    while stack:
        t = stack.pop()
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            found.append(t)
        stack.extend(typing.get_args(t))
    return tuple(found)


@functools.cache
def _nested_fields(cls: type) -> tuple[tuple[str, Any, tuple[type, ...]], ...]:
    """``(name, type, Struct classes)`` of the fields of Struct ``cls`` whose type holds a Struct."""
    return tuple((f.name, f.type, classes) for f in msgspec.structs.fields(cls)
                 if (classes := _struct_classes(f.type)))


def convert_nested(struct: msgspec.Struct) -> None:
    """Make the fields of ``struct`` typed with Structs hold them when Python code built it with plain values
    (``stream_options={"include_usage": True}``, ``messages=[{"role": "user", "content": "hi"}]``), as
    decoding the same JSON body does: each such field is converted with ``msgspec.convert`` in place (call
    it from ``__post_init__``). A field that is ``None`` where its type takes it, a Struct of its type or a list
    of them is left as it is (``messages=None`` is the 400 a body's ``"messages": null`` is), so a decoded
    request costs an ``isinstance`` per such field (per item of a list).

    Raises :class:`InvalidRequest` (400) naming the field, with msgspec's message and the path a decoded
    body would report (``$.stream_options.include_usage``), for a value the field's type does not accept.
    """
    for name, type_, classes in _nested_fields(type(struct)):
        value = getattr(struct, name)
        if (value is None and _takes_null(type_)) or isinstance(value, classes) or (
                isinstance(value, list) and all(isinstance(item, classes) for item in value)):
            continue
        try:
            converted = msgspec.convert(value, type=type_)
        except msgspec.ValidationError as exc:
            message = str(exc)
            where = f"`$.{name}"
            message = message.replace("`$", where, 1) if " - at `$" in message else f"{message} - at {where}`"
            raise InvalidRequest(f"invalid request: {message}", param=name) from exc
        except RecursionError as exc:
            raise InvalidRequest(f"{name} is nested too deeply", param=name) from exc
        setattr(struct, name, converted)


def decode_request(body: bytes, type_: type[T]) -> T:
    """Decode and validate a JSON body into ``type_``.

    A top-level ``null`` for a field that has a default but no ``None`` in its type (``"stream": null``,
    ``"return_hook_events": null``) means the field is absent, its default, as OpenAI's API and its
    clients treat an optional field sent as null; a required field given ``null`` stays an error. Only a
    body that fails to decode is looked at again (:func:`_without_nulls`), so one that decodes costs
    nothing more.

    Raises :class:`InvalidRequest` (400) for malformed JSON, a non-object
    body, a missing required field or a field of the wrong type; the
    message is msgspec's, which names the field path (e.g. ``$.messages[0].role``).
    """
    try:
        try:
            return msgspec.json.decode(body, type=type_)
        except msgspec.ValidationError:
            retry = _without_nulls(body, type_)
            if retry is None:
                raise
            return msgspec.json.decode(retry, type=type_)  # still failing: wrong elsewhere, named there
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


def _takes_null(type_: Any) -> bool:
    return type_ is Any or type_ is None or type_ is type(None) or type(None) in typing.get_args(type_)


@functools.cache
def _null_means_default(cls: type) -> frozenset[str]:
    """The JSON names of Struct ``cls``'s fields that have a default and do not take ``null``."""
    return frozenset(f.encode_name for f in msgspec.structs.fields(cls)
                     if not f.required and not _takes_null(f.type))


def _without_nulls(body: bytes, type_: type) -> bytes | None:
    """``body`` (a JSON object) re-encoded without its top-level ``null`` values of the fields of
    :func:`_null_means_default`, the other values' bytes as they were; ``None`` when it has none of them,
    is not an object, or ``type_`` is not a Struct."""
    if not isinstance(type_, type) or not issubclass(type_, msgspec.Struct):
        return None
    try:
        items = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
    except (msgspec.MsgspecError, RecursionError):
        return None
    defaulted = _null_means_default(type_)
    drop = {key for key, raw in items.items() if key in defaulted and bytes(raw) == b"null"}
    if not drop:
        return None
    return msgspec.json.encode({key: raw for key, raw in items.items() if key not in drop})


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
