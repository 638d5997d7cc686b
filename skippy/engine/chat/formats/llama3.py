"""Llama 3.1 / 3.2 / 3.3 JSON tool-call format (Meta "JSON based tool calling").

Output shape: the whole reply is one JSON object, optionally after
``<|python_tag|>``::

    {"name": "get_weather", "parameters": {"city": "Paris"}}

(``"type": "function"`` may come first; ``"arguments"`` is accepted for
``"parameters"``). Text that does not start with such an object is content.
Built-in tool syntax (``brave_search.call(...)``) is left as content.
"""

from skippy.engine.chat.formats.core import ToolSyntax, json_wrapper_header

LLAMA3_JSON = ToolSyntax(
    name="llama3_json",
    opens=("<|python_tag|>",),
    at_start=True,
    header=json_wrapper_header("name", "parameters|arguments", prefix=r'(?:"type"\s*:\s*"function"\s*,\s*)?'),
    name_json=True,
    close="}",
    wrapper=(("name",), ("parameters", "arguments")),
)
