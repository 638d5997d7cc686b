"""Ollama's native API onto the engine's requests and back (engine/protocols/ollama/translate.py, sans-IO)."""

from __future__ import annotations

import json

import msgspec
import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.ollama import translate as t
from skippy.engine.protocols.ollama import types as ot
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import ChatCompletionRequest, CompletionRequest


def chat(**body) -> ot.OllamaChatRequest:
    return msgspec.convert({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body},
                           ot.OllamaChatRequest)


def test_options_map_onto_sampling_fields_and_unapplied_ones_are_named() -> None:
    fields, ignored, num_ctx = t.sampling({
        "temperature": 0.5, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "typical_p": 0.8, "repeat_penalty": 1.1,
        "repeat_last_n": 64, "presence_penalty": 0.1, "frequency_penalty": 0.2, "seed": 3, "stop": "END",
        "mirostat": 2, "mirostat_tau": 5.0, "mirostat_eta": 0.1, "num_predict": 12, "num_ctx": 4096,
        "num_keep": 5, "num_gpu": 99, "flux": 1, "temperature_unused": None})
    assert fields == {"temperature": 0.5, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "typical_p": 0.8,
                      "repeat_penalty": 1.1, "repeat_last_n": 64, "presence_penalty": 0.1, "frequency_penalty": 0.2,
                      "seed": 3, "stop": ["END"], "mirostat": 2, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
                      "max_tokens": 12}
    assert ignored == ["num_keep", "num_gpu", "flux"] and num_ctx == 4096


@pytest.mark.parametrize("n,max_tokens", [(-1, None), (-2, None), (0, 0), (7, 7)])
def test_num_predict(n: int, max_tokens: int | None) -> None:
    assert t.sampling({"num_predict": n})[0].get("max_tokens") == max_tokens


@pytest.mark.parametrize("options,needle", [
    ({"temperature": "hot"}, "temperature"), ({"top_k": 1.5}, "top_k"), ({"seed": True}, "seed"),
    ({"stop": [1]}, "stop"), ({"num_predict": -3}, "num_predict"), ({"temperature": float("nan")}, "temperature"),
])
def test_a_known_option_of_the_wrong_type_is_a_400_naming_it(options: dict, needle: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        t.sampling(options)
    assert needle in str(info.value) and info.value.param == f"options.{needle}"


def test_null_options_are_the_defaults() -> None:
    assert t.sampling({"temperature": None, "num_predict": None}) == ({}, [], None)


@pytest.mark.parametrize("value,seconds", [(None, None), (300, 300.0), (0, 0.0), (-1, -1.0), ("5m", 300.0),
                                           ("1h", 3600.0), ("-1", -1.0), ("30s", 30.0), ("250ms", 0.25),
                                           # Go's time.ParseDuration, as Ollama reads keep_alive
                                           ("1h30m", 5400.0), ("2h45m10.5s", 9910.5), ("1.5h", 5400.0),
                                           (".5s", 0.5), ("-1m", -60.0), ("-1h30m", -5400.0), ("+5m", 300.0),
                                           ("0", 0.0), ("1us", 1e-6), ("1\u00b5s", 1e-6), ("1\u03bcs", 1e-6),
                                           ("100ns", 1e-7), ("1m1s1ms", 61.001), (" 10m ", 600.0),
                                           ("2562047h", 2562047 * 3600.0)])
def test_keep_alive(value, seconds) -> None:
    assert t.keep_alive_seconds(value) == (seconds if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize("value", ["soon", "5 minutes", True, [1], "", "h", "1d", "1h 30m", "--1m", "1.h.m",
                                   "5m-3s", "1e3s", "m5", "2562048h", "9999999999h", "-2562048h"])  # past int64 ns
def test_keep_alive_refused(value) -> None:
    with pytest.raises(InvalidRequest, match="keep_alive"):
        t.keep_alive_seconds(value)


def test_chat_request_format_think_tools_and_history() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    req = chat(format=schema, think="max", stream=False, tools=[{"type": "function", "function": {"name": "f"}}],
               messages=[
                   {"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                   {"role": "assistant", "content": "", "thinking": "T", "tool_calls": [
                       {"function": {"name": "f", "arguments": {"x": 1}}},
                       {"function": {"name": "f", "arguments": {"x": 2}}}]},
                   {"role": "tool", "tool_name": "f", "content": "one"},
                   {"role": "tool", "tool_name": "f", "content": "two"}])
    body, ignored, _ = t.chat_request(req)
    assert isinstance(body, ChatCompletionRequest) and not body.stream and ignored == []
    assert body.response_format is not None and body.response_format.json_schema is not None
    assert body.response_format.json_schema.schema == schema
    assert body.enable_thinking is True and body.reasoning_effort == "xhigh"
    assistant, first, second = body.messages[2:]
    assert assistant.reasoning_content == "T"
    assert [json.loads(c["function"]["arguments"]) for c in assistant.tool_calls] == [{"x": 1}, {"x": 2}]
    ids = [c["id"] for c in assistant.tool_calls]
    assert (first.tool_call_id, second.tool_call_id) == tuple(ids)  # each result answers its call, in order
    streamed, _, _ = t.chat_request(chat())
    assert streamed.stream and streamed.stream_options is not None and streamed.stream_options.include_usage


@pytest.mark.parametrize("body,needle", [
    ({"format": "yaml"}, "format"), ({"think": "lots"}, "think"),
    ({"messages": [{"role": "user", "content": "x", "images": ["@@not base64@@"]}]}, "messages.0.images.0"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
])
def test_bad_chat_requests(body: dict, needle: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        t.chat_request(chat(**body))
    assert needle in str(info.value)


def test_no_messages_or_prompt_only_loads_and_keep_alive_0_unloads() -> None:
    """Ollama's "Load a model" / "Unload a model" (docs/api.md): done at once, ``done_reason`` load or unload."""
    def gen(**body) -> ot.OllamaGenerateRequest:
        return msgspec.convert({"model": "m", **body}, ot.OllamaGenerateRequest)

    empty = chat(messages=[])
    assert t.loads_only(empty) and t.loads_only(msgspec.convert({"model": "m"}, ot.OllamaChatRequest))
    assert t.chat_request(empty)[0].messages == []  # no 400: the route answers it without generating
    assert not t.loads_only(chat()) and not t.loads_only(gen(prompt="P")) and not t.loads_only(gen(suffix="S"))
    loaded = msgspec.to_builtins(t.load_response(empty))
    assert {k: v for k, v in loaded.items() if k != "created_at"} == {
        "model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "load"}
    for keep_alive in (0, "0", "0s", 0.0):
        assert t.load_response(chat(messages=[], keep_alive=keep_alive)).done_reason == "unload", keep_alive
        unloaded = t.load_response(gen(prompt="", keep_alive=keep_alive))
        assert (unloaded.done_reason, unloaded.response, unloaded.done) == ("unload", "", True)
    assert t.load_response(gen(prompt="", keep_alive="5m")).done_reason == "load"
    assert t.load_response(gen(prompt="", keep_alive=-1)).done_reason == "load"


@pytest.mark.parametrize("think", [True, "low", "medium", "high", "max"])
def test_thinking_on_for_a_template_that_cannot_think_is_refused_as_ollama(think) -> None:
    gen = msgspec.convert({"model": "my/m:1b", "prompt": "P", "raw": True, "think": think}, ot.OllamaGenerateRequest)
    for req in (chat(think=think), gen, chat(messages=[], think=think)):
        t.check_thinking(req, supports_thinking=True)
        with pytest.raises(InvalidRequest) as info:
            t.check_thinking(req, supports_thinking=False)
        assert str(info.value) == f'"{req.model}" does not support thinking' and info.value.param == "think"
    t.check_thinking(chat(messages=[], think=think, keep_alive=0), supports_thinking=False)  # unloads first


def test_thinking_off_or_absent_is_taken_by_any_template() -> None:
    for req in (chat(think=False), chat(), chat(messages=[])):
        t.check_thinking(req, supports_thinking=False)
    with pytest.raises(InvalidRequest, match="think"):
        t.check_thinking(chat(think="lots"), supports_thinking=True)


def test_a_tool_messages_images_reach_the_chat_message() -> None:
    req, _, _ = t.chat_request(chat(messages=[
        {"role": "user", "content": "Look"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "shot", "arguments": {}}}]},
        {"role": "tool", "tool_name": "shot", "content": "the screen", "images": ["aGk="]}]))
    tool = req.messages[-1]
    assert tool.role == "tool" and tool.tool_call_id == req.messages[1].tool_calls[0]["id"]
    assert [p.type for p in tool.content] == ["image_url", "text"]
    assert t.image_paths(chat(messages=[{"role": "tool", "tool_name": "shot", "content": "x", "images": ["aGk="]}])) \
        == ["messages.0.images.0"]


def test_base64_wrapped_in_lines_is_taken_as_ollama_takes_it() -> None:
    # `base64 photo.png` wraps at 76 columns; Ollama's Go decoder skips the line breaks
    wrapped = "aGVsbG8gd29y\nbGQsIHRoaXMg\r\naXMgYW4gaW1h\nZ2U="
    req, _, _ = t.chat_request(chat(messages=[{"role": "user", "content": "x", "images": [wrapped]}]))
    assert req.messages[0].content[0].image_url["url"] == "data:image/*;base64,aGVsbG8gd29ybGQsIHRoaXMgaXMgYW4gaW1hZ2U="


def test_images_become_image_url_parts_before_the_text() -> None:
    req, _, _ = t.chat_request(chat(messages=[{"role": "user", "content": "What is it?", "images": ["aGk=", "aGk="]}]))
    assert msgspec.to_builtins(req.messages[0].content) == [
        {"type": "image_url", "image_url": {"url": "data:image/*;base64,aGk="}},
        {"type": "image_url", "image_url": {"url": "data:image/*;base64,aGk="}},
        {"type": "text", "text": "What is it?"}]
    gen = t.generate_request(msgspec.convert({"model": "m", "prompt": "P", "images": ["aGk="]},
                                             ot.OllamaGenerateRequest))[0]
    assert gen.messages[-1].content[0].image_url["url"].endswith("aGk=")
    with pytest.raises(InvalidRequest, match="raw"):
        t.generate_request(msgspec.convert({"model": "m", "prompt": "P", "raw": True, "images": ["aGk="]},
                                           ot.OllamaGenerateRequest))


def test_generate_templated_raw_and_suffix() -> None:
    def gen(**body):
        return t.generate_request(msgspec.convert({"model": "m", "prompt": "P", **body}, ot.OllamaGenerateRequest))[0]

    templated = gen(system="S")
    assert isinstance(templated, ChatCompletionRequest)
    assert [(m.role, m.content) for m in templated.messages] == [("system", "S"), ("user", "P")]
    raw = gen(raw=True, format="json")
    assert isinstance(raw, CompletionRequest) and raw.prompt == "P" and raw.response_format.type == "json_object"
    fim = gen(suffix="END")
    assert isinstance(fim, CompletionRequest) and fim.suffix == "END"
    with pytest.raises(InvalidRequest, match="template"):
        gen(template="{{ .Prompt }}")
    assert isinstance(gen(context=[1, 2]), ChatCompletionRequest)  # deprecated: accepted, not used


def _chunk(delta: dict, finish: str | None = None) -> wire.ChatCompletionChunk:
    return msgspec.convert({"id": "c", "created": 0, "model": "m", "choices": [
        {"index": 0, "delta": delta, "finish_reason": finish}]}, wire.ChatCompletionChunk)


def _usage_chunk() -> wire.ChatCompletionChunk:
    return msgspec.convert({"id": "c", "created": 0, "model": "m", "choices": [], "usage": {
        "prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        "timings": {"cache_n": 0, "prompt_n": 5, "prompt_ms": 2.0, "prompt_per_token_ms": 0.4,
                    "prompt_per_second": 2500.0, "predicted_n": 3, "predicted_ms": 30.0,
                    "predicted_per_token_ms": 15.0, "predicted_per_second": 66.0}}, wire.ChatCompletionChunk)


def test_chat_stream_pieces_then_calls_whole_then_the_counts() -> None:
    s = t.ChatStream("smollm2:135m", started=0.0)
    lines = [*s.lines(_chunk({"role": "assistant", "content": ""})),
             *s.lines(_chunk({"reasoning_content": "hm"})), *s.lines(_chunk({"content": "Hi"})),
             *s.lines(_chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                              "function": {"name": "f", "arguments": '{"x": '}}]})),
             *s.lines(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})),
             *s.lines(_chunk({}, "tool_calls")), *s.lines(_usage_chunk())]
    out = [msgspec.to_builtins(x) for x in lines]
    assert [o["message"].get("thinking") for o in out[:2]] == ["hm", None] and out[1]["message"]["content"] == "Hi"
    assert out[2]["message"]["tool_calls"] == [{"id": "call_1", "function": {"name": "f", "arguments": {"x": 1},
                                                                              "index": 0}}]
    last = out[-1]
    assert len(out) == 4 and last["done"] is True and last["done_reason"] == "stop" and s.done
    assert (last["prompt_eval_count"], last["eval_count"]) == (5, 3)
    assert (last["prompt_eval_duration"], last["eval_duration"]) == (2_000_000, 30_000_000)
    assert all(o["done"] is False for o in out[:-1]) and all(o["model"] == "smollm2:135m" for o in out)


def test_generate_stream_and_done_reason() -> None:
    s = t.GenerateStream("m", started=0.0)
    out = [*s.lines(_chunk({"content": "a"})), *s.lines(_chunk({}, "length")), *s.lines(_usage_chunk())]
    assert [o.response for o in out] == ["a", ""] and out[-1].done_reason == "length"
    assert t.done_reason("stop") == "stop" and t.done_reason("tool_calls") == "stop"


def test_arguments_of_a_cut_call_are_its_whole_part() -> None:
    assert t.arguments('{"a": 1}') == {"a": 1} and t.arguments('{"a": 1, "b": "x') == {"a": 1, "b": "x"}
    assert t.arguments("not json") == {} and t.arguments("[1]") == {}


def test_logprobs_and_top_logprobs_ask_the_engine_and_are_bounded() -> None:
    body, _, _ = t.chat_request(chat(logprobs=True, top_logprobs=3))
    assert (body.logprobs, body.top_logprobs) == (True, 3)
    only_top, _, _ = t.chat_request(chat(top_logprobs=2))  # alternatives asked for: the logprobs come too
    assert (only_top.logprobs, only_top.top_logprobs) == (True, 2)
    plain, _, _ = t.chat_request(chat())
    assert plain.logprobs is False and plain.top_logprobs is None
    nulls, _, _ = t.chat_request(chat(logprobs=None, top_logprobs=None))  # Ollama (Go) reads null as not set
    assert nulls.logprobs is False
    gen = msgspec.convert({"model": "m", "prompt": "P", "raw": True, "logprobs": True, "top_logprobs": 4},
                          ot.OllamaGenerateRequest)
    raw, _, _ = t.generate_request(gen)
    assert isinstance(raw, CompletionRequest) and raw.logprobs == 4
    for bad in (21, -1):
        with pytest.raises(InvalidRequest) as info:
            t.chat_request(chat(logprobs=True, top_logprobs=bad))
        assert info.value.param == "top_logprobs"


def _lp(*tokens: str, top: int = 1) -> dict:
    return {"content": [{"token": tok, "logprob": -0.5, "bytes": list(tok.encode()), "top_logprobs": [
        {"token": tok, "logprob": -0.5, "bytes": list(tok.encode())}][:top]} for tok in tokens]}


def test_logprobs_come_back_in_ollamas_shape_whole_and_streamed() -> None:
    completion = msgspec.convert({"id": "c", "created": 0, "model": "m", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "stop",
        "logprobs": _lp("Hi", "!")}], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        "timings": msgspec.to_builtins(_usage_chunk().timings)}, wire.ChatCompletion)
    reply = msgspec.to_builtins(t.chat_response(completion, "m", 1))
    assert reply["logprobs"] == [
        {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [
            {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]},
        {"token": "!", "logprob": -0.5, "bytes": [33], "top_logprobs": [
            {"token": "!", "logprob": -0.5, "bytes": [33]}]}]
    # streamed: each line carries the logprobs of its text; held-back tokens ride on the next line; the last
    # line has what is left (an empty list when nothing is)
    s = t.ChatStream("m", started=0.0)

    def chunk(content: str, lp: dict | None) -> wire.ChatCompletionChunk:
        return msgspec.convert({"id": "c", "created": 0, "model": "m", "choices": [
            {"index": 0, "delta": {"content": content}, "logprobs": lp, "finish_reason": None}]},
            wire.ChatCompletionChunk)
    lines = [*s.lines(chunk("", _lp("H", top=0))), *s.lines(chunk("Hi", _lp("i", top=0))),
             *s.lines(chunk("!", _lp("!", top=0))), *s.lines(_usage_chunk())]
    out = [msgspec.to_builtins(x) for x in lines]
    assert [[e["token"] for e in o["logprobs"]] for o in out] == [["H", "i"], ["!"], []]
    assert "top_logprobs" not in out[0]["logprobs"][0]  # none asked for: absent, as Ollama's omitempty
    assert "logprobs" not in msgspec.to_builtins(t.ChatStream("m", started=0.0).lines(_usage_chunk())[0])
    legacy = wire.CompletionLogprobs(tokens=["a", "b"], token_logprobs=[-1.0, -2.0],
                                     top_logprobs=[{"a": -1.0, "c": -3.0}, {}])
    assert msgspec.to_builtins(t.logprobs(legacy)) == [
        {"token": "a", "logprob": -1.0, "top_logprobs": [{"token": "a", "logprob": -1.0}, {"token": "c",
                                                                                           "logprob": -3.0}]},
        {"token": "b", "logprob": -2.0}]
