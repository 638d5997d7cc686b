"""Command R+ tool-call format (Cohere ``c4ai-command-r-plus``, its ``tool_use`` template).

Output shape: ``Action:`` then a fenced JSON list of calls, as the template renders a past call and its
tools prompt teaches::

    Action:
    ```json
    [
        {"tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]
    ```

Text before ``Action:`` is content. The turn's ``<|CHATBOT_TOKEN|>`` (the generation prompt ends with it,
a model may repeat it) and ``<|END_OF_TURN_TOKEN|>`` are dropped, as llama.cpp's parser reads this
template (its ``CohereForAI-c4ai-command-r-plus-tool_use`` cases in ``tests/test-chat.cpp``). A call
of a tool the request does not offer (the prompt's own ``directly-answer``) stays content.
"""

import re

from skippy.engine.chat.formats.core import JSON_STR, ToolSyntax

COMMAND_R_PLUS = ToolSyntax(
    name="command_r_plus",
    opens=("Action:",),
    header=re.compile(r'\s*(?:```(?:json)?\s*)?\[?\s*\{\s*"tool_name"\s*:\s*' + JSON_STR
                      + r'\s*,\s*"parameters"\s*:\s*(?=\{)', re.S),
    name_json=True,
    next_call="{",
    close="```",
    wrapper=(("tool_name", "name"), ("parameters", "arguments")),
    json_lead="`json[",
    drop=("<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"),
)
