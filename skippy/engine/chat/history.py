"""Chat history normalisation before a template renders it.

OpenAI clients send what templates written for Hugging Face do not always
expect. :func:`normalize_history` returns new message dicts (the input is
never mutated):

- ``content`` given as a list of ``{"type": "text", "text": ...}`` parts is
  joined with ``"\\n"`` into one string (as vLLM and llama.cpp do for
  templates without typed content); other part types -> 400.
- ``content: null`` becomes ``""`` (templates concatenate it; some print
  ``None``).
- ``tool_calls[].function.arguments`` given as a JSON string must be valid
  JSON (else 400 ``InvalidRequest`` naming ``messages[i]``, param
  ``messages``) and becomes the decoded object for templates that require
  object arguments (:attr:`TemplateCaps.requires_object_arguments`), as
  Hugging Face chat templates expect.
- tool-call ids (``tool_calls[].id``, a tool message's ``tool_call_id``) become 9 alphanumeric characters
  for a template that refuses others (:attr:`TemplateCaps.requires_short_call_ids`, Mistral's), the same
  digest for a call and its result (:func:`~skippy.engine.chat.formats.base.short_call_id`), as vLLM
  shortens them for Mistral models.

:func:`fold_late_system` rewrites a conversation for a template that refuses, drops or moves a system
message once the conversation has begun (see there); :func:`~skippy.engine.chat.prepare.render_chat` renders
with it where the template's probe says so (:attr:`TemplateCaps.supports_late_system`).
"""

from __future__ import annotations

import json
from typing import Any

from skippy.engine.chat.capabilities import TemplateCaps
from skippy.engine.chat.formats.base import short_call_id
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import NotText, part_texts


def _bad(i: int, what: str, field: str = "") -> InvalidRequest:
    """400 ``messages[i]<what>`` naming ``messages[i]<field>`` as ``param``."""
    return InvalidRequest(f"messages[{i}]{what}", param=f"messages[{i}]{field}")


def _content(i: int, content: Any) -> Any:
    if content is None:
        return ""
    if not isinstance(content, list):
        return content
    try:
        return "\n".join(part_texts(content))
    except NotText as e:
        if e.missing_text:
            raise _bad(i, f".content[{e.index}].text: a text part needs a 'text' string",
                       f".content[{e.index}].text") from None
        raise _bad(i, f".content[{e.index}]: content part type {e.kind!r} is not supported (only 'text')",
                   f".content[{e.index}]") from None


def _tool_calls(i: int, calls: Any, caps: TemplateCaps) -> Any:
    if not isinstance(calls, list):
        return calls
    out = []
    for j, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            out.append(call)
            continue
        function = dict(call["function"])
        args = function.get("arguments")
        if isinstance(args, str):
            try:
                decoded = json.loads(args) if args.strip() else {}
            except ValueError:
                raise _bad(i, f".tool_calls[{j}].function.arguments is not valid JSON (a JSON object encoded "
                              "as a string)", f".tool_calls[{j}].function.arguments") from None
            except RecursionError:
                raise _bad(i, f".tool_calls[{j}].function.arguments is nested too deeply",
                           f".tool_calls[{j}].function.arguments") from None
            if caps.requires_object_arguments:
                function["arguments"] = decoded
        new = {**call, "function": function}
        if caps.requires_short_call_ids and isinstance(call.get("id"), str):
            new["id"] = short_call_id(call["id"])
        out.append(new)
    return out


def normalize_history(messages: list[dict[str, Any]], caps: TemplateCaps) -> list[dict[str, Any]]:
    """Return template-ready copies of OpenAI ``messages`` (see module docstring).

    Raises :class:`InvalidRequest` (400, param ``messages``) naming the
    offending ``messages[i]``.
    """
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad(i, " must be an object")
        new = dict(message)
        if "content" in new or new.get("role") == "assistant":
            new["content"] = _content(i, new.get("content"))
        if "tool_calls" in new and new["tool_calls"] is not None:
            new["tool_calls"] = _tool_calls(i, new["tool_calls"], caps)
        if caps.requires_short_call_ids and isinstance(new.get("tool_call_id"), str):
            new["tool_call_id"] = short_call_id(new["tool_call_id"])
        out.append(new)
    return out


#: roles of a system message (OpenAI's ``developer`` is one)
SYSTEM_ROLES = ("system", "developer")


def fold_late_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """``messages`` with each system (or developer) message after the first other one made a ``user``
    message ``System: <text>``, and consecutive user messages then merged (joined by a blank line), as the
    tool emulation does for templates that require alternation; ``None`` when there is no such message.

    Clients put system messages anywhere (OpenAI chat; Anthropic's mid-conversation system messages, which
    Claude Code sends), and some templates raise on one that is not first (Qwen 3.5: "System message must be
    at the beginning"; Mistral's: roles must alternate). ``content`` must be a string already
    (:func:`normalize_history`); the input is not mutated.
    """
    late = begun = False
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") in SYSTEM_ROLES:
            if begun:
                late = True
                m = {"role": "user", "content": f"System: {m.get('content') or ''}"}
        else:
            begun = True
        if out and m.get("role") == "user" and out[-1].get("role") == "user" \
                and isinstance(out[-1].get("content"), str) and isinstance(m.get("content"), str):
            out[-1] = {**out[-1], "content": "\n\n".join(x for x in (out[-1]["content"], m["content"]) if x)}
        else:
            out.append(dict(m))
    return out if late else None


def fold_leading_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """``messages`` with the system (or developer) messages before the first other one moved into the first
    user message, for a template that has no system role (Gemma 2 raises "System role not supported");
    ``None`` when the conversation does not start with one.

    llama.cpp's rule (minja's system-role polyfill): the system texts, joined by ``"\\n"``, go before the
    user's text with a ``"\\n"`` between them; a list ``content`` (images) gets them as a first text part.
    When the next message is not a user one (or there is none), they become a user message of their own.
    ``content`` must be a string or a list of parts already; the input is not mutated.
    """
    n = 0
    while n < len(messages) and messages[n].get("role") in SYSTEM_ROLES:
        n += 1
    if n == 0:
        return None
    text = "\n".join(str(m.get("content") or "") for m in messages[:n])
    rest = messages[n:]
    if rest and rest[0].get("role") == "user":
        content = rest[0].get("content")
        if isinstance(content, list):
            content = [{"type": "text", "text": text}, *content]
        else:
            content = "\n".join(x for x in (text, content or "") if x)
        return [{**rest[0], "content": content}, *rest[1:]]
    return [{"role": "user", "content": text}, *rest]
