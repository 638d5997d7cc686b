"""Document parts of chat messages: a PDF's or a text file's text, put in the message before the template
renders it (sans-IO).

OpenAI chat's ``file`` part, ``{"type": "file", "file": {"file_data": "data:application/pdf;base64,...",
"filename": "report.pdf"}}``, becomes a text part holding the document's text between two marker lines::

    <document name="report.pdf">
    ...the text of page 1...

    ...the text of page 2...
    </document>

OpenAI's API reads PDFs in chat (their text, and for vision models an image of each page); this server reads
their text with pypdf (no page images), and plain-text files (``text/*``, ``application/json``) as UTF-8. A
model then reads the document as it reads any text, so the prompt grows by the document's tokens (a
document beyond the context is the context's 400). The Anthropic translation turns ``document`` blocks into
these parts, the Responses translation ``input_file`` parts.

Limits: :data:`MAX_FILE_BYTES` bytes per file (decoded), :data:`MAX_PDF_PAGES` pages. Every refusal is an
:class:`InvalidRequest` (400, code ``invalid_file`` for a file that cannot be read) naming the part
(``messages[i].content[j]``): a ``file_id`` (no Files API), a file that is not a base64 ``data:`` URL, a media
type other than PDF and text, an encrypted or broken PDF. Reading a PDF takes milliseconds a page, so the
renderer renders a request with documents on its worker thread, never on the event loop.
"""

from __future__ import annotations

import io
import logging
from typing import Any

from skippy.engine.chat.images import decode_base64
from skippy.engine.errors import InvalidRequest
from skippy.engine.runtime.media import MARKER

#: Most bytes of one file, decoded (32 MiB: OpenAI's limit per file in a request).
MAX_FILE_BYTES = 32 * 2**20
#: Most pages of one PDF read (OpenAI's limit per PDF in a request: 100).
MAX_PDF_PAGES = 100
#: Media types read as UTF-8 text, besides ``text/*``
TEXT_MEDIA_TYPES = frozenset({"application/json", "application/xml", "application/x-yaml", "application/yaml"})
PDF = "application/pdf"

FILE_PART_TYPES = frozenset({"file"})
#: what a PDF without a text layer reads as (its pages are pictures: a scan), so the model knows it got one
NO_TEXT = "(this PDF has no text to read: its pages may be scanned images)"


def has_files(messages: list[Any]) -> bool:
    """Whether any message (a dict or a Struct) has a ``file`` part."""
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else getattr(m, "content", None)
        if isinstance(content, list) and any(
                (p.get("type") if isinstance(p, dict) else getattr(p, "type", None)) in FILE_PART_TYPES
                for p in content):
            return True
    return False


def data_url(media_type: str, data: str) -> str:
    """A base64 ``data:`` URL (what a ``file`` part's ``file_data`` holds) of base64 ``data``."""
    return f"data:{media_type};base64,{data}"


def _decode(url: Any, where: str) -> tuple[str, bytes]:
    """``(media type, bytes)`` of a base64 ``data:`` URL; 400 naming ``where`` for anything else."""
    if not isinstance(url, str) or not url:
        raise InvalidRequest(f"{where}: file_data must be a base64 data URL (data:application/pdf;base64,...)",
                             param=where)
    if url.startswith(("http://", "https://")):
        raise InvalidRequest(f"{where}: file URLs are not fetched by this server; send the file inline as a base64 "
                             "data URL (data:application/pdf;base64,...)", param=where, code="invalid_file")
    head, sep, payload = url.partition(",")
    if not url.startswith("data:"):  # bare base64, as some clients send it: the file name tells the type
        head, sep, payload = "data:;base64", ",", url
    if not sep or not head.endswith(";base64"):
        raise InvalidRequest(f"{where}: file_data must be a base64 data URL (data:application/pdf;base64,...)",
                             param=where)
    media_type = head[len("data:"):-len(";base64")].split(";")[0].strip().lower()
    return media_type, decode_base64(payload, where, what="file", limit=MAX_FILE_BYTES, code="invalid_file")


def media_type_of(media_type: str, filename: str | None) -> str:
    """The media type a file is read as: its own, or, when it gives none (or a generic one), its file name's
    extension's (``.pdf``, ``.txt``, ``.md``, ``.json``...)."""
    if media_type and media_type != "application/octet-stream":
        return media_type
    name = (filename or "").lower()
    if name.endswith(".pdf"):
        return PDF
    if name.endswith((".txt", ".md", ".markdown", ".csv", ".tsv", ".log", ".html", ".htm", ".xml", ".py", ".rst")):
        return "text/plain"
    if name.endswith(".json"):
        return "application/json"
    return media_type


def readable(media_type: str) -> bool:
    """Whether a file of ``media_type`` is read: a PDF, ``text/*`` or one of :data:`TEXT_MEDIA_TYPES`."""
    return media_type == PDF or media_type.startswith("text/") or media_type in TEXT_MEDIA_TYPES


def pdf_text(data: bytes, where: str) -> str:
    """The text of a PDF's pages (pypdf's extraction, in layout order), pages apart by a blank line; 400
    (``invalid_file``) naming ``where`` for a file pypdf cannot read (pypdf's decompression limits included: a
    stream that inflates past them is refused), an encrypted one it cannot open, or one of more than
    :data:`MAX_PDF_PAGES` pages."""
    import pypdf

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings on sloppy files are not the client's
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise InvalidRequest(f"{where}: the PDF is encrypted; send it without a password", param=where,
                                 code="invalid_file")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise InvalidRequest(f"{where}: the PDF has {len(reader.pages)} pages; at most {MAX_PDF_PAGES} are read",
                                 param=where, code="invalid_file")
        return "\n\n".join(page.extract_text().strip() for page in reader.pages).strip()
    except InvalidRequest:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure on the client's file is the client's 400, never a 500:
        # pypdf raises its own errors (PdfReadError, LimitReachedError on a decompression bomb, DeprecationError
        # on an old filter name) and Python's (KeyError, TypeError...) on malformed objects
        raise InvalidRequest(f"{where}: the PDF could not be read ({type(exc).__name__})", param=where,
                             code="invalid_file") from None


def file_text(part: dict[str, Any], where: str) -> str:
    """The text part that stands for one ``file`` part: the document's text between ``<document name=...>``
    and ``</document>``. 400 naming ``where``: see the module docstring."""
    file = part.get("file")
    if not isinstance(file, dict):
        raise InvalidRequest(f"{where}.file must be an object with file_data (a base64 data URL) and filename",
                             param=f"{where}.file")
    if file.get("file_id") is not None and file.get("file_data") is None:
        raise InvalidRequest(f"{where}: files by file_id are not supported (this server has no Files API); send the "
                             "file inline as file_data, a base64 data URL", param=where)
    filename = file.get("filename")
    if filename is not None and not isinstance(filename, str):
        raise InvalidRequest(f"{where}.file.filename must be a string", param=f"{where}.file.filename")
    media_type, data = _decode(file.get("file_data"), where)
    media_type = media_type_of(media_type, filename)
    if not readable(media_type):
        raise InvalidRequest(f"{where}: files of type {media_type or 'unknown'!r} are not read (this server reads "
                             "PDFs and text files)", param=where, code="invalid_file")
    text = pdf_text(data, where) if media_type == PDF else data.decode("utf-8", errors="replace")
    if not text.strip() and media_type == PDF:
        text = NO_TEXT
    return document_text(filename, text.replace(MARKER, ""))  # the media marker is the images' own


def document_text(name: str | None, text: str) -> str:
    """A document's text as the prompt shows it: between ``<document name="NAME">`` and ``</document>`` lines
    (``document`` when it has no name)."""
    shown = (name or "document").replace('"', "'").replace("\n", " ")
    return f'<document name="{shown}">\n{text}\n</document>'


def extract_documents(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each ``file`` part replaced by its text part (:func:`file_text`), in place of the part;
    the input is not mutated; without file parts it is returned as is."""
    if not has_files(messages):
        return messages
    out = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") in FILE_PART_TYPES
                                                    for p in content):
            out.append(message)
            continue
        parts = [{"type": "text", "text": file_text(p, f"messages[{i}].content[{j}]")}
                 if isinstance(p, dict) and p.get("type") in FILE_PART_TYPES else p
                 for j, p in enumerate(content)]
        out.append({**message, "content": parts})
    return out
