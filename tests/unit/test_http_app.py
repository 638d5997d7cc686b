"""The HTTP app without a model (the engine still loading): route table, per-request context, auth, CORS.

What needs a generation (streams, deadlines, 429) is tested against the real server in
tests/integration/; here every route answers from the app alone.
"""

from __future__ import annotations

import logging
import math
import re

import msgspec
import pytest
import trio
from quart import request

from skippy.http.app import AppState, create_app
from skippy.http.context import SkippyRequest, current, shared
from skippy.http.logs import log_request
from skippy.http.openapi import openapi_document
from skippy.http.routes import PUBLIC_PATHS, ROUTES
from skippy.http.routes.base import completion_tokens as _completion_tokens
from skippy.http.settings import ServerSettings

ORIGIN = "https://app.example"
KEY = "sk-test-key"
PREFLIGHT = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
BODY = b'{"messages": [{"role": "user", "content": "x"}]}'
#: the response headers a browser may read (a header left out is hidden from fetch(): X-Should-Retry, the clamp)
EXPOSED = ("Retry-After, WWW-Authenticate, X-Request-Id, X-Should-Retry, X-Skippy-Ignored-Fields, "
           "X-Skippy-Max-Tokens-Clamped")


def client(**settings):
    return create_app(AppState(), ServerSettings(**settings)).test_client()


# -- the route table --------------------------------------------------------------------------------

def test_the_table_registers_every_route_and_nothing_else() -> None:
    app = create_app(AppState())
    registered = {(rule.rule, method) for rule in app.url_map.iter_rules() if rule.endpoint.startswith("skippy.")
                  for method in rule.methods - {"HEAD", "OPTIONS"}}
    assert registered == {(path, route.method) for route in ROUTES for path in route.paths}
    assert {"/v1/chat/completions", "/chat/completions", "/v1/models", "/health", "/metrics"} <= \
        {path for path, _ in registered}


def test_openapi_paths_are_the_documented_routes_of_the_table() -> None:
    doc = openapi_document(auth=True)
    documented = [r for r in ROUTES if r.documented]
    assert set(doc["paths"]) == {r.openapi_path for r in documented}
    assert doc["paths"]["/v1/models/{model_id}"]["get"]["parameters"][0]["name"] == "model_id"
    for route in documented:
        op = doc["paths"][route.openapi_path][route.method.lower()]
        assert op["summary"] == route.summary
        assert ("requestBody" in op) == (route.body is not None)
        assert ("text/event-stream" in op["responses"]["200"]["content"]) == (route.sse is not None)
        assert (op.get("security") == []) == (not route.secured)
    assert "/chat/completions" not in doc["paths"] and "/openapi.json" not in doc["paths"]
    assert doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"] == {"text/plain": {"schema": {"type":
                                                                                                       "string"}}}
    assert PUBLIC_PATHS == {"/health", "/api/version"}  # /api/version: Ollama's clients probe it without a key


async def test_openapi_json_is_served_from_the_table() -> None:
    resp = await client(api_keys=(KEY,)).get("/openapi.json", headers={"Authorization": f"Bearer {KEY}"})
    assert resp.status_code == 200
    assert msgspec.json.decode(await resp.get_data()) == openapi_document(auth=True)


# -- /health while a model loads --------------------------------------------------------------------

def _pool_app(*names: str):
    """A :class:`~skippy.actors.pool.ModelPool` of ``names`` (not running: its residency is driven by hand) whose
    default model's first load has ended, and a test client of the app over it."""
    from skippy.actors.pool import ModelPool, PoolModel
    from skippy.engine.config import EngineConfig

    state = AppState()
    state.pool = ModelPool([PoolModel.of(EngineConfig(model=f"/nonexistent/{n}.gguf")) for n in names])
    state.pool.ready.set()
    return state.pool, create_app(state).test_client()


async def test_health_names_the_models_loading_without_failing_a_server_of_several() -> None:
    """Several models: /health stays 200 while one loads (llama-server's router mode keeps its /health as it is),
    and says which load (``models_loading``; /metrics ``skippy:model_loading``). It said nothing of them."""
    pool, c = _pool_app("a", "b")
    idle = await c.get("/health")
    assert idle.status_code == 200 and (await idle.get_json())["models_loading"] == []
    pool.residency.begin_load("b")  # a request waits for b: for room under --max-loaded, then for its weights
    loading = await c.get("/health")
    assert loading.status_code == 200 and (await loading.get_json())["models_loading"] == ["b"]
    metrics = pool.metrics.render().decode()
    assert 'skippy:model_loading{model="b"} 1.0' in metrics and 'skippy:model_loading{model="a"} 0.0' in metrics


async def test_health_is_503_while_a_lone_model_loads_again() -> None:
    """One model, unloaded by --keep-alive and loaded again by a request: 503 ``Loading model``, as at start and as
    llama-server answers while its one model loads (it was 200 with no slots)."""
    pool, c = _pool_app("a")
    idle = await c.get("/health")  # unloaded: it loads on the next request
    assert idle.status_code == 200 and "models_loading" not in await idle.get_json()
    pool.residency.begin_load("a")
    loading = await c.get("/health")
    assert loading.status_code == 503
    assert (await loading.get_json())["error"] == {"message": "Loading model", "type": "unavailable_error",
                                                   "param": None, "code": "model_loading"}


# -- authentication and the public route ------------------------------------------------------------

async def test_keys_guard_every_route_but_health() -> None:
    c = client(api_keys=(KEY,))
    health = await c.get("/health")  # no key needed: 503 while loading, not 401
    assert health.status_code == 503 and (await health.get_json())["error"]["code"] == "model_loading"
    assert (await c.post("/health")).status_code == 405
    for method, path in (("GET", "/v1/models"), ("POST", "/chat/completions"), ("GET", "/nope")):
        resp = await c.open(path, method=method)
        assert resp.status_code == 401, path
        assert resp.headers["WWW-Authenticate"] == 'Bearer realm="skippy"'
        assert (await resp.get_json())["error"]["code"] == "invalid_api_key"
    wrong = await c.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})
    assert (await wrong.get_json())["error"]["message"] == "Incorrect API key provided."
    loading = await c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert loading.status_code == 503 and loading.headers["Retry-After"] == "1"


async def test_draining_answers_503_except_the_preflight() -> None:
    state = AppState()
    state.lifecycle.drain()
    c = create_app(state, ServerSettings(cors_origins=(ORIGIN,))).test_client()
    resp = await c.get("/v1/models")
    assert resp.status_code == 503 and (await resp.get_json())["error"]["code"] == "server_shutting_down"
    assert resp.headers["Retry-After"] == "1"
    assert (await c.options("/v1/models", headers=PREFLIGHT)).status_code == 200


# -- the per-request context ------------------------------------------------------------------------

@pytest.mark.parametrize("timeout", [600.0, 0.0])
async def test_each_request_has_its_own_context_with_the_deadline(timeout: float) -> None:
    app = create_app(AppState(), ServerSettings(request_timeout=timeout))
    async with app.test_request_context("/v1/models"):
        assert isinstance(request._get_current_object(), SkippyRequest)
        ctx = current()
        assert ctx.deadline == math.inf and ctx.tokens == 0 and not ctx.body_read
        assert shared().settings.request_timeout == timeout
        before = trio.current_time()
        await app.preprocess_request()
        if timeout:
            assert before + timeout <= ctx.deadline <= trio.current_time() + timeout
        else:
            assert ctx.deadline == math.inf
        async with app.test_request_context("/health"):
            assert current() is not ctx
        assert current() is ctx


async def test_x_api_key_is_accepted_like_a_bearer_token() -> None:
    c = client(api_keys=(KEY,))
    for headers in ({"X-Api-Key": KEY}, {"X-Api-Key": f"Bearer {KEY}"}, {"Authorization": f"Bearer {KEY}"}):
        assert (await c.get("/v1/models", headers=headers)).status_code == 503, headers  # past auth: loading
    for headers in ({"X-Api-Key": "wrong"}, {"X-Api-Key": ""}, {"X-Api-Key": KEY[:-1]}):
        assert (await c.get("/v1/models", headers=headers)).status_code == 401, headers


async def test_every_response_carries_the_request_id() -> None:
    c = client()
    given = await c.get("/nope", headers={"X-Request-Id": "trace-0123_abc"})
    assert given.headers["X-Request-Id"] == "trace-0123_abc"
    made = await c.get("/health")
    assert re.fullmatch(r"[0-9a-f]{24}", made.headers["X-Request-Id"])
    bad = await c.get("/health", headers={"X-Request-Id": "two words; x=" + "y" * 200})  # not echoed
    assert re.fullmatch(r"[0-9a-f]{24}", bad.headers["X-Request-Id"])


async def test_a_response_before_the_body_is_read_closes_the_connection() -> None:
    c = client(api_keys=(KEY,))
    sized = {"Content-Length": str(len(BODY))}  # the test client sends none by itself
    refused = await c.post("/v1/chat/completions", data=BODY, headers=sized)  # 401 before the body is read
    assert refused.status_code == 401 and refused.headers["Connection"] == "close"
    read = await c.post("/v1/chat/completions", data=BODY, headers={**sized, "Authorization": f"Bearer {KEY}"})
    assert read.status_code == 503  # the body was read (and valid), then: still loading
    assert "Connection" not in read.headers


async def _upload(c, pieces: list[bytes], gap: float, *, complete: bool = True):
    """POST ``pieces`` of a body to /v1/chat/completions, ``gap`` seconds (trio's clock) before each; the answer."""
    async with c.request("/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"}) as conn:
        for piece in pieces:
            await trio.sleep(gap)
            await conn.send(piece)
        if complete:
            await conn.send_complete()
        return await conn.as_response()


async def test_the_body_timeout_is_between_reads_not_over_the_upload(autojump_clock: trio.abc.Clock) -> None:
    # --body-timeout (60 s) bounds each wait for the body's next bytes (nginx's client_body_timeout): an upload
    # of 150 s that never pauses for 60 s is read; one that pauses 61 s is 408 (it was 408 at 60 s in all)
    slow = await _upload(client(), [BODY[:10], BODY[10:20], BODY[20:]], 50.0)
    assert slow.status_code == 503  # read and valid, then: still loading
    stalled = await _upload(client(), [BODY[:10]], 0.0, complete=False)
    assert stalled.status_code == 408
    assert (await stalled.get_json())["error"]["message"] == \
        "the request body stopped arriving: no byte for 60 s (--body-timeout)"
    assert (await _upload(client(body_timeout=5.0), [BODY], 6.0)).status_code == 408


async def test_a_body_streaming_in_past_the_limit_is_413(autojump_clock: trio.abc.Clock) -> None:
    # the body is read piece by piece, so --max-body-bytes is counted here (Quart's buffer is emptied at each read)
    resp = await _upload(client(max_body_bytes=1024), [b"[" + b" " * 600, b" " * 600 + b"]"], 1.0)
    assert resp.status_code == 413 and (await resp.get_json())["error"]["code"] == "request_entity_too_large"


async def test_one_log_line_per_response(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="skippy.http")
    c = client()
    await c.post("/v1/chat/completions", data=BODY)
    await c.get("/nope")
    lines = [r.getMessage() for r in caplog.records if r.name == "skippy.http"]
    assert [line.split(" ")[:4] for line in lines] == [["POST", "/v1/chat/completions", "503", "tokens=0"],
                                                       ["GET", "/nope", "404", "tokens=0"]]
    assert all(line.split(" ")[4].endswith("ms") for line in lines)
    assert "code=model_loading reason=" in lines[0] and "code=not_found" in lines[1]
    assert all(re.search(r" id=[0-9a-f]{24} client=", line) for line in lines)


async def test_polled_routes_log_at_debug_unless_they_fail(caplog: pytest.LogCaptureFixture) -> None:
    # /health and /metrics are polled (the playground: both every 3 s); their answers below 400 log at DEBUG
    caplog.set_level(logging.DEBUG, logger="skippy.http")
    for route, status in (("GET /health", 200), ("GET /metrics", 200), ("GET /v1/models", 200)):
        log_request(route, status, tokens=0, duration_ms=1.0, request_id="r", client=None)
    await client().get("/health")  # 503: still loading
    await client(metrics=False).get("/metrics")  # 501
    await client().get("/v1/models")  # 503, an ordinary route
    lines = [(r.levelname, " ".join(r.getMessage().split(" ")[:3])) for r in caplog.records if r.name == "skippy.http"]
    assert lines == [("DEBUG", "GET /health 200"), ("DEBUG", "GET /metrics 200"), ("INFO", "GET /v1/models 200"),
                     ("INFO", "GET /health 503"), ("INFO", "GET /metrics 501"), ("INFO", "GET /v1/models 503")]


async def test_answers_a_retry_cannot_change_say_so() -> None:
    # every 501 (a feature the server was started without) and a 503 model_load_failed carry
    # X-Should-Retry: false, which the openai and anthropic SDKs obey; other errors leave retrying to them
    props = await client().post("/props", json={})
    metrics = await client(metrics=False).get("/metrics")
    assert (props.status_code, metrics.status_code) == (501, 501)
    assert props.headers["X-Should-Retry"] == metrics.headers["X-Should-Retry"] == "false"
    loading = await client().post("/v1/chat/completions", data=BODY)  # 503 model_loading: a retry may succeed
    missing = await client().get("/nope")
    assert (loading.status_code, missing.status_code) == (503, 404)
    assert "X-Should-Retry" not in loading.headers and "X-Should-Retry" not in missing.headers


async def test_a_405_names_the_allowed_methods_in_allow() -> None:
    # RFC 9110 §15.5.6: a 405 MUST carry Allow; the error stays the route's envelope
    c = client()
    for method, path, allowed in (("GET", "/v1/chat/completions", {"POST", "OPTIONS"}),
                                  ("PUT", "/health", {"GET", "HEAD", "OPTIONS"}),
                                  ("GET", "/v1/messages", {"POST", "OPTIONS"}),
                                  ("POST", "/api/tags", {"GET", "HEAD", "OPTIONS"})):
        resp = await c.open(path, method=method)
        assert resp.status_code == 405, path
        assert set(resp.headers["Allow"].split(", ")) == allowed, path
        assert set((await c.options(path)).headers["Allow"].split(", ")) == allowed, path
        body = await resp.get_json()
        if path == "/api/tags":
            assert isinstance(body["error"], str)  # Ollama's {"error": "..."}
        elif path == "/v1/messages":
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        else:
            assert body["error"]["code"] == "method_not_allowed"


# -- CORS -------------------------------------------------------------------------------------------

async def test_preflight_of_an_allowed_origin() -> None:
    c = client(cors_origins=(ORIGIN, "https://b.example"), api_keys=(KEY,))  # no key on a preflight
    resp = await c.options("/v1/chat/completions", headers={
        **PREFLIGHT, "Access-Control-Request-Headers": "authorization, x-custom"})
    assert resp.status_code == 200 and await resp.get_data() == b""  # llama-server answers 200
    assert resp.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert resp.headers["Access-Control-Allow-Credentials"] == "true"
    assert resp.headers["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS"
    assert resp.headers["Access-Control-Allow-Headers"] == "authorization, x-custom"
    assert resp.headers["Access-Control-Max-Age"] == "600"
    assert resp.headers["Vary"] == "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
    assert resp.headers["Access-Control-Expose-Headers"] == EXPOSED
    default = await c.options("/any/path", headers={**PREFLIGHT, "Access-Control-Request-Method": "get"})
    assert default.status_code == 200
    assert default.headers["Access-Control-Allow-Headers"] == "authorization, content-type, x-api-key"


@pytest.mark.parametrize("origins, headers, status, code", [
    ((ORIGIN,), {"Origin": "https://evil.example"}, 403, "cors_origin_not_allowed"),
    ((), {}, 403, "cors_origin_not_allowed"),  # CORS off: every preflight is refused
    ((ORIGIN,), {"Access-Control-Request-Method": "PUT"}, 403, "cors_method_not_allowed"),
    ((ORIGIN,), {"Access-Control-Request-Headers": "x-ok, (bad)"}, 400, None),
    (("*",), {"Access-Control-Request-Headers": "x y"}, 400, None),
])
async def test_refused_preflights_are_envelopes(origins, headers, status, code) -> None:
    resp = await client(cors_origins=origins).options("/v1/chat/completions", headers={**PREFLIGHT, **headers})
    assert resp.status_code == status
    error = (await resp.get_json())["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == code
    if code == "cors_origin_not_allowed":
        assert "Access-Control-Allow-Origin" not in resp.headers


async def test_cors_headers_on_answers_and_errors() -> None:
    c = client(cors_origins=(ORIGIN,), api_keys=(KEY,))
    for resp in (await c.get("/v1/models", headers={"Origin": ORIGIN}),  # 401
                 await c.get("/v1/models", headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"}),  # 503
                 await c.get("/nope", headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"})):  # 404
        assert resp.status_code in (401, 503, 404)
        assert resp.headers["Access-Control-Allow-Origin"] == ORIGIN
        assert resp.headers["Access-Control-Expose-Headers"] == EXPOSED
        assert resp.headers["Access-Control-Allow-Credentials"] == "true"
        assert resp.headers["Vary"] == "Origin"
    foreign = await c.get("/health", headers={"Origin": "https://evil.example"})
    assert foreign.headers["Vary"] == "Origin" and "Access-Control-Allow-Origin" not in foreign.headers
    plain = await c.get("/health")
    assert "Vary" not in plain.headers and "Access-Control-Allow-Origin" not in plain.headers


async def test_a_wildcard_origin_echoes_the_origin_and_varies() -> None:
    # llama-server echoes the origin for '*' with credentials allowed (a credentialed fetch refuses '*')
    resp = await client(cors_origins=("*",)).get("/health", headers={"Origin": "https://any.example"})
    assert resp.headers["Access-Control-Allow-Origin"] == "https://any.example" and resp.headers["Vary"] == "Origin"


@pytest.mark.parametrize("origin, allowed", [
    ("http://localhost:5173", True), ("https://localhost", True), ("http://127.0.0.1:8000", True),
    ("http://[::1]:3000", True), ("http://localhost.evil.example", False), ("https://app.example", False),
    ("http://127.0.0.2", False), ("null", False), ("http://localhost:notaport", False),
])
async def test_the_localhost_keyword_allows_loopback_origins_on_any_port(origin: str, allowed: bool) -> None:
    c = client(cors_origins=("localhost",))
    resp = await c.options("/v1/chat/completions", headers={**PREFLIGHT, "Origin": origin})
    assert resp.status_code == (200 if allowed else 403)
    assert (resp.headers.get("Access-Control-Allow-Origin") == origin) is allowed


async def test_no_cors_header_when_cors_is_off() -> None:
    resp = await client().get("/health", headers={"Origin": ORIGIN})
    assert not [h for h in resp.headers.keys() if h.lower().startswith("access-control") or h.lower() == "vary"]


# -- what the log line counts, from dict and Struct results -----------------------------------------

class _Usage(msgspec.Struct):
    completion_tokens: int


class _Completion(msgspec.Struct):
    usage: _Usage


def test_tokens_counted_from_dicts_and_structs() -> None:
    assert _completion_tokens({"usage": {"completion_tokens": 7}}) == 7
    assert _completion_tokens(_Completion(_Usage(3))) == 3


async def test_a_stream_that_fails_unexpectedly_ends_with_an_error_event(caplog: pytest.LogCaptureFixture) -> None:
    # a bug raised mid-stream (a RecursionError in the output parser did) cut the chunked body: no error event,
    # no end; the client saw a torn response. It ends with the error event a 500 would have had, logged.
    from skippy.http.routes.base import stream

    class Chunks:
        def __init__(self) -> None:
            self.sent = 0

        def __aiter__(self):
            return self

        async def __anext__(self):
            self.sent += 1
            if self.sent > 2:
                raise RecursionError("maximum recursion depth exceeded")
            return {"n": self.sent}

        async def aclose(self) -> None:
            pass

    app = create_app(AppState())

    async def start():
        return Chunks()

    @app.route("/test-stream", methods=["POST"])
    async def test_stream():
        return await stream(shared(), current(), start)

    caplog.set_level(logging.ERROR, logger="skippy.http")
    reply = await app.test_client().post("/test-stream")
    body = (await reply.get_data()).decode()
    assert reply.status_code == 200 and body.startswith('data: {"n":1}\n\ndata: {"n":2}\n\n')
    last = body.strip().rsplit("\n\n", 1)[-1]
    assert last.startswith("data: ") and "[DONE]" not in body
    assert msgspec.json.decode(last[6:])["error"] == {"message": "internal error: RecursionError",
                                                      "type": "server_error", "param": None, "code": None}
    assert any("RecursionError" in (r.exc_text or "") for r in caplog.records)
