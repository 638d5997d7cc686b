"""OpenAI Responses API (``POST /v1/responses``) as a translation onto Chat Completions (sans-IO).

Nothing here generates: :func:`prepare` turns a Responses request (and the
conversation of its ``previous_response_id``) into the
:class:`~skippy.engine.protocols.openai.types.ChatCompletionRequest` the engine already
serves, so templates, tool emulation, formats, hooks and the scheduler are
the chat route's; :meth:`Turn.from_chat` turns the ``chat.completion`` into
a Responses ``response`` object and :class:`ResponseEvents` turns the
``chat.completion.chunk`` stream into the Responses event stream. The
:class:`ResponseStore` keeps stored responses (``store: true``, OpenAI's
default) in a bounded LRU so a follow-up sends only its new items.

Shapes follow the OpenAI Responses API as the ``openai`` Python package
types it (``openai.types.responses``): input items ``message`` (a string or
``input_text`` parts; ``input_image`` parts in user messages), ``function_call``, ``function_call_output``
(a string, or ``input_text`` and ``input_image`` parts: a tool's screenshot),
``reasoning``; output items ``message`` (``output_text``),
``function_call`` (``call_id``, ``name``, ``arguments``), ``reasoning``
(the chat message's ``reasoning_content`` as ``reasoning_text``); stream
events with ``sequence_number`` from 0. What the translation maps:

============================== ==========================================
Responses                      Chat Completions
============================== ==========================================
``instructions``               a first ``system`` message (not carried
                               over by ``previous_response_id``, as OpenAI)
``input`` items                ``messages`` (consecutive ``function_call``
                               items are one assistant message's
                               ``tool_calls``; ``reasoning`` becomes the next
                               assistant message's ``reasoning_content``)
``input_image`` parts          ``image_url`` parts (``{"url": image_url}``):
                               base64 data URLs, read as on chat
                               (:mod:`skippy.engine.chat.images`); ``file_id``
                               is refused (no Files API)
``tools`` ``function``         ``tools`` (``{"type": "function", "function": ...}``)
``tools`` ``namespace``        one function tool per function, named
                               ``namespace__name`` (:func:`namespaced_name`);
                               a call comes back as ``function_call``
                               ``name`` + ``namespace``
``tools`` hosted types         left out (:data:`HOSTED_TOOL_TYPES`; the
                               route logs them)
``tool_choice``                ``tool_choice`` (``allowed_tools`` narrows ``tools``)
``text.format``                ``response_format``
``max_output_tokens``          ``max_completion_tokens``
``reasoning.effort``           ``reasoning_effort``
finish ``length``              ``status: "incomplete"``,
                               ``incomplete_details.reason: "max_output_tokens"``
============================== ==========================================
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import attrs
import msgspec
from msgspec import UNSET

from skippy.engine.chat.images import rename_image_error
from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    ContentPart,
    JsonSchemaFormat,
    Message,
    ResponseFormat,
    StreamOptions,
)
from skippy.engine.protocols.responses.store import StoredResponse
from skippy.engine.protocols.responses.types import (
    ResponseInputContent,
    ResponseInputItem,
    ResponsesRequest,
    ResponseTextConfig,
    ResponseTool,
)
from skippy.engine.protocols.responses.wire import (
    ResponseError,
    ResponseFunctionCall,
    ResponseIncompleteDetails,
    ResponseInputTokensDetails,
    ResponseObject,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseOutputTokensDetails,
    ResponseReasoningEcho,
    ResponseReasoningItem,
    ResponseReasoningText,
    ResponseStreamEvent,
    ResponseUsage,
)

# -- ids --------------------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    """``resp_`` / ``msg_`` / ``fc_`` / ``rs_`` + 48 random hex chars (OpenAI's id shapes)."""
    return f"{prefix}_{secrets.token_hex(24)}"


# -- request -> chat request ---------------------------------------------------------------------------

#: OpenAI's ``metadata`` limits: pairs, key and value characters
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


_MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})


_USER_PARTS = _TEXT_PARTS | {"input_image"}

#: ``detail`` of an ``input_image`` part (OpenAI's ``ImageDetail``): accepted, not acted on (libmtmd resizes every
#: image to the projector's input size)
IMAGE_DETAILS = frozenset({"auto", "low", "high", "original"})


def _text(part: ResponseInputContent, where: str, kinds: frozenset[str] = _TEXT_PARTS) -> str:
    if part.type not in kinds:
        also = " (input_image parts are read in user messages and function_call_output)" \
            if part.type == "input_image" else ""
        raise InvalidRequest(f"{where}.type {part.type!r} is not supported here (this server reads "
                             f"{', '.join(sorted(kinds))} parts){also}", param=f"{where}.type")
    if part.text is None:
        raise InvalidRequest(f"{where}.text is required", param=f"{where}.text")
    return part.text


def _texts(parts: list[ResponseInputContent], param: str, kinds: frozenset[str] = _TEXT_PARTS) -> list[str]:
    return [_text(part, f"{param}[{j}]", kinds) for j, part in enumerate(parts)]


def image_part(part: ResponseInputContent, where: str) -> ContentPart:
    """An ``input_image`` part as chat's ``image_url`` part (``detail`` kept), whose data URL the chat path
    reads (:func:`~skippy.engine.chat.images.extract_images`: base64 ``data:`` URLs only, the limits). 400
    naming ``where.<field>`` for a ``file_id`` (this server has no Files API), a missing ``image_url``, or a
    ``detail`` that is none of :data:`IMAGE_DETAILS`."""
    if part.file_id is not None:
        raise InvalidRequest(f"{where}.file_id: images by file id are not supported (this server has no Files "
                             "API); send the image inline: image_url with a base64 data URL "
                             "(data:image/png;base64,...)", param=f"{where}.file_id")
    if part.image_url is None:
        raise InvalidRequest(f"{where}.image_url is required (a base64 data URL: data:image/png;base64,...)",
                             param=f"{where}.image_url")
    if part.detail is not None and part.detail not in IMAGE_DETAILS:
        raise InvalidRequest(f"{where}.detail must be one of {sorted(IMAGE_DETAILS)}, got {part.detail!r}",
                             param=f"{where}.detail")
    image = {"url": part.image_url} if part.detail is None else {"url": part.image_url, "detail": part.detail}
    return ContentPart(type="image_url", image_url=image)


def _user_parts(parts: list[ResponseInputContent], param: str) -> list[ContentPart]:
    return [image_part(part, f"{param}[{j}]") if part.type == "input_image"
            else ContentPart(type="text", text=_text(part, f"{param}[{j}]", _USER_PARTS))
            for j, part in enumerate(parts)]


def _kind(item: ResponseInputItem) -> str | None:
    return item.type if item.type is not None else ("message" if item.role is not None else None)


def _reasoning_text(item: ResponseInputItem, param: str) -> str:
    if isinstance(item.content, list) and item.content:
        return "".join(_texts(item.content, f"{param}.content", frozenset({"reasoning_text"})))
    return "\n".join(_texts(item.summary or [], f"{param}.summary", frozenset({"summary_text"})))


def chat_messages(instructions: str | None, items: list[ResponseInputItem] | tuple[ResponseInputItem, ...],
                  *, first: int = 0) -> list[Message]:
    """Chat messages for ``instructions`` and the input ``items`` (see the module table).

    ``first``: the index of ``items[0]`` in the request's ``input`` (errors name
    ``input[first + i]``: items before it came from the store). Raises
    :class:`InvalidRequest` (400) naming ``input[i].<field>`` for an unknown
    item type, a missing field, or a content part that is not text.
    """
    messages: list[Message] = [Message(role="system", content=instructions)] if instructions is not None else []
    reasoning = ""  # a reasoning item's text, for the next assistant message

    def assistant() -> Message:
        """The assistant message a function call joins: the last one, unless a tool result or a user turn
        came after it."""
        nonlocal reasoning
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant" and not reasoning:
            return last
        messages.append(Message(role="assistant", content=None, reasoning_content=reasoning or None))
        reasoning = ""
        return messages[-1]

    for i, item in enumerate(items):
        param = f"input[{i - first}]" if i >= first else "previous_response_id"
        kind = _kind(item)
        if kind == "message":
            if item.role not in _MESSAGE_ROLES:
                raise InvalidRequest(f"{param}.role must be one of {sorted(_MESSAGE_ROLES)}, got {item.role!r}",
                                     param=f"{param}.role")
            if item.content is None:
                raise InvalidRequest(f"{param}.content is required (a string or a list of input_text or "
                                     "input_image parts)", param=f"{param}.content")
            if item.role == "assistant":
                text = item.content if isinstance(item.content, str) else "".join(
                    _texts(item.content, f"{param}.content"))
                messages.append(Message(role="assistant", content=text, reasoning_content=reasoning or None))
                reasoning = ""
            else:
                content: str | list[ContentPart] = (
                    item.content if isinstance(item.content, str)
                    else _user_parts(item.content, f"{param}.content") if item.role == "user"
                    else [ContentPart(type="text", text=t) for t in _texts(item.content, f"{param}.content")])
                messages.append(Message(role=item.role, content=content))
        elif kind == "function_call":
            for field in ("call_id", "name", "arguments"):
                if getattr(item, field) is None:
                    raise InvalidRequest(f"{param}.{field} is required for a function_call item",
                                         param=f"{param}.{field}")
            message = assistant()
            name = item.name if item.namespace is None else namespaced_name(item.namespace, item.name or "")
            message.tool_calls = (message.tool_calls or []) + [
                {"id": item.call_id, "type": "function", "function": {"name": name, "arguments": item.arguments}}]
        elif kind == "function_call_output":
            if item.call_id is None:
                raise InvalidRequest(f"{param}.call_id is required for a function_call_output item",
                                     param=f"{param}.call_id")
            if item.output is None:
                raise InvalidRequest(f"{param}.output is required (a string or a list of input_text and input_image "
                                     "parts)",
                                     param=f"{param}.output")
            output: str | list[ContentPart] = (
                item.output if isinstance(item.output, str)
                else _user_parts(item.output, f"{param}.output") if any(p.type == "input_image" for p in item.output)
                else "".join(_texts(item.output, f"{param}.output")))
            messages.append(Message(role="tool", content=output, tool_call_id=item.call_id))
        elif kind == "reasoning":
            reasoning += _reasoning_text(item, param)
        elif kind is None:
            raise InvalidRequest(f"{param} needs a type (message, function_call, function_call_output, reasoning) "
                                 "or a role", param=f"{param}.type")
        else:
            raise InvalidRequest(f"{param}.type {kind!r} is not supported (this server takes message, "
                                 "function_call, function_call_output and reasoning items)", param=f"{param}.type")
    return messages


def image_params(items: list[ResponseInputItem] | tuple[ResponseInputItem, ...], *, first: int = 0) -> tuple[str, ...]:
    """The Responses name of each ``input_image`` part of ``items``, in the order :func:`chat_messages` puts
    them in the chat messages (user messages and ``function_call_output`` items carry images there):
    ``input[i].content[j]`` or ``input[i].output[j]``, counted from ``first`` as there; ``previous_response_id``
    for an image of a stored item."""
    out = []
    for i, item in enumerate(items):
        kind = _kind(item)
        field, parts = ("content", item.content) if kind == "message" and item.role == "user" else \
            ("output", item.output) if kind == "function_call_output" else ("", None)
        if not isinstance(parts, list):
            continue
        out += [f"input[{i - first}].{field}[{j}]" if i >= first else "previous_response_id"
                for j, part in enumerate(parts) if part.type == "input_image"]
    return tuple(out)


def _input_items(value: str | list[ResponseInputItem] | None) -> list[ResponseInputItem]:
    if value is None:
        return []
    if isinstance(value, str):
        return [ResponseInputItem(type="message", role="user", content=value)]
    return list(value)


#: OpenAI's hosted and built-in tool types (``openai.types.responses.Tool``): their calls run on OpenAI's side or
#: come back as items of their own (``web_search_call``, ``local_shell_call``...), which this server neither
#: runs nor produces. :func:`chat_tools` leaves them out of what the model sees (as llama-server's and vLLM's
#: Responses translations do); a ``tool_choice`` forcing one is a 400.
HOSTED_TOOL_TYPES = frozenset({
    "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11", "file_search",
    "code_interpreter", "image_generation", "computer", "computer_use", "computer_use_preview", "mcp",
    "local_shell", "shell", "apply_patch", "tool_search", "programmatic_tool_calling"})


def namespaced_name(namespace: str, name: str) -> str:
    """The name the model sees for function ``name`` of namespace tool ``namespace``: ``namespace__name``, with
    ``_`` trimmed off the end of the namespace and the start of the name so one ``__`` joins them
    (``("multi_agent_v1", "spawn_agent")`` -> ``multi_agent_v1__spawn_agent``; ``("mcp__docs__", "search")`` ->
    ``mcp__docs__search``). This is Codex's own flat name (``ToolName::canonical_flat_name``, codex-rs
    ``protocol/src/tool_name.rs``) and, for names without those underscores, vLLM's Responses API's
    (``flat_namespace_tool_name``: ``namespace__name``). A call is mapped back through the request's own tools
    (:attr:`ChatTools.namespaced`), never by splitting the name."""
    return f"{namespace.rstrip('_')}__{name.lstrip('_')}"


@attrs.frozen
class ChatTools:
    """A request's ``tools`` as the chat path takes them.

    ``tools``: chat's function tools, those of each ``namespace`` tool flattened in place under
    :func:`namespaced_name` (``None`` when the request had no ``tools``); ``params``: the Responses field
    each chat tool came from (``tools[i]`` or ``tools[i].tools[j]``), to name it in errors; ``namespaced``:
    each flattened name -> ``(namespace, name)``; ``ignored``: the hosted tool types left out, each once, in
    request order.
    """

    tools: list[dict[str, Any]] | None = None
    params: tuple[str, ...] = ()
    namespaced: dict[str, tuple[str, str]] = attrs.field(factory=dict)
    ignored: tuple[str, ...] = ()

    def resolve(self, name: str, namespace: str | None = None) -> str:
        """The chat tool name for a function named by the client (``tool_choice``): ``namespace`` + ``name``
        when a namespace is given; else ``name`` itself when the model sees it, or the one namespaced function
        of that name (``close_agent`` -> ``multi_agent_v1__close_agent``); else ``name`` unchanged (the chat
        path then says no such tool is offered)."""
        if namespace is not None:
            return namespaced_name(namespace, name)
        if any(t["function"]["name"] == name for t in self.tools or []):
            return name
        matches = [flat for flat, (_, fn) in self.namespaced.items() if fn == name]
        return matches[0] if len(matches) == 1 else name

    def call(self, name: str) -> tuple[str, str | None]:
        """A chat tool call's name as the Responses ``function_call`` names it: ``(name, namespace)``; a
        namespaced function's flattened name gives its function name and namespace (also a bare function name
        that no plain tool has and exactly one namespace has: a model that dropped the prefix), any other
        name ``(name, None)``."""
        if name in self.namespaced:
            namespace, fn = self.namespaced[name]
            return fn, namespace
        resolved = self.resolve(name)
        if resolved != name:
            namespace, fn = self.namespaced[resolved]
            return fn, namespace
        return name, None


def _function(tool: ResponseTool, param: str, name: str | None = None) -> dict[str, Any]:
    if tool.type != "function":
        raise InvalidRequest(f"{param}.type {tool.type!r} is not supported: this server runs function tools, "
                             "namespace tools of functions, and leaves hosted tools out", param=f"{param}.type")
    if not tool.name:
        raise InvalidRequest(f"{param}.name is required for a function tool", param=f"{param}.name")
    fn: dict[str, Any] = {"name": name or tool.name}
    for key in ("description", "parameters", "strict"):
        if getattr(tool, key) is not None:
            fn[key] = getattr(tool, key)
    return {"type": "function", "function": fn}


def chat_tools(tools: list[ResponseTool] | None) -> ChatTools:
    """Chat's tools for the Responses ``tools`` (see :class:`ChatTools`).

    ``function`` tools pass as they are; a ``namespace`` tool's functions become function tools named
    :func:`namespaced_name` (their description, parameters and ``strict`` unchanged; the namespace's
    description is not repeated into each); a hosted type (:data:`HOSTED_TOOL_TYPES`) is left out and
    listed in ``ignored``. Raises :class:`InvalidRequest` (400) naming the field: another tool type
    (``custom``...), a function without ``name``, a namespace without ``name`` or ``tools``, a tool inside a
    namespace that is not a function, and two tools the model would see under one name (a function named
    like a flattened one, a namespace or function listed twice): a call could not be told apart.
    """
    if tools is None:
        return ChatTools()
    out: list[dict[str, Any]] = []
    params: list[str] = []
    namespaced: dict[str, tuple[str, str]] = {}
    ignored: list[str] = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if tool.type in HOSTED_TOOL_TYPES:
            if tool.type not in ignored:
                ignored.append(tool.type)
            continue
        if tool.type != "namespace":
            out.append(_function(tool, param))
            params.append(param)
            continue
        if not tool.name:
            raise InvalidRequest(f"{param}.name is required for a namespace tool", param=f"{param}.name")
        if tool.tools is None:
            raise InvalidRequest(f"{param}.tools is required for a namespace tool (the function tools it groups)",
                                 param=f"{param}.tools")
        for j, inner in enumerate(tool.tools):
            where = f"{param}.tools[{j}]"
            if inner.type != "function":
                raise InvalidRequest(f"{where}.type {inner.type!r} is not supported in a namespace: this server "
                                     "runs function tools", param=f"{where}.type")
            fn = _function(inner, where, namespaced_name(tool.name, inner.name or ""))
            namespaced[fn["function"]["name"]] = (tool.name, inner.name or "")
            out.append(fn)
            params.append(where)
    seen: dict[str, str] = {}
    for tool_, param in zip(out, params, strict=True):
        name = tool_["function"]["name"]
        if name in seen:
            raise InvalidRequest(f"{param}: the model would see it as {name!r}, as {seen[name]}: tool names must be "
                                 "unique once namespaces are flattened (namespace__name)", param=f"{param}.name")
        seen[name] = param
    return ChatTools(out, tuple(params), namespaced, tuple(ignored))


def _chat_tool_choice(choice: str | dict[str, Any] | None,
                      tools: ChatTools) -> tuple[Any, list[dict[str, Any]] | None]:
    """Chat's ``tool_choice`` and ``tools``: a named function -> chat's named form (a namespaced function
    named by its flattened name, by ``name`` with a ``namespace`` key, or by its bare name when one namespace
    has it); ``allowed_tools`` keeps only the listed function tools, with ``mode`` ``auto`` or ``required``
    (hosted tools listed there are left out, as in ``tools``). A hosted tool forced by type (``{"type":
    "web_search"}``, ``mcp``...) is a 400: it cannot be honoured here."""
    if choice is None or isinstance(choice, str):
        return choice, tools.tools
    kind = choice.get("type")
    namespace = choice.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidRequest("tool_choice.namespace must be a string", param="tool_choice")
    if kind == "function":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("tool_choice.name is required for a function tool choice", param="tool_choice")
        return {"type": "function", "function": {"name": tools.resolve(name, namespace)}}, tools.tools
    if kind == "allowed_tools":
        mode, listed = choice.get("mode", "auto"), choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(listed, list):
            raise InvalidRequest("tool_choice allowed_tools needs mode 'auto' or 'required' and a list of tools",
                                 param="tool_choice")
        names = set()
        for t in listed:
            if isinstance(t, dict) and t.get("type") in HOSTED_TOOL_TYPES:
                continue
            if not (isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str)
                    and isinstance(t.get("namespace", ""), str)):
                raise InvalidRequest("tool_choice allowed_tools lists function tools ({\"type\": \"function\", "
                                     "\"name\": ...}; hosted ones are left out)", param="tool_choice")
            names.add(tools.resolve(t["name"], t.get("namespace")))
        return mode, [t for t in tools.tools or [] if t["function"]["name"] in names]
    if kind in HOSTED_TOOL_TYPES:
        raise InvalidRequest(f"tool_choice forces the hosted tool {kind!r}, which this server cannot run (it runs "
                             "function tools only)", param="tool_choice")
    raise InvalidRequest(f"tool_choice type {kind!r} is not supported (use 'auto', 'none', 'required', "
                         "{\"type\": \"function\", \"name\": ...} or allowed_tools)", param="tool_choice")


def _response_format(text: ResponseTextConfig | None) -> ResponseFormat | None:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    if fmt.type == "json_schema":
        if fmt.schema is None:
            raise InvalidRequest("text.format.schema is required for json_schema", param="text.format.schema")
        return ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(
            name=fmt.name, schema=fmt.schema, strict=fmt.strict, description=fmt.description))
    raise InvalidRequest(f"text.format.type must be 'text', 'json_object' or 'json_schema', got {fmt.type!r}",
                         param="text.format.type")


def _check_metadata(metadata: dict[str, str] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequest(f"metadata has {len(metadata)} pairs; at most {MAX_METADATA_PAIRS}", param="metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
            raise InvalidRequest(f"metadata keys are at most {MAX_METADATA_KEY} characters and values at most "
                                 f"{MAX_METADATA_VALUE}", param="metadata")


#: chat request fields (as errors name them) -> the Responses field they came from
_PARAMS = (("messages", "input"), ("response_format", "text.format"), ("json_schema", "text.format"),
           ("reasoning_effort", "reasoning.effort"), ("max_completion_tokens", "max_output_tokens"),
           ("max_tokens", "max_output_tokens"))


def responses_param(param: str | None, tool_params: tuple[str, ...] = ()) -> str | None:
    """A chat request's field name (as an engine error names it) as the Responses field it came from:
    ``messages[3].content`` -> ``input``, ``tools[0].function.name`` -> ``tools[0].name``,
    ``response_format`` -> ``text.format``, ``max_completion_tokens`` -> ``max_output_tokens``.
    ``tool_params``: the Responses field of each chat tool (:attr:`ChatTools.params`), as chat's ``tools[k]``
    are flattened namespaces and leave hosted tools out (``tools[3].function.parameters`` ->
    ``tools[4].tools[1].parameters``)."""
    if param is None:
        return None
    for chat, ours in _PARAMS:
        if param == chat or param.startswith(chat + "[") or param.startswith(chat + "."):
            return ours
    if param.startswith("tools["):
        index, _, rest = param[len("tools["):].partition("]")
        if index.isdigit() and int(index) < len(tool_params):
            param = tool_params[int(index)] + rest
        if ".function." in param or param.endswith(".function"):
            param = param.replace(".function", "", 1)
    return param


def rename_params(exc: EngineError, tool_params: tuple[str, ...] = ()) -> EngineError:
    """``exc`` with its ``param`` renamed by :func:`responses_param` (in place; returned for ``raise``)."""
    exc.param = responses_param(exc.param, tool_params)
    return exc


@attrs.frozen
class Turn:
    """One Responses request, translated: ``chat`` is what the engine serves.

    ``history``: the items of the ``previous_response_id`` conversation;
    ``input``: this request's items; ``id`` / ``created_at`` (Unix seconds) /
    ``model``: the response's; ``images``: the Responses name of each image
    part of ``chat`` (:func:`image_params`), for :meth:`rename`; ``tools``: the request's tools as chat's
    (:class:`ChatTools`: which hosted types were left out, how a namespaced call maps back).
    """

    request: ResponsesRequest
    id: str
    created_at: int
    model: str
    history: tuple[ResponseInputItem, ...]
    input: tuple[ResponseInputItem, ...]
    chat: ChatCompletionRequest
    images: tuple[str, ...] = ()
    tools: ChatTools = attrs.field(factory=ChatTools)

    def rename(self, exc: EngineError) -> EngineError:
        """An engine error about :attr:`chat` in the Responses request's names (in place; returned for
        ``raise``): an image part as its ``input[i].content[j]`` (param and message), the other fields by
        :func:`rename_params`."""
        return rename_params(rename_image_error(exc, self.chat.messages, self.images), self.tools.params)

    def function_call(self, *, id: str, status: str, call_id: str, name: str, arguments: str) -> ResponseFunctionCall:
        """The ``function_call`` output item for a chat tool call named ``name`` (a namespaced function's
        flattened name comes back as its ``name`` and ``namespace``: :meth:`ChatTools.call`)."""
        fn, namespace = self.tools.call(name)
        return ResponseFunctionCall(id=id, status=status, call_id=call_id, name=fn,  # type: ignore[arg-type]
                                    namespace=UNSET if namespace is None else namespace, arguments=arguments)

    # -- results -----------------------------------------------------------------------------------
    def response(self, output: list[Any], status: str, *, usage: ResponseUsage | None = None,
                 error: ResponseError | None = None) -> ResponseObject:
        """The ``response`` object with this request's settings echoed."""
        req = self.request
        fmt = req.text.format if req.text is not None and req.text.format is not None else None
        text: dict[str, Any] = {"format": msgspec.to_builtins(fmt) if fmt is not None else {"type": "text"}}
        if req.text is not None and req.text.verbosity is not None:
            text["verbosity"] = req.text.verbosity
        done = status in ("completed", "incomplete")
        return ResponseObject(
            id=self.id, created_at=self.created_at, status=status,  # type: ignore[arg-type]
            completed_at=int(time.time()) if done else None, error=error,
            incomplete_details=ResponseIncompleteDetails(reason="max_output_tokens") if status == "incomplete"
            else None,
            instructions=req.instructions, max_output_tokens=req.max_output_tokens, model=self.model, output=output,
            parallel_tool_calls=req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
            previous_response_id=req.previous_response_id,
            reasoning=ResponseReasoningEcho(effort=req.reasoning.effort if req.reasoning else None,
                                            summary=req.reasoning.summary if req.reasoning else None),
            store=req.store, temperature=req.temperature, text=text,
            tool_choice=req.tool_choice if req.tool_choice is not None else "auto",
            tools=msgspec.to_builtins(req.tools or []), top_p=req.top_p, truncation=req.truncation or "disabled",
            usage=usage, user=req.user, metadata=dict(req.metadata or {}), background=bool(req.background))

    def from_chat(self, completion: wire.ChatCompletion, *, reasoning_tokens: int = 0) -> ResponseObject:
        """The ``response`` for a non-streamed ``chat.completion`` (its one choice)."""
        choice = completion.choices[0]
        m = choice.message
        calls = [(tc.id, tc.function.name, tc.function.arguments)
                 for tc in (m.tool_calls if m.tool_calls is not UNSET else [])]
        reasoning = m.reasoning_content if m.reasoning_content is not UNSET else ""
        status = finish_status(choice.finish_reason)
        output: list[Any] = []
        if reasoning:
            output.append(ResponseReasoningItem(id=new_id("rs"), status="completed",
                                                content=[ResponseReasoningText(text=reasoning)]))
        if m.content or not calls:
            output.append(ResponseOutputMessage(id=new_id("msg"), status="completed",
                                                content=[ResponseOutputText(text=m.content or "")]))
        output += [self.function_call(id=new_id("fc"), status="completed", call_id=cid, name=name, arguments=args)
                   for cid, name, args in calls]
        if status == "incomplete":
            output[-1] = msgspec.structs.replace(output[-1], status="incomplete")
        return self.response(output, status, usage=response_usage(completion.usage, reasoning_tokens))

    def stored(self, response: ResponseObject) -> StoredResponse:
        """What the store keeps: the response and its conversation (history, input, output as input items),
        each item with an ``id`` (this request's input items without one get one, as OpenAI lists them)."""
        given = self.history + tuple(with_id(item) for item in self.input)
        return StoredResponse(response, given + tuple(as_input(response.output)), n_input=len(given))


def prepare(req: ResponsesRequest, previous: StoredResponse | None, *, model: str,
            response_id: str | None = None, created_at: int | None = None) -> Turn:
    """Translate ``req`` (continuing ``previous``, the stored ``previous_response_id``) into a :class:`Turn`.

    Raises :class:`InvalidRequest` (400) naming the Responses field: an
    empty conversation (``input``), an unsupported item or part, a tool that
    is neither a function, a namespace of functions nor a hosted tool (``tools[i].type``; hosted tools are
    left out: :func:`chat_tools`), a ``tool_choice`` forcing a hosted tool, or of another kind, a
    ``text.format`` of another kind, ``metadata`` over OpenAI's limits, ``background: true`` without ``store`` or with
    ``stream``,
    ``max_output_tokens`` below 1. The chat path validates the rest (and
    its errors are renamed with :func:`rename_params`).
    """
    if req.background and not req.store:
        raise InvalidRequest("background: true needs store: true (the response is fetched by id when it is done)",
                             param="background")
    if req.background and req.stream:
        raise InvalidRequest("background: true with stream: true is not supported by this server: create the "
                             "background response without stream and poll GET /v1/responses/{id}, or stream "
                             "it in the foreground", param="stream")
    if req.max_output_tokens is not None and req.max_output_tokens < 1:
        raise InvalidRequest(f"max_output_tokens must be at least 1, got {req.max_output_tokens}",
                             param="max_output_tokens")
    if req.truncation not in (None, "auto", "disabled"):
        raise InvalidRequest(f"truncation must be 'auto' or 'disabled', got {req.truncation!r}", param="truncation")
    _check_metadata(req.metadata)
    history = previous.items if previous is not None else ()
    items = tuple(_input_items(req.input))
    messages = chat_messages(req.instructions, history + items, first=len(history))
    if not any(m.role != "system" for m in messages):
        raise InvalidRequest("input must hold at least one item (a string or a list of items)", param="input")
    tools = chat_tools(req.tools)
    tool_choice, chat_tool_list = _chat_tool_choice(req.tool_choice, tools)
    try:
        chat = ChatCompletionRequest(
            model=req.model, messages=messages, stream=req.stream,
            stream_options=StreamOptions(include_usage=True) if req.stream else None,
            max_completion_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p,
            user=req.user, response_format=_response_format(req.text), tools=chat_tool_list, tool_choice=tool_choice,
            parallel_tool_calls=req.parallel_tool_calls,
            reasoning_effort=req.reasoning.effort if req.reasoning is not None else None,
            prompt_cache_key=req.prompt_cache_key)
    except EngineError as exc:
        raise rename_params(exc, tools.params) from None
    return Turn(request=req, id=response_id or new_id("resp"),
                created_at=int(time.time()) if created_at is None else created_at, model=model,
                history=history, input=items, chat=chat, images=image_params(history + items, first=len(history)),
                tools=tools)


# -- chat result -> response ---------------------------------------------------------------------------

def finish_status(finish_reason: str | None) -> str:
    """``incomplete`` for chat's ``length`` (``max_output_tokens`` or the context), else ``completed``
    (``stop``, ``tool_calls``, a hook policy's stop reason)."""
    return "incomplete" if finish_reason == "length" else "completed"


def response_usage(usage: wire.Usage, reasoning_tokens: int = 0) -> ResponseUsage:
    """Chat ``usage`` as Responses ``usage`` (``prompt_tokens`` -> ``input_tokens``...)."""
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=ResponseInputTokensDetails(
            cached_tokens=usage.prompt_tokens_details.cached_tokens,
            cache_write_tokens=usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens),
        output_tokens=usage.completion_tokens,
        output_tokens_details=ResponseOutputTokensDetails(reasoning_tokens=reasoning_tokens),
        total_tokens=usage.prompt_tokens + usage.completion_tokens)


#: the id prefix of an input item of each ``type`` without one (OpenAI's shapes)
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def with_id(item: ResponseInputItem) -> ResponseInputItem:
    """``item``, with a new id when it has none (``msg_`` for a message, ``fc_``, ``fco_``, ``rs_``)."""
    if item.id is not None:
        return item
    return msgspec.structs.replace(item, id=new_id(_ID_PREFIX.get(item.type or "message", "item")))


def listed_item(item: ResponseInputItem) -> dict[str, Any]:
    """A stored input item as ``input_items`` lists it: its ``type`` (``message`` when it had none), a
    message's string content as one ``input_text`` part (``output_text`` for the assistant's), a
    message's ``status`` ``completed``."""
    out: dict[str, Any] = msgspec.to_builtins(item)
    kind = out.setdefault("type", "message")
    if kind == "message":
        if isinstance(item.content, str):
            part = "output_text" if item.role == "assistant" else "input_text"
            out["content"] = [{"type": part, "text": item.content}]
        out.setdefault("status", "completed")
    return out


def as_input(output: list[Any]) -> list[ResponseInputItem]:
    """Output items as the input items a follow-up turn would send back (what the store keeps)."""
    items = []
    for item in output:
        if isinstance(item, ResponseOutputMessage):
            items.append(ResponseInputItem(type="message", id=item.id, role="assistant", content="".join(
                p.text for p in item.content)))
        elif isinstance(item, ResponseFunctionCall):
            items.append(ResponseInputItem(type="function_call", id=item.id, call_id=item.call_id,
                                           name=item.name, arguments=item.arguments,
                                           namespace=item.namespace if item.namespace is not UNSET else None))
        elif isinstance(item, ResponseReasoningItem):
            items.append(ResponseInputItem(type="reasoning", id=item.id, content=[
                ResponseInputContent(type="reasoning_text", text=p.text) for p in item.content]))
    return items


@attrs.define
class _Item:
    """An output item being streamed: ``kind`` ``message`` / ``reasoning`` / ``function_call``; ``text`` its
    text or arguments so far; ``tool_index`` the chat delta's ``tool_calls[].index``."""

    kind: str
    id: str
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""
    tool_index: int = -1
    status: str = "in_progress"
    #: the chat tool call's name, mapped back by :meth:`Turn.function_call`
    turn: Turn | None = None

    def wire(self) -> Any:
        if self.kind == "message":
            return ResponseOutputMessage(id=self.id, status=self.status,  # type: ignore[arg-type]
                                         content=[ResponseOutputText(text=self.text)] if self.status != "in_progress"
                                         else [])
        if self.kind == "reasoning":
            return ResponseReasoningItem(id=self.id, status=self.status,  # type: ignore[arg-type]
                                         content=[ResponseReasoningText(text=self.text)]
                                         if self.status != "in_progress" else [])
        assert self.turn is not None
        return self.turn.function_call(id=self.id, status=self.status, call_id=self.call_id, name=self.name,
                                       arguments=self.text)


class ResponseEvents:
    """The Responses event stream of one :class:`Turn`, from its ``chat.completion.chunk`` stream.

    :meth:`start`: ``response.created``, ``response.in_progress``.
    :meth:`feed` (each chunk): an item's ``response.output_item.added`` (and
    ``response.content_part.added`` for text) when its first delta comes,
    then ``response.output_text.delta`` / ``response.reasoning_text.delta`` /
    ``response.function_call_arguments.delta``; an item is closed (its
    ``.done`` events, then ``response.output_item.done``) when another one
    starts or the choice finishes. :meth:`finish` (the usage chunk):
    ``response.completed`` or ``response.incomplete``, with the whole
    response (:attr:`final`). :meth:`failed`: ``response.failed``.
    ``sequence_number`` counts every event from 0. The output items are the
    ones :meth:`Turn.from_chat` builds for the same text, in the order the
    deltas came (OpenAI's order).
    """

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.items: list[_Item] = []
        self.finish_reason: str | None = None
        self.final: ResponseObject | None = None
        self._seq = 0
        self._open: _Item | None = None

    @property
    def reasoning_text(self) -> str:
        """The reasoning text so far (to count its tokens for ``usage``)."""
        return "".join(i.text for i in self.items if i.kind == "reasoning")

    def _event(self, type_: str, **fields: Any) -> ResponseStreamEvent:
        event = ResponseStreamEvent(type=type_, sequence_number=self._seq, **fields)
        self._seq += 1
        return event

    def _snapshot(self, status: str, **extra: Any) -> ResponseObject:
        return self.turn.response([i.wire() for i in self.items], status, **extra)

    def start(self) -> list[ResponseStreamEvent]:
        """The first events: ``response.created`` and ``response.in_progress``."""
        return [self._event("response.created", response=self._snapshot("in_progress")),
                self._event("response.in_progress", response=self._snapshot("in_progress"))]

    def _part(self, item: _Item) -> ResponseOutputText | ResponseReasoningText:
        return ResponseOutputText(text=item.text) if item.kind == "message" else ResponseReasoningText(text=item.text)

    def _add(self, kind: str, **fields: Any) -> list[ResponseStreamEvent]:
        out = self._close()
        item = _Item(kind, new_id({"message": "msg", "reasoning": "rs", "function_call": "fc"}[kind]),
                     len(self.items), **fields)
        self.items.append(item)
        self._open = item
        out.append(self._event("response.output_item.added", output_index=item.index, item=item.wire()))
        if kind != "function_call":
            out.append(self._event("response.content_part.added", item_id=item.id, output_index=item.index,
                                   content_index=0, part=self._part(item)))
        return out

    def _close(self, status: str = "completed") -> list[ResponseStreamEvent]:
        item, self._open = self._open, None
        if item is None:
            return []
        item.status = status
        common = {"item_id": item.id, "output_index": item.index}
        if item.kind == "function_call":
            out = [self._event("response.function_call_arguments.done", arguments=item.text, **common)]
        else:
            done = "response.output_text.done" if item.kind == "message" else "response.reasoning_text.done"
            extra: dict[str, list[Any]] = {"logprobs": []} if item.kind == "message" else {}
            out = [self._event(done, content_index=0, text=item.text, **common, **extra),
                   self._event("response.content_part.done", content_index=0, part=self._part(item), **common)]
        out.append(self._event("response.output_item.done", output_index=item.index, item=item.wire()))
        return out

    def _text(self, kind: str, text: str) -> list[ResponseStreamEvent]:
        out = [] if self._open is not None and self._open.kind == kind else self._add(kind)
        item = self._open
        assert item is not None
        item.text += text
        common = {"item_id": item.id, "output_index": item.index, "content_index": 0, "delta": text}
        if kind == "message":
            out.append(self._event("response.output_text.delta", logprobs=[], **common))
        else:
            out.append(self._event("response.reasoning_text.delta", **common))
        return out

    def _tool(self, tc: wire.ToolCallDelta) -> list[ResponseStreamEvent]:
        out: list[ResponseStreamEvent] = []
        name = tc.function.name if tc.function.name is not UNSET else ""
        if tc.id is not UNSET:  # a call's first fragment
            out += self._add("function_call", call_id=tc.id, name=name, tool_index=tc.index, turn=self.turn)
        item = next((i for i in reversed(self.items) if i.kind == "function_call" and i.tool_index == tc.index),
                    None)
        if item is None:  # a fragment of a call that never started: not sent by any chat format
            return out
        if name and not item.name:
            item.name = name
        if tc.function.arguments:
            item.text += tc.function.arguments
            out.append(self._event("response.function_call_arguments.delta", item_id=item.id,
                                   output_index=item.index, delta=tc.function.arguments))
        return out

    def feed(self, chunk: wire.ChatCompletionChunk) -> list[ResponseStreamEvent]:
        """The events of one chat chunk (none for the role chunk); the finish chunk closes the last item
        (``incomplete`` when the finish is ``length``; an empty ``message`` when nothing was output, as
        :meth:`Turn.from_chat`)."""
        out: list[ResponseStreamEvent] = []
        for choice in chunk.choices:
            d = choice.delta
            if d.reasoning_content:
                out += self._text("reasoning", d.reasoning_content)
            if d.content:
                out += self._text("message", d.content)
            for tc in d.tool_calls if d.tool_calls is not UNSET else []:
                out += self._tool(tc)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                if not any(i.kind != "reasoning" for i in self.items):
                    out += self._add("message")
                out += self._close(finish_status(choice.finish_reason))
        return out

    def finish(self, usage: wire.Usage, *, reasoning_tokens: int = 0) -> list[ResponseStreamEvent]:
        """The last event: ``response.completed`` (or ``response.incomplete``) with the whole response."""
        out = self._close()
        status = finish_status(self.finish_reason)
        self.final = self._snapshot(status, usage=response_usage(usage, reasoning_tokens))
        out.append(self._event(f"response.{status}", response=self.final))
        return out

    def cancelled(self) -> ResponseStreamEvent:
        """The last event of a stream cancelled by ``POST /v1/responses/{id}/cancel``: the open item closed
        ``incomplete``, then ``response.incomplete`` (OpenAI has no ``response.cancelled`` event) whose
        response (:attr:`final`, what is stored) has status ``cancelled`` and the output so far."""
        if self._open is not None:
            self._open.status = "incomplete"
            self._open = None
        self.final = self._snapshot("cancelled")
        return self._event("response.incomplete", response=self.final)

    def failed(self, exc: EngineError) -> ResponseStreamEvent:
        """``response.failed`` for an error after the stream started (deadline, shutdown, a runtime
        failure). ``error.code`` is one of OpenAI's: ``rate_limit_exceeded`` (429), ``invalid_prompt``
        (another 4xx), ``server_error`` (5xx: 503 shutdown, 504 deadline...); the message ends with our
        envelope's code in parentheses (e.g. ``(request_timeout)``)."""
        self._open = None
        code = ("rate_limit_exceeded" if exc.status == 429 else "invalid_prompt" if 400 <= exc.status < 500
                else "server_error")
        message = f"{exc.message} ({exc.code})" if exc.code else exc.message
        return self._event("response.failed", response=self._snapshot(
            "failed", error=ResponseError(code=code, message=message)))
