"""What a chat template can do, found once at load by rendering probe conversations.

Like llama.cpp's ``common_chat_templates`` / minja ``chat_template_caps``, we
never look at file or model names: every capability comes from rendering a
few small conversations (tools present vs absent, a tool-call history with
arguments as an object vs a JSON string, a system message, thinking on vs
off) and looking for needles in the output. A probe that raises simply means
the template lacks that capability; :func:`detect_caps` never raises.

The chat format (see :data:`skippy.engine.chat.formats.FORMATS`) is chosen from
the markers the template writes around a rendered tool call.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from skippy.engine.chat.templates import ChatTemplate

THINK_OPEN_TAGS = ("<think>", "<|START_THINKING|>", "<seed:think>", "[THINK]", "<|inner_prefix|>",
                   "<|open|>think<|sep|>", "<mm:think>", "Here are my reasoning steps:", "<think:opensource>")
THINK_CLOSE_TAGS = ("</think>", "<|END_THINKING|>", "</seed:think>", "[/THINK]", "<|inner_suffix|>",
                    "<|close|>think<|sep|>", "</mm:think>", "[BEGIN FINAL RESPONSE]", "</think:opensource>")

_TOOL_NAME = "probe_tool_fn"
_TOOLS = [{
    "type": "function",
    "function": {
        "name": _TOOL_NAME,
        "description": "Probe tool.",
        "parameters": {"type": "object", "required": ["arg_needle"],
                       "properties": {"arg_needle": {"type": "string", "description": "Probe argument."}}},
    },
}]
_IDS = ("pr0b3id42", "pr0b3id43")  # 9 alphanumeric characters: Mistral templates insist
_USER = {"role": "user", "content": "USER_NEEDLE"}


@attrs.frozen
class TemplateCaps:
    """Capabilities of one chat template and the chat format its output uses.

    ``requires_object_arguments``: the template renders
    ``tool_calls[].function.arguments`` properly only when given an object,
    or renders an object in its own syntax where it copies a string as it is
    (Gemma 4's ``call:NAME{key:<|"|>value<|"|>}``, Kimi K3's argument tags:
    llama.cpp passes objects to a template that reads their keys); history
    normalisation then decodes JSON-string arguments.
    ``requires_short_call_ids``: the template refuses tool-call ids other than 9 alphanumeric characters
    (Mistral's): history normalisation shortens the others
    (:func:`~skippy.engine.chat.formats.base.short_call_id`) and the calls the model makes get such ids.
    ``thinking_forced_open``: the default generation prompt ends inside a
    thinking block (``<think>``), so the output starts in reasoning.
    ``supports_late_system``: a system message after the conversation has begun is rendered where it
    stands, the first one kept (some templates raise on it, drop it, keep only the last system message or
    gather them all at the top: it is then folded into a user message where it stands,
    :func:`~skippy.engine.chat.history.fold_late_system`, which also keeps the prompt's prefix cacheable).
    """

    supports_tools: bool = False
    supports_tool_call_ids: bool = False
    requires_short_call_ids: bool = False
    supports_system_role: bool = False
    supports_late_system: bool = False
    supports_thinking: bool = False
    supports_parallel_tool_calls: bool = False
    requires_object_arguments: bool = False
    thinking_forced_open: bool = False
    chat_format: str = "content_only"


def prompt_opens_thinking(prompt: str) -> bool:
    """True if a rendered prompt ends inside an opened thinking block (``...<think>\\n``)."""
    return bool(thinking_opener(prompt))


def thinking_opener(prompt: str, tags: tuple[str, ...] = ()) -> str:
    """The text that opens the thinking block a rendered prompt ends inside: its opening tag (one of
    :data:`THINK_OPEN_TAGS` or ``tags``) and the space after it (``<think>\\n``), or ``""`` when the prompt does
    not end inside one."""
    tail = prompt.rstrip()
    tag = next((tag for tag in (*THINK_OPEN_TAGS, *tags) if tag and tail.endswith(tag)), "")
    return prompt[len(tail) - len(tag):] if tag else ""


def _render(template: ChatTemplate, messages: list[dict[str, Any]], **kwargs: Any) -> str | None:
    try:
        return template.render(messages, **kwargs)
    except Exception:  # noqa: BLE001 - a failing probe only means "not supported"
        return None


def _call(call_id: str, args: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": _TOOL_NAME, "arguments": args}}


def _tool_history(template: ChatTemplate, n_calls: int, as_string: bool,
                  ids: tuple[str, ...] = _IDS) -> str | None:
    """Render user -> assistant tool call(s) -> tool result(s), the calls' ids from ``ids``; first variant that
    renders."""
    calls = [_call(ids[i], f'{{"arg_needle": "ARGVAL_{i}"}}' if as_string else {"arg_needle": f"ARGVAL_{i}"})
             for i in range(n_calls)]
    results = [{"role": "tool", "tool_call_id": ids[i], "name": _TOOL_NAME, "content": f"RESULT_{i}"}
               for i in range(n_calls)]
    for content in ("", None):
        messages: list[dict[str, Any]] = [_USER, {"role": "assistant", "content": content, "tool_calls": calls},
                                          *results]
        for kwargs in ({"tools": _TOOLS}, {}):
            out = _render(template, messages, add_generation_prompt=False, **kwargs)
            if out is not None and "ARGVAL_0" in out:
                return out
    return None


def choose_format(history: str, generation_prompt: str, supports_tools: bool, tools_prompt: str = "") -> str:
    """The chat format whose markers the rendered tool-call history shows (or, for templates that do not
    render past calls, e.g. Granite 3.3 and LFM2, the syntax their tools prompt teaches)."""
    if "<|channel|>" in history and "to=functions." in history:
        return "gpt_oss"
    if re.search(r"to=" + _TOOL_NAME + r"<\|message\|><atem:function_calls>", history):
        return "muse_glimmer"
    if "<|tool_call:begin|>" in history and "<|tool_call:args|>" in history:
        return "solar_open"
    if "<|tool_calls_section_begin|>" in history or "<|tool_call_begin|>" in history:
        return "kimi_k2"
    if "<|open|>call tool=" in history:
        return "kimi_k3"
    if "]<]minimax[>[<tool_call>" in history:
        return "minimax_m3"
    if "<minimax:tool_call>" in history:
        return "minimax_m2"
    if "<｜DSML｜function_calls>" in history:
        return "deepseek_v3_2"
    if "<｜DSML｜tool_calls>" in history:
        return "deepseek_v4"
    if re.search(r'<function name="[^"]+">\s*<param name=', history):
        return "minicpm5"
    if "<|tool_call>call:" in history:
        return "gemma4"
    if "function call<|role_sep|>" in history:
        return "gigachat3"
    if "<|function_call|>" in history:
        return "gigachat3_1"
    if "<seed:tool_call>" in history:
        return "seed_oss"
    if re.search(r"<tool_call>\s*<function=", history):
        return "qwen3_coder"
    if re.search(r"<tool_call:opensource>\s*[^\s<>{}]+\s*<tool_sep:opensource>", history):
        return "hy3"
    if re.search(r"<tool_call>\s*[^\s<>{}]+\s*<arg_key>", history):
        return "ling_3" if "<|role_end|>" in history else "glm_4_5"
    if "<|tools_prefix|>" in history:
        return "apertus"
    if "<TOOLCALL>" in history:
        return "nemotron_v2"
    if "<|tool_call_start|>" in history or "<|tool_list_start|>" in tools_prompt or "List of tools: [" in tools_prompt:
        return "lfm2"
    if "<|tool_call|>" in history or "<|tool_call|>" in tools_prompt:
        return "granite"
    if "<｜tool▁calls▁begin｜>" in history or "<｜tool▁call▁begin｜>" in history:
        return "deepseek_r1" if re.search(r"function\s*<｜tool▁sep｜>", history) else "deepseek_v3_1"
    if "[TOOL_CALLS]" in history:
        return "mistral_small_3_2" if "[ARGS]" in history else "mistral_nemo"
    if "<|START_ACTION|>" in history:
        return "command_r7b"
    if re.search(r'Action:\s*```json\s*\[\s*\{\s*"tool_name"\s*:', history):
        return "command_r_plus"
    if re.search(r"<function=" + _TOOL_NAME + r">\s*\{", history):
        return "functionary_v3_1"
    if re.search(r'functools\[\s*\{\s*"name"\s*:', history):
        return "firefunction_v2"
    if re.search(r'<tool_calls>\s*\[\s*\{\s*"name"\s*:', history):
        return "apriel"
    if generation_prompt.rstrip().endswith(">>>") and f">>>{_TOOL_NAME}" in history:
        return "functionary_v3_2"
    if re.search(r'<tool_call>\s*\{\s*"name"\s*:', history):
        return "hermes_2_pro"
    if ("<|python_tag|>" in history or "ipython" in history) and re.search(
            r'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*"' + _TOOL_NAME + r'"\s*,\s*"parameters"', history):
        return "llama3_json"
    return "generic" if supports_tools else "content_only"


def detect_caps(template: ChatTemplate) -> TemplateCaps:
    """Probe ``template`` (see module docstring). Never raises.

    Probes that fail without tools are retried with tools (some templates,
    e.g. Hermes 2 Pro's ``tool_use`` variant, only render with tools).
    ``thinking_forced_open`` is judged on the prompt rendered with
    ``enable_thinking=True`` (llama.cpp's default), else the default prompt;
    per-request prompts can be checked with :func:`prompt_opens_thinking`.
    """
    def render_any(messages: list[dict[str, Any]], **kwargs: Any) -> str | None:
        out = _render(template, messages, **kwargs)
        return out if out is not None else _render(template, messages, tools=_TOOLS, **kwargs)

    plain = _render(template, [_USER])
    with_tools = _render(template, [_USER], tools=_TOOLS) or ""
    supports_tools = _TOOL_NAME in with_tools and _TOOL_NAME not in (plain or "")
    plain = plain if plain is not None else with_tools

    system = render_any([{"role": "system", "content": "SYS_NEEDLE"}, _USER]) or ""
    supports_system_role = "SYS_NEEDLE" in system
    # a later system message rendered where it stands, the first one kept (some templates keep only the last
    # system message, or gather them all at the top)
    late = render_any([{"role": "system", "content": "SYS_NEEDLE"}, _USER,
                       {"role": "assistant", "content": "ANSWER_NEEDLE"},
                       {"role": "system", "content": "LATE_NEEDLE"}, _USER]) or ""
    supports_late_system = "SYS_NEEDLE" in late and "ANSWER_NEEDLE" in late and \
        late.find("ANSWER_NEEDLE") < late.find("LATE_NEEDLE")

    obj_history = _tool_history(template, 1, as_string=False)
    str_history = _tool_history(template, 1, as_string=True)
    history = obj_history or str_history or ""
    # verbatim JSON-string arguments mean the template copies strings as they are
    str_verbatim = str_history is not None and '{"arg_needle": "ARGVAL_0"}' in str_history
    # an object the template reads key by key, not printed as Python's repr of a dict
    native_objects = obj_history is not None and "'arg_needle'" not in obj_history and obj_history != str_history
    requires_object_arguments = obj_history is not None and (not str_verbatim or native_objects)
    supports_tool_call_ids = _IDS[0] in history
    # Mistral's templates raise unless every id is 9 alphanumeric characters
    requires_short_call_ids = bool(history) and _tool_history(template, 1, as_string=obj_history is None,
                                                             ids=("call_" + _IDS[0],)) is None
    parallel = _tool_history(template, 2, as_string=obj_history is None) or ""
    supports_parallel = "ARGVAL_0" in parallel and "ARGVAL_1" in parallel

    on = render_any([_USER], enable_thinking=True)
    off = render_any([_USER], enable_thinking=False)
    # under both names, as a request's reasoning reaches the template (Solar Open's reads only ``reasoning``)
    reasoning = render_any([_USER, {"role": "assistant", "content": "ANSWER_NEEDLE",
                                    "reasoning_content": "REASONING_NEEDLE", "reasoning": "REASONING_NEEDLE"}],
                           add_generation_prompt=False) or ""
    forced_open = prompt_opens_thinking(on if on is not None else plain)
    chat_format = choose_format(history or with_tools, plain, supports_tools, with_tools)
    supports_thinking = (forced_open or prompt_opens_thinking(plain)
                         or (on is not None and off is not None and on != off)
                         or "REASONING_NEEDLE" in reasoning
                         # the default system prompt teaches the tags (Ministral/Magistral [THINK])
                         or any(o in plain and c in plain for o, c in zip(THINK_OPEN_TAGS, THINK_CLOSE_TAGS,
                                                                          strict=True))
                         or chat_format == "gpt_oss")  # Harmony's analysis channel

    return TemplateCaps(
        supports_tools=supports_tools,
        supports_tool_call_ids=supports_tool_call_ids,
        requires_short_call_ids=requires_short_call_ids,
        supports_system_role=supports_system_role,
        supports_late_system=supports_late_system,
        supports_thinking=supports_thinking,
        supports_parallel_tool_calls=supports_parallel,
        requires_object_arguments=requires_object_arguments,
        thinking_forced_open=forced_open,
        chat_format=chat_format,
    )
