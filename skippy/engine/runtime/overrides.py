"""Tensor buffer-type overrides: llama-server's ``-ot/--override-tensor PATTERN=BUFFER``, ``-cmoe/--cpu-moe``
and ``-ncmoe/--n-cpu-moe N``, as llama.cpp's common/arg.cpp parses them, and the NULL-terminated
``llama_model_tensor_buft_override`` array that ``llama_model_params.tensor_buft_overrides`` points to.

llama.cpp matches each weight's name against the patterns in order (``std::regex_search``, ECMAScript
syntax; the first match wins) and allocates a matching tensor in that buffer type instead of the one its
layer's device would give it; it logs ``tensor NAME (... ) buffer type overridden to BUFFER`` at debug
level. ``-cmoe`` is the pattern :data:`FFN_EXPS_REGEX` on the CPU buffer, ``-ncmoe N`` one pattern per
layer ``blk\\.I`` for ``I < N`` (common/common.h ``llm_ffn_exps_cpu_override``, ``llm_ffn_exps_block_regex``).
Patterns are checked with Python's :mod:`re`, which reads the usual ECMAScript subset the same way.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterable, Sequence

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

