"""The web playground: ``GET /`` serves a single-page app to browsers, ``GET /webui/<file>`` its static files.

``/`` itself is a row of the route table (:func:`skippy.http.routes.ollama_models.root`): it calls
:func:`index` for a browser (an ``Accept`` listing ``text/html``) and answers other clients Ollama's
``Ollama is running``, as Ollama's clients probe it.

The files live in the package (``skippy/http/webui/``: ``index.html``, ``app.js``,
``app.css`` and ``vendor/`` with pinned, licensed copies of marked and DOMPurify,
see ``vendor/VENDOR.md``); there is no build step. The page talks to the same
server with relative URLs (``v1/chat/completions``, ``/health``...), so it works
without CORS (``--cors-origins`` unset) and behind a path prefix.

The page and its files need no API key (a browser cannot send one when it opens
an address; they hold no data): the page asks for the key when the API answers
401 and keeps it in the tab's ``sessionStorage``. ``--no-webui``
(:attr:`~skippy.http.settings.ServerSettings.webui` false) leaves the blueprint
out: ``/webui/...`` then answers the usual 404 envelope, as any unknown path, and ``/`` Ollama's text to
every client.

Model output reaches the page as text nodes, or as markdown rendered by marked
with raw HTML escaped (shown as text, never parsed) and the result cleaned by
DOMPurify. Every file is sent with ``Cache-Control: no-cache`` (revalidated: a
new server version is never hidden by a stale copy) and the page with a
``Content-Security-Policy`` that allows scripts, styles and connections from the
same origin only, so a script that got through anyway could not run.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from quart import Blueprint, Response, request

from skippy.http.replies import error_response

__all__ = ["CSP", "assets", "blueprint", "is_public"]

#: the files' package directory
PACKAGE_DIR = "webui"
#: URL prefix of the static files
PREFIX = "/webui/"

#: the page's Content-Security-Policy: same-origin scripts, styles and requests; no plugins, frames or <base>
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
          ".png": "image/png", ".md": "text/plain; charset=utf-8", ".txt": "text/plain; charset=utf-8",
          ".json": "application/json"}


@functools.cache
def assets() -> dict[str, tuple[bytes, str, str]]:
    """Every static file of the playground: ``relative path -> (bytes, Content-Type, ETag)``.

    Read once from the package (works from a wheel or a source tree); only these
    names are ever served, so no request path reaches the file system.
    Files of other types (a licence without a suffix) are served as ``text/plain``.
    """
    out: dict[str, tuple[bytes, str, str]] = {}

    def walk(node: resources.abc.Traversable, prefix: str) -> None:
        for child in node.iterdir():
            name = prefix + child.name
            if child.is_dir():
                walk(child, name + "/")
            elif not child.name.startswith(".") and not child.name.endswith(".py"):
                data = child.read_bytes()
                suffix = "." + child.name.rsplit(".", 1)[-1] if "." in child.name else ""
                out[name] = (data, _TYPES.get(suffix, "text/plain; charset=utf-8"),
                             '"' + hashlib.sha256(data).hexdigest()[:32] + '"')

    walk(resources.files("skippy.http").joinpath(PACKAGE_DIR), "")
    return out


def is_public(path: str) -> bool:
    """True for the playground's paths (``/`` and ``/webui/...``): they need no API key."""
    return path == "/" or path.startswith(PREFIX)


def _send(name: str, *, page: bool = False) -> Response:
    found = assets().get(name)
    if found is None:
        return error_response(404, f"no route {request.method} {request.path}", "invalid_request_error",
                              code="not_found")
    data, content_type, etag = found
    headers = {"Cache-Control": "no-cache", "ETag": etag, "X-Content-Type-Options": "nosniff"}
    if page:
        headers.update({"Content-Security-Policy": CSP, "Referrer-Policy": "no-referrer"})
    if etag in request.headers.get("If-None-Match", ""):
        return Response(b"", status=304, headers=headers)
    return Response(data, status=200, headers={**headers, "Content-Type": content_type})


async def index() -> Response:
    return _send("index.html", page=True)


async def asset(name: str) -> Response:
    return _send(name)


blueprint = Blueprint("webui", __name__)
blueprint.add_url_rule(PREFIX + "<path:name>", view_func=asset, methods=["GET"])
