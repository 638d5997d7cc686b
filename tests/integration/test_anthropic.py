"""Anthropic Messages (/v1/messages, /v1/messages/count_tokens) on the real server, with the official ``anthropic`` SDK.

Each behaviour runs on the default model's template (no tool support: tools are emulated with
TOOL_CALL lines) and on the Qwen 2.5 template (native Hermes ``<tool_call>`` tools). A 135M model does
not call tools on its own reliably, so tool calls are forced (``tool_choice`` ``tool`` / ``any``) and
sampling is greedy (``temperature: 0``, sent as ``extra_body``: the SDK no longer has the argument).
"""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest
from httpx_sse import EventSource

from tests.support import Server

GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
#: one forced call: with parallel calls allowed (the Qwen template's default) the grammar lets the model go on
ONE_CALL = {"type": "any", "disable_parallel_tool_use": True}


@pytest.fixture(params=["server", "qwen_server"], ids=["emulated-tools", "native-tools"])
def srv(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue(request.param)


def sdk(srv: Server, api_key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.base_url, api_key=api_key, max_retries=0, timeout=120)


def raw_events(srv: Server, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` of a streamed /v1/messages answer, read with httpx-sse."""
    with httpx.stream("POST", srv.base_url + "/v1/messages", json={**body, "stream": True}, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        return [(e.event, json.loads(e.data)) for e in EventSource(resp).iter_sse()]


def test_text_create_is_the_chat_completion_of_the_same_request(srv: Server) -> None:
    """One generation path: the Messages reply is the chat completion's text, token for token (both prompts
    are prefilled cold, so the greedy outputs are bit-identical)."""
    question = f"Name a colour of the sky ({srv.port})."
    msg = sdk(srv).messages.create(model="claude-test", max_tokens=12, system="You are terse.",
                                   messages=[{"role": "user", "content": question}], extra_body=GREEDY)
    assert msg.type == "message" and msg.role == "assistant" and msg.model == "claude-test"
    assert msg.id.startswith("msg_") and [b.type for b in msg.content] == ["text"]
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.stop_sequence is None
    assert 0 < msg.usage.output_tokens <= 12 and msg.usage.input_tokens > 0
    chat = httpx.post(srv.base_url + "/v1/chat/completions", timeout=120, json={
        "model": "m", "max_tokens": 12, "temperature": 0, "cache_prompt": False, "messages": [
            {"role": "system", "content": "You are terse."}, {"role": "user", "content": question}]}).json()
    assert msg.content[0].text == chat["choices"][0]["message"]["content"]
    assert msg.usage.output_tokens == chat["usage"]["completion_tokens"]
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == chat["usage"]["prompt_tokens"]


def test_text_stream_events(srv: Server) -> None:
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Tell me about cats."}], **GREEDY}
    events = raw_events(srv, body)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    # a keep-alive ping may come between deltas when a token is slow (a loaded machine), as Anthropic sends them
    assert set(names[3:-3]) - {"ping"} == {"content_block_delta"}
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens") and delta["usage"]["output_tokens"] > 0
    assert delta["usage"]["input_tokens"] + delta["usage"]["cache_read_input_tokens"] == start["usage"]["input_tokens"]
    # the SDK's stream helper accumulates the same message
    with sdk(srv).messages.stream(model="m", max_tokens=16, messages=body["messages"], extra_body=GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.content[0].text == streamed and streamed.strip()
    assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0
    assert text.strip()


def test_stop_sequences(srv: Server) -> None:
    client = sdk(srv)
    msg = client.messages.create(model="m", max_tokens=40, messages=COUNT, stop_sequences=["7", "never"],
                                 extra_body=GREEDY)
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "7")
    assert "6" in msg.content[0].text and "7" not in msg.content[0].text
    with client.messages.stream(model="m", max_tokens=40, messages=COUNT, stop_sequences=["7"],
                                extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "7")
    assert final.content[0].text == msg.content[0].text
    # without a stop sequence the same answer goes past it
    full = client.messages.create(model="m", max_tokens=40, messages=COUNT, extra_body=GREEDY)
    assert full.stop_sequence is None and full.content[0].text.startswith(msg.content[0].text + "7")


def test_tool_round_trip(srv: Server) -> None:
    client = sdk(srv)
    msg = client.messages.create(model="m", max_tokens=80, messages=ASK, tools=[WEATHER],
                                 tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                                 extra_body=GREEDY)
    assert msg.stop_reason == "tool_use"
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].id.startswith("toolu_")
    assert isinstance(calls[0].input, dict) and isinstance(calls[0].input.get("city"), str)
    history = [*ASK, {"role": "assistant", "content": msg.content},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                             "content": "Sunny and 22 degrees Celsius."}]}]
    answer = client.messages.create(model="m", max_tokens=24, messages=history, tools=[WEATHER],
                                    tool_choice={"type": "none"}, extra_body=GREEDY)
    # no call may be made: no tool_use block. A 135M model may well write another call in the history's form;
    # that text is the answer's text, never dropped (issue 35.11: it was, leaving content [])
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert {b.type for b in answer.content} == {"text"} and "".join(b.text for b in answer.content).strip()
    assert answer.usage.output_tokens > 0
    # no tools declared at all, the same history: the same
    bare = client.messages.create(model="m", max_tokens=24, messages=history, extra_body=GREEDY)
    assert bare.stop_reason in ("end_turn", "max_tokens")
    assert {b.type for b in bare.content} == {"text"} and "".join(b.text for b in bare.content).strip()
    # the tool result is in the prompt: a longer result is a longer prompt, by its tokens
    longer = [*history[:2], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                                          "content": "Sunny and 22 degrees Celsius. Light wind."}]}]
    n = client.messages.count_tokens(model="m", messages=history, tools=[WEATHER]).input_tokens
    assert client.messages.count_tokens(model="m", messages=longer, tools=[WEATHER]).input_tokens > n


def test_anthropic_defined_client_tools_are_called_with_their_documented_input(server: Server) -> None:
    """Anthropic's quickstarts give Claude ``bash`` and the text editor by ``type`` alone: the model here is
    given their documented input (in the prompt; a forced call is held to it); a server tool (web search) is
    left out and the log says so."""
    client = sdk(server)
    tools = [{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
             {"type": "bash_20250124", "name": "bash"}, {"type": "web_search_20250305", "name": "web_search"}]
    ask = [{"role": "user", "content": "Run ls in /tmp"}]
    forced = {"type": "tool", "name": "bash", "disable_parallel_tool_use": True}
    msg = client.messages.create(model="m", max_tokens=80, extra_body=GREEDY, tools=tools, messages=ask,
                                 tool_choice=forced)
    assert "left out server tool(s) web_search_20250305" in server.log()
    # a 135M model may run a string on to the token limit; a finished call is one of the documented input
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason in ("tool_use", "max_tokens")
    for call in calls:
        assert call.name == "bash" and set(call.input) <= {"command", "restart"}
    with_tools = client.messages.count_tokens(model="m", tools=tools, messages=ask).input_tokens
    bare = client.messages.count_tokens(model="m", tools=tools[1:2], messages=ask).input_tokens
    assert with_tools > bare + 50  # the text editor's commands and parameters are in the prompt


def test_streamed_tool_use(srv: Server) -> None:
    body = {"model": "m", "max_tokens": 80, "messages": ASK, "tools": [WEATHER], "tool_choice": ONE_CALL, **GREEDY}
    events = raw_events(srv, body)
    starts = [d for n, d in events if n == "content_block_start" and d["content_block"]["type"] == "tool_use"]
    assert len(starts) == 1 and starts[0]["content_block"]["name"] == "get_weather"
    assert starts[0]["content_block"]["id"].startswith("toolu_") and starts[0]["content_block"]["input"] == {}
    parts = [d["delta"]["partial_json"] for n, d in events
             if n == "content_block_delta" and d["index"] == starts[0]["index"]]
    assert isinstance(json.loads("".join(parts))["city"], str)
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    with sdk(srv).messages.stream(model="m", max_tokens=80, messages=ASK, tools=[WEATHER],
                                  tool_choice=ONE_CALL, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    call = [b for b in final.content if b.type == "tool_use"][0]
    assert final.stop_reason == "tool_use" and call.input == json.loads("".join(parts))


def test_structured_output_by_output_config_or_the_betas_output_format(server: Server) -> None:
    """``output_config.format`` and the structured-outputs beta's ``output_format`` (CrewAI's Anthropic provider,
    older SDKs' ``beta.messages.parse``) hold the reply's text to the schema; the beta's name was ignored."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "country": {"type": "string", "maxLength": 20}},
              "required": ["name", "country"], "additionalProperties": False}
    fmt = {"type": "json_schema", "schema": schema}
    for extra in ({"output_config": {"format": fmt}}, {"output_format": fmt}):
        reply = sdk(server).messages.create(
            model="claude-sonnet-4-5", max_tokens=80, messages=[{"role": "user", "content": "Paris"}],
            extra_body=extra, extra_headers={"anthropic-beta": "structured-outputs-2025-11-13"})
        jsonschema.validate(json.loads(reply.content[0].text), schema)


def test_the_anthropic_sdks_models_list_gets_anthropics_shape(server: Server) -> None:
    """The SDKs send ``anthropic-version``: ``GET /v1/models`` then answers Anthropic's page (``type``,
    ``display_name``, ``created_at``), where the OpenAI list left those ``None``; without it, OpenAI's list."""
    page = sdk(server).models.list()
    names = [m.id for m in page.data]
    openai_list = httpx.get(server.base_url + "/v1/models", timeout=30).json()
    assert names == [m["id"] for m in openai_list["data"]] and openai_list["object"] == "list"
    first = page.data[0]
    assert first.type == "model" and first.display_name == first.id and first.created_at.year >= 2024
    assert sdk(server).models.retrieve(names[0]).id == names[0]
    with pytest.raises(anthropic.NotFoundError) as info:  # in Anthropic's envelope
        sdk(server).models.retrieve("no-such-model")
    assert info.value.body["error"]["type"] == "not_found_error"
    after = sdk(server).models.list(after_id=names[-1])  # the page after the last: empty
    assert after.data == [] and not after.has_more
    assert [m.id for m in sdk(server).models.list(limit=1).data] == names[:1]


def test_count_tokens_is_the_prompt_messages_prefills(srv: Server) -> None:
    client = sdk(srv)
    messages = [{"role": "user", "content": f"Count me, port {srv.port}."}]
    counted = client.messages.count_tokens(model="m", system="Be brief.", messages=messages, tools=[WEATHER])
    msg = client.messages.create(model="m", max_tokens=4, system="Be brief.", messages=messages, tools=[WEATHER],
                                 extra_body=GREEDY)
    assert counted.input_tokens == msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 10
    plain = client.messages.count_tokens(model="m", system="Be brief.", messages=messages)
    assert plain.input_tokens < counted.input_tokens  # the tools are in the prompt


def test_history_with_thinking_and_thinking_enabled_is_accepted(server: Server) -> None:
    msg = sdk(server).messages.create(
        model="m", max_tokens=1025, thinking={"type": "enabled", "budget_tokens": 1024}, stop_sequences=["."],
        extra_body=GREEDY, messages=[{"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": [{"type": "thinking", "thinking": "Greet back.", "signature": "x"},
                                                    {"type": "text", "text": "Hello!"}]},
                  {"role": "user", "content": "How are you?"}])
    assert msg.stop_reason in ("end_turn", "stop_sequence", "max_tokens")


# -- errors: Anthropic's envelope and status codes, never a 5xx ------------------------------------------


def assert_anthropic_error(resp: httpx.Response, status: int, type_: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == type_
    assert body["error"]["message"]
    return body


@pytest.mark.parametrize(("body", "words"), [
    ({"model": "m", "messages": ASK}, "max_tokens"),
    ({"model": "m", "max_tokens": 8}, "messages"),
    ({"model": "m", "max_tokens": 0, "messages": ASK}, "max_tokens"),
    ({"model": "m", "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "user or assistant"),
    ({"model": "m", "max_tokens": 8, "messages": [{"role": "tool", "content": "x"}]}, "role"),
    ({"model": "m", "max_tokens": 8, "messages": []}, "messages"),
    ({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]},
     "messages.0.content.0: this model reads text only"),  # no projector here: the chat path's refusal, renamed
    ({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]},
     "messages.0.content.0: this model reads text only"),  # a url source too: no projector here
    ({"model": "m", "max_tokens": 8, "messages": ASK, "tools": [WEATHER],
      "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"model": "m", "max_tokens": 8, "messages": ASK, "tools": [{"type": "computer_20250124", "name": "computer"}]},
     "computer_20250124"),
    ({"model": "m", "max_tokens": 8, "messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}],
      "tool_choice": {"type": "tool", "name": "web_search"}}, "web_search"),  # left out: it cannot be forced
    ({"model": "m", "max_tokens": 8, "messages": ASK, "temperature": 101}, "temperature"),  # -1: greedy
    ({"model": "m", "max_tokens": 8, "messages": ASK, "stream": True, "top_k": "x"}, "top_k"),
    ({"model": "m", "max_tokens": 8, "messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 10}},
     "budget_tokens"),
])
def test_bad_input_is_a_400_in_anthropics_shape(server: Server, body: dict[str, Any], words: str) -> None:
    resp = httpx.post(server.base_url + "/v1/messages", json=body, timeout=60)
    assert words in assert_anthropic_error(resp, 400, "invalid_request_error")["error"]["message"]


def test_bad_input_through_the_sdk_raises_its_bad_request_error(server: Server) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        sdk(server).messages.create(model="m", max_tokens=8, messages=ASK, stop_sequences=["s"] * 17)
    assert err.value.status_code == 400 and err.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        with sdk(server).messages.stream(model="m", max_tokens=8, messages=[]) as stream:
            stream.get_final_message()
    with pytest.raises(anthropic.BadRequestError):
        sdk(server).messages.count_tokens(model="m", messages=[{"role": "assistant", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}])


def test_other_errors_on_the_anthropic_paths(server: Server) -> None:
    url = server.base_url
    assert_anthropic_error(httpx.post(url + "/v1/messages", content=b"{not json", timeout=30), 400,
                           "invalid_request_error")
    assert_anthropic_error(httpx.post(url + "/v1/messages/nope", json={}, timeout=30), 404, "not_found_error")
    assert_anthropic_error(httpx.get(url + "/v1/messages", timeout=30), 405, "invalid_request_error")
    big = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x" * (33 * 2**20)}]}  # > 32 MiB
    assert_anthropic_error(httpx.post(url + "/v1/messages", json=big, timeout=60), 413, "request_too_large")
    # the OpenAI routes keep OpenAI's envelope
    resp = httpx.post(url + "/v1/chat/completions", json={"messages": []}, timeout=30)
    assert resp.status_code == 400 and set(resp.json()) == {"error"}


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(["--parallel", "2", "--n-ctx", "512", "--api-key", "sk-one"],
                tmp_path_factory.mktemp("anthropic-keys") / "server.log") as srv:
        yield srv


def test_api_key_by_x_api_key_or_bearer(keyed_server: Server) -> None:
    msg = sdk(keyed_server, api_key="sk-one").messages.create(model="m", max_tokens=2, messages=ASK)  # x-api-key
    assert msg.type == "message"
    bearer = httpx.post(keyed_server.base_url + "/v1/messages/count_tokens", json={"model": "m", "messages": ASK},
                        headers={"Authorization": "Bearer sk-one"}, timeout=60)
    assert bearer.status_code == 200 and bearer.json()["input_tokens"] > 0
    with pytest.raises(anthropic.AuthenticationError) as err:
        sdk(keyed_server, api_key="wrong").messages.create(model="m", max_tokens=2, messages=ASK)
    assert err.value.status_code == 401 and err.value.body["error"]["type"] == "authentication_error"
    resp = httpx.post(keyed_server.base_url + "/v1/messages", json={"model": "m", "max_tokens": 2, "messages": ASK},
                      timeout=60)
    assert_anthropic_error(resp, 401, "authentication_error")


# -- the replies are what /openapi.json says ------------------------------------------------------------


def test_replies_validate_against_openapi(server: Server) -> None:
    doc = httpx.get(server.base_url + "/openapi.json", timeout=10).json()
    paths = doc["paths"]

    def check(schema: dict[str, Any], instance: Any) -> None:
        validator = jsonschema.Draft202012Validator({**schema, "components": doc["components"]})
        errors = sorted(validator.iter_errors(instance), key=str)
        assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])

    op = paths["/v1/messages"]["post"]
    body = {"model": "m", "max_tokens": 48, "messages": ASK, "tools": [WEATHER], "tool_choice": {"type": "any"},
            "stop_sequences": ["zzz"], **GREEDY}
    check(op["responses"]["200"]["content"]["application/json"]["schema"],
          httpx.post(server.base_url + "/v1/messages", json=body, timeout=120).json())
    sse_data = op["responses"]["200"]["content"]["text/event-stream"]["x-sse-data"]
    for _, data in raw_events(server, body) + raw_events(server, {**body, "tool_choice": {"type": "auto"}}):
        check(sse_data, data)
    bad = httpx.post(server.base_url + "/v1/messages", json={"messages": ASK}, timeout=30)
    check(op["responses"]["default"]["content"]["application/json"]["schema"], bad.json())
    count = paths["/v1/messages/count_tokens"]["post"]
    check(count["responses"]["200"]["content"]["application/json"]["schema"],
          httpx.post(server.base_url + "/v1/messages/count_tokens", json={"messages": ASK}, timeout=60).json())
    assert count["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/CountTokensRequest")


#: Claude Code's ``Workflow`` tool: a property without a type (any value), which its tools have
WORKFLOW = {"name": "Workflow", "description": "Run a workflow script", "input_schema": {
    "type": "object", "required": ["script"], "properties": {
        "script": {"type": "string"},
        "args": {"description": "Optional input value exposed to the script as the global `args`"}}}}


def test_what_claude_code_sends_is_served(server: Server) -> None:
    """Claude Code's first requests as it sends them for a model it does not know (here, the one served): a
    system message among the messages (the mid-conversation system beta), its billing header as the first system
    block, a tool whose property has no type; and a prompt beyond the context refused in Anthropic's words, which
    it recognises to compact the conversation."""
    client = sdk(server)
    billing = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.c23; cc_entrypoint=cli; "
                                       "cch=a5145;"}
    system = [billing, {"type": "text", "text": "You are a helpful assistant."}]
    messages = [*ASK, {"role": "system", "content": "Available agent types: none."}]
    msg = client.messages.create(model="claude-sonnet-4-6", max_tokens=8, system=system, messages=messages,
                                 tools=[WEATHER, WORKFLOW], extra_body=GREEDY,
                                 extra_headers={"anthropic-beta": "mid-conversation-system-2026-04-07"})
    assert msg.stop_reason in ("end_turn", "max_tokens", "tool_use") and msg.usage.input_tokens > 0
    # the billing header is not in the prompt: a changed stamp changes nothing
    counts = {client.messages.count_tokens(model="m", system=[{**billing, "text": billing["text"].replace(stamp, new)},
                                                              system[1]], messages=messages).input_tokens
              for stamp, new in (("a5145", "a5145"), ("a5145", "0f0f0"), ("c23", "3bb"))}
    without = client.messages.count_tokens(model="m", system=[system[1]], messages=messages).input_tokens
    assert counts == {without}
    # a call of the tool forced: the grammar takes the any-value property (the 135M model then writes a string
    # to the token limit, so only the acceptance is checked here; tests/unit/test_emulation.py checks the grammar)
    call = client.messages.create(model="m", max_tokens=8, messages=ASK, tools=[WORKFLOW], extra_body=GREEDY,
                                  tool_choice={"type": "tool", "name": "Workflow", "disable_parallel_tool_use": True})
    assert call.stop_reason in ("max_tokens", "tool_use")
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "word " * 9000}])
    assert re.fullmatch(r"prompt is too long: \d+ tokens > \d+ maximum", err.value.body["error"]["message"])


def test_a_message_thread_is_refused_so_the_sdks_tool_runner_goes_on_without_one(server: Server) -> None:
    """The message-threads beta (``thread``: the server would keep the conversation) is refused with
    Anthropic's ``thread_unsupported_request`` in ``error.details``, so the SDK's tool runner resends the whole
    conversation unthreaded; it used to be ignored, and its second turn lost the history (or was a 400)."""
    bodies: list[dict[str, Any]] = []
    client = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120,
                                 http_client=anthropic.DefaultHttpxClient(event_hooks={"request": [
                                     lambda r: bodies.append(json.loads(r.read() or b"{}"))]}))

    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """Current weather in a city.

        Args:
            city: the city
        """
        return f"18C in {city}"

    runner = client.beta.messages.tool_runner(model="m", max_tokens=80, tools=[get_weather], messages=ASK,
                                              tool_choice=ONE_CALL, max_iterations=2, extra_body=GREEDY)
    replies = list(runner)
    assert replies and replies[0].stop_reason == "tool_use"
    threaded = [b for b in bodies if "thread" in b]
    assert all(b["thread"].get("type") == "create" for b in threaded)  # never a continued one: refused first
    assert [m["role"] for m in bodies[-1]["messages"]][:3] == ["user", "assistant", "user"]  # the whole history
    r = httpx.post(server.base_url + "/v1/messages", timeout=60, json={
        "model": "m", "max_tokens": 8, "messages": ASK, "thread": {"type": "create"}})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["details"]["error_code"] == "thread_unsupported_request"
