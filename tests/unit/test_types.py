"""decode_request: JSON syntax and field types in one pass, 400 naming the field."""

import json

import msgspec
import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.base import decode_request
from skippy.engine.protocols.llama_server.types import TokenizeRequest
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    ContentPart,
    Message,
    NotText,
    message_dicts,
    part_texts,
)
from skippy.engine.protocols.openai.wire import ErrorEnvelope


def body(**kw) -> bytes:
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return json.dumps(kw).encode()


def bad(data: bytes, type_=ChatCompletionRequest) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as ei:
        decode_request(data, type_)
    err = ei.value
    assert err.status == 400
    assert ErrorEnvelope.of(err)["error"]["type"] == "invalid_request_error"
    return err


def test_minimal_request():
    r = decode_request(body(), ChatCompletionRequest)
    assert r.messages == [Message(role="user", content="hi")]
    assert r.stream is False
    assert r.temperature is None
    assert r.logprobs is False


@pytest.mark.parametrize("data", [b"{", b"", b"{\"messages\": [}", b"not json", b"{'a': 1}"])
def test_malformed_json(data):
    err = bad(data)
    assert "malformed JSON" in err.message
    assert err.param is None


@pytest.mark.parametrize("data", [b"[]", b"[{\"messages\": []}]", b"\"text\"", b"42", b"null"])
def test_non_object_body(data):
    err = bad(data)
    assert "object" in err.message


@pytest.mark.parametrize("field,value,expected_type", [
    ("temperature", "hot", "float"),
    ("stream", "yes", "bool"),
    ("n", 1.5, "int"),
    ("max_tokens", "10", "int"),
    ("seed", [1], "int"),
    ("stop", 5, "str"),
    ("logit_bias", {"1": "x"}, "float"),
    ("logit_bias", [1, 2], "array"),  # a list must hold [id, bias] pairs (llama-server's form)
    ("logit_bias", "x", "object"),
    ("stream_options", {"include_usage": "yes"}, "bool"),
    ("messages", "hello", "array"),
    ("top_logprobs", "3", "int"),
])
def test_wrong_field_type_names_param(field, value, expected_type):
    err = bad(body(**{field: value}))
    assert err.param == field
    assert expected_type in err.message
    assert field in err.message


def test_wrong_type_inside_message_names_messages():
    err = bad(body(messages=[{"role": 1, "content": "x"}]))
    assert err.param == "messages"
    assert "$.messages[0].role" in err.message


def test_message_missing_role():
    err = bad(body(messages=[{"content": "x"}]))
    assert err.param == "messages"
    assert "role" in err.message


def test_missing_messages():
    err = bad(b'{"model": "m"}')
    assert "messages" in err.message
    assert err.param == "messages"


def test_completion_missing_prompt():
    err = bad(b'{"model": "m"}', CompletionRequest)
    assert err.param == "prompt"


def test_unknown_fields_ignored():
    r = decode_request(body(foo=1, extra_body={"x": [1, 2]}, chat_template_kwargs={"enable_thinking": True},
                            messages=[{"role": "user", "content": "hi", "weird": True}]),
                       ChatCompletionRequest)
    assert r.messages[0].content == "hi"
    assert not hasattr(r, "foo")


def test_nulls_accepted_for_optional_fields():
    r = decode_request(body(temperature=None, stop=None, seed=None, tools=None), ChatCompletionRequest)
    assert r.temperature is None and r.stop is None and r.seed is None


def test_int_accepted_for_float_field():
    r = decode_request(body(temperature=1, top_p=1), ChatCompletionRequest)
    assert r.temperature == 1.0 and isinstance(r.temperature, float)


def test_fields_decoded():
    r = decode_request(body(model="smol", stream=True, stream_options={"include_usage": True}, max_tokens=5,
                            temperature=0.2, stop=["a", "b"], seed=7, logit_bias={"3": -1.5}, n=1,
                            logprobs=True, top_logprobs=2, top_k=3, min_p=0.1, repeat_penalty=1.1),
                       ChatCompletionRequest)
    assert r.model == "smol" and r.stream is True and r.stream_options.include_usage is True
    assert r.max_tokens == 5 and r.temperature == 0.2 and r.stop == ["a", "b"] and r.seed == 7
    assert r.logit_bias == {"3": -1.5} and r.n == 1 and r.logprobs is True and r.top_logprobs == 2
    assert r.top_k == 3 and r.min_p == 0.1 and r.repeat_penalty == 1.1
    assert decode_request(body(stop="x"), ChatCompletionRequest).stop == "x"


def test_content_as_list_of_parts():
    r = decode_request(body(messages=[{"role": "user", "content": [
        {"type": "text", "text": "hello "},
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
        {"type": "text", "text": "world"},
    ]}]), ChatCompletionRequest)
    parts = r.messages[0].content
    assert isinstance(parts, list)
    assert parts[0] == ContentPart(type="text", text="hello ")
    assert parts[1].type == "image_url" and parts[1].image_url == {"url": "http://x/y.png"}
    assert parts[2].text == "world"
    # back to plain dicts for templates, unset fields omitted
    d = message_dicts(r.messages)
    assert d == [{"role": "user", "content": [
        {"type": "text", "text": "hello "},
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
        {"type": "text", "text": "world"},
    ]}]


def test_content_part_wrong_type():
    err = bad(body(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, 5]}]))
    assert err.param == "messages"
    err = bad(body(messages=[{"role": "user", "content": [{"text": "a"}]}]))
    assert err.param == "messages"


def test_part_texts_of_a_content_list():
    parts = [{"type": "text", "text": "a"}, "b", {"type": "text", "text": ""}]
    assert part_texts(parts) == ["a", "b", ""] and part_texts([]) == []
    with pytest.raises(NotText) as info:
        part_texts(parts, bare_strings=False)
    assert (info.value.index, info.value.kind) == (1, "str")
    for part, kind in [({"type": "image_url", "image_url": {"url": "x"}}, "image_url"), ({"type": "text"}, "text"),
                       ({"type": "text", "text": 5}, "text"), ({"text": "a"}, None), (5, "int"), (None, "NoneType")]:
        with pytest.raises(NotText) as info:
            part_texts([{"type": "text", "text": "ok"}, part])
        assert (info.value.index, info.value.kind) == (1, kind), part
    # what decode_request gives, back as dicts
    r = decode_request(body(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}]}]),
                       ChatCompletionRequest)
    assert part_texts(message_dicts(r.messages)[0]["content"]) == ["x"]


def test_assistant_tool_calls_and_tool_message():
    r = decode_request(body(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]), ChatCompletionRequest)
    assert r.messages[1].content is None
    assert r.messages[1].tool_calls[0]["function"]["name"] == "f"
    assert r.messages[2].tool_call_id == "c1"
    assert message_dicts(r.messages)[1] == {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


def test_tokenize_request():
    r = decode_request(b'{"content": "abc"}', TokenizeRequest)
    assert (r.content, r.add_special, r.parse_special, r.with_pieces) == ("abc", False, True, False)
    assert bad(b'{"content": 3}', TokenizeRequest).param == "content"


def test_nesting_counts_lists_and_objects() -> None:
    from skippy.engine.protocols.base import nesting

    assert nesting("x") == 0 and nesting([]) == 1 and nesting({"a": [1, {"b": []}]}) == 4
    deep: list = []
    for _ in range(5000):  # iterative: no RecursionError
        deep = [deep]
    assert nesting(deep) == 5001


# -- request Structs built in Python: plain dicts and lists for their Struct fields, as JSON decodes them --

NESTED = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
          "stream_options": {"include_usage": True},
          "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
          "structured_outputs": {"regex": "[a-z]+"}}


def test_plain_dicts_built_in_python_equal_the_decoded_body() -> None:
    built = ChatCompletionRequest(**NESTED)
    assert built == decode_request(json.dumps(NESTED).encode(), ChatCompletionRequest)
    assert built.stream_options.include_usage is True and built.response_format.json_schema.name == "x"
    assert built.messages[0].content == [ContentPart(type="text", text="hi")]
    fields = {k: v for k, v in NESTED.items() if k != "messages"}
    completion = CompletionRequest(prompt="x", **fields)
    assert completion == decode_request(json.dumps({"prompt": "x", **fields}).encode(), CompletionRequest)


def test_more_request_structs_take_plain_dicts() -> None:
    from skippy.engine.protocols.llama_server.types import (
        InfillExtra,
        InfillRequest,
        MultimodalPrompt,
        NativeCompletionRequest,
    )
    from skippy.engine.protocols.rerank.types import RerankDocument, RerankRequest

    assert InfillRequest(input_extra=[{"text": "a"}]).input_extra == [InfillExtra(text="a")]
    with pytest.raises(msgspec.ValidationError, match="text"):  # llama-server requires a chunk's text
        msgspec.json.decode(b'{"input_extra": [{"filename": "x.py"}]}', type=InfillRequest)
    assert NativeCompletionRequest(prompt={"prompt_string": "a"}).prompt == MultimodalPrompt(prompt_string="a")
    assert NativeCompletionRequest(prompt=[1, "a"]).prompt == [1, "a"]
    assert RerankRequest(query="q", documents=["a", {"text": "b"}]).documents == ["a", RerankDocument("b")]


@pytest.mark.parametrize("field,value,path", [
    ("stream_options", {"include_usage": "yes"}, "$.stream_options.include_usage"),
    ("stream_options", 5, "$.stream_options"),
    ("response_format", {"json_schema": {}}, "$.response_format"),
    ("structured_outputs", {"regexp": "x"}, "$.structured_outputs"),
    ("messages", [{"content": "hi"}], "$.messages[0]"),
    ("messages", ["hi"], "$.messages[0]"),
    ("messages", None, "$.messages"),  # required: None is no list of messages
])
def test_a_bad_plain_value_is_a_400_naming_the_field(field, value, path) -> None:
    fields = {"messages": [Message("user", "hi")], field: value}
    with pytest.raises(InvalidRequest) as ei:
        ChatCompletionRequest(**fields)
    assert ei.value.status == 400 and ei.value.param == field and path in str(ei.value)
    decoded = bad(json.dumps(fields, default=lambda m: {"role": m.role, "content": m.content}).encode())
    assert decoded.param == field  # the same body over HTTP: the same field


# -- a top-level null for an optional field: absent, its default (OpenAI clients send null for unset fields) --

def test_null_for_a_field_with_a_default_is_the_default() -> None:
    r = decode_request(body(return_hook_events=None, stream=None, cache_prompt=None, logprobs=None, mesh_hooks=None),
                       ChatCompletionRequest)
    assert (r.return_hook_events, r.stream, r.cache_prompt, r.logprobs, r.mesh_hooks) == (False, False, True,
                                                                                          False, None)
    c = decode_request(json.dumps({"prompt": "x", "echo": None, "stream": None}).encode(), CompletionRequest)
    assert (c.echo, c.stream) == (False, False)


def test_null_for_a_required_field_or_inside_one_stays_a_400() -> None:
    assert bad(json.dumps({"messages": None, "stream": None}).encode()).param == "messages"
    assert bad(body(messages=[{"role": None, "content": "x"}], stream=None)).param == "messages"
    assert bad(json.dumps({"prompt": None}).encode(), CompletionRequest).param == "prompt"
    err = bad(body(stream=None, temperature="hot"))  # wrong elsewhere too: named there
    assert err.param == "temperature"


def test_null_means_absent_on_every_api() -> None:
    from skippy.engine.protocols.anthropic.types import MessagesRequest
    from skippy.engine.protocols.llama_server.types import NativeCompletionRequest

    m = decode_request(json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
                                   "stream": None}).encode(), MessagesRequest)
    assert m.stream is False
    n = decode_request(json.dumps({"prompt": "x", "return_tokens": None, "n_indent": None}).encode(),
                       NativeCompletionRequest)
    assert (n.return_tokens, n.n_indent) == (False, 0)


# -- top_logprobs asks for alternatives of the logprobs that logprobs: true asks for ------------------------

@pytest.mark.parametrize("fields", [{"top_logprobs": 3}, {"top_logprobs": 0}, {"logprobs": False, "top_logprobs": 2},
                                    {"logprobs": None, "top_logprobs": 1}, {"top_logprobs": 2, "n_probs": 2}])
def test_top_logprobs_without_logprobs_is_a_400_naming_it(fields) -> None:
    # OpenAI, vLLM and llama-server refuse it (llama-server: any top_logprobs but null, its message)
    err = bad(body(**fields))
    assert err.param == "top_logprobs"
    assert str(err) == "top_logprobs requires logprobs to be set to true"
    with pytest.raises(InvalidRequest):
        ChatCompletionRequest(messages=[Message("user", "hi")], top_logprobs=fields["top_logprobs"])


def test_top_logprobs_null_or_with_logprobs_is_taken() -> None:
    assert decode_request(body(top_logprobs=None), ChatCompletionRequest).top_logprobs is None
    assert decode_request(body(logprobs=None, top_logprobs=None), ChatCompletionRequest).logprobs is False
    assert decode_request(body(logprobs=True, top_logprobs=0), ChatCompletionRequest).top_logprobs == 0
