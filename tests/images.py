"""Tiny PNG images for the image-input tests, written with the standard library only (``zlib`` and ``struct``).

:func:`png_bytes` gives an 8-bit RGB PNG (colour type 2, no interlace, filter 0 on every row), which
libmtmd decodes with stb_image like any other PNG; :func:`data_url` and :func:`image_messages` put images
in a chat request (OpenAI ``image_url`` parts).
"""

from __future__ import annotations

import base64
import random
import struct
import zlib
from collections.abc import Callable

RGB = tuple[int, int, int]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(width: int, height: int, pixels: Callable[[int, int], RGB] | int = 0) -> bytes:
    """A ``width`` x ``height`` RGB PNG. ``pixels`` is either a function of ``(x, y)`` giving ``(r, g, b)``
    (each 0..255) or an int seed for random pixels (the same seed gives the same image)."""
    if width <= 0 or height <= 0:
        raise ValueError("width and height must be positive")
    if isinstance(pixels, int):
        rng = random.Random(pixels)
        raw = b"".join(b"\x00" + rng.randbytes(3 * width) for _ in range(height))
    else:
        rows = []
        for y in range(height):
            row = bytearray(b"\x00")  # filter type 0 (None)
            for x in range(width):
                row.extend(bytes(pixels(x, y)))
            rows.append(bytes(row))
        raw = b"".join(rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit depth, truecolour
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def solid(rgb: RGB) -> Callable[[int, int], RGB]:
    """A pixel function of one colour, for :func:`png_bytes`."""
    return lambda x, y: rgb


def data_url(image: bytes, kind: str = "png") -> str:
    """``data:image/<kind>;base64,...`` of ``image``."""
    return f"data:image/{kind};base64," + base64.b64encode(image).decode()


def image_messages(*images: bytes | str, text: str = "Describe the picture.") -> list[dict]:
    """One user message: ``text``, then an ``image_url`` part per image (bytes as a data URL, a string as
    the ``url`` itself)."""
    parts: list[dict] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": im if isinstance(im, str) else data_url(im)}}
              for im in images]
    return [{"role": "user", "content": parts}]
