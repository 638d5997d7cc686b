"""llama-server's native ``/completion`` on the real server (issue 35): stream chunks carry their token ids,
and ``logit_bias`` takes llama-server's forms (pairs, objects, token ids, texts, ``false`` bans)."""

from __future__ import annotations

import httpx
import jsonschema
import pytest

from tests.sse import iter_sse
from tests.support import Server

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


def test_tokenize_takes_llama_servers_mixed_content_and_none(server: Server) -> None:
    """llama-server's ``/tokenize`` runs ``tokenize_mixed``: token ids pass as given between tokenized strings;
    no ``content`` is no tokens."""
    hello = post(server, "/tokenize", {"content": "Hello"}).json()["tokens"]
    assert post(server, "/tokenize", {"content": [12, "Hello", 34]}).json()["tokens"] == [12, *hello, 34]
    assert post(server, "/tokenize", {"content": ["Hello"], "add_special": True}).json() == \
        post(server, "/tokenize", {"content": "Hello", "add_special": True}).json()
    assert post(server, "/tokenize", {}).json() == {"tokens": []}
    bad = post(server, "/tokenize", {"content": ["Hello", 10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "content"


# -- logit_bias -----------------------------------------------------------------------------------

def _piece(srv: Server, token: int) -> str:
    return post(srv, "/detokenize", {"tokens": [token]}).json()["content"]


def test_logit_bias_in_llama_servers_forms_changes_the_output(server: Server) -> None:
    plain = complete(server)
    first = plain["tokens"][0]
    text = _piece(server, first)
    assert post(server, "/tokenize", {"content": text}).json()["tokens"] == [first]  # the text is that token
    banned = [[[first, False]], {str(first): False}, [[text, False]], {text: False}]
    outs = [complete(server, logit_bias=lb) for lb in banned]
    for lb, out in zip(banned, outs, strict=True):
        assert out["tokens"][0] != first, (lb, out)  # banned: never sampled
    assert len({tuple(o["tokens"]) for o in outs}) == 1  # the four forms ban the same token
    assert outs[0]["generation_settings"]["logit_bias"] == [[first, None]]  # -inf, as llama-server writes it
    doc = httpx.get(server.base_url + "/openapi.json", timeout=10).json()
    schema = doc["paths"]["/completion"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    jsonschema.validate(outs[0], {**schema, "components": doc["components"]})
    # a positive bias forces a token, by id or by text; the numbers keep llama-server's sign and size
    other = outs[0]["tokens"][0]
    for lb in ([[other, 50]], [[_piece(server, other), 50.0]], {str(other): 50}):
        assert complete(server, logit_bias=lb)["tokens"][0] == other, lb
    assert complete(server, logit_bias=[[first, -0.001]])["tokens"] == plain["tokens"]  # a nudge changes nothing


@pytest.mark.parametrize("logit_bias", [[[1, True]], [[1]], [["", 1]], {"1": "x"}, [[10 ** 9, 1]], [1, 2], "1"])
def test_a_bad_logit_bias_is_a_400_naming_it(server: Server, logit_bias: object) -> None:
    r = post(server, "/completion", {"prompt": PROMPT, "n_predict": 2, "logit_bias": logit_bias})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "logit_bias"


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_openai_routes_take_token_ids_in_every_form(server: Server, path: str) -> None:
    """llama-server's OpenAI routes take its ``false`` ban and ``[[id, bias]]`` pairs too; texts stay its native
    routes' (a text key is a 400 here, as OpenAI's)."""
    base = {"prompt": PROMPT} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "Hi"}]}
    for bad in ({"Hello": 1}, [["Hello", 1]], {"1": True}):
        r = post(server, path, {**base, "max_tokens": 2, "logit_bias": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", r.text
    for ok in ({"1": -100}, {"1": False}, [[1, False]], [[1, 5]]):
        assert post(server, path, {**base, "max_tokens": 2, "logit_bias": ok}).status_code == 200, ok


def test_probabilities_end_where_a_stop_string_cut_the_content(server: Server) -> None:
    """The tokens of a stop string are not in the content, so not in ``completion_probabilities`` nor chat's
    ``logprobs`` (llama-server trims them), streamed or not: what the probabilities cover ends within the last
    token that reached the content."""
    whole = complete(server, n_predict=12, n_probs=1)["content"]
    stop = whole[len(whole) // 2:len(whole) // 2 + 3]  # a stop string in the middle of the greedy text
    got = complete(server, n_predict=12, n_probs=1, stop=[stop])
    covered = "".join(e["token"] for e in got["completion_probabilities"])
    last = got["completion_probabilities"][-1]["token"]
    assert got["stop_type"] == "word" and covered.startswith(got["content"])
    assert len(covered) - len(got["content"]) < len(last)  # only the part of its last token the stop took
    streamed = [e["token"] for c in stream(server, {"prompt": PROMPT, "n_predict": 12, "temperature": 0,
                                                   "n_probs": 1, "stop": [stop]})
                for e in c.get("completion_probabilities", [])]
    assert "".join(streamed) == covered
    legacy = httpx.post(server.base_url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 12, "temperature": 0,
                                                                  "logprobs": 1, "stop": [stop]}, timeout=120).json()
    assert "".join(legacy["choices"][0]["logprobs"]["tokens"]) == covered
