"""Anthropic Messages <-> OpenAI chat translation (sans-IO): request mapping, replies, stream events, errors."""

from __future__ import annotations

import json

import msgspec
import pytest

from skippy.engine.chat.formats.emulated import EmulatedToolParser
from skippy.engine.chat.images import MAX_IMAGE_BYTES, extract_images
from skippy.engine.errors import InvalidRequest
from skippy.engine.output.generation import Done, Generation, Piece
from skippy.engine.protocols.anthropic import translate as tr
from skippy.engine.protocols.anthropic import wire as aw
from skippy.engine.protocols.anthropic.types import CountTokensRequest, MessagesRequest
from skippy.engine.protocols.base import decode_request
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.translate import ChatReply
from skippy.engine.protocols.openai.types import message_dicts
from skippy.engine.runtime.media import MARKER
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.events import FinishEvent, TokenEvent

WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def decode(body: dict, type_: type = MessagesRequest):
    return decode_request(json.dumps(body).encode(), type_)


def chat(body: dict, type_: type = MessagesRequest):
    return tr.to_chat_request(decode({"max_tokens": 64, **body} if type_ is MessagesRequest else body, type_))


# -- request --------------------------------------------------------------------------------------------


def test_a_tool_round_trip_history_becomes_chat_messages() -> None:
    req = chat({
        "model": "claude-x", "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Two cities.", "signature": "sig"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                 "content": [{"type": "text", "text": "timeout"}, {"type": "text", "text": "retry later"}]},
                {"type": "text", "text": "And now?", "cache_control": {"type": "ephemeral"}}]}],
        "tools": [WEATHER]})
    assert message_dicts(req.messages) == [
        {"role": "system", "content": "Be brief.\nBe kind."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Two cities.",
         "reasoning": "Two cities.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "toolu_2", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "content": "Sunny", "tool_call_id": "toolu_1"},
        {"role": "tool", "content": "Error: timeout\nretry later", "tool_call_id": "toolu_2"},
        {"role": "user", "content": [{"type": "text", "text": "And now?"}]}]
    assert req.tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"], "description": "Current weather in a city"}}]
    assert req.model == "claude-x" and req.tool_choice is None and req.parallel_tool_calls is None


def test_an_assistant_turn_of_only_tool_use_has_null_content() -> None:
    req = chat({"messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]})
    assert req.messages[1].content is None and req.messages[2].content == ""


@pytest.mark.parametrize(("choice", "openai", "parallel"), [
    ({"type": "auto"}, "auto", None),
    ({"type": "any"}, "required", None),
    ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
    ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}, None),
    ({"type": "none"}, "none", None),
])
def test_tool_choice(choice: dict, openai, parallel) -> None:
    req = chat({"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER], "tool_choice": choice})
    assert req.tool_choice == openai and req.parallel_tool_calls is parallel


def test_sampling_stop_sequences_metadata_and_stream() -> None:
    req = chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 7, "stop_sequences": ["\n\n", "END"],
                "temperature": 0.5, "top_p": 0.9, "top_k": 40, "metadata": {"user_id": "u1"}, "stream": True})
    assert (req.max_tokens, req.stop, req.temperature, req.top_p, req.top_k, req.user) == (
        7, ["\n\n", "END"], 0.5, 0.9, 40, "u1")
    assert req.stream and req.stream_options.include_usage  # the usage chunk gives message_delta's usage


@pytest.mark.parametrize(("thinking", "enabled", "budget"), [
    ({"type": "enabled", "budget_tokens": 1024}, True, 1024), ({"type": "adaptive"}, True, None),
    ({"type": "disabled"}, False, None), (None, None, None)])
def test_thinking_sets_enable_thinking_and_the_budget_caps_reasoning(thinking: dict | None, enabled: bool | None,
                                                                    budget: int | None) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2048}
    if thinking is not None:
        body["thinking"] = thinking
    req = chat(body)
    assert req.enable_thinking is enabled and req.thinking_budget_tokens == budget


def test_output_config_maps_to_effort_and_a_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = chat({"messages": [{"role": "user", "content": "x"}],
                "output_config": {"effort": "max", "format": {"type": "json_schema", "schema": schema}}})
    assert req.reasoning_effort == "xhigh"
    assert req.response_format.type == "json_schema" and req.response_format.json_schema.schema == schema


def test_the_structured_outputs_betas_output_format_is_output_config_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "schema": schema}
    req = chat({"messages": [{"role": "user", "content": "x"}], "output_format": fmt})
    assert req.response_format.type == "json_schema" and req.response_format.json_schema.schema == schema
    with pytest.raises(InvalidRequest) as info:
        chat({"messages": [{"role": "user", "content": "x"}], "output_format": fmt, "output_config": {"format": fmt}})
    assert info.value.param == "output_format"


def test_count_tokens_needs_no_max_tokens_and_gives_the_same_prompt_fields() -> None:
    body = {"system": "s", "messages": [{"role": "user", "content": "x"}], "tools": [WEATHER],
            "tool_choice": {"type": "any"}}
    counted = chat(body, CountTokensRequest)
    created = chat(body)
    assert message_dicts(counted.messages) == message_dicts(created.messages)
    assert (counted.tools, counted.tool_choice, counted.max_tokens) == (created.tools, created.tool_choice, None)


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": 3}}]}]},
     "messages.0.content.0.source.url"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]},
     "messages.0.content.0.source"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image", "source": {
        "type": "base64", "media_type": "image/bmp", "data": "AAAA"}}]}]}, "messages.0.content.1.source.media_type"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "@@not-b64@@"}}]}]}, "messages.0.content.0.source.data"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": ""}}]}]}, "messages.0.content.0.source.data"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "bytes"}}]}]},
     "messages.0.content.0.source.type"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}, "messages.1.content.0"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages.0.content.0.source.type"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
        "type": "url", "url": "https://example.com/a.pdf"}}]}]}, "messages.0.content.0.source"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
        "type": "base64", "media_type": "application/msword", "data": "AAAA"}}]}]},
     "messages.0.content.0.source.media_type"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": "@@"}}]}]}, "messages.0.content.0.source.data"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {}}]}]}]}, "messages.0.content.0.content.0.source.type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "document", "source": {"type": "file", "file_id": "f"}}]}]}]},
     "messages.0.content.0.content.0.source"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "messages.0.content.0"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]},
     "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "computer_20250124", "name": "s"}]},
     "tools.0.type"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"messages": [{"role": "user", "content": "x"}], "stop_sequences": [str(i) for i in range(17)]},
     "stop_sequences"),
    ({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 100}},
     "thinking.budget_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 2000}},
     "thinking.budget_tokens"),  # not below max_tokens (64)
    ({"messages": []}, "messages"),
])
def test_what_cannot_be_translated_is_a_400_naming_the_field(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        chat(body)
    assert err.value.param == param and err.value.status == 400


def test_a_tool_results_images_become_image_url_parts_of_the_tool_message_in_block_order() -> None:
    body = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Look"}, image()]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": [
            {"type": "text", "text": "partial"}, image(media_type="image/jpeg")]}, image()]}]}
    msgs = message_dicts(chat(body).messages)
    assert msgs[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": [
        {"type": "text", "text": "Error: "}, {"type": "text", "text": "partial"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + PNG}}]}
    assert msgs[3]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}}]
    assert tr.image_paths(decode({"max_tokens": 8, **body})) == [
        "messages.0.content.1", "messages.2.content.0.content.1", "messages.2.content.1"]
    _, images, _ = extract_images(msgs, vision=True)
    assert len(images) == 3


def test_anthropic_defined_client_tools_get_their_schema_and_server_tools_are_left_out() -> None:
    body = {"messages": [{"role": "user", "content": "Fix the typo in a.py"}], "tools": [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000},
        {"type": "bash_20250124", "name": "bash"}, WEATHER]}
    req = chat(body)
    names = [t["function"]["name"] for t in req.tools]
    assert names == ["str_replace_based_edit_tool", "bash", "get_weather"]  # web_search runs on Anthropic's side
    editor = req.tools[0]["function"]["parameters"]
    assert editor["required"] == ["command", "path"]
    assert editor["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert"]
    assert set(req.tools[1]["function"]["parameters"]["properties"]) == {"command", "restart"}
    assert tr.server_tools(decode({"max_tokens": 8, **body})) == ["web_search_20250305"]
    old = chat({**body, "tools": [{"type": "text_editor_20250124", "name": "str_replace_editor"}]})
    assert "undo_edit" in old.tools[0]["function"]["parameters"]["properties"]["command"]["enum"]
    # a chat error about the k-th tool the model sees names that tool's own index
    err = tr.restate_error(InvalidRequest("tools[2].function.parameters: bad", param="tools[2].function.parameters"),
                           decode({"max_tokens": 8, **body}), req)
    assert err.param == "tools.3.input_schema" and err.message.startswith("tools.3.input_schema")


def test_a_url_source_is_an_image_url_part_fetched_as_chats_are() -> None:
    # the chat path fetches it with --allow-image-urls, else refuses it naming the flag (renamed to the block)
    req = chat({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]})
    assert message_dicts(req.messages)[-1]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]


PNG = "iVBORw0KGgo="  # base64 of a PNG header: the chat path reads it as a data URL


def image(data: str = PNG, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data},
            "cache_control": {"type": "ephemeral"}}


def test_base64_image_blocks_become_image_url_parts_in_place() -> None:
    body = {"system": "Be brief.", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Compare"}, image(), image(media_type="image/jpeg")]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}, image(),
                                     {"type": "text", "text": "and this?"}]}], "tools": [WEATHER]}
    req = chat(body)
    msgs = message_dicts(req.messages)
    assert msgs[1]["content"] == [{"type": "text", "text": "Compare"},
                                  {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}},
                                  {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + PNG}}]
    assert msgs[3]["role"] == "tool" and msgs[4] == {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}},
        {"type": "text", "text": "and this?"}]}
    assert tr.image_paths(decode({"max_tokens": 8, **body})) == [
        "messages.0.content.1", "messages.0.content.2", "messages.2.content.1"]
    rendered, images, _ = extract_images(msgs, vision=True)
    assert len(images) == 3 and rendered[4]["content"][0] == {"type": "text", "text": MARKER}


@pytest.mark.parametrize(("data", "vision", "words"), [
    (PNG, False, "--mmproj"),
    ("A" * ((MAX_IMAGE_BYTES // 3 + 2) * 4), True, "larger than"),
])
def test_the_chat_paths_refusal_of_an_image_names_the_block(data: str, vision: bool, words: str) -> None:
    req = decode({"max_tokens": 8, "system": "s", "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": [{"type": "text", "text": "x"}, image(data)]}]})
    chat_req = tr.to_chat_request(req)
    with pytest.raises(InvalidRequest) as err:
        extract_images(message_dicts(chat_req.messages), vision=vision)
    assert err.value.param == "messages[3].content[1]"
    renamed = tr.restate_error(err.value, req, chat_req)
    assert renamed.message.startswith("messages.2.content.1: ") and words in renamed.message
    assert renamed.param == "messages.2.content.1"
    other = InvalidRequest("messages[0]: bad", param="messages[0]")
    assert tr.restate_error(other, req, chat_req).message == "messages[0]: bad"


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "some"}},
     "tool_choice"),
])
def test_decoding_refuses_bad_shapes(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        decode(body)
    assert err.value.param == param


# -- reply ----------------------------------------------------------------------------------------------


def completion(message: wire.ChatMessage, finish_reason: str = "stop", stop_reason: str | None = None,
               prompt: int = 20, cached: int = 0, completion_tokens: int = 5) -> wire.ChatCompletion:
    usage = wire.Usage(prompt_tokens=prompt, completion_tokens=completion_tokens,
                       total_tokens=prompt + completion_tokens,
                       prompt_tokens_details=wire.PromptTokensDetails(cached_tokens=cached))
    choice = wire.ChatChoice(message=message, finish_reason=finish_reason,
                             stop_reason=stop_reason if stop_reason else wire.UNSET)
    return wire.ChatCompletion(id="chatcmpl-abc", created=0, model="m", choices=[choice], usage=usage,
                               timings=wire.Timings.of(1, 1.0, 1, 1.0))


def test_a_completion_becomes_a_message_with_thinking_text_and_tool_use_blocks() -> None:
    msg = tr.to_message(completion(wire.ChatMessage(content="Let me check.", reasoning_content="Hmm.", tool_calls=[
        wire.ToolCall(id="call_123", function=wire.FunctionCall(name="get_weather", arguments='{"city": "Paris"}')),
        wire.ToolCall(id="call_456", function=wire.FunctionCall(name="get_weather", arguments='{"city": "Ro'))]),
        "tool_calls", prompt=30, cached=24))
    assert msgspec.to_builtins(msg) == {
        "type": "message", "id": "msg_abc", "role": "assistant", "model": "m",
        "content": [{"type": "thinking", "thinking": "Hmm.", "signature": ""},
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_123", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_456", "name": "get_weather", "input": {"city": "Ro"}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 6, "output_tokens": 5, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 24}}


@pytest.mark.parametrize(("finish", "word", "stops", "expected"), [
    ("stop", None, ["END"], ("end_turn", None)),  # an end-of-generation token
    ("stop", "END", ["END"], ("stop_sequence", "END")),
    ("stop", "END", None, ("end_turn", None)),  # not one of the request's (a format's own stop)
    ("length", None, None, ("max_tokens", None)),
    ("tool_calls", None, None, ("tool_use", None)),
    ("hook_said_stop", None, None, ("end_turn", None)),
])
def test_stop_reason(finish: str, word: str | None, stops, expected) -> None:
    assert tr.stop_reason(finish, word, stops) == expected
    msg = tr.to_message(completion(wire.ChatMessage(content="x"), finish, word), stops)
    assert (msg.stop_reason, msg.stop_sequence) == expected


def test_an_empty_answer_has_no_blocks() -> None:
    assert tr.to_message(completion(wire.ChatMessage(content=None))).content == []


def test_tool_input_of_broken_arguments() -> None:
    assert tr.tool_input("") == {} and tr.tool_input("[1, 2]") == {} and tr.tool_input("}{") == {}
    assert tr.tool_input('{"a": [1, {"b": "c') == {"a": [1, {"b": "c"}]}


# -- stream ---------------------------------------------------------------------------------------------


def chunk(delta: wire.ChatDelta | None = None, finish_reason: str | None = None, stop_reason: str | None = None,
          usage: wire.Usage | None = None) -> wire.ChatCompletionChunk:
    choices = [] if delta is None else [wire.ChatChunkChoice(
        delta=delta, finish_reason=finish_reason, stop_reason=stop_reason if stop_reason else wire.UNSET)]
    return wire.ChatCompletionChunk(id="chatcmpl-xyz", created=0, model="m", choices=choices,
                                    usage=usage if usage is not None else wire.UNSET)


def events(stream: tr.MessageStream, chunks: list[wire.ChatCompletionChunk]) -> list[dict]:
    return [msgspec.to_builtins(e) for c in chunks for e in stream.events(c)]


def test_a_streamed_answer_with_thinking_and_a_stop_sequence() -> None:
    stream = tr.MessageStream(input_tokens=12, stop_sequences=["STOP"])
    out = events(stream, [
        chunk(wire.ChatDelta(role="assistant", content="")),
        chunk(wire.ChatDelta(reasoning_content="Think")),
        chunk(wire.ChatDelta(reasoning_content="ing.")),
        chunk(wire.ChatDelta(content="Hello")),
        chunk(wire.ChatDelta(content=" there")),
        chunk(wire.ChatDelta(), "stop", "STOP"),
        chunk(usage=wire.Usage(prompt_tokens=12, completion_tokens=6, total_tokens=18,
                               prompt_tokens_details=wire.PromptTokensDetails(cached_tokens=8)))])
    assert [e["type"] for e in out] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    assert out[0]["message"] == {"type": "message", "id": "msg_xyz", "role": "assistant", "model": "m", "content": [],
                                 "stop_reason": None, "stop_sequence": None, "usage": {
                                     "input_tokens": 12, "output_tokens": 0, "cache_creation_input_tokens": 0,
                                     "cache_read_input_tokens": 0}}
    assert out[2] == {"type": "content_block_start", "index": 0,
                      "content_block": {"type": "thinking", "thinking": "", "signature": ""}}
    assert out[3]["delta"] == {"type": "thinking_delta", "thinking": "Think"}
    assert out[6] == {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}
    assert [e["delta"] for e in out[7:9]] == [{"type": "text_delta", "text": "Hello"},
                                               {"type": "text_delta", "text": " there"}]
    assert out[9] == {"type": "content_block_stop", "index": 1}
    assert out[10] == {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "STOP"},
                       "usage": {"input_tokens": 4, "output_tokens": 6, "cache_creation_input_tokens": 0,
                                 "cache_read_input_tokens": 8}}
    assert stream.done and stream.output_tokens == 6


PIECES = {1: b"Sure. ", 2: b"TOOL_CALL ", 3: b'{"name": "get_weather", ', 4: b'"arguments": {"city": "Paris"}}',
          5: b"\nTOOL_CALL ", 6: b'{"name": "get_weather", "arguments": {"city": "Rome"}}'}


def test_tool_calls_from_the_real_chat_pipeline_become_tool_use_blocks() -> None:
    """The emulated TOOL_CALL parser and ChatReply, as the engine runs them, feeding a MessageStream."""
    gen = Generation(1, [100, 101], SamplingParams(), 64, piece=PIECES.__getitem__,
                     parser=EmulatedToolParser({"get_weather"}, True))
    reply = ChatReply("m", gen, include_usage=True, id="chatcmpl-1")
    chunks = reply.first_chunks()
    for t in PIECES:
        item = gen.feed(TokenEvent(t))
        if isinstance(item, Piece):
            chunks += reply.chunks(item)
    done = gen.feed(FinishEvent("stop", prompt_tokens=2, completion_tokens=6, prompt_ms=1.0, predicted_ms=1.0))
    assert isinstance(done, Done)
    chunks += reply.chunks(done)
    out = events(tr.MessageStream(input_tokens=2), chunks)
    starts = [e for e in out if e["type"] == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use", "tool_use"]
    assert [s["index"] for s in starts] == [0, 1, 2]
    calls = [s["content_block"] for s in starts[1:]]
    assert [c["name"] for c in calls] == ["get_weather", "get_weather"]
    assert all(c["id"].startswith("toolu_") and c["input"] == {} for c in calls)
    args: dict[int, str] = {}
    for e in out:
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
            args[e["index"]] = args.get(e["index"], "") + e["delta"]["partial_json"]
    assert {i: json.loads(a) for i, a in args.items()} == {1: {"city": "Paris"}, 2: {"city": "Rome"}}
    text = "".join(e["delta"]["text"] for e in out if e["type"] == "content_block_delta" and e["index"] == 0)
    assert text.strip() == "Sure."
    # every started block is stopped once, before the next starts; the message ends with tool_use
    opened = []
    for e in out:
        if e["type"] == "content_block_start":
            assert not opened
            opened.append(e["index"])
        elif e["type"] == "content_block_stop":
            assert opened == [e["index"]]
            opened.clear()
    assert out[-2]["delta"]["stop_reason"] == "tool_use" and out[-1] == {"type": "message_stop"}


# -- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "expected_status", "type_"), [
    (400, 400, "invalid_request_error"), (401, 401, "authentication_error"), (403, 403, "permission_error"),
    (404, 404, "not_found_error"), (405, 405, "invalid_request_error"), (413, 413, "request_too_large"),
    (429, 429, "rate_limit_error"), (500, 500, "api_error"), (503, 529, "overloaded_error"),
    (504, 504, "timeout_error"), (501, 501, "api_error")])
def test_error_for(status: int, expected_status: int, type_: str) -> None:
    new_status, envelope = tr.error_for(status, "boom")
    assert new_status == expected_status
    assert msgspec.to_builtins(envelope) == {"type": "error", "error": {"type": type_, "message": "boom"}}


def test_stream_events_are_tagged_by_type() -> None:
    for struct in aw.STREAM_EVENTS:
        assert struct.__struct_config__.tag_field == "type" and isinstance(struct.__struct_config__.tag, str)


def test_a_system_message_among_the_messages_stays_at_its_place() -> None:
    """Anthropic's mid-conversation system messages (Claude Code sends one for a model name it does not know):
    a system message where it stands, after the top-level system prompt; text blocks joined as a system's are."""
    req = decode({"max_tokens": 8, "system": "top", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": [{"type": "text", "text": "Agent types:"}, {"type": "text", "text": "a, b"}]},
        {"role": "assistant", "content": "Hello"}, {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Go"}]})
    msgs = message_dicts(tr.to_chat_request(req).messages)
    assert [(m["role"], m["content"]) for m in msgs] == [
        ("system", "top"), ("user", "Hi"), ("system", "Agent types:\na, b"), ("assistant", "Hello"),
        ("system", "Be brief."), ("user", "Go")]
    with pytest.raises(InvalidRequest) as err:
        tr.to_chat_request(decode({"max_tokens": 8, "messages": [
            {"role": "user", "content": "Hi"}, {"role": "system", "content": [image(PNG)]}]}))
    assert err.value.param == "messages.1.content.0"


@pytest.mark.parametrize(("system", "expected"), [
    # Claude Code's first system block: only the header (its version suffix and cch change at every start)
    ([{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.c23; cc_entrypoint=cli; cch=a5145;"},
      {"type": "text", "text": "You are Claude Code."}, {"type": "text", "text": "Rules."}],
     "You are Claude Code.\nRules."),
    # the header and the prompt in one text (llama-server's example)
    ("x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;You are Claude Code.",
     "You are Claude Code."),
    ("x-anthropic-billing-header: cc_version=2.1.101.e51; cch=00000;\nYou are Claude Code.", "You are Claude Code."),
    # anywhere but at the start, it is the user's text
    ("Note: x-anthropic-billing-header: cch=a5145;", "Note: x-anthropic-billing-header: cch=a5145;"),
])
def test_claude_codes_billing_header_is_left_out_so_the_prefix_cache_reaches_past_it(system, expected) -> None:
    req = decode({"max_tokens": 8, "system": system, "messages": [{"role": "user", "content": "Hi"}]})
    assert message_dicts(tr.to_chat_request(req).messages)[0] == {"role": "system", "content": expected}


def test_errors_are_restated_in_anthropics_terms() -> None:
    """A prompt beyond the context in Anthropic's words (Claude Code compacts on them), a tool's schema by its
    Anthropic name."""
    from skippy.engine.errors import ContextLengthExceeded

    req = decode({"max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}],
                  "tools": [{"name": "a", "input_schema": {"type": "object"}}]})
    chat_req = tr.to_chat_request(req)
    over = ContextLengthExceeded("the prompt is 18503 tokens, which does not fit", param="messages", n_prompt=18503,
                                 n_ctx=8192)
    assert tr.restate_error(over, req, chat_req).message == "prompt is too long: 18503 tokens > 8192 maximum"
    both = ContextLengthExceeded("x", param="max_tokens", n_prompt=100, n_ctx=8192, max_tokens=32000)
    assert tr.restate_error(both, req, chat_req).message.startswith(
        "input length and `max_tokens` exceed context limit: 100 + 32000 > 8192, decrease input length or "
        "`max_tokens` and try again (this server runs with --no-clamp-max-tokens")
    schema = InvalidRequest("tools[0].function.parameters: cannot turn this JSON schema into a grammar: no",
                            param="tools[0].function.parameters")
    restated = tr.restate_error(schema, req, chat_req)
    assert restated.param == "tools.0.input_schema"
    assert restated.message == "tools.0.input_schema: cannot turn this JSON schema into a grammar: no"
