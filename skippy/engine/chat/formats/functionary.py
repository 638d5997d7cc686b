"""Functionary tool-call formats (MeetKai): v3.2's recipients, v3.1's ``<function=NAME>`` tags.

v3.2.

The generation prompt ends with ``>>>``; the output is segments
``<recipient>\\n<body>`` joined by ``>>>``. Recipient ``all`` means the body
is content; any other recipient is a tool name and the body its JSON
arguments::

    all
    Let me check.>>>get_weather
    {"city": "Paris"}

(The raw-code ``python`` tool body is not JSON and stays content.)

v3.1 (Llama 3.1 based): a call is its JSON arguments between ``<function=NAME>`` and ``</function>``, as
the template renders a past call and its system prompt teaches; text around the calls is content::

    <function=get_weather>{"city": "Paris"}</function>

(llama.cpp reads this template with its generic tag parser: the ``meetkai-functionary-medium-v3.1`` cases of
``tests/test-chat.cpp``. The raw ``<|python_tag|>`` code form of the built-in ``python`` tool stays content.)
"""

import re

from skippy.engine.chat.formats.core import ToolSyntax

FUNCTIONARY_V3_2 = ToolSyntax(
    name="functionary_v3_2",
    opens=(">>>",),
    at_start=True,
    header=re.compile(r"(?:(?P<content>all)\n|(?P<name>[^\s>]+)\n\s*(?=\{))"),
    header_fail=re.compile(r"\n\s*[^\s{]"),
    keep_when_tools_off=True,
)

FUNCTIONARY_V3_1 = ToolSyntax(
    name="functionary_v3_1",
    opens=("<function=",),
    header=re.compile(r"(?P<name>[^\s<>]+)>\s*(?=\{)"),
    header_fail=re.compile(r">\s*[^\s{]"),  # a tag whose body is no JSON object: text
    close="</function>",
)
