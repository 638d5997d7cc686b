"""HTTP downloads into a ``.part`` file that a later call resumes (HTTP Range, RFC 9110), and the
progress lines and bars every pull writes on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

from skippy.models.registry import ModelError


def _say(msg: str, progress: bool) -> None:
    if progress:
        print(msg, file=sys.stderr, flush=True)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_RESUME_ATTEMPTS = 5


def _content_range(header: str | None) -> tuple[int | None, int | None]:
    """``Content-Range: bytes START-END/TOTAL`` (RFC 9110) -> (START, TOTAL); ``*`` or absent -> None."""
    import re

    m = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", header or "")
    if m is None:
        return None, None
    start, total = m.groups()
    return (int(start) if start else None), (int(total) if total and total != "*" else None)


def _http_error(url: str, status: int) -> ModelError:
    hint = {401: " (a private or gated Hugging Face repo needs HF_TOKEN)", 403: " (forbidden; a gated repo "
            "needs HF_TOKEN and accepted terms)", 404: " (no such file: check the URL)"}.get(status, "")
    return ModelError(f"cannot download {url}: HTTP {status}{hint}")


def download(url: str, part: Path, *, headers: dict[str, str] | None = None, progress: bool = True,
             attempts: int = _RESUME_ATTEMPTS) -> None:
    """Download ``url`` into ``part``, resuming what ``part`` already holds (HTTP Range, RFC 9110 §14).

    With bytes in ``part``, asks for ``Range: bytes=N-``: a ``206`` whose ``Content-Range`` starts at
    ``N`` is appended; a ``200`` (the server ignores ranges) or a ``206`` starting elsewhere restarts
    from zero; a ``416`` whose total equals ``N`` means the file is complete. A connection lost
    mid-body is resumed the same way, up to ``attempts`` requests in all. Redirects are followed
    (Hugging Face redirects to its CDN). Progress (tqdm, bytes) goes to stderr.

    Raises:
        ModelError: an HTTP error status, a failed connection, or still incomplete after ``attempts``
            (the URL and the last error; a partial ``part`` with bytes in it is kept and named, so a later
            call resumes it; an empty one is removed).
    """
    import time

    import httpx
    from tqdm import tqdm

    last: Exception | None = None
    for attempt in range(attempts):
        have = part.stat().st_size if part.is_file() else 0
        req_headers = dict(headers or {})
        if have:
            req_headers["Range"] = f"bytes={have}-"
        got_bytes = False
        try:
            with httpx.stream("GET", url, headers=req_headers, follow_redirects=True,
                              timeout=httpx.Timeout(30.0, read=120.0)) as r:
                if r.status_code == 416 and have:
                    if _content_range(r.headers.get("content-range"))[1] == have:
                        return  # the partial file is the whole file
                    part.unlink()
                    continue
                if r.status_code == 206 and have and _content_range(r.headers.get("content-range"))[0] == have:
                    mode, total = "ab", _content_range(r.headers.get("content-range"))[1]
                    _say(f"resuming {part.name} at {have} bytes", progress)
                elif r.status_code in (200, 206):
                    if r.status_code == 206:  # a range we did not ask for: start over
                        part.unlink(missing_ok=True)
                        continue
                    mode, have = "wb", 0
                    length = r.headers.get("content-length")
                    total = int(length) if length and length.isdigit() else None
                else:
                    raise _http_error(url, r.status_code)
                with open(part, mode) as out, tqdm(total=total, initial=have, unit="B", unit_scale=True,
                                                   unit_divisor=1024, desc=part.name.removesuffix(".part"),
                                                   disable=not progress, file=sys.stderr,
                                                   mininterval=0.1 if _isatty(sys.stderr) else 10.0) as bar:
                    for chunk in r.iter_bytes():  # as received: a lost connection loses no byte read
                        out.write(chunk)
                        bar.update(len(chunk))
                        got_bytes = True
            size = part.stat().st_size
            if total is None or size == total:
                return
            last = ModelError(f"got {size} of {total} bytes")
        except httpx.TransportError as e:
            last = e
            if not got_bytes and isinstance(e, httpx.ConnectError | httpx.ConnectTimeout | httpx.UnsupportedProtocol):
                break  # nothing to resume: the server is not reachable
        except OSError as e:
            raise ModelError(f"cannot write {part}: {e.strerror or e}") from e
        if attempt + 1 < attempts:
            _say(f"download of {url} interrupted ({last}); resuming", progress)
            time.sleep(min(0.5 * attempt, 5.0))
    reason = (str(last) or type(last).__name__) if last is not None else "interrupted"
    kept = part.stat().st_size if part.is_file() else 0
    if not kept:  # nothing to resume: say so by not naming a file that is not there
        part.unlink(missing_ok=True)
        raise ModelError(f"cannot download {url}: {reason}")
    raise ModelError(f"cannot download {url}: {reason}. {kept} bytes are kept in {part}; run the same skippy pull "
                     "again to resume.")
