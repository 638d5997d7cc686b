"""Small PDFs made at test time (no PDF writer library needed): one page of Helvetica text per string.

The file is a PDF 1.4 with a catalog, a page tree, one page and content stream per text, and a cross-reference
table with each object's byte offset, which is what a reader (pypdf) needs to find the pages and their text.
"""

from __future__ import annotations

import zlib


def pdf_bytes(pages: list[str], *, flate: str | None = None, padding: int = 0) -> bytes:
    """A PDF whose page ``k`` shows the line ``pages[k]`` (ASCII, without parentheses or backslashes).
    ``flate``: the content streams are deflated, under that filter name (``/FlateDecode``, or the old
    abbreviation ``/Fl``); ``padding``: that many spaces after each page's text (a stream that inflates big)."""
    n = len(pages)
    font = 3 + 2 * n  # the objects: 1 catalog, 2 pages, then a page and its content per text, then the font
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + b" ".join(f"{3 + 2 * k} 0 R".encode() for k in range(n)) +
               f"] /Count {n} >>".encode()]
    for k, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode() + b" " * padding
        head = f"<< /Length {{}} /Filter {flate} >>" if flate else "<< /Length {} >>"
        if flate:
            stream = zlib.compress(stream, 1)
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * k} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(head.format(len(stream)).encode() + b"\nstream\n" + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)
