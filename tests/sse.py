"""One reader of OpenAI-style server-sent events for the tests, on httpx-sse.

An OpenAI stream (chat or text completions) is a ``text/event-stream`` of ``data:``
events only: each holds one JSON chunk, and a stream that ends normally ends with the
event ``data: [DONE]``; one that fails ends with an error chunk (``{"error": {...}}``)
and no ``[DONE]``. Every reader here yields the events' payloads: the parsed JSON
(a dict), or the string :data:`DONE`.

- :func:`sse_events`: all the events of a response (streamed or already read);
- :func:`iter_sse` / :func:`aiter_sse`: the events as they arrive (break to stop reading);
- :func:`sse_events_from_bytes`: the events in raw response-body bytes (a raw socket client);
- :func:`iter_named_sse`: the OpenAI Responses stream, whose events are named
  (``event: response.created``) after their payload's ``type``, with no ``[DONE]``.

Raises ``httpx_sse.SSEError`` if the response is not ``text/event-stream``, and
``AssertionError`` for an event other than a plain ``data:`` message (OpenAI sends no
``event:``, ``id:`` or ``retry:`` fields on chat and text completions).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent

__all__ = ["DONE", "aiter_sse", "iter_named_sse", "iter_sse", "sse_events", "sse_events_from_bytes"]

DONE = "[DONE]"


def _payload(sse: ServerSentEvent) -> Any:
    assert sse.event == "message" and not sse.id and sse.retry is None, sse  # data-only framing
    return sse.data if sse.data == DONE else json.loads(sse.data)


def iter_sse(resp: httpx.Response) -> Iterator[Any]:
    """The payloads of ``resp``'s events, read as they arrive (``httpx.stream`` / ``client.stream``)."""
    for sse in EventSource(resp).iter_sse():
        yield _payload(sse)


def iter_named_sse(resp: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON payloads of a Responses stream as they arrive; asserts each event's name is its ``type``."""
    for sse in EventSource(resp).iter_sse():
        assert not sse.id and sse.retry is None, sse
        payload = json.loads(sse.data)
        assert sse.event == payload.get("type"), sse
        yield payload


async def aiter_sse(resp: httpx.Response) -> AsyncIterator[Any]:
    """:func:`iter_sse` for an ``httpx.AsyncClient`` streamed response."""
    async for sse in EventSource(resp).aiter_sse():
        yield _payload(sse)


def sse_events(resp: httpx.Response) -> list[Any]:
    """All the payloads of ``resp``'s events, in order."""
    return list(iter_sse(resp))


def sse_events_from_bytes(body: bytes) -> list[Any]:
    """The payloads of the events in a raw ``text/event-stream`` response body."""
    return sse_events(httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body))
