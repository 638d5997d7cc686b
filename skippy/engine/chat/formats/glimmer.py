"""Muse Glimmer (the ATEM tool-calling protocol).

The generation prompt ends with ``<|start|>assistant``; the output is a sequence of messages, each
``[<|start|>assistant] to=RECIPIENT<|message|>BODY`` ended by ``<|eom|>`` (more messages follow) or
``<|eot|>`` (the turn ends)::

     to=self<|message|>The user wants the weather.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>
    <atem:invoke name="get_weather">
    <atem:parameter name="city">Paris</atem:parameter>
    </atem:invoke>
    </atem:function_calls><|eot|>

     to=user<|message|>It is sunny.<|eot|>

A message to ``self`` is reasoning (``reasoning_format`` applies: ``none`` keeps the raw message, header and
end marker included, in ``content``; ``hidden`` drops it); a message to ``user`` (or with no recipient) is
content, the ATEM markup it may show included; a message to any other recipient (a tool, maybe
``namespace.tool``) holds the calls: each ``<atem:invoke name="NAME">`` of an allowed tool is a call whose
``<atem:parameter name="KEY">`` values are typed by the tool's schema (a ``string`` one is raw text, others
JSON), as :mod:`.xml` reads MiniMax M2's tags; anything else in it is content. Text that is no ATEM message
is content. This follows llama.cpp's ``common_chat_params_init_muse_glimmer`` (``common/parsers/
muse-glimmer.cpp``) and its ``muse-glimmer`` cases in ``tests/test-chat.cpp``.
"""  # noqa: E501 (the exact marker text)

from __future__ import annotations

import re
from typing import Any

from skippy.engine.chat.formats.base import Delta
from skippy.engine.chat.formats.core import ToolSyntax
from skippy.engine.chat.formats.messages import MessageScanner
from skippy.engine.chat.formats.xml import XmlArgs, XmlScanner

START, MESSAGE = "<|start|>", "<|message|>"
ENDS = ("<|eom|>", "<|eot|>")
_HEADER = re.compile(r"(?:<\|start\|>)?\s*(?:assistant)?(?:\s*to=(?P<recipient>[^\s<]+))?\s*<\|message\|>")

#: the calls inside a tool message (read by an :class:`~.xml.XmlScanner`)
ATEM_CALLS = ToolSyntax(
    name="atem_calls",
    opens=("<atem:function_calls>",),
    header=re.compile(r'\s*(?:<atem:invoke )?name="(?P<name>[^"\n]+)">'),
    next_call="<atem:invoke",
    close="</atem:function_calls>",
    xml=XmlArgs(param_open='<atem:parameter name="', key_end='">', value_open="", value_close="</atem:parameter>",
                call_close="</atem:invoke>"),
    scanner=XmlScanner,
)


def _may_be_header(text: str) -> bool:
    """True while ``text`` can still grow into a message header (the generation prompt wrote
    ``<|start|>assistant``, so a header may begin at `` to=`` or at ``<|message|>`` itself)."""
    text = text.lstrip()
    return any(text.startswith(lead) or lead.startswith(text) for lead in (START, "assistant", "to=", MESSAGE))


class GlimmerScanner(MessageScanner):
    """Messages, reasoning and calls of Muse Glimmer output (see the module docstring). The calls of every tool
    message go through one :class:`~.xml.XmlScanner`, so call indices run on across messages and
    ``parallel_tool_calls`` counts them all.
    """

    header, message, start, ends = _HEADER, MESSAGE, START, ENDS

    def __init__(self, syntax: ToolSyntax, allowed: set[str] | None, parallel: bool, *args: Any) -> None:
        super().__init__(syntax, allowed, parallel, *args)
        id_factory, *rest = args
        self.calls = XmlScanner(ATEM_CALLS, allowed, parallel, lambda: self.id_factory(), *rest)  # ids minted here

    def may_be_header(self, text: str) -> bool:
        return _may_be_header(text)

    def finish(self) -> list[Delta]:
        out = self.feed("", final=True)
        return out + self.calls.finish()

    def _call_text(self, text: str) -> None:
        self.out.extend(self.calls.feed(text))

    def _message_end(self) -> None:
        if self.route == "call":  # the message ends: a call it left open ends with it
            self.out.extend(self.calls.feed("", final=True))

    def _open(self, m: re.Match[str]) -> None:
        header, recipient = m.group(0), m.group("recipient")
        if recipient == "self":
            fmt = self.reasoning_format
            self.route = {"none": "raw", "hidden": "drop"}.get(fmt, "reasoning")
            if fmt in ("none", "deepseek-legacy"):
                self._emit("content", header)
        elif recipient is None or recipient == "user":
            self.route = "content"
        else:
            self.route = "call"


MUSE_GLIMMER = ToolSyntax(
    name="muse_glimmer",
    scanner=GlimmerScanner,
    own_reasoning=True,
    keep_when_tools_off=True,
    # llama.cpp's preserved tokens, and the recipient's `` to=`` (a token limit that cuts a header cuts syntax)
    markers=(" to=", START, MESSAGE, *ENDS, "<atem:function_calls>", "<atem:invoke", "<atem:parameter",
             "</atem:parameter>", "</atem:invoke>", "</atem:function_calls>"),
)
