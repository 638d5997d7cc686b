"""constraint_from_request: every constraint field becomes a constraint or a 400 naming it (sans-IO, no vocab)."""

from __future__ import annotations

import json

import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.base import decode_request
from skippy.engine.protocols.openai.types import ChatCompletionRequest, CompletionRequest, Message
from skippy.engine.sampling.constraints import (
    JSON_WHITESPACE,
    Constraint,
    after_reasoning,
    choice_constraint,
    close_objects,
    constraint_from_request,
    grammar_constraint,
    json_constraint,
    regex_constraint,
)
from tests.support import ByteVocab

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}, "required": ["a"]}


def chat(**kw) -> ChatCompletionRequest:
    body = {"messages": [{"role": "user", "content": "hi"}], **kw}
    return decode_request(json.dumps(body).encode(), ChatCompletionRequest)


def completion(**kw) -> CompletionRequest:
    return decode_request(json.dumps({"prompt": "hi", **kw}).encode(), CompletionRequest)


@pytest.mark.parametrize("make", [chat, completion])
@pytest.mark.parametrize("fields,kind,param", [
    ({"response_format": {"type": "json_object"}}, "json_schema", "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
     "json_schema", "response_format"),
    ({"json_schema": SCHEMA}, "json_schema", "json_schema"),
    ({"guided_json": SCHEMA}, "json_schema", "guided_json"),
    ({"guided_json": json.dumps(SCHEMA)}, "json_schema", "guided_json"),
    ({"guided_regex": "^[a-z]+$"}, "regex", "guided_regex"),
    ({"guided_choice": ["a", "b"]}, "choice", "guided_choice"),
    ({"guided_grammar": 'root ::= "a"'}, "grammar", "guided_grammar"),
    ({"guided_grammar": 'start: "a"'}, "grammar", "guided_grammar"),
    ({"grammar": '%llguidance {}\nstart: "a"'}, "grammar", "grammar"),
    ({"structured_outputs": {"json": SCHEMA}}, "json_schema", "structured_outputs.json"),
    ({"structured_outputs": {"regex": "a+"}}, "regex", "structured_outputs.regex"),
    ({"structured_outputs": {"choice": ["a"]}}, "choice", "structured_outputs.choice"),
    ({"structured_outputs": {"grammar": 'start: "a"'}}, "grammar", "structured_outputs.grammar"),
    ({"structured_outputs": {"json_object": True}}, "json_schema", "structured_outputs.json_object"),
])
def test_each_field_becomes_an_llguidance_constraint(make, fields, kind, param):
    rc = constraint_from_request(make(**fields))
    assert rc and rc.gbnf is None
    assert (rc.constraint.kind, rc.constraint.param, rc.param) == (kind, param, param)
    assert rc.constraint.grammar  # llguidance grammar text (Lark, or its JSON form)


@pytest.mark.parametrize("make", [chat, completion])
def test_gbnf_grammar_stays_for_llama_cpp(make):
    rc = constraint_from_request(make(grammar='root ::= "a"'))
    assert (rc.gbnf, rc.constraint, rc.param) == ('root ::= "a"', None, "grammar")


def test_no_constraint_and_text_format_are_empty():
    assert not constraint_from_request(chat())
    assert not constraint_from_request(chat(response_format={"type": "text"}))
    assert not constraint_from_request(completion(structured_outputs={}))


def test_json_whitespace_follows_llama_cpp_and_can_be_turned_off():
    rc = constraint_from_request(chat(json_schema=SCHEMA))
    assert JSON_WHITESPACE.replace("\\", "\\\\") in rc.constraint.grammar
    strict = constraint_from_request(chat(structured_outputs={"json": SCHEMA, "disable_any_whitespace": True}))
    assert '"whitespace_flexible":false' in strict.constraint.grammar.replace(" ", "")


def test_disable_additional_properties_closes_objects():
    rc = constraint_from_request(chat(structured_outputs={"json": SCHEMA, "disable_additional_properties": True}))
    assert '"additionalProperties":false' in rc.constraint.grammar.replace(" ", "")


def test_objects_with_properties_are_closed_as_llama_cpp_closes_them():
    from skippy.engine.sampling.constraints import close_objects

    inner = {"type": "object", "properties": {"x": {"type": "integer"}}}
    schema = {"type": "object", "properties": {
        "a": inner, "list": {"type": "array", "items": inner}, "either": {"anyOf": [inner, {"type": "null"}]},
        "properties": {"type": "object", "properties": {"type": {"type": "string"}}},  # names, not keywords
        "open": {**inner, "additionalProperties": True}, "bare": {"type": "object"}, "ref": {"$ref": "#/$defs/d"}},
        "$defs": {"d": inner}}
    out = close_objects(schema)
    assert out["additionalProperties"] is False
    props = out["properties"]
    assert props["a"]["additionalProperties"] is False
    assert props["list"]["items"]["additionalProperties"] is False
    assert props["either"]["anyOf"][0]["additionalProperties"] is False and "additionalProperties" not in \
        props["either"]["anyOf"][1]
    assert props["properties"]["additionalProperties"] is False
    assert "additionalProperties" not in props["properties"]["properties"]  # the map of names is left alone
    assert props["open"]["additionalProperties"] is True  # said explicitly: kept
    assert "additionalProperties" not in props["bare"]  # {"type": "object"} alone: any object, as llama.cpp
    assert out["$defs"]["d"]["additionalProperties"] is False
    assert "additionalProperties" not in schema and "additionalProperties" not in inner  # the input unchanged
    bare = close_objects(schema, bare=True)  # vLLM disable_additional_properties: bare objects too
    assert bare["properties"]["bare"]["additionalProperties"] is False
    assert close_objects({"type": ["object", "null"]}, bare=True)["additionalProperties"] is False


def test_all_of_branches_close_as_one_object():
    """The branches of an allOf are one object (llama.cpp's converter merges them): closing each forbade the
    other's keys, so the object of both required keys was refused as unsatisfiable."""
    vocab = ByteVocab(())
    a = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    b = {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}
    for schema in ({"allOf": [a, b]},  # two branches; a local $ref branch beside the holder's own property
                   {"$defs": {"A": a}, "type": "object", "allOf": [{"$ref": "#/$defs/A"}],
                    "properties": {"b": {"type": "boolean"}}, "required": ["b"]}):
        g = json_constraint(schema, "response_format").grammar
        assert vocab.accepts(g, '{"a": 1, "b": true}'), schema
        assert not vocab.accepts(g, '{"a": 1, "b": true, "c": 2}') and not vocab.accepts(g, '{"a": 1}'), schema
    c = {"properties": {"c": {"type": "boolean"}}, "required": ["c"]}
    nested = {"allOf": [{"allOf": [a, c]}, b]}  # an allOf inside a branch: its keys are the object's too
    g = json_constraint(nested, "response_format").grammar
    assert vocab.accepts(g, '{"a": 1, "c": true, "b": true}') and not vocab.accepts(g, '{"a": 1, "b": true}')
    either = {"allOf": [a, {"anyOf": [b, c]}]}  # an anyOf inside: its alternatives' keys are optional keys
    g = json_constraint(either, "response_format").grammar
    assert vocab.accepts(g, '{"a": 1, "b": true}') and vocab.accepts(g, '{"a": 1, "c": false}')
    assert not vocab.accepts(g, '{"a": 1}') and not vocab.accepts(g, '{"a": 1, "b": true, "d": 1}')
    beside = {**a, "anyOf": [b, c]}  # an anyOf beside properties: alternatives of the same object
    g = json_constraint(beside, "response_format").grammar
    assert vocab.accepts(g, '{"a": 1, "b": true}') and not vocab.accepts(g, '{"a": 1}')
    assert not vocab.accepts(g, '{"b": true}') and not vocab.accepts(g, '{"a": 1, "c": true, "d": 0}')
    alone = close_objects({"anyOf": [a, b]})  # an anyOf on its own: each alternative is a whole object
    assert all(alt["additionalProperties"] is False for alt in alone["anyOf"])
    assert close_objects({"$defs": {"A": a}, "x": {"$ref": "#/$defs/A"}})["$defs"]["A"]["additionalProperties"] \
        is False  # a definition that stands alone stays closed
    opened = {"allOf": [a, {**b, "additionalProperties": True}]}  # a branch that says it decides
    assert "additionalProperties" not in close_objects(opened)


def test_every_json_field_closes_objects_by_default():
    for fields in ({"json_schema": SCHEMA}, {"guided_json": SCHEMA}, {"structured_outputs": {"json": SCHEMA}},
                   {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}):
        assert '"additionalProperties":false' in constraint_from_request(chat(**fields)).constraint.grammar.replace(
            " ", ""), fields
    any_object = constraint_from_request(chat(response_format={"type": "json_object"})).constraint.grammar
    assert '"additionalProperties":false' not in any_object.replace(" ", "")


@pytest.mark.parametrize("make", [chat, completion])
@pytest.mark.parametrize("fields,param", [
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_json": "[1, 2]"}, "guided_json"),
    ({"guided_regex": ""}, "guided_regex"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_choice": ["a", ""]}, "guided_choice"),
    ({"guided_grammar": "   "}, "guided_grammar"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs.choice"),
    ({"structured_outputs": {"structural_tag": {}}}, "structured_outputs.structural_tag"),
    ({"json_schema": SCHEMA, "guided_regex": "a"}, "guided_regex"),
    ({"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}, "grammar"),
    ({"grammar": 'root ::= "a"', "structured_outputs": {"regex": "a"}}, "structured_outputs"),
])
def test_malformed_or_conflicting_constraint_is_400_naming_the_field(make, fields, param):
    with pytest.raises(InvalidRequest) as ei:
        constraint_from_request(make(**fields))
    assert ei.value.param == param


@pytest.mark.parametrize("make", [chat, completion])
def test_an_empty_grammar_is_no_grammar(make):
    """llama-server reads ``grammar: ""`` as none (the llama.cpp web UI and many scripts send it)."""
    assert not constraint_from_request(make(grammar=""))
    with pytest.raises(InvalidRequest) as ei:  # whitespace does not parse, as llama-server says
        constraint_from_request(make(grammar="  \n"))
    assert ei.value.param == "grammar"


def test_unknown_structured_outputs_key_is_refused_at_decoding():
    with pytest.raises(InvalidRequest) as ei:
        chat(structured_outputs={"jsn": {}})
    assert ei.value.param == "structured_outputs"


def test_embedded_requests_take_the_same_fields():
    req = ChatCompletionRequest(messages=[Message("user", "hi")], guided_choice=["x", "y"])
    assert constraint_from_request(req).constraint.kind == "choice"


ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


@pytest.mark.parametrize("close,specials", [
    (("</think>",), ()),  # text, as in SmolLM2's vocabulary
    ((257,), ("</think>",)),  # one special token, as in Qwen's and DeepSeek's
    ((257, "think", 258), ("<|close|>", "<|sep|>")),  # Kimi K3: special tokens around text
])
def test_after_reasoning_frees_the_reasoning_and_shapes_the_answer(close, specials):
    vocab = ByteVocab(specials)
    tag = "".join(p if isinstance(p, str) else specials[p - 257] for p in close)
    g = after_reasoning(json_constraint(ANSWER, "response_format").grammar, close)
    # any reasoning, even with the tag's start or other tags in it, the tag, llama.cpp's whitespace, the JSON
    assert vocab.accepts(g, f'2+2 is <b>4</b>, </thin [/THINK] <|x\n{tag}\n\n{{"answer": 4}}')
    assert vocab.accepts(g, f'{tag}{{"answer":4}}')  # no reasoning at all
    assert not vocab.accepts(g, 'the reasoning, not closed yet {"answer": 4}')  # still reasoning: not done
    n = len(vocab.encode(f"so 4.{tag}"))
    assert vocab.refused_at(g, f'so 4.{tag}{{"answer": "4"}}') == n + len('{"answer": ')  # the schema holds
    assert vocab.refused_at(g, f"so 4.{tag}The answer is 4") == n  # text after the tag is no JSON
    assert vocab.refused_at(g, f"so 4.{tag}{tag}") == n  # the first tag ends the reasoning
    assert vocab.refused_at(g, f'so 4.{tag}\n\n\n{{"answer": 4}}') == n + 2  # at most two line breaks


@pytest.mark.parametrize("constraint,answer,wrong", [
    (regex_constraint("[a-z]+", "guided_regex"), "abc", "ABC"),
    (choice_constraint(["yes", "no"], "guided_choice"), "yes", "maybe"),
    (grammar_constraint('start: "a" "b"', "guided_grammar"), "ab", "ba"),  # Lark text, not JSON
    (grammar_constraint('root ::= "a" "b"', "guided_grammar"), "ab", "ba"),  # GBNF through llguidance
])
def test_after_reasoning_takes_every_llguidance_constraint(constraint, answer, wrong):
    vocab = ByteVocab()
    g = Constraint(constraint.grammar, constraint.kind, constraint.param, think_close="</think>").after(("</think>",))
    assert (g.kind, g.param, g.think_close) == (constraint.kind, constraint.param, "")
    assert vocab.accepts(g.grammar, f"hmm</think>{answer}")
    assert not vocab.accepts(g.grammar, f"hmm</think>{wrong}")
    assert constraint.after(("</think>",)) is constraint  # no open block: unchanged
