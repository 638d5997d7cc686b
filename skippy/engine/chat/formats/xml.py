"""XML-argument tool-call formats: Qwen3-Coder (also Nemotron 3 Nano, Qwen3.5, StepFun 3.5), Seed-OSS,
GLM 4.5-4.7 (also Ling 3), Tencent Hy3, MiniMax M2, DeepSeek V3.2 / V4 (DSML), Kimi K3, MiniCPM5.

Qwen3-Coder (``<think>`` reasoning where the model has it)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    2
    </parameter>
    </function>
    </tool_call>

Seed-OSS: the same inside ``<seed:tool_call>...</seed:tool_call>``, reasoning
in ``<seed:think>...</seed:think>``. GLM 4.5 / 4.6 / 4.7 (newlines optional,
4.7 writes none)::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

Tencent Hy3 writes GLM's key/value pairs with its own tag names, every tag suffixed ``:opensource``, its
calls in one section (reasoning in ``<think:opensource>...</think:opensource>``; the generation prompt opens it
with ``reasoning_effort`` ``high`` or ``low`` and closes it empty with ``no_think``, the template's default)::

    <tool_calls:opensource>
    <tool_call:opensource>get_weather<tool_sep:opensource>
    <arg_key:opensource>city</arg_key:opensource>
    <arg_value:opensource>Paris</arg_value:opensource>
    </tool_call:opensource>
    </tool_calls:opensource>

A call whose arguments are one JSON object after ``<tool_sep:opensource>`` (another form other servers read, ended
by ``</tool_call:opensource>`` or ``<end_of_tool_call:opensource>``) is read as that object.

MiniMax M2 (``<think>`` reasoning)::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

DeepSeek V3.2 (``<｜DSML｜function_calls>``) and V4 (``<｜DSML｜tool_calls>``); the tag says whether a value is
text (``string="true"``) or JSON (``"false"``)::

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

Kimi K3 (reasoning in ``<|open|>think<|sep|>...<|close|>think<|sep|>``, content in a ``response`` block
whose tags are dropped; ``type`` is the value's JSON type)::

    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city"
    type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>

MiniCPM5 (no wrapping block; a value may be one CDATA section)::

    <function name="get_weather"><param name="city"><![CDATA[Paris]]></param></function>

Values are text; each is typed by the tool's JSON schema (as vLLM's
``qwen3_coder`` and ``glm45`` parsers do): a ``string`` parameter is the raw
text (one leading and one trailing newline removed in the Qwen3-Coder form),
anything else is parsed as JSON, falling back to the text. The arguments are
streamed as one JSON object: ``{"key": `` as soon as a key is complete,
string values character by character (JSON-escaped, holding back what may be
the start of the closing tag), other values once their closing tag arrives.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from skippy.engine.chat.formats.core import (
    _AFTER,
    _CONTENT,
    HEADER_LIMIT,
    JSON_DECODER,
    ToolScanner,
    ToolSyntax,
    _ws_end,
)
from skippy.engine.output.textstream import partial_suffix
from skippy.engine.sampling.grammar import is_string_param, json_types


@attrs.frozen
class XmlArgs:
    """Markers of one XML argument syntax.

    A parameter is ``param_open KEY key_end [ws] value_open VALUE value_close``;
    the call ends at ``call_close``. ``trim_newline``: one newline right
    after ``value_open`` and one right before ``value_close`` are layout, not value.
    ``value_attrs``: a pattern matched right after ``key_end`` instead of ``value_open``, for formats
    that say a value's type in the tag (DeepSeek's DSML ``string="true"``, Kimi K3's ``type="string"``):
    its group ``string`` (``true``/``false``) or ``type`` (``string`` or another JSON type) decides whether
    the value is raw text or JSON, in place of the tool's schema. ``cdata``: a value may be one
    ``<![CDATA[...]]>`` section (MiniCPM5), whose markers are not part of the value.
    """

    param_open: str
    key_end: str
    value_open: str
    value_close: str
    call_close: str
    trim_newline: bool = False
    value_attrs: re.Pattern[str] | None = None
    cdata: bool = False


_CDATA, _CDATA_END = "<![CDATA[", "]]>"


def _json_or_text(text: str) -> Any:
    """A value its tag says is not text: parsed as JSON, the text itself when it does not parse."""
    try:
        return JSON_DECODER.decode(text.strip())
    except ValueError:
        return text


def typed_value(text: str, schema: Any) -> Any:
    """A parameter's text as the JSON value its schema asks for (text when it does not parse); ``null`` for the
    word ``null`` where the schema allows null (a nullable string's, as vLLM's XML parsers read it)."""
    if text.strip() == "null" and "null" in json_types(schema):
        return None
    return text if is_string_param(schema) else _json_or_text(text)


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


class XmlScanner(ToolScanner):
    """:class:`ToolScanner` whose calls carry XML parameters (``syntax.xml``) instead of a JSON object."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._reset()

    def _reset(self) -> None:
        self.xs = "between"
        self.nparams = 0
        self.key = ""
        self.value_start = self.value_sent = 0
        self.lead_done = False
        self.stream_value = False
        self.raw_value: bool | None = None
        self.value_close = ""  # this value's closing text when it differs from the syntax's (a CDATA section)
        self.call_name = ""
        self.fresh = True  # the call's arguments start at ``args_start`` (set by the header step)

    def _call_start(self, name: str, call_id: str | None = None) -> int:
        self._reset()
        self.call_name = name
        return super()._call_start(name, call_id)

    def _param_schema(self, key: str) -> Any:
        props = self.schemas.get(self.call_name, {}).get("properties")
        return props.get(key) if isinstance(props, dict) else None

    def _close_call(self, pos: int) -> None:
        self._args(self.call_index, "}" if self.nparams else "{}")
        self.pos = pos
        self.state = _CONTENT if self.syntax.xml.call_close == self.syntax.close else _AFTER

    def _step_args(self, final: bool) -> bool:
        x, buf = self.syntax.xml, self.buf
        if self.fresh:
            self.pos, self.fresh = self.args_start, False
        if self.xs == "between":
            j = _ws_end(buf, self.pos)
            rest = buf[j:]
            if rest.startswith(x.param_open):
                self.pos, self.xs = j + len(x.param_open), "key"
                return True
            if rest.startswith(x.call_close):
                self._close_call(j + len(x.call_close))
                return True
            if not final and (x.param_open.startswith(rest) or x.call_close.startswith(rest)):
                return False
            self._close_call(j)  # anything else ends the call (what follows is handled after it)
            return True
        if self.xs == "key":
            k = buf.find(x.key_end, self.pos)
            if k < 0:
                if final or len(buf) - self.pos > HEADER_LIMIT:
                    self._close_call(len(buf) if final else self.pos)
                    return True
                return False
            key = buf[self.pos:k].strip()
            j = k + len(x.key_end)
            raw: bool | None = None  # the tag's own word on the value's type (value_attrs)
            if x.value_attrs is not None:
                m = x.value_attrs.match(buf, j)
                if m is None:
                    if not final and len(buf) - j <= HEADER_LIMIT and ">" not in buf[j:]:
                        return False  # the attributes may still be arriving
                    self._close_call(j)
                    return True
                kind = m.groupdict()
                raw = (kind["string"] == "true") if kind.get("string") else (kind.get("type") or "string") == "string"
                j = m.end()
            elif x.value_open:
                j2 = _ws_end(buf, j)
                rest = buf[j2:]
                if not rest.startswith(x.value_open):
                    if not final and x.value_open.startswith(rest):
                        return False
                    self._close_call(j2)
                    return True
                j = j2 + len(x.value_open)
            self.key, self.xs = key, "value"
            self.value_start = self.value_sent = self.pos = j
            self.lead_done = not (x.trim_newline or x.cdata)
            self.raw_value = raw
            # a nullable string waits for its closing tag: the word null is null (typed_value)
            schema = self._param_schema(key)
            self.stream_value = raw if raw is not None else is_string_param(schema) and "null" not in json_types(schema)
            if self.stream_value:
                self._args(self.call_index, ("{" if not self.nparams else ", ") + json.dumps(key, ensure_ascii=False)
                           + ': "')
            return True
        # value
        if not self.lead_done:
            if self.value_start >= len(buf) and not final:
                return False
            if x.trim_newline and buf.startswith("\n", self.value_start):
                self.value_start += 1
                self.value_sent = self.value_start
            if x.cdata:
                lead = buf[self.value_start:self.value_start + len(_CDATA)]
                if lead == _CDATA:
                    self.value_start += len(_CDATA)
                    self.value_sent = self.value_start
                    self.value_close = _CDATA_END + x.value_close
                elif not final and _CDATA.startswith(lead):
                    return False
            self.lead_done = True
        close = self.value_close or x.value_close
        c = buf.find(close, self.value_start)
        if c < 0 and not final:
            if self.stream_value:
                tails = ["\n" + close, close] if x.trim_newline else [close]
                safe = len(buf) - partial_suffix(buf[self.value_sent:], tails)
                if safe > self.value_sent:
                    self._args(self.call_index, _escaped(buf[self.value_sent:safe]))
                    self.value_sent = safe
            return False
        end = c if c >= 0 else len(buf)
        text_end = end - 1 if (x.trim_newline and c >= 0 and end > self.value_start
                               and buf[end - 1] == "\n") else end
        if self.stream_value:
            self._args(self.call_index, _escaped(buf[self.value_sent:text_end]) + '"')
        else:
            text = buf[self.value_start:text_end]
            value = typed_value(text, self._param_schema(self.key)) if self.raw_value is None else _json_or_text(text)
            self._args(self.call_index, ("{" if not self.nparams else ", ") + json.dumps(self.key, ensure_ascii=False)
                       + ": " + json.dumps(value, ensure_ascii=False))
        self.nparams += 1
        self.xs = "between"
        self.pos = end + len(close) if c >= 0 else end
        self.value_close = ""
        if c < 0:
            self._close_call(end)
        return True


_QWEN_XML = XmlArgs(param_open="<parameter=", key_end=">", value_open="", value_close="</parameter>",
                    call_close="</function>", trim_newline=True)

QWEN3_CODER = ToolSyntax(
    name="qwen3_coder",
    opens=("<tool_call>",),
    header=re.compile(r"\s*<function=(?P<name>[^>\n]+)>"),
    close="</tool_call>",
    xml=_QWEN_XML,
    scanner=XmlScanner,
    calls_end_thinking="prompt",  # Qwen3.5 / Nemotron 3 call tools in the thinking their prompt opened
    bare_call_open="<function=",  # Qwen3-Coder at times leaves out <tool_call>
)

#: Seed-OSS writes a value flush against its tags (``<parameter=KEY>VALUE</parameter>``, its template's own
#: example): a newline at either end is the value's (a file's last line), not layout as in Qwen3-Coder
SEED_OSS = ToolSyntax(
    name="seed_oss",
    opens=("<seed:tool_call>",),
    header=re.compile(r"\s*<function=(?P<name>[^>\n]+)>"),
    close="</seed:tool_call>",
    xml=attrs.evolve(_QWEN_XML, trim_newline=False),
    scanner=XmlScanner,
    think_tags=("<seed:think>", "</seed:think>"),
)

GLM_4_5 = ToolSyntax(
    name="glm_4_5",
    opens=("<tool_call>",),
    header=re.compile(r"\s*(?P<name>[^\s<>{}\[\]]+)\s*(?=<arg_key>|</tool_call>)"),
    close="</tool_call>",
    xml=XmlArgs(param_open="<arg_key>", key_end="</arg_key>", value_open="<arg_value>",
                value_close="</arg_value>", call_close="</tool_call>"),
    scanner=XmlScanner,
    calls_end_thinking="prompt",  # Ling 3 calls tools in the thinking its prompt opened
)

#: Ling 3 writes GLM's calls; its turns end with ``<|role_end|>``. llama.cpp's Ling 3 parser drops the thinking
#: tags, so with ``reasoning_format: none`` the prompt's ``<think>`` does not begin the content (GLM's generic
#: parser keeps it)
LING_3 = attrs.evolve(GLM_4_5, name="ling_3", keeps_prompt_opener=False)


class Hy3Scanner(XmlScanner):
    """:class:`XmlScanner` of Tencent Hy3, whose call may also carry its arguments as one JSON object after
    ``<tool_sep:opensource>`` (streamed as written, as the JSON-argument formats stream theirs)."""

    def _reset(self) -> None:
        super()._reset()
        self.json_body = False

    def _step_args(self, final: bool) -> bool:
        if self.fresh:
            j = _ws_end(self.buf, self.args_start)
            if j >= len(self.buf) and not final:
                return False  # the first character of the arguments decides their form
            if self.buf.startswith("{", j):
                self.fresh, self.json_body = False, True
                self.args_start = self.args_sent = j
        if self.json_body:
            return ToolScanner._step_args(self, final)
        return super()._step_args(final)


_HY = ":opensource"

HY3 = ToolSyntax(
    name="hy3",
    opens=(f"<tool_calls{_HY}>",),
    header=re.compile(rf"\s*(?:<tool_call{_HY}>)?\s*(?P<name>[^\s<>{{}}\[\]]+)\s*<tool_sep{_HY}>"),
    next_call=f"<tool_call{_HY}>",
    close=f"</tool_calls{_HY}>",
    xml=XmlArgs(param_open=f"<arg_key{_HY}>", key_end=f"</arg_key{_HY}>", value_open=f"<arg_value{_HY}>",
                value_close=f"</arg_value{_HY}>", call_close=f"</tool_call{_HY}>"),
    scanner=Hy3Scanner,
    think_tags=(f"<think{_HY}>", f"</think{_HY}>"),
    markers=(f"</tool_call{_HY}>", f"<end_of_tool_call{_HY}>"),
)

MINIMAX_M2 = ToolSyntax(
    name="minimax_m2",
    opens=("<minimax:tool_call>",),
    header=re.compile(r'\s*(?:<invoke )?name="(?P<name>[^"\n]+)">'),
    next_call="<invoke",
    close="</minimax:tool_call>",
    xml=XmlArgs(param_open='<parameter name="', key_end='">', value_open="", value_close="</parameter>",
                call_close="</invoke>"),
    scanner=XmlScanner,
)

#: DeepSeek's DSML parameter tag: ``string="true"`` raw text, ``"false"`` a JSON value
_DSML_XML = XmlArgs(param_open='<｜DSML｜parameter name="', key_end='"', value_open="",
                    value_close="</｜DSML｜parameter>", call_close="</｜DSML｜invoke>",
                    value_attrs=re.compile(r'\s+string="(?P<string>true|false)"\s*>'))
_DSML_HEADER = re.compile(r'\s*(?:<｜DSML｜invoke )?name="(?P<name>[^"\n]+)">')

DEEPSEEK_V3_2 = ToolSyntax(
    name="deepseek_v3_2",
    opens=("<｜DSML｜function_calls>",),
    header=_DSML_HEADER,
    next_call="<｜DSML｜invoke",
    close="</｜DSML｜function_calls>",
    xml=_DSML_XML,
    scanner=XmlScanner,
)

DEEPSEEK_V4 = attrs.evolve(DEEPSEEK_V3_2, name="deepseek_v4", opens=("<｜DSML｜tool_calls>",),
                           close="</｜DSML｜tool_calls>", calls_end_thinking="prompt")

KIMI_K3 = ToolSyntax(
    name="kimi_k3",
    opens=("<|open|>tools<|sep|>",),
    header=re.compile(r'\s*(?:<\|open\|>call )?tool="(?P<name>[^"\n]+)"(?:\s+index="\d+")?<\|sep\|>'),
    next_call="<|open|>call",
    close="<|close|>tools<|sep|>",
    xml=XmlArgs(param_open='<|open|>argument key="', key_end='"', value_open="",
                value_close="<|close|>argument<|sep|>", call_close="<|close|>call<|sep|>",
                value_attrs=re.compile(r'(?:\s+type="(?P<type>\w+)")?\s*<\|sep\|>')),
    scanner=XmlScanner,
    think_tags=("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    keeps_prompt_opener=False,  # llama.cpp's Kimi K3 parser drops its thinking tags
    # the response section's tags, and the message's closing tag that ends the turn (its template writes it)
    drop=("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"),
)

MINICPM5 = ToolSyntax(
    name="minicpm5",
    opens=('<function name="',),
    header=re.compile(r'(?:<function name=")?(?P<name>[^"\n]+)">'),  # the opener is matched again at a next call
    next_call='<function name="',
    close=None,
    xml=XmlArgs(param_open='<param name="', key_end='">', value_open="", value_close="</param>",
                call_close="</function>", cdata=True),
    scanner=XmlScanner,
)
