"""Tool-call emulation for templates that ignore ``tools`` (sans-IO).

Convention (our own, as skippy-server uses for small models such as
SmolLM2): the model calls a tool by writing one line::

    TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}

This module builds the request side of it:

- :func:`build_instruction` / :func:`tool_signature`: the text that teaches
  the convention and lists the tools (``- name: description`` plus an
  argument signature such as ``{city: string, days?: integer}``);
- :func:`rewrite_history`: OpenAI chat messages -> messages a tool-less
  template can render (no ``tool`` role, no ``tool_calls``);
- :func:`build_grammar`: a llama.cpp GBNF grammar that forces (``required``
  or a named tool) or, lazily after the trigger word ``TOOL_CALL``
  (``auto``), constrains the call line to the tools' JSON schemas;
- :class:`EarlyStop`: tells the decoder when a generation may end after
  its call(s);
- :func:`envelope_note`, :func:`build_envelope_instruction` and
  ``rewrite_history(..., envelope=True)``: the request side of the generic
  JSON envelope (``{"tool_calls": [...]}`` or ``{"response": ...}``) that a
  request mixing tools with a JSON schema gets instead, natively or not
  (:func:`skippy.engine.sampling.constraints.tool_envelope`).

The model's output is parsed back by
:class:`skippy.engine.chat.formats.emulated.EmulatedToolParser`.
``tool_choice`` is OpenAI's: ``"none"``, ``"auto"`` (default),
``"required"`` or ``{"type": "function", "function": {"name": ...}}``.
Tools are OpenAI ``{"type": "function", "function": {...}}`` dicts or flat
``{"name", "description", "parameters" | "input_schema"}`` dicts.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import attrs

from skippy.engine.chat.formats.emulated import MARKER, EmulatedToolParser
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import NotText, part_texts
from skippy.engine.sampling.constraints import ENVELOPE_CALL, ENVELOPE_CALLS, ENVELOPE_RESPONSE
from skippy.engine.sampling.grammar import schema_converter, tool_call_rules

TOOL_RESULT_PREFIX = "Tool result for"
_SYSTEM_ROLES = ("system", "developer")

# --------------------------------------------------------------------------
# tools and tool_choice


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool, dict) else None
    return fn if isinstance(fn, dict) else (tool if isinstance(tool, dict) else {})


def tool_name(tool: dict[str, Any]) -> str:
    """The tool's name (OpenAI ``function.name`` or flat ``name``); ``""`` if absent."""
    name = _function(tool).get("name")
    return name if isinstance(name, str) else ""


def _schema(tool: dict[str, Any]) -> dict[str, Any]:
    fn = _function(tool)
    schema = fn.get("parameters", fn.get("input_schema"))
    return schema if isinstance(schema, dict) else {}


def _chosen_name(tool_choice: Any) -> str | None:
    """Name of the tool a named ``tool_choice`` forces, else None."""
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
        if isinstance(name, str) and name:
            return name
    return None


def select_tools(tools: list[dict[str, Any]] | None, tool_choice: Any) -> list[dict[str, Any]]:
    """Tools the model may call: none for ``"none"``, the named one for a named
    choice (raises :class:`InvalidRequest` if it is not in ``tools``), else all."""
    tools = list(tools or [])
    if tool_choice == "none":
        return []
    name = _chosen_name(tool_choice)
    if name is None:
        return tools
    chosen = [t for t in tools if tool_name(t) == name]
    if not chosen:
        raise InvalidRequest(f"tool_choice names tool {name!r}, which is not in tools", param="tool_choice")
    return chosen[:1]


def allowed_tool_names(tools: list[dict[str, Any]] | None, tool_choice: Any) -> set[str]:
    """The names :class:`EmulatedToolParser` should accept for this request."""
    return {tool_name(t) for t in select_tools(tools, tool_choice)} - {""}


def _forced(tool_choice: Any) -> bool:
    return tool_choice == "required" or _chosen_name(tool_choice) is not None


# --------------------------------------------------------------------------
# instruction


def _type_text(schema: Any, depth: int = 0) -> str:
    """Compact type of a JSON schema: ``string``, ``integer[]``, ``"a" | "b"``, ``{x: number}``."""
    if not isinstance(schema, dict) or not schema:
        return "any"
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    alts = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alts, list) and alts:
        return " | ".join(_type_text(a, depth) for a in alts)
    if isinstance(schema.get("$ref"), str):
        return schema["$ref"].rsplit("/", 1)[-1] or "any"
    t = schema.get("type")
    if isinstance(t, list):
        return " | ".join(str(x) for x in t)
    if t == "array":
        item = _type_text(schema.get("items"), depth + 1)
        return f"({item})[]" if " " in item else f"{item}[]"
    if t == "object" or (t is None and "properties" in schema):
        if isinstance(schema.get("properties"), dict) and schema["properties"] and depth < 3:
            return _object_signature(schema, depth + 1)
        return "object"
    return t if isinstance(t, str) else "any"


def _object_signature(schema: dict[str, Any], depth: int = 0) -> str:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    parts = [f"{k}{'' if k in required else '?'}: {_type_text(v, depth)}" for k, v in props.items()]
    return "{" + ", ".join(parts) + "}"


def tool_signature(tool: dict[str, Any]) -> str:
    """Argument signature of a tool, from ``parameters`` (or ``input_schema``).

    Shape: ``{city: string, days?: integer}`` -- optional arguments (not in
    ``required``) carry ``?``; types come from the JSON schema (arrays as
    ``string[]``, enums as ``"c" | "f"``, nested objects expanded). A tool
    without parameters gives ``{}``.
    """
    return _object_signature(_schema(tool))


def build_instruction(tools: list[dict[str, Any]] | None, tool_choice: Any = "auto", *,
                      parallel_tool_calls: bool = True) -> str:
    """The system-prompt text that teaches the ``TOOL_CALL`` convention.

    Lists each callable tool as ``- name: description`` followed by its
    :func:`tool_signature` (only the named tool for a named ``tool_choice``).
    Returns ``""`` when nothing may be called (no tools or ``"none"``).
    Raises :class:`InvalidRequest` if a named ``tool_choice`` is not in ``tools``.
    """
    chosen = select_tools(tools, tool_choice)
    if not chosen:
        return ""
    lines = [
        "You can call tools. To call a tool, write a line of this form, with nothing else on that line:",
        f'{MARKER} {{"name": "<tool name>", "arguments": {{<arguments as a JSON object>}}}}',
        "You may write several such lines, one per call." if parallel_tool_calls
        else "Call at most one tool per reply.",
        f'After your call(s), stop. Each result comes back in a message that starts with "{TOOL_RESULT_PREFIX}".',
    ]
    name = _chosen_name(tool_choice)
    if name is not None:
        lines.append(f"You must call the tool {name}.")
    elif tool_choice == "required":
        lines.append("You must call at least one tool.")
    else:
        lines.append("If no tool is needed, answer normally without a TOOL_CALL line.")
    lines += ["", "Available tools:"]
    for tool in chosen:
        desc = " ".join(str(_function(tool).get("description") or "").split())
        head = f"- {tool_name(tool)}: {desc}" if desc else f"- {tool_name(tool)}:"
        lines.append(f"{head} Arguments: {tool_signature(tool)}")
    return "\n".join(lines)


def envelope_note(parallel_tool_calls: bool = True) -> str:
    """The system-prompt sentence llama-server adds to a request that mixes tools with a JSON schema
    (``common_chat_params_init_generic``), naming the calls' key the grammar allows (``tool_calls``, or
    ``tool_call`` when not ``parallel_tool_calls``; llama.cpp names ``tool_call`` either way)."""
    key = ENVELOPE_CALLS if parallel_tool_calls else ENVELOPE_CALL
    return f"Respond in JSON format, either with `{key}` (a request to call tools) or with `{ENVELOPE_RESPONSE}` " \
        "reply to the user's request"


def envelope_call(calls: list[tuple[str, Any]], parallel_tool_calls: bool = True) -> str:
    """``(name, arguments)`` calls as one envelope object: ``{"tool_calls": [{"name": ..., "arguments": ...}]}``,
    or ``{"tool_call": {...}}`` for one call where calls are not parallel."""
    objs = [{"name": name, "arguments": args} for name, args in calls]
    if not parallel_tool_calls and len(objs) == 1:
        return json.dumps({ENVELOPE_CALL: objs[0]}, ensure_ascii=False)
    return json.dumps({ENVELOPE_CALLS: objs}, ensure_ascii=False)


def build_envelope_instruction(tools: list[dict[str, Any]] | None, *, parallel_tool_calls: bool = True) -> str:
    """The system-prompt text for a template without tools when the request mixes tools (``tool_choice:
    "auto"``) with a JSON schema: :func:`envelope_note`, the two shapes of the reply (calls, or the answer
    in ``response``), where results come back, and the tools as :func:`build_instruction` lists them.
    ``""`` without tools."""
    chosen = select_tools(tools, "auto")
    if not chosen:
        return ""
    shape = envelope_call([("<tool name>", "ARGS")], parallel_tool_calls).replace('"ARGS"', "{<arguments>}")
    lines = [
        f"You can call tools. {envelope_note(parallel_tool_calls)}. Write one JSON object:",
        f"{shape} to call {'tools' if parallel_tool_calls else 'one tool'}, or",
        f'{{"{ENVELOPE_RESPONSE}": <your reply>}} to reply.',
        f'Each result comes back in a message that starts with "{TOOL_RESULT_PREFIX}".',
        "", "Available tools:",
    ]
    for tool in chosen:
        desc = " ".join(str(_function(tool).get("description") or "").split())
        head = f"- {tool_name(tool)}: {desc}" if desc else f"- {tool_name(tool)}:"
        lines.append(f"{head} Arguments: {tool_signature(tool)}")
    return "\n".join(lines)


def add_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` after the first message's content when that is a system (or developer)
    message (a blank line between, as llama.cpp's ``add_system`` joins them; a list of parts gets a text
    part), else with a new first ``system`` message of ``text``. The input is not changed."""
    out = list(messages)
    first = out[0] if out else None
    if first is None or first.get("role") not in _SYSTEM_ROLES:
        return [{"role": "system", "content": text}, *out]
    content = first.get("content")
    if isinstance(content, list):
        content = [*content, {"type": "text", "text": text}]
    elif isinstance(content, str) and content.strip():
        content = f"{content.rstrip()}\n\n{text}"
    else:
        content = text
    out[0] = {**first, "content": content}
    return out


# --------------------------------------------------------------------------
# history rewrite


def _text(content: Any, i: int) -> str:
    """Flatten ``content`` (str, None or a list of parts) to text; media -> 400."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        try:
            return "\n".join(part_texts(content))
        except NotText as e:
            if e.missing_text:
                raise InvalidRequest(f"messages[{i}].content[{e.index}].text: a text part needs a 'text' string",
                                     param=f"messages[{i}].content[{e.index}].text") from None
            raise InvalidRequest(
                f"messages[{i}]: content part of type {e.kind!r} is not supported with emulated tool calls "
                "(this model's template handles text only)", param=f"messages[{i}].content") from None
    raise InvalidRequest(f"messages[{i}]: content must be a string or a list of parts",
                         param=f"messages[{i}].content")


def _history_call(call: Any, i: int, j: int) -> tuple[str, str, Any]:
    """(id, name, arguments) of one history tool call (``messages[i].tool_calls[j]``)."""
    where = f"messages[{i}].tool_calls[{j}]"
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise InvalidRequest(f"{where}: a tool call needs function.name", param=where)
    args = fn.get("arguments", {})
    if args is None or (isinstance(args, str) and not args.strip()):
        args = {}
    elif isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            raise InvalidRequest(f"{where}: function.arguments is not valid JSON (a JSON object encoded as a string)",
                                 param=f"{where}.function.arguments") from None
        except RecursionError:
            raise InvalidRequest(f"{where}: function.arguments is nested too deeply",
                                 param=f"{where}.function.arguments") from None
    cid = call.get("id")
    return (cid if isinstance(cid, str) else ""), fn["name"], args


def rewrite_history(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: Any = "auto", *,
                    requires_alternation: bool = False, parallel_tool_calls: bool = True,
                    envelope: bool = False) -> list[dict[str, Any]]:
    """Rewrite OpenAI chat messages for a template that has no tool support.

    Returns new dicts (the input is never mutated), every ``content`` a str:

    - the :func:`build_instruction` text is appended to the first system (or
      developer) message, or inserted as a new first ``system`` message;
    - an assistant message's ``tool_calls`` become ``TOOL_CALL {...}`` lines
      after its text (``tool_calls`` removed);
    - with ``envelope`` (a request mixing tools with a JSON schema), the
      :func:`build_envelope_instruction` text instead, and an assistant
      message's calls as one envelope object (:func:`envelope_call`) after
      its text, as the model is to write them;
    - a ``tool`` (or legacy ``function``) message becomes a ``user`` message
      ``Tool result for get_weather (call_x): <content>``, the tool name
      taken from ``name`` or from the assistant call with that id;
    - other system and developer messages are kept; when
      ``requires_alternation`` (templates that raise unless user/assistant
      alternate), a system/developer message after the first non-system one
      becomes a ``user`` message ``System: <content>``, and consecutive
      messages of the same role are merged (joined by a blank line).

    Raises :class:`InvalidRequest` (400) naming ``messages[i]`` for media
    content parts or malformed tool calls in the history.
    """
    instruction = build_envelope_instruction(tools, parallel_tool_calls=parallel_tool_calls) if envelope \
        else build_instruction(tools, tool_choice, parallel_tool_calls=parallel_tool_calls)
    names_by_id: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    seen_turn = False
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InvalidRequest(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = msg.get("role")
        new = {k: copy.deepcopy(v) for k, v in msg.items() if k not in ("tool_calls", "tool_call_id", "content")}
        text = _text(msg.get("content"), i)
        if role == "assistant" and msg.get("tool_calls"):
            if not isinstance(msg["tool_calls"], list):
                raise InvalidRequest(f"messages[{i}].tool_calls must be a list", param=f"messages[{i}].tool_calls")
            calls = []
            for j, call in enumerate(msg["tool_calls"]):
                cid, name, args = _history_call(call, i, j)
                if cid:
                    names_by_id[cid] = name
                calls.append((name, args))
            lines = [envelope_call(calls, parallel_tool_calls)] if envelope else \
                [f"{MARKER} " + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
                 for name, args in calls]
            text = "\n".join(([text.rstrip()] if text.strip() else []) + lines)
        elif role in ("tool", "function"):
            given_id, given_name = msg.get("tool_call_id"), msg.get("name")
            cid = given_id if isinstance(given_id, str) else ""
            name = given_name if isinstance(given_name, str) else names_by_id.get(cid, "")
            label = " ".join(x for x in (name, f"({cid})" if cid else "") if x)
            text = f"{TOOL_RESULT_PREFIX} {label}: {text}" if label else f"Tool result: {text}"
            new = {"role": "user"}
        elif role in _SYSTEM_ROLES and requires_alternation and seen_turn:
            new = {"role": "user"}
            text = f"System: {text}"
        if new.get("role") not in _SYSTEM_ROLES:
            seen_turn = True
        new["content"] = text
        out.append(new)

    if instruction:
        first = next((m for m in out if m.get("role") in _SYSTEM_ROLES), None)
        if first is None:
            out.insert(0, {"role": "system", "content": instruction})
        else:
            first["content"] = f"{first['content'].rstrip()}\n\n{instruction}" if first["content"].strip() \
                else instruction

    if requires_alternation:
        merged: list[dict[str, Any]] = []
        for m in out:
            if merged and merged[-1].get("role") == m.get("role"):
                prev = merged[-1]
                prev["content"] = "\n\n".join(x for x in (prev["content"], m["content"]) if x)
            else:
                merged.append(m)
        out = merged
    return out


# --------------------------------------------------------------------------
# grammar


@attrs.frozen
class EmulationGrammar:
    """A GBNF grammar (root rule ``root``) for the decoder's grammar sampler.

    ``lazy``: apply only from the first trigger on, else constrain the whole
    output. ``trigger_words`` are literal words; ``trigger_patterns`` the same
    triggers as the regexes llama.cpp builds from words (pass these to
    ``llama_sampler_init_grammar_lazy_patterns``, which matches the grammar
    against the text from the pattern's first capture group on).
    """

    gbnf: str
    lazy: bool
    trigger_words: tuple[str, ...] = ()

    @property
    def trigger_patterns(self) -> tuple[str, ...]:
        return tuple(r"[\s\S]*?(" + re.escape(w) + r")[\s\S]*" for w in self.trigger_words)


def build_grammar(tools: list[dict[str, Any]] | None, tool_choice: Any = "auto",
                  parallel_tool_calls: bool = True) -> EmulationGrammar | None:
    """GBNF grammar for the ``TOOL_CALL`` line(s); None when no grammar applies.

    Shape: ``root ::= tool-line ("\\n" tool-line)* "\\n"?`` (one line only,
    ``tool-line "\\n"?``, when ``parallel_tool_calls`` is false), where
    ``tool-line ::= "TOOL_CALL" ":"? " "? (call-a | call-b ...)`` and each
    ``call-x`` is ``{"name": "x", "arguments": <args>}`` with ``<args>`` the
    tool's JSON schema converted by llama-cpp-python's ``SchemaConverter``
    (llama.cpp json-schema-to-grammar; whitespace ``" "?``, strings without
    control characters, so a call stays on one line).

    ``"required"`` or a named ``tool_choice`` -> strict (``lazy=False``);
    ``"auto"`` -> lazy with trigger word ``TOOL_CALL``; ``"none"`` or no
    tools -> None. Raises :class:`InvalidRequest` for a schema that cannot
    be converted (naming ``tools[i]``) or an unknown named tool.
    """
    chosen = select_tools(tools, tool_choice)
    if not chosen:
        return None
    conv = schema_converter()
    alts = tool_call_rules(conv, list(tools or []), chosen)
    conv._add_rule("tool-line", f'"{MARKER}" ":"? " "? ({" | ".join(alts)})')
    conv._add_rule("root", 'tool-line ("\\n" tool-line)* "\\n"?' if parallel_tool_calls else 'tool-line "\\n"?')
    gbnf = conv.format_grammar()
    if _forced(tool_choice):
        return EmulationGrammar(gbnf=gbnf, lazy=False)
    return EmulationGrammar(gbnf=gbnf, lazy=True, trigger_words=(MARKER,))


# --------------------------------------------------------------------------
# early stop


class EarlyStop:
    """Tells the decoder when an emulated-tools generation may end (sans-IO).

    Feed the generated text piece by piece; :meth:`feed` returns True once
    generation should stop:

    - ``parallel_tool_calls=False``: right after the first complete call;
    - otherwise: at the first line after a complete call that is neither
      blank nor (the start of) another ``TOOL_CALL`` line. The rest of the
      call's own line is ignored.

    After a stop, :attr:`keep` is how many characters of all text fed should
    be kept (the rest -- text after the call, or the start of the stopping
    line -- should be dropped before the final parse). Calls are recognised
    exactly as :class:`EmulatedToolParser` does (``<think>`` spans skipped; with ``thinking_forced_open``
    the text up to the first ``</think>`` too).
    """

    finish_reason = "stop"

    def __init__(self, allowed_tools: set[str], parallel_tool_calls: bool = True, *,
                 thinking_forced_open: bool = False) -> None:
        self._parser = EmulatedToolParser(allowed_tools, parallel_tool_calls, id_factory=lambda: "",
                                          thinking_forced_open=thinking_forced_open)
        self.parallel_tool_calls = parallel_tool_calls
        self.keep: int | None = None

    @property
    def stopped(self) -> bool:
        return self.keep is not None

    def feed(self, text: str) -> bool:
        if self.keep is not None:
            return True
        self._parser.feed(text)
        end = self._parser.last_call_end
        if end is None:
            return False
        if not self.parallel_tool_calls:
            self.keep = self._parser.raw_offset(end - 1) + 1
            return True
        rest = self._parser.text_after_last_call or ""
        offset = end
        for k, line in enumerate(rest.split("\n")):
            if k > 0:
                s = line.lstrip(" \t\r")
                if s and not (s.startswith(MARKER) or MARKER.startswith(s)):
                    self.keep = self._parser.raw_offset(offset)
                    return True
            offset += len(line) + 1
        return False
