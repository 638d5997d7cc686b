"""JSON-argument tool-call formats of current families (each verified against its fixture template).

Kimi K2 (Instruct, Thinking; ``<think>`` reasoning). The model's own ids
``functions.NAME:IDX`` are kept as the OpenAI ``id`` (the template renders
them back in the history)::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

Granite 3.3 (Granite 4.x writes Hermes ``<tool_call>``; ``<think>`` reasoning,
``<response>`` tags dropped)::

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]

Nemotron Nano v2 (``<think>`` reasoning)::

    <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>

Apertus (the tool name is the key; reasoning in ``<|inner_prefix|>...<|inner_suffix|>``)::

    <|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>

GigaChat 3 (a new message of the role ``function call``; one call per message, as its template renders
them; ``<|message_sep|>`` ends the content before it) and GigaChat 3.1 (``<|function_call|>``)::

    <|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris"}}
    <|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}

Firefunction v2 (Fireworks, Llama 3 based; ``functools`` then a JSON list, no closing marker)::

     functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]

Apriel 1.5 and 1.6 (ServiceNow; a call object may carry its ``id``, which the template renders back). 1.6's
generation prompt opens the reasoning with ``Here are my reasoning steps:`` and the reply follows
``[BEGIN FINAL RESPONSE]``; the opening sentence is part of ``reasoning_content``, as llama.cpp reads it
(its ``Apriel-1.6-15b-Thinker-fixed`` cases)::

    <tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>

Upstage Solar Open (each part of the reply a message of its own: the reasoning in ``<|think|>...<|end|>``, then
``<|begin|>assistant`` and the content after ``<|content|>`` or the calls after ``<|tool_calls|>``; the
generation prompt ends with ``<|begin|>assistant``, after an empty thinking message with ``reasoning_effort``
``low``). The model's call id (its template asks for 10 lowercase letters and digits) is kept as the OpenAI id
where it has that form; another id is replaced by ours::

    <|think|>Look it up.<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Paris"}<|tool_call:end|><|calls|>
"""  # noqa: E501 (the exact marker text)

import re

import attrs

from skippy.engine.chat.formats.core import JSON_STR, ToolSyntax, json_wrapper_header

#: the sentence with which Apriel 1.6's generation prompt opens the reasoning
APRIEL_THINK_OPEN = "Here are my reasoning steps:"

KIMI_K2 = ToolSyntax(
    name="kimi_k2",
    opens=("<|tool_calls_section_begin|>", "<|tool_call_begin|>"),
    header=re.compile(r"\s*(?:<\|tool_call_begin\|>)?\s*(?P<id>(?:functions\.)?(?P<name>[^\s<:]+):\d+)\s*"
                      r"<\|tool_call_argument_begin\|>\s*(?=\{)"),
    next_call="<|tool_call_begin|>",
    close="<|tool_calls_section_end|>",
    markers=("<|tool_call_end|>",),
    calls_end_thinking="any",  # Kimi K2 Thinking calls tools from inside <think> without closing it
    reasoning_opener="<think>",  # llama.cpp's kimi-k2 parser: Kimi K2 Instruct's template writes no tag
)

GRANITE = ToolSyntax(
    name="granite",
    opens=("<|tool_call|>",),
    header=json_wrapper_header("name", "arguments", lead=r"\[?"),
    name_json=True,
    next_call="{",
    close="]",
    wrapper=(("name",), ("arguments", "parameters")),
    json_lead="[",
    drop=("<response>", "</response>"),
)

NEMOTRON_V2 = ToolSyntax(
    name="nemotron_v2",
    opens=("<TOOLCALL>",),
    header=json_wrapper_header("name", "arguments", lead=r"\[?"),
    name_json=True,
    next_call="{",
    close="</TOOLCALL>",
    wrapper=(("name",), ("arguments", "parameters")),
    json_lead="[",
)

APERTUS = ToolSyntax(
    name="apertus",
    opens=("<|tools_prefix|>",),
    header=re.compile(r"\s*\[?\s*\{\s*" + JSON_STR + r"\s*:\s*(?=\{)", re.S),
    name_json=True,
    next_call="{",
    close="<|tools_suffix|>",
    think_tags=("<|inner_prefix|>", "<|inner_suffix|>"),
)

GIGACHAT3 = ToolSyntax(
    name="gigachat3",
    opens=("function call<|role_sep|>",),
    header=json_wrapper_header("name", "arguments"),
    name_json=True,
    close="}",
    wrapper=(("name",), ("arguments",)),
    drop=("<|message_sep|>",),
)

GIGACHAT3_1 = attrs.evolve(GIGACHAT3, name="gigachat3_1", opens=("<|function_call|>",))

FIREFUNCTION_V2 = ToolSyntax(
    name="firefunction_v2",
    opens=(" functools[", "functools["),  # the template writes the space; a model may leave it out
    header=json_wrapper_header("name", "arguments"),
    name_json=True,
    next_call="{",
    close="]",
    wrapper=(("name",), ("arguments", "parameters")),
)

APRIEL = ToolSyntax(
    name="apriel",
    opens=("<tool_calls>",),
    header=json_wrapper_header("name", "arguments", lead=r"\[?"),
    name_json=True,
    next_call="{",
    close="</tool_calls>",
    wrapper=(("name",), ("arguments", "parameters")),
    json_lead="[",
    think_tags=(APRIEL_THINK_OPEN, "[BEGIN FINAL RESPONSE]"),
    opener_in_reasoning=True,
    keeps_prompt_opener=False,
)

SOLAR_OPEN = ToolSyntax(
    name="solar_open",
    opens=("<|tool_calls|>", "<|tool_call:begin|>"),
    header=re.compile(r"\s*(?:<\|tool_call:begin\|>)?\s*(?:(?P<id>[a-z0-9]{10})|[^<>]*?)\s*<\|tool_call:name\|>"
                      r"\s*(?P<name>[^\s<>]+)\s*<\|tool_call:args\|>\s*(?=\{)"),
    next_call="<|tool_call:begin|>",
    close="<|calls|>",
    markers=("<|tool_call:end|>",),
    think_tags=("<|think|>", "<|end|><|begin|>assistant"),
    # the content message's opener, and the end of a message and the next one's start (content, then calls)
    drop=("<|content|>", "<|end|>", "<|begin|>assistant", "<|flush|>"),
)
