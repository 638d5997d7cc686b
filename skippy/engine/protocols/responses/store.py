"""Stored responses (``store: true``, OpenAI's default): a bounded LRU in memory.

A follow-up request names a stored response (``previous_response_id``) and
sends only its new items; :class:`ResponseStore` keeps the last
``--responses-store-size`` responses with their whole conversation.
"""

from __future__ import annotations

from collections import OrderedDict

import attrs

from skippy.engine.errors import EngineError
from skippy.engine.protocols.responses.types import ResponseInputItem
from skippy.engine.protocols.responses.wire import ResponseObject


class ResponseNotFound(EngineError):
    """404: no stored response has this id (never stored, deleted, or evicted from the LRU store)."""

    status = 404
    type = "invalid_request_error"
    code = "response_not_found"


# -- the store --------------------------------------------------------------------------------------

@attrs.frozen
class StoredResponse:
    """A stored response and its whole conversation as input items (``items``: the previous responses'
    items, this request's input, this response's output), what a ``previous_response_id`` continues."""

    response: ResponseObject
    items: tuple[ResponseInputItem, ...]


class ResponseStore:
    """Stored responses by id, least recently used evicted past ``max_size`` (0: nothing is stored).

    Bounded where OpenAI keeps responses for 30 days: a server in memory
    keeps the last ``max_size`` (``--responses-store-size``). Items are
    shared between a response and its follow-ups (a tuple of references),
    so a long conversation is not copied per turn. Not thread-safe: one
    event loop owns it.
    """

    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self.max_size = max_size
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, stored: StoredResponse) -> None:
        """Keep ``stored`` (the most recently used), evicting the least recently used past ``max_size``."""
        if self.max_size == 0:
            return
        self._entries[stored.response.id] = stored
        self._entries.move_to_end(stored.response.id)
        while len(self._entries) > self.max_size:
            self._entries.popitem(last=False)

    def get(self, response_id: str, *, param: str | None = None) -> StoredResponse:
        """The stored response (now the most recently used); raises :class:`ResponseNotFound` (404,
        naming ``param``) when there is none."""
        stored = self._entries.get(response_id)
        if stored is None:
            raise ResponseNotFound(f"Response with id {response_id!r} not found (never stored, deleted, or "
                                   f"evicted: this server keeps the last {self.max_size}, --responses-store-size)",
                                   param=param)
        self._entries.move_to_end(response_id)
        return stored

    def delete(self, response_id: str) -> None:
        """Forget a stored response; raises :class:`ResponseNotFound` (404) when there is none."""
        if self._entries.pop(response_id, None) is None:
            raise ResponseNotFound(f"Response with id {response_id!r} not found")
