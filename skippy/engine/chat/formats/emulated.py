"""Parser of the emulated ``TOOL_CALL`` convention (sans-IO).

Output convention (see :mod:`skippy.engine.chat.emulation`)::

    Let me check.
    TOOL_CALL {"name": "get_weather", "arguments": {"city": "Paris"}}

Rules:

- ``<think>...</think>`` spans are removed first and become
  ``reasoning_content`` (an unterminated ``<think>`` makes the rest
  reasoning); a ``TOOL_CALL`` inside them is not a call.
- A call is the marker ``TOOL_CALL`` anywhere in the text, an optional
  ``:``, then one JSON object ``{"name": ..., "arguments": {...}}`` (keys in
  any order, unknown keys ignored, whitespace and newlines allowed). The
  scanner is string- and escape-aware and validates JSON as it goes.
- A call whose name is not in ``allowed_tools``, or whose JSON is malformed
  before the call was announced, stays in ``content`` verbatim.
- With ``parallel_tool_calls=False`` only the first call is kept; later
  well-formed calls are dropped (the early stop normally prevents them).
- ``content`` and ``reasoning_content`` are stripped of leading and
  trailing whitespace.

Streaming: any text that may be the start of the marker (``T``, ``TOOL_``,
``TOOL_CA``...) or of ``<think>`` is held back, and so is a call until it is
*announced*: once the ``name`` string is complete and allowed and the
``arguments`` object has begun. From then on the arguments are streamed as
their verbatim source text, up to the last *safe cut*: a point where the
text so far plus closing characters (``"``, ``}``, ``]``) is valid JSON
(after ``{``/``[``, after a complete value, inside a value string outside
an escape). The final ``arguments`` is the verbatim source of the object,
so the streamed fragments equal it byte for byte.

An announced call cannot be taken back. If its JSON then turns out
malformed, or the text ends first (``max_tokens``), the call is kept with
the arguments streamed so far plus the closers of the last safe cut
(valid JSON; e.g. ``{"city": "Par`` -> ``{"city": "Par"}``); the
unparseable rest of that line is dropped. Under a grammar (``required``, a
named tool, or the lazy ``auto`` grammar) only truncation can cause this.

The JSON scanner (:class:`_JsonValue`) is hand-written, although the
project depends on partial-json-parser (the native formats' core asks it
whether a prefix may still become JSON) and llguidance. The arguments must
stream as their exact source text, with known safe cuts, and the call ends
at its closing brace with text after it, and partial-json-parser gives
neither: it completes a prefix into a value (``fix_fast`` -> head + closers)
but cannot say where a value ends in a stream (``{"a": 1} Done.`` raises),
so each piece would also need a ``json.raw_decode``; it rescans the whole
prefix at every piece (quadratic over a call: a 16,000-character argument
fed in 4-character pieces takes about 15.6 s of partial-json-parser and
``raw_decode`` work, against 0.15 s for this whole parser), and it is more
lenient than RFC 8259 (``NaN`` and ``Infinity`` pass; ``{"a": 1}}``
raises IndexError), while a malformed call must stay content. llguidance
matches token ids against a grammar to constrain sampling; it does not scan
text. This automaton reads each character once, validates as it goes and
records the safe cut.
Known limit: ``<think>`` is removed before calls are parsed, so a literal
``<think>`` inside a call's string argument breaks that call.

With ``withhold=True`` (what the server uses) a call is announced only
once its object closes, with its whole arguments in one delta, so a call
that never completes is never sent: a call cut off by the end of the text
(``max_tokens``) is dropped, and the text of a call candidate that is
malformed or names a tool not in ``allowed_tools`` is dropped to the end of
its line. Emulation syntax then never reaches ``content`` while calls may
be made. (Where none may be, the server does not use this parser: such text
is plain content.) Agents that accumulate streamed fragments and parse
partial JSON would otherwise run a truncated call.

Ids are minted once per call with ``id_factory`` (``call_`` + 24 hex
chars) at announcement, so streaming and the final message agree.
"""

from __future__ import annotations

import json
import re

from skippy.engine.chat.formats.base import Delta, IdFactory, ParsedMessage, ToolCall, ToolCallDelta, new_call_id
from skippy.engine.output.textstream import partial_suffix

MARKER = "TOOL_CALL"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_WS = " \t\r\n"
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_HEX = set("0123456789abcdefABCDEF")
_LITERALS = {"t": "true", "f": "false", "n": "null"}


class _Trim:
    """Streams a text channel with leading and trailing whitespace removed
    (trailing whitespace is held until more text follows)."""

    def __init__(self) -> None:
        self.started = False
        self.pending = ""
        self.parts: list[str] = []

    def push(self, s: str) -> str:
        if not self.started:
            s = s.lstrip()
            if not s:
                return ""
            self.started = True
        s = self.pending + s
        out = s.rstrip()
        self.pending = s[len(out):]
        if out:
            self.parts.append(out)
        return out

    def text(self) -> str:
        return "".join(self.parts)


class _JsonValue:
    """Incremental validator of one JSON value (RFC 8259), one char at a time.

    ``step(c)`` returns ``"ok"`` (consumed), ``"done"`` (consumed, value
    complete), ``"pushback"`` (a top-level number ended before ``c``; ``c``
    not consumed) or ``"error"``. ``safe`` is ``(n, closers)`` for the last
    safe cut: the first ``n`` characters plus ``closers`` are valid JSON.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.expect = "value"      # value | value_or_end | key | key_or_end | colon | comma | end
        self.tok = ""              # "" | str | num | lit
        self.buf = ""              # text of the current token
        self.key = False
        self.esc = 0               # 1 after a backslash, 2..5 while reading \\uXXXX
        self.n = 0
        self.safe: tuple[int, str] | None = None

    def _mark(self, in_string: bool = False) -> None:
        closers = "".join("}" if k == "{" else "]" for k in reversed(self.stack))
        self.safe = (self.n, ('"' if in_string else "") + closers)

    def _value_done(self) -> None:
        self.tok = ""
        self.expect = "comma" if self.stack else "end"
        self._mark()

    def step(self, c: str) -> str:
        if self.tok == "str":
            self.n += 1
            self.buf += c
            if self.esc == 1:
                if c == "u":
                    self.esc = 5
                elif c in '"\\/bfnrt':
                    self.esc = 0
                else:
                    return "error"
            elif self.esc:
                if c not in _HEX:
                    return "error"
                self.esc = self.esc - 1 if self.esc > 2 else 0
            elif c == "\\":
                self.esc = 1
            elif c == '"':
                if self.key:
                    self.tok, self.expect = "", "colon"
                else:
                    self._value_done()
                return "done" if self.expect == "end" else "ok"
            elif ord(c) < 0x20:
                return "error"
            if not self.key and not self.esc:
                self._mark(in_string=True)
            return "ok"
        if self.tok == "lit":
            lit = _LITERALS[self.buf[0]]
            if c != lit[len(self.buf)]:
                return "error"
            self.n += 1
            self.buf += c
            if self.buf == lit:
                self._value_done()
            return "done" if self.expect == "end" else "ok"
        if self.tok == "num":
            if c in "0123456789+-.eE":
                self.n += 1
                self.buf += c
                return "ok"
            if not _NUMBER.fullmatch(self.buf):
                return "error"
            self._value_done()
            if self.expect == "end":
                return "pushback"
        if c in _WS:
            self.n += 1
            return "ok"
        e = self.expect
        self.n += 1
        if e in ("value", "value_or_end"):
            if c == "]" and e == "value_or_end":
                self.stack.pop()
                self._value_done()
            elif c in "{[":
                self.stack.append(c)
                self.expect = "key_or_end" if c == "{" else "value_or_end"
                self._mark()
            elif c == '"':
                self.tok, self.buf, self.key = "str", c, False
                self._mark(in_string=True)
            elif c in "-0123456789":
                self.tok, self.buf = "num", c
            elif c in _LITERALS:
                self.tok, self.buf = "lit", c
            else:
                return "error"
        elif e in ("key", "key_or_end"):
            if c == '"':
                self.tok, self.buf, self.key = "str", c, True
            elif c == "}" and e == "key_or_end":
                self.stack.pop()
                self._value_done()
            else:
                return "error"
        elif e == "colon":
            if c != ":":
                return "error"
            self.expect = "value"
        elif e == "comma":
            if c == ",":
                self.expect = "key" if self.stack[-1] == "{" else "value"
            elif c == ("}" if self.stack[-1] == "{" else "]"):
                self.stack.pop()
                self._value_done()
            else:
                return "error"
        else:
            return "error"
        return "done" if self.expect == "end" else "ok"

    def end_of_text(self) -> None:
        """The text ended: a pending number is complete if it is well formed."""
        if self.tok == "num" and _NUMBER.fullmatch(self.buf):
            self._value_done()


class _Call:
    """State of one ``TOOL_CALL`` candidate; offsets index the visible text."""

    def __init__(self, start: int, silent: bool) -> None:
        self.start = start
        self.silent = silent           # a call beyond the first with parallel_tool_calls=False
        self.state = "pre"             # pre | pre2 | key | key_or_end | in_key | colon | value | in_value | comma
        self.scan: _JsonValue | None = None
        self.key = ""
        self.keys: set[str] = set()
        self.name: str | None = None
        self.rejected = False
        self.args: _JsonValue | None = None
        self.args_start = 0
        self.index = -1                # tool_calls index once announced
        self.id = ""
        self.sent = 0                  # argument chars streamed


class EmulatedToolParser:
    """:class:`~skippy.engine.chat.formats.base.StreamParser` for ``TOOL_CALL`` lines.

    ``allowed_tools``: names the request allows (others stay content);
    ``parallel_tool_calls``: False keeps only the first call;
    ``id_factory``: mints call ids (default ``call_`` + 24 hex chars);
    ``withhold``: announce a call only once it is complete, and drop
    incomplete, malformed and not-allowed calls instead of showing their text
    (see the module docstring); ``thinking_forced_open``: the prompt opened a
    ``<think>`` block (DeepSeek R1's generation prompt), so the text is
    reasoning up to its ``</think>``.
    """

    def __init__(self, allowed_tools: set[str], parallel_tool_calls: bool = True,
                 id_factory: IdFactory = new_call_id, *, withhold: bool = False,
                 thinking_forced_open: bool = False) -> None:
        self.allowed_tools = set(allowed_tools)
        self.parallel_tool_calls = parallel_tool_calls
        self.withhold = withhold
        self._id_factory = id_factory
        self._raw = ""                 # undecided raw text (think stage)
        self._raw_done = 0             # raw chars already routed
        self._segments: list[tuple[int, int]] = []   # (visible offset, raw offset) of visible pieces
        self._in_think = thinking_forced_open
        self._text = ""                # visible text (think spans removed)
        self._pos = 0                  # visible text consumed by the call stage
        self._mode = "text"            # text | call | discard
        self._call: _Call | None = None
        self._calls: list[ToolCall] = []
        self._args_sent: list[str] = []
        self._seen_calls = 0           # well-formed calls seen (kept or dropped)
        self._call_end = -1            # visible offset just after the last kept call
        self._content = _Trim()
        self._reasoning = _Trim()
        self._out: list[Delta] = []

    # -- public ------------------------------------------------------------

    def feed(self, text: str) -> list[Delta]:
        self._raw += text
        self._think_stage(final=False)
        self._call_stage(final=False)
        return self._take()

    def finish(self, *, truncated: bool = False) -> tuple[list[Delta], ParsedMessage]:
        """End of the text; with ``truncated`` (the token limit cut it) held-back text is dropped and a call
        not yet complete is not kept (:meth:`StreamParser.finish`)."""
        if not truncated:
            self._think_stage(final=True)
            self._call_stage(final=True)
        msg = ParsedMessage(content=self._content.text(), reasoning_content=self._reasoning.text(),
                            tool_calls=tuple(self._calls))
        return self._take(), msg

    @property
    def completed_calls(self) -> int:
        """Number of calls closed so far (kept or, with parallel off, dropped)."""
        return self._seen_calls

    @property
    def text_after_last_call(self) -> str | None:
        """Visible text after the last completed call (None before any)."""
        return None if self._call_end < 0 else self._text[self._call_end:]

    @property
    def last_call_end(self) -> int | None:
        """Visible offset just after the last completed call (None before any)."""
        return None if self._call_end < 0 else self._call_end

    def raw_offset(self, visible: int) -> int:
        """Offset in the fed text of visible offset ``visible`` (think spans removed)."""
        raw = visible
        for v, r in self._segments:
            if v > visible:
                break
            raw = r + (visible - v)
        return raw

    # -- output ------------------------------------------------------------

    def _take(self) -> list[Delta]:
        out, self._out = self._out, []
        return [d for d in out if not d.is_empty()]

    def _emit_content(self, s: str) -> None:
        s = self._content.push(s)
        if s:
            self._out.append(Delta(content=s))

    # -- stage 1: <think> spans -------------------------------------------

    def _think_stage(self, final: bool) -> None:
        while self._raw:
            tag = THINK_CLOSE if self._in_think else THINK_OPEN
            i = self._raw.find(tag)
            if i >= 0:
                piece, self._raw = self._raw[:i], self._raw[i + len(tag):]
                self._route(piece)
                self._raw_done += len(piece) + len(tag)
                self._in_think = not self._in_think
                continue
            keep = 0 if final else partial_suffix(self._raw, (tag,))
            piece, self._raw = self._raw[:len(self._raw) - keep], self._raw[len(self._raw) - keep:]
            self._route(piece)
            self._raw_done += len(piece)
            break

    def _route(self, piece: str) -> None:
        if not piece:
            return
        if self._in_think:
            self._call_stage(final=False)          # keep deltas in text order
            r = self._reasoning.push(piece)
            if r:
                self._out.append(Delta(reasoning_content=r))
        else:
            self._segments.append((len(self._text), self._raw_done))
            self._text += piece

    # -- stage 2: TOOL_CALL lines -------------------------------------------

    def _call_stage(self, final: bool) -> None:
        text = self._text
        while self._pos < len(text):
            if self._mode == "discard":
                j = text.find("\n", self._pos)
                if j < 0:
                    self._pos = len(text)
                    break
                self._pos, self._mode = j, "text"
            elif self._mode == "text":
                i = text.find(MARKER, self._pos)
                if i < 0:
                    tail = partial_suffix(text[self._pos:], (MARKER,))
                    keep = 0 if final else tail
                    # withheld: a marker cut off at the end ("TOOL_CA") is not content either
                    drop = tail if final and self.withhold and tail >= len("TOOL_") else 0
                    self._emit_content(text[self._pos:len(text) - keep - drop])
                    self._pos = len(text) - keep
                    break
                self._emit_content(text[self._pos:i])
                silent = not self.parallel_tool_calls and self._seen_calls > 0
                self._call = _Call(i, silent)
                self._pos, self._mode = i + len(MARKER), "call"
            else:
                self._step_call(text[self._pos])
        if self._mode == "call":
            self._flush_args()
            if final:
                self._end_of_text()
        elif final and self._pos < len(text) and self._mode == "text":
            self._emit_content(text[self._pos:])
            self._pos = len(text)

    def _step_call(self, c: str) -> None:
        """Consume ``text[self._pos]`` for the current call candidate."""
        call = self._call
        assert call is not None
        st = call.state
        consume = True
        if st in ("pre", "pre2"):
            if c == ":" and st == "pre":
                call.state = "pre2"
            elif c == "{":
                call.state = "key_or_end"
            elif c not in _WS:
                return self._fail()
        elif st in ("key", "key_or_end"):
            if c == '"':
                call.scan = _JsonValue()
                call.scan.step(c)
                call.state = "in_key"
            elif c == "}" and st == "key_or_end":
                self._pos += 1
                return self._close()
            elif c not in _WS:
                return self._fail()
        elif st == "in_key":
            assert call.scan is not None
            r = call.scan.step(c)
            if r == "error":
                return self._fail()
            if r == "done":
                call.key = json.loads(call.scan.buf)
                if call.key in call.keys:
                    return self._fail()
                call.keys.add(call.key)
                call.state = "colon"
        elif st == "colon":
            if c == ":":
                call.state = "value"
            elif c not in _WS:
                return self._fail()
        elif st == "value":
            if c not in _WS:
                if (call.key == "name" and c != '"') or (call.key == "arguments" and c != "{"):
                    return self._fail()
                call.scan = _JsonValue()
                if call.key == "arguments":
                    call.args, call.args_start = call.scan, self._pos
                call.state = "in_value"
                consume = self._value_char(c)
        elif st == "in_value":
            consume = self._value_char(c)
        elif st == "comma":
            if c == ",":
                call.state = "key"
            elif c == "}":
                self._pos += 1
                return self._close()
            elif c not in _WS:
                return self._fail()
        if self._mode == "call" and consume:
            self._pos += 1

    def _value_char(self, c: str) -> bool:
        """Feed one char of a top-level value; returns whether it was consumed."""
        call = self._call
        assert call is not None and call.scan is not None
        r = call.scan.step(c)
        if r == "error":
            self._fail()
            return False
        if r in ("done", "pushback"):
            call.state = "comma"
            if call.key == "name":
                call.name = json.loads(call.scan.buf)
                call.rejected = call.name not in self.allowed_tools
        if call.index < 0 and not call.silent and not call.rejected and call.name is not None \
                and call.args is not None and not self.withhold:
            self._announce()
        return r != "pushback"

    def _announce(self, args: str | None = None) -> None:
        call = self._call
        assert call is not None and call.name is not None
        call.index, call.id = len(self._args_sent), self._id_factory()
        first = args if args is not None else self._args_ready()
        call.sent = len(first)
        self._args_sent.append(first)
        self._out.append(Delta(tool_calls=(ToolCallDelta(index=call.index, id=call.id, name=call.name,
                                                         arguments=first),)))

    def _args_ready(self) -> str:
        call = self._call
        assert call is not None and call.args is not None
        n = call.args.safe[0] if call.args.safe else 0
        return self._text[call.args_start:call.args_start + n]

    def _flush_args(self) -> None:
        call = self._call
        if call is None or call.index < 0 or call.args is None:
            return
        ready = self._args_ready()
        if len(ready) > call.sent:
            frag = ready[call.sent:]
            call.sent = len(ready)
            self._args_sent[call.index] += frag
            self._out.append(Delta(tool_calls=(ToolCallDelta(index=call.index, arguments=frag),)))

    def _commit(self) -> None:
        """Keep the announced call: streamed arguments plus the last safe cut's closers."""
        call = self._call
        assert call is not None and call.name is not None
        self._flush_args()
        closers = call.args.safe[1] if call.args is not None and call.args.safe else ""
        if closers:
            self._args_sent[call.index] += closers
            self._out.append(Delta(tool_calls=(ToolCallDelta(index=call.index, arguments=closers),)))
        self._calls.append(ToolCall(id=call.id, name=call.name, arguments=self._args_sent[call.index]))
        self._seen_calls += 1

    def _close(self) -> None:
        """The call object closed at ``self._pos`` (already past ``}``)."""
        call = self._call
        assert call is not None
        if call.name is None or call.rejected:
            if self.withhold:
                self._call, self._mode = None, "text"
                return None
            return self._to_content(self._pos)
        self._flush_args()
        if call.silent:
            self._seen_calls += 1
        else:
            if call.index < 0:   # withheld until now, or no "arguments" key: no arguments
                self._announce(args=self._args_ready() if call.args is not None else "{}")
            self._commit()
            self._call_end = self._pos
        self._call, self._mode = None, "text"

    def _fail(self) -> None:
        """Malformed JSON at ``self._pos``."""
        call = self._call
        assert call is not None
        if call.index >= 0:
            self._commit()
            self._call_end = self._pos
            self._call, self._mode = None, "discard"
        elif self.withhold or (call.silent and call.name is not None and not call.rejected
                                and call.args is not None):
            self._call, self._mode = None, "discard"
        else:
            self._to_content(self._pos)

    def _to_content(self, end: int) -> None:
        call = self._call
        assert call is not None
        self._emit_content(self._text[call.start:end])
        self._call, self._mode, self._pos = None, "text", end

    def _end_of_text(self) -> None:
        call = self._call
        assert call is not None
        if call.args is not None:
            call.args.end_of_text()
        if call.index >= 0:
            self._commit()
            self._call_end = len(self._text)
            self._call, self._mode = None, "text"
        elif self.withhold or (call.silent and call.name is not None and not call.rejected
                                and call.args is not None):
            self._call, self._mode = None, "text"   # cut off (max_tokens): dropped, its text withheld
        else:
            self._to_content(len(self._text))
        self._pos = len(self._text)
