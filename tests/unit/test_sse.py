"""tests/sse.py, the tests' one SSE reader: OpenAI's data-only framing, JSON payloads, [DONE]."""

from __future__ import annotations

import httpx
import pytest
from httpx_sse import SSEError

from tests.sse import DONE, sse_events, sse_events_from_bytes

STREAM = b'data: {"choices": [{"delta": {"content": "a\\nb"}}]}\n\ndata: {"choices": []}\n\ndata: [DONE]\n\n'


def test_payloads_are_parsed_json_and_done():
    events = sse_events_from_bytes(STREAM)
    assert events == [{"choices": [{"delta": {"content": "a\nb"}}]}, {"choices": []}, DONE]


def test_a_stream_cut_after_an_error_event_has_no_done():
    events = sse_events_from_bytes(b'data: {"choices": []}\n\ndata: {"error": {"code": "request_timeout"}}\n\n')
    assert events[-1]["error"]["code"] == "request_timeout" and DONE not in events


@pytest.mark.parametrize("body", [b"event: error\ndata: {}\n\n", b"id: 7\ndata: {}\n\n", b"retry: 10\ndata: {}\n\n"])
def test_fields_other_than_data_are_refused(body):
    with pytest.raises(AssertionError):
        sse_events_from_bytes(body)


def test_a_response_that_is_not_an_event_stream_is_refused():
    with pytest.raises(SSEError):
        sse_events(httpx.Response(200, headers={"content-type": "application/json"}, content=b"{}"))
