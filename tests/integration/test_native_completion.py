"""llama-server's native ``/completion`` on the real server (issue 35): stream chunks carry their token ids."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.conftest import Server
from tests.sse import iter_sse

PROMPT = "Hello, my name is"


def post(srv: Server, path: str, body: dict) -> httpx.Response:
    return httpx.post(srv.base_url + path, json=body, timeout=120)


def complete(srv: Server, **body) -> dict:
    r = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "return_tokens": True, **body})
    assert r.status_code == 200, r.text
    return r.json()


def stream(srv: Server, body: dict) -> list[dict]:
    with httpx.stream("POST", srv.base_url + "/completion", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        return list(iter_sse(r))


# -- stream chunks carry their tokens ---------------------------------------------------------------

@pytest.mark.parametrize("return_tokens", [False, True])
def test_stream_chunks_carry_their_token_ids(server: Server, return_tokens: bool) -> None:
    """llama-server fills ``tokens`` in every stream chunk (``send_partial_response``), ``return_tokens``
    or not: the id sampled for that chunk; the final chunk has none, they were in the chunks."""
    body = {"prompt": PROMPT, "n_predict": 6, "temperature": 0, "return_tokens": return_tokens}
    whole = complete(server, n_predict=6)
    chunks = stream(server, body)
    *parts, last = chunks
    assert last["stop"] is True and last["tokens"] == [] and not any(c["stop"] for c in parts)
    assert [len(c["tokens"]) for c in parts] == [1] * 6
    assert [t for c in parts for t in c["tokens"]] == whole["tokens"] and len(whole["tokens"]) == 6
    assert "".join(c["content"] for c in chunks) == whole["content"]
    detok = post(server, "/detokenize", {"tokens": whole["tokens"]}).json()["content"]
    assert detok == whole["content"]
    # not streamed, ``tokens`` stays empty without return_tokens (llama-server's README)
    assert post(server, "/completion", {**body, "return_tokens": False}).json()["tokens"] == []
