"""Fetching image URLs (``--allow-image-urls``): the sans-IO rules of :mod:`skippy.engine.chat.image_urls`
(which addresses may be fetched, which parts, redirects, replies) and :class:`skippy.actors.image_urls.ImageFetcher`
over ``httpx.MockTransport`` with a resolver of its own: no network, so a "public" host here is one the test
resolver gives a public address, and the mock transport answers whatever the fetcher sends. The real
server fetching over loopback is tests/integration/test_image_urls.py.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
import trio

from skippy.actors.image_urls import ImageFetcher, image_client, resolve
from skippy.engine.chat.image_urls import (
    MAX_REDIRECTS,
    address_allowed,
    check_addresses,
    check_reply,
    redirect_location,
    url_parts,
    with_data_urls,
)
from skippy.engine.chat.images import MAX_IMAGE_BYTES, MAX_IMAGES, decode_data_url
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ContentPart, Message
from tests.images import png_bytes, solid

PNG = png_bytes(4, 4, solid((255, 0, 0)))


@pytest.mark.parametrize("address", [
    "8.8.8.8", "93.184.216.34", "1.1.1.1", "2001:4860:4860::8888", "::ffff:8.8.8.8", "2002:808:808::1",
    "64:ff9b::808:808"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_allowed(address)


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.9.9.9", "10.0.0.1", "172.16.5.4", "192.168.1.1",  # loopback, RFC 1918
    "169.254.169.254", "100.64.0.1", "0.0.0.0", "255.255.255.255",  # link-local (metadata), shared, unspecified
    "192.0.0.1", "198.18.0.1", "192.0.2.1", "240.0.0.1",  # IETF, benchmarking, documentation, reserved
    "224.0.1.1", "239.1.1.1",  # multicast
    "::1", "::", "fe80::1", "fe80::1%eth0", "fc00::1", "fd00:ec2::254", "2001:db8::1", "ff0e::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",  # IPv4-mapped
    "2002:7f00:1::1", "2002:a00:1::1",  # 6to4 of 127.0.0.1 and 10.0.0.1
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",  # NAT64 of 127.0.0.1 and 169.254.169.254
    "localhost", "not an address", ""])
def test_private_loopback_link_local_and_other_non_global_addresses_are_refused(address: str) -> None:
    assert not address_allowed(address)


def test_the_escape_hatch_allows_any_address_but_not_a_name() -> None:
    for address in ("127.0.0.1", "::1", "10.0.0.1", "169.254.169.254", "8.8.8.8"):
        assert address_allowed(address, allow_private=True)
    assert not address_allowed("localhost", allow_private=True)


def test_every_resolved_address_must_be_public() -> None:
    assert check_addresses("example.com", ["93.184.216.34", "93.184.216.34", "2606:2800::1"], "w") == \
        ["93.184.216.34", "2606:2800::1"]
    with pytest.raises(InvalidRequest) as info:  # one private address among public ones: refused
        check_addresses("rebind.example", ["93.184.216.34", "127.0.0.1"], "messages[0].content[1]")
    err = info.value
    assert (err.code, err.param) == ("image_url_blocked", "messages[0].content[1]")
    assert "rebind.example resolves to 127.0.0.1" in str(err) and "not a public address" in str(err)
    with pytest.raises(InvalidRequest, match=r"host 10\.0\.0\.1 is not a public address"):
        check_addresses("10.0.0.1", ["10.0.0.1"], "w")
    with pytest.raises(InvalidRequest, match="has no address") as info:
        check_addresses("nothing.example", [], "w")
    assert info.value.code == "image_url_failed"
    assert check_addresses("localhost", ["127.0.0.1", "::1"], "w", allow_private=True) == ["127.0.0.1", "::1"]


def _image(url: Any) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def test_url_parts_names_each_http_url_and_counts_every_image_before_fetching() -> None:
    messages = [{"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "t"}, _image("https://a.example/x.png"),
                                             _image("data:image/png;base64,AA=="), _image("ftp://b/x"),
                                             {"type": "image_url", "image_url": "HTTP://c.example/y"}]}]
    assert url_parts(messages) == [("messages[1].content[1]", "https://a.example/x.png"),
                                   ("messages[1].content[4]", "HTTP://c.example/y")]
    assert url_parts([{"role": "user", "content": "https://a.example/x.png"}]) == []
    many = [{"role": "user", "content": [_image(f"https://a.example/{k}.png") for k in range(MAX_IMAGES + 1)]}]
    with pytest.raises(InvalidRequest) as info:
        url_parts(many)
    assert (info.value.code, info.value.param) == ("too_many_images", f"messages[0].content[{MAX_IMAGES}]")
    assert len(url_parts([{"role": "user", "content": many[0]["content"][:MAX_IMAGES]}])) == MAX_IMAGES


def test_redirects_and_replies() -> None:
    assert redirect_location(200, "/x", 0, "w") is None
    assert redirect_location(302, "/x", MAX_REDIRECTS - 1, "w") == "/x"
    with pytest.raises(InvalidRequest, match=f"more than {MAX_REDIRECTS} redirects"):
        redirect_location(307, "/x", MAX_REDIRECTS, "w")
    with pytest.raises(InvalidRequest, match="without a Location"):
        redirect_location(301, None, 0, "w")
    assert check_reply(200, "image/png", "10", "w") == "image/png"
    assert check_reply(200, "Image/JPEG; charset=binary", None, "w") == "image/jpeg"
    assert check_reply(200, None, None, "w") == check_reply(203, "application/octet-stream", None, "w") == \
        "application/octet-stream"
    for status in (404, 500, 304):
        with pytest.raises(InvalidRequest, match=f"HTTP {status}") as info:
            check_reply(status, "image/png", None, "w")
        assert info.value.code == "image_url_failed"
    with pytest.raises(InvalidRequest, match=r"not an image \(Content-Type: text/html\)") as info:
        check_reply(200, "text/html; charset=utf-8", None, "w")
    assert info.value.code == "invalid_image"
    with pytest.raises(InvalidRequest) as info:
        check_reply(200, "image/png", str(MAX_IMAGE_BYTES + 1), "w")
    assert info.value.code == "image_too_large"


def test_with_data_urls_replaces_only_the_named_parts() -> None:
    messages = [Message("user", [ContentPart("text", "t"),
                                 ContentPart("image_url", image_url={"url": "https://a/x", "detail": "low"}),
                                 ContentPart("image_url", image_url="https://a/y")])]
    out = with_data_urls(messages, {"messages[0].content[1]": "data:image/png;base64,AA==",
                                    "messages[0].content[2]": "data:image/png;base64,AQ=="})
    assert out[0].content[1].image_url == {"url": "data:image/png;base64,AA==", "detail": "low"}
    assert out[0].content[2].image_url == {"url": "data:image/png;base64,AQ=="}
    assert messages[0].content[1].image_url["url"] == "https://a/x"  # not mutated
    assert with_data_urls(messages, {}) is messages


# -- the fetcher, over a mock transport ---------------------------------------------------------------

HOSTS = {"img.example": ["93.184.216.34"], "cdn.example": ["2606:2800:220:1::1"],
         "two.example": ["8.8.4.4", "93.184.216.35"],  # the first does not connect
         "internal.example": ["10.0.0.5"], "mixed.example": ["93.184.216.36", "192.168.0.9"],
         "down.example": ["8.8.4.4"], "localhost": ["127.0.0.1"]}


async def fake_resolve(host: str, port: int) -> list[str]:
    await trio.lowlevel.checkpoint()
    if host not in HOSTS:
        raise OSError(-2, "Name or service not known")
    return HOSTS[host]


class Site:
    """The mock transport's handler: routes by the ``Host`` header and path; records every request."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.chunks_sent = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.host == "8.8.4.4":
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/red.png":
            return httpx.Response(200, headers={"Content-Type": "image/png", "Set-Cookie": "seen=1; Path=/"},
                                  content=PNG)
        if path.startswith("/hop/"):  # /hop/N redirects N times, then the image
            n = int(path.rsplit("/", 1)[1])
            return httpx.Response(302, headers={"Location": f"/hop/{n - 1}" if n > 1 else "/red.png"})
        if path == "/to-internal":
            return httpx.Response(301, headers={"Location": "http://internal.example/red.png"})
        if path == "/to-punycode":  # a malformed punycode host: httpx reads it (IDNA) as the reply arrives
            return httpx.Response(302, headers={"Location": "http://xn--a/x.png"})
        if path == "/to-file":
            return httpx.Response(302, headers={"Location": "file:///etc/passwd"})
        if path == "/missing":
            return httpx.Response(404, text="not found")
        if path == "/page":
            return httpx.Response(200, headers={"Content-Type": "text/html"}, text="<html></html>")
        if path == "/endless":  # no Content-Length: the fetcher must stop reading
            return httpx.Response(200, headers={"Content-Type": "image/png"}, content=self._endless())
        if path == "/slow":
            await trio.sleep(60)
            return httpx.Response(200, headers={"Content-Type": "image/png"}, content=PNG)
        return httpx.Response(500)

    async def _endless(self):
        while True:
            self.chunks_sent += 1
            yield b"\x00" * 65536


@pytest.fixture
def site() -> Site:
    return Site()


@pytest.fixture
async def fetcher(site: Site):
    async with image_client(httpx.MockTransport(site)) as client:  # the server's client settings
        yield ImageFetcher(client, resolver=fake_resolve)


def _chat(*urls: str) -> list[Message]:
    return [Message("user", [ContentPart("text", "What is it?"),
                             *(ContentPart("image_url", image_url={"url": u}) for u in urls)])]


async def _refusal(fetcher: ImageFetcher, url: str) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        await fetcher.inline(_chat(url))
    assert info.value.param == "messages[0].content[1]"
    return info.value


async def test_a_url_becomes_the_data_url_of_its_bytes_fetched_from_the_checked_address(fetcher, site) -> None:
    out = await fetcher.inline(_chat("https://img.example/red.png", "http://cdn.example:8080/red.png"))
    for part in out[0].content[1:]:
        assert decode_data_url(part.image_url["url"], "w") == PNG
        assert part.image_url["url"].startswith("data:image/png;base64,")
    first, second = sorted(site.requests, key=lambda r: r.headers["host"].startswith("cdn"))  # fetched together
    # the connection goes to the address that was checked; the host is the Host header and the TLS name
    assert (first.url.host, first.headers["host"], first.extensions["sni_hostname"]) == \
        ("93.184.216.34", "img.example", "img.example")
    assert (second.url.host, second.url.port, second.headers["host"]) == ("2606:2800:220:1::1", 8080,
                                                                          "cdn.example:8080")
    assert "sni_hostname" not in second.extensions
    assert first.headers["user-agent"].startswith("skippy-trio/")
    await fetcher.inline(_chat("https://img.example/red.png"))
    assert "cookie" not in site.requests[-1].headers  # a site's cookie is not kept for the next fetch
    messages = [Message("user", "no images")]
    assert await fetcher.inline(messages) is messages


async def test_the_next_address_is_tried_when_one_does_not_connect(fetcher, site) -> None:
    out = await fetcher.inline(_chat("http://two.example/red.png"))
    assert base64.b64decode(out[0].content[1].image_url["url"].split(",", 1)[1]) == PNG
    assert [r.url.host for r in site.requests] == ["8.8.4.4", "93.184.216.35"]


@pytest.mark.parametrize("url", ["http://internal.example/red.png", "http://mixed.example/red.png",
                                 "http://localhost/red.png", "http://127.0.0.1/red.png", "http://[::1]/red.png",
                                 "http://169.254.169.254/latest/meta-data/", "http://[::ffff:10.0.0.1]/x.png"])
async def test_no_request_goes_to_a_private_address(fetcher, site, url: str) -> None:
    err = await _refusal(fetcher, url)
    assert err.code == "image_url_blocked" and "not a public address" in str(err)
    assert site.requests == []


async def test_the_escape_hatch_fetches_from_loopback(site) -> None:
    async with image_client(httpx.MockTransport(site)) as client:
        fetcher = ImageFetcher(client, resolver=fake_resolve, allow_private=True)
        out = await fetcher.inline(_chat("http://localhost:8000/red.png"))
    assert decode_data_url(out[0].content[1].image_url["url"], "w") == PNG
    assert site.requests[0].url.host == "127.0.0.1"


async def test_redirects_are_followed_three_times_each_hop_checked(fetcher, site) -> None:
    out = await fetcher.inline(_chat(f"https://img.example/hop/{MAX_REDIRECTS}"))
    assert decode_data_url(out[0].content[1].image_url["url"], "w") == PNG
    assert len(site.requests) == MAX_REDIRECTS + 1
    site.requests.clear()
    err = await _refusal(fetcher, f"https://img.example/hop/{MAX_REDIRECTS + 1}")
    assert err.code == "image_url_failed" and f"more than {MAX_REDIRECTS} redirects" in str(err)
    assert len(site.requests) == MAX_REDIRECTS + 1
    site.requests.clear()
    err = await _refusal(fetcher, "https://img.example/to-internal")  # a public host redirecting inside
    assert err.code == "image_url_blocked" and "internal.example" in str(err)
    assert [r.url.host for r in site.requests] == ["93.184.216.34"]  # nothing sent to 10.0.0.5
    err = await _refusal(fetcher, "https://img.example/to-file")
    assert err.code == "image_url_failed" and "only http and https" in str(err)


@pytest.mark.parametrize(("url", "code", "fragment"), [
    ("https://img.example/missing", "image_url_failed", "HTTP 404"),
    ("https://img.example/page", "invalid_image", "not an image"),
    ("https://nowhere.example/x.png", "image_url_failed", "does not resolve"),
    ("http://down.example/red.png", "image_url_failed", "no connection to down.example (ConnectError)"),
    ("http://img.example:99999/red.png", "image_url_failed", "not a valid URL (port 99999)"),
    ("http://[::1/red.png", "image_url_failed", "not a valid URL"),
    ("https://img.example/to-punycode", "image_url_failed", "a redirect to a host that is not a valid host name"),
])
async def test_failures_are_400s_naming_the_part(fetcher, url: str, code: str, fragment: str) -> None:
    err = await _refusal(fetcher, url)
    assert err.code == code and fragment in str(err), str(err)


@pytest.mark.parametrize("host", ["a" * 64 + ".example", "a..example", "xn--a", "xn--zz-", "xn--"])
async def test_a_host_that_is_no_host_name_is_a_400(site, host: str) -> None:
    # the real resolver: trio's getaddrinfo encodes the name with the IDNA codec first, which raises
    # UnicodeError (no OSError) for a label over 63 characters or an empty one: it was a 500
    async with image_client(httpx.MockTransport(site)) as client:
        err = await _refusal(ImageFetcher(client, resolver=resolve), f"http://{host}/x.png")
    assert err.code == "image_url_failed" and "not a valid host name" in str(err), str(err)
    assert not site.requests


async def test_reading_stops_past_the_size_limit(fetcher, site) -> None:
    err = await _refusal(fetcher, "https://img.example/endless")
    assert err.code == "image_too_large"
    assert site.chunks_sent * 65536 <= MAX_IMAGE_BYTES + 2 * 65536  # stopped at the limit, not read on


async def test_an_image_that_takes_longer_than_the_timeout_is_refused(fetcher, autojump_clock) -> None:
    t0 = trio.current_time()
    err = await _refusal(fetcher, "https://img.example/slow")
    assert err.code == "image_url_timeout" and "10 s" in str(err)
    assert trio.current_time() - t0 == pytest.approx(10.0)


async def test_the_first_refused_part_is_the_error_and_the_other_fetches_stop(fetcher, site, autojump_clock) -> None:
    t0 = trio.current_time()
    with pytest.raises(InvalidRequest) as info:
        await fetcher.inline(_chat("https://img.example/slow", "https://img.example/missing"))
    assert info.value.param == "messages[0].content[2]" and "HTTP 404" in str(info.value)
    assert trio.current_time() - t0 < 1.0  # the slow one was cancelled, not waited for
