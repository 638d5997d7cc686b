"""The shared streaming core of every chat format (sans-IO).

One parser, configured per format by a :class:`ToolSyntax`, does all the
work: reasoning split (``<think>...</think>``), marker hold-back, tool-call
header recognition, argument streaming and content whitespace rules.

Pipeline for one generation::

    text pieces -> _ReasoningSplitter -> (reasoning deltas)
                                     \\-> ToolScanner -> (content, tool-call deltas)
                -> ChatParser records every delta; finish() builds the message
                   from the recorded deltas, so streamed == final by construction.

Tool calls. A *section* opens at one of ``syntax.opens`` (or at the start of
the output when ``syntax.at_start``). Inside it, ``syntax.header`` (a regex
anchored at the call start, group ``name``) must match up to the first
``{`` of the arguments; the arguments are then the raw JSON object text the
model wrote, streamed as it arrives and ended where
``json.JSONDecoder.raw_decode`` completes the object (or at the longest
prefix ``partial_json_parser`` accepts, if the model writes malformed JSON).
After the arguments, everything up to ``syntax.close`` is swallowed, or a
``syntax.next_call`` marker starts another call of the same section.
A section whose header never matches (or names a tool the request does not
allow) is given back verbatim as content. For JSON-object wrappers with an
unexpected key order the whole object is parsed once complete (same result
whatever the split, since the header regex always wins when it can match).

Every decision depends only on the text seen so far, never on how it was
split, which is what makes streamed and non-streamed results identical.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import attrs
import partial_json_parser

from skippy.engine.chat.formats.base import Delta, IdFactory, ParsedMessage, ToolCall, ToolCallDelta, new_call_id
from skippy.engine.output.textstream import partial_suffix


class _TooDeep(json.JSONDecodeError):
    """A JSON value nested past Python's recursion limit."""


class _Decoder(json.JSONDecoder):
    """``json.JSONDecoder`` for model output: raw newlines inside strings are taken (``strict=False``: models
    write them), and a value nested past Python's recursion limit is a ``JSONDecodeError`` (malformed output:
    the text stays content) instead of the ``RecursionError`` that would end the reply with a 500."""

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        try:
            return super().raw_decode(s, idx)
        except RecursionError:
            raise _TooDeep("nested too deeply", s, idx) from None


JSON_DECODER = _Decoder(strict=False)
_CTRL = {i: " " for i in range(32)}
_WS = re.compile(r"\s*")
HEADER_LIMIT = 512  # chars a non-JSON call header may take before it is given up as content


def _ws_end(buf: str, pos: int) -> int:
    """Where the whitespace at ``buf[pos:]`` ends (``pos`` when there is none)."""
    m = _WS.match(buf, pos)
    assert m is not None  # \s* matches everywhere
    return m.end()


# ---------------------------------------------------------------- JSON helpers

def _is_valid_prefix(text: str) -> bool:
    """True if ``text`` can still grow into valid JSON (partial_json_parser)."""
    try:
        partial_json_parser.loads(text.translate(_CTRL))
        return True
    except Exception:  # MalformedJSON, JSONDecodeError, partial-parser internals
        return False


def scan_json(text: str, start: int) -> tuple[str, int]:
    """Scan the JSON value at ``text[start]``.

    Returns ``("complete", end)``, ``("partial", len(text))`` (a valid prefix
    that may still complete) or ``("malformed", end)`` where ``end`` is the
    end of the longest valid prefix; a value nested past Python's recursion limit is malformed from
    ``start`` (nothing of it is taken).
    """
    try:
        _, end = JSON_DECODER.raw_decode(text, start)
        return "complete", end
    except _TooDeep:
        return "malformed", start
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text) or exc.msg.startswith("Unterminated string"):
            return "partial", len(text)
    if _is_valid_prefix(text[start:]):
        return "partial", len(text)
    lo, hi = start, len(text)  # lo valid (empty prefix), hi invalid; validity is monotone
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _is_valid_prefix(text[start:mid]):
            lo = mid
        else:
            hi = mid
    return "malformed", lo


def find_first(text: str, markers: Iterable[str], start: int = 0) -> tuple[int, str]:
    """Earliest occurrence ``(index, marker)`` of any marker, or ``(-1, "")``."""
    best, found = -1, ""
    for marker in markers:
        i = text.find(marker, start)
        if i >= 0 and (best < 0 or i < best):
            best, found = i, marker
    return best, found


# ---------------------------------------------------------------- configuration

JSON_STR = r'"(?P<name>(?:[^"\\]|\\.)*)"'


@attrs.frozen
class ToolSyntax:
    """How one chat format writes tool calls (see the module docstring).

    ``header`` group ``name`` is the tool name (JSON string body when
    ``name_json``); a matched group ``id`` is the model's own call id, kept
    as the OpenAI id (Kimi K2 ``functions.NAME:IDX``); a matched group
    ``content`` instead marks a content segment (Functionary ``all``). ``wrapper`` = (name keys, argument keys)
    when a call is one JSON object, enabling the whole-object fallback;
    ``json_lead`` characters (e.g. ``[``) may precede that object.
    """

    name: str
    opens: tuple[str, ...] = ()
    header: re.Pattern[str] | None = None
    name_json: bool = False
    at_start: bool = False
    next_call: str | None = None
    close: str | None = None
    wrapper: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    json_lead: str = ""
    drop: tuple[str, ...] = ()
    header_fail: re.Pattern[str] | None = None
    keep_when_tools_off: bool = False
    think_tags: tuple[str, str] = ("<think>", "</think>")
    #: the text that opens a thinking block after the generation prompt where the family's template writes no
    #: such tag itself (llama.cpp's parser of the family writes it to continue a prefilled reasoning: Kimi K2's
    #: ``<think>``, gpt-oss's analysis channel); ``""``: the opening think tag, where the template writes it
    #: (:func:`~skippy.engine.chat.continuation.family_opener`)
    reasoning_opener: str = ""
    scanner: Any = None  # a class replacing ToolScanner (same constructor), e.g. the generic format
    xml: Any = None  # XML-style arguments (:class:`skippy.engine.chat.formats.xml.XmlArgs`), read by its scanner
    own_reasoning: bool = False  # the scanner splits reasoning itself (gpt-oss channels)
    #: a call's opener ends an unclosed thinking block: ``"prompt"`` one the generation prompt opened,
    #: ``"any"`` one the model opened too; ``""`` never (the opener is reasoning text until the closing tag)
    calls_end_thinking: str = ""
    #: the channel opener that the thinking tag starts with (Gemma 4's ``<|channel>`` of ``<|channel>thought``):
    #: where set, thinking blocks after the reply are reasoning too, extra openers before a block are skipped
    #: and a closing tag that no block opened is dropped (llama.cpp's Gemma 4 parser)
    think_channel: str = ""
    markers: tuple[str, ...] = ()  # more marker strings the output may hold, taken whole (see :func:`syntax_markers`)
    #: Qwen3-Coder's ``<function=``: a model that does not think (its template has no thinking block) at times
    #: leaves out the section's opener, so a call may also start at this text followed by an allowed tool's
    #: name and ``>`` (``<function=NAME>``: the tools' own names only, so ``#include <functional>`` stays
    #: text), as llama.cpp's Qwen3-Coder parser reads it; :class:`ChatParser` drops it for a thinking model
    bare_call_open: str = ""
    #: with ``reasoning_format: none``, the thinking tag the generation prompt opened (``<think>\\n``) begins
    #: ``content``, so the raw reply shows where its thinking began: llama.cpp parses the generation prompt and
    #: the output as one text, the tag included; false where its parser drops the thinking tags (Kimi K3, and
    #: Ling 3 of the GLM syntax)
    keeps_prompt_opener: bool = True
    #: the thinking opener the generation prompt wrote is reasoning text itself, so ``reasoning_content`` begins
    #: with it where reasoning is split (Apriel 1.6's ``Here are my reasoning steps:``, as llama.cpp reads it)
    opener_in_reasoning: bool = False

    def tools_off(self) -> ToolSyntax:
        if self.keep_when_tools_off:
            return self
        return attrs.evolve(self, opens=(), at_start=False)


CONTENT_ONLY = ToolSyntax(name="content_only")

#: marker-like strings: ``<|name|>``, ``[NAME]`` / ``[/NAME]``, ``<name>`` / ``</name>``, DeepSeek's full-width
#: ``<｜tool▁calls▁begin｜>`` / ``<｜DSML｜invoke``, Gemma 4's one-sided ``<|tool_call>`` / ``<tool_call|>``, and the
#: start of an XML tag with attributes (``<function`` of ``<function name="...">``)
_MARKER = re.compile(r'<\|[^|<>\s]+\|>|<\|[A-Za-z_]+>|<[A-Za-z_]+\|>|\[/?[A-Z_]+\]|</?[A-Za-z_:]+>|</?｜[\w｜▁]+>?'
                     r'|<[A-Za-z_][\w:]*(?=\s+\w+=")')


def syntax_markers(syntax: ToolSyntax) -> tuple[str, ...]:
    """The marker strings ``syntax`` reads in generated text (its openers, closers, dropped and thinking
    tags, the literal markers of its header regexes, and ``markers``), in order, without repeats; an opener
    that is not one marker is one too, whole (a token limit that cuts it cuts syntax, never text).

    Where one of them is a single control token of the vocabulary, llama.cpp renders it as nothing unless
    asked for its special text; llama-server keeps such ``preserved_tokens`` of the chat format in the
    output so its parser sees them, and so must we (see :class:`~skippy.engine.output.generation.Generation`'s
    ``piece``).
    """
    texts = [*syntax.opens, syntax.next_call or "", syntax.close or "", *syntax.drop, *syntax.think_tags,
             *syntax.markers]
    if syntax.xml is not None:
        texts += [str(v) for v in attrs.astuple(syntax.xml) if isinstance(v, str)]
    for pattern in (syntax.header, syntax.header_fail):
        if pattern is not None:
            texts.append(re.sub(r"\\(.)", r"\1", re.sub(r"\(\?P<\w+>", "(", pattern.pattern)))
    found = [m for text in texts for m in _MARKER.findall(text)]
    # an opener holding a marker is syntax as a whole (GigaChat 3's ``function call<|role_sep|>``), and so is one
    # of plain text (Command R+'s ``Action:``, Firefunction's ``functools[``, Functionary's ``>>>``); so are the
    # syntax's own ``markers`` (Muse Glimmer's `` to=`` and ``<atem:invoke``)
    found += [o for o in (*syntax.opens, *syntax.markers) if not _MARKER.fullmatch(o)]
    return tuple(dict.fromkeys(found))


def json_wrapper_header(name_key: str, args_keys: str, prefix: str = "", lead: str = "") -> re.Pattern[str]:
    """Header regex for ``{<prefix>"<name_key>": "<name>", "<args_key>": {`` (args start not consumed)."""
    return re.compile(
        rf'\s*{lead}\s*\{{\s*{prefix}"{name_key}"\s*:\s*{JSON_STR}\s*,\s*"(?:{args_keys})"\s*:\s*(?=\{{)', re.S)


# ---------------------------------------------------------------- whitespace sink

class _Sink:
    """Whitespace rules for a text stream: optional leading-space skip, trailing space held."""

    def __init__(self, skip_leading: bool) -> None:
        self.skip = skip_leading
        self.pending = ""

    def push(self, text: str) -> str:
        if self.skip:
            text = text.lstrip()
            if not text:
                return ""
            self.skip = False
        body = text.rstrip()
        if not body:
            self.pending += text
            return ""
        out = self.pending + body
        self.pending = text[len(body):]
        return out

    def cut(self, skip_after: bool = True) -> None:
        """A tool call or tag interrupts the text: drop held space, skip the next leading space."""
        self.pending = ""
        self.skip = skip_after


# ---------------------------------------------------------------- tool scanner

_CONTENT, _HEADER, _ARGS, _AFTER = range(4)


class ToolScanner:
    """Content + tool calls of the (reasoning-free) text; see module docstring."""

    def __init__(self, syntax: ToolSyntax, allowed: set[str] | None, parallel: bool,
                 id_factory: IdFactory, schemas: dict[str, dict[str, Any]] | None = None) -> None:
        self.syntax = syntax
        self.schemas = schemas or {}  # tool name -> its parameters JSON schema (typed XML arguments)
        self.allowed = allowed or set()
        self.parallel = parallel
        self.id_factory = id_factory
        self.buf = ""
        self.pos = 0
        self.state = _HEADER if syntax.at_start else _CONTENT
        self.held = self.resume = 0
        self.sink = _Sink(skip_leading=False)
        self.ncalls = 0
        self.call_index = -1  # index of the call whose arguments stream (-1: suppressed)
        self.args_start = self.args_sent = 0
        self.out: list[Delta] = []
        #: a call's whole opening text where the section's opener is left out (:attr:`ToolSyntax.bare_call_open`)
        self.bare = tuple(f"{syntax.bare_call_open}{name}>" for name in sorted(self.allowed)) \
            if syntax.bare_call_open else ()
        self.markers = syntax.opens + syntax.drop + self.bare

    # -- emit helpers
    def _content(self, text: str) -> None:
        text = self.sink.push(text)
        if text:
            self.out.append(Delta(content=text))

    def _call_start(self, name: str, call_id: str | None = None) -> int:
        """Start a call; returns its index or -1 when suppressed (parallel_tool_calls false)."""
        if not self.parallel and self.ncalls >= 1:
            return -1
        index = self.ncalls
        self.ncalls += 1
        self.sink.cut()
        self.out.append(Delta(tool_calls=(ToolCallDelta(index=index, id=call_id or self.id_factory(), name=name),)))
        return index

    def _args(self, index: int, text: str) -> None:
        if index >= 0 and text:
            self.out.append(Delta(tool_calls=(ToolCallDelta(index=index, arguments=text),)))

    def _fail(self) -> None:
        """The section is not a tool call: give its opening text back as content."""
        self._content(self.buf[self.held:self.resume])
        self.pos = self.resume
        self.state = _CONTENT

    # -- driver
    def feed(self, text: str, final: bool = False) -> list[Delta]:
        self.buf += text
        while self._step(final):
            pass
        if self.pos > 4096 and self.state == _CONTENT:
            self.buf, self.pos = self.buf[self.pos:], 0
        out, self.out = self.out, []
        return out

    def _step(self, final: bool) -> bool:
        return (self._step_content, self._step_header, self._step_args, self._step_after)[self.state](final)

    def _step_content(self, final: bool) -> bool:
        buf, pos = self.buf, self.pos
        i, marker = find_first(buf, self.markers, pos)
        if i < 0:
            end = len(buf) if final else len(buf) - partial_suffix(buf[pos:], self.markers)
            if end > pos:
                self._content(buf[pos:end])
                self.pos = end
            return False
        self._content(buf[pos:i])
        self.pos = i + len(marker)
        if marker in self.syntax.opens:
            self.held, self.resume, self.state = i, self.pos, _HEADER
        elif marker in self.bare:  # the call's header is read from its own opening text
            self.held, self.resume, self.pos, self.state = i, self.pos, i, _HEADER
        return True

    def _step_header(self, final: bool) -> bool:
        syn, buf, pos = self.syntax, self.buf, self.pos
        m = syn.header.match(buf, pos) if syn.header is not None else None
        if m is not None:
            if m.groupdict().get("content") is not None:
                self.pos, self.state = m.end(), _CONTENT
                return True
            name = m.group("name")
            if syn.name_json:
                try:
                    name = json.loads(f'"{name}"')
                except ValueError:
                    name = None
            if name not in self.allowed:
                self._fail()
                return True
            self.call_index = self._call_start(name, m.groupdict().get("id"))
            self.args_start = self.args_sent = m.end()
            self.state = _ARGS
            return True
        if syn.wrapper is not None:
            j = _ws_end(buf, pos)
            while j < len(buf) and buf[j] in syn.json_lead:
                j = _ws_end(buf, j + 1)
            if j >= len(buf):
                if final:
                    self._fail()
                return final
            if buf[j] != "{":
                self._fail()
                return True
            status, end = scan_json(buf, j)
            if status == "complete" and self._whole_call(JSON_DECODER.decode(buf[j:end])):
                self.pos, self.state = end, _AFTER
                return True
            if status != "partial" or final:
                self._fail()
                return True
            return False
        too_long = len(buf) - pos > HEADER_LIMIT
        closed = syn.close is not None and syn.close in buf[pos:]
        bad = syn.header_fail is not None and syn.header_fail.search(buf, pos) is not None
        if final or too_long or closed or bad:
            self._fail()
            return True
        return False

    def _whole_call(self, obj: Any) -> bool:
        """Fallback for a complete JSON call object whose keys the header regex did not match."""
        assert self.syntax.wrapper is not None  # _step_header calls this only for a syntax with one
        name_keys, args_keys = self.syntax.wrapper
        if not isinstance(obj, dict):
            return False
        name = next((obj[k] for k in name_keys if isinstance(obj.get(k), str)), None)
        if name is None or name not in self.allowed:
            return False
        args: Any = next((obj[k] for k in args_keys if k in obj), {})
        if isinstance(args, str):
            try:
                if not isinstance(JSON_DECODER.decode(args), dict):
                    return False
            except ValueError:
                return False
            text = args
        elif isinstance(args, dict):
            text = json.dumps(args, ensure_ascii=False)
        else:
            return False
        index = self._call_start(name)
        self._args(index, text)
        return True

    def _step_args(self, final: bool) -> bool:
        buf, start = self.buf, self.args_start
        status, end = scan_json(buf, start)
        self._args(self.call_index, buf[self.args_sent:end])
        self.args_sent = end
        if status == "partial" and not final:
            return False
        self.pos, self.state = end, _AFTER
        return True

    def _step_after(self, final: bool) -> bool:
        syn, buf = self.syntax, self.buf
        if syn.close is None and syn.next_call is None:
            self.state = _CONTENT
            return True
        stops = [m for m in (syn.next_call, syn.close) if m] + list(syn.opens)
        i, marker = find_first(buf, stops, self.pos)
        if i < 0:
            if final:
                self.pos = len(buf)
            return False
        if marker == syn.next_call:
            self.pos = self.held = i
            self.resume, self.state = i + len(marker), _HEADER
        elif marker == syn.close:
            self.pos, self.state = i + len(marker), _CONTENT
        else:
            self.pos, self.state = i, _CONTENT
        return True

    def finish(self) -> list[Delta]:
        out = self.feed("", final=True)
        if self.ncalls:
            self.sink.pending = ""
        elif self.sink.pending:
            out.append(Delta(content=self.sink.pending))
            self.sink.pending = ""
        return out

    def skip_leading_space(self) -> None:
        self.sink.skip = True


# ---------------------------------------------------------------- reasoning

REASONING_FORMATS = ("auto", "none", "deepseek", "deepseek-legacy", "hidden")


class _ReasoningSplitter:
    """Split ``<think>...</think>`` (at the start of the output) from the rest.

    ``reasoning_format`` (llama.cpp ``--reasoning-format``): ``auto`` and
    ``deepseek`` put the thoughts in ``reasoning_content``; ``none`` leaves the
    raw text (tags included) in ``content``; ``deepseek-legacy`` does both;
    ``hidden`` parses and drops them. With ``forced_open`` (the generation
    prompt already opened the tag) the output starts inside reasoning. An
    unclosed block at the end is all reasoning. ``call_opens``: the openers of
    a tool call that end a block left unclosed (the model calls a tool
    without closing its thinking, as llama.cpp reads these families: see
    :attr:`ToolSyntax.calls_end_thinking`). ``channel``: see
    :attr:`ToolSyntax.think_channel` (blocks after the reply, stray tags). ``opener``: the text with which
    the prompt opened the block (``forced_open``); ``deepseek-legacy``'s content begins with it, so its tags
    are balanced as the model's own would be.
    """

    def __init__(self, inner: ToolScanner, mode: str, forced_open: bool,
                 tags: tuple[str, str], call_opens: tuple[str, ...] = (), channel: str = "",
                 opener: str = "") -> None:
        self.inner = inner
        self.mode = mode
        self.legacy = mode == "deepseek-legacy"  # the raw text also goes to content, unchanged
        self.lead = (opener or tags[0]) if self.legacy and forced_open else ""  # legacy content's first text
        self.open, self.close = tags
        self.ends = (self.close, *call_opens)
        self.channel = channel
        self.state = "off" if mode == "none" else ("think" if forced_open else "start")
        self.buf = ""
        self.sink = _Sink(skip_leading=True)

    def _reason(self, text: str, out: list[Delta]) -> None:
        text = self.sink.push(text)
        if text and self.mode != "hidden":
            out.append(Delta(reasoning_content=text))

    def _reply(self, text: str, final: bool, out: list[Delta]) -> None:
        if not self.legacy:  # (legacy: the scanner had the raw text already)
            out += self.inner.feed(text, final)

    def _past_strays(self, text: str) -> str:
        """``text`` less the stray channel openers at its start that are not the thinking tag's own
        (Gemma 4's ``<|channel><|channel>thought``: llama.cpp's ``consume_empty_channels``)."""
        while self.channel and text.startswith(self.channel) and not self.open.startswith(text[:len(self.open)]):
            text = text[len(self.channel):]
        return text

    def feed(self, text: str, final: bool = False) -> list[Delta]:
        if self.state == "off":
            return self.inner.feed(text, final)
        out: list[Delta] = []
        if self.legacy:
            out += self.inner.feed(self.lead + text, final)
            self.lead = ""
        self.buf += text
        while {"start": self._step_start, "think": self._step_think, "content": self._step_content}[self.state](
                final, out):
            pass
        return out

    def _step_start(self, final: bool, out: list[Delta]) -> bool:
        stripped = self._past_strays(self.buf.lstrip())
        if stripped.startswith(self.open):
            self.buf = stripped[len(self.open):]
            self.state = "think"
            return True
        if self.open.startswith(stripped) and not final:
            return False
        self.state = "content"
        return True

    def _step_think(self, final: bool, out: list[Delta]) -> bool:
        i, end = find_first(self.buf, self.ends)
        if i < 0:
            keep = 0 if final else partial_suffix(self.buf, list(self.ends))
            self._reason(self.buf[:len(self.buf) - keep], out)
            self.buf = self.buf[len(self.buf) - keep:]
            return False
        self._reason(self.buf[:i], out)
        self.sink.cut()
        self.buf = self.buf[i + len(self.close):] if end == self.close else self.buf[i:]
        self.state = "content"
        if not self.legacy:
            self.inner.skip_leading_space()
        return True

    def _step_content(self, final: bool, out: list[Delta]) -> bool:
        """The reply. With a ``channel`` it is read on for thinking blocks and stray tags, as llama.cpp's
        Gemma 4 parser reads them: a block after the reply is reasoning too, a closing tag no block opened
        is dropped (llama.cpp stops reading there; we keep what follows), and a channel opener that
        starts no block is reply text."""
        buf = self.buf
        if not self.channel:
            self.buf = ""
            self._reply(buf, final, out)
            return False
        i, tag = find_first(buf, (self.channel, self.close))
        if i < 0:
            keep = 0 if final else partial_suffix(buf, [self.channel, self.close])
            self._reply(buf[:len(buf) - keep], final, out)
            self.buf = buf[len(buf) - keep:]
            return False
        self._reply(buf[:i], False, out)
        rest = buf[i:]
        if tag == self.close:
            self.buf = rest[len(self.close):]
            return True
        block = self._past_strays(rest)
        if block.startswith(self.open):
            self.buf, self.state = block[len(self.open):], "think"
            return True
        if self.open.startswith(block) and not final:
            self.buf = rest
            return False
        self._reply(rest[:len(self.channel)], False, out)
        self.buf = rest[len(self.channel):]
        return True

    def finish(self) -> list[Delta]:
        out = self.feed("", final=True) if self.state != "off" else []
        return out + self.inner.finish()


# ---------------------------------------------------------------- the parser

class ChatParser:
    """A :class:`~skippy.engine.chat.formats.base.StreamParser` for one generation.

    Records every delta it returns; :meth:`finish` builds the
    :class:`ParsedMessage` from them, so the concatenation of streamed
    deltas equals the final message field by field, byte for byte.
    ``prefill_reasoning``: the reasoning of a continued assistant message, which the prompt ends inside
    (with ``thinking_forced_open``): read before the output, so it begins ``reasoning_content``, streamed
    with the first piece, as llama.cpp parses the generation prompt and the output as one text.
    """

    def __init__(self, syntax: ToolSyntax = CONTENT_ONLY, *, reasoning_format: str = "auto",
                 thinking_forced_open: bool = False, thinking_opener: str = "", allowed_tools: set[str] | None = None,
                 parallel_tool_calls: bool = True, id_factory: IdFactory = new_call_id,
                 tool_schemas: dict[str, dict[str, Any]] | None = None, supports_thinking: bool = True,
                 prefill_reasoning: str = "") -> None:
        if reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"unknown reasoning_format {reasoning_format!r}")
        allowed = set(allowed_tools or ())
        if not allowed:
            syntax = syntax.tools_off()
        if supports_thinking and syntax.bare_call_open:  # a workaround for models that do not think only
            syntax = attrs.evolve(syntax, bare_call_open="")
        own = syntax.own_reasoning
        cls = syntax.scanner if (syntax.scanner is not None and (allowed or own)) else ToolScanner
        scanner: Any = cls(syntax, allowed, parallel_tool_calls, id_factory, tool_schemas)  # or the syntax's own
        if own:
            scanner.reasoning_format = reasoning_format
        ends_thinking = syntax.calls_end_thinking == "any" or (thinking_forced_open and syntax.calls_end_thinking)
        self._top = _ReasoningSplitter(scanner, "none" if own else reasoning_format, thinking_forced_open,
                                       syntax.think_tags, syntax.opens if allowed and ends_thinking else (),
                                       syntax.think_channel, thinking_opener)
        self._markers = syntax_markers(syntax)
        if syntax.at_start and allowed:  # a call's header with no opener (Functionary v3.2's recipient): a tool's name
            self._markers += tuple(f"{name}\n" for name in sorted(allowed))
        #: text that begins the output as the parser reads it, given with the first piece: the prompt's thinking
        #: opener (see :attr:`ToolSyntax.keeps_prompt_opener` and :attr:`ToolSyntax.opener_in_reasoning`; for a
        #: format that reads its channels from the text, gpt-oss's, the one a continued reasoning opened), then the
        #: prefilled reasoning the prompt continues (which alone begins the reasoning: llama.cpp's continuation)
        keep = thinking_forced_open and ((syntax.keeps_prompt_opener if reasoning_format == "none"
                                          else syntax.opener_in_reasoning and not prefill_reasoning) or own)
        self._lead = (thinking_opener if keep else "") + prefill_reasoning
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[list[Any]] = []  # [id, name, [fragments]]
        self._done = False

    def _record(self, deltas: list[Delta]) -> list[Delta]:
        merged: list[Delta] = []
        for d in deltas:
            if d.content:
                self._content.append(d.content)
            if d.reasoning_content:
                self._reasoning.append(d.reasoning_content)
            for tc in d.tool_calls:
                if tc.id is not None:
                    self._calls.append([tc.id, tc.name, []])
                self._calls[tc.index][2].append(tc.arguments)
            merged.append(d)
        return _coalesce(merged)

    def feed(self, text: str) -> list[Delta]:
        if self._done:
            raise RuntimeError("feed() after finish()")
        if text and self._lead:
            text, self._lead = self._lead + text, ""
        return self._record(self._top.feed(text)) if text else []

    def finish(self, *, truncated: bool = False) -> tuple[list[Delta], ParsedMessage]:
        """See :meth:`StreamParser.finish`. With ``truncated``, held-back text that holds the format's
        syntax (a marker or the start of one: a call the limit cut) is dropped, while other held text
        (trailing space, a reply that is all space) is given back as usual; and a call whose
        arguments were not a complete JSON object before the end is left out of the message."""
        lead, self._lead = self._lead, ""
        first = self._record(self._top.feed(lead)) if lead else []  # an output with no text at all
        self._done = True
        if truncated:  # whole: the call's arguments closed in the text, not by the end's flush
            whole = [_complete_object("".join(a)) for _, _, a in self._calls]
            deltas: list[Delta] = self._record(_without_cut_syntax(self._top.finish(), self._markers))
            calls = tuple(ToolCall(id=i, name=n, arguments="".join(a)) for k, (i, n, a) in enumerate(self._calls)
                          if k < len(whole) and whole[k])
        else:
            deltas = self._record(self._top.finish())
            # a call cut off before its arguments started gets "{}" (streamed too, so both agree)
            deltas += self._record([Delta(tool_calls=(ToolCallDelta(index=index, arguments="{}"),))
                                    for index, (_, _, frags) in enumerate(self._calls) if not "".join(frags)])
            calls = tuple(ToolCall(id=i, name=n, arguments="".join(a)) for i, n, a in self._calls)
        return first + deltas, ParsedMessage(content="".join(self._content),
                                     reasoning_content="".join(self._reasoning), tool_calls=calls)


def _without_cut_syntax(deltas: list[Delta], markers: tuple[str, ...]) -> list[Delta]:
    """``deltas`` (what the end of the text flushed) with their content cut where it reaches one of
    ``markers`` or ends in the start of one: that is syntax the token limit cut, never the reply's text;
    the text before it stays."""
    text = "".join(d.content for d in deltas)
    i, _ = find_first(text, markers)
    room = i if i >= 0 else len(text) - partial_suffix(text, markers)
    if room >= len(text):
        return deltas
    kept = []
    for d in deltas:
        content, room = d.content[:max(room, 0)], room - len(d.content)
        kept.append(Delta(content=content, reasoning_content=d.reasoning_content, tool_calls=d.tool_calls))
    return [d for d in kept if not d.is_empty()]


def _complete_object(text: str) -> bool:
    """True if ``text`` is one whole JSON object (a call's finished arguments)."""
    try:
        return isinstance(JSON_DECODER.decode(text), dict)
    except ValueError:
        return False


def _coalesce(deltas: list[Delta]) -> list[Delta]:
    """Merge adjacent deltas of the same kind (content, reasoning, one call's argument fragments;
    a call's first delta keeps only index, id and name)."""
    out: list[Delta] = []
    for d in deltas:
        if out:
            last = out[-1]
            if d.content and not (d.reasoning_content or d.tool_calls) and last.content \
                    and not (last.reasoning_content or last.tool_calls):
                out[-1] = Delta(content=last.content + d.content)
                continue
            if d.reasoning_content and not (d.content or d.tool_calls) and last.reasoning_content \
                    and not (last.content or last.tool_calls):
                out[-1] = Delta(reasoning_content=last.reasoning_content + d.reasoning_content)
                continue
            if (len(d.tool_calls) == 1 and not d.content and not d.reasoning_content
                    and len(last.tool_calls) == 1 and not last.content and not last.reasoning_content
                    and d.tool_calls[0].id is None and last.tool_calls[0].id is None
                    and d.tool_calls[0].index == last.tool_calls[0].index):
                lt = last.tool_calls[0]
                out[-1] = Delta(tool_calls=(attrs.evolve(lt, arguments=lt.arguments + d.tool_calls[0].arguments),))
                continue
        out.append(d)
    return out
