"""Fetching ``http(s)`` image URLs (``skippy serve --allow-image-urls``): the decisions, without I/O.

With ``--allow-image-urls`` the actors layer (:mod:`skippy.actors.image_urls`) fetches each ``http(s)``
``url`` of a chat message's ``image_url`` part before the template renders the messages, and the part
then holds the bytes as a base64 ``data:`` URL, so every check and limit of
:mod:`skippy.engine.chat.images` applies to it as to an inline image (vLLM and llama-server fetch such
URLs too). This module decides; the actor resolves, connects and reads:

- which parts to fetch (:func:`url_parts`): at most :data:`~skippy.engine.chat.images.MAX_IMAGES` image
  parts in a request, counted before anything is fetched;
- where a request may go (:func:`address_allowed`, :func:`check_addresses`): every address the host
  resolves to must be globally reachable (``ipaddress``'s ``is_global``, not multicast; an IPv4 address
  inside an IPv6 one, mapped, 6to4 or NAT64, counts as that IPv4 address), unless the operator's
  ``--allow-private-image-urls`` allows any address; the connection then goes to a checked address;
- which redirects to follow (:func:`redirect_location`): at most :data:`MAX_REDIRECTS`, each to an
  ``http(s)`` URL whose host is checked again;
- which replies are images within the limits (:func:`check_reply`, :func:`check_size`): a success status,
  a ``Content-Type`` that may be an image, at most :data:`~skippy.engine.chat.images.MAX_IMAGE_BYTES`;
- the ``data:`` URL of the bytes (:func:`data_url`) and the messages holding them (:func:`with_data_urls`).

Every refusal is an :class:`~skippy.engine.errors.InvalidRequest` (400) naming the part
(``messages[i].content[j]``) with a code: ``image_url_blocked`` (an address that is not public),
``image_url_timeout`` (past :data:`FETCH_TIMEOUT`), ``image_url_failed`` (DNS, connection, HTTP status,
redirects), ``image_too_large`` and ``invalid_image`` (a reply that is no image).
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable
from typing import Any

import msgspec

from skippy.engine.chat.images import IMAGE_PART_TYPES, MAX_IMAGE_BYTES, MAX_IMAGES, part_url
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ContentPart, Message

#: Seconds one image may take, all of it: resolving, connecting, redirects, reading the body.
FETCH_TIMEOUT = 10.0
#: Most redirects followed for one image (each hop's host is checked as the first one's).
MAX_REDIRECTS = 3
#: The statuses whose ``Location`` is followed (RFC 9110 section 15.4).
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: ``Content-Type`` values taken for possible images besides ``image/*`` (generic binary; libmtmd decides).
BINARY_TYPES = frozenset({"application/octet-stream", "binary/octet-stream"})

_NAT64 = ipaddress.ip_network("64:ff9b::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def is_http_url(url: Any) -> bool:
    """``url`` is a string starting with ``http://`` or ``https://`` (any case)."""
    return isinstance(url, str) and url[:8].lower().startswith(("http://", "https://"))


def url_parts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(where, url)`` of every image part whose ``url`` is ``http(s)``, in message order; ``where`` names
    the part (``messages[i].content[j]``). Raises :class:`InvalidRequest` (400 ``too_many_images``, naming
    the first part past the limit) when the messages hold more than :data:`MAX_IMAGES` image parts, so a
    request never makes more fetches than it may send images."""
    found: list[tuple[str, str]] = []
    count = 0
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES):
                continue
            where = f"messages[{i}].content[{j}]"
            count += 1
            if count > MAX_IMAGES:
                raise InvalidRequest(f"{where}: more than {MAX_IMAGES} images in one request", param=where,
                                     code="too_many_images")
            url = part_url(part)
            if is_http_url(url):
                found.append((where, url))
    return found


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries: IPv4-mapped (``::ffff:a.b.c.d``), 6to4 (``2002::/16``) or
    NAT64's well-known prefix (``64:ff9b::/96``); else ``None``."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_allowed(address: str | Address, *, allow_private: bool = False) -> bool:
    """May an image be fetched from ``address`` (an IP address, a string such as ``"10.0.0.1"`` or
    ``"fe80::1%eth0"``)? Only a globally reachable unicast address (``ipaddress``'s ``is_global``, not
    multicast): no private (RFC 1918, unique local), loopback, link-local (cloud metadata services at
    169.254.169.254), shared (100.64.0.0/10), unspecified or reserved address; an IPv4 address inside an
    IPv6 one is checked as itself. ``allow_private`` (``--allow-private-image-urls``) allows any address.
    A string that is no IP address is not allowed."""
    if isinstance(address, str):
        try:
            ip: Address = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
    else:
        ip = address
    if allow_private:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None and not address_allowed(inner):
            return False
    return ip.is_global and not ip.is_multicast


def check_addresses(host: str, addresses: Iterable[str], where: str, *, allow_private: bool = False) -> list[str]:
    """The addresses ``host`` resolved to, deduplicated in order, when every one is allowed
    (:func:`address_allowed`): a host with one private address among public ones is refused too, since
    the connection could go to any of them. Raises :class:`InvalidRequest` (400 ``image_url_blocked``
    naming ``where``; 400 ``image_url_failed`` when there is no address)."""
    found = list(dict.fromkeys(addresses))
    if not found:
        raise InvalidRequest(f"{where}: the image URL's host {host} has no address", param=where,
                             code="image_url_failed")
    for address in found:
        if not address_allowed(address, allow_private=allow_private):
            shown = "" if address == host.strip("[]") else f" resolves to {address}, which"
            raise InvalidRequest(f"{where}: the image URL's host {host}{shown} is not a public address "
                                 "(private, loopback, link-local and other non-global addresses are not fetched)",
                                 param=where, code="image_url_blocked")
    return found


def fetch_failed(where: str, why: str) -> InvalidRequest:
    """The 400 (``image_url_failed``) of an image URL that could not be fetched, saying ``why``."""
    return InvalidRequest(f"{where}: the image URL could not be fetched: {why}", param=where, code="image_url_failed")


def timed_out(where: str, seconds: float = FETCH_TIMEOUT) -> InvalidRequest:
    """The 400 (``image_url_timeout``) of an image URL that took longer than ``seconds``."""
    return InvalidRequest(f"{where}: fetching the image URL took longer than {seconds:g} s", param=where,
                          code="image_url_timeout")


def too_large(where: str) -> InvalidRequest:
    """The 400 (``image_too_large``) of a reply past :data:`MAX_IMAGE_BYTES`, as a data URL's."""
    return InvalidRequest(f"{where}: the image is larger than {MAX_IMAGE_BYTES} bytes", param=where,
                          code="image_too_large")


def check_scheme(scheme: str, where: str) -> None:
    """Raise :class:`InvalidRequest` (400 ``image_url_failed``) for a URL (a redirect's) that is no
    ``http(s)`` URL."""
    if scheme.lower() not in ("http", "https"):
        raise fetch_failed(where, f"a redirect to a {scheme or 'relative'}: URL (only http and https are fetched)")


def redirect_location(status: int, location: str | None, hops: int, where: str) -> str | None:
    """The ``Location`` to follow after a reply with ``status`` when it is a redirect (``None`` otherwise);
    ``hops``: the redirects followed so far. Raises :class:`InvalidRequest` (400 ``image_url_failed``) past
    :data:`MAX_REDIRECTS` and for a redirect without a ``Location``."""
    if status not in REDIRECT_STATUSES:
        return None
    if not location:
        raise fetch_failed(where, f"HTTP {status} without a Location")
    if hops >= MAX_REDIRECTS:
        raise fetch_failed(where, f"more than {MAX_REDIRECTS} redirects")
    return location


def check_reply(status: int, content_type: str | None, content_length: str | None, where: str) -> str:
    """The media type of a final reply, when it may be an image within the limits: a 2xx ``status``, a
    ``Content-Type`` that is ``image/*``, generic binary or absent (``application/octet-stream`` then), a
    ``Content-Length``, when given, of at most :data:`MAX_IMAGE_BYTES`. Raises :class:`InvalidRequest`
    (400: ``image_url_failed`` naming the status, ``invalid_image`` naming the type, ``image_too_large``)."""
    if not 200 <= status < 300:
        raise fetch_failed(where, f"HTTP {status}")
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime and not mime.startswith("image/") and mime not in BINARY_TYPES:
        raise InvalidRequest(f"{where}: the image URL's content is not an image (Content-Type: {mime})",
                             param=where, code="invalid_image")
    if content_length is not None and content_length.strip().isdigit() and int(content_length) > MAX_IMAGE_BYTES:
        raise too_large(where)
    return mime if mime.startswith("image/") else "application/octet-stream"


def check_size(n_bytes: int, where: str) -> None:
    """Raise :class:`InvalidRequest` (400 ``image_too_large``) once a body read so far has more than
    :data:`MAX_IMAGE_BYTES` bytes (the reader stops there)."""
    if n_bytes > MAX_IMAGE_BYTES:
        raise too_large(where)


def data_url(mime: str, data: bytes) -> str:
    """``data:<mime>;base64,...`` of ``data``."""
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def with_data_urls(messages: list[Message], urls: dict[str, str]) -> list[Message]:
    """``messages`` with the ``url`` of each image part named in ``urls`` (``where`` -> data URL) replaced,
    the part's other fields (``detail``) kept; not mutated (``msgspec.structs.replace``)."""
    if not urls:
        return messages
    out = list(messages)
    for i, message in enumerate(messages):
        if not isinstance(message.content, list):
            continue
        parts: list[ContentPart] = list(message.content)
        changed = False
        for j, part in enumerate(parts):
            url = urls.get(f"messages[{i}].content[{j}]")
            if url is None:
                continue
            image = part.image_url
            parts[j] = msgspec.structs.replace(part, image_url={**image, "url": url} if isinstance(image, dict)
                                               else {"url": url})
            changed = True
        if changed:
            out[i] = msgspec.structs.replace(message, content=parts)
    return out
