"""Anthropic Messages <-> OpenAI chat, both ways, as pure functions (sans-IO).

:func:`to_chat_request` turns a ``/v1/messages`` body into the
:class:`~skippy.engine.protocols.openai.types.ChatCompletionRequest` the engine serves, so a
Messages request is rendered, constrained, parsed and scheduled exactly as a
chat completion; :func:`to_message` turns the engine's ``chat.completion``
into an Anthropic ``message``, and :class:`MessageStream` turns its
``chat.completion.chunk`` stream into Anthropic's server-sent events.
:func:`error_for` gives Anthropic's error type and status for an HTTP error.

Mapping (Anthropic -> OpenAI chat), as llama-server's
``convert_anthropic_to_oai`` does where it has one:

- ``system`` (a string or text blocks) -> a leading ``system`` message, without Claude Code's
  ``x-anthropic-billing-header: ...;`` line (a per-run stamp that changes at every start and would keep
  the prefix cache from reaching past it; llama-server rewrites its ``cch`` part); a ``system``
  message among ``messages`` (Anthropic's mid-conversation system beta) -> a ``system`` message there;
- a ``user`` message's ``tool_result`` blocks -> ``tool`` messages
  (``tool_call_id`` = ``tool_use_id``; text blocks joined with ``"\\n"``, or text and image parts where
  it has images; ``is_error: true`` prefixes ``"Error: "``), its text blocks -> the user
  message (joined with ``"\\n"``), in block order; its ``image`` blocks with a ``base64`` source -> ``image_url``
  parts with a data URL (``data:<media_type>;base64,<data>``), in place, read as on chat
  (:mod:`skippy.engine.chat.images`: its limits, ``media_not_supported`` without ``--mmproj``);
- an ``assistant`` message's ``text`` -> ``content``, ``thinking`` ->
  ``reasoning_content``, ``tool_use`` -> ``tool_calls`` (``input`` as JSON
  ``arguments``); a last assistant message is continued (prefill);
- ``tools[].input_schema`` -> ``function.parameters``; ``tool_choice``
  ``auto`` / ``any`` / ``tool`` / ``none`` -> ``"auto"`` / ``"required"`` /
  a named function / ``"none"``; ``disable_parallel_tool_use`` ->
  ``parallel_tool_calls: false``;
- ``max_tokens``, ``stop_sequences`` (``stop``), ``temperature``, ``top_p``,
  ``top_k``, ``metadata.user_id`` (``user``); ``thinking`` ``enabled`` /
  ``adaptive`` / ``between_tools`` / ``disabled`` -> ``enable_thinking`` true /
  false (absent: the template's default); ``output_config.effort`` ->
  ``reasoning_effort`` (``max`` -> ``xhigh``), ``output_config.format`` (or the
  structured-outputs beta's ``output_format``) -> ``response_format`` ``json_schema``.

Refused (400): an image with a ``file`` source (no Files API), or with a ``url`` source unless the server
fetches image URLs (``--allow-image-urls``), an image in an assistant message, documents. The routes give the
chat path's refusals of an image back with the block's name (:func:`restate_error`).
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

from partial_json_parser import loads as partial_json_loads

from skippy.engine.chat.documents import FILE_PART_TYPES, data_url, document_text
from skippy.engine.chat.images import check_base64, rename_image_error, rename_part_error
from skippy.engine.errors import ContextLengthExceeded, EngineError, InvalidRequest
from skippy.engine.protocols.anthropic import types as at
from skippy.engine.protocols.anthropic import wire as aw
from skippy.engine.protocols.base import UNSET
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    ContentPart,
    JsonSchemaFormat,
    Message,
    ResponseFormat,
    StreamOptions,
)

#: most ``stop_sequences`` one request may give (the chat route's limit on ``stop``)
MAX_STOP_SEQUENCES = 16
#: Anthropic's smallest ``thinking.budget_tokens``
MIN_THINKING_BUDGET = 1024


# -- request ----------------------------------------------------------------------------------------

def _text_of(blocks: list[Any], where: str, joiner: str) -> str:
    """The text of ``blocks`` (text blocks only; anything else is a 400 naming ``where.j``)."""
    texts = []
    for j, block in enumerate(blocks):
        if not isinstance(block, at.TextBlockParam):
            raise _unsupported(block, f"{where}.{j}")
        texts.append(block.text)
    return joiner.join(texts)


def _unsupported(block: Any, where: str) -> InvalidRequest:
    kind = type(block).__struct_config__.tag if hasattr(block, "__struct_config__") else type(block).__name__
    if kind in ("image", "document"):
        return InvalidRequest(f"{where}: {kind} blocks are read in a user message's content and in a "
                              "tool_result (not in an assistant message)", param=where)
    return InvalidRequest(f"{where}: a {kind} block is not allowed here", param=where)


#: ``source.media_type`` of a base64 image (Anthropic's list; WebP is decoded by Pillow, stb_image reads none)
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def image_part(block: at.ImageBlockParam, where: str) -> ContentPart:
    """An ``image`` block as chat's ``image_url`` part, which the chat path reads
    (:func:`~skippy.engine.chat.images.extract_images`: its limits, a model without a projector's 400): a
    base64 source as a data URL; a ``url`` source as its URL, fetched as chat's are (``--allow-image-urls``,
    else the chat path's ``image_url_not_supported``). 400 naming ``where.source...`` for a ``url`` that is
    not a string, a ``file`` source (no Files API), another source type, a ``media_type`` not in
    :data:`IMAGE_MEDIA_TYPES`, ``data`` that is not base64."""
    source = block.source
    kind = source.get("type")
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidRequest(f"{where}.source.url must be a non-empty string", param=f"{where}.source.url")
        return ContentPart(type="image_url", image_url={"url": url})
    if kind == "file":
        raise InvalidRequest(f"{where}.source: file sources are not supported (this server has no Files API); "
                             "send the image inline as a base64 source", param=f"{where}.source")
    if kind != "base64":
        raise InvalidRequest(f"{where}.source.type must be 'base64' or 'url', got {kind!r}",
                             param=f"{where}.source.type")
    media_type, data = source.get("media_type"), source.get("data")
    if media_type not in IMAGE_MEDIA_TYPES:
        raise InvalidRequest(f"{where}.source.media_type must be one of {', '.join(IMAGE_MEDIA_TYPES)}, got "
                             f"{media_type!r}", param=f"{where}.source.media_type")
    check_base64(data, f"{where}.source.data")
    return ContentPart(type="image_url", image_url={"url": f"data:{media_type};base64,{data}"})


#: ``source.media_type`` of a base64 or text document read (PDF's text by pypdf; a text file as UTF-8)
DOCUMENT_MEDIA_TYPES = ("application/pdf", "text/plain")


def document_parts(block: at.DocumentBlockParam, where: str) -> list[ContentPart]:
    """A ``document`` block as chat parts (:mod:`skippy.engine.chat.documents`), ``context`` first as text:
    a ``base64`` source (PDF or plain text) -> a ``file`` part (read when the prompt is rendered); a ``text``
    source -> its text; a ``content`` source (a string, or text and image blocks) -> its text, then its images
    as ``image_url`` parts. ``title`` names the document. 400 naming ``where.source...`` for a ``url`` source
    (not fetched), a ``file`` source (no Files API), another source type or media type, data that is not
    base64 (or not a string)."""
    source, title = block.source, block.title
    kind = source.get("type")
    parts = [ContentPart(type="text", text=block.context)] if block.context else []
    if kind in ("base64", "text"):
        media_type, data = source.get("media_type"), source.get("data")
        if media_type not in DOCUMENT_MEDIA_TYPES:
            raise InvalidRequest(f"{where}.source.media_type must be one of {', '.join(DOCUMENT_MEDIA_TYPES)}, got "
                                 f"{media_type!r}", param=f"{where}.source.media_type")
        if not isinstance(data, str):
            raise InvalidRequest(f"{where}.source.data must be a string", param=f"{where}.source.data")
        if kind == "text":
            return [*parts, ContentPart(type="text", text=document_text(title, data))]
        check_base64(data, f"{where}.source.data")
        name = title or ("document.pdf" if media_type == "application/pdf" else "document.txt")
        return [*parts, ContentPart(type="file", file={"file_data": data_url(media_type, data), "filename": name})]
    if kind == "content":
        content = source.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise InvalidRequest(f"{where}.source.content must be a string or a list of text and image blocks",
                                 param=f"{where}.source.content")
        texts, images = [], []
        for k, b in enumerate(blocks):
            at_k = f"{where}.source.content.{k}"
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
                texts.append(b["text"])
            elif isinstance(b, dict) and b.get("type") == "image" and isinstance(b.get("source"), dict):
                images.append(image_part(at.ImageBlockParam(source=b["source"]), at_k))
            else:
                raise InvalidRequest(f"{at_k}: a document's content holds text and image blocks", param=at_k)
        return [*parts, ContentPart(type="text", text=document_text(title, "\n".join(texts))), *images]
    if kind == "url":
        raise InvalidRequest(f"{where}.source: document URLs are not fetched by this server; send the document "
                             "inline as a base64 source", param=f"{where}.source")
    if kind == "file":
        raise InvalidRequest(f"{where}.source: file sources are not supported (this server has no Files API); "
                             "send the document inline as a base64 source", param=f"{where}.source")
    raise InvalidRequest(f"{where}.source.type must be 'base64', 'text' or 'content', got {kind!r}",
                         param=f"{where}.source.type")


def _tool_result(block: at.ToolResultBlockParam, where: str) -> Message:
    """A ``tool_result`` block as a ``tool`` message: its text blocks joined with ``"\n"``; with ``image``
    blocks (a screenshot, a file read by an agent), text and ``image_url`` parts in block order, which the chat
    path reads as a user message's (llama-server converts them the same way). ``is_error`` prefixes
    ``Error: ``."""
    content = block.content
    if isinstance(content, list) and any(isinstance(b, (at.ImageBlockParam, at.DocumentBlockParam)) for b in content):
        parts = []
        for j, b in enumerate(content):
            if isinstance(b, at.ImageBlockParam):
                parts.append(image_part(b, f"{where}.content.{j}"))
            elif isinstance(b, at.DocumentBlockParam):
                parts += document_parts(b, f"{where}.content.{j}")
            else:
                parts.append(ContentPart(type="text", text=_text_of([b], f"{where}.content", "")))
        if block.is_error:
            parts.insert(0, ContentPart(type="text", text="Error: "))
        return Message(role="tool", content=parts, tool_call_id=block.tool_use_id)
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = _text_of(content, f"{where}.content", "\n")
    if block.is_error:
        text = "Error: " + text if text else "Error"
    return Message(role="tool", content=text, tool_call_id=block.tool_use_id)


def _user_messages(content: list[Any], where: str) -> list[Message]:
    """A user turn's blocks in order: ``tool_result`` blocks as ``tool`` messages, runs of text and image
    blocks as one ``user`` message with text and ``image_url`` parts."""
    out: list[Message] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(content):
        if isinstance(block, at.TextBlockParam):
            parts.append(ContentPart(type="text", text=block.text))
        elif isinstance(block, at.ImageBlockParam):
            parts.append(image_part(block, f"{where}.{j}"))
        elif isinstance(block, at.DocumentBlockParam):
            parts += document_parts(block, f"{where}.{j}")
        elif isinstance(block, at.ToolResultBlockParam):
            if parts:
                out.append(Message(role="user", content=parts))
                parts = []
            out.append(_tool_result(block, f"{where}.{j}"))
        else:
            raise _unsupported(block, f"{where}.{j}")
    if parts or not out:
        out.append(Message(role="user", content=parts))
    return out


def _assistant_message(content: list[Any], where: str) -> Message:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if isinstance(block, at.TextBlockParam):
            texts.append(block.text)
        elif isinstance(block, at.ThinkingBlockParam):
            thinking.append(block.thinking)
        elif isinstance(block, at.RedactedThinkingBlockParam):
            continue  # encrypted by Anthropic: nothing to render
        elif isinstance(block, at.ToolUseBlockParam):
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
        else:
            raise _unsupported(block, f"{where}.{j}")
    return Message(role="assistant", content="".join(texts) if texts or not calls else None,
                   tool_calls=calls or None, reasoning_content="".join(thinking) or None)


#: Claude Code's first system text: ``x-anthropic-billing-header: cc_version=2.1.197.c23; cc_entrypoint=cli;
#: cch=a5145;`` (its ``key=value;`` pairs, then maybe the prompt itself); the version's suffix and ``cch`` change
#: from run to run
_BILLING_HEADER = re.compile(r"x-anthropic-billing-header:(?:\s*[\w.-]+=[^;\n]*;)*[ \t]*\n?")


def _without_billing_header(text: str) -> str:
    """``text`` without a leading ``x-anthropic-billing-header:`` line (:data:`_BILLING_HEADER`)."""
    return _BILLING_HEADER.sub("", text, count=1) if text.startswith("x-anthropic-billing-header:") else text


def _system_text(system: str | list[at.TextBlockParam], where: str) -> str:
    """The top-level ``system`` as one text (blocks joined with ``"\\n"``; a block other than text is a 400), its
    billing header left out (a first block holding only that header goes, its joiner with it)."""
    if isinstance(system, str):
        return _without_billing_header(system)
    _text_of(system, where, "")  # text blocks only
    texts = [b.text for b in system]
    if texts and texts[0] != (bare := _without_billing_header(texts[0])):
        texts[0:1] = [bare] if bare else []
    return "\n".join(texts)


def _messages(req: at.CountTokensRequest) -> list[Message]:
    out: list[Message] = []
    if req.system is not None:
        out.append(Message(role="system", content=_system_text(req.system, "system")))
    if not req.messages:
        raise InvalidRequest("messages: at least one message is required", param="messages")
    if all(m.role == "system" for m in req.messages):
        raise InvalidRequest("messages: at least one user or assistant message is required", param="messages")
    for i, m in enumerate(req.messages):
        where = f"messages.{i}.content"
        if m.role == "system":
            text = m.content if isinstance(m.content, str) else _text_of(m.content, where, "\n")
            out.append(Message(role="system", content=text))
        elif isinstance(m.content, str):
            out.append(Message(role=m.role, content=m.content))
        elif m.role == "user":
            out += _user_messages(m.content, where)
        else:
            out.append(_assistant_message(m.content, where))
    return out


def document_paths(req: at.CountTokensRequest) -> list[str]:
    """The Anthropic name of each ``document`` block of ``req`` that becomes a chat ``file`` part (a ``base64``
    source; ``messages.i.content.j``, or ``messages.i.content.j.content.k`` in a ``tool_result``), in the order
    :func:`to_chat_request` puts them in the chat messages."""
    def of(blocks: list[Any], path: str) -> list[str]:
        out = []
        for j, block in enumerate(blocks):
            if isinstance(block, at.DocumentBlockParam) and block.source.get("type") == "base64":
                out.append(f"{path}.{j}")
            elif isinstance(block, at.ToolResultBlockParam) and isinstance(block.content, list):
                out.extend(of(list(block.content), f"{path}.{j}.content"))
        return out

    return [name for i, m in enumerate(req.messages) if m.role == "user" and not isinstance(m.content, str)
            for name in of(list(m.content), f"messages.{i}.content")]


def image_paths(req: at.CountTokensRequest) -> list[str]:
    """The Anthropic name of each image block of ``req`` (``messages.i.content.j``, or
    ``messages.i.content.j.content.k`` in a ``tool_result``), in the order :func:`to_chat_request` puts them in
    the chat messages (block order; user messages only carry images there)."""
    def of(blocks: list[Any], path: str) -> list[str]:
        out = []
        for j, block in enumerate(blocks):
            if isinstance(block, at.ImageBlockParam):
                out.append(f"{path}.{j}")
            elif isinstance(block, at.DocumentBlockParam) and isinstance(block.source.get("content"), list):
                out.extend(f"{path}.{j}.source.content.{k}" for k, b in enumerate(block.source["content"])
                           if isinstance(b, dict) and b.get("type") == "image")
            elif isinstance(block, at.ToolResultBlockParam) and isinstance(block.content, list):
                out.extend(of(list(block.content), f"{path}.{j}.content"))
        return out

    return [name for i, m in enumerate(req.messages) if m.role == "user" and not isinstance(m.content, str)
            for name in of(list(m.content), f"messages.{i}.content")]


#: a chat tool's parameters, as the engine's errors name them (``tools[3].function.parameters``)
_CHAT_TOOL_PARAMS = re.compile(r"tools\[(\d+)\]\.function\.parameters")


def restate_error(exc: EngineError, req: at.CountTokensRequest, chat: ChatCompletionRequest) -> EngineError:
    """An engine error on ``chat`` (translated from ``req``) as Anthropic's API would put it, in place, returned
    for ``raise``: an image part or a document named by its block (``messages.0.content.1: ...``); a tool's
    parameters by
    ``tools.N.input_schema``; a prompt beyond the context in Anthropic's words (``prompt is too long: N tokens
    > M maximum``, and ``input length and `max_tokens` exceed context limit: ...``), which clients such as
    Claude Code recognise (to compact the conversation)."""
    exc = rename_image_error(exc, chat.messages, image_paths(req))
    exc = rename_part_error(exc, chat.messages, document_paths(req), FILE_PART_TYPES)
    if exc.param is not None and _CHAT_TOOL_PARAMS.match(exc.param):
        # chat's tools[k] is the k-th tool the model sees: server tools are left out of them
        seen = [i for i, t in enumerate(req.tools or ()) if not _server_tool(t)]

        def name(m: re.Match[str]) -> str:
            k = int(m.group(1))
            return f"tools.{seen[k] if k < len(seen) else k}.input_schema"
        exc.message = _CHAT_TOOL_PARAMS.sub(name, exc.message)
        exc.param = _CHAT_TOOL_PARAMS.sub(name, exc.param)
        exc.args = (exc.message,)
    if isinstance(exc, ContextLengthExceeded) and exc.n_prompt is not None and exc.n_ctx is not None:
        if exc.max_tokens is None:
            exc.message = f"prompt is too long: {exc.n_prompt} tokens > {exc.n_ctx} maximum"
        else:
            exc.message = (f"input length and `max_tokens` exceed context limit: {exc.n_prompt} + {exc.max_tokens} > "
                           f"{exc.n_ctx}, decrease input length or `max_tokens` and try again (this server runs "
                           "with --no-clamp-max-tokens; without it max_tokens is clamped to the room left)")
        exc.args = (exc.message,)
    return exc


#: Anthropic's server tools (``type`` prefixes): they run on Anthropic's servers, so a local model cannot call
#: them; :func:`to_chat_request` leaves them out of what the model sees (:func:`server_tools` names them for
#: the route's warning), as the Responses translation leaves OpenAI's hosted tools out
SERVER_TOOL_PREFIXES = ("web_search_", "web_fetch_", "code_execution_", "tool_search_tool_")

_TEXT_EDITOR_PROPERTIES = {
    "path": {"type": "string", "description": "Absolute path to the file or directory"},
    "file_text": {"type": "string", "description": "create: the new file's content"},
    "old_str": {"type": "string", "description": "str_replace: the exact text to replace"},
    "new_str": {"type": "string", "description": "str_replace: the replacement; insert: the text to insert"},
    "insert_line": {"type": "integer", "description": "insert: the line after which to insert (0: the start)"},
    "view_range": {"type": "array", "items": {"type": "integer"},
                   "description": "view: the first and last line to show (-1: to the end)"}}


def _text_editor(commands: list[str]) -> tuple[str, dict[str, Any]]:
    return ("View, create and edit text files: view shows a file with line numbers or lists a directory, create "
            "writes a new file, str_replace replaces one exact occurrence of old_str with new_str, insert adds "
            "new_str after insert_line" + (", undo_edit reverts the last edit" if "undo_edit" in commands else ""),
            {"type": "object", "required": ["command", "path"], "properties": {
                "command": {"type": "string", "enum": commands}, **_TEXT_EDITOR_PROPERTIES}})


_BASH = ("Run a command in a bash shell; the session persists between calls",
         {"type": "object", "properties": {"command": {"type": "string", "description": "The command to run"},
                                           "restart": {"type": "boolean", "description": "Restart the shell"}}})

#: Anthropic-defined client tools (the client runs them; Claude knows their input by their ``type``): the
#: description and input schema another model is given for them, from Anthropic's tool documentation
CLIENT_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "bash_20241022": _BASH, "bash_20250124": _BASH,
    "text_editor_20241022": _text_editor(["view", "create", "str_replace", "insert", "undo_edit"]),
    "text_editor_20250124": _text_editor(["view", "create", "str_replace", "insert", "undo_edit"]),
    "text_editor_20250429": _text_editor(["view", "create", "str_replace", "insert"]),
    "text_editor_20250728": _text_editor(["view", "create", "str_replace", "insert"]),
}


def _server_tool(tool: at.ToolParam) -> bool:
    return (tool.type or "").startswith(SERVER_TOOL_PREFIXES)


def server_tools(req: at.CountTokensRequest) -> list[str]:
    """The ``type`` of each server tool of ``req`` left out of what the model sees (:data:`SERVER_TOOL_PREFIXES`),
    in request order."""
    return [t.type for t in req.tools or () if t.type and _server_tool(t)]


def _tools(tools: list[at.ToolParam] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if _server_tool(tool):
            continue
        if tool.type in CLIENT_TOOLS:
            description, schema = CLIENT_TOOLS[tool.type]
            out.append({"type": "function", "function": {"name": tool.name, "description": description,
                                                         "parameters": schema}})
            continue
        if tool.type not in (None, "custom"):
            raise InvalidRequest(f"tools.{i}: tool type {tool.type!r} is not supported (this server runs client "
                                 f"tools with an input_schema and {', '.join(sorted(CLIENT_TOOLS))}; server tools "
                                 f"({', '.join(p + '*' for p in SERVER_TOOL_PREFIXES)}) are left out)",
                                 param=f"tools.{i}.type")
        if tool.input_schema is None:
            raise InvalidRequest(f"tools.{i}.input_schema: Field required", param=f"tools.{i}.input_schema")
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description is not None:
            function["description"] = tool.description
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: at.ToolChoice | None) -> tuple[str | dict[str, Any] | None, bool | None]:
    """OpenAI ``tool_choice`` and ``parallel_tool_calls`` (``None``: the engine's default)."""
    if choice is None:
        return None, None
    parallel = False if getattr(choice, "disable_parallel_tool_use", None) else None
    if isinstance(choice, at.ToolChoiceAuto):
        return "auto", parallel
    if isinstance(choice, at.ToolChoiceAny):
        return "required", parallel
    if isinstance(choice, at.ToolChoiceTool):
        return {"type": "function", "function": {"name": choice.name}}, parallel
    return "none", None


def _thinking(req: at.CountTokensRequest) -> bool | None:
    thinking = req.thinking
    if isinstance(thinking, (at.ThinkingAdaptive, at.ThinkingBetweenTools)):
        return True
    if isinstance(thinking, at.ThinkingEnabled):
        if thinking.budget_tokens < MIN_THINKING_BUDGET:
            raise InvalidRequest(f"thinking.budget_tokens: must be at least {MIN_THINKING_BUDGET}, got "
                                 f"{thinking.budget_tokens}", param="thinking.budget_tokens")
        if isinstance(req, at.MessagesRequest) and thinking.budget_tokens >= req.max_tokens:
            raise InvalidRequest(f"thinking.budget_tokens ({thinking.budget_tokens}) must be less than max_tokens "
                                 f"({req.max_tokens})", param="thinking.budget_tokens")
        return True
    if isinstance(thinking, at.ThinkingDisabled):
        return False
    return None


def to_chat_request(req: at.CountTokensRequest) -> ChatCompletionRequest:
    """The chat request that serves ``req`` (a :class:`~.types.MessagesRequest`, or a
    :class:`~.types.CountTokensRequest` whose prompt is the same; see the module docstring for the mapping).

    A streamed request asks for the usage chunk (``stream_options.include_usage``), which
    :class:`MessageStream` turns into the ``message_delta`` usage.

    Raises :class:`InvalidRequest` (400, ``param`` in Anthropic's dotted path, e.g.
    ``messages.1.content.0``) for an image it cannot send (:func:`image_part`), a document block, a block
    in the wrong role's message,
    a tool type it does not know (server tools are left out, Anthropic's ``bash`` and ``text_editor`` client
    tools get their documented input: :data:`CLIENT_TOOLS`), a tool without ``input_schema``, a
    ``tool_choice`` naming a server tool, more than 16 ``stop_sequences``, or a
    ``thinking.budget_tokens`` below 1024 or not below ``max_tokens``. What the chat route checks
    (tool names, the schema's depth, ``max_tokens`` >= 1, the sampler ranges) it checks here too.
    """
    if getattr(req, "thread", None) is not None:
        raise InvalidRequest("thread: this server keeps no message threads; send the whole conversation",
                             param="thread", code=THREAD_UNSUPPORTED)
    tool_choice, parallel = _tool_choice(req.tool_choice)
    server = {t.name for t in req.tools or () if _server_tool(t)}
    if isinstance(req.tool_choice, at.ToolChoiceTool) and req.tool_choice.name in server:
        raise InvalidRequest(f"tool_choice names the server tool {req.tool_choice.name!r}, which runs on Anthropic's "
                             "servers: this server leaves it out, so it cannot be forced", param="tool_choice")
    fields: dict[str, Any] = {
        "model": req.model, "messages": _messages(req), "tools": _tools(req.tools), "tool_choice": tool_choice,
        "parallel_tool_calls": parallel, "enable_thinking": _thinking(req)}
    if isinstance(req.thinking, at.ThinkingEnabled):  # the budget caps the thinking block (llama-server does so)
        fields["thinking_budget_tokens"] = req.thinking.budget_tokens
    out = req.output_config
    if out is not None and out.effort is not None:
        fields["reasoning_effort"] = "xhigh" if out.effort == "max" else out.effort
    fmt = out.format if out is not None and out.format is not None else req.output_format  # the beta's name
    if out is not None and out.format is not None and req.output_format is not None:
        raise InvalidRequest("give output_config.format or output_format (its beta name), not both",
                             param="output_format")
    if fmt is not None:
        fields["response_format"] = ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(
            name="output", schema=fmt.schema, strict=True))
    if isinstance(req, at.MessagesRequest):
        stops = req.stop_sequences
        if stops is not None and len(stops) > MAX_STOP_SEQUENCES:
            raise InvalidRequest(f"stop_sequences: at most {MAX_STOP_SEQUENCES} are allowed, got {len(stops)}",
                                 param="stop_sequences")
        fields.update(max_tokens=req.max_tokens, stop=list(stops) if stops else None, temperature=req.temperature,
                      mesh_hooks=req.mesh_hooks,
                      top_p=req.top_p, top_k=req.top_k, stream=req.stream,
                      stream_options=StreamOptions(include_usage=True) if req.stream else None,
                      user=req.metadata.user_id if req.metadata is not None else None)
    return ChatCompletionRequest(**fields)


# -- reply ------------------------------------------------------------------------------------------

def message_id(chat_id: str) -> str:
    """``msg_`` + the chat completion id's suffix (``chatcmpl-abc`` -> ``msg_abc``; an ``X-Request-Id``
    suffix stays recognisable)."""
    return "msg_" + chat_id.split("-", 1)[-1]


def tool_use_id(call_id: str) -> str:
    """``toolu_`` + the tool call id's suffix (``call_abc`` -> ``toolu_abc``)."""
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.split("_", 1)[-1]


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's ``arguments`` text as the ``input`` object; what is not a JSON object (arguments cut off
    by ``max_tokens``) is completed as far as it parses (partial-json-parser), else ``{}``."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        try:
            value = partial_json_loads(arguments)
        except Exception:  # the library raises several kinds of errors on text that is no JSON prefix
            value = {}
    return value if isinstance(value, dict) else {}


def stop_reason(finish_reason: str | None, stopping_word: str | None,
                stop_sequences: list[str] | None) -> tuple[str, str | None]:
    """Anthropic ``(stop_reason, stop_sequence)`` for an OpenAI ``finish_reason`` and vLLM's ``stop_reason``
    (the stop string that matched): ``stop`` -> ``stop_sequence`` with the matched sequence when it is one
    of ``stop_sequences``, else ``end_turn``; ``length`` -> ``max_tokens``; ``tool_calls`` -> ``tool_use``;
    anything else (a hook policy's stop) -> ``end_turn``."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "stop" and stopping_word and stopping_word in (stop_sequences or ()):
        return "stop_sequence", stopping_word
    return "end_turn", None


def usage(u: wire.Usage) -> aw.AnthropicUsage:
    """Anthropic usage of an OpenAI ``usage``: ``input_tokens`` excludes the ``cache_read_input_tokens``
    (Anthropic counts them apart; their sum is ``prompt_tokens``)."""
    cached = u.prompt_tokens_details.cached_tokens
    return aw.AnthropicUsage(input_tokens=max(0, u.prompt_tokens - cached), output_tokens=u.completion_tokens,
                             cache_read_input_tokens=cached)


def to_message(completion: wire.ChatCompletion, stop_sequences: list[str] | None = None) -> aw.AnthropicMessage:
    """The Anthropic ``message`` for a one-choice ``chat.completion``: blocks ``thinking`` (from
    ``reasoning_content``), ``text`` (when not empty), then one ``tool_use`` per tool call, in that order."""
    choice = completion.choices[0]
    m = choice.message
    content: list[aw.ContentBlock] = []
    if m.reasoning_content:
        content.append(aw.ThinkingBlock(thinking=m.reasoning_content))
    if m.content:
        content.append(aw.TextBlock(text=m.content))
    for call in m.tool_calls or ():
        content.append(aw.ToolUseBlock(id=tool_use_id(call.id), name=call.function.name,
                                       input=tool_input(call.function.arguments)))
    reason, sequence = stop_reason(choice.finish_reason, choice.get("stop_reason"), stop_sequences)
    return aw.AnthropicMessage(id=message_id(completion.id), model=completion.model, content=content,
                               stop_reason=reason, stop_sequence=sequence, usage=usage(completion.usage))


class MessageStream:
    """``chat.completion.chunk`` objects in, Anthropic stream events out (one request's stream).

    Feed every chunk of a one-choice stream that asked for the usage chunk
    (:func:`to_chat_request` does) to :meth:`events`. The role chunk gives
    ``message_start`` (``usage.input_tokens`` = ``input_tokens``, the prompt
    length: cache hits are not known yet) and a ``ping``; each delta continues
    the open content block or closes it and starts the next
    (``reasoning_content`` -> a ``thinking`` block, ``content`` -> ``text``,
    each tool call -> a ``tool_use`` block whose arguments come as
    ``input_json_delta``); the finish chunk closes the last block; the usage
    chunk gives ``message_delta`` (``stop_reason``, ``stop_sequence``, the
    final usage) and ``message_stop``. Blocks are numbered from 0 in order.
    """

    def __init__(self, *, input_tokens: int = 0, stop_sequences: list[str] | None = None) -> None:
        self.input_tokens = input_tokens
        self.stop_sequences = stop_sequences
        self._started = False
        self._index = -1  # the open block's index (-1: none yet)
        self._open: str | int | None = None  # "text", "thinking", a tool call's index, or None
        self._stop: tuple[str, str | None] = ("end_turn", None)
        self.output_tokens = 0  # completion tokens, once the usage chunk came
        self.done = False

    def _start_block(self, key: str | int, block: aw.ContentBlock) -> list[aw.StreamEvent]:
        out = self._close_block()
        self._index += 1
        self._open = key
        out.append(aw.ContentBlockStartEvent(index=self._index, content_block=block))
        return out

    def _close_block(self) -> list[aw.StreamEvent]:
        if self._open is None:
            return []
        self._open = None
        return [aw.ContentBlockStopEvent(index=self._index)]

    def _delta(self, delta: aw.TextDelta | aw.InputJSONDelta | aw.ThinkingDelta) -> aw.ContentBlockDeltaEvent:
        return aw.ContentBlockDeltaEvent(index=self._index, delta=delta)

    def events(self, chunk: wire.ChatCompletionChunk) -> list[aw.StreamEvent]:
        """The events for one chunk (often one; none for an empty delta)."""
        out: list[aw.StreamEvent] = []
        if not self._started:
            self._started = True
            out.append(aw.MessageStartEvent(message=aw.AnthropicMessage(
                id=message_id(chunk.id), model=chunk.model, content=[],
                usage=aw.AnthropicUsage(input_tokens=self.input_tokens, output_tokens=0))))
            out.append(aw.PingEvent())
        for choice in chunk.choices:
            d = choice.delta
            reasoning = d.get("reasoning_content")
            if reasoning:
                if self._open != "thinking":
                    out += self._start_block("thinking", aw.ThinkingBlock(thinking=""))
                out.append(self._delta(aw.ThinkingDelta(thinking=reasoning)))
            text = d.get("content")
            if text:
                if self._open != "text":
                    out += self._start_block("text", aw.TextBlock(text=""))
                out.append(self._delta(aw.TextDelta(text=text)))
            for call in d.get("tool_calls") or ():
                if self._open != call.index:
                    name = call.function.get("name") or ""
                    call_id = call.get("id") or f"call_{call.index}"
                    out += self._start_block(call.index, aw.ToolUseBlock(id=tool_use_id(call_id), name=name,
                                                                          input={}))
                if call.function.arguments:
                    out.append(self._delta(aw.InputJSONDelta(partial_json=call.function.arguments)))
            if choice.finish_reason is not None:
                out += self._close_block()
                self._stop = stop_reason(choice.finish_reason, choice.get("stop_reason"), self.stop_sequences)
        if isinstance(chunk.usage, wire.Usage):
            out += self._finish(chunk.usage)
        return out

    def _finish(self, u: wire.Usage) -> list[aw.StreamEvent]:
        out = self._close_block()
        final = usage(u)
        self.output_tokens = final.output_tokens
        self.done = True
        out.append(aw.MessageDeltaEvent(
            delta=aw.MessageDelta(stop_reason=self._stop[0], stop_sequence=self._stop[1]),
            usage=aw.MessageDeltaUsage(input_tokens=final.input_tokens, output_tokens=final.output_tokens,
                                       cache_read_input_tokens=final.cache_read_input_tokens)))
        out.append(aw.MessageStopEvent())
        return out


# -- errors -----------------------------------------------------------------------------------------

#: Anthropic's error type and HTTP status for each status this server answers with; others: 4xx ->
#: ``invalid_request_error``, 5xx -> ``api_error`` (status kept)
_ERRORS: dict[int, tuple[str, int]] = {
    400: ("invalid_request_error", 400),
    401: ("authentication_error", 401),
    403: ("permission_error", 403),
    404: ("not_found_error", 404),
    413: ("request_too_large", 413),
    429: ("rate_limit_error", 429),
    500: ("api_error", 500),
    503: ("overloaded_error", 529),  # loading, draining: Anthropic's "temporarily overloaded", which clients retry
    504: ("timeout_error", 504),
}


#: the ``code`` of a refused ``thread`` (the message-threads beta), which Anthropic's envelope carries as
#: ``error.details.error_code``: the SDKs' threads then go on without one (``continue_unthreaded``)
THREAD_UNSUPPORTED = "thread_unsupported_request"


def error_for(status: int, message: str, code: str | None = None) -> tuple[int, aw.AnthropicError]:
    """Anthropic's status and envelope for an HTTP error ``status`` with ``message`` (see :data:`_ERRORS`;
    503 becomes 529 ``overloaded_error``); a ``code`` Anthropic names in ``error.details``
    (:data:`THREAD_UNSUPPORTED`) is given there, with the refused field as ``unsupported``."""
    type_, new_status = _ERRORS.get(status, ("invalid_request_error" if status < 500 else "api_error", status))
    details = {"error_code": code, "unsupported": ["thread"]} if code == THREAD_UNSUPPORTED else UNSET
    return new_status, aw.AnthropicError(error=aw.AnthropicErrorBody(type=type_, message=message, details=details))


# -- models -----------------------------------------------------------------------------------------

def model_info(model_id: str, created: int) -> aw.ModelInfo:
    """The Anthropic ``/v1/models`` entry of a served name (``created``: Unix seconds)."""
    stamp = datetime.datetime.fromtimestamp(created, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return aw.ModelInfo(id=model_id, display_name=model_id, created_at=stamp)


def model_info_list(entries: list[aw.ModelInfo], *, after_id: str | None = None, before_id: str | None = None,
                    limit: int = 20) -> aw.ModelInfoList:
    """Anthropic's ``GET /v1/models`` page of ``entries``: those after ``after_id`` (or before ``before_id``; an id
    not listed gives an empty page), at most ``limit`` (1..1000, Anthropic's default 20). Raises
    :class:`InvalidRequest` (400) for a ``limit`` outside 1..1000."""
    if not 1 <= limit <= 1000:
        raise InvalidRequest("limit must be between 1 and 1000", param="limit")
    ids = [e.id for e in entries]
    if after_id is not None:
        entries = entries[ids.index(after_id) + 1:] if after_id in ids else []
        page, more = entries[:limit], len(entries) > limit
    elif before_id is not None:
        entries = entries[:ids.index(before_id)] if before_id in ids else []
        page, more = entries[-limit:], len(entries) > limit
    else:
        page, more = entries[:limit], len(entries) > limit
    return aw.ModelInfoList(data=page, has_more=more, first_id=page[0].id if page else None,
                            last_id=page[-1].id if page else None)
