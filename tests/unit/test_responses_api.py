"""The Responses API translation (sans-IO): request -> chat request, chat reply / chunks -> response / events.

The shapes are checked against the ``openai`` package's own pydantic types (validated strictly, not
constructed), so the SDK parses what the server sends; the event stream is also fed to the SDK's
stream accumulator (``ResponseStreamState``, what ``client.responses.stream`` runs).
"""

from __future__ import annotations

import json

import msgspec
import pydantic
import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from skippy.engine.chat.capabilities import TemplateCaps
from skippy.engine.chat.emulation import rewrite_history
from skippy.engine.chat.history import normalize_history
from skippy.engine.chat.images import extract_images
from skippy.engine.chat.prepare import _validate_tools
from skippy.engine.errors import EngineError, InvalidRequest, QueueFull
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import message_dicts
from skippy.engine.protocols.responses import translate as rapi
from skippy.engine.protocols.responses.events import ResponseEvents
from skippy.engine.protocols.responses.store import StoredResponse
from skippy.engine.protocols.responses.tools import namespaced_name
from skippy.engine.protocols.responses.types import ResponsesRequest
from skippy.engine.protocols.responses.wire import ResponseObject
from skippy.engine.runtime.media import MARKER

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
DEEP: list = []
for _ in range(70):  # deeper than the chat path's MAX_NESTING (64)
    DEEP = [DEEP]
PNG_URL = "data:image/png;base64,iVBORw0KGgo="  # the chat path reads it; a PNG header is enough here
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def request(**fields) -> ResponsesRequest:
    return msgspec.convert(fields, ResponsesRequest)


def turn(previous: StoredResponse | None = None, **fields) -> rapi.Turn:
    return rapi.prepare(request(**fields), previous, model="m", response_id="resp_1", created_at=1)


def messages(t: rapi.Turn) -> list[dict]:
    return msgspec.to_builtins(t.chat.messages)


def bad(param: str, **fields) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        turn(**fields)
    assert info.value.param == param, info.value
    return info.value


# -- request -> chat request --------------------------------------------------------------------------

def test_a_string_input_is_one_user_message_and_instructions_a_system_message() -> None:
    t = turn(input="Hi", instructions="Be brief.", max_output_tokens=7, temperature=0.5, top_p=0.9,
             reasoning={"effort": "low"}, user="u", prompt_cache_key="k")
    assert messages(t) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    c = t.chat
    assert (c.max_completion_tokens, c.temperature, c.top_p, c.reasoning_effort, c.user, c.prompt_cache_key) == (
        7, 0.5, 0.9, "low", "u", "k")
    assert not c.stream and c.stream_options is None
    assert turn(input="Hi", stream=True).chat.stream_options.include_usage  # the usage chunk ends the stream


def test_items_become_chat_messages() -> None:
    t = turn(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Weather "}, {"type": "input_text", "text": "?"}]},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "I should call."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny and rain."}]},
        {"role": "developer", "content": "Thanks"},
    ])
    calls = [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]
    assert messages(t) == [
        {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "?"}]},
        {"role": "assistant", "reasoning_content": "I should call.", "tool_calls": calls},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        {"role": "tool", "content": "rain", "tool_call_id": "c2"},
        {"role": "assistant", "content": "Sunny and rain."},
        {"role": "developer", "content": "Thanks"},
    ]


def test_a_tool_output_without_an_earlier_call_is_openais_400_naming_its_call_id() -> None:
    """A function_call_output / custom_tool_call_output answers a call earlier in input or in the
    previous_response_id conversation (the Agents SDK's and Codex's flows); any other call_id is OpenAI's 400."""
    err = bad("input[1].call_id", input=[{"role": "user", "content": "x"},
                                         {"type": "function_call_output", "call_id": "nope", "output": "y"}])
    assert err.message.startswith("No tool call found for function call output with call_id 'nope'")
    bad("input[0].call_id", input=[{"type": "function_call_output", "call_id": "c", "output": "y"},  # after: no
                                   {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}])
    err = bad("input[2].call_id", tools=[PATCH], input=[
        {"role": "user", "content": "x"}, {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch",
                                           "input": "diff"},
        {"type": "custom_tool_call_output", "call_id": "d", "output": "ok"}])
    assert "custom tool call output with call_id 'd'" in err.message
    first = turn(input="Weather?", tools=[WEATHER])
    stored = first.stored(first.from_chat(completion(None, calls=[("call_1", "get_weather", '{"city": "Paris"}')],
                                                     finish="tool_calls")))
    answered = turn(stored, previous_response_id="resp_1", tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])  # the stored call counts
    assert messages(answered)[-1] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}
    with pytest.raises(InvalidRequest) as info:
        turn(stored, previous_response_id="resp_1", tools=[WEATHER], input=[
            {"role": "user", "content": "and?"}, {"type": "function_call_output", "call_id": "call_2", "output": "x"}])
    assert info.value.param == "input[1].call_id"


def test_a_function_call_after_assistant_text_joins_that_message() -> None:
    t = turn(input=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "Let me look."},
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}])
    assert messages(t)[-1] == {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


def test_tools_tool_choice_and_text_format_translate() -> None:
    t = turn(input="x", tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
             parallel_tool_calls=False,
             text={"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": True}})
    fn = {k: v for k, v in WEATHER.items() if k != "type"}
    assert t.chat.tools == [{"type": "function", "function": fn}]
    assert t.chat.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert t.chat.parallel_tool_calls is False
    rf = t.chat.response_format
    assert (rf.type, rf.json_schema.name, rf.json_schema.schema, rf.json_schema.strict) == (
        "json_schema", "p", {"type": "object"}, True)
    assert turn(input="x", text={"format": {"type": "json_object"}}).chat.response_format.type == "json_object"
    assert turn(input="x", text={"format": {"type": "text"}}).chat.response_format is None
    other = dict(WEATHER, name="get_time")
    allowed = turn(input="x", tools=[WEATHER, other], tool_choice={
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]})
    assert allowed.chat.tool_choice == "required"
    assert [tool["function"]["name"] for tool in allowed.chat.tools] == ["get_time"]


@pytest.mark.parametrize("param, fields", [
    # a tool type of neither kind (custom tools below; hosted ones are left out, below)
    ("tools[1].type", {"input": "x", "tools": [WEATHER, {"type": "local_calculator", "name": "c"}]}),
    ("tools[0].name", {"input": "x", "tools": [{"type": "function"}]}),
    ("tool_choice", {"input": "x", "tools": [WEATHER], "tool_choice": {"type": "file_search"}}),
    ("tool_choice", {"input": "x", "tools": [WEATHER, {"type": "web_search"}], "tool_choice": {"type": "web_search"}}),
    ("tools[0].name", {"input": "x", "tools": [{"type": "namespace", "description": "d", "tools": [WEATHER]}]}),
    ("tools[0].tools", {"input": "x", "tools": [{"type": "namespace", "name": "ns", "description": "d"}]}),
    ("tools[1].tools[1].type", {"input": "x", "tools": [WEATHER, {
        "type": "namespace", "name": "ns", "description": "d",
        "tools": [WEATHER, {"type": "namespace", "name": "c"}]}]}),
    ("tools[0].tools[0].name", {"input": "x", "tools": [{"type": "namespace", "name": "ns", "description": "d",
                                                         "tools": [{"type": "function"}]}]}),
    ("text.format.type", {"input": "x", "text": {"format": {"type": "xml"}}}),
    ("text.format.schema", {"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}),
    ("input", {"input": []}),
    ("input", {"instructions": "only this"}),
    ("input[0].type", {"input": [{"type": "item_reference", "id": "x"}]}),
    ("input[0].type", {"input": [{"content": "no role, no type"}]}),
    ("input[0].role", {"input": [{"type": "message", "role": "tool", "content": "x"}]}),
    ("input[0].content", {"input": [{"type": "message", "role": "user"}]}),
    ("input[0].content[1].file_id", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "a"}, {"type": "input_file", "file_id": "file_1"}]}]}),
    ("input[0].content[1].type", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "a"}, {"type": "input_audio", "file_id": "file_1"}]}]}),
    ("input[0].content[0].file_id", {"input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file_1", "detail": "auto"}]}]}),
    ("input[0].content[0].image_url", {"input": [{"role": "user", "content": [
        {"type": "input_image", "detail": "auto"}]}]}),
    ("input[0].content[0].detail", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": PNG_URL, "detail": "ultra"}]}]}),
    ("input[0].content[0].type", {"input": [{"role": "developer", "content": [
        {"type": "input_image", "image_url": PNG_URL}]}, {"role": "user", "content": "x"}]}),
    ("input[1].content[0].type", {"input": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "input_image", "image_url": PNG_URL}]}]}),
    ("input[1].call_id", {"input": [{"role": "user", "content": "x"}, {"type": "function_call_output",
                                                                       "output": "y"}]}),
    ("input[0].arguments", {"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}),
    ("metadata", {"input": "x", "metadata": {str(i): "v" for i in range(17)}}),
    ("metadata", {"input": "x", "metadata": {"k" * 65: "v"}}),
    ("background", {"input": "x", "background": True, "store": False}),
    ("stream", {"input": "x", "background": True, "stream": True}),
    ("max_output_tokens", {"input": "x", "max_output_tokens": 0}),
    ("conversation", {"input": "x", "conversation": "conv_1"}),
    ("conversation", {"input": "x", "conversation": {"id": "conv_1"}}),
    ("truncation", {"input": "x", "truncation": "sometimes"}),
    ("text.format", {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"a": DEEP}}}}),
])
def test_bad_input_is_400_naming_the_responses_field(param: str, fields: dict) -> None:
    bad(param, **fields)


def test_a_conversation_is_refused_pointing_to_previous_response_id() -> None:
    """OpenAI's Conversations API is not served: ``conversation`` is a 400 saying so (ignoring it would answer
    without the conversation's context), not an ignored field."""
    error = bad("conversation", input="x", conversation={"id": "conv_1"})
    assert error.code == "unsupported_parameter" and "Conversations API" in error.message
    assert "previous_response_id" in error.message
    assert turn(input="x", conversation=None).chat.messages  # null: absent, as every unset field


def test_chat_param_names_become_responses_names() -> None:
    assert rapi.responses_param("messages[3].content") == "input"
    assert rapi.responses_param("tools[2].function.parameters.required") == "tools[2].parameters.required"
    assert rapi.responses_param("response_format") == "text.format"
    assert rapi.responses_param("max_completion_tokens") == "max_output_tokens"
    assert rapi.responses_param("reasoning_effort") == "reasoning.effort"
    assert rapi.responses_param("tool_choice") == "tool_choice" and rapi.responses_param(None) is None


# -- namespace tools and hosted tools (what Codex sends) ------------------------------------------------

def fn(name: str, **fields) -> dict:
    return {"type": "function", "name": name, "description": f"{name} it", "strict": False,
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]},
            **fields}


AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for sub-agents.",
          "tools": [fn("close_agent"), fn("spawn_agent")]}
CODEX_TOOLS = [fn("exec_command"), AGENTS, {"type": "web_search", "external_web_access": False},
               {"type": "image_generation"}, {"type": "web_search"}]


def test_namespace_functions_are_flattened_and_hosted_tools_left_out() -> None:
    t = turn(input="x", tools=CODEX_TOOLS)
    close = {k: v for k, v in fn("close_agent").items() if k != "type"}
    assert t.chat.tools == [{"type": "function", "function": {k: v for k, v in fn("exec_command").items()
                                                               if k != "type"}},
                            {"type": "function", "function": {**close, "name": "multi_agent_v1__close_agent"}},
                            {"type": "function", "function": {**{k: v for k, v in fn("spawn_agent").items()
                                                                 if k != "type"},
                                                              "name": "multi_agent_v1__spawn_agent"}}]
    assert t.tools.ignored == ("web_search", "image_generation")  # each type once, in request order
    assert t.tools.params == ("tools[0]", "tools[1].tools[0]", "tools[1].tools[1]")
    assert t.tools.namespaced == {"multi_agent_v1__close_agent": ("multi_agent_v1", "close_agent"),
                                  "multi_agent_v1__spawn_agent": ("multi_agent_v1", "spawn_agent")}
    # the echo keeps what was sent, namespace and hosted tools included (the SDK reads it back)
    sdk = sdk_response(t.response([], "completed"))
    assert [tool.type for tool in sdk.tools] == ["function", "namespace", "web_search", "image_generation",
                                                 "web_search"]
    assert [tool.name for tool in sdk.tools[1].tools] == ["close_agent", "spawn_agent"]
    # only hosted tools: the model sees none; a request without tools has none
    assert turn(input="x", tools=[{"type": "web_search"}]).chat.tools == []
    assert turn(input="x").tools.ignored == () and turn(input="x").chat.tools is None


def test_flattened_names_join_with_one_double_underscore() -> None:
    assert namespaced_name("multi_agent_v1", "spawn_agent") == "multi_agent_v1__spawn_agent"
    assert namespaced_name("mcp__docs__", "__search") == "mcp__docs__search"  # Codex's canonical_flat_name


@pytest.mark.parametrize("tools", [
    [fn("ns__f"), {"type": "namespace", "name": "ns", "description": "d", "tools": [fn("f")]}],
    [{"type": "namespace", "name": "ns", "description": "d", "tools": [fn("f")]},
     {"type": "namespace", "name": "ns_", "description": "d", "tools": [fn("f")]}],
])
def test_two_tools_the_model_would_see_under_one_name_are_400(tools: list) -> None:
    err = bad("tools[1].tools[0].name", input="x", tools=tools)
    assert "'ns__f'" in err.message and "tools[" in err.message


def test_the_same_function_name_in_two_namespaces_is_two_tools() -> None:
    t = turn(input="x", tools=[{"type": "namespace", "name": "a", "description": "d", "tools": [fn("search")]},
                               {"type": "namespace", "name": "b", "description": "d", "tools": [fn("search")]}])
    assert [tool["function"]["name"] for tool in t.chat.tools] == ["a__search", "b__search"]
    assert t.tools.call("b__search") == ("search", "b")
    assert t.tools.call("search") == ("search", None)  # ambiguous bare name: left as the model wrote it


def test_a_chat_error_about_a_flattened_tool_names_its_responses_field() -> None:
    broken = fn("spawn_agent", parameters={"type": "object", "required": "target"})
    t = turn(input="x", tools=[{"type": "web_search"}, fn("exec_command"), {**AGENTS, "tools": [fn("close_agent"),
                                                                                               broken]}])
    with pytest.raises(InvalidRequest) as info:  # the chat path's check, as it runs when the request is prepared
        _validate_tools(t.chat.tools, t.chat.tool_choice)
    assert info.value.param == "tools[2].function.parameters.required"  # chat's third tool
    assert t.rename(info.value).param == "tools[2].tools[1].parameters.required"
    assert t.rename(InvalidRequest("x", param="tools[0].function")).param == "tools[1]"


def test_tool_choice_names_a_namespaced_function_every_way() -> None:
    forced = {"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}
    for choice in ({"type": "function", "name": "multi_agent_v1__spawn_agent"},
                   {"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"},
                   {"type": "function", "name": "spawn_agent"}):
        assert turn(input="x", tools=CODEX_TOOLS, tool_choice=choice).chat.tool_choice == forced
    assert turn(input="x", tools=CODEX_TOOLS, tool_choice={"type": "function", "name": "exec_command"}
                ).chat.tool_choice == {"type": "function", "function": {"name": "exec_command"}}
    allowed = turn(input="x", tools=CODEX_TOOLS, tool_choice={"type": "allowed_tools", "mode": "required", "tools": [
        {"type": "function", "name": "close_agent", "namespace": "multi_agent_v1"}, {"type": "web_search"}]})
    assert allowed.chat.tool_choice == "required"
    assert [tool["function"]["name"] for tool in allowed.chat.tools] == ["multi_agent_v1__close_agent"]


def test_a_namespaced_call_comes_back_with_its_name_and_namespace() -> None:
    t = turn(input="x", tools=CODEX_TOOLS)
    r = t.from_chat(completion(None, calls=[("call_1", "multi_agent_v1__close_agent", '{"target": "a"}'),
                                            ("call_2", "exec_command", '{"target": "b"}'),
                                            ("call_3", "spawn_agent", "{}")], finish="tool_calls"))
    sdk = sdk_response(r)
    assert [(o.name, o.namespace, o.call_id) for o in sdk.output] == [
        ("close_agent", "multi_agent_v1", "call_1"), ("exec_command", None, "call_2"),
        ("spawn_agent", "multi_agent_v1", "call_3")]  # a bare name only one namespace has is mapped too
    assert "namespace" not in msgspec.to_builtins(r.output[1])  # a plain function's call has no namespace key
    # the stored conversation keeps the namespace, and the next turn shows the model the name it called
    kept = t.stored(r)
    assert msgspec.to_builtins(kept.items[1])["namespace"] == "multi_agent_v1"
    follow = turn(kept, previous_response_id="resp_1", tools=CODEX_TOOLS, input=[
        {"type": "function_call_output", "call_id": "call_1", "output": "closed"}])
    calls = [c["function"]["name"] for c in messages(follow)[1]["tool_calls"]]
    assert calls == ["multi_agent_v1__close_agent", "exec_command", "multi_agent_v1__spawn_agent"]
    # items sent back by the client, as Codex does (store: false), map the same way
    sent = turn(input=[{"role": "user", "content": "x"},
                       {"type": "function_call", "call_id": "c", "name": "close_agent", "namespace": "multi_agent_v1",
                        "arguments": "{}"},
                       {"type": "function_call_output", "call_id": "c", "output": "ok"}], tools=CODEX_TOOLS)
    assert messages(sent)[1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"


def test_a_streamed_namespaced_call_carries_its_namespace_in_every_event() -> None:
    t = turn(input="x", tools=CODEX_TOOLS)
    events, ev = run(t, [chunk(calls=[(0, "call_a", "multi_agent_v1__spawn_agent", '{"tar')]),
                         chunk(calls=[(0, None, None, 'get": "w"}')]), chunk(finish="tool_calls")])
    items = [e.item for e in events if e.type in ("response.output_item.added", "response.output_item.done")]
    assert [(i.name, i.namespace, i.arguments) for i in items] == [
        ("spawn_agent", "multi_agent_v1", ""), ("spawn_agent", "multi_agent_v1", '{"target": "w"}')]
    state = check_with_sdk(events)
    final = state._completed_response
    assert (final.output[0].name, final.output[0].namespace) == ("spawn_agent", "multi_agent_v1")
    assert ev.final.output[0].namespace == "multi_agent_v1"


def test_previous_response_conversation_comes_first_without_its_instructions() -> None:
    first = turn(input="What is 2+2?", instructions="Be brief.")
    reply = first.from_chat(completion("4"))
    stored = first.stored(reply)
    follow = turn(stored, input="And 3+3?", instructions="Answer with a number.", previous_response_id="resp_1")
    assert messages(follow) == [{"role": "system", "content": "Answer with a number."},
                                {"role": "user", "content": "What is 2+2?"},
                                {"role": "assistant", "content": "4"},
                                {"role": "user", "content": "And 3+3?"}]
    # a bad item of this request is named by its index in this request's input, not the conversation's
    with pytest.raises(InvalidRequest) as info:
        turn(stored, input=[{"type": "nope"}])
    assert info.value.param == "input[0].type"


def image(url: str = PNG_URL, **fields) -> dict:
    return {"type": "input_image", "image_url": url, **fields}


def test_input_image_parts_become_image_url_parts_in_place() -> None:
    t = turn(instructions="Be brief.", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Compare"}, image(detail="low"), image()]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [image(), {"type": "input_text", "text": "and this"}]}])
    assert messages(t)[1] == {"role": "user", "content": [
        {"type": "text", "text": "Compare"}, {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": PNG_URL}}]}
    assert messages(t)[3]["content"][0] == {"type": "image_url", "image_url": {"url": PNG_URL}}
    assert t.images == ("input[0].content[1]", "input[0].content[2]", "input[2].content[0]")
    # the chat path reads them: three images, their markers in place
    chat_messages, images, _ = extract_images(message_dicts(t.chat.messages), vision=True)
    assert len(images) == 3 and chat_messages[3]["content"][0] == {"type": "text", "text": MARKER}


def test_a_function_call_outputs_images_become_image_url_parts_of_the_tool_message() -> None:
    t = turn(input=[
        {"role": "user", "content": "Take a screenshot"},
        {"type": "function_call", "call_id": "c1", "name": "screenshot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "the screen:"}, image(detail="high")]}])
    assert messages(t)[2] == {"role": "tool", "tool_call_id": "c1", "content": [
        {"type": "text", "text": "the screen:"},
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}}]}
    assert t.images == ("input[2].output[1]",)
    _, images, _ = extract_images(message_dicts(t.chat.messages), vision=True)
    assert len(images) == 1


def test_images_of_a_stored_conversation_come_again_and_are_named_by_previous_response_id() -> None:
    first = turn(input=[{"role": "user", "content": [image(), {"type": "input_text", "text": "What is it?"}]}])
    follow = turn(first.stored(first.from_chat(completion("A dot."))), previous_response_id="resp_1",
                  input=[{"role": "user", "content": [{"type": "input_text", "text": "And this?"}, image()]}])
    assert [m["content"][0]["type"] if isinstance(m["content"], list) else "str" for m in messages(follow)] == [
        "image_url", "str", "text"]
    assert follow.images == ("previous_response_id", "input[0].content[1]")


@pytest.mark.parametrize(("url", "vision", "code", "words"), [
    (PNG_URL, False, "media_not_supported", "--mmproj"),
    ("data:image/png;base64,@@@", True, None, "not valid base64"),
    ("https://example.com/cat.png", True, "image_url_not_supported", "not fetched"),
])
def test_the_chat_paths_refusal_of_an_image_names_the_input_part(url: str, vision: bool, code: str | None,
                                                                 words: str) -> None:
    t = turn(instructions="s", input=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                      {"role": "user", "content": [{"type": "input_text", "text": "x"}, image(),
                                                                   image(url)]}])
    with pytest.raises(InvalidRequest) as info:
        extract_images(message_dicts(t.chat.messages), vision=vision)
    n = 2 if vision else 1  # without vision the first image is refused, else the bad one
    assert info.value.param == f"messages[3].content[{n}]"
    err = t.rename(info.value)
    where = f"input[2].content[{n}]"
    assert err.param == where and err.message.startswith(where + ": ") and words in err.message
    assert "messages[" not in err.message and str(err) == err.message
    if code is not None:
        assert err.code == code
    # another field's error is renamed as before
    assert t.rename(InvalidRequest("bad", param="max_completion_tokens")).param == "max_output_tokens"


def test_the_chat_paths_errors_name_the_input_item_not_the_chat_message() -> None:
    """``messages[3].tool_calls[0]: function.arguments ...`` (the chat path's history checks) is the Responses
    item it came from, ``input[2].arguments``; a message as ``input[i]``, its content as a tool output's
    ``output``; the instructions as ``instructions``."""
    t = turn(instructions="be brief", input=[
        {"role": "user", "content": "x"}, {"role": "user", "content": "y"},
        {"type": "function_call", "call_id": "c0", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{bad"},
        {"type": "function_call_output", "call_id": "c0", "output": "z"},
        {"type": "function_call_output", "call_id": "c1", "output": "z"}])
    dicts = message_dicts(t.chat.messages)
    with pytest.raises(InvalidRequest) as info:  # the template path
        normalize_history(dicts, TemplateCaps())
    assert info.value.param == "messages[3].tool_calls[1].function.arguments"
    err = t.rename(info.value)
    assert err.param == "input[3].arguments" and err.message.startswith("input[3].arguments is not valid JSON")
    assert "messages[" not in err.message and str(err) == err.message
    with pytest.raises(InvalidRequest) as info:  # the tool emulation's
        rewrite_history(dicts, [{"type": "function", "function": {"name": "f"}}])
    err = t.rename(info.value)
    assert err.param == "input[3].arguments" and err.message.startswith("input[3].arguments is not valid JSON")
    for chat, ours in (("messages[0].content", "instructions"), ("messages[2]", "input[1]"),
                       ("messages[4].content", "input[4].output"), ("messages[5].content[0]", "input[5].output[0]"),
                       ("messages[9]", "input")):  # no such message: the whole input, as before
        assert t.rename(InvalidRequest(f"{chat}: bad", param=chat)).param == ours


def test_an_assistant_refusal_part_is_the_text_of_the_refusal() -> None:
    """A conversation replayed from OpenAI: its assistant message holds a ``refusal`` part (OpenAI's output
    message: ``output_text`` | ``refusal``); the model sees the refusal as what the assistant said."""
    t = turn(input=[{"role": "user", "content": "hi"},
                    {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't"}]},
                    {"role": "user", "content": "ok"}])
    assert [(m["role"], m["content"]) for m in messages(t)] == [("user", "hi"), ("assistant", "I can't"),
                                                                 ("user", "ok")]
    assert "refusal" in bad("input[0].content[0].type", input=[{"role": "user", "content": [
        {"type": "refusal", "refusal": "no"}]}]).message
    bad("input[0].content[0].refusal", input=[{"role": "assistant", "content": [{"type": "refusal"}]},
                                               {"role": "user", "content": "x"}])


def test_a_tool_choice_that_is_no_choice_is_named_in_the_responses_shape() -> None:
    err = bad("tool_choice", input="x", tools=[WEATHER], tool_choice="get_weather")
    assert '{"type": "function", "name": ...}' in err.message and '"function": {' not in err.message
    assert "'get_weather'" in err.message
    for ok in ("none", "auto", "required"):
        assert turn(input="x", tools=[WEATHER], tool_choice=ok).chat.tool_choice == ok


def test_an_input_of_reasoning_only_says_what_is_missing() -> None:
    err = bad("input", input=[{"type": "reasoning", "summary": [],
                               "content": [{"type": "reasoning_text", "text": "x"}]}])
    assert "reasoning items only" in err.message and "following item" in err.message


def test_too_many_images_names_the_first_image_past_the_limit() -> None:
    t = turn(input=[{"role": "user", "content": [image()] * 10}, {"role": "user", "content": [image()] * 10}])
    with pytest.raises(InvalidRequest) as info:
        extract_images(message_dicts(t.chat.messages), vision=True)
    err = t.rename(info.value)
    assert err.code == "too_many_images" and err.param == "input[1].content[6]"


# -- truncation: "auto" -----------------------------------------------------------------------------

def items(*kinds: str) -> list[dict]:
    """Input items by shorthand: ``u`` user, ``a`` assistant, ``s`` system, ``r`` reasoning, ``cN`` a
    function_call of call_id N, ``oN`` its output."""
    out: list[dict] = []
    for i, k in enumerate(kinds):
        if k in ("u", "a", "s"):
            out.append({"role": {"u": "user", "a": "assistant", "s": "system"}[k], "content": f"{k}{i}"})
        elif k == "r":
            out.append({"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]})
        elif k[0] == "c":
            out.append({"type": "function_call", "call_id": k[1:], "name": "f", "arguments": "{}"})
        else:
            out.append({"type": "function_call_output", "call_id": k[1:], "output": "z"})
    return out


def cuts(*kinds: str) -> tuple[int, ...]:
    return rapi.truncation_cuts([msgspec.convert(i, rapi.ResponseInputItem) for i in items(*kinds)])


def test_truncation_cuts_keep_each_call_with_its_outputs_and_something_to_answer() -> None:
    assert cuts("u", "a", "u") == (0, 1, 2)
    # parallel calls 1 and 2, their outputs after both: no cut between a call and its output
    assert cuts("u", "c1", "c2", "o1", "o2", "a", "u") == (0, 1, 5, 6)
    assert cuts("u", "c1", "o1", "c2", "o2") == (0, 1, 3)  # an agent's turn: pair by pair
    assert cuts("u", "c1", "o1", "c1b", "u", "o1b") == (0, 1, 3)  # a call kept with an output however far
    assert cuts("u", "a", "u", "r", "s") == (0, 1, 2)  # the last thing to answer stays
    assert cuts("u") == (0,) and cuts("r") == (0,)


def drive(search, prompt_of) -> tuple[int, list[int]]:
    """Run a :func:`truncation_search` with ``prompt_of(cut)`` tokens per cut: (the chosen cut, the cuts it
    measured in order)."""
    asked = []
    try:
        cut = next(search)
        while True:
            asked.append(cut)
            cut = search.send(prompt_of(cut))
    except StopIteration as done:
        return done.value, asked


def test_truncation_search_bisects_for_the_fewest_items_dropped() -> None:
    many = tuple(range(0, 1000))  # item i holds 10 tokens; instructions 5
    size = lambda cut: 5 + 10 * (1000 - cut)  # noqa: E731
    cut, asked = drive(rapi.truncation_search(many, 2048, 100), size)
    assert size(cut) + 100 <= 2048 < size(cut - 1) + 100 and cut == 806
    assert len(asked) <= 13 and len(set(asked)) == len(asked)  # log2(1000) + 2, each measured once
    assert drive(rapi.truncation_search(many, 20000, 100), size) == (0, [0])  # it fits: one measurement
    assert drive(rapi.truncation_search(many, 2048, None), size)[0] == 796  # room for one token, as chat
    # no cut leaves room for max_output_tokens: the prompt alone must fit (the chat path clamps the output)
    assert drive(rapi.truncation_search(many, 2048, 10**30), size)[0] == 796
    assert drive(rapi.truncation_search(many, 2048, 10**30), lambda cut: 100)[0] == 0
    # not even the last cut fits: it is served, and the chat path's 400 names its prompt
    assert drive(rapi.truncation_search(many, 8, 1), size)[0] == 999
    assert drive(rapi.truncation_search((0,), 8, 1), size) == (0, [0])


def test_a_truncated_turn_drops_the_first_items_keeps_the_instructions_and_names_the_rest() -> None:
    first = turn(instructions="i1", input=items("u", "c1", "o1", "a"))
    previous = first.stored(first.response([], "completed"))
    t = turn(previous, instructions="be brief", input=items("u", "c2", "o2", "u"), previous_response_id="resp_1")
    n = len(t.history)
    assert n == 4 and rapi.truncation_cuts(t.history + t.input) == (0, 1, 3, 4, 5, 7)
    short = t.truncated(5)
    assert [(m["role"], m.get("tool_call_id")) for m in messages(short)] == [
        ("system", None), ("assistant", None), ("tool", "2"), ("user", None)]
    assert messages(short)[0]["content"] == "be brief" and short.dropped == 5
    assert short.rename(InvalidRequest("x", param="messages[1].tool_calls[0].function.arguments")).param == \
        "input[1].arguments"
    kept = [(i.role, i.content, i.call_id) for i in short.stored(short.response([], "completed")).items]
    assert kept == [(i.role, i.content, i.call_id) for i in t.history + t.input]  # stored whole
    assert messages(t.truncated(3))[1] == {"role": "assistant", "content": "a3"}  # stored items as before
    assert t.truncated(3).rename(InvalidRequest("x", param="messages[1]")).param == "previous_response_id"
    assert t.rename(InvalidRequest("messages[1].content[0].text: bad", param="messages[1].content[0].text")).param \
        == "previous_response_id.text"


# -- chat reply -> response ------------------------------------------------------------------------

def completion(content: str | None = "", *, calls=(), reasoning: str = "", finish: str = "stop",
               prompt: int = 10, cached: int = 4, n: int = 5) -> wire.ChatCompletion:
    msg = wire.ChatMessage(content=content, reasoning_content=reasoning or wire.UNSET,
                           tool_calls=[wire.ToolCall(id=i, function=wire.FunctionCall(name=nm, arguments=a))
                                       for i, nm, a in calls] or wire.UNSET)
    usage = wire.Usage(prompt_tokens=prompt, completion_tokens=n, total_tokens=prompt + n,
                       prompt_tokens_details=wire.PromptTokensDetails(cached_tokens=cached))
    return wire.ChatCompletion(id="chatcmpl-1", created=1, model="m",
                               choices=[wire.ChatChoice(message=msg, finish_reason=finish)],
                               usage=usage, timings=wire.Timings.of(prompt, 1.0, n, 1.0))


def sdk_response(obj: ResponseObject) -> Response:
    return Response.model_validate(msgspec.to_builtins(obj), strict=False)


def test_reply_items_and_usage_follow_the_sdk_types() -> None:
    t = turn(input="x", tools=[WEATHER], metadata={"a": "b"}, text={"format": {"type": "json_object"}})
    r = t.from_chat(completion("Let me check.", calls=[("call_1", "get_weather", '{"city": "Paris"}')],
                               reasoning="think", finish="tool_calls"), reasoning_tokens=2)
    sdk = sdk_response(r)
    assert [o.type for o in sdk.output] == ["reasoning", "message", "function_call"]
    assert sdk.output[0].content[0].text == "think" and sdk.output[0].summary == []
    assert sdk.output_text == "Let me check."
    fc = sdk.output[2]
    assert (fc.call_id, fc.name, fc.arguments, fc.status) == ("call_1", "get_weather", '{"city": "Paris"}',
                                                              "completed")
    assert fc.id.startswith("fc_") and sdk.output[1].id.startswith("msg_") and sdk.output[0].id.startswith("rs_")
    assert sdk.status == "completed" and sdk.incomplete_details is None and sdk.error is None
    u = sdk.usage
    assert (u.input_tokens, u.input_tokens_details.cached_tokens, u.output_tokens,
            u.output_tokens_details.reasoning_tokens, u.total_tokens) == (10, 4, 5, 2, 15)
    assert sdk.id == "resp_1" and sdk.model == "m" and sdk.metadata == {"a": "b"}
    assert sdk.tools[0].name == "get_weather" and sdk.text.format.type == "json_object"
    assert sdk.store is True and sdk.parallel_tool_calls is True and sdk.tool_choice == "auto"


def test_length_finish_is_incomplete_and_a_call_only_reply_has_no_message() -> None:
    r = sdk_response(turn(input="x").from_chat(completion("cut sho", finish="length")))
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[-1].status == "incomplete"
    assert r.completed_at is None  # OpenAI: "only present when the status is completed"
    assert sdk_response(turn(input="x").from_chat(completion("done"))).completed_at is not None
    calls = sdk_response(turn(input="x").from_chat(completion(None, calls=[("c", "f", "{}")], finish="tool_calls")))
    assert [o.type for o in calls.output] == ["function_call"]
    empty = sdk_response(turn(input="x").from_chat(completion(None)))
    assert [o.type for o in empty.output] == ["message"] and empty.output_text == ""
    # a second, parallel call cut by the limit is left out of the reply: the whole first one stays completed
    cut = sdk_response(turn(input="x").from_chat(completion("I'll check.", calls=[("c", "f", '{"city": "Paris"}')],
                                                           finish="length")))
    assert cut.status == "incomplete" and [(o.type, o.status) for o in cut.output] == [
        ("message", "completed"), ("function_call", "completed")]


def test_stored_items_replay_the_output() -> None:
    t = turn(input="x")
    r = t.from_chat(completion("hi", calls=[("c", "f", "{}")], reasoning="r", finish="tool_calls"))
    kept = t.stored(r)
    items = [msgspec.to_builtins(i) for i in kept.items]
    assert [i.pop("id")[:3] for i in items] == ["msg", "rs_", "msg", "fc_"]  # each item gets an id
    assert items == [{"type": "message", "role": "user", "content": "x"},
                     {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "r"}]},
                     {"type": "message", "role": "assistant", "content": "hi"},
                     {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]
    assert [i.id for i in kept.items[1:]] == [o.id for o in r.output] and kept.n_input == 1


# -- chunks -> events --------------------------------------------------------------------------------

def chunk(*, content=None, reasoning=None, calls=None, finish=None, usage=None) -> wire.ChatCompletionChunk:
    if usage is not None:
        return wire.ChatCompletionChunk(id="c", created=1, model="m", choices=[], usage=usage)
    tcs = [wire.ToolCallDelta(index=i, id=cid if cid else wire.UNSET, type="function" if cid else wire.UNSET,
                              function=wire.FunctionCallDelta(name=nm if nm else wire.UNSET, arguments=args))
           for i, cid, nm, args in calls or []]
    delta = wire.ChatDelta(content=content if content is not None else wire.UNSET,
                           reasoning_content=reasoning if reasoning is not None else wire.UNSET,
                           tool_calls=tcs or wire.UNSET)
    return wire.ChatCompletionChunk(id="c", created=1, model="m",
                                    choices=[wire.ChatChunkChoice(delta=delta, finish_reason=finish)])


class RequestTimeout(EngineError):  # as skippy.http.context's (the engine layer may not import it)
    status = 504
    code = "request_timeout"


USAGE = wire.Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15)


def run(t: rapi.Turn, chunks: list[wire.ChatCompletionChunk],
        usage: wire.Usage = USAGE) -> tuple[list, ResponseEvents]:
    ev = ResponseEvents(t)
    out = ev.start()
    for c in chunks:
        out += ev.feed(c)
    out += ev.finish(usage)
    return out, ev


def check_with_sdk(events: list) -> object:
    """Every event validates as the SDK's type; the SDK's stream accumulator takes them all and ends with
    the same response as the last event carries."""
    state = ResponseStreamState(input_tools=[WEATHER], text_format=omit)
    for e in events:
        state.handle_event(EVENT.validate_python(msgspec.to_builtins(e)))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return state


def test_text_stream_events_in_openai_order() -> None:
    t = turn(input="x")
    events, ev = run(t, [chunk(content=""), chunk(reasoning="hm"), chunk(content="Hel"), chunk(content="lo"),
                         chunk(finish="stop")])
    assert [e.type for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    final = events[-1].response
    assert final is ev.final and final.status == "completed" and final.usage.output_tokens == 5
    assert [o.content[0].text for o in final.output] == ["hm", "Hello"]
    assert events[12].text == "Hello" and events[14].item.status == "completed"
    check_with_sdk(events)
    # the same items as the non-streamed reply of the same text (ids aside)
    whole = t.from_chat(completion("Hello", reasoning="hm"))
    strip = lambda r: [{k: v for k, v in msgspec.to_builtins(o).items() if k != "id"} for o in r.output]  # noqa: E731
    assert strip(final) == strip(whole)


def test_tool_call_stream_and_incomplete_finish() -> None:
    t = turn(input="x", tools=[WEATHER])
    events, ev = run(t, [chunk(content="Sure."), chunk(calls=[(0, "call_a", "get_weather", '{"ci')]),
                         chunk(calls=[(0, None, None, 'ty": "Paris"}')]),
                         chunk(calls=[(1, "call_b", "get_weather", '{"city": "Rome"}')]), chunk(finish="tool_calls")])
    kinds = [e.type for e in events]
    assert kinds.count("response.function_call_arguments.delta") == 3
    dones = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [d.arguments for d in dones] == ['{"city": "Paris"}', '{"city": "Rome"}']
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [(i.call_id, i.name, i.arguments) for i in added[1:]] == [("call_a", "get_weather", ""),
                                                                       ("call_b", "get_weather", "")]
    state = check_with_sdk(events)
    final = state._completed_response
    assert [o.type for o in final.output] == ["message", "function_call", "function_call"]
    assert final.output[1].arguments == '{"city": "Paris"}'

    cut, _ = run(turn(input="x"), [chunk(content="abc"), chunk(finish="length")])
    assert cut[-1].type == "response.incomplete"
    assert cut[-1].response.incomplete_details.reason == "max_output_tokens"
    assert cut[-2].item.status == "incomplete"
    check_with_sdk(cut)
    # the limit after a whole call, and inside a second one: streamed as the chat reply has them (the whole call
    # completed, the cut one, whose fragments went out, left out of the final and stored response; it was kept
    # with its unfinished arguments, and every previous_response_id follow-up was a 400)
    for tail, kept in (([], ["completed"]), ([chunk(calls=[(1, "call_b", "get_weather", '{"city": "Ro')])],
                                             ["completed"])):
        t = turn(input="x", tools=[WEATHER])
        events, ev = run(t, [chunk(calls=[(0, "call_a", "get_weather", '{"city": "Paris"}')]), *tail,
                             chunk(finish="length")])
        final = events[-1].response
        output = msgspec.to_builtins(final.output)
        assert final.status == "incomplete" and [(o["type"], o["status"]) for o in output] == [
            ("function_call", s) for s in kept]
        assert output[0]["arguments"] == '{"city": "Paris"}' and ev.final == final
        stored = [o for o in msgspec.to_builtins(t.stored(ev.final).items) if o.get("type") == "function_call"]
        assert [o["arguments"] for o in stored] == ['{"city": "Paris"}']  # what a follow-up sends back
        check_with_sdk(events)


def test_nothing_generated_still_gives_one_empty_message_and_failed_is_an_event() -> None:
    events, _ = run(turn(input="x"), [chunk(content=""), chunk(finish="stop")])
    assert [e.type for e in events][2:] == ["response.output_item.added", "response.content_part.added",
                                            "response.output_text.done", "response.content_part.done",
                                            "response.output_item.done", "response.completed"]
    check_with_sdk(events)
    ev = ResponseEvents(turn(input="x"))
    head = ev.start() + ev.feed(chunk(content="a"))
    failed = ev.failed(QueueFull("busy"))
    assert failed.type == "response.failed" and failed.sequence_number == len(head)
    sdk = EVENT.validate_python(msgspec.to_builtins(failed))
    assert sdk.response.status == "failed" and sdk.response.error.code == "rate_limit_exceeded"
    assert sdk.response.error.message == "busy" and sdk.response.output[0].type == "message"
    # what a stored stream keeps: the failed response with the output so far (the open item's text kept)
    assert ev.final is failed.response and ev.final.output[0].content[0].text == "a"
    assert ev.final.output[0].status == "incomplete"
    late = ev.failed(RequestTimeout("too slow"))
    assert late.response.error.code == "server_error" and late.response.error.message == "too slow (request_timeout)"




# -- custom tools ------------------------------------------------------------------------------------

PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch."}
LARK = {**PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /.+/'}}
DIGITS = {"type": "custom", "name": "pin", "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{4}"}}


def test_a_custom_tool_is_a_function_of_one_text_input_and_its_format_is_kept() -> None:
    t = turn(input="x", tools=[PATCH, LARK | {"name": "apply_lark"}, DIGITS, {**fn("f")}])
    free, lark, pin, plain = (tool["function"] for tool in t.chat.tools)
    assert free == {"name": "apply_patch", "description": "Edit files with a patch.", "parameters": {
        "type": "object", "properties": {"input": {"type": "string", "description": "The tool's input, as free-form "
                                                   "text"}}, "required": ["input"], "additionalProperties": False}}
    assert lark["description"].endswith('Lark grammar:\nstart: "*** Begin Patch" /.+/')  # shown, not enforced
    assert pin["parameters"]["properties"]["input"]["pattern"] == "^([0-9]{4})$"  # enforced as a JSON pattern
    assert plain["name"] == "f"
    assert t.tools.custom == {"apply_patch", "apply_lark", "pin"} and t.tools.unenforced == ("apply_lark",)
    _validate_tools(t.chat.tools, t.chat.tool_choice)  # the chat path takes them
    named = turn(input="x", tools=[PATCH], tool_choice={"type": "custom", "name": "apply_patch"})
    assert named.chat.tool_choice == {"type": "function", "function": {"name": "apply_patch"}}
    allowed = turn(input="x", tools=[PATCH, fn("f")], tool_choice={
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "custom", "name": "apply_patch"}]})
    assert [tool["function"]["name"] for tool in allowed.chat.tools] == ["apply_patch"]
    bad("tools[0].format", input="x", tools=[{**PATCH, "format": {"type": "grammar", "syntax": "ebnf",
                                                                  "definition": "x"}}])
    bad("tools[0].name", input="x", tools=[{"type": "custom"}])
    anchored = turn(input="x", tools=[{**DIGITS, "format": {**DIGITS["format"], "definition": "^ab+$"}}])
    assert anchored.chat.tools[0]["function"]["parameters"]["properties"]["input"]["pattern"] == "^(ab+)$"
    err = bad("tools[0].format.definition", input="x", tools=[
        {**LARK, "format": {"type": "grammar", "syntax": "lark", "definition": "start: patch_body"}}])
    assert 'unknown name: "patch_body"' in err.message  # llguidance's own words
    # a regex the grammar cannot take is named by the custom tool's format
    err = InvalidRequest("cannot turn this JSON schema into a grammar", param="tools[2].function.parameters")
    assert t.rename(err).param == "tools[2].format"
    assert t.rename(InvalidRequest("x", param="tools[3].function.parameters")).param == "tools[3].parameters"


def test_a_custom_tool_call_comes_back_with_its_text_and_goes_back_as_the_argument() -> None:
    t = turn(input="Fix it", tools=[PATCH, WEATHER])
    patch = "*** Begin Patch\n*** Update File: a.py\n-x = 1\n+x = 2\n*** End Patch"
    r = t.from_chat(completion(None, calls=[("call_1", "apply_patch", json.dumps({"input": patch})),
                                            ("call_2", "get_weather", '{"city": "Paris"}')], finish="tool_calls"))
    sdk = sdk_response(r)
    assert [o.type for o in sdk.output] == ["custom_tool_call", "function_call"]
    assert (sdk.output[0].name, sdk.output[0].input, sdk.output[0].call_id) == ("apply_patch", patch, "call_1")
    assert r.output[0].id.startswith("ctc_")
    # stored, then continued with the tool's output: the model sees its own call and the result
    follow = turn(t.stored(r), previous_response_id="resp_1", tools=[PATCH, WEATHER], input=[
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Done"},
        {"type": "function_call_output", "call_id": "call_2", "output": "sunny"}])
    assistant, done, sunny = messages(follow)[1:]
    assert assistant["tool_calls"][0]["function"] == {"name": "apply_patch", "arguments": json.dumps({"input": patch})}
    assert (done["role"], done["tool_call_id"], done["content"]) == ("tool", "call_1", "Done")
    # items a client sends back itself (store: false)
    sent = turn(tools=[PATCH], input=[{"role": "user", "content": "x"}, {
        "type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "diff"},
        {"type": "custom_tool_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "ok"}]}])
    assert messages(sent)[1]["tool_calls"][0]["function"]["arguments"] == '{"input": "diff"}'
    assert messages(sent)[2]["content"] == "ok"
    bad("input[1].input", tools=[PATCH], input=[{"role": "user", "content": "x"}, {
        "type": "custom_tool_call", "call_id": "c", "name": "apply_patch"}])
    # a model that wrote no such object: its arguments text is the input
    odd = t.from_chat(completion(None, calls=[("call_3", "apply_patch", "not json")], finish="tool_calls"))
    assert odd.output[0].input == "not json"


def test_a_streamed_custom_tool_call_gives_its_input_events() -> None:
    t = turn(input="x", tools=[PATCH])
    events, ev = run(t, [chunk(calls=[(0, "call_a", "apply_patch", '{"input": "*** Begin')]),
                         chunk(calls=[(0, None, None, ' Patch\\n"}')]), chunk(finish="tool_calls")])
    kinds = [e.type for e in events]
    assert kinds[2:] == ["response.output_item.added", "response.custom_tool_call_input.delta",
                         "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
                         "response.output_item.done", "response.completed"]
    assert events[2].item.input == "" and [events[3].delta, events[4].delta] == ["*** Begin", " Patch\n"]
    assert events[5].input == "*** Begin Patch\n" and events[6].item.input == "*** Begin Patch\n"
    state = check_with_sdk(events)
    final = state._completed_response
    assert final.output[0].type == "custom_tool_call" and final.output[0].input == "*** Begin Patch\n"
    assert ev.final.output[0].id == events[2].item.id


@pytest.mark.parametrize(("pieces", "deltas", "final"), [
    # escapes split across pieces: a lone backslash and a high surrogate wait for the rest
    (['{"input": "a\\', 'nb \\u00e9', '\\ud83d', '\\ude00 \\"q\\" end"}'],
     ["a", "\nb \u00e9", "\U0001F600 \"q\" end"], "a\nb \u00e9\U0001F600 \"q\" end"),
    (['{', '"input"', ': "', 'x', '"}'], ["x"], "x"),
    (['{"input": "cut', " off\\"], ["cut", " off"], "cut off"),  # cut by the token limit: the text so far
    (['{"other": 1}'], ['{"other": 1}'], '{"other": 1}'),  # not the JSON asked for: its text, at the end
    (['{"input": "line one\n', 'line two"}'], ["line one\n", "line two"], "line one\nline two"),  # raw newline
])
def test_a_custom_calls_input_streams_as_it_is_decoded(pieces: list[str], deltas: list[str], final: str) -> None:
    t = turn(input="x", tools=[PATCH])
    calls = [(0, "c", "apply_patch", pieces[0])] + [(0, None, None, p) for p in pieces[1:]]
    events, ev = run(t, [chunk(calls=[c]) for c in calls] + [chunk(finish="tool_calls")])
    assert [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"] == deltas
    assert [e.input for e in events if e.type == "response.custom_tool_call_input.done"] == [final]
    assert ev.final.output[0].input == final == rapi.custom_input("".join(pieces))
    check_with_sdk(events)
