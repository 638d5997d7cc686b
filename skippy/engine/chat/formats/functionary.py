"""Functionary v3.2 tool-call format (MeetKai).

The generation prompt ends with ``>>>``; the output is segments
``<recipient>\\n<body>`` joined by ``>>>``. Recipient ``all`` means the body
is content; any other recipient is a tool name and the body its JSON
arguments::

    all
    Let me check.>>>get_weather
    {"city": "Paris"}

(The raw-code ``python`` tool body is not JSON and stays content.)
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
