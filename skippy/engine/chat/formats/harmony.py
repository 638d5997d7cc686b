"""gpt-oss (OpenAI Harmony response format).

The generation prompt ends with ``<|start|>assistant``; the output is a
sequence of messages, each ``[<|start|>assistant][ to=RECIPIENT]<|channel|>
CHANNEL[ to=RECIPIENT][ [<|constrain|>]TYPE]<|message|>BODY`` ended by
``<|end|>``, ``<|call|>`` or ``<|return|>`` (or the next ``<|start|>``)::

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

    <|channel|>final<|message|>It is sunny.<|return|>

Channel ``analysis`` is reasoning (``reasoning_format`` applies: ``none``
keeps the raw message in ``content``, ``hidden`` drops it); ``final`` and a
``commentary`` without recipient (a preamble) are content; a message to
``functions.NAME`` of an allowed tool is a call whose body is its JSON
arguments, streamed as written. A message to ``functions.NAME`` of a tool the
request does not allow is given back verbatim as content (as every format
here treats a call it may not make). A message to a recipient outside
``functions.`` is a call to a built-in tool (``browser.search``, ``python``,
``container.exec``) that no client can run: it is dropped, as llama.cpp's
``unsolicited`` rule drops it. Text that is not Harmony at all is content.

Why not the ``openai-harmony`` library: its ``StreamableParser`` works on
o200k token ids and needs the ``o200k_base.tiktoken`` vocabulary, which it
downloads on first use (``TIKTOKEN_ENCODINGS_BASE`` may point at a local copy
whose SHA-256 must match); no package on the registries this project uses
ships that file, so the library cannot load offline. Our parser works on the
detokenized text, like every other chat format here, and follows the same
grammar as llama.cpp's ``common_chat_params_init_gpt_oss``.
"""  # noqa: E501 (the exact marker text)

from __future__ import annotations

import re

from skippy.engine.chat.formats.core import ToolSyntax
from skippy.engine.chat.formats.messages import MessageScanner

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
#: gpt-oss-20b at times writes ``<|channel|>commentary[ to=assistant]`` before an ``analysis`` or ``final``
#: channel: a stray prefix, skipped (llama.cpp's ``stray_commentary``)
_STRAY = r"(?:<\|channel\|>commentary(?:\s+to=assistant)?(?=<\|channel\|>(?:analysis|final)\b))?"
_HEADER = re.compile(
    r"(?:<\|start\|>)?\s*(?:[A-Za-z_][\w-]*)?(?:\s+to=(?P<r1>[^\s<]+))?\s*" + _STRAY +
    r"<\|channel\|>\s*(?P<channel>[^\s<]+)"
    r"(?:\s+to=(?P<r2>[^\s<]+))?\s*(?:<\|constrain\|>)?\s*(?:[^\s<]+)?\s*<\|message\|>", re.S)


def _may_be_header(text: str) -> bool:
    """True while ``text`` can still grow into a message header: a marker, the role name or the recipient
    first (``<|start|>assistant`` is the generation prompt's, so a header may begin at `` to=``, as
    llama.cpp's ``tool_in_role`` reads it)."""
    text = text.lstrip()
    return any(text.startswith(lead) or lead.startswith(text) for lead in ("<|", "assistant", "to="))


class HarmonyScanner(MessageScanner):
    """Channels, reasoning and tool calls of gpt-oss output (see module docstring)."""

    header, message, start, ends = _HEADER, MESSAGE, START, ENDS

    def may_be_header(self, text: str) -> bool:
        return _may_be_header(text)

    def _call_text(self, text: str) -> None:
        self._args(self.call_index, text)

    def _open(self, m: re.Match[str]) -> None:
        header = m.group(0)
        recipient = m.group("r1") or m.group("r2")
        channel = m.group("channel")
        if recipient is not None and recipient.startswith("functions.") and recipient[10:] in self.allowed:
            self.call_index = self._call_start(recipient[10:])
            self.route = "call" if self.call_index >= 0 else "drop"
        elif recipient is not None and recipient.startswith("functions."):
            self.route = "raw"
        elif recipient is not None and recipient != "assistant":
            self.route = "drop"  # a built-in tool's call
        elif channel == "analysis":
            fmt = self.reasoning_format
            self.route = {"none": "raw", "hidden": "drop"}.get(fmt, "reasoning")
            if fmt == "deepseek-legacy":
                self._emit("content", header)
        else:
            self.route = "content"
        if self.route == "raw":
            self._emit("raw", header)


GPT_OSS = ToolSyntax(
    name="gpt_oss",
    scanner=HarmonyScanner,
    own_reasoning=True,
    keep_when_tools_off=True,
    #: the analysis message as a thinking block (the scanner reads channels itself): what opens one after the
    #: generation prompt's ``<|start|>assistant`` (a continued reasoning), and what ends it before a forced call
    think_tags=(CHANNEL + "analysis" + MESSAGE, "<|end|>" + START + "assistant"),
    reasoning_opener=CHANNEL + "analysis" + MESSAGE,
    markers=(START, CHANNEL, MESSAGE, "<|constrain|>", *ENDS),
)
