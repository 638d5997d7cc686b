"""Model-load overrides, as llama.cpp's common/arg.cpp parses them: tensor buffer types (llama-server's
``-ot/--override-tensor PATTERN=BUFFER``, ``-cmoe/--cpu-moe`` and ``-ncmoe/--n-cpu-moe N``, and the
NULL-terminated ``llama_model_tensor_buft_override`` array that ``llama_model_params.tensor_buft_overrides``
points to) and GGUF metadata values (``--override-kv KEY=TYPE:VALUE``, :class:`KVOverride`, and the
``llama_model_kv_override`` array ending with an empty key that ``llama_model_params.kv_overrides`` points to).

llama.cpp matches each weight's name against the patterns in order (``std::regex_search``, ECMAScript
syntax; the first match wins) and allocates a matching tensor in that buffer type instead of the one its
layer's device would give it; it logs ``tensor NAME (... ) buffer type overridden to BUFFER`` at debug
level. ``-cmoe`` is the pattern :data:`FFN_EXPS_REGEX` on the CPU buffer, ``-ncmoe N`` one pattern per
layer ``blk\\.I`` for ``I < N`` (common/common.h ``llm_ffn_exps_cpu_override``, ``llm_ffn_exps_block_regex``).
Patterns are checked with Python's :mod:`re`, which reads the usual ECMAScript subset the same way.

A metadata override replaces the value llama.cpp's model loader reads for that key (``get_key``: the
vocabulary's special and FIM token ids, ``add_bos_token``, hyperparameters...), as if the GGUF held it,
and logs ``Using metadata override`` at info level; one whose type is not the one llama.cpp reads for the
key is ignored with a ``Bad metadata override type`` warning, one for a key llama.cpp never reads does
nothing. GGUF metadata read as text (``llama_model_meta_val_str``, the chat template) stays the file's.
"""

from __future__ import annotations

import csv
import ctypes
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

import attrs

if TYPE_CHECKING:
    import llama_cpp

#: llama.cpp's pattern of the MoE expert weights (common/common.h ``LLM_FFN_EXPS_REGEX``)
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def ffn_exps_block_regex(layer: int) -> str:
    """The pattern of layer ``layer``'s expert weights (``llm_ffn_exps_block_regex``): ``blk\\.3\\.ffn_...``."""
    return rf"blk\.{layer}{FFN_EXPS_REGEX}"


def parse_overrides(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``-ot`` values (each ``PATTERN=BUFFER`` or a comma-separated list of them, as llama.cpp splits
    them; a sequence of such values for a repeated flag) -> one ``PATTERN=BUFFER`` string per override,
    in order. Raises ``ValueError`` naming the item for one without ``=``, an empty pattern or buffer,
    or a pattern that is not a regular expression. The buffer name is checked at load
    (:func:`buffer_types`)."""
    values = [value] if isinstance(value, str) else list(value or ())
    out: list[str] = []
    for v in values:
        for item in str(v).split(","):
            if not item.strip():
                continue
            pattern, sep, buffer = item.partition("=")
            if not sep or not pattern or not buffer.strip():
                raise ValueError(f"{item!r} is not PATTERN=BUFFER (e.g. '\\.ffn_.*_exps\\.=CPU')")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
            out.append(f"{pattern}={buffer.strip()}")
    return tuple(out)


def moe_overrides(cpu_moe: bool, n_cpu_moe: int) -> tuple[str, ...]:
    """The overrides of ``-cmoe`` (every layer's experts on the CPU) and ``-ncmoe N`` (the first ``N``
    layers'), as ``PATTERN=CPU`` strings."""
    out = [f"{FFN_EXPS_REGEX}=CPU"] if cpu_moe else []
    return (*out, *(f"{ffn_exps_block_regex(i)}=CPU" for i in range(n_cpu_moe)))


def buffer_types() -> dict[str, int]:
    """Buffer-type name -> ``ggml_backend_buffer_type_t`` of every device's default buffer type (``CPU``,
    ``CUDA0``, ``Vulkan0``, ``RPC0[host:port]``...), as llama.cpp's ``parse_tensor_buffer_overrides``
    lists them (``ggml_backend_dev_buffer_type`` / ``ggml_backend_buft_name``)."""
    from skippy.engine.runtime.backends import ggml

    lib = ggml()
    for fn, args, res in (("ggml_backend_dev_buffer_type", [ctypes.c_void_p], ctypes.c_void_p),
                          ("ggml_backend_buft_name", [ctypes.c_void_p], ctypes.c_char_p)):
        f = getattr(lib, fn)
        f.argtypes, f.restype = args, res
    found: dict[str, int] = {}
    for i in range(lib.ggml_backend_dev_count()):
        buft = lib.ggml_backend_dev_buffer_type(lib.ggml_backend_dev_get(i))
        if buft:
            found.setdefault(lib.ggml_backend_buft_name(buft).decode(), int(buft))
    return found


def check_buffers(overrides: Sequence[str], available: Iterable[str]) -> None:
    """Raise ``ValueError`` for an override whose buffer is not one of ``available`` (the message lists
    them, as llama-server prints ``Available buffer types``)."""
    names = sorted(available)
    for item in overrides:
        buffer = item.rpartition("=")[2]
        if buffer not in names:
            raise ValueError(f"unknown buffer type {buffer!r} in {item!r}; available buffer types: "
                             f"{', '.join(names)}")


def override_array(overrides: Sequence[str]) -> tuple[ctypes.Array[ctypes.c_void_p] | None, list[object]]:
    """The NULL-terminated ``llama_model_tensor_buft_override`` array for ``overrides`` (``None`` for
    none) and the objects it points into (keep them alive as long as the model: llama.cpp reads the
    patterns while it loads). Raises ``ValueError`` for an unknown buffer type (:func:`check_buffers`)."""
    if not overrides:
        return None, []
    bufts = buffer_types()
    check_buffers(overrides, bufts)
    patterns = [ctypes.create_string_buffer(item.rpartition("=")[0].encode()) for item in overrides]
    # struct llama_model_tensor_buft_override { const char * pattern; ggml_backend_buffer_type_t buft; }
    flat: list[int | None] = []
    for item, pattern in zip(overrides, patterns, strict=True):
        flat += [ctypes.addressof(pattern), bufts[item.rpartition("=")[2]]]
    array = (ctypes.c_void_p * (len(flat) + 2))(*flat, None, None)
    return array, [array, *patterns]


def unmatched_overrides(overrides: Sequence[str], path: str) -> list[str]:
    """The ``PATTERN=BUFFER`` overrides whose pattern matches no weight of the GGUF file at ``path``
    (names read with gguf-py's reader, matched with :func:`re.search` as llama.cpp's ``regex_search``).
    The patterns ``-cmoe`` / ``-ncmoe`` generate are left out: on a dense model they have nothing to move,
    and llama-server starts as it would without them. llama.cpp ignores an unmatched pattern silently;
    a typo in a guide's ``-ot`` then costs a GPU's memory with no message, so the runtime refuses it."""
    from gguf import GGUFReader

    generated = re.compile(r"(blk\\\.\d+)?" + re.escape(FFN_EXPS_REGEX) + "=CPU")
    asked = [o for o in overrides if not generated.fullmatch(o)]
    if not asked:
        return []
    names = [t.name for t in GGUFReader(path).tensors]
    return [o for o in asked if not any(re.search(o.rpartition("=")[0], n) for n in names)]



#: ``--override-kv`` types -> llama.cpp ``llama_model_kv_override_type`` values (``LLAMA_KV_OVERRIDE_TYPE_*``)
KV_TYPES = {"int": 0, "float": 1, "bool": 2, "str": 3}

#: the longest key and ``str`` value llama.cpp takes, in UTF-8 bytes (``char key[128]``, ``char val_str[128]``,
#: each NUL-terminated)
KV_MAX_BYTES = 127

_INT64 = (-(1 << 63), (1 << 63) - 1)


@attrs.frozen
class KVOverride:
    """One GGUF metadata override (llama-server's ``--override-kv KEY=TYPE:VALUE``): ``key`` (at most
    :data:`KV_MAX_BYTES` UTF-8 bytes), ``type`` (a :data:`KV_TYPES` name) and ``value`` of that type
    (``int`` within int64, ``float``, ``bool``, or a ``str`` of at most :data:`KV_MAX_BYTES` bytes).
    ``str()`` writes it back as ``KEY=TYPE:VALUE``."""

    key: str
    type: Literal["int", "float", "bool", "str"]
    value: int | float | bool | str

    def __str__(self) -> str:
        value = str(self.value).lower() if self.type == "bool" else str(self.value)
        return f"{self.key}={self.type}:{value}"


def parse_kv_override(item: str) -> KVOverride:
    """One ``KEY=TYPE:VALUE`` -> a :class:`KVOverride`, as llama.cpp's ``string_parse_kv_override`` reads it
    (the key is everything before the first ``=``, spaces around it dropped; the type prefix is one of
    ``int:``, ``float:``, ``bool:``, ``str:``; a bool is ``true`` or ``false``), a little stricter: an
    ``int`` or ``float`` must be a whole number as Python reads it (llama.cpp's ``atol`` / ``atof`` take a
    number's leading digits, ``0`` for none) and an int fit in int64, and the key must not be empty (an empty
    key ends llama.cpp's array: the overrides after it would be dropped). Raises ``ValueError`` naming
    ``item`` otherwise, or for a key or ``str`` value over :data:`KV_MAX_BYTES` UTF-8 bytes."""
    key, sep, typed = item.partition("=")
    key = key.strip()
    kind, colon, text = typed.partition(":")
    if not sep or not key:
        raise ValueError(f"{item!r} is not KEY=TYPE:VALUE (e.g. 'tokenizer.ggml.add_bos_token=bool:false')")
    if len(key.encode()) > KV_MAX_BYTES:
        raise ValueError(f"{item!r}: the key is longer than {KV_MAX_BYTES} bytes")
    if not colon or kind not in KV_TYPES:
        raise ValueError(f"{item!r}: the type must be one of int, float, bool, str (KEY=TYPE:VALUE)")
    value: int | float | bool | str
    try:
        if kind == "int":
            value = int(text)
            if not _INT64[0] <= value <= _INT64[1]:
                raise ValueError("out of int64")
        elif kind == "float":
            value = float(text)
        elif kind == "bool":
            if text not in ("true", "false"):
                raise ValueError("not true or false")
            value = text == "true"
        else:
            value = text
    except ValueError:
        expected = {"int": "an integer within int64", "float": "a number", "bool": "true or false"}[kind]
        raise ValueError(f"{item!r}: {text!r} is not {expected}") from None
    if kind == "str" and len(text.encode()) > KV_MAX_BYTES:
        raise ValueError(f"{item!r}: a str value is at most {KV_MAX_BYTES} bytes, this one has "
                         f"{len(text.encode())}")
    return KVOverride(key, kind, value)  # type: ignore[arg-type]  # kind is one of KV_TYPES: checked above


def parse_kv_overrides(value: str | KVOverride | Iterable[str | KVOverride] | None) -> tuple[KVOverride, ...]:
    """``--override-kv`` values (each ``KEY=TYPE:VALUE`` or a comma-separated list of them, a value holding a
    comma in double quotes as llama.cpp's ``parse_csv_row`` reads a row, e.g. ``"k=str:a,b"``; a sequence of
    such values for a repeated flag; :class:`KVOverride` objects as they are) -> the overrides, in order
    (llama.cpp keeps the first of a key given twice). Raises ``ValueError`` for an empty item or one
    :func:`parse_kv_override` refuses."""
    values = [value] if isinstance(value, (str, KVOverride)) else list(value or ())
    out: list[KVOverride] = []
    for v in values:
        if isinstance(v, KVOverride):
            out.append(v)
            continue
        try:
            items = next(csv.reader([str(v)]), [])
        except csv.Error as exc:
            raise ValueError(f"{v!r}: {exc}") from None
        for item in items or [""]:
            if not item.strip():
                raise ValueError(f"{v!r}: an empty override (KEY=TYPE:VALUE expected)")
            out.append(parse_kv_override(item))
    return tuple(out)


def kv_override_array(overrides: Sequence[KVOverride]) -> ctypes.Array[llama_cpp.llama_model_kv_override] | None:
    """The ``llama_model_kv_override`` array for ``overrides``, ended by an element with an empty key as
    llama.cpp reads it (``None`` for none; keep the array alive as long as the model: llama.cpp reads it while
    the model loads). Built as llama-cpp-python's ``Llama(kv_overrides=...)`` builds its own."""
    import llama_cpp

    if not overrides:
        return None
    array = (llama_cpp.llama_model_kv_override * (len(overrides) + 1))()  # zeroed: the last key is empty
    for slot, override in zip(array, overrides, strict=False):
        slot.key = override.key.encode()
        slot.tag = KV_TYPES[override.type]
        if override.type == "str":
            slot.value.val_str = str(override.value).encode()
        elif override.type == "bool":
            slot.value.val_bool = bool(override.value)
        elif override.type == "float":
            slot.value.val_f64 = float(override.value)
        else:
            slot.value.val_i64 = int(override.value)
    return array
