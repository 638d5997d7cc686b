"""Ollama's native API <-> the engine's OpenAI requests and replies, both ways, as pure functions (sans-IO).

Requests: :func:`chat_request` turns ``/api/chat`` into a
:class:`~skippy.engine.protocols.openai.types.ChatCompletionRequest`; :func:`generate_request` turns
``/api/generate`` into a chat request (the prompt as the user message, ``system`` before it: the chat
template renders it, as Ollama's does) or, with ``raw`` or ``suffix``, into a legacy
:class:`~skippy.engine.protocols.openai.types.CompletionRequest` (the prompt as is; fill-in-the-middle);
:func:`embed_request` the embeddings. Replies: :func:`chat_response` / :func:`generate_response` from a
``chat.completion`` or ``text_completion``, and :class:`ChatStream` / :class:`GenerateStream` from their
chunk streams (one Ollama object per chunk; tool calls sent whole once the choice finishes, as Ollama's).

Fields (Ollama -> engine):

- ``options``: ``num_predict`` -> ``max_tokens`` (``-1`` no limit, ``-2`` fill the context: both the
  server's clamp), ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``typical_p``, ``repeat_penalty``,
  ``repeat_last_n``, ``presence_penalty``, ``frequency_penalty``, ``seed``, ``stop``, ``mirostat``,
  ``mirostat_tau``, ``mirostat_eta`` -> the same sampling fields; ``num_ctx`` is checked against the
  model's context by the route (a larger one is a 400) and otherwise not applied (the context is the
  server's); ``num_keep`` and Ollama's load-time options (``num_gpu``, ``num_thread``, ``num_batch``...)
  are not applied, and they and unknown options are named in ``X-Skippy-Ignored-Fields`` (Ollama
  ignores unknown options too); a known option of the wrong type is a 400 naming it.
- ``format``: ``"json"`` -> a JSON object constraint, a JSON schema -> that schema.
- ``logprobs`` / ``top_logprobs`` (0-20) -> chat's ``logprobs`` / ``top_logprobs`` (a raw or suffix
  prompt's: the legacy ``logprobs`` count); the reply's ``logprobs`` lists Ollama's entries (``token``,
  ``logprob``, ``bytes``, ``top_logprobs``), a stream line those of the text it carries.
- ``think``: ``true`` / ``false`` -> ``enable_thinking``; ``"low"`` / ``"medium"`` / ``"high"`` /
  ``"max"`` -> thinking on with that ``reasoning_effort`` (``max`` -> ``xhigh``). The reasoning comes back
  as ``message.thinking`` (``thinking`` on ``/api/generate``). Thinking on for a model whose template cannot
  think is a 400, as Ollama's (:func:`check_thinking`).
- no ``messages`` (``/api/chat``), no ``prompt`` (``/api/generate``): Ollama's load request, answered at once
  with ``done_reason`` ``"load"``, or ``"unload"`` with ``keep_alive`` 0 (:func:`loads_only`,
  :func:`load_response`).
- ``tools`` (OpenAI's shape already; OpenAI's ``tool_choice`` is taken too, an extension) and
  ``message.tool_calls`` (arguments an object) <-> OpenAI tool calls (arguments a JSON string); a ``tool``
  message's ``tool_name`` names the call it answers (the earliest unanswered one of that name).
- ``images`` (base64 strings, on any message, a tool result's too): OpenAI chat ``image_url`` parts with data
  URLs, before the message's text (a model without a ``--mmproj`` projector answers 400
  ``media_not_supported``); ``template`` (a Go template): a 400 (the GGUF's Jinja template renders);
  ``context`` (deprecated): accepted, not used; ``keep_alive``: see :func:`keep_alive_seconds`.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

from partial_json_parser import loads as partial_json_loads

from skippy.engine.chat.images import check_base64
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.ollama import types as ot
from skippy.engine.protocols.ollama import wire as ow
from skippy.engine.protocols.openai import wire
from skippy.engine.protocols.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    ContentPart,
    EmbeddingRequest,
    JsonSchemaFormat,
    Message,
    ResponseFormat,
    StreamOptions,
)

#: options applied per request, by type: Ollama's name -> (engine field, kind)
_FLOAT, _INT = "float", "int"
OPTIONS: dict[str, tuple[str, str]] = {
    "temperature": ("temperature", _FLOAT), "top_p": ("top_p", _FLOAT), "min_p": ("min_p", _FLOAT),
    "typical_p": ("typical_p", _FLOAT), "repeat_penalty": ("repeat_penalty", _FLOAT),
    "presence_penalty": ("presence_penalty", _FLOAT), "frequency_penalty": ("frequency_penalty", _FLOAT),
    "mirostat_tau": ("mirostat_tau", _FLOAT), "mirostat_eta": ("mirostat_eta", _FLOAT),
    "top_k": ("top_k", _INT), "repeat_last_n": ("repeat_last_n", _INT), "seed": ("seed", _INT),
    "mirostat": ("mirostat", _INT),
}
#: options checked but not applied per request (num_ctx: by the route against the model's context)
CHECKED = {"num_predict": _INT, "num_ctx": _INT, "num_keep": _INT}

_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "xhigh"}
#: one component of a Go duration (time.ParseDuration): a decimal number (``1``, ``1.5``, ``.5``, ``1.``) and
#: its unit (``µs`` as U+00B5 or U+03BC, as Go takes both)
_COMPONENT = r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)"
_DURATION = re.compile(rf"([-+]?)((?:{_COMPONENT})+)")
_SECONDS = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _number(name: str, value: Any, kind: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequest(f"option {name!r} must be a number, got {json.dumps(value)}", param=f"options.{name}")
    if kind == _INT:
        if isinstance(value, float) and not value.is_integer():
            raise InvalidRequest(f"option {name!r} must be an integer, got {value}", param=f"options.{name}")
        return int(value)
    return float(value)


def sampling(options: dict[str, Any] | None) -> tuple[dict[str, Any], list[str], int | None]:
    """``options`` -> (the engine's sampling fields, the option names not applied, ``num_ctx`` or ``None``).

    Raises :class:`InvalidRequest` naming an option of the wrong type, or a ``num_predict`` below -2.
    """
    fields: dict[str, Any] = {}
    ignored: list[str] = []
    num_ctx = None
    for name, value in (options or {}).items():
        if value is None:  # null: the default, as Ollama's Go decoding leaves the field unset (LlamaIndex sends it)
            continue
        if name in OPTIONS:
            field, kind = OPTIONS[name]
            fields[field] = _number(name, value, kind)
        elif name == "stop":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidRequest("option 'stop' must be a string or a list of strings", param="options.stop")
            if value:
                fields["stop"] = value
        elif name in CHECKED:
            n = int(_number(name, value, _INT))
            if name == "num_predict":
                if n < -2:
                    raise InvalidRequest("option 'num_predict' must be -1 (no limit), -2 (fill the context) or "
                                         f"at least 0, got {n}", param="options.num_predict")
                if n >= 0:
                    fields["max_tokens"] = n
            elif name == "num_ctx":
                num_ctx = n
            else:
                ignored.append(name)
        else:
            ignored.append(name)
    return fields, ignored, num_ctx


#: the longest Go duration, in seconds: ``time.Duration`` is int64 nanoseconds (about 2562047 hours)
GO_MAX_DURATION = (2**63 - 1) / 1e9


def go_duration_seconds(text: str) -> float | None:
    """A Go duration string as Go's ``time.ParseDuration`` reads it -> seconds, else ``None``.

    A sign, then one or more ``<number><unit>`` components summed (``"1h30m"``, ``"2h45m10.5s"``, ``"-1.5h"``,
    ``".5s"``); units ``ns``, ``us``, ``µs``, ``ms``, ``s``, ``m``, ``h``; ``"0"`` alone needs no unit. No spaces
    inside (surrounding whitespace is stripped). ``None`` for anything else, and for a duration longer than Go's
    (:data:`GO_MAX_DURATION`), which Go refuses as an overflow."""
    text = text.strip()
    if text in ("0", "+0", "-0"):
        return 0.0
    m = _DURATION.fullmatch(text)
    if m is None:
        return None
    total = sum(float(number) * _UNITS[unit] for number, unit in re.findall(_COMPONENT, m.group(2)))
    if total > GO_MAX_DURATION:  # Go's durations are int64 nanoseconds: "invalid duration" past ~2562047h
        return None
    return -total if m.group(1) == "-" else total


def keep_alive_seconds(value: str | int | float | None) -> float | None:
    """Ollama's ``keep_alive`` -> seconds (negative: forever; ``None``: not given).

    Takes what Ollama's ``api.Duration`` takes: a JSON number of seconds, or a string that Go's
    ``time.ParseDuration`` reads (:func:`go_duration_seconds`: ``"5m"``, ``"1h30m"``, ``"2h45m10.5s"``,
    ``"-1m"``); also a string that is a bare number of seconds (``"300"``, ``"-1"``), as earlier versions
    of this server did. Raises :class:`InvalidRequest` (400) for anything else (``"soon"``, ``true``, a list)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        seconds = go_duration_seconds(value)
        if seconds is None and _SECONDS.fullmatch(value.strip()):
            seconds = float(value.strip())
        if seconds is not None and math.isfinite(seconds):
            return seconds
    raise InvalidRequest(f"keep_alive must be a duration such as \"5m\" or \"1h30m\" (Go's time.ParseDuration) "
                         f"or a number of seconds, got {json.dumps(value)}", param="keep_alive")


def _format(fmt: str | dict[str, Any] | None) -> ResponseFormat | None:
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return ResponseFormat(type="json_object")
    if isinstance(fmt, dict):
        return ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(name="ollama_format", schema=fmt))
    raise InvalidRequest(f"format must be \"json\" or a JSON schema object, got {json.dumps(fmt)}", param="format")


def _think(think: bool | str | None) -> tuple[bool | None, str | None]:
    if think is None or isinstance(think, bool):
        return think, None
    if think in _EFFORTS:
        return True, _EFFORTS[think]
    raise InvalidRequest(f"think must be true, false or one of {list(_EFFORTS)}, got {json.dumps(think)}",
                         param="think")


def _with_images(text: str | None, images: list[str] | None, where: str) -> str | list[ContentPart] | None:
    """A message's ``content`` with Ollama's ``images`` (base64 strings, no ``data:`` prefix): OpenAI chat
    ``image_url`` parts with base64 data URLs, the images before the text (as Ollama's vision templates put
    them), so the chat path's checks and limits apply; ``text`` as is without images. A string that is not
    base64 is a 400 naming ``where.k``; line breaks in it are left out, as Ollama's Go decoder skips them
    (``base64 photo.png`` wraps its output at 76 columns)."""
    if not images:
        return text
    parts: list[ContentPart] = []
    for k, image in enumerate(images):
        if isinstance(image, str) and ("\n" in image or "\r" in image):
            image = image.replace("\r", "").replace("\n", "")
        check_base64(image, f"{where}.{k}")
        parts.append(ContentPart(type="image_url", image_url={"url": "data:image/*;base64," + image}))
    return [*parts, ContentPart(type="text", text=text or "")]


def _messages(messages: list[ot.OllamaMessage]) -> list[Message]:
    out: list[Message] = []
    calls_by_name: dict[str, list[str]] = {}  # tool name -> ids of its calls not answered yet
    for i, m in enumerate(messages):
        text = m.content or ""
        if m.role == "assistant" and m.tool_calls:
            calls = []
            for j, call in enumerate(m.tool_calls):
                call_id = call.id or f"call_{i}_{j}"
                calls_by_name.setdefault(call.function.name, []).append(call_id)
                calls.append({"id": call_id, "type": "function", "function": {
                    "name": call.function.name, "arguments": json.dumps(call.function.arguments, ensure_ascii=False)}})
            out.append(Message(role="assistant", content=text or None, tool_calls=calls,
                               reasoning_content=m.thinking or None))
        elif m.role == "tool":
            pending = calls_by_name.get(m.tool_name or "", [])
            call_id = m.tool_call_id or (pending.pop(0) if pending else None) or m.tool_name or f"call_{i}"
            out.append(Message(role="tool", content=_with_images(text, m.images, f"messages.{i}.images"),
                               tool_call_id=call_id, name=m.tool_name))
        elif m.role in ("system", "user", "assistant"):
            out.append(Message(role=m.role, content=_with_images(text, m.images, f"messages.{i}.images"),
                               reasoning_content=m.thinking if m.role == "assistant" and m.thinking else None))
        else:
            raise InvalidRequest(f"messages.{i}.role must be system, user, assistant or tool, got {m.role!r}",
                                 param=f"messages.{i}.role")
    return out


#: the most ``top_logprobs`` one request may ask for (Ollama's limit, and OpenAI's)
MAX_TOP_LOGPROBS = 20


def _logprobs(req: ot.OllamaChatRequest | ot.OllamaGenerateRequest, *, legacy: bool) -> dict[str, Any]:
    """The engine's fields for ``logprobs`` / ``top_logprobs``: chat's ``logprobs`` and ``top_logprobs``, or,
    for a raw or suffix prompt (``legacy``), the legacy completion's ``logprobs`` count. ``top_logprobs``
    above 0 asks for them without ``logprobs`` too. 400 naming ``top_logprobs`` outside 0-20, as Ollama's."""
    top = req.top_logprobs
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}",
                             param="top_logprobs")
    if not req.logprobs and not top:
        return {}
    return {"logprobs": top or 0} if legacy else {"logprobs": True, "top_logprobs": top or 0}


def _common(req: ot.OllamaChatRequest | ot.OllamaGenerateRequest) -> tuple[dict[str, Any], list[str], int | None]:
    fields, ignored, num_ctx = sampling(req.options)
    keep_alive_seconds(req.keep_alive)  # checked here; the route applies it
    return fields, ignored, num_ctx


def chat_request(req: ot.OllamaChatRequest) -> tuple[ChatCompletionRequest, list[str], int | None]:
    """``/api/chat`` -> (the chat request, options not applied, ``num_ctx``). Raises :class:`InvalidRequest`.
    No ``messages`` is no error: Ollama's load request (:func:`loads_only`); the route answers it without
    generating."""
    fields, ignored, num_ctx = _common(req)
    enable, effort = _think(req.think)
    chat = ChatCompletionRequest(
        model=req.model, messages=_messages(req.messages), tools=req.tools or None, tool_choice=req.tool_choice,
        stream=req.stream,
        stream_options=StreamOptions(include_usage=True) if req.stream else None,
        response_format=_format(req.format), enable_thinking=enable, reasoning_effort=effort,
        mesh_hooks=req.mesh_hooks, **_logprobs(req, legacy=False), **fields)
    return chat, ignored, num_ctx


def generate_request(req: ot.OllamaGenerateRequest) -> tuple[ChatCompletionRequest | CompletionRequest, list[str],
                                                       int | None]:
    """``/api/generate`` -> (a chat request, or a completion request for ``raw`` / ``suffix``, options not
    applied, ``num_ctx``). Raises :class:`InvalidRequest`."""
    if req.template:
        raise InvalidRequest("template is not supported: this server renders the model's own chat template (the "
                             "GGUF's Jinja template); send raw: true with a prompt you formatted instead",
                             param="template")
    fields, ignored, num_ctx = _common(req)
    if req.raw or req.suffix:
        if req.images:
            raise InvalidRequest("images with raw or suffix are not supported: send them without raw, so the "
                                 "model's chat template places them", param="images")
        if req.format is not None:
            fields["response_format"] = _format(req.format)
        completion = CompletionRequest(
            model=req.model, prompt=req.prompt, suffix=req.suffix or None, stream=req.stream,
            stream_options=StreamOptions(include_usage=True) if req.stream else None,
            **_logprobs(req, legacy=True), **fields)
        return completion, ignored, num_ctx
    enable, effort = _think(req.think)
    messages = ([Message(role="system", content=req.system)] if req.system else []) + \
        [Message(role="user", content=_with_images(req.prompt, req.images, "images"))]
    chat = ChatCompletionRequest(
        model=req.model, messages=messages, stream=req.stream,
        stream_options=StreamOptions(include_usage=True) if req.stream else None,
        response_format=_format(req.format), enable_thinking=enable, reasoning_effort=effort,
        mesh_hooks=req.mesh_hooks, **_logprobs(req, legacy=False), **fields)
    return chat, ignored, num_ctx


def loads_only(req: ot.OllamaChatRequest | ot.OllamaGenerateRequest) -> bool:
    """Whether ``req`` only loads the model (Ollama's preload, docs/api.md "Load a model"): ``/api/chat``
    without ``messages``, ``/api/generate`` without a ``prompt`` (nor a ``suffix``). With ``keep_alive`` 0
    it unloads the model instead ("Unload a model"; :func:`load_response`)."""
    if isinstance(req, ot.OllamaChatRequest):
        return not req.messages
    return not req.prompt and not req.suffix


def unloads(req: ot.OllamaChatRequest | ot.OllamaGenerateRequest) -> bool:
    """Whether ``req`` unloads the model (Ollama's "Unload a model": :func:`loads_only` with ``keep_alive`` 0)."""
    return loads_only(req) and keep_alive_seconds(req.keep_alive) == 0


def check_thinking(req: ot.OllamaChatRequest | ot.OllamaGenerateRequest, supports_thinking: bool) -> None:
    """Refuse ``think`` on (``true`` or an effort) for a model whose chat template cannot think
    (``supports_thinking``: :attr:`~skippy.engine.chat.capabilities.TemplateCaps.supports_thinking`, what
    ``/api/show`` lists as the ``thinking`` capability), as Ollama's server does on ``/api/chat`` and
    ``/api/generate``: 400 ``"<model>" does not support thinking`` (Go's ``%q``). ``think: false`` and no
    ``think`` pass, and so does an unload request (Ollama unloads before it looks at ``think``). Raises
    :class:`InvalidRequest`, also for a ``think`` value that is not Ollama's."""
    enable, _ = _think(req.think)
    if enable and not supports_thinking and not unloads(req):
        raise InvalidRequest(f"{json.dumps(req.model, ensure_ascii=False)} does not support thinking", param="think")


def image_paths(req: ot.OllamaChatRequest | ot.OllamaGenerateRequest) -> list[str]:
    """Each image of the request by its Ollama name (``messages.N.images.K``, or ``images.K`` on
    ``/api/generate``), in the order the translated chat request holds their image parts: an error naming a
    part is renamed to it (:func:`~skippy.engine.chat.images.rename_image_error`)."""
    if isinstance(req, ot.OllamaGenerateRequest):
        return [f"images.{k}" for k in range(len(req.images or []))]
    return [f"messages.{i}.images.{k}" for i, m in enumerate(req.messages)
            if m.role in ("system", "user", "assistant", "tool") and not (m.role == "assistant" and m.tool_calls)
            for k in range(len(m.images or []))]


def embed_request(req: ot.OllamaEmbedRequest | ot.OllamaEmbeddingsRequest) -> EmbeddingRequest:
    """``/api/embed`` (``truncate`` as Ollama: default on) or ``/api/embeddings`` -> the embeddings request."""
    if isinstance(req, ot.OllamaEmbeddingsRequest):
        return EmbeddingRequest(input=req.prompt, model=req.model, truncate=True)
    if not req.input:
        raise InvalidRequest("input must not be empty", param="input")
    inputs: str | list[str | int | list[int]] = req.input if isinstance(req.input, str) else list(req.input)
    return EmbeddingRequest(input=inputs, model=req.model, dimensions=req.dimensions, truncate=req.truncate)


# -- replies ------------------------------------------------------------------------------------------

def created_at(t: float | None = None) -> str:
    """RFC 3339 UTC with microseconds, as Go writes ``time.Time``."""
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"


def done_reason(finish_reason: str | None) -> str:
    """OpenAI's ``finish_reason`` -> Ollama's ``done_reason`` (``length`` stays; a tool call is ``stop``)."""
    return "length" if finish_reason == "length" else "stop"


def arguments(text: str) -> dict[str, Any]:
    """A call's arguments (JSON text) as the object Ollama sends (a cut-off object's whole part)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        try:
            value = partial_json_loads(text)
        except Exception:  # noqa: BLE001 - not JSON at all
            value = {}
    return value if isinstance(value, dict) else {}


def _calls(calls: list[tuple[str | None, str, str]]) -> list[ow.OllamaReplyToolCall]:
    return [ow.OllamaReplyToolCall(id=call_id or f"call_{i}",
                                   function=ow.OllamaCallFunction(name=name, arguments=arguments(args), index=i))
            for i, (call_id, name, args) in enumerate(calls)]


def counts(usage: wire.Usage | None, timings: wire.Timings | None, total_ns: int, load_ns: int = 0) -> dict[str, Any]:
    """The last object's counts: durations in nanoseconds from llama.cpp's timings, counts from the usage
    (``prompt_eval_count`` is the prompt's tokens, ``eval_count`` the generated ones)."""
    out: dict[str, Any] = {"total_duration": total_ns, "load_duration": load_ns}
    if usage is not None:
        out["prompt_eval_count"] = usage.prompt_tokens
        out["eval_count"] = usage.completion_tokens
    if timings is not None:
        out["prompt_eval_duration"] = int(timings.prompt_ms * 1e6)
        out["eval_duration"] = int(timings.predicted_ms * 1e6)
    return out


def _set(value: float | None | wire.UnsetType) -> float | None:
    return None if isinstance(value, wire.UnsetType) else value


def logprobs(lp: wire.ChatLogprobs | wire.CompletionLogprobs | None) -> list[ow.OllamaLogprob]:
    """The engine's ``logprobs`` (chat's entries, or a legacy completion's parallel lists) as Ollama's: one
    entry per token, ``token``, ``logprob``, ``bytes`` (chat's) and, where asked for, ``top_logprobs``."""
    if isinstance(lp, wire.ChatLogprobs):
        out = []
        for t in lp.content:  # OpenAI's shape (Ollama requests never ask for llama-server's post_sampling_probs)
            entry = ow.OllamaLogprob(token=t.token, logprob=_set(t.logprob), bytes=t.bytes)
            if t.top_logprobs:
                entry.top_logprobs = [ow.OllamaTokenLogprob(token=a.token, logprob=_set(a.logprob), bytes=a.bytes)
                                      for a in t.top_logprobs]
            out.append(entry)
        return out
    if isinstance(lp, wire.CompletionLogprobs):
        out = []
        for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=False):
            entry = ow.OllamaLogprob(token=token, logprob=value)
            if top:
                entry.top_logprobs = [ow.OllamaTokenLogprob(token=k, logprob=v) for k, v in top.items()]
            out.append(entry)
        return out
    return []


def chat_response(completion: wire.ChatCompletion, model: str, total_ns: int,
                  load_ns: int = 0) -> ow.OllamaChatResponse:
    """A ``chat.completion`` -> ``/api/chat``'s reply (``model``: the name the client asked for)."""
    choice = completion.choices[0]
    msg = choice.message
    calls = msg.tool_calls if isinstance(msg.tool_calls, list) else []
    message = ow.OllamaReplyMessage(content=msg.content or "")
    if isinstance(msg.reasoning_content, str) and msg.reasoning_content:
        message.thinking = msg.reasoning_content
    if calls:
        message.tool_calls = _calls([(c.id, c.function.name, c.function.arguments) for c in calls])
    reply = ow.OllamaChatResponse(model=model, created_at=created_at(), message=message, done=True,
                                  done_reason=done_reason(choice.finish_reason),
                                  **counts(completion.usage, completion.timings, total_ns, load_ns))
    if choice.logprobs is not None:
        reply.logprobs = logprobs(choice.logprobs)
    return reply


def generate_response(result: wire.ChatCompletion | wire.TextCompletion, model: str, total_ns: int,
                      load_ns: int = 0) -> ow.OllamaGenerateResponse:
    """A ``chat.completion`` (templated) or ``text_completion`` (raw, suffix) -> ``/api/generate``'s reply."""
    usage = result.usage if isinstance(result.usage, wire.Usage) else None
    timings = result.timings if isinstance(result.timings, wire.Timings) else None
    if isinstance(result, wire.TextCompletion):
        choice = result.choices[0]
        reply = ow.OllamaGenerateResponse(model=model, created_at=created_at(), response=choice.text, done=True,
                                    done_reason=done_reason(choice.finish_reason),
                                    **counts(usage, timings, total_ns, load_ns))
        if choice.logprobs is not None:
            reply.logprobs = logprobs(choice.logprobs)
        return reply
    chat = result.choices[0]
    reply = ow.OllamaGenerateResponse(model=model, created_at=created_at(), response=chat.message.content or "",
                                done=True, done_reason=done_reason(chat.finish_reason),
                                **counts(usage, timings, total_ns, load_ns))
    if isinstance(chat.message.reasoning_content, str) and chat.message.reasoning_content:
        reply.thinking = chat.message.reasoning_content
    if chat.logprobs is not None:
        reply.logprobs = logprobs(chat.logprobs)
    return reply


def load_response(req: ot.OllamaChatRequest | ot.OllamaGenerateRequest) -> ow.OllamaChatResponse | \
        ow.OllamaGenerateResponse:
    """The answer to a request that only loads the model (:func:`loads_only`), as Ollama's server writes it
    (``server/routes.go``): ``done: true`` at once, an empty ``message`` (``/api/chat``) or ``response``
    (``/api/generate``), no counts, and ``done_reason`` ``"unload"`` when ``keep_alive`` is 0 (the model is
    unloaded), else ``"load"``."""
    reason = "unload" if unloads(req) else "load"
    if isinstance(req, ot.OllamaChatRequest):
        return ow.OllamaChatResponse(model=req.model, created_at=created_at(), message=ow.OllamaReplyMessage(),
                                     done=True, done_reason=reason)
    return ow.OllamaGenerateResponse(model=req.model, created_at=created_at(), response="", done=True,
                                     done_reason=reason)


class _Stream:
    """What both stream translators share: the tool calls gathered until the choice finishes, the finish
    reason, and the request's clock (``started``: ``time.monotonic()`` at its arrival)."""

    def __init__(self, model: str, started: float, load_ns: int = 0) -> None:
        self.model = model
        self.started = started
        self.load_ns = load_ns
        self.finish: str | None = None
        self.done = False
        self._calls: dict[int, list[Any]] = {}  # index -> [id, name, arguments so far]
        self._logprobs: list[ow.OllamaLogprob] = []  # of tokens whose text no line carried yet
        self._asked = False  # the request asked for logprobs (a chunk carried them)

    def _gather_logprobs(self, lp: Any) -> None:
        if lp is not None:
            self._asked = True
            self._logprobs += logprobs(lp)

    def _take_logprobs(self, line: Any) -> Any:
        """``line`` with the logprobs gathered since the last line that carried some (an empty list on the last
        line of a request that asked for them), returned."""
        if self._logprobs or (self._asked and line.done):
            line.logprobs, self._logprobs = self._logprobs, []
        return line

    def _gather(self, delta: Any) -> None:
        for call in delta.get("tool_calls") or ():
            entry = self._calls.setdefault(call.index, [None, "", ""])
            entry[0] = entry[0] or call.get("id")
            entry[1] = entry[1] or (call.function.get("name") or "")
            entry[2] += call.function.get("arguments") or ""

    def _take_calls(self) -> list[ow.OllamaReplyToolCall]:
        calls = _calls([(c[0], c[1], c[2]) for c in (self._calls[i] for i in sorted(self._calls))])
        self._calls = {}
        return calls

    def _counts(self, chunk: Any) -> dict[str, Any]:
        usage = chunk.usage if isinstance(chunk.usage, wire.Usage) else None
        timings = chunk.timings if isinstance(chunk.timings, wire.Timings) else None
        total = int((time.monotonic() - self.started) * 1e9)
        return {"done_reason": done_reason(self.finish), **counts(usage, timings, total, self.load_ns)}


class ChatStream(_Stream):
    """``chat.completion.chunk`` objects in, ``/api/chat`` stream objects out: a piece of content or thinking
    per chunk, the tool calls whole when the choice finishes, and the ``done: true`` object from the usage
    chunk (which :func:`chat_request` asks for)."""

    def lines(self, chunk: wire.ChatCompletionChunk) -> list[ow.OllamaChatResponse]:
        out: list[ow.OllamaChatResponse] = []
        now = created_at()
        for choice in chunk.choices:
            d = choice.delta
            text, thinking = d.get("content") or "", d.get("reasoning_content") or ""
            self._gather(d)
            self._gather_logprobs(choice.logprobs)
            if text or thinking:
                msg = ow.OllamaReplyMessage(content=text)
                if thinking:
                    msg.thinking = thinking
                out.append(self._take_logprobs(ow.OllamaChatResponse(model=self.model, created_at=now, message=msg,
                                                                     done=False)))
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason
                if self._calls:
                    calls = ow.OllamaReplyMessage(tool_calls=self._take_calls())
                    out.append(ow.OllamaChatResponse(model=self.model, created_at=now, done=False, message=calls))
        if isinstance(chunk.usage, wire.Usage):
            self.done = True
            out.append(self._take_logprobs(ow.OllamaChatResponse(
                model=self.model, created_at=now, message=ow.OllamaReplyMessage(), done=True, **self._counts(chunk))))
        return out


class GenerateStream(_Stream):
    """``chat.completion.chunk`` or ``text_completion`` chunks in, ``/api/generate`` stream objects out."""

    def lines(self, chunk: wire.ChatCompletionChunk | wire.TextCompletion) -> list[ow.OllamaGenerateResponse]:
        out: list[ow.OllamaGenerateResponse] = []
        now = created_at()
        for choice in chunk.choices:
            if isinstance(choice, wire.CompletionChoice):
                text, thinking, finish = choice.text, "", choice.finish_reason
            else:
                text = choice.delta.get("content") or ""
                thinking = choice.delta.get("reasoning_content") or ""
                finish = choice.finish_reason
            self._gather_logprobs(choice.logprobs)
            if text or thinking:
                line = ow.OllamaGenerateResponse(model=self.model, created_at=now, response=text, done=False)
                if thinking:
                    line.thinking = thinking
                out.append(self._take_logprobs(line))
            if finish is not None:
                self.finish = finish
        if isinstance(chunk.usage, wire.Usage):
            self.done = True
            out.append(self._take_logprobs(ow.OllamaGenerateResponse(model=self.model, created_at=now, response="",
                                                                     done=True, **self._counts(chunk))))
        return out


def embed_response(result: wire.EmbeddingList, model: str, total_ns: int, load_ns: int = 0) -> ow.OllamaEmbedResponse:
    """The engine's embeddings -> ``/api/embed``'s reply."""
    vectors = [list(e.embedding) if isinstance(e.embedding, list) else [] for e in result.data]
    return ow.OllamaEmbedResponse(model=model, embeddings=vectors, total_duration=total_ns, load_duration=load_ns,
                            prompt_eval_count=result.usage.prompt_tokens)
