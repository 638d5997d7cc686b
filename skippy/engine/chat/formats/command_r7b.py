"""Command R7B tool-call format (Cohere ``c4ai-command-r7b-12-2024``).

Output shape (``tool_call_id`` is the model's own counter, replaced by ours)::

    <|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]<|END_ACTION|>

or ``<|START_RESPONSE|>text<|END_RESPONSE|>`` for content (Cohere2MoE: ``<|START_TEXT|>text<|END_TEXT|>``;
markers dropped).
"""

import re

from skippy.engine.chat.formats.core import JSON_STR, ToolSyntax

COMMAND_R7B = ToolSyntax(
    name="command_r7b",
    opens=("<|START_ACTION|>",),
    header=re.compile(
        r'\s*\[?\s*\{\s*"tool_call_id"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"tool_name"\s*:\s*'
        + JSON_STR + r'\s*,\s*"parameters"\s*:\s*(?=\{)', re.S),
    name_json=True,
    next_call="{",
    close="<|END_ACTION|>",
    wrapper=(("tool_name", "name"), ("parameters", "arguments")),
    json_lead="[",
    drop=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"),
    think_tags=("<|START_THINKING|>", "<|END_THINKING|>"),
)
