"""A GGUF file's header read directly (no llama.cpp, no gguf-py): its metadata key-value pairs and tensor
infos, parsed from a memory map with :mod:`struct` in one pass.

gguf-py's ``GGUFReader`` builds a numpy view for every string of every array (262,144 tokens three times
over for gemma 3: 10 s and more of Python holding the GIL); this reader skips an array it does not keep
(reading only the strings' lengths) and decodes a kept one in bulk, so a header reads in milliseconds
(the full vocabulary in a fraction of a second).

The format is ggml's ``docs/gguf.md`` (versions 2 and 3): ``GGUF``, ``uint32 version``, ``uint64
n_tensors``, ``uint64 n_kv``, the key-value pairs (``string key``, ``uint32 type``, value), then the tensor
infos (``string name``, ``uint32 n_dims``, ``uint64 dims[n_dims]``, ``uint32 type``, ``uint64 offset``).
Little-endian, or big-endian when the version reads byte-swapped (as gguf-py detects it).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Any

from skippy.models.gguf import GGUF_MAGIC
from skippy.models.registry import ModelError

# value types (ggml's gguf_type): struct format of each scalar; 8 STRING and 9 ARRAY are handled apart
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class _Cursor:
    """Reads values from ``buf`` at ``pos`` in byte order ``order`` (``<`` or ``>``); a read past the end raises
    :class:`ModelError` naming ``path`` (a truncated header)."""

    def __init__(self, buf: Any, order: str, path: Path) -> None:
        self.buf, self.order, self.path, self.pos = buf, order, path, 0

    def _truncated(self) -> ModelError:
        return ModelError(f"cannot read the GGUF header of {self.path}: it ends at byte {len(self.buf)}, inside "
                          "its header (a truncated file?)")

    def scalar(self, fmt: str) -> Any:
        try:
            (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        except struct.error:
            raise self._truncated() from None
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("Q")
        end = self.pos + n
        if end > len(self.buf):
            raise self._truncated()
        text = bytes(self.buf[self.pos:end]).decode("utf-8", errors="replace")
        self.pos = end
        return text

    def skip_string(self) -> None:
        n = self.scalar("Q")
        self.pos += n
        if self.pos > len(self.buf):
            raise self._truncated()

    def value(self, vtype: int, max_array: int | None) -> Any:
        """One value of type ``vtype``; an array of more than ``max_array`` elements is skipped and read as
        ``[]`` (``None``: every array in full)."""
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.array(max_array)
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise ModelError(f"cannot read the GGUF header of {self.path}: unknown value type {vtype}")
        return self.scalar(fmt)

    def array(self, max_array: int | None) -> list[Any]:
        etype, count = self.scalar("I"), self.scalar("Q")
        keep = max_array is None or count <= max_array
        fmt = _SCALARS.get(etype)
        if fmt is not None:  # numbers: one bulk unpack, or a jump over them
            size = struct.calcsize(fmt) * count
            if self.pos + size > len(self.buf):
                raise self._truncated()
            out = list(struct.unpack_from(f"{self.order}{count}{fmt}", self.buf, self.pos)) if keep else []
            self.pos += size
            return out
        if etype == _STRING:
            if not keep:
                for _ in range(count):
                    self.skip_string()
                return []
            return [self.string() for _ in range(count)]
        if etype == _ARRAY:
            items = [self.array(max_array) for _ in range(count)]
            return items if keep else []
        raise ModelError(f"cannot read the GGUF header of {self.path}: unknown array element type {etype}")


def read_gguf_header(path: str | os.PathLike[str], *, max_array: int | None = 5, stop_at: str | None = None,
                     tensors: bool = True) -> tuple[dict[str, Any], int]:
    """The metadata and parameter count of the GGUF file ``path``, read from its header alone.

    Returns ``(metadata, n_params)``: every metadata key with its value (integers and floats as Python
    numbers, booleans, strings, arrays as lists; an array of more than ``max_array`` elements becomes ``[]``
    without being decoded; ``None``: every array in full), and ``n_params``, the elements of all tensors (0
    when ``tensors`` is false and the tensor infos are not read). ``stop_at``: stop once that key has been
    read (metadata then holds the keys up to it; ``n_params`` is 0), for a cheap look at an early key such as
    ``general.type``.

    Raises:
        ModelError: the file cannot be read, does not start with ``GGUF``, is a version this reader does not
            know (1), or ends inside its header.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < 24:
                magic = f.read(4)
                if magic != GGUF_MAGIC:
                    raise ModelError(f"{path} is not a GGUF model file (it does not start with the bytes "
                                     f"{GGUF_MAGIC!r})")
                raise ModelError(f"cannot read the GGUF header of {path}: the file is too short (truncated?)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(buf, path, max_array, stop_at, tensors)
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror or e}") from e


def _parse(buf: Any, path: Path, max_array: int | None, stop_at: str | None,
           tensors: bool) -> tuple[dict[str, Any], int]:
    if buf[:4] != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF model file (it does not start with the bytes {GGUF_MAGIC!r})")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = "<"
    if version & 0xFFFF == 0:  # written on a big-endian machine
        order, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version not in (2, 3):
        raise ModelError(f"cannot read the GGUF header of {path}: GGUF version {version} is not supported")
    cur = _Cursor(buf, order, path)
    cur.pos = 8
    n_tensors, n_kv = cur.scalar("Q"), cur.scalar("Q")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.scalar("I"), max_array)
        if key == stop_at:
            return metadata, 0
    if not tensors:
        return metadata, 0
    n_params = 0
    for _ in range(n_tensors):
        cur.skip_string()
        n_dims = cur.scalar("I")
        count = 1
        for _ in range(n_dims):
            count *= cur.scalar("Q")
        cur.pos += 12  # uint32 type, uint64 offset
        n_params += count
    if cur.pos > len(buf):
        raise cur._truncated()
    return metadata, n_params


def gguf_type(path: str | os.PathLike[str]) -> str:
    """The file's ``general.type`` (``"model"``, ``"adapter"`` for a LoRA adapter, ``"mmproj"``...), read from
    the header up to that key (it comes early; a file without it reads to the end of the metadata): ``""``
    when the key is absent. Raises :class:`ModelError` as :func:`read_gguf_header`."""
    metadata, _ = read_gguf_header(path, max_array=0, stop_at="general.type", tensors=False)
    value = metadata.get("general.type", "")
    return value if isinstance(value, str) else ""
