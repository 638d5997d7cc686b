"""Image URLs on the real server (issue 38, second part): ``skippy serve --mmproj --allow-image-urls`` fetches
chat ``image_url`` parts' http(s) URLs before rendering (the tiny random-weight projector of
:func:`tests.tiny_models.ensure_tiny_mmproj`, as in test_images.py).

No public server can be reached here, so the images are served over loopback by a small ``http.server``
thread, to a server started with the unsafe escape hatch ``--allow-private-image-urls``; a server without
it refuses the same URLs without a request to them (the public-address rule over fake public hosts, and
redirects into a private network, are tests/unit/test_image_urls.py's). A served PNG gives the first
token of the same PNG as a data URL; each failure is a 400 naming the part, and the server keeps serving.
A server without ``--allow-image-urls`` refuses URLs naming the flag: test_images.py.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from skippy.engine.chat.image_urls import FETCH_TIMEOUT, MAX_REDIRECTS
from skippy.engine.chat.images import MAX_IMAGE_BYTES, MAX_IMAGES
from tests.images import image_messages, png_bytes, solid
from tests.support import Server, assert_envelope, first_top

RED = png_bytes(40, 30, solid((255, 0, 0)))
CHUNK = b"\x00" * 65536


class ImageSite(ThreadingHTTPServer):
    """A loopback HTTP server of test images; ``hits`` counts the requests per path."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: Counter[str] = Counter()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: ImageSite

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.hits[self.path] += 1
        try:
            self._answer()
        except (BrokenPipeError, ConnectionResetError):  # the fetcher stopped reading
            pass

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _answer(self) -> None:
        path = self.path
        if path == "/red.png":
            self._send(200, {"Content-Type": "image/png", "Content-Length": str(len(RED))}, RED)
        elif path.startswith("/hop/"):  # /hop/N: N redirects, then the image
            n = int(path.rsplit("/", 1)[1])
            self._send(302, {"Location": f"/hop/{n - 1}" if n > 1 else "/red.png", "Content-Length": "0"})
        elif path == "/missing":
            self._send(404, {"Content-Type": "text/plain", "Content-Length": "9"}, b"not found")
        elif path == "/page":
            page = b"<html><body>no image here</body></html>"
            self._send(200, {"Content-Type": "text/html; charset=utf-8", "Content-Length": str(len(page))}, page)
        elif path == "/declared-huge":  # refused from its Content-Length
            self._send(200, {"Content-Type": "image/png", "Content-Length": str(MAX_IMAGE_BYTES + 1)}, CHUNK)
        elif path == "/endless":  # no Content-Length (HTTP/1.0: the body ends with the connection)
            self._send(200, {"Content-Type": "image/png"})
            for _ in range(2 * MAX_IMAGE_BYTES // len(CHUNK)):
                self.wfile.write(CHUNK)
        elif path == "/slow":
            time.sleep(FETCH_TIMEOUT + 2)
            self._send(200, {"Content-Type": "image/png", "Content-Length": str(len(RED))}, RED)
        else:
            self._send(500, {"Content-Length": "0"})


@pytest.fixture(scope="module")
def site() -> Iterator[ImageSite]:
    server = ImageSite()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def fetching(mmproj, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Fetches image URLs, loopback included (the tests' escape hatch)."""
    with Server(["--mmproj", str(mmproj), "--allow-image-urls", "--allow-private-image-urls", "--parallel", "2",
                 "--n-ctx", "1024"], tmp_path_factory.mktemp("fetching") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def public_only(mmproj, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Fetches image URLs from public addresses only (``--allow-image-urls`` alone)."""
    with Server(["--mmproj", str(mmproj), "--allow-image-urls", "--parallel", "1", "--n-ctx", "1024"],
                tmp_path_factory.mktemp("public") / "server.log") as srv:
        yield srv


def post(server: Server, msgs: list[dict]) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/chat/completions", timeout=60, json={"messages": msgs, "max_tokens": 1})


def still_serving(server: Server) -> None:
    top, _ = first_top(server.base_url, image_messages(RED))
    assert top


def test_a_served_png_gives_the_first_token_of_the_same_bytes_as_a_data_url(fetching: Server, site: ImageSite) -> None:
    inline, usage = first_top(fetching.base_url, image_messages(RED), cache_prompt=False)
    fetched, fetched_usage = first_top(fetching.base_url, image_messages(site.url + "/red.png"), cache_prompt=False)
    assert [t for t, _ in fetched] == [t for t, _ in inline]
    assert [lp for _, lp in fetched] == pytest.approx([lp for _, lp in inline], abs=1e-4)
    assert fetched_usage["prompt_tokens"] == usage["prompt_tokens"]
    assert site.hits["/red.png"] == 1
    # a host name (resolved, then the connection goes to the address), and redirects up to the limit
    by_name, _ = first_top(fetching.base_url, image_messages(site.url.replace("127.0.0.1", "localhost") + "/red.png"),
                           cache_prompt=False)
    redirected, _ = first_top(fetching.base_url, image_messages(f"{site.url}/hop/{MAX_REDIRECTS}"),
                              cache_prompt=False)
    for other in (by_name, redirected):
        assert [t for t, _ in other] == [t for t, _ in inline]
    assert site.hits["/red.png"] == 3 and site.hits["/hop/1"] == 1
    # /apply-template renders the fetched image's marker
    r = httpx.post(fetching.base_url + "/apply-template", json={"messages": image_messages(site.url + "/red.png")})
    assert r.status_code == 200 and r.json()["prompt"].count("<__media__>") == 1
    assert "image URL messages[0].content[1]: " in fetching.log()  # the fetch is logged (host, bytes, time)


@pytest.mark.parametrize(("path", "code", "fragment"), [
    ("/missing", "image_url_failed", "HTTP 404"),
    ("/page", "invalid_image", "not an image (Content-Type: text/html)"),
    ("/declared-huge", "image_too_large", f"larger than {MAX_IMAGE_BYTES} bytes"),
    ("/endless", "image_too_large", f"larger than {MAX_IMAGE_BYTES} bytes"),
    (f"/hop/{MAX_REDIRECTS + 1}", "image_url_failed", f"more than {MAX_REDIRECTS} redirects"),
    ("/slow", "image_url_timeout", f"longer than {FETCH_TIMEOUT:g} s"),
])
def test_each_failure_is_a_400_naming_the_part_and_the_server_keeps_serving(
        fetching: Server, site: ImageSite, path: str, code: str, fragment: str) -> None:
    r = post(fetching, image_messages(RED, site.url + path))
    assert_envelope(r, 400, code, "messages[0].content[2]")
    assert fragment in r.json()["error"]["message"]
    assert site.hits[path] == 1
    still_serving(fetching)


def test_a_closed_port_and_too_many_urls_are_400s(fetching: Server, site: ImageSite) -> None:
    r = post(fetching, image_messages("http://127.0.0.1:1/red.png"))
    assert_envelope(r, 400, "image_url_failed", "messages[0].content[1]")
    before = sum(site.hits.values())
    r = post(fetching, image_messages(*[site.url + "/red.png"] * (MAX_IMAGES + 1)))
    assert_envelope(r, 400, "too_many_images", f"messages[0].content[{MAX_IMAGES + 1}]")
    assert sum(site.hits.values()) == before  # refused before any fetch
    still_serving(fetching)


def test_without_the_escape_hatch_no_request_goes_to_a_private_address(public_only: Server, site: ImageSite) -> None:
    before = sum(site.hits.values())
    port = site.server_address[1]
    for url in (f"{site.url}/red.png", f"http://localhost:{port}/red.png", f"http://[::1]:{port}/red.png",
                "http://10.1.2.3/red.png", "http://169.254.169.254/latest/meta-data/"):
        r = post(public_only, image_messages(url))
        assert_envelope(r, 400, "image_url_blocked", "messages[0].content[1]")
        assert "not a public address" in r.json()["error"]["message"]
    assert sum(site.hits.values()) == before
    still_serving(public_only)


def test_anthropic_url_sources_are_fetched_as_chat_image_urls_are(fetching: Server, site: ImageSite) -> None:
    import base64

    import anthropic

    client = anthropic.Anthropic(base_url=fetching.base_url, api_key="unused", max_retries=0, timeout=120)

    def ask(source: dict) -> str:
        reply = client.messages.create(model="m", max_tokens=6, extra_body={"temperature": 0}, messages=[
            {"role": "user", "content": [{"type": "text", "text": "Describe the picture."},
                                         {"type": "image", "source": source}]}])
        return reply.content[0].text

    inline = ask({"type": "base64", "media_type": "image/png", "data": base64.b64encode(RED).decode()})
    assert ask({"type": "url", "url": site.url + "/red.png"}) == inline
    r = httpx.post(fetching.base_url + "/v1/messages", timeout=60, json={
        "model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": site.url + "/missing"}}]}]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["message"].startswith("messages.0.content.0")
