"""Hugging Face model references (``hf://OWNER/REPO/FILE.gguf``, ``OWNER/REPO:QUANT`` as
llama-server's ``-hf``): parsing them, and the download URL of the file they name, picked from the
hub's file list for a quantization.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

from skippy.models.registry import ModelError

HF_ENDPOINT = "https://huggingface.co"
"""Hugging Face's hub; ``$HF_ENDPOINT`` overrides it (huggingface_hub's variable, e.g. for a mirror)."""

DEFAULT_HF_QUANT = "Q4_K_M"
"""The quantization llama-server's ``-hf OWNER/REPO`` picks when none is named."""


def hf_endpoint() -> str:
    """``$HF_ENDPOINT`` if set and non-empty, else :data:`HF_ENDPOINT`; without a trailing slash."""
    return (os.environ.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")


@dataclasses.dataclass(frozen=True)
class HFRef:
    """A model on Hugging Face: ``repo`` (``OWNER/NAME``) and either ``file`` (a path in the repo) or
    ``quant`` (llama-server's ``-hf OWNER/REPO:QUANT``); ``revision`` is a branch, tag or commit."""

    repo: str
    file: str | None = None
    quant: str | None = None
    revision: str = "main"

    def url(self, file: str | None = None) -> str:
        """The download URL of ``file`` (default: :attr:`file`):
        ``<endpoint>/OWNER/REPO/resolve/<revision>/<file>``, path segments percent-encoded."""
        from urllib.parse import quote

        name = file or self.file
        if not name:
            raise ModelError(f"hf://{self.repo}:{self.quant}: no file chosen yet (see pick_hf_file)")
        return f"{hf_endpoint()}/{self.repo}/resolve/{quote(self.revision, safe='')}/{quote(name)}"

    def api_url(self) -> str:
        """The hub API URL that lists the repo's files (``siblings``) at :attr:`revision`."""
        from urllib.parse import quote

        return f"{hf_endpoint()}/api/models/{self.repo}/revision/{quote(self.revision, safe='')}"


_HF_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"


def parse_hf(source: str) -> HFRef | None:
    """Parse a Hugging Face model reference; ``None`` when ``source`` is not one.

    Accepted forms (``@REV`` after the repo name is optional, default ``main``):

    - ``hf://OWNER/REPO/PATH/FILE.gguf`` -> that file;
    - ``hf://OWNER/REPO:QUANT`` or ``hf://OWNER/REPO`` -> the repo's GGUF of that quantization
      (default :data:`DEFAULT_HF_QUANT`), as llama-server's ``-hf``;
    - ``OWNER/REPO:QUANT`` (llama-server's ``-hf`` form, without ``hf://``): only with ``:QUANT``,
      since ``OWNER/REPO`` alone reads as a relative path.

    Raises:
        ModelError: ``hf://`` with a malformed rest.
    """
    import re

    explicit = source.startswith("hf://")
    rest = source[len("hf://"):] if explicit else source
    m = re.fullmatch(rf"({_HF_NAME})/({_HF_NAME}?)(?:@([^/:]+))?(?::([A-Za-z0-9._-]+)|/(.+))?", rest)
    if m is None or (m.group(2).endswith(".gguf") and not m.group(5)):
        if explicit:
            raise ModelError(f"{source!r} is not a Hugging Face reference; use hf://OWNER/REPO/FILE.gguf or "
                             "hf://OWNER/REPO:QUANT (e.g. hf://ggml-org/gemma-3-270m-GGUF:Q8_0)")
        return None
    owner, repo, rev, quant, file = m.groups()
    if not explicit and quant is None:
        return None
    if file is not None and (not file.lower().endswith(".gguf") or ".." in file.split("/")):
        raise ModelError(f"{source!r}: the file must be a .gguf path inside the repo")
    return HFRef(repo=f"{owner}/{repo}", file=file, quant=None if file else (quant or DEFAULT_HF_QUANT),
                 revision=rev or "main")


def pick_hf_file(files: Iterable[str], quant: str, repo: str = "") -> str:
    """The GGUF of ``files`` (paths in a repo) whose name carries the quantization ``quant``.

    Matches ``quant`` case-insensitively as a whole part of the file name (after ``-``, ``_``, ``.``
    or the start; before ``-``, ``.`` or the end): ``Q4_K_M`` matches ``model-Q4_K_M.gguf``, not
    ``model-Q4_K_M_L.gguf``. Multimodal projectors (``mmproj``) are skipped. llama-server asks the
    hub for a manifest instead; this needs only the file list.

    Raises:
        ModelError: no file or several files match (the message lists the GGUF files), or the match is
            split in several files (``-00001-of-00003.gguf``), which skippy cannot pull.
    """
    import re

    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower())
    pattern = re.compile(rf"(?:^|[-_.]){re.escape(quant)}(?:[-.]|$)", re.IGNORECASE)
    found = [f for f in ggufs if pattern.search(Path(f).stem)]
    where = f" in {repo}" if repo else ""
    if not found:
        raise ModelError(f"no GGUF file of quantization {quant}{where}; its GGUF files: "
                         f"{', '.join(ggufs) or 'none'}. Name one with hf://{repo or 'OWNER/REPO'}/FILE.gguf.")
    split = [f for f in found if re.search(r"-\d{5}-of-\d{5}\.gguf$", f, re.IGNORECASE)]
    if split and len(split) == len(found):
        raise ModelError(f"the {quant} model{where} is split in {len(split)} files ({', '.join(split)}); "
                         "skippy pulls single-file GGUFs only: pick another quantization.")
    found = [f for f in found if f not in split]
    if len(found) > 1:
        raise ModelError(f"several GGUF files of quantization {quant}{where}: {', '.join(found)}; name one with "
                         f"hf://{repo or 'OWNER/REPO'}/FILE.gguf.")
    return found[0]


def _hf_headers() -> dict[str, str]:
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def resolve_hf(ref: HFRef) -> str:
    """The download URL for ``ref``; for a ``:QUANT`` reference, asks the hub API for the repo's file
    list (one small GET, with ``$HF_TOKEN`` if set) and picks the file with :func:`pick_hf_file`.

    Raises:
        ModelError: the hub cannot be reached, does not know the repo, or no single file matches.
    """
    if ref.file:
        return ref.url()
    import httpx

    api = ref.api_url()
    try:
        r = httpx.get(api, headers=_hf_headers(), follow_redirects=True, timeout=30)
    except httpx.HTTPError as e:
        raise ModelError(f"cannot list the files of {ref.repo} ({api}): {e}; check the network, or name the "
                         f"file with hf://{ref.repo}/FILE.gguf") from e
    if r.status_code != 200:
        raise ModelError(f"cannot list the files of {ref.repo}: {api} answered HTTP {r.status_code}"
                         + (" (a private or gated repo needs HF_TOKEN)" if r.status_code in (401, 403) else ""))
    try:
        files = [s["rfilename"] for s in r.json().get("siblings", [])]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ModelError(f"{api} did not answer the hub's JSON file list: {e}") from e
    return ref.url(pick_hf_file(files, ref.quant or DEFAULT_HF_QUANT, ref.repo))
