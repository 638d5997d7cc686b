"""Mistral tool-call formats.

Mistral Nemo (``[TOOL_CALLS]`` + a JSON array; ``id`` is the model's 9-char id,
replaced by ours)::

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]

Mistral Small 3.2 / Devstral / Ministral 3 / Magistral (one ``[TOOL_CALLS]``
per call; older builds put ``[CALL_ID]id`` before ``[ARGS]``; the reasoning
models think in ``[THINK]...[/THINK]`` first)::

    [THINK]The user wants the weather.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}
"""

import re

from skippy.engine.chat.formats.core import ToolSyntax, json_wrapper_header

MISTRAL_NEMO = ToolSyntax(
    name="mistral_nemo",
    opens=("[TOOL_CALLS]",),
    header=json_wrapper_header("name", "arguments", lead=r"\[?"),
    name_json=True,
    next_call="{",
    close="]",
    wrapper=(("name",), ("arguments", "parameters")),
    json_lead="[",
)

MISTRAL_SMALL_3_2 = ToolSyntax(
    name="mistral_small_3_2",
    opens=("[TOOL_CALLS]",),
    header=re.compile(r"\s*(?P<name>[^\s\[\]{}]+)(?:\[CALL_ID\][^\[]*)?\[ARGS\]\s*(?=\{)"),
    header_fail=re.compile(r"\[ARGS\]\s*[^\s{]"),
    think_tags=("[THINK]", "[/THINK]"),
)
