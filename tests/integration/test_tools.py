"""Tool calls (native and emulated), reasoning and structured output end to end with the real model."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest

from tests.paths import CHAT_TEMPLATES
from tests.support import ASK, NAMED, WEATHER, check_call, openai_client, streamed_calls

TIME = {"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": {
    "type": "object", "properties": {}}}}


@pytest.mark.parametrize("fixture", ["server", "qwen_server"])
@pytest.mark.parametrize("tool_choice", ["required", NAMED])
def test_forced_tool_call_validates(request: pytest.FixtureRequest, fixture: str, tool_choice) -> None:
    # "server": SmolLM2's own template has no tools -> TOOL_CALL emulation;
    # "qwen_server": the Qwen 2.5 template -> native <tool_call> format.
    client = openai_client(request.getfixturevalue(fixture).base_url)
    # cache_prompt false: both requests prefill cold, so greedy output is bit-for-bit the same
    # (a cached prefix shifts llama.cpp's logits slightly; DESIGN.md, runtime facts)
    kwargs = dict(model="SmolLM2-135M-Instruct", messages=ASK, tools=[WEATHER, TIME], tool_choice=tool_choice,
                  temperature=0, max_tokens=80, parallel_tool_calls=False, extra_body={"cache_prompt": False})
    r = client.chat.completions.create(**kwargs)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and len(call.id) >= 29
    check_call(call.function.name, call.function.arguments)

    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    calls = streamed_calls(chunks)
    assert len(calls) == 1
    check_call(calls[0]["name"], calls[0]["arguments"])
    assert calls[0]["arguments"] == call.function.arguments  # greedy: same call both ways
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert sum(1 for c in chunks if c.usage is not None) == 1
    fragments = sum(1 for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    if fixture == "qwen_server":  # native: arguments arrive in several fragments, not only when the object closes
        assert fragments > 2
    else:  # emulated: a call is sent once complete, so a call cut off by max_tokens never reaches the client
        assert fragments == 1


@pytest.mark.parametrize("fixture", ["server", "qwen_server"])
def test_a_streamed_tool_only_reply_has_content_null_as_the_whole_one(request: pytest.FixtureRequest,
                                                                     fixture: str) -> None:
    """OpenAI starts a tool-call reply's stream with ``{"role": "assistant", "content": null}`` and never sends
    an empty string: the ``openai`` package's stream helper, which accumulates the deltas, ends with ``content``
    null, as the non-streamed reply (it ended with "": the first delta's). Emulated and native tool calls."""
    client = openai_client(request.getfixturevalue(fixture).base_url)
    kwargs = dict(model="SmolLM2-135M-Instruct", messages=ASK, tools=[WEATHER], tool_choice="required",
                  temperature=0, max_tokens=80, parallel_tool_calls=False, extra_body={"cache_prompt": False})
    whole = client.chat.completions.create(**kwargs).choices[0].message
    assert whole.content is None and len(whole.tool_calls) == 1
    with client.chat.completions.stream(**kwargs) as stream:
        chunks = [event.chunk for event in stream if event.type == "chunk"]
        final = stream.get_final_completion().choices[0]
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant" and deltas[0].content is None
    assert all(d.content != "" for d in deltas)
    assert final.finish_reason == "tool_calls" and final.message.content is None
    assert [c.function.arguments for c in final.message.tool_calls] == [whole.tool_calls[0].function.arguments]
    # tool_choice "none": no call can come, the stream starts as a text reply (OpenAI's empty string)
    none = client.chat.completions.create(stream=True, **{**kwargs, "tool_choice": "none", "max_tokens": 4})
    assert list(none)[0].choices[0].delta.content == ""


def test_emulated_follow_up_turn_answers(server) -> None:
    client = openai_client(server.base_url)
    first = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=ASK, tools=[WEATHER],
                                           tool_choice="required", temperature=0, max_tokens=80)
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny", "temperature_c": 24}'},
    ]
    prompt = httpx.post(server.base_url + "/apply-template", json={"messages": history}).json()["prompt"]
    assert "TOOL_CALL" in prompt and f"Tool result for get_weather ({call.id})" in prompt
    # tool_choice "none": no call may be made. SmolLM2 copies the history's TOOL_CALL form here (greedy): that
    # text is the reply's content, never dropped (issue 35.11: it was stripped, leaving content null)
    second = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=history, tools=[WEATHER],
                                            tool_choice="none", temperature=0, max_tokens=60)
    assert second.choices[0].finish_reason in ("stop", "length") and not second.choices[0].message.tool_calls
    assert second.usage.completion_tokens > 0 and (second.choices[0].message.content or "").strip()
    # no tools declared at all, the same history: the same text is content too
    bare = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=history, temperature=0,
                                          max_tokens=60)
    assert bare.choices[0].finish_reason in ("stop", "length") and not bare.choices[0].message.tool_calls
    assert bare.usage.completion_tokens > 0 and (bare.choices[0].message.content or "").strip()
    streamed = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=history, temperature=0,
                                              max_tokens=60, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == bare.choices[0].message.content
    # with tools still on, the follow-up renders and is served too (the model may call again)
    again = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=history, tools=[WEATHER],
                                           temperature=0, max_tokens=60)
    assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("temperature", [0, 0.9], ids=["greedy", "sampled"])
def test_named_tool_choice_on_a_native_template_is_one_call(qwen_server, temperature) -> None:
    """Issue 35.15: a named choice with the template's parallel default (Qwen 2.5: parallel) called the tool twice
    and ran to max_tokens. Now: exactly one call, then the turn ends; a call cut by the limit is not reported and
    none of its text leaks into content."""
    client = openai_client(qwen_server.base_url)
    for seed in range(3):
        kwargs = dict(model="m", messages=ASK, tools=[WEATHER, TIME], tool_choice=NAMED, temperature=temperature,
                      seed=seed, max_tokens=64)
        choice = client.chat.completions.create(**kwargs).choices[0]
        assert not (choice.message.content or "")
        if choice.finish_reason == "length":  # a sampled string argument may outrun the limit: then no call at all
            assert not choice.message.tool_calls
            continue
        assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
        check_call(choice.message.tool_calls[0].function.name, choice.message.tool_calls[0].function.arguments)
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        calls = streamed_calls(chunks)
        assert len(calls) == 1 and calls[0]["arguments"] == choice.message.tool_calls[0].function.arguments
        assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
            ["tool_calls"]


@pytest.mark.parametrize("fixture", ["server", "qwen_server"])
def test_a_forced_call_cut_by_max_tokens_is_not_reported(request: pytest.FixtureRequest, fixture: str) -> None:
    client = openai_client(request.getfixturevalue(fixture).base_url)
    for max_tokens in (3, 9):
        choice = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], tool_choice=NAMED,
                                                temperature=0, max_tokens=max_tokens).choices[0]
        assert choice.finish_reason == "length"
        assert not choice.message.tool_calls and not (choice.message.content or ""), (max_tokens, choice.message)


def _bounded_tool(n: dict, strict: bool = False) -> dict:
    return {"type": "function", "function": {"name": "set_n", "description": "Set n.", "strict": strict,
                                             "parameters": {"type": "object", "properties": {"n": n},
                                                            "required": ["n"], "additionalProperties": False}}}


def test_a_strict_tool_with_a_one_sided_minimum_is_taken(server) -> None:
    """openai-agents makes every tool strict, and ``Annotated[int, Field(ge=1)]`` is ``minimum: 1`` alone, which
    OpenAI accepts: it was a 400 ("strict schema uses minimum, which the grammar cannot enforce")."""
    client = openai_client(server.base_url)
    tool = _bounded_tool({"type": "integer", "minimum": 1}, strict=True)
    for tool_choice in ("auto", "required"):
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Set n to 0"}],
                                           tools=[tool], tool_choice=tool_choice, temperature=0, max_tokens=40)
        if tool_choice == "required":
            [call] = r.choices[0].message.tool_calls
            assert json.loads(call.function.arguments)["n"] >= 1


@pytest.mark.parametrize("n", [{"type": "integer", "maximum": 3},
                               {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
                               {"type": ["integer", "null"], "minimum": -5, "maximum": 3}])
def test_a_forced_calls_integer_keeps_to_its_bounds(server, n: dict) -> None:
    """Greedy SmolLM2 writes ``{"n": 10}`` when asked to set n to 10; the grammar holds it to the tool's bounds,
    as ``response_format`` (llguidance) holds the same schema. Before, only an integer with both ``minimum``
    and ``maximum`` was held (an enum), the rest ignored."""
    client = openai_client(server.base_url)
    tool = _bounded_tool(n)
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Set n to 10"}],
                                       tools=[tool], tool_choice="required", temperature=0, max_tokens=40)
    [call] = r.choices[0].message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])


def test_json_schema_response_format(server) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    client = openai_client(server.base_url)
    kwargs = dict(model="SmolLM2-135M-Instruct", temperature=0, max_tokens=60,
                  messages=[{"role": "user", "content": "Describe a person as JSON."}],
                  response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema,
                                                                          "strict": True}})
    content = client.chat.completions.create(**kwargs).choices[0].message.content
    jsonschema.validate(json.loads(content), schema)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs)
                       if c.choices)
    assert streamed == content


def test_a_schema_with_properties_takes_no_other_keys(server) -> None:
    """llama.cpp's json-schema-to-grammar rule, so llama-server's and Ollama's: properties without
    additionalProperties close the object. Before, greedy and seeded SmolLM2 added job, hobbies, city... and
    two of three ran to the token limit."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    client = openai_client(server.base_url)
    ask = [{"role": "user", "content": "Describe a person as JSON: name, age, job, hobbies, city."}]
    for extra in ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}},
                  {"extra_body": {"guided_json": schema}}):
        for seed in (0, 1):
            r = client.chat.completions.create(model="m", messages=ask, temperature=0.8 if seed else 0, seed=seed,
                                               max_tokens=64, **extra)
            assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
            assert sorted(json.loads(r.choices[0].message.content)) == ["age", "name"]


@pytest.mark.parametrize("fixture", ["server", "qwen_server"])
def test_a_tool_without_parameters_is_called_without_arguments(request: pytest.FixtureRequest, fixture: str) -> None:
    """OpenAI: leaving out ``parameters`` defines an empty parameter list. Before, the grammar took any
    object (SmolLM2 invented ``{"options": {...}}`` or ran to the token limit)."""
    client = openai_client(request.getfixturevalue(fixture).base_url)
    for seed in range(3):
        choice = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ping the server"}], seed=seed, max_tokens=40,
            tools=[{"type": "function", "function": {"name": "ping"}}], tool_choice="required",
            parallel_tool_calls=False).choices[0]
        assert choice.finish_reason == "tool_calls", choice.message
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
        assert calls == [("ping", {})]


def test_json_object_response_format(server) -> None:
    r = openai_client(server.base_url).chat.completions.create(
        model="SmolLM2-135M-Instruct", temperature=0, max_tokens=300, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Return a JSON object with the keys name and color for a cat."}])
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def post(base_url: str, body: dict) -> httpx.Response:
    return httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60)


def test_bad_tool_history_is_400_then_next_request_works(qwen_server) -> None:
    history = ASK + [{"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    resp = post(qwen_server.base_url, {"messages": history, "tools": [WEATHER], "max_tokens": 5})
    assert resp.status_code == 400
    assert "messages[1]" in resp.json()["error"]["message"]
    assert post(qwen_server.base_url, {"messages": ASK, "max_tokens": 3}).status_code == 200


def test_strict_template_alternation_error_is_400(server) -> None:
    gemma = (CHAT_TEMPLATES / "google-gemma-2-2b-it.jinja").read_text()
    resp = post(server.base_url, {"chat_template": gemma, "max_tokens": 3, "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
    assert resp.status_code == 400
    assert "alternate" in resp.json()["error"]["message"]


def test_a_template_without_a_system_role_takes_a_system_prompt_and_tools(server) -> None:
    """Gemma 2's template raises on a system message; it and the tool emulation's instruction reach the model
    in the first user message (llama.cpp's polyfill) instead of a 400."""
    gemma = (CHAT_TEMPLATES / "google-gemma-2-2b-it.jinja").read_text()
    resp = post(server.base_url, {"chat_template": gemma, "max_tokens": 3, "tools": [WEATHER], "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]})
    assert resp.status_code == 200, resp.text
    plain = post(server.base_url, {"chat_template": gemma, "max_tokens": 3, "messages": [
        {"role": "user", "content": "Weather in Paris?"}]}).json()
    assert resp.json()["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 50  # the instruction


@pytest.mark.parametrize("body", [
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=x)a+$"}}}}}},
    {"grammar": "root ::= nope"},
    {"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}},
    {"response_format": {"type": "yaml"}},
    {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "missing"}}},
    {"tools": [{"type": "function", "function": {"description": "no name"}}]},
    {"reasoning_format": "sideways"},
])
def test_bad_structured_output_is_400(server, body: dict) -> None:
    resp = post(server.base_url, {"messages": ASK, "max_tokens": 5, **body})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["type"] == "invalid_request_error"


def test_raw_grammar(server) -> None:
    r = post(server.base_url, {"messages": ASK, "max_tokens": 10, "temperature": 0,
                               "grammar": 'root ::= "yes" | "no"'}).json()
    assert r["choices"][0]["message"]["content"] in ("yes", "no")


def test_props_reports_capabilities(server, qwen_server) -> None:
    plain = httpx.get(server.base_url + "/props").json()
    qwen = httpx.get(qwen_server.base_url + "/props").json()
    assert plain["chat_template_caps"]["supports_tools"] is False
    assert qwen["chat_template_caps"]["supports_tools"] is True
    assert qwen["chat_template_caps"]["chat_format"] == "hermes_2_pro"
    assert plain["total_slots"] == 8 and plain["default_generation_settings"]["n_ctx"] == 2048


# -- tools beside a JSON schema: llama-server's generic envelope ---------------------------------------------

ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}
ANSWER_FORMAT = {"type": "json_schema", "json_schema": {"name": "final_output", "strict": True, "schema": ANSWER}}
MARKED = "I will not use TOOL_CALL here, ok"  # the emulation's marker inside the answer


def _choices(client, stream: bool, **kwargs) -> dict[int, tuple[str, str, list]]:
    """index -> (finish_reason, content, [(name, arguments)]) of a reply, streamed or not, through the SDK."""
    if not stream:
        return {c.index: (c.finish_reason, c.message.content or "",
                          [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []])
                for c in client.chat.completions.create(**kwargs).choices}
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    out: dict[int, tuple[str, str, list]] = {}
    for index in {c.index for chunk in chunks for c in chunk.choices}:
        mine = [chunk for chunk in chunks if any(c.index == index for c in chunk.choices)]
        for chunk in mine:
            chunk.choices = [c for c in chunk.choices if c.index == index]
        finish = next(c.choices[0].finish_reason for c in mine if c.choices[0].finish_reason)
        calls = streamed_calls(mine)
        out[index] = (finish, "".join(c.choices[0].delta.content or "" for c in mine),
                      [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)])
    return out


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fixture", ["server", "qwen_server"])
def test_auto_tools_beside_response_format_call_a_tool_or_answer_in_the_schema(
        request: pytest.FixtureRequest, fixture: str, stream: bool) -> None:
    """What an openai-agents ``Agent(tools=..., output_type=...)`` sends. Before, the schema's grammar held from the
    first token and no choice could call the tool (0 of 6); now the reply is llama-server's generic envelope, a
    call or the answer. Measured (SmolLM2, emulated and with the Qwen 2.5 template): "Say hello." at temperature
    1 gives both among 4 choices of seeds 1 to 3 (emulated, seed 1: an answer and 3 calls; Qwen, seed 1: answers
    and a list of calls cut by max_tokens, its 2 whole calls kept, streamed or not); the weather question
    at temperature 0 is a call of get_weather for Paris (two alike with the Qwen template's parallel calls)."""
    client = openai_client(request.getfixturevalue(fixture).base_url)
    common = dict(model="m", tools=[WEATHER], tool_choice="auto", response_format=ANSWER_FORMAT, max_tokens=80)
    kinds = set()
    for seed in (1, 2, 3):
        for finish, content, calls in _choices(client, stream, messages=[{"role": "user", "content": "Say hello."}],
                                               n=4, temperature=1.0, seed=seed, **common).values():
            if calls:  # (finish "length": a tiny model may list calls until max_tokens; the whole ones stay)
                assert finish in ("tool_calls", "length") and not content
                for name, arguments in calls:
                    check_call(name, arguments)
                kinds.add("call")
            elif finish == "stop":  # the answer alone, in the schema
                assert not calls
                jsonschema.validate(json.loads(content), ANSWER)
                kinds.add("answer")
        if kinds == {"call", "answer"}:
            break
    assert kinds == {"call", "answer"}
    (finish, content, calls), = _choices(client, stream, messages=ASK, temperature=0, **common).values()
    assert finish == "tool_calls" and not content and calls  # (parallel calls with the Qwen template: 2 alike)
    for name, arguments in calls:
        check_call(name, arguments)
        assert json.loads(arguments)["city"] == "Paris"


@pytest.mark.parametrize("stream", [False, True])
def test_a_constrained_answer_that_says_tool_call_is_the_answer(server, stream: bool) -> None:
    """Emulated tools: the TOOL_CALL parser read the constrained text and cut a JSON string at the marker
    (``{"note": "I will not use \\n}``). Beside auto tools the answer is the envelope's (the same seed's answers
    as above); with ``tool_choice: "none"`` the schema's; and a regex beside auto tools holds from the first
    token, so text in the TOOL_CALL form is its content, never a call."""
    client = openai_client(server.base_url)
    note = {"type": "object", "properties": {"note": {"const": MARKED}}, "required": ["note"],
            "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": note}}
    ask = [{"role": "user", "content": "Say hello."}]
    answers = [content for finish, content, _ in _choices(
        client, stream, model="m", messages=ask, tools=[WEATHER], response_format=fmt, n=4, temperature=1.0, seed=1,
        max_tokens=80).values() if finish == "stop"]
    assert answers and all(json.loads(a) == {"note": MARKED} for a in answers)
    (finish, content, calls), = _choices(client, stream, model="m", messages=ask, tools=[WEATHER], tool_choice="none",
                                         response_format=fmt, temperature=0, max_tokens=80).values()
    assert json.loads(content) == {"note": MARKED} and not calls
    line = 'TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}'
    (finish, content, calls), = _choices(client, stream, model="m", messages=ASK, tools=[WEATHER], temperature=0,
                                         max_tokens=80, extra_body={"guided_regex": re.escape(line)}).values()
    assert (finish, content, calls) == ("stop", line, [])
