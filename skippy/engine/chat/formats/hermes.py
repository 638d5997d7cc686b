"""Hermes 2 Pro tool-call format (NousResearch Hermes 2 Pro / Hermes 3, Qwen 2.5, Qwen3, QwQ).

Output shape::

    optional text <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call><tool_call>...</tool_call>

Qwen3 and QwQ add ``<think>...</think>`` reasoning first (handled by the
shared reasoning splitter in :mod:`skippy.engine.chat.formats.core`).
"""

from skippy.engine.chat.formats.core import ToolSyntax, json_wrapper_header

HERMES_2_PRO = ToolSyntax(
    name="hermes_2_pro",
    opens=("<tool_call>",),
    header=json_wrapper_header("name", "arguments"),
    name_json=True,
    close="</tool_call>",
    wrapper=(("name",), ("arguments", "parameters")),
)
