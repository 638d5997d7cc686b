"""DeepSeek tool-call formats (reasoning is ``<think>...</think>``, shared splitter).

DeepSeek R1 (and its distills)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

DeepSeek V3.1::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
"""  # noqa: E501 (the exact marker text)

import re

from skippy.engine.chat.formats.core import ToolSyntax

CALLS_BEGIN, CALL_BEGIN = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"
SEP, CALLS_END = "<｜tool▁sep｜>", "<｜tool▁calls▁end｜>"

DEEPSEEK_R1 = ToolSyntax(
    name="deepseek_r1",
    opens=(CALLS_BEGIN, CALL_BEGIN),
    header=re.compile(rf"\s*(?:{CALL_BEGIN})?\s*(?:function)?\s*{SEP}\s*(?P<name>[^\n`<]+?)\s*\n?\s*```(?:json)?\s*(?=\{{)"),
    next_call=CALL_BEGIN,
    close=CALLS_END,
)

DEEPSEEK_V3_1 = ToolSyntax(
    name="deepseek_v3_1",
    opens=(CALLS_BEGIN, CALL_BEGIN),
    header=re.compile(rf"\s*(?:{CALL_BEGIN})?\s*(?P<name>[^\n<]+?)\s*{SEP}\s*(?=\{{)"),
    next_call=CALL_BEGIN,
    close=CALLS_END,
)
