"""Responses ``tools`` and ``tool_choice`` as Chat Completions ones (sans-IO).

``function`` tools pass as they are; a ``custom`` tool (free-form text input) becomes a function tool of one
string parameter, ``input`` (:func:`custom_function`), and a call of it comes back as a ``custom_tool_call``
with that text; a ``namespace`` tool's functions become function tools named ``namespace__name``
(:func:`namespaced_name`), and a call of one maps back to its ``name`` and ``namespace`` (:class:`ChatTools`);
OpenAI's hosted tools (:data:`HOSTED_TOOL_TYPES`) are left out of what the model sees.
:func:`chat_tool_choice` translates ``tool_choice`` (a named function or custom tool, ``allowed_tools``) onto
them.
"""

from __future__ import annotations

from typing import Any

import attrs

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.responses.types import ResponseTool
from skippy.engine.sampling.constraints import check_lark

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
    request order; ``custom``: the chat names of the ``custom`` tools (their calls are ``custom_tool_call``
    items); ``unenforced``: the custom tools whose Lark grammar the model is shown but not held to.
    """

    tools: list[dict[str, Any]] | None = None
    params: tuple[str, ...] = ()
    namespaced: dict[str, tuple[str, str]] = attrs.field(factory=dict)
    ignored: tuple[str, ...] = ()
    custom: frozenset[str] = frozenset()
    unenforced: tuple[str, ...] = ()

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


#: the one parameter of the function tool a ``custom`` tool becomes: its input, as text
CUSTOM_INPUT = "input"


def custom_function(tool: ResponseTool, param: str, name: str | None = None) -> dict[str, Any]:
    """The chat function tool for a ``custom`` tool: one required string parameter, :data:`CUSTOM_INPUT`, the
    text the model writes as the tool's input (a ``custom_tool_call``'s ``input``). Its ``format``:
    ``text`` (or none) leaves the text free; a ``regex`` grammar becomes the parameter's ``pattern``, held
    wherever a tool's parameters are (a forced call; the emulation's calls), as a JSON string's; a ``lark``
    grammar is written into the description, for the model to follow, and not enforced (llama.cpp's tool
    grammars cannot hold a JSON string to a Lark grammar); one llguidance cannot read is a 400 naming
    ``param.format.definition``. 400 naming ``param.format`` for another format."""
    if not tool.name:
        raise InvalidRequest(f"{param}.name is required for a custom tool", param=f"{param}.name")
    fmt = tool.format or {"type": "text"}
    kind, syntax, definition = fmt.get("type"), fmt.get("syntax"), fmt.get("definition")
    prop: dict[str, Any] = {"type": "string", "description": "The tool's input, as free-form text"}
    description = tool.description or ""
    if kind == "grammar" and syntax in ("regex", "lark") and isinstance(definition, str) and definition:
        if syntax == "regex":
            body = definition[1:] if definition.startswith("^") else definition
            body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body
            prop["pattern"] = f"^({body})$"  # the whole input, as OpenAI matches it
            prop["description"] = f"The tool's input, as text matching the regular expression {definition}"
        else:
            check_lark(definition, f"{param}.format.definition")
            description = (description + "\n\n" if description else "") + \
                f"Its input is text in this Lark grammar:\n{definition}"
    elif kind != "text":
        raise InvalidRequest(f"{param}.format must be {{\"type\": \"text\"}} or {{\"type\": \"grammar\", \"syntax\": "
                             "\"regex\" | \"lark\", \"definition\": ...}", param=f"{param}.format")
    fn: dict[str, Any] = {"name": name or tool.name, "parameters": {
        "type": "object", "properties": {CUSTOM_INPUT: prop}, "required": [CUSTOM_INPUT],
        "additionalProperties": False}}
    if description:
        fn["description"] = description
    return {"type": "function", "function": fn}


def _lark(tool: ResponseTool) -> bool:
    fmt = tool.format or {}
    return fmt.get("type") == "grammar" and fmt.get("syntax") == "lark"


def _function(tool: ResponseTool, param: str, name: str | None = None) -> dict[str, Any]:
    if tool.type == "custom":
        return custom_function(tool, param, name)
    if tool.type != "function":
        raise InvalidRequest(f"{param}.type {tool.type!r} is not supported: this server runs function and custom "
                             "tools, namespace tools of them, and leaves hosted tools out", param=f"{param}.type")
    if not tool.name:
        raise InvalidRequest(f"{param}.name is required for a function tool", param=f"{param}.name")
    fn: dict[str, Any] = {"name": name or tool.name}
    for key in ("description", "parameters", "strict"):
        if getattr(tool, key) is not None:
            fn[key] = getattr(tool, key)
    return {"type": "function", "function": fn}


def chat_tools(tools: list[ResponseTool] | None) -> ChatTools:
    """Chat's tools for the Responses ``tools`` (see :class:`ChatTools`).

    ``function`` tools pass as they are; a ``custom`` tool becomes :func:`custom_function`; a ``namespace``
    tool's functions and custom tools become function tools named :func:`namespaced_name` (their description,
    parameters and ``strict`` unchanged; the namespace's description is not repeated into each); a hosted
    type (:data:`HOSTED_TOOL_TYPES`) is left out and listed in ``ignored``. Raises :class:`InvalidRequest`
    (400) naming the field: another tool type, a function or custom tool without ``name``, a custom tool's
    unknown ``format``, a namespace without ``name`` or ``tools``, a tool inside a namespace that is neither
    a function nor a custom tool, and two tools the model would see under one name (a function named like a
    flattened one, a namespace or function listed twice): a call could not be told apart.
    """
    if tools is None:
        return ChatTools()
    out: list[dict[str, Any]] = []
    params: list[str] = []
    namespaced: dict[str, tuple[str, str]] = {}
    ignored: list[str] = []
    custom: dict[str, bool] = {}  # chat name -> its Lark grammar is not enforced
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if tool.type in HOSTED_TOOL_TYPES:
            if tool.type not in ignored:
                ignored.append(tool.type)
            continue
        if tool.type != "namespace":
            out.append(_function(tool, param))
            params.append(param)
            if tool.type == "custom":
                custom[out[-1]["function"]["name"]] = _lark(tool)
            continue
        if not tool.name:
            raise InvalidRequest(f"{param}.name is required for a namespace tool", param=f"{param}.name")
        if tool.tools is None:
            raise InvalidRequest(f"{param}.tools is required for a namespace tool (the function tools it groups)",
                                 param=f"{param}.tools")
        for j, inner in enumerate(tool.tools):
            where = f"{param}.tools[{j}]"
            if inner.type not in ("function", "custom"):
                raise InvalidRequest(f"{where}.type {inner.type!r} is not supported in a namespace: this server "
                                     "runs function and custom tools", param=f"{where}.type")
            fn = _function(inner, where, namespaced_name(tool.name, inner.name or ""))
            namespaced[fn["function"]["name"]] = (tool.name, inner.name or "")
            if inner.type == "custom":
                custom[fn["function"]["name"]] = _lark(inner)
            out.append(fn)
            params.append(where)
    seen: dict[str, str] = {}
    for tool_, param in zip(out, params, strict=True):
        name = tool_["function"]["name"]
        if name in seen:
            raise InvalidRequest(f"{param}: the model would see it as {name!r}, as {seen[name]}: tool names must be "
                                 "unique once namespaces are flattened (namespace__name)", param=f"{param}.name")
        seen[name] = param
    return ChatTools(out, tuple(params), namespaced, tuple(ignored), frozenset(custom),
                     tuple(name for name, lark in custom.items() if lark))


def chat_tool_choice(choice: str | dict[str, Any] | None,
                      tools: ChatTools) -> tuple[Any, list[dict[str, Any]] | None]:
    """Chat's ``tool_choice`` and ``tools``: a named function or custom tool -> chat's named form (a namespaced
    one named by its flattened name, by ``name`` with a ``namespace`` key, or by its bare name when one
    namespace has it); ``allowed_tools`` keeps only the listed function and custom tools, with ``mode``
    ``auto`` or ``required``
    (hosted tools listed there are left out, as in ``tools``). A hosted tool forced by type (``{"type":
    "web_search"}``, ``mcp``...) is a 400: it cannot be honoured here."""
    if choice is None or choice in ("none", "auto", "required", "any"):  # "any": the chat path's alias of required
        return choice, tools.tools
    if isinstance(choice, str):
        raise InvalidRequest(f"tool_choice must be 'none', 'auto', 'required', {{\"type\": \"function\", \"name\": "
                             f"...}}, {{\"type\": \"custom\", \"name\": ...}} or allowed_tools, got {choice!r}",
                             param="tool_choice")
    kind = choice.get("type")
    namespace = choice.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidRequest("tool_choice.namespace must be a string", param="tool_choice")
    if kind in ("function", "custom"):
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"tool_choice.name is required for a {kind} tool choice", param="tool_choice")
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
            if not (isinstance(t, dict) and t.get("type") in ("function", "custom") and isinstance(t.get("name"), str)
                    and isinstance(t.get("namespace", ""), str)):
                raise InvalidRequest("tool_choice allowed_tools lists function and custom tools ({\"type\": "
                                     "\"function\", \"name\": ...}; hosted ones are left out)", param="tool_choice")
            names.add(tools.resolve(t["name"], t.get("namespace")))
        return mode, [t for t in tools.tools or [] if t["function"]["name"] in names]
    if kind in HOSTED_TOOL_TYPES:
        raise InvalidRequest(f"tool_choice forces the hosted tool {kind!r}, which this server cannot run (it runs "
                             "function tools only)", param="tool_choice")
    raise InvalidRequest(f"tool_choice type {kind!r} is not supported (use 'auto', 'none', 'required', "
                         "{\"type\": \"function\" or \"custom\", \"name\": ...} or allowed_tools)",
                         param="tool_choice")
