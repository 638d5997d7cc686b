"""OpenAI Responses API (``POST /v1/responses``) as a translation onto Chat Completions (sans-IO).

Nothing here generates: :func:`prepare` turns a Responses request (and the
conversation of its ``previous_response_id``) into the
:class:`~skippy.engine.protocols.openai.types.ChatCompletionRequest` the engine already
serves, so templates, tool emulation, formats, hooks and the scheduler are
the chat route's; :meth:`Turn.from_chat` turns the ``chat.completion`` into
a Responses ``response`` object and :class:`~.events.ResponseEvents` turns the
``chat.completion.chunk`` stream into the Responses event stream (:mod:`.messages` translates the input
items, :mod:`.tools` the tools). The store (:mod:`.store`) keeps stored responses (``store: true``, OpenAI's
default) so a follow-up sends only its new items.

Shapes follow the OpenAI Responses API as the ``openai`` Python package
types it (``openai.types.responses``): input items ``message`` (a string or
``input_text`` parts; ``input_image`` parts in user messages), ``function_call``, ``custom_tool_call``,
``function_call_output``, ``custom_tool_call_output``
(a string, or ``input_text`` and ``input_image`` parts: a tool's screenshot),
``reasoning``; output items ``message`` (``output_text``),
``function_call`` (``call_id``, ``name``, ``arguments``), ``custom_tool_call`` (``input``), ``reasoning``
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
``tools`` ``custom``           a function tool of one string parameter,
                               ``input`` (a ``regex`` format its
                               ``pattern``); a call comes back as
                               ``custom_tool_call`` with that text
``tools`` ``namespace``        one function tool per function, named
                               ``namespace__name`` (:func:`.tools.namespaced_name`);
                               a call comes back as ``function_call``
                               ``name`` + ``namespace``
``tools`` hosted types         left out (:data:`.tools.HOSTED_TOOL_TYPES`; the
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

import json
import re
import secrets
import time
from collections.abc import Generator, Sequence
from typing import Any

import attrs
import msgspec
from msgspec import UNSET

from skippy.engine.chat.documents import FILE_PART_TYPES
from skippy.engine.chat.images import rename_image_error, rename_part_error
from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    JsonSchemaFormat,
    ResponseFormat,
    StreamOptions,
)
from skippy.engine.protocols.responses.messages import (
    MessageNames,
    chat_messages,
    file_params,
    image_params,
    input_items,
)
from skippy.engine.protocols.responses.store import StoredResponse
from skippy.engine.protocols.responses.tools import CUSTOM_INPUT, ChatTools, chat_tool_choice, chat_tools
from skippy.engine.protocols.responses.types import (
    ResponseInputContent,
    ResponseInputItem,
    ResponsesRequest,
    ResponseTextConfig,
)
from skippy.engine.protocols.responses.wire import (
    ResponseCustomToolCall,
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
    ResponseUsage,
)

# -- ids --------------------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    """``resp_`` / ``msg_`` / ``fc_`` / ``rs_`` + 48 random hex chars (OpenAI's id shapes)."""
    return f"{prefix}_{secrets.token_hex(24)}"


#: OpenAI's ``metadata`` limits: pairs, key and value characters
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


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
    files: tuple[str, ...] = ()
    names: MessageNames = attrs.field(factory=MessageNames)
    dropped: int = 0

    def rename(self, exc: EngineError) -> EngineError:
        """An engine error about :attr:`chat` in the Responses request's names (in place; returned for
        ``raise``): an image part as its ``input[i].content[j]`` (param and message), a custom tool's
        parameters (its regex, which the grammar could not take) as its ``tools[i].format``, a chat message or
        tool call as the input item it came from (``messages[3].tool_calls[0]`` -> ``input[2]``:
        :class:`MessageNames`), the other fields by :func:`rename_params`."""
        exc = rename_part_error(exc, self.chat.messages, self.files, FILE_PART_TYPES)
        exc = self.names.rename(rename_image_error(exc, self.chat.messages, self.images))
        exc = rename_params(exc, self.tools.params)
        for tool, param in zip(self.tools.tools or [], self.tools.params, strict=False):
            if tool["function"]["name"] in self.tools.custom and exc.param is not None \
                    and exc.param.startswith(param + ".parameters"):
                exc.param = param + ".format"
        return exc

    def truncated(self, drop: int) -> Turn:
        """This turn as the model sees it with the first ``drop`` items of its conversation (the
        ``previous_response_id`` items, then this request's ``input``) left out (``truncation: "auto"``; a cut
        :func:`truncation_cuts` allows): :attr:`chat`'s messages and the names its errors use, the
        ``instructions`` kept. What is stored (:meth:`stored`) is the whole conversation still."""
        items, first = (self.history + self.input)[drop:], len(self.history) - drop
        names = MessageNames()
        messages = chat_messages(self.request.instructions, items, first=first, names=names)
        return attrs.evolve(self, chat=msgspec.structs.replace(self.chat, messages=messages), names=names,
                            images=image_params(items, first=first), files=file_params(items, first=first),
                            dropped=drop)

    def is_custom(self, name: str) -> bool:
        """Whether a chat tool call named ``name`` calls one of the request's ``custom`` tools."""
        return self.tools.resolve(name) in self.tools.custom

    def function_call(self, *, id: str, status: str, call_id: str, name: str,
                      arguments: str) -> ResponseFunctionCall | ResponseCustomToolCall:
        """The output item for a chat tool call named ``name``: ``function_call``, or ``custom_tool_call`` for a
        ``custom`` tool, whose ``input`` is the call's one string argument (:func:`custom_input`); a
        namespaced tool's flattened name comes back as its ``name`` and ``namespace`` (:meth:`ChatTools.call`)."""
        fn, namespace = self.tools.call(name)
        ns = UNSET if namespace is None else namespace
        if self.is_custom(name):
            return ResponseCustomToolCall(id=id, call_id=call_id, name=fn, namespace=ns, input=custom_input(arguments))
        return ResponseFunctionCall(id=id, status=status, call_id=call_id, name=fn,  # type: ignore[arg-type]
                                    namespace=ns, arguments=arguments)

    # -- results -----------------------------------------------------------------------------------
    def response(self, output: list[Any], status: str, *, usage: ResponseUsage | None = None,
                 error: ResponseError | None = None) -> ResponseObject:
        """The ``response`` object with this request's settings echoed."""
        req = self.request
        fmt = req.text.format if req.text is not None and req.text.format is not None else None
        text: dict[str, Any] = {"format": msgspec.to_builtins(fmt) if fmt is not None else {"type": "text"}}
        if req.text is not None and req.text.verbosity is not None:
            text["verbosity"] = req.text.verbosity
        return ResponseObject(  # completed_at: "only present when the status is completed" (OpenAI)
            id=self.id, created_at=self.created_at, status=status,  # type: ignore[arg-type]
            completed_at=int(time.time()) if status == "completed" else None, error=error,
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
        output += [self.function_call(id=new_id("ctc" if self.is_custom(name) else "fc"), status="completed",
                                      call_id=cid, name=name, arguments=args)
                   for cid, name, args in calls]
        if status == "incomplete" and not calls:  # the text was cut; a call cut by the limit is not in ``calls``,
            # so those there are whole
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
    ``max_output_tokens`` below 1, a ``conversation`` (``unsupported_parameter``: OpenAI's Conversations API is
    not served; the message points to ``previous_response_id``). The chat path validates the rest (and
    its errors are renamed with :func:`rename_params`).
    """
    if req.conversation is not None:
        raise InvalidRequest("conversation: this server does not implement OpenAI's Conversations API, so it "
                             "cannot add a conversation's items to the request; chain turns with "
                             "previous_response_id (the id of the last response), or send the whole "
                             "conversation in input", param="conversation", code="unsupported_parameter")
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
    items = tuple(input_items(req.input))
    names = MessageNames()
    messages = chat_messages(req.instructions, history + items, first=len(history), names=names)
    if not any(m.role != "system" for m in messages):
        if any(item.type == "reasoning" for item in history + items):  # a reasoning item alone: nothing to answer
            raise InvalidRequest("input holds reasoning items only: a reasoning item was provided without its "
                                 "required following item (the assistant message or function_call it reasons for, "
                                 "as OpenAI refuses it), and there is no message for the model to answer; send the "
                                 "items that follow it, or a user message", param="input")
        raise InvalidRequest("input must hold at least one item (a string or a list of items)", param="input")
    tools = chat_tools(req.tools)
    tool_choice, chat_tool_list = chat_tool_choice(req.tool_choice, tools)
    try:
        chat = ChatCompletionRequest(
            model=req.model, messages=messages, stream=req.stream,
            stream_options=StreamOptions(include_usage=True) if req.stream else None,
            max_completion_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p,
            user=req.user, response_format=_response_format(req.text), tools=chat_tool_list, tool_choice=tool_choice,
            parallel_tool_calls=req.parallel_tool_calls,
            reasoning_effort=req.reasoning.effort if req.reasoning is not None else None,
            prompt_cache_key=req.prompt_cache_key, mesh_hooks=req.mesh_hooks)
    except EngineError as exc:
        raise rename_params(names.rename(exc), tools.params) from None
    return Turn(request=req, id=response_id or new_id("resp"),
                created_at=int(time.time()) if created_at is None else created_at, model=model,
                history=history, input=items, chat=chat, images=image_params(history + items, first=len(history)),
                tools=tools, files=file_params(history + items, first=len(history)), names=names)


# -- truncation: "auto" ------------------------------------------------------------------------------------

_CALLS, _OUTPUTS = ("function_call", "custom_tool_call"), ("function_call_output", "custom_tool_call_output")


def truncation_cuts(items: Sequence[ResponseInputItem]) -> tuple[int, ...]:
    """How many items from the start of a conversation (``items``: the ``previous_response_id`` items, then
    ``input``) ``truncation: "auto"`` may drop, ascending, 0 first: whole items, never a tool call without its
    output (a ``function_call`` or ``custom_tool_call`` and every output of its ``call_id`` go together), and
    never all that the model would answer (what is left holds an item that is neither ``reasoning`` nor a
    ``system`` / ``developer`` message)."""
    n = len(items)
    calls: dict[str, int] = {}
    blocked = [0] * (n + 1)  # cuts inside [call, output] pairs, as a difference array
    for i, item in enumerate(items):
        kind = item.type or ("message" if item.role is not None else None)
        if kind in _CALLS and item.call_id is not None:
            calls.setdefault(item.call_id, i)
        elif kind in _OUTPUTS and item.call_id in calls:
            blocked[calls[item.call_id] + 1] += 1  # a cut after the call and up to the output splits them
            blocked[i + 1] -= 1
    answerable = [i for i, item in enumerate(items)
                  if item.type != "reasoning" and not (item.type in (None, "message")
                                                       and item.role in ("system", "developer"))]
    last = answerable[-1] if answerable else 0
    cuts, inside = [0], 0
    for c in range(1, last + 1):
        inside += blocked[c]
        if inside == 0:
            cuts.append(c)
    return tuple(cuts)


def _measured(cut: int, known: dict[int, int]) -> Generator[int, int, int]:
    if cut not in known:
        known[cut] = yield cut
    return known[cut]


def truncation_search(cuts: Sequence[int], n_ctx: int, max_output_tokens: int | None) -> Generator[int, int, int]:
    """The fewest items ``truncation: "auto"`` drops, sans-IO: yields a cut (a number of items to drop, one of
    ``cuts``: :func:`truncation_cuts`) whose prompt the caller measures and sends back (its tokens, as the chat
    path counts them), and returns the cut to serve (its ``StopIteration.value``).

    A cut fits when its prompt plus ``max_output_tokens`` (1 when not given: the chat path's own rule, the
    prompt must leave a token) is at most ``n_ctx``; no cut is dropped when the whole conversation fits. The
    search bisects over ``cuts`` (a prompt shrinks as items are dropped): about ``log2(len(cuts)) + 2``
    measurements, each cut measured once. When even the last cut leaves no room for ``max_output_tokens``, the
    output could not have it anyway (the chat path clamps it to the room left, or refuses it with
    ``--no-clamp-max-tokens``): the search then asks only that the prompt fit. When not even the last cut
    does, it is returned, and the chat path's 400 ``context_length_exceeded`` names its prompt."""
    known: dict[int, int] = {}
    last = len(cuts) - 1
    for need in dict.fromkeys((max(1, max_output_tokens or 1), 1)):
        if (yield from _measured(cuts[0], known)) + need <= n_ctx:
            return cuts[0]
        if last <= 0 or (yield from _measured(cuts[last], known)) + need > n_ctx:
            continue
        lo, hi = 0, last  # cuts[lo] does not fit, cuts[hi] does
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if (yield from _measured(cuts[mid], known)) + need <= n_ctx:
                hi = mid
            else:
                lo = mid
        return cuts[hi]
    return cuts[last]


# -- chat result -> response ---------------------------------------------------------------------------

#: the start of a custom call's arguments, up to its input string's opening quote
_INPUT_START = re.compile(r'\s*\{\s*"' + CUSTOM_INPUT + r'"\s*:\s*"')
#: a run of a JSON string's characters whose escapes are complete
_STRING_RUN = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
#: a high surrogate's escape at the end of a run: its pair has not come yet
_HIGH_SURROGATE = re.compile(r'\\u[dD][89abAB][0-9a-fA-F]{2}$')


@attrs.define
class InputStream:
    """A custom call's input text as its arguments' JSON (``{"input": "...``) arrives: :meth:`more` decodes the
    string's characters whose escapes are complete (a trailing partial escape, or a high surrogate without its
    pair, waits for the next piece), scanning only what is new; nothing before the string's opening quote or
    after its closing one."""

    end: int = 0  # the arguments decoded so far end here (0: the string's opening quote not seen yet)
    closed: bool = False
    sent: str = ""

    def more(self, arguments: str) -> str:
        """The input's text that ``arguments`` (all so far) adds to :attr:`sent`."""
        if self.closed:
            return ""
        if self.end == 0:
            m = _INPUT_START.match(arguments)
            if m is None:
                return ""
            self.end = m.end()
        run = _STRING_RUN.match(arguments, self.end)
        stop = run.end() if run else self.end
        if stop < len(arguments) and arguments[stop] == '"':
            self.closed = True
        elif (tail := _HIGH_SURROGATE.search(arguments, self.end, stop)) is not None:
            stop = tail.start()
        try:
            text = json.loads('"' + arguments[self.end:stop] + '"', strict=False)  # raw newlines as models write
        except ValueError:
            self.closed = True  # not the JSON the model should write: the final input says what it was
            return ""
        self.end = stop
        self.sent += text
        return str(text)


def custom_input(arguments: str) -> str:
    """A ``custom`` tool call's ``input``: the one string argument (:data:`CUSTOM_INPUT`) of the function the
    model called for it; of a call cut by the token limit, the input's text so far (what its stream sent:
    :class:`InputStream`); the arguments text itself when they are not that object (a model that wrote
    something else)."""
    try:
        value = json.loads(arguments, strict=False)
    except (ValueError, RecursionError):
        return InputStream().more(arguments) if _INPUT_START.match(arguments) else arguments
    given = value.get(CUSTOM_INPUT) if isinstance(value, dict) else None
    return given if isinstance(given, str) else arguments


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
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "custom_tool_call": "ctc",
              "custom_tool_call_output": "ctco", "reasoning": "rs"}


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
        elif isinstance(item, ResponseCustomToolCall):
            items.append(ResponseInputItem(type="custom_tool_call", id=item.id, call_id=item.call_id, name=item.name,
                                           input=item.input,
                                           namespace=item.namespace if item.namespace is not UNSET else None))
        elif isinstance(item, ResponseReasoningItem):
            items.append(ResponseInputItem(type="reasoning", id=item.id, content=[
                ResponseInputContent(type="reasoning_text", text=p.text) for p in item.content]))
    return items
