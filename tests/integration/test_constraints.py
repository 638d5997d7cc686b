"""Every constraint field llama-server, vLLM and OpenAI clients send is enforced on both routes, or refused.

With the official ``openai`` client (``extra_body`` for the fields OpenAI does not have), on
``/v1/chat/completions`` and ``/v1/completions``: the output parses and validates against the
schema, regex, choice or grammar; a constraint that cannot be enforced, or two at once, is a
400 naming the field.
"""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import openai
import pydantic
import pytest

from tests.paths import CHAT_TEMPLATES
from tests.support import Server, openai_client

MODEL = "SmolLM2-135M-Instruct"

#: a schema llama.cpp's GBNF converter refused (escape in ``pattern``) or left unenforced (number bounds)
PERSON = {
    "type": "object",
    "properties": {
        "greeting": {"type": "string", "pattern": "^hello there indeed\\!$"},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "height": {"type": "number", "exclusiveMinimum": 1.0, "maximum": 2.5},
    },
    "required": ["greeting", "age", "height"],
    "additionalProperties": False,
}
REGEX = r"[0-9]{3}-[a-z]{2,5}"
ASK = [{"role": "user", "content": "Return a JSON object with the keys name and color for a cat."}]
PROMPT = 'A cat as a JSON object with the keys "name" and "color": '
CHOICES = ["red", "green", "blue"]


def is_person(text: str) -> None:
    jsonschema.validate(json.loads(text), PERSON)


def is_object(text: str) -> None:
    assert isinstance(json.loads(text), dict)


def is_regex(text: str) -> None:
    assert re.fullmatch(REGEX, text), text


def is_choice(text: str) -> None:
    assert text in CHOICES


def is_yes_no(text: str) -> None:
    assert text in ("yes", "no")


def is_greek(text: str) -> None:
    assert text in ("alpha", "beta")


LARK = 'start: "alpha" | "beta"'
GBNF = 'root ::= "yes" | "no"'

#: (extra body, validator): every constraint field and form
CASES = [
    ({"response_format": {"type": "json_object"}}, is_object),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON, "strict": True}}},
     is_person),
    ({"response_format": {"type": "json_object", "schema": PERSON}}, is_person),  # llama-server's form
    ({"json_schema": PERSON}, is_person),
    ({"grammar": GBNF}, is_yes_no),
    ({"grammar": "%llguidance {}\n" + LARK}, is_greek),
    ({"guided_json": PERSON}, is_person),
    ({"guided_json": json.dumps(PERSON)}, is_person),
    ({"guided_regex": REGEX}, is_regex),
    ({"guided_choice": CHOICES}, is_choice),
    ({"guided_grammar": GBNF}, is_yes_no),
    ({"guided_grammar": LARK}, is_greek),
    ({"structured_outputs": {"json": PERSON}}, is_person),
    ({"structured_outputs": {"json_object": True}}, is_object),
    ({"structured_outputs": {"regex": REGEX}}, is_regex),
    ({"structured_outputs": {"choice": CHOICES}}, is_choice),
    ({"structured_outputs": {"grammar": LARK}}, is_greek),
    ({"structured_outputs": {"grammar": "?" + LARK}}, is_greek),  # an inlined start: outlines' grammars (was a 400)
]
IDS = [next(iter(body)) + ":" + (json.dumps(next(iter(body.values())))[:24]) for body, _ in CASES]


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat_text(client: openai.OpenAI, extra: dict, **kw) -> tuple[str, str]:
    response_format = extra.get("response_format")
    rest = {k: v for k, v in extra.items() if k != "response_format"}
    kwargs = {"response_format": response_format} if response_format else {}
    r = client.chat.completions.create(
        model=MODEL, **{"temperature": 0, "max_tokens": 80, **kw}, extra_body=rest, **kwargs, messages=ASK)
    return r.choices[0].message.content, r.choices[0].finish_reason


def completion_text(client: openai.OpenAI, extra: dict) -> tuple[str, str]:
    r = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=80, extra_body=extra)
    return r.choices[0].text, r.choices[0].finish_reason


@pytest.mark.parametrize("extra,check", CASES, ids=IDS)
def test_chat_output_obeys_the_constraint(client, extra: dict, check) -> None:
    text, finish = chat_text(client, extra)
    assert finish == "stop", text  # the constraint completed: only end of generation was left
    check(text)


@pytest.mark.parametrize("extra,check", CASES, ids=IDS)
def test_completion_output_obeys_the_constraint(client, extra: dict, check) -> None:
    text, finish = completion_text(client, extra)
    assert finish == "stop", text
    check(text)


def test_sampled_output_obeys_the_constraint_too(client) -> None:
    """Not only greedy: at temperature 1 with several seeds every output still validates."""
    for seed in range(3):
        r = client.completions.create(model=MODEL, prompt="Pick a code: ", temperature=1.0, seed=seed, max_tokens=30,
                                      extra_body={"guided_regex": REGEX})
        is_regex(r.choices[0].text)
        text, _ = chat_text(client, {"json_schema": PERSON}, seed=seed, temperature=1.0)
        is_person(text)


def test_streamed_constrained_output_matches_non_streamed(client) -> None:
    text, _ = chat_text(client, {"json_schema": PERSON})
    stream = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=80, stream=True,
                                            extra_body={"json_schema": PERSON}, messages=ASK)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text
    done, _ = completion_text(client, {"guided_choice": CHOICES})
    stream = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=80, stream=True,
                                       extra_body={"guided_choice": CHOICES})
    assert "".join(c.choices[0].text for c in stream if c.choices) == done


LOOKAHEAD = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=x)a+$"}}}

#: (body fields, the param the 400 names)
REFUSED = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": LOOKAHEAD}}},
     "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"json_schema": LOOKAHEAD}, "json_schema"),
    ({"json_schema": {"type": "object", "properties": {"a": {"type": "strnig"}}}}, "json_schema"),
    ({"grammar": "root ::= nope"}, "grammar"),
    ({"grammar": "%llguidance {}\nstart: nope"}, "grammar"),
    ({"guided_json": "not json"}, "guided_json"),
    ({"guided_json": LOOKAHEAD}, "guided_json"),
    ({"guided_regex": "(?<=a)b"}, "guided_regex"),
    ({"guided_regex": ""}, "guided_regex"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_grammar": "root ::= nope"}, "guided_grammar"),
    ({"structured_outputs": {"regex": "(?=a)b"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"json": LOOKAHEAD}}, "structured_outputs.json"),
    ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "structured_outputs.choice"),
    ({"structured_outputs": {"structural_tag": {"type": "structural_tag"}}}, "structured_outputs.structural_tag"),
    ({"structured_outputs": {"jsn": {}}}, "structured_outputs"),  # a misspelled constraint is not dropped
    # two constraint fields: which should win is a guess, so neither does
    ({"json_schema": PERSON, "guided_regex": REGEX}, "guided_regex"),
    ({"response_format": {"type": "json_object"}, "grammar": GBNF}, "grammar"),
    ({"guided_choice": CHOICES, "structured_outputs": {"regex": REGEX}}, "structured_outputs"),
]


@pytest.mark.parametrize("route", ["chat", "completions"])
@pytest.mark.parametrize("fields,param", REFUSED, ids=[p + ":" + json.dumps(f)[:30] for f, p in REFUSED])
def test_unenforceable_constraint_is_400_naming_the_field(server, route: str, fields: dict, param: str) -> None:
    body = {"max_tokens": 5, **fields}
    if route == "chat":
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    r = httpx.post(f"{server.base_url}/v1/{'chat/completions' if route == 'chat' else 'completions'}", json=body,
                   timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param, err
    assert "Traceback" not in err["message"]


def test_unenforceable_constraint_is_400_through_the_openai_client(client) -> None:
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=MODEL, prompt="hi", max_tokens=5, extra_body={"guided_regex": "(?=a)b"})
    assert ei.value.body["param"] == "guided_regex"


def test_grammar_size_limit_covers_every_grammar_field(server) -> None:
    """--max-grammar-bytes (128 KiB by default) applies to guided_grammar and regexes, on both routes."""
    big = "a" * (129 * 1024)
    for path, extra in (("chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                        ("completions", {"prompt": "hi"})):
        for field in ("guided_regex", "guided_grammar", "grammar"):
            r = httpx.post(f"{server.base_url}/v1/{path}", json={**extra, field: big, "max_tokens": 2}, timeout=60)
            assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_a_deeply_nested_grammar_is_a_400_and_the_server_lives(server) -> None:
    """A GBNF nesting 20,000 groups (60 KB, within --max-grammar-bytes) made llama.cpp's recursive parser overflow
    the stack: a segmentation fault of the whole server. It is refused before llama.cpp sees it; so is a tool
    grammar that deep (a schema's huge maxLength is left unenforced instead: Claude Code's Workflow tool)."""
    deep = "root ::= " + "(" * 20000 + '"a"' + ")?" * 20000
    for path, extra in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                        ("/completion", {"prompt": "hi"})):
        r = httpx.post(server.base_url + path, json={**extra, "grammar": deep, "max_tokens": 2}, timeout=60)
        assert r.status_code == 400 and "20000 levels deep" in r.text, r.text
    script = {"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "required": ["script"], "properties": {"script": {"type": "string", "maxLength": 524288}}}}}
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "hi"}], "tools": [script], "max_tokens": 4,
        "tool_choice": {"type": "function", "function": {"name": "run"}}})
    assert r.status_code == 200, r.text
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


NOTHING = r"root ::= [^\x00-\U0010FFFF]"  # a character class that holds no character: it matches nothing


@pytest.mark.parametrize("path, fields", [
    ("/completion", {"prompt": "Hi", "grammar": NOTHING}),
    ("/completion", {"prompt": "Hi", "grammar": 'root ::= "a"', "logit_bias": [[81, False]]}),  # bans "a"
    ("/completion", {"prompt": "Hi", "json_schema": {"const": 7}, "logit_bias": [["7", False]]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "grammar": NOTHING}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "grammar": 'root ::= "a"',
                              "logit_bias": {"81": False}}),  # llama-server's ban, on the OpenAI route too
    # llguidance answers a dead end by allowing only end of generation: the output had ended as "stop" there
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "guided_regex": r"ab[^\s\S]"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "guided_grammar": '?start: "x" /[^\\s\\S]/'}),
    ("/completion", {"prompt": "Hi", "grammar": '%llguidance {}\nstart: "ab" /[^\\s\\S]/'}),
])
def test_a_grammar_that_allows_no_token_is_a_400_and_the_others_go_on(server, path: str, fields: dict) -> None:
    """llama.cpp aborts the process when it accepts a token its grammar rejects ("Unexpected empty grammar
    stack"), which a grammar that matches nothing, or logit_bias banning every token it allows, made the
    sampler pick: the whole server died. Now that request is a 400 (``no_token_allowed``; a llguidance
    constraint no longer answers a token outside it either) while another request's stream goes on."""
    other = {"prompt": "Count: 1, 2, 3,", "n_predict": 24, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        with client.stream("POST", "/completion", json=other) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            r = client.post(path, json={**fields, "max_tokens": 3, "n_predict": 3})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "no_token_allowed"
            last = json.loads([line for line in lines if line.startswith("data: ")][-1][6:])
        assert last["stop"] and last["tokens_predicted"] == 24, last
        streamed = client.post("/completion", json={"prompt": "Hi", "n_predict": 3, "stream": True,
                                                    "grammar": 'root ::= "ab" [^\\x00-\\U0010FFFF]'})
        events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert "".join(e.get("content", "") for e in events[:-1]) == "ab", events
        assert events[-1]["error"]["code"] == "no_token_allowed", events
        assert client.get("/health").status_code == 200


def test_a_constraint_the_engine_gives_up_on_is_a_400_naming_it(server) -> None:
    """llguidance compiles ``a{500000}`` but its lexer reaches a limit at the first token: the answer says so,
    names the field and does not blame the grammar for matching nothing (it was ``no_token_allowed``)."""
    body = {"messages": [{"role": "user", "content": "a"}], "max_tokens": 4, "temperature": 0,
            "guided_regex": "a{500000}"}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["code"], err["param"]) == ("constraint_too_large", "guided_regex") and "too many" in err["message"]


class Answer(pydantic.BaseModel):
    answer: int


ANSWER = Answer.model_json_schema()
SUM = [{"role": "user", "content": "What is 2+2? Reply in JSON."}]


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory: pytest.TempPathFactory):
    """Qwen 3.5's template, whose generation prompt opens a thinking block (``<think>\\n``), with a reasoning
    budget of 16 tokens: the small model would think until max_tokens, the forced ``</think>`` ends it."""
    template = CHAT_TEMPLATES / "Qwen3.5-4B.jinja"
    with Server(["--parallel", "2", "--n-ctx", "2048", "--chat-template", str(template), "--reasoning-budget", "16",
                 "--responses-store", "memory:"], tmp_path_factory.mktemp("thinking") / "server.log") as srv:
        yield srv


def test_a_constraint_shapes_the_answer_after_an_open_thinking_block(thinking_server: Server) -> None:
    """The reasoning is free and the JSON is the answer (content, output_text, message.content), as llama.cpp
    and vLLM apply structured output; before, the JSON went into the reasoning and the answer was empty."""
    client = openai_client(thinking_server.base_url)
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}
    r = client.chat.completions.create(model=MODEL, messages=SUM, temperature=0, max_tokens=120, response_format=fmt)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", message
    assert Answer.model_validate_json(message.content)
    reasoning = message.model_extra["reasoning_content"]
    assert reasoning  # the budget's forced closing tag ended it
    stream = client.chat.completions.create(model=MODEL, messages=SUM, temperature=0, max_tokens=120,
                                            response_format=fmt, stream=True)
    chunks = [c.choices[0].delta for c in stream if c.choices]
    assert "".join(d.content or "" for d in chunks) == message.content
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in chunks) == reasoning

    parsed = client.responses.parse(model=MODEL, input="What is 2+2? Reply in JSON.", temperature=0,
                                    max_output_tokens=120, text_format=Answer)
    assert parsed.status == "completed" and isinstance(parsed.output_parsed, Answer), parsed.output_text

    r2 = httpx.post(thinking_server.base_url + "/api/chat", timeout=120, json={
        "model": MODEL, "stream": False, "think": True, "format": ANSWER, "messages": SUM,
        "options": {"num_predict": 120, "temperature": 0}})
    assert r2.status_code == 200, r2.text
    reply = r2.json()["message"]
    assert reply["thinking"] and Answer.model_validate_json(reply["content"])
