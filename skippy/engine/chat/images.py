"""Image parts of chat messages: taken out of the messages before the template renders them (sans-IO).

OpenAI chat ``content`` parts ``{"type": "image_url", "image_url": {"url": ...}}`` (the ``url`` may also
be given bare, as some clients do) become a text part holding libmtmd's media marker
(:data:`~skippy.engine.runtime.media.MARKER`), as llama-server's ``oaicompat_chat_params_parse`` does,
and their bytes are returned in the order the markers appear in the messages (the order a template
writes them). The tokenizer puts each image at its marker.

Only ``data:`` URLs with base64 content are read (``data:image/png;base64,...``); an ``http(s)`` URL is
refused (``image_url_not_supported``) unless the server fetches them (``--allow-image-urls``: the actors
layer turns each into a data URL before rendering, :mod:`skippy.engine.chat.image_urls`). Limits:
:data:`MAX_IMAGES` images per request, :data:`MAX_IMAGE_BYTES` bytes per image (decoded), :data:`MAX_IMAGE_PIXELS`
pixels per image (declared in its header). Every refusal is an
:class:`InvalidRequest` (400) naming the part (``messages[i].content[j]``); a model without image input refuses
any image part with code ``media_not_supported``.

The Responses and Anthropic translations turn their image parts into these ``image_url`` parts; their
routes give the refusals back with their own names for the part (:func:`rename_image_error`).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings
from collections.abc import Sequence
from typing import Any

from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.runtime.media import MARKER

#: Most images in one request (llama-server sets none; vLLM's default per-prompt limit for images is 1
#: per model unless configured, Ollama takes any number): enough for a conversation about a few photos.
MAX_IMAGES = 16
#: Most bytes of one image, decoded (20 MiB: OpenAI's limit per image).
MAX_IMAGE_BYTES = 20 * 2**20
#: Most pixels of one image (width x height, read from its header by Pillow before libmtmd decodes it): a
#: small file can declare a huge picture, and stb_image would allocate 3 bytes a pixel for it.
MAX_IMAGE_PIXELS = 50_000_000

IMAGE_PART_TYPES = frozenset({"image_url"})


def part_url(part: dict[str, Any]) -> Any:
    """The ``url`` of an image part (``image_url.url``, or ``image_url`` itself when given bare)."""
    image = part.get("image_url")
    return image.get("url") if isinstance(image, dict) else image


def decode_data_url(url: Any, where: str) -> bytes:
    """The bytes of a base64 ``data:`` URL; 400 naming ``where`` for anything else."""
    if not isinstance(url, str) or not url:
        raise InvalidRequest(f"{where}: image_url.url must be a non-empty string", param=where)
    if url.startswith(("http://", "https://")):
        raise InvalidRequest(f"{where}: image URLs are not fetched by this server (start it with "
                             "--allow-image-urls to fetch http(s) image URLs); send the image inline as a base64 "
                             "data URL (data:image/png;base64,...)", param=where, code="image_url_not_supported")
    head, sep, payload = url.partition(",")
    if not url.startswith("data:") or not sep or not head.endswith(";base64"):
        raise InvalidRequest(f"{where}: image_url.url must be a base64 data URL (data:image/png;base64,...)",
                             param=where)
    data = decode_base64(payload, where, what="image", limit=MAX_IMAGE_BYTES, code="image_too_large")
    if not data:
        raise InvalidRequest(f"{where}: the image is empty", param=where)
    check_pixels(data, where)
    return data


def decode_base64(payload: str, where: str, *, what: str, limit: int, code: str) -> bytes:
    """The bytes of a base64 ``payload`` (a data URL's content), at most ``limit`` of them; 400 naming
    ``where``: the ``what`` is larger (``code``), or the content is not valid base64."""
    if len(payload) * 3 // 4 > limit + 3:  # before decoding: a huge payload is refused without its copy
        raise InvalidRequest(f"{where}: the {what} is larger than {limit} bytes", param=where, code=code)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where}: the data URL's content is not valid base64", param=where) from None
    if len(data) > limit:
        raise InvalidRequest(f"{where}: the {what} is larger than {limit} bytes", param=where, code=code)
    return data


def check_pixels(data: bytes, where: str) -> None:
    """A 400 (``image_too_large``) naming ``where`` when the image's header declares more than
    :data:`MAX_IMAGE_PIXELS` pixels (Pillow reads the header only). A file Pillow cannot identify passes:
    libmtmd decides whether it is an image."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():  # Pillow warns past 89M pixels; the refusal below says it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
    except Image.DecompressionBombError as exc:  # past Pillow's own limit: its message has the declared count
        declared = re.search(r"\((\d+) pixels\)", str(exc))
        width, height = (int(declared.group(1)) if declared else MAX_IMAGE_PIXELS + 1), 1
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return
    if width * height > MAX_IMAGE_PIXELS:
        raise InvalidRequest(f"{where}: the image has {width * height} pixels, more than {MAX_IMAGE_PIXELS}",
                             param=where, code="image_too_large")


def check_base64(data: Any, where: str) -> str:
    """``data`` when it is a non-empty base64 string (an image sent inline by the Anthropic or Ollama API);
    a 400 naming ``where`` otherwise. The bytes are decoded later, with the limits, from the data URL."""
    if not isinstance(data, str) or not data:
        raise InvalidRequest(f"{where} must be a non-empty base64 string", param=where)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where} is not valid base64", param=where) from None
    return data


def has_images(messages: list[dict[str, Any]]) -> bool:
    """Some message's ``content`` holds an image part."""
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(p, dict) and p.get("type") in IMAGE_PART_TYPES for p in m["content"])
               for m in messages)


def extract_images(messages: list[dict[str, Any]], *,
                   vision: bool) -> tuple[list[dict[str, Any]], list[bytes], list[str]]:
    """``messages`` with each image part replaced by a text part holding :data:`MARKER`, the images' bytes in
    message order, and each image's part (``messages[i].content[j]``, to name it in a later error).
    ``vision``: the model reads images; without it any image part is a 400 (``media_not_supported``). A text
    holding :data:`MARKER` itself beside images is a 400 naming it (the marker would take an image's place).
    The input is not mutated; without image parts it is returned as is."""
    if not has_images(messages):
        return messages, [], []
    images: list[bytes] = []
    wheres: list[str] = []
    out = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            if isinstance(content, str) and MARKER in content:
                _marker_in_text(f"messages[{i}].content")
            out.append(message)
            continue
        parts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES):
                if isinstance(part, dict) and isinstance(part.get("text"), str) and MARKER in part["text"]:
                    _marker_in_text(f"messages[{i}].content[{j}]")
                parts.append(part)
                continue
            where = f"messages[{i}].content[{j}]"
            if not vision:
                raise InvalidRequest(f"{where}: this model reads text only (image input needs the model's "
                                     "projector: skippy serve --mmproj FILE; or a --consult peer that reads "
                                     "images describes them, for requests with hooks on)", param=where,
                                     code="media_not_supported")
            if len(images) == MAX_IMAGES:
                raise InvalidRequest(f"{where}: more than {MAX_IMAGES} images in one request", param=where,
                                     code="too_many_images")
            images.append(decode_data_url(part_url(part), where))
            wheres.append(where)
            parts.append({"type": "text", "text": MARKER})
        out.append({**message, "content": parts})
    return out, images, wheres


def _marker_in_text(where: str) -> None:
    raise InvalidRequest(f"{where}: the text holds {MARKER}, libmtmd's media marker, which marks where an image "
                         "goes: remove it from the text", param=where)


_PART = re.compile(r"messages\[(\d+)\]\.content\[(\d+)\]")


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def part_ordinal(messages: Sequence[Any], param: str | None,
                 types: frozenset[str] = IMAGE_PART_TYPES) -> int | None:
    """Which part of a type in ``types`` of ``messages`` (message Structs or dicts) ``param`` names
    (``messages[i].content[j]``, maybe with a field after it, as :func:`extract_images` and the document reader
    name a part): 0 for the first such part in message order; ``None`` when ``param`` names none."""
    m = _PART.match(param or "")
    if m is None:
        return None
    at = (int(m[1]), int(m[2]))
    n = 0
    for i, message in enumerate(messages):
        content = _field(message, "content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if _field(part, "type") not in types:
                continue
            if (i, j) == at:
                return n
            n += 1
    return None


def rename_part_error(exc: EngineError, messages: Sequence[Any], paths: Sequence[str],
                      types: frozenset[str] = IMAGE_PART_TYPES) -> EngineError:
    """``exc`` naming a part of a type in ``types`` of the chat ``messages`` renamed, in place, to that part's
    name in the request it was translated from: ``paths[k]`` for the ``k``-th such part (in message order, the
    order a translation keeps), in ``param`` and at the head of the message (``input[2].content[0]: ...``).
    Other errors are returned as they are."""
    k = part_ordinal(messages, exc.param, types)
    if k is None or k >= len(paths):
        return exc
    old = _PART.match(exc.param or "")
    head = old[0] if old else ""
    exc.param = paths[k]
    if exc.message.startswith(head):
        exc.message = paths[k] + exc.message[len(head):]
        exc.args = (exc.message,)
    return exc


def rename_image_error(exc: EngineError, messages: Sequence[Any], paths: Sequence[str]) -> EngineError:
    """:func:`rename_part_error` for image parts."""
    return rename_part_error(exc, messages, paths, IMAGE_PART_TYPES)
