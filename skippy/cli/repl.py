"""``skippy run``'s conversation in the terminal, as ``ollama run`` has it: the commands (``/set
parameter``, ``/set system``, ``/show``, ``/clear``, ``/bye``: :func:`run_command` on a
:class:`ChatState`), messages of several lines (:class:`MessageReader`), Ctrl-C handling and the
streamed replies (:func:`chat_loop`). The click command itself is :mod:`skippy.cli.chat`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterator, Sequence
from typing import Any, NamedTuple

from skippy.cli.common import _isatty

RUN_HELP = """Available commands:
  /set parameter NAME VALUE   set a sampling parameter ('/set parameter' lists them)
  /set system TEXT            set the system message
  /show                       show the model, the parameters and the system message
  /clear                      forget the conversation so far
  /bye                        leave (so do Ctrl-D, and Ctrl-C twice at the prompt)
  /?, /help                   this help

Use \"\"\" to begin a message of several lines (or one that starts with /).
Ctrl-C stops a reply; what it wrote stays in the conversation."""

SET_HELP = """Available commands:
  /set parameter NAME VALUE   set a sampling parameter ('/set parameter' lists them)
  /set system TEXT            set the system message"""

SHOW_HELP = """Available commands:
  /show                       the model, the parameters and the system message
  /show info                  the model
  /show parameters            the parameters
  /show system                the system message"""


class RunParameter(NamedTuple):
    """A parameter of ``/set parameter``: the request field it sets, its value type (``int``, ``float``
    or ``list`` of strings) and what it does."""

    field: str
    kind: type
    help: str


# Ollama's names for them (`ollama run`'s /set parameter), mapped to ChatCompletionRequest fields.
RUN_PARAMETERS: dict[str, RunParameter] = {
    "temperature": RunParameter("temperature", float, "sampling temperature (0: always the likeliest token)"),
    "top_p": RunParameter("top_p", float, "sample from the likeliest tokens whose probabilities add up to top_p"),
    "top_k": RunParameter("top_k", int, "sample from the top_k likeliest tokens (0: all)"),
    "min_p": RunParameter("min_p", float, "drop the tokens less likely than min_p times the likeliest"),
    "repeat_penalty": RunParameter("repeat_penalty", float, "how strongly to penalize repetitions (1: not at all)"),
    "repeat_last_n": RunParameter("repeat_last_n", int, "how many last tokens repeat_penalty looks at "
                                                        "(-1: the whole context)"),
    "seed": RunParameter("seed", int, "random number seed, for repeatable replies"),
    "num_predict": RunParameter("max_tokens", int, "most tokens in a reply (-1: up to the context left); "
                                                   "also max_tokens"),
    "stop": RunParameter("stop", list, "strings that end a reply"),
}
_PARAMETER_ALIASES = {"max_tokens": "num_predict"}
_SAMPLER_ATTRS = {"repeat_last_n": "penalty_last_n"}  # a SamplingParams attribute named otherwise


def _parameters_help() -> str:
    kinds = {int: "<int>", float: "<float>", list: "<string> <string> ..."}
    rows = [(f"/set parameter {name} {kinds[p.kind]}", p.help) for name, p in RUN_PARAMETERS.items()]
    width = max(len(r[0]) for r in rows)
    return "Available parameters:\n" + "\n".join(f"  {a.ljust(width)}  {b}" for a, b in rows)


class ChatState:
    """What ``skippy run``'s commands change: the system message, the parameters (request field ->
    value, only those set) and the conversation (user and assistant messages, without the system one)."""

    def __init__(self, system: str | None, params: dict[str, Any]) -> None:
        self.system = system
        self.params = params
        self.history: list[Any] = []

    def messages(self) -> list[Any]:
        """The request's messages: the system message (if set), then the conversation."""
        from skippy import Message

        return ([Message("system", self.system)] if self.system else []) + self.history

    def sampling(self) -> Any:
        """The :class:`~skippy.engine.sampling.params.SamplingParams` the parameters make, checked as the
        engine checks them; raises :class:`~skippy.engine.errors.InvalidRequest` for a value out of range."""
        from skippy import ChatCompletionRequest
        from skippy.engine.sampling.params import sampling_from_request

        return sampling_from_request(ChatCompletionRequest(messages=[], **self.params), n_vocab=1)


def set_parameter(chat: ChatState, args: list[str]) -> str:
    """``/set parameter NAME VALUE...`` (``args``: NAME and the values): set it in ``chat.params`` and say
    so as Ollama does (``Set parameter 'temperature' to '0.5'``), or say why not and change nothing."""
    from skippy.engine.errors import EngineError

    name, values = args[0].lower(), args[1:]
    param = RUN_PARAMETERS.get(_PARAMETER_ALIASES.get(name, name))
    if param is None and name == "num_ctx":  # Ollama's; here the context is made when the model loads
        return "error: num_ctx is fixed when the model loads: start skippy run again with --n-ctx N"
    if param is None:
        return f"Unknown parameter '{args[0]}'.\n{_parameters_help()}"
    if param.kind is list:
        value: Any = values
    elif len(values) != 1:
        return f"error: {name} takes one value, e.g. /set parameter {name} {'0.5' if param.kind is float else '1'}"
    else:
        try:
            value = param.kind(values[0])
        except ValueError:
            return f"error: {name} takes {'an integer' if param.kind is int else 'a number'}, not {values[0]!r}"
    params = dict(chat.params)
    if param.field == "max_tokens" and value == -1:  # Ollama's num_predict -1: no limit
        params.pop("max_tokens", None)
    else:
        params[param.field] = value
    before, chat.params = chat.params, params
    try:
        chat.sampling()
    except EngineError as e:
        chat.params = before
        return f"error: {e}"
    return f"Set parameter '{name}' to '{', '.join(values)}'"


def _show(chat: ChatState, what: str, model_info: Sequence[tuple[str, str]]) -> str:
    """``/show [info|parameters|system]``: the model's lines, the parameters' values, the system message."""
    parts = []
    if what in ("", "info"):
        rows = [*model_info, ("conversation", f"{len(chat.history)} messages (/clear forgets them)")]
        width = max(len(k) for k, _ in rows)
        parts.append("Model\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows))
    if what in ("", "parameters"):
        from skippy.engine.errors import EngineError

        try:
            sampling = chat.sampling()
        except EngineError:  # a flag out of the engine's range (--temperature 500): the defaults, for the others
            sampling = ChatState(None, {}).sampling()
        rows = []
        for name, param in RUN_PARAMETERS.items():
            if param.field in chat.params:
                value = chat.params[param.field]
                shown = " ".join(map(repr, value)) if param.kind is list else str(value)
            elif param.field == "seed":
                shown = "random (default)"
            elif param.field == "max_tokens":
                shown = "the context left (default)"
            elif param.field == "stop":
                shown = "none (default)"
            else:
                shown = f"{getattr(sampling, _SAMPLER_ATTRS.get(name, name))} (default)"
            rows.append((name, shown))
        width = max(len(k) for k, _ in rows)
        parts.append("Parameters\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows))
    if what in ("", "system"):
        parts.append("System message\n  " + (chat.system.replace("\n", "\n  ") if chat.system else "none"))
    return "\n\n".join(parts)


def run_command(chat: ChatState, text: str, model_info: Sequence[tuple[str, str]] = ()) -> str | None:
    """The answer to one of ``skippy run``'s commands (``text`` starts with ``/``), after doing it; ``None``
    for ``/bye`` (or ``/exit``). Unknown commands are answered with :data:`RUN_HELP`, never sent to the
    model. ``model_info``: the (name, value) lines ``/show`` prints about the model."""
    args = text.split()
    command = args[0].lower()
    if command in ("/bye", "/exit"):
        return None
    if command == "/clear":
        chat.history.clear()
        return "Cleared the conversation."
    if command in ("/?", "/help"):
        topic = args[1].lower().lstrip("/") if len(args) > 1 else ""
        return {"set": SET_HELP, "show": SHOW_HELP}.get(topic, RUN_HELP)
    if command == "/set":
        if len(args) < 2:
            return SET_HELP
        if args[1].lower() == "parameter":
            return set_parameter(chat, args[2:]) if len(args) >= 4 else _parameters_help()
        if args[1].lower() == "system":
            if len(args) < 3:
                return SET_HELP
            chat.system = text.split(None, 2)[2].strip()
            return "Set system message."
        return f"Unknown command '/set {args[1]}'.\n{SET_HELP}"
    if command == "/show":
        what = args[1].lower() if len(args) > 1 else ""
        if what not in ("", "info", "parameters", "system"):
            return f"Unknown command '/show {args[1]}'.\n{SHOW_HELP}"
        return _show(chat, what, model_info)
    return f"Unknown command '{args[0]}'.\n{RUN_HELP}"


class MessageReader:
    """Assembles user messages from lines, as ``ollama run`` does.

    A line starting with three double quotes opens a message that goes on until a line ending with
    three double quotes; the quotes are dropped and the lines joined with ``\\n``. Any other line is
    one message (stripped); empty lines are skipped. :attr:`prompt` is ``>>> `` before a message and
    ``... `` inside one; :attr:`quoted` tells whether the last message came in quotes (such a message
    is never a command, even when it starts with ``/``).
    """

    def __init__(self) -> None:
        self.lines: list[str] | None = None  # inside a message of several lines: its lines so far
        self.quoted = False

    @property
    def prompt(self) -> str:
        return ">>> " if self.lines is None else "... "

    def feed(self, line: str) -> str | None:
        """The message that ``line`` (without its newline) completes, else ``None``."""
        if self.lines is not None:
            if not line.rstrip().endswith('"""'):
                self.lines.append(line)
                return None
            lines, self.lines, self.quoted = [*self.lines, line.rstrip()[:-3]], None, True
            return "\n".join(lines).strip("\n")
        if not line.strip():
            return None
        if not line.lstrip().startswith('"""'):
            self.quoted = False
            return line.strip()
        first = line.lstrip()[3:]
        if first.rstrip().endswith('"""'):
            self.quoted = True
            return first.rstrip()[:-3].strip()
        self.lines = [first] if first else []
        return None

    def reset(self) -> bool:
        """Drop an unfinished message of several lines (Ctrl-C); ``True`` if there was one."""
        dropped, self.lines = self.lines is not None, None
        return dropped


def read_message(readline: Callable[[], str | None], prompt: Callable[[str], None]) -> str | None:
    """One user message from ``readline`` (a line without its newline, ``None`` at end of input).

    The lines make a message as :class:`MessageReader` says (three double quotes open and close a
    message of several lines). ``prompt`` shows ``>>> `` before a message and ``... `` before each
    continuation line. Returns ``None`` at end of input (an unfinished multi-line message is dropped).
    """
    reader = MessageReader()
    while True:
        prompt(reader.prompt)
        line = readline()
        if line is None:
            return None
        message = reader.feed(line)
        if message is not None:
            return message


class _Interrupts:
    """Ctrl-C presses, routed to what the chat is waiting on: a reply, or the next line at the prompt."""

    def __init__(self) -> None:
        self.pending = False
        self.scope: Any = None  # the trio.CancelScope of the wait that Ctrl-C ends

    def hit(self) -> None:
        self.pending = True
        if self.scope is not None:
            self.scope.cancel()

    @contextlib.contextmanager
    def catch(self) -> Iterator[None]:
        """A cancel scope around one wait, cancelled by a Ctrl-C pressed before or during it."""
        import trio

        with trio.CancelScope() as scope:
            self.scope = scope
            if self.pending:
                scope.cancel()
            try:
                yield
            finally:
                self.scope = None

    def take(self) -> bool:
        """Whether Ctrl-C was pressed since the last call."""
        pending, self.pending = self.pending, False
        return pending


async def chat_loop(engine: Any, *, system: str | None, max_tokens: int | None, temperature: float | None,
                    seed: int | None, readline: Callable[[], str | None], out: Any,
                    interrupts: AsyncIterable[Any] | None = None,
                    model_info: Sequence[tuple[str, str]] = (), prompt: str | None = None) -> bool:
    """``skippy run``'s conversation: read a message, stream the reply to ``out``, keep the history.

    ``readline`` blocks; it runs in a worker thread, one call at a time, and a call still blocked when
    the chat ends is abandoned. ``out`` is a text stream. Commands (:func:`run_command`): see
    :data:`RUN_HELP`; ``max_tokens``, ``temperature`` and ``seed`` are the parameters' first values.
    ``interrupts`` yields once per Ctrl-C (``skippy run`` passes trio's SIGINT receiver): during a
    reply it stops the reply, which stays in the conversation (a reply stopped before any text is
    dropped with its message); at the prompt it drops an unfinished message of several lines, else
    prints a hint, and a second Ctrl-C in a row ends the chat. Returns at ``/bye``, at the end of
    input or at that second Ctrl-C. With ``prompt`` (``skippy run MODEL PROMPT``, as ``ollama run``): one
    reply to it, a message whatever it starts with, then returns; ``readline`` is not read. Returns False
    when that one reply failed (its ``error: ...`` written to ``out``), so the command exits 1 as
    ``ollama run`` does; True otherwise (a failed reply in a conversation is said and the chat goes on).
    """
    import trio

    interactive = _isatty(sys.stdin)
    chat = ChatState(system, {k: v for k, v in (("max_tokens", max_tokens), ("temperature", temperature),
                                                ("seed", seed)) if v is not None})
    ctl = _Interrupts()
    send_line, lines = trio.open_memory_channel[str | None](0)

    async def read_lines() -> None:
        async with send_line:
            while True:
                line = await trio.to_thread.run_sync(readline, abandon_on_cancel=True)
                await send_line.send(line)
                if line is None:
                    return

    async def watch(signals: AsyncIterable[Any]) -> None:
        async for _ in signals:
            ctl.hit()

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    async def converse() -> bool:
        if prompt is not None:
            return await reply(prompt)
        reader = MessageReader()
        hinted = False  # the last thing at the prompt was a Ctrl-C that printed the hint
        while True:
            if interactive:
                write(reader.prompt)
            with ctl.catch():
                try:
                    line = await lines.receive()
                except trio.EndOfChannel:
                    line = None
            if ctl.take():
                if reader.reset():  # the unfinished message is dropped
                    write("\n")
                    hinted = False
                elif hinted:
                    write("\n")
                    return True
                else:
                    write("\nUse Ctrl-C again, Ctrl-D or /bye to leave.\n")
                    hinted = True
                continue
            hinted = False
            if line is None:
                if interactive:
                    write("\n")
                return True
            text = reader.feed(line)
            if not text:
                continue
            if text.startswith("/") and not reader.quoted:
                answer = run_command(chat, text, model_info)
                if answer is None:
                    return True
                write(answer + "\n")
                continue
            await reply(text)

    async def reply(text: str) -> bool:
        from contextlib import aclosing

        from skippy import ChatCompletionRequest, Message
        from skippy.engine.errors import EngineError

        chat.history.append(Message("user", text))
        req = ChatCompletionRequest(messages=chat.messages(), stream=True, **chat.params)
        pieces: list[str] = []
        finish = None
        try:
            with ctl.catch():
                stream = await engine.chat_stream(req)
                async with aclosing(stream):
                    async for chunk in stream:
                        for choice in chunk.choices:
                            delta = choice.delta.content if isinstance(choice.delta.content, str) else ""
                            if delta:
                                pieces.append(delta)
                                write(delta)
                            finish = choice.finish_reason or finish
        except EngineError as e:  # e.g. the conversation outgrew the context: say so, keep the session
            ctl.take()
            chat.history.pop()
            # the engine names serve's flag; this command's is --n-ctx
            message = str(e).replace("serve it with a larger --ctx-size", "run it with a larger --n-ctx")
            write(f"error: {message}\n" if prompt is not None else f"error: {message} (/clear starts over)\n")
            return False
        stopped = ctl.take() and finish is None
        if stopped and not pieces:
            chat.history.pop()
        else:
            chat.history.append(Message("assistant", "".join(pieces)))
        if stopped:
            write("\n[reply stopped]\n")
        elif finish == "length":
            write("\n[reply cut at max_tokens]\n" if "max_tokens" in chat.params else
                  "\n[reply cut: the context is full]\n")
        else:
            write("\n")
        if interactive and prompt is None:
            write("\n")
        return True

    async with trio.open_nursery() as nursery:
        if prompt is None:
            nursery.start_soon(read_lines)
        if interrupts is not None:
            nursery.start_soon(watch, interrupts)
        ok = await converse()
        nursery.cancel_scope.cancel()
    return ok


def stdin_reader() -> Callable[[], str | None]:
    """A blocking ``readline`` of standard input for :func:`chat_loop`: a line without its newline,
    ``None`` at end of input.

    It reads the file descriptor with ``os.read`` (on a terminal, one line per read), so a read that
    the chat abandons, still blocked when ``skippy run`` exits, holds no lock of ``sys.stdin``'s
    buffer (a thread blocked in ``sys.stdin.readline`` can make the interpreter's shutdown fail with
    "could not acquire lock for <stdin>"). Without a descriptor (a test's stdin), it is
    ``sys.stdin.readline``.
    """
    import codecs

    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return lambda: line.rstrip("\n") if (line := sys.stdin.readline()) else None
    decoder = codecs.getincrementaldecoder(getattr(sys.stdin, "encoding", None) or "utf-8")(errors="replace")
    ready: deque[str] = deque()
    rest = [""]  # the text after the last newline read
    at_end = [False]

    def readline() -> str | None:
        while not ready:
            if at_end[0]:
                return None
            data = os.read(fd, 1 << 16)
            *complete, rest[0] = (rest[0] + decoder.decode(data, final=not data)).split("\n")
            ready.extend(complete)
            if not data:
                at_end[0] = True
                if rest[0]:
                    ready.append(rest[0])
        return ready.popleft()

    return readline
