"""Fetching chat ``image_url`` parts' ``http(s)`` URLs (``skippy serve --allow-image-urls``), as vLLM and
llama-server do: :class:`ImageFetcher` turns each into a base64 ``data:`` URL before the template renders the
messages, so the checks and limits of inline images apply (:mod:`skippy.engine.chat.images`).

The rules are the sans-IO :mod:`skippy.engine.chat.image_urls`'s; here is the I/O, over one
``httpx.AsyncClient`` per engine (:func:`build_image_fetcher`; :func:`~skippy.actors.wiring.open_engine`
closes it):

- the host is resolved first (trio's ``getaddrinfo``) and every address checked: only public addresses,
  unless ``--allow-private-image-urls``; the request then goes to a checked address (the URL's host as
  ``Host`` and TLS server name, so certificates are verified against the host), never to one the host
  resolves to later (DNS rebinding), and connections are not kept for another request;
- redirects are followed here, at most :data:`~skippy.engine.chat.image_urls.MAX_REDIRECTS`, each
  hop's host resolved and checked as the first one's;
- the body is streamed and reading stops past :data:`~skippy.engine.chat.images.MAX_IMAGE_BYTES`;
- one image takes at most :data:`~skippy.engine.chat.image_urls.FETCH_TIMEOUT` seconds, all included;
  the images of a request are fetched concurrently, and the first refusal (in part order) cancels the rest.

Proxies from the environment are not used (``trust_env=False``): the connection must go where the check
said. Every failure is a 400 :class:`~skippy.engine.errors.InvalidRequest` naming the part.
"""

from __future__ import annotations

import http.cookiejar
import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import trio

from skippy import __version__
from skippy.engine.chat.image_urls import (
    FETCH_TIMEOUT,
    check_addresses,
    check_reply,
    check_scheme,
    check_size,
    data_url,
    fetch_failed,
    redirect_location,
    timed_out,
    url_parts,
    with_data_urls,
)
from skippy.engine.config import EngineConfig
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import Message, message_dicts

log = logging.getLogger("skippy.images")

#: ``(host, port) -> addresses``: how a host is resolved (:func:`resolve`; tests give their own)
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` for a TCP connection to ``port``, in the resolver's order (trio's
    ``getaddrinfo``). Raises ``OSError`` (``socket.gaierror``) when it does not resolve, ``UnicodeError`` when
    ``host`` is no host name (the IDNA codec refuses a label over 63 characters or an empty one)."""
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class ImageFetcher:
    """Fetches the ``http(s)`` image URLs of chat messages into data URLs (see the module docstring).

    ``client``: the HTTP client (no keep-alive: see :func:`build_image_fetcher`); ``allow_private``:
    ``--allow-private-image-urls`` (any address may be fetched: unsafe, for tests and trusted networks);
    ``timeout``: seconds per image; ``resolver``: :func:`resolve` unless a test gives another."""

    def __init__(self, client: httpx.AsyncClient, *, allow_private: bool = False, timeout: float = FETCH_TIMEOUT,
                 resolver: Resolver = resolve) -> None:
        self.client = client
        self.allow_private = allow_private
        self.timeout = timeout
        self.resolver = resolver

    async def inline(self, messages: list[Message]) -> list[Message]:
        """``messages`` with every ``http(s)`` image URL replaced by a data URL of its bytes (``messages``
        itself when there is none; not mutated). Raises :class:`InvalidRequest` (400 naming the part):
        ``too_many_images`` before any fetch, else the first failed part's refusal."""
        parts = url_parts(message_dicts(messages))
        if not parts:
            return messages
        fetched: dict[str, str] = {}
        errors: dict[int, InvalidRequest] = {}

        async def one(k: int, where: str, url: str, scope: trio.CancelScope) -> None:
            try:
                fetched[where] = await self.fetch(url, where)
            except InvalidRequest as exc:
                errors[k] = exc
                scope.cancel()  # the request fails: the other images are not needed

        async with trio.open_nursery() as nursery:
            for k, (where, url) in enumerate(parts):
                nursery.start_soon(one, k, where, url, nursery.cancel_scope)
        if errors:
            raise errors[min(errors)]
        return with_data_urls(messages, fetched)

    async def fetch(self, url: str, where: str) -> str:
        """The data URL of the image at ``url`` (``where``: the part, for errors), within :attr:`timeout`.
        Raises :class:`InvalidRequest` (400 naming ``where``)."""
        t0 = trio.current_time()
        try:
            with trio.move_on_after(self.timeout):
                result, host, n_bytes = await self._fetch(url, where)
                log.info("image URL %s: %d bytes from %s in %.0f ms", where, n_bytes, host,
                         (trio.current_time() - t0) * 1000.0)
                return result
            raise timed_out(where, self.timeout)
        except InvalidRequest as exc:
            log.info("image URL %s: refused after %.0f ms (%s)", where, (trio.current_time() - t0) * 1000.0,
                     exc.code)
            raise

    async def _fetch(self, url: str, where: str) -> tuple[str, str, int]:
        try:
            target = httpx.URL(url)
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise fetch_failed(where, f"not a valid URL ({exc})") from None
        hops = 0
        while True:
            check_scheme(target.scheme, where)
            try:
                host = target.host  # its IDNA decoding: a malformed punycode label (xn--a) raises here
            except UnicodeError:
                raise fetch_failed(where, "the URL's host is not a valid host name") from None
            if not host:
                raise fetch_failed(where, "the URL has no host")
            if target.port is not None and not 0 < target.port < 65536:
                raise fetch_failed(where, f"not a valid URL (port {target.port})")
            addresses = await self._addresses(target, where)
            try:
                async with self._request(target, addresses, where) as response:
                    location = redirect_location(response.status_code, response.headers.get("location"), hops,
                                                 where)
                    if location is None:
                        mime = check_reply(response.status_code, response.headers.get("content-type"),
                                           response.headers.get("content-length"), where)
                        body = bytearray()
                        async for chunk in response.aiter_bytes():
                            body += chunk
                            check_size(len(body), where)  # stop reading past the limit
                        return data_url(mime, bytes(body)), target.host, len(body)
            except httpx.HTTPError as exc:
                raise fetch_failed(where, f"{type(exc).__name__} from {target.host}") from None
            try:
                target = target.join(location)
            except (httpx.InvalidURL, ValueError, TypeError) as exc:
                raise fetch_failed(where, f"a redirect to an invalid URL ({exc})") from None
            hops += 1

    async def _addresses(self, target: httpx.URL, where: str) -> list[str]:
        """The checked addresses of ``target``'s host (see :func:`~skippy.engine.chat.image_urls.check_addresses`)."""
        host = target.raw_host.decode("ascii")
        port = target.port or (443 if target.scheme == "https" else 80)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:  # an address in the URL: nothing to resolve
            return check_addresses(target.host, [host], where, allow_private=self.allow_private)
        try:
            found = await self.resolver(host, port)
        except OSError as exc:
            raise fetch_failed(where, f"the host {target.host} does not resolve ({exc.strerror or exc})") from None
        except UnicodeError:  # the IDNA codec's: a label over 63 characters, an empty one (a..b)
            raise fetch_failed(where, f"the host {target.host} is not a valid host name") from None
        return check_addresses(target.host, found, where, allow_private=self.allow_private)

    @asynccontextmanager
    async def _request(self, target: httpx.URL, addresses: list[str], where: str) -> AsyncIterator[httpx.Response]:
        """``GET target`` sent to the first of ``addresses`` that accepts a connection, the reply's body unread;
        ``target``'s host goes in ``Host`` and, for https, is the TLS server name (certificate checked
        against it). Raises :class:`InvalidRequest` (``image_url_failed``) when none connects."""
        headers = {"Host": target.netloc.decode("ascii")}
        extensions = {"sni_hostname": target.raw_host.decode("ascii")} if target.scheme == "https" else {}
        failure: Exception | None = None
        for address in addresses:
            request = self.client.build_request("GET", target.copy_with(host=address), headers=headers,
                                                extensions=extensions)
            try:
                response = await self.client.send(request, stream=True, follow_redirects=False)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure = exc
                continue
            except UnicodeError:  # httpx reads a redirect's host (IDNA) as it answers: a malformed one (xn--a)
                raise fetch_failed(where, "a redirect to a host that is not a valid host name") from None
            try:
                yield response
            finally:
                await response.aclose()
            return
        raise fetch_failed(where, f"no connection to {target.host} ({type(failure).__name__})")


def image_client(transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """The HTTP client of image fetches (``transport``: httpx's own unless a test gives one): no proxies from
    the environment, no redirects (the fetcher follows them), no keep-alive (a request goes to an IP address
    with the host in ``Host``, and a connection kept for one host must not serve another at the same
    address), no cookies (one client's fetch must not carry what another's site set)."""
    no_cookies = http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return httpx.AsyncClient(transport=transport, timeout=FETCH_TIMEOUT, trust_env=False, follow_redirects=False,
                             limits=httpx.Limits(max_keepalive_connections=0), cookies=no_cookies,
                             headers={"User-Agent": f"skippy-trio/{__version__} (image_url fetch)"})


def build_image_fetcher(config: EngineConfig) -> tuple[ImageFetcher, httpx.AsyncClient]:
    """The :class:`ImageFetcher` of ``config`` (``allow_image_urls``, ``allow_private_image_urls``) and its
    HTTP client (:func:`image_client`; the caller closes it)."""
    client = image_client()
    return ImageFetcher(client, allow_private=config.allow_private_image_urls), client
