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
  (``event: response.created``) after their payload's ``type``, with no ``[DONE]``;
- :class:`ContentStream`: a streamed chat completion read on a thread, its content pieces as they arrive
  (a test does something else meanwhile and checks the stream went on).

Raises ``httpx_sse.SSEError`` if the response is not ``text/event-stream``, and
``AssertionError`` for an event other than a plain ``data:`` message (OpenAI sends no
``event:``, ``id:`` or ``retry:`` fields on chat and text completions).
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent

__all__ = ["DONE", "ContentStream", "aiter_sse", "iter_named_sse", "iter_sse", "sse_events", "sse_events_from_bytes"]

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


class ContentStream:
    """``POST /v1/chat/completions`` with ``body`` (``stream: true``) read on a thread: :meth:`start`, then
    ``events`` gets each content piece as it arrives and :data:`DONE` last; ``first`` is set at the first
    piece; :meth:`join` waits for the end."""

    def __init__(self, base_url: str, body: dict[str, Any], timeout: float = 300) -> None:
        self.events: list[str] = []
        self.first = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(base_url, body, timeout))

    def _read(self, base_url: str, body: dict[str, Any], timeout: float) -> None:
        with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=timeout) as resp:
            for event in iter_sse(resp):
                if event == DONE:
                    self.events.append(DONE)
                elif event["choices"] and event["choices"][0]["delta"].get("content"):
                    self.events.append(event["choices"][0]["delta"]["content"])
                    self.first.set()

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float = 300) -> None:
        self._thread.join(timeout)
