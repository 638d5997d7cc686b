"""Structured-output constraints of a request, compiled with llguidance (sans-IO).

Every constraint field that llama-server, vLLM or OpenAI clients send is read
here, on chat and text completions alike, and either becomes a constraint the
sampler enforces or a 400 naming the field; none is dropped silently:

- OpenAI ``response_format``: ``text`` (none), ``json_object`` (any JSON
  object, or llama-server's ``response_format.schema``), ``json_schema``
  (``json_schema.schema``);
- llama-server ``json_schema`` (a schema) and ``grammar`` (llama.cpp GBNF;
  Lark when it starts with ``%llguidance``, as llama.cpp does);
- vLLM ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar``
  (GBNF or Lark) and ``structured_outputs`` (``json``, ``regex``, ``choice``,
  ``grammar``, ``json_object``).

Two of these fields at once are a 400 (which one should win is a guess).

Raw GBNF in ``grammar`` stays on llama.cpp's own grammar sampler (what
llama-server does; the forced tool-call grammars use it too, with lazy
triggers). Everything else is compiled by llguidance (the library llama.cpp
and vLLM use for the same fields): JSON Schema including numeric bounds and
``pattern``, regular expressions, choices and Lark grammars, so one engine
decides what a schema means and schemas llama.cpp's GBNF converter refused
(``pattern`` with escapes, ``minimum`` on numbers) are enforced. What
llguidance cannot compile (look-around in a regex, unknown schema keywords)
is refused; the runtime's vocabulary check (``Vocab.check_constraint``)
reports those, naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import attrs

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ResponseFormat, SamplingFields, StructuredOutputs

#: JSON whitespace llguidance allows between tokens: llama.cpp's json-schema-to-grammar
#: ``space`` rule (nothing, one space, or one or two line breaks and up to 20 spaces or tabs
#: of indentation), so a small model cannot spend its whole budget on whitespace.
JSON_WHITESPACE = r"[ ]|\n{1,2}[ \t]{0,20}"


@attrs.frozen
class Constraint:
    """A compiled constraint the runtime enforces as a token mask before its sampler chain.

    ``grammar`` is an llguidance grammar (the JSON text ``LLMatcher.grammar_from_*``
    returns; the runtime builds one ``LLMatcher`` per sequence from it); ``kind`` is
    ``json_schema``, ``regex``, ``choice`` or ``grammar``; ``param`` names the request
    field it came from (for 400s raised when the vocabulary check refuses it).
    ``think_close``: the closing tag of the thinking block the prompt left open (``</think>``): the
    constraint shapes the answer after it, the reasoning before it is free (:func:`after_reasoning`, which
    needs the vocabulary to know how the tag is written: :meth:`after`); ``""``: from the first token.
    """

    grammar: str
    kind: str
    param: str
    think_close: str = ""

    def after(self, close: Sequence[str | int]) -> Constraint:
        """This constraint as the grammar a vocabulary enforces: behind the reasoning and ``close`` (the
        closing tag :attr:`think_close` as that vocabulary writes it, see :func:`after_reasoning`) when
        :attr:`think_close` is set, else unchanged."""
        if not self.think_close:
            return self
        return Constraint(after_reasoning(self.grammar, close), self.kind, self.param)


@attrs.frozen
class RequestConstraint:
    """What a request asks to constrain: llama.cpp ``gbnf`` or an llguidance ``constraint`` (never both)."""

    gbnf: str | None = None
    constraint: Constraint | None = None

    @property
    def param(self) -> str | None:
        if self.constraint is not None:
            return self.constraint.param
        return "grammar" if self.gbnf is not None else None

    def __bool__(self) -> bool:
        return self.gbnf is not None or self.constraint is not None


#: the name the constrained answer's grammar takes in :func:`after_reasoning`'s grammar list
_ANSWER = "answer"


def _lark_regex(text: str) -> str:
    """``text`` as a literal inside a Lark ``/.../`` regex (Rust ``regex`` syntax, ``/`` escaped too)."""
    return re.escape(text).replace("/", "\\/")


def after_reasoning(grammar: str, close: Sequence[str | int]) -> str:
    """An llguidance grammar of free reasoning text, the closing tag ``close``, then what ``grammar`` (an
    llguidance grammar: the JSON of ``LLMatcher.grammar_from_*``, or Lark text) accepts, with llama.cpp's
    JSON whitespace (:data:`JSON_WHITESPACE`, or none) between the tag and the answer.

    The structured output of a prompt that leaves a thinking block open (DeepSeek R1, Qwen 3.5, QwQ,
    Nemotron: ``<think>\\n`` ends the generation prompt), as llama.cpp builds it (``reasoning? space
    response-format``) and vLLM applies it (the structured-output grammar starts where its reasoning
    parser sees the reasoning end). ``close`` is the tag's pieces as the vocabulary writes them: text (the
    reasoning ends at the first occurrence of the first text piece), or the id of a token llguidance holds
    special (Qwen's ``</think>``, which no text matches: the reasoning is any text, the token ends it)."""
    if not close:
        raise ValueError("close must hold the closing tag")
    try:
        top = json.loads(grammar)
    except (ValueError, RecursionError):
        top = None
    if isinstance(top, dict) and isinstance(top.get("grammars"), list) and top["grammars"]:
        subs = [dict(g) for g in top["grammars"]]
    else:  # Lark text (grammar_from_lark, grammar_from)
        subs = [{"lark_grammar": grammar}]
    name = subs[0].get("name") or _ANSWER
    subs[0]["name"] = name
    first, rest = close[0], close[1:]
    rules = [f"think[lazy]: /(?s:.*){_lark_regex(first)}/" if isinstance(first, str) else
             f"think: /(?s:.*)/ <[{first}]>"]
    tag = " ".join(f"<[{p}]>" if isinstance(p, int) else json.dumps(p) for p in rest)
    lark = "\n".join([f"start: think {tag} SPACE @{name}".replace("  ", " "), *rules,
                      f"SPACE: /({JSON_WHITESPACE})?/", ""])
    return json.dumps({"grammars": [{"lark_grammar": lark}, *subs]})


#: the keys of the generic tool envelope (:func:`tool_envelope`), llama.cpp's ``common_chat_params_init_generic``
ENVELOPE_CALLS, ENVELOPE_CALL, ENVELOPE_RESPONSE = "tool_calls", "tool_call", "response"


#: what makes an object schema of empty ``properties`` more than "no keys"
_OPEN_PARTS = ("additionalProperties", "patternProperties", "allOf", "anyOf", "oneOf", "$ref")


def _lark_literal(text: str) -> str:
    """``text`` as a Lark string literal (a JSON string: llguidance reads Lark strings with JSON's escapes)."""
    return json.dumps(text, ensure_ascii=False)


def tool_envelope(answer: Constraint, tools: Sequence[tuple[str, Any, str]], *, parallel: bool) -> Constraint:
    """The reply as llama-server's *generic* format shapes it when a request has both tools the model may
    call (``tool_choice: "auto"``) and a JSON schema (``response_format``): one JSON object, either
    ``{"tool_calls": [{"name": NAME, "arguments": {...}}, ...]}`` (``{"tool_call": {...}}`` when not
    ``parallel``: exactly one call) or ``{"response": VALUE}``, VALUE what ``answer`` (a ``json_schema``
    constraint) accepts. This is llama.cpp's ``common_chat_params_init_generic`` grammar (which
    ``common_chat_templates_apply_jinja`` uses for tools beside a JSON schema), less the ``id`` it asks
    of each parallel call (the server gives calls its own ids). Whitespace between tokens is llama.cpp's
    (:data:`JSON_WHITESPACE`).

    ``tools``: ``(name, parameters schema, where)`` of each tool the model may call, ``where`` the request
    field the schema came from (``tools[i].function.parameters``). A schema that is not a dict, or one of
    empty ``properties``, means no arguments (``{}``, as OpenAI defines a tool without ``parameters`` and
    llama.cpp's converter reads ``properties: {}``); object schemas are closed as :func:`json_constraint`
    closes them; keywords llguidance does not implement are not enforced (its ``lenient`` mode: a tool's
    ``parameters`` were never refused for them). One llguidance grammar: a Lark envelope over one
    JSON-schema grammar per tool and one for the answer, so the ``$ref`` of each schema resolves in its
    own document. Returns a ``json_schema`` constraint of ``answer``'s ``param`` and ``think_close``.
    Raises :class:`InvalidRequest` naming ``where`` for a schema that does not describe an object or that
    llguidance cannot read."""
    subs: list[dict[str, Any]] = []
    calls = []
    for k, (name, schema, where) in enumerate(tools):
        if not isinstance(schema, dict):
            schema = {"type": "object", "properties": {}}
        typ = schema.get("type", "object")
        if typ != "object" and not (isinstance(typ, list) and "object" in typ):
            raise InvalidRequest(f"{where}: the arguments schema must describe an object", param=where)
        closed = close_objects(schema)
        if closed.get("properties") == {} and not any(part in closed for part in _OPEN_PARTS):
            closed["additionalProperties"] = False  # no parameters: ``{}``, as llama.cpp's converter writes it
        try:
            text = _llg().grammar_from_json_schema(closed, defaults={"whitespace_pattern": JSON_WHITESPACE,
                                                                       "lenient": True})
        except Exception:  # llguidance raises ValueError for what is not a JSON schema object
            raise InvalidRequest(f"{where} is not a valid JSON schema", param=where) from None
        error = _llg().validate_grammar(text)  # (a missing $ref, a look-around pattern: named here, not later)
        if error:
            raise InvalidRequest(f"{where} cannot be enforced: {' '.join(error.split())}", param=where)
        args = json.loads(text)["grammars"][0]
        subs.append({**args, "name": f"args_{k}"})
        calls.append(f'call_{k}: "{{" WS {_lark_literal(json.dumps("name"))} WS ":" WS '
                     f'{_lark_literal(json.dumps(name, ensure_ascii=False))} WS "," WS '
                     f'{_lark_literal(json.dumps("arguments"))} WS ":" WS @args_{k} WS "}}"')
    if not calls:
        raise ValueError("tools must hold the tools the model may call")
    try:
        top = json.loads(answer.grammar)
        response = [dict(g) for g in top["grammars"]]
    except (ValueError, KeyError, TypeError):
        raise ValueError("answer must be a json_schema constraint") from None
    response[0]["name"] = "response"
    key = _lark_literal(json.dumps(ENVELOPE_CALLS if parallel else ENVELOPE_CALL))
    value = 'WS "[" WS call (WS "," WS call)* WS "]"' if parallel else "WS call"
    lark = "\n".join([
        f'start: "{{" WS {key} WS ":" {value} WS "}}"'
        f' | "{{" WS {_lark_literal(json.dumps(ENVELOPE_RESPONSE))} WS ":" WS @response WS "}}"',
        "call: " + " | ".join(f"call_{k}" for k in range(len(calls))),
        *calls,
        f"WS: /({JSON_WHITESPACE})?/", ""])
    grammar = json.dumps({"grammars": [{"name": "envelope", "lark_grammar": lark}, *response, *subs]})
    return Constraint(grammar, "json_schema", answer.param, think_close=answer.think_close)


def _llg() -> Any:
    from llguidance import LLMatcher

    return LLMatcher


def json_constraint(schema: Any, param: str, *, whitespace: str | None = JSON_WHITESPACE,
                    no_additional_properties: bool = False) -> Constraint:
    """A JSON Schema constraint (llguidance's JSON compiler; ``whitespace``: the allowed
    whitespace regex, ``None`` for none at all). Raises :class:`InvalidRequest` naming
    ``param`` when ``schema`` is not a JSON object or a JSON text of one.

    Objects are closed as llama.cpp's json-schema-to-grammar (``common/json-schema.cpp``) closes them, and
    so llama-server and Ollama: an object schema with ``properties`` and no ``additionalProperties`` takes no
    other keys (JSON Schema itself would allow any: a small model then adds keys until its token limit);
    ``{"type": "object"}`` alone stays any object, an explicit ``additionalProperties`` is kept.
    ``no_additional_properties`` (vLLM ``disable_additional_properties``) closes every object schema,
    bare ones too."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except (ValueError, RecursionError):
            raise InvalidRequest(f"{param} must be a JSON schema (an object or its JSON text)", param=param) from None
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        raise InvalidRequest(f"{param} must be a JSON schema object", param=param)
    schema = close_objects(schema, bare=no_additional_properties)
    options: dict[str, Any] = {"whitespace_flexible": False} if whitespace is None else \
        {"whitespace_pattern": whitespace}
    try:
        grammar = _llg().grammar_from_json_schema(schema, defaults=options)
    except Exception:  # llguidance raises ValueError for what is not a JSON schema object
        raise InvalidRequest(f"{param} is not a valid JSON schema", param=param) from None
    return Constraint(grammar, "json_schema", param)


#: JSON Schema keywords whose value is a schema, a list of schemas, or a map of names to schemas
_ONE = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def close_objects(schema: Any, *, bare: bool = False, root: Any = None, close: bool = True) -> Any:
    """``schema`` with ``additionalProperties: false`` added to every object schema that has ``properties``
    and leaves it unset (llama.cpp's rule, see :func:`json_constraint`); ``bare``: also to object schemas
    without ``properties`` (``"type": "object"``; vLLM ``disable_additional_properties``). Walks the
    subschemas only (``properties``' values, ``items``, ``anyOf``, ``$defs``...), so a property named
    ``properties`` or ``type`` is not taken for a keyword. Returns a new schema; ``schema`` is unchanged.

    The branches of an ``allOf`` describe one object together, as llama.cpp's converter merges them: they
    stay open, and so do the ``allOf`` branches and ``anyOf`` / ``oneOf`` alternatives inside them, at any
    depth (a local ``$ref`` branch is inlined, so that its definition, closed where it stands alone, is not
    closed here); the schema that holds them is closed over all their properties at once (an alternative's
    are optional keys, as llama.cpp merges them), unless one of them sets ``additionalProperties`` itself.
    (Closing each would forbid the others' keys: an object of two branches' required keys could never match.)
    ``root``: the whole schema, for ``$ref``; ``close``: close this schema itself (false for such a part)."""
    if not isinstance(schema, dict):
        return schema
    root = schema if root is None else root
    out = dict(schema)
    beside = isinstance(out.get("properties"), dict)  # an anyOf beside properties: alternatives of the same object
    for key in _ONE:
        if isinstance(out.get(key), dict):
            out[key] = close_objects(out[key], bare=bare, root=root)
    for key in _LIST:
        if isinstance(out.get(key), list):
            part = key == "allOf" or ((not close or beside) and key in ("anyOf", "oneOf"))  # parts of this object
            items = [_local_ref(b, root) for b in out[key]] if part else out[key]
            out[key] = [close_objects(b, bare=bare, root=root, close=not part) for b in items]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: close_objects(s, bare=bare, root=root) for name, s in out[key].items()}
    if not close:
        return out
    names: list[str] = []
    decided = _object_keys(out, names, top=True, beside=beside)  # a part setting additionalProperties decides
    typ = out.get("type")
    is_object = typ == "object" or (isinstance(typ, list) and "object" in typ)
    if not decided and "additionalProperties" not in out and (names or (bare and is_object)):
        if len(names) > len(out.get("properties") or {}):  # the parts' keys are this object's too
            out["properties"] = {**{n: {} for n in names}, **(out.get("properties") or {})}
        out["additionalProperties"] = False
    return out


def _object_keys(schema: dict[str, Any], names: list[str], *, top: bool = False, beside: bool = False) -> bool:
    """Add to ``names`` the property names of ``schema`` and of the parts it is made of with it (its ``allOf``
    branches, its ``anyOf`` / ``oneOf`` alternatives when it has ``properties`` beside them (``beside``), and
    inside those their ``allOf`` branches and ``anyOf`` / ``oneOf`` alternatives, already inlined by
    :func:`close_objects`). True when one of those parts (not ``schema`` itself, at ``top``) sets
    ``additionalProperties``."""
    decided = not top and "additionalProperties" in schema
    if isinstance(schema.get("properties"), dict):
        names += [n for n in schema["properties"] if n not in names]
    for key in ("allOf",) if top and not beside else ("allOf", "anyOf", "oneOf"):
        for part in schema.get(key) or ():
            if isinstance(part, dict):
                decided = _object_keys(part, names) or decided
    return decided


def _local_ref(branch: Any, root: Any) -> Any:
    """An ``allOf`` branch that is only a local ``{"$ref": "#/$defs/NAME"}`` (or ``#/definitions/...``) as the
    definition it names (a copy, with the branch's other keys); any other branch as it is."""
    if not isinstance(branch, dict) or not isinstance(branch.get("$ref"), str):
        return branch
    parts = branch["$ref"].split("/")
    if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions"):
        return branch
    target = root.get(parts[1], {}).get(parts[2]) if isinstance(root.get(parts[1]), dict) else None
    if not isinstance(target, dict) or "$ref" in target:
        return branch
    return {**target, **{k: v for k, v in branch.items() if k != "$ref"}}


def regex_constraint(pattern: Any, param: str) -> Constraint:
    """The output must match ``pattern`` in full (vLLM ``guided_regex``; Rust ``regex`` syntax,
    no look-around; a leading ``^`` and trailing ``$`` are allowed)."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidRequest(f"{param} must be a non-empty regular expression", param=param)
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1]
    return Constraint(_llg().grammar_from_regex(pattern), "regex", param)


def choice_constraint(choices: Any, param: str) -> Constraint:
    """The output is exactly one of ``choices`` (vLLM ``guided_choice``)."""
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise InvalidRequest(f"{param} must be a non-empty list of non-empty strings", param=param)
    lark = "start: " + " | ".join(json.dumps(c) for c in choices)
    return Constraint(_llg().grammar_from_lark(lark), "choice", param)


def check_lark(text: str, param: str) -> None:
    """400 naming ``param`` when ``text`` is not a Lark grammar llguidance reads (its first error line), as
    OpenAI refuses a custom tool's grammar it cannot read."""
    llg = _llg()
    try:
        error = llg.validate_grammar(llg.grammar_from_lark(text))
    except Exception as exc:  # noqa: BLE001 - llguidance raises ValueError (or its own) on unreadable input
        error = str(exc) or type(exc).__name__
    if error:
        first = next((line.strip() for line in error.splitlines() if line.strip()), error)
        raise InvalidRequest(f"{param}: not a Lark grammar this server reads: {first}", param=param)


#: a Lark grammar's start rule, inlined (``?start:``, outlines' grammars) or not; llguidance's own test
#: (``is_lark_syntax``) knows only ``start:`` and read ``?start:`` as GBNF, which it is not
_LARK_START = re.compile(r"(?m)^\s*(%llguidance\b|\??start\s*:)")


def grammar_constraint(text: Any, param: str) -> Constraint:
    """A GBNF or Lark grammar compiled by llguidance (vLLM ``guided_grammar``); Lark when it has a ``start``
    (or ``?start``) rule, else GBNF."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(f"{param} must be a non-empty grammar", param=param)
    from llguidance import grammar_from

    try:
        grammar = grammar_from("lark" if _LARK_START.search(text) else "grammar", text)
    except Exception:  # llguidance's GBNF-to-Lark conversion raises on what it cannot read
        raise InvalidRequest(f"{param} is neither a GBNF nor a Lark grammar llguidance can read",
                             param=param) from None
    return Constraint(grammar, "grammar", param)


def _response_format(rf: ResponseFormat) -> Constraint | None:
    param = "response_format"
    if rf.type == "text":
        return None
    if rf.type == "json_object":
        return json_constraint(rf.schema if rf.schema is not None else {"type": "object"}, param)
    if rf.type == "json_schema":
        schema = rf.json_schema.schema if rf.json_schema is not None else rf.schema
        if schema is None:
            raise InvalidRequest("response_format json_schema needs json_schema.schema", param=param)
        return json_constraint(schema, param)
    raise InvalidRequest(f"response_format type {rf.type!r} is not one of text, json_object, json_schema",
                         param=param)


def _structured_outputs(so: StructuredOutputs) -> Constraint | None:
    param = "structured_outputs"
    if so.structural_tag is not None:
        raise InvalidRequest("structured_outputs.structural_tag is not supported here", param=f"{param}.structural_tag")
    given = [k for k in ("json", "regex", "choice", "grammar") if getattr(so, k) is not None]
    if so.json_object:
        given.append("json_object")
    if len(given) > 1:
        raise InvalidRequest(f"structured_outputs takes one of json, regex, choice, grammar, json_object; "
                             f"got {', '.join(given)}", param=f"{param}.{given[1]}")
    if not given:
        return None
    key = given[0]
    where = f"{param}.{key}"
    if key in ("json", "json_object"):
        whitespace = None if so.disable_any_whitespace else (so.whitespace_pattern or JSON_WHITESPACE)
        return json_constraint(so.json if key == "json" else {"type": "object"}, where, whitespace=whitespace,
                               no_additional_properties=bool(so.disable_additional_properties))
    if key == "regex":
        return regex_constraint(so.regex, where)
    if key == "choice":
        return choice_constraint(so.choice, where)
    return grammar_constraint(so.grammar, where)


def constraint_from_request(req: SamplingFields) -> RequestConstraint:
    """Read every constraint field of ``req`` (see module docstring) into a :class:`RequestConstraint`.

    Raises :class:`InvalidRequest` (400) naming the field for a malformed
    constraint, and naming the second field when two constraint fields are
    given. An empty result (falsy) means the output is unconstrained.
    """
    found: list[tuple[str, RequestConstraint]] = []
    if req.response_format is not None:
        c = _response_format(req.response_format)
        if c is not None:
            found.append(("response_format", RequestConstraint(constraint=c)))
    if req.json_schema is not None:
        found.append(("json_schema", RequestConstraint(constraint=json_constraint(req.json_schema, "json_schema"))))
    if req.grammar:  # "" is no grammar, as llama-server reads it (its web UI sends it)
        if req.grammar.lstrip().startswith("%llguidance"):  # llama.cpp hands these to llguidance too
            found.append(("grammar", RequestConstraint(constraint=Constraint(
                _llg().grammar_from_lark(req.grammar), "grammar", "grammar"))))
        else:
            if not req.grammar.strip():  # llama-server: "failed to parse grammar"
                raise InvalidRequest("grammar is only whitespace", param="grammar")
            found.append(("grammar", RequestConstraint(gbnf=req.grammar)))
    if req.guided_json is not None:
        found.append(("guided_json", RequestConstraint(constraint=json_constraint(req.guided_json, "guided_json"))))
    if req.guided_regex is not None:
        found.append(("guided_regex", RequestConstraint(constraint=regex_constraint(req.guided_regex,
                                                                                    "guided_regex"))))
    if req.guided_choice is not None:
        found.append(("guided_choice", RequestConstraint(constraint=choice_constraint(req.guided_choice,
                                                                                      "guided_choice"))))
    if req.guided_grammar is not None:
        found.append(("guided_grammar", RequestConstraint(constraint=grammar_constraint(req.guided_grammar,
                                                                                        "guided_grammar"))))
    if req.structured_outputs is not None:
        c = _structured_outputs(req.structured_outputs)
        if c is not None:
            found.append(("structured_outputs", RequestConstraint(constraint=c)))
    if len(found) > 1:
        names = [name for name, _ in found]
        raise InvalidRequest(f"give one constraint, not {' and '.join(names)}", param=names[1])
    return found[0][1] if found else RequestConstraint()
