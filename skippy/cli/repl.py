"""The ``skippy`` command line.

``skippy`` is a click group; each subcommand is a ``@main.command()``
function below. Errors a person can act on (:class:`~skippy.models.ModelError`)
are printed as ``error: <message>`` on stderr with exit code 1 and no
traceback.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import click

from skippy.models import DEFAULT_MODEL, ModelError

if TYPE_CHECKING:
    import attrs

F = TypeVar("F", bound=Callable)


def friendly_errors(fn: F) -> F:
    """Turn :class:`ModelError` raised by a command into ``error: ...`` on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ModelError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("skippy-trio")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def plain_help(text: str) -> str:
    """A help text as a terminal shows it: reStructuredText's inline literal ````x```` becomes ``'x'``.

    Command docstrings and the settings' help texts (``setting(help=...)``) are written for Sphinx
    too; every ``--help`` page goes through :class:`PlainHelpFormatter`, which applies this.
    """
    return text.replace("``", "'")


class PlainHelpFormatter(click.HelpFormatter):
    """click's help formatter with :func:`plain_help` applied to the texts (before they are wrapped)
    and to the second column of the option and command lists."""

    def write_text(self, text: str) -> None:
        super().write_text(plain_help(text))

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        super().write_dl([(first, plain_help(second)) for first, second in rows], col_max, col_spacing)


class SkippyContext(click.Context):
    """click's context with :class:`PlainHelpFormatter` writing the help pages."""

    formatter_class = PlainHelpFormatter


class SkippyCommand(click.Command):
    """A ``skippy`` subcommand: its ``--help`` is written by :class:`PlainHelpFormatter`."""

    context_class = SkippyContext


class SkippyGroup(click.Group):
    """The ``skippy`` group: its own ``--help`` and every subcommand's go through :class:`PlainHelpFormatter`."""

    context_class = SkippyContext
    command_class = SkippyCommand


@click.group(cls=SkippyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="skippy", message="%(prog)s %(version)s")
def main() -> None:
    """skippy: an OpenAI-compatible LLM inference server on trio + llama.cpp."""


@main.command()
@click.argument("source", default=DEFAULT_MODEL, metavar="[MODEL|URL|hf://OWNER/REPO/FILE.gguf|OWNER/REPO:QUANT]")
@click.option("--sha256", default=None, metavar="HEX", help="Expected SHA-256 of a URL or Hugging Face download; "
              "on a mismatch the file is deleted and the exit code is 1.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the model path (no progress).")
@friendly_errors
def pull(source: str, sha256: str | None, quiet: bool) -> None:
    """Download a model into the model cache and verify it.

    SOURCE is a known model name (default: SmolLM2-135M-Instruct; see
    'skippy list'), whose SHA-256 is pinned; an http(s) URL of a GGUF file;
    hf://OWNER/REPO/FILE.gguf (Hugging Face's resolve/main URL of that file);
    or hf://OWNER/REPO:QUANT / OWNER/REPO:QUANT as llama-server's -hf (the
    repo's single GGUF of that quantization, found in the hub's file list;
    default Q4_K_M). HF_TOKEN is sent to Hugging Face if set; HF_ENDPOINT
    replaces https://huggingface.co. A URL download goes to FILE.part first
    and resumes from it (HTTP Range) after a lost connection or an
    interrupted pull. The cache is $SKIPPY_HOME/models (default
    ~/.cache/skippy/models). Prints the model's path on stdout; progress
    goes to stderr.
    """
    from skippy.models import pull_source

    path = pull_source(source, sha256=sha256, progress=not quiet)
    click.echo(str(path))


def _quiet_llama_log() -> None:
    """``list``/``show`` read GGUFs with llama.cpp: keep its load-time warnings off the terminal."""
    import logging

    logging.getLogger("skippy.runtime").setLevel(logging.ERROR)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""  # pragma: no cover


_MODELS_DIR = click.option("--models-dir", "models_dirs", multiple=True, metavar="DIR",
                           type=click.Path(file_okay=False), help="Also a directory of GGUF files (repeatable).")


@main.command(name="list")
@_MODELS_DIR
@friendly_errors
def list_command(models_dirs: tuple[str, ...]) -> None:
    """List the models: the known models (pulled or not), the other GGUF files of
    the cache (e.g. pulled from a URL) and those of --models-dir, with size,
    quantization, architecture, training context and path (read from each
    GGUF's metadata)."""
    from skippy.models import gguf_info, list_models

    _quiet_llama_log()
    rows = [("NAME", "SIZE", "QUANT", "ARCH", "CONTEXT", "PATH")]
    for m in list_models(models_dirs):
        if not m.pulled:
            size = _size(m.spec.size) if m.spec else "-"
            rows.append((m.name, size, "-", "-", "-", "(not pulled: skippy pull " + m.name + ")"))
            continue
        try:
            info = gguf_info(m.path)
        except ModelError as e:
            rows.append((m.name, _size(m.path.stat().st_size), "?", "?", "?", f"{m.path} ({e})"))
            continue
        rows.append((m.name, _size(info.size), info.quantization or "-", info.architecture or "-",
                     str(info.context_length or "-"), str(m.path)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])


@main.command()
@click.argument("name", metavar="MODEL")
@click.option("--template", "template_only", is_flag=True, help="Print only the chat template.")
@_MODELS_DIR
@friendly_errors
def show(name: str, template_only: bool, models_dirs: tuple[str, ...]) -> None:
    """Show a model's GGUF metadata, chat template and its capabilities.

    MODEL is a known model name, a GGUF in the cache or --models-dir (by file
    name) or a GGUF path. The capabilities are what skippy detects by
    rendering probe conversations through the template (system role, tools,
    tool call ids, parallel calls, thinking), which decide native tool calls
    or their emulation: with a template that does not render tools, the
    model is taught to call them with TOOL_CALL lines.
    """
    from skippy.models import find_model, gguf_info, lookup

    _quiet_llama_log()
    path = find_model(name, models_dirs)
    if not path.is_file():
        raise ModelError(f"{lookup(name).name if lookup(name) else name} is not pulled yet: run 'skippy pull {name}'")
    info = gguf_info(path)
    if template_only:
        click.echo(info.chat_template or "", nl=bool(info.chat_template))
        return
    md = info.metadata
    arch = info.architecture
    lines = [
        ("name", info.name or "-"), ("path", str(path)), ("size", f"{_size(info.size)} ({info.size} bytes)"),
        ("architecture", arch or "-"), ("parameters", f"{info.n_params / 1e6:.0f}M ({info.n_params})"),
        ("quantization", info.quantization or "-"), ("context length", str(info.context_length or "-")),
        ("embedding length", md.get(f"{arch}.embedding_length", "-")), ("layers", md.get(f"{arch}.block_count", "-")),
        ("attention heads", f"{md.get(f'{arch}.attention.head_count', '-')} "
                            f"(KV {md.get(f'{arch}.attention.head_count_kv', '-')})"),
    ]
    if f"{arch}.attention.sliding_window" in md:
        lines.append(("sliding window", md[f"{arch}.attention.sliding_window"]))
    lines += [("vocabulary", f"{info.n_vocab} tokens ({md.get('tokenizer.ggml.model', '-')})"),
              ("license", md.get("general.license", "-"))]
    width = max(len(k) for k, _ in lines)
    click.echo("Model")
    for k, v in lines:
        click.echo(f"  {k.ljust(width)}  {v}")
    click.echo("\nChat template")
    if info.chat_template is None:
        click.echo("  none in the GGUF (tokenizer.chat_template): skippy falls back to ChatML "
                   "(<|im_start|>role ... <|im_end|>); give the model's own with --chat-template")
        return
    import attrs

    from skippy.engine.chat.capabilities import detect_caps
    from skippy.engine.chat.templates import ChatTemplate

    first = info.chat_template.strip().splitlines()[0] if info.chat_template.strip() else ""
    click.echo(f"  {len(info.chat_template)} chars; first line: {first[:100]}")
    click.echo("  (print it whole with 'skippy show --template " + name + "')")
    caps = detect_caps(ChatTemplate(info.chat_template))
    click.echo("\nCapabilities")
    for field, value in attrs.asdict(caps).items():
        shown = ("yes" if value else "no") if isinstance(value, bool) else value
        if field == "supports_tools":
            shown += " (native tool calls)" if value else " (tool calls are emulated with TOOL_CALL lines)"
        click.echo(f"  {field.replace('_', ' ')}: {shown}")


@main.command()
@click.argument("name", metavar="MODEL")
@friendly_errors
def rm(name: str) -> None:
    """Delete a model from the model cache.

    MODEL is a known model name, the name of another GGUF of the cache (see
    'skippy list'), or a path inside the cache; a partial download of it goes
    too. Files outside the cache ($SKIPPY_HOME/models) are never deleted.
    """
    from skippy.models import remove_model

    for path in remove_model(name):
        click.echo(f"deleted {path}")


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
                    model_info: Sequence[tuple[str, str]] = ()) -> None:
    """``skippy run``'s conversation: read a message, stream the reply to ``out``, keep the history.

    ``readline`` blocks; it runs in a worker thread, one call at a time, and a call still blocked when
    the chat ends is abandoned. ``out`` is a text stream. Commands (:func:`run_command`): see
    :data:`RUN_HELP`; ``max_tokens``, ``temperature`` and ``seed`` are the parameters' first values.
    ``interrupts`` yields once per Ctrl-C (``skippy run`` passes trio's SIGINT receiver): during a
    reply it stops the reply, which stays in the conversation (a reply stopped before any text is
    dropped with its message); at the prompt it drops an unfinished message of several lines, else
    prints a hint, and a second Ctrl-C in a row ends the chat. Returns at ``/bye``, at the end of
    input or at that second Ctrl-C.
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

    async def watch() -> None:
        async for _ in interrupts:  # type: ignore[union-attr]
            ctl.hit()

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    async def converse() -> None:
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
                    return
                else:
                    write("\nUse Ctrl-C again, Ctrl-D or /bye to leave.\n")
                    hinted = True
                continue
            hinted = False
            if line is None:
                if interactive:
                    write("\n")
                return
            text = reader.feed(line)
            if not text:
                continue
            if text.startswith("/") and not reader.quoted:
                answer = run_command(chat, text, model_info)
                if answer is None:
                    return
                write(answer + "\n")
                continue
            await reply(text)

    async def reply(text: str) -> None:
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
            write(f"error: {e} (/clear starts over)\n")
            return
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
        if interactive:
            write("\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_lines)
        if interrupts is not None:
            nursery.start_soon(watch)
        await converse()
        nursery.cancel_scope.cancel()


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


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@main.command()
@click.argument("name", metavar="[MODEL]", default=DEFAULT_MODEL)
@_MODELS_DIR
@click.option("--system", default=None, metavar="TEXT", help="A system message opening the conversation.")
@click.option("--max-tokens", default=None, type=click.IntRange(1), help="Cap on each reply's tokens.  "
              "[default: the context left]")
@click.option("--temperature", default=None, type=click.FloatRange(0.0), help="Sampling temperature.  [default: 0.8]")
@click.option("--seed", default=None, type=click.IntRange(0), help="Sampling seed, for repeatable replies.")
@click.option("--n-ctx", default=4096, show_default=True, type=click.IntRange(16), help="Context in tokens.")
@click.option("--chat-template", default=None, metavar="NAME|FILE", callback=lambda c, p, v: _read_template(c, p, v),
              help="Chat template overriding the model's (as for 'skippy serve').")
@friendly_errors
def run(name: str, models_dirs: tuple[str, ...], system: str | None, max_tokens: int | None,
        temperature: float | None, seed: int | None, n_ctx: int, chat_template: str | None) -> None:
    """Chat with a model in the terminal, as 'ollama run' does.

    The model (a known name, pulled when missing; a GGUF in the cache or
    --models-dir by file name; or a GGUF path) runs in this process. Replies
    stream as they are generated; the conversation is kept until /clear.
    /set parameter NAME VALUE (temperature, top_p, top_k, num_predict, seed,
    stop...) and /set system TEXT change the next replies, /show shows them;
    /? lists the commands. Ctrl-C stops a reply (what it wrote stays in the
    conversation); Ctrl-D, /bye or Ctrl-C twice at the prompt leave. A
    message starting with three double quotes goes on until a line ending
    with three double quotes. Lines read from a pipe work too:
    'echo hi | skippy run'.
    """
    import logging
    import signal

    import trio

    from skippy import EngineConfig, open_engine
    from skippy.models import ensure_model, find_model, lookup

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    _quiet_llama_log()
    path = find_model(name, models_dirs)
    if not path.is_file():
        path = ensure_model(name)
    spec = lookup(name)

    async def session() -> None:
        config = EngineConfig(model=str(path), model_name=spec.name if spec else path.stem, n_ctx=n_ctx,
                              parallel=1, chat_template=chat_template)
        async with open_engine(config) as engine:
            if _isatty(sys.stdin):
                click.echo(f"{engine.model_id}: type /? for help, /bye to leave")
            info = (("name", engine.model_id), ("path", str(path)),
                    ("context", f"{engine.meta.n_ctx_seq} tokens (--n-ctx)"))
            with trio.open_signal_receiver(signal.SIGINT) as interrupts:  # Ctrl-C: chat_loop decides
                await chat_loop(engine, system=system, max_tokens=max_tokens, temperature=temperature, seed=seed,
                                readline=stdin_reader(), out=sys.stdout, interrupts=interrupts, model_info=info)

    try:
        trio.run(session)
    except (KeyboardInterrupt, BaseExceptionGroup) as exc:  # Ctrl-C while the model loads or unloads
        if isinstance(exc, BaseExceptionGroup) and exc.split(KeyboardInterrupt)[1] is not None:
            raise
        click.echo("", err=True)
        sys.exit(130)


@main.command(name="rpc-worker")
@click.option("--host", "-H", default="127.0.0.1", show_default=True, metavar="ADDRESS",
              help="Address to listen on. llama.cpp's RPC protocol has no authentication or encryption: keep "
                   "the loopback default, or bind an address of a trusted network only.")
@click.option("--port", "-p", default=50052, show_default=True, type=click.IntRange(1, 65535),
              help="TCP port to listen on (llama.cpp rpc-server's default).")
@click.option("--threads", "-t", default=None, type=click.IntRange(1), help="CPU threads  [default: all cores]")
@click.option("--device", "-d", default=None, metavar="DEV1,DEV2",
              help="Devices to serve, by llama.cpp name  [default: every GPU, else the CPU]")
@click.option("--cache", is_flag=True, default=False,
              help="Keep received tensors in a local file cache ($SKIPPY_HOME/rpc-cache; llama.cpp rpc-server's "
                   "-c): a server that loads the same model again sends hashes instead of the weights.")
def rpc_worker(host: str, port: int, threads: int | None, device: str | None, cache: bool) -> None:
    """Serve this machine's CPU (or GPU) to 'skippy serve --rpc HOST:PORT' (llama.cpp's RPC server).

    It runs llama.cpp's ggml_backend_rpc_start_server, as llama.cpp's rpc-server program does,
    until it is stopped (SIGINT/SIGTERM). One server uses a worker at a time. The worker must
    come from the same llama.cpp as the server (the protocol version is checked at start-up).
    """
    import signal

    from skippy.engine.runtime.backends import parse_devices, parse_endpoint, serve_rpc_worker
    from skippy.models import skippy_home

    try:
        parse_endpoint(f"{host}:{port}")
        devices = parse_devices(device)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if host not in ("127.0.0.1", "localhost"):
        click.echo(f"warning: listening on {host}: llama.cpp's RPC protocol has no authentication; anyone who "
                   "reaches this port can run code on this machine's devices. Use a trusted network only.", err=True)
    cache_dir = None
    if cache:
        cache_dir = str(skippy_home() / "rpc-cache")
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the server loop is in C: let Ctrl-C end the process
    try:
        serve_rpc_worker(host, port, threads=threads, device_names=devices, cache_dir=cache_dir)
    except (RuntimeError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


def _opt(name: str, *aliases: str, **kw):
    """A ``serve`` option that also reads ``SKIPPY_<NAME>`` from the environment (``aliases``: more names,
    such as llama-server's ``-m`` for ``--model``)."""
    env = "SKIPPY_" + name.split("/")[0].lstrip("-").replace("-", "_").upper()
    return click.option(name, *aliases, envvar=env, show_envvar=True, **{"show_default": True, **kw})


def _click_type(check: Any) -> Any:
    """The click type showing (and enforcing) what a setting's validator accepts; ``None``: plain text."""
    from skippy.engine.config import FloatRange, IntRange, OneOf

    for part in getattr(check, "_validators", ()):  # attrs.validators.and_(IntRange(...), extra check)
        if (kind := _click_type(part)) is not None:
            return kind
    if isinstance(check, IntRange):
        return click.IntRange(check.min, check.max)
    if isinstance(check, FloatRange):
        return click.FloatRange(check.min, check.max, min_open=check.min_open)
    if isinstance(check, OneOf):
        return click.Choice(list(check.choices))
    return None


def setting_option(field: attrs.Attribute) -> Callable[[F], F]:
    """The ``skippy serve`` option generated from a setting (an attrs field made by ``setting()``).

    Flag ``--n-ctx`` and environment variable ``SKIPPY_N_CTX`` for the field
    ``n_ctx``; the field's default, help text and metavar; a click type from
    its validator (``IntRange``/``FloatRange`` -> a click range,
    ``OneOf`` -> ``click.Choice``, ``IsBool`` -> a flag, or
    ``--x/--no-x`` when the default is on), and the field's aliases
    (llama-server's ``-np`` for ``--parallel``). A callback then runs the field's
    own validator, so the flag refuses exactly what the class refuses
    (e.g. ``nan``, which click's ranges let through), as a usage error
    (exit code 2) naming the flag.
    """
    import attrs

    from skippy.engine.config import IsBool, setting_info

    info = setting_info(field)
    assert info is not None and info.flag, field.name
    flag = "--" + field.name.replace("_", "-")
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    kw: dict[str, Any] = {"help": info.help, "show_default": info.show_default, "default": default}
    if isinstance(field.validator, IsBool):
        if field.default:
            flag = f"{flag}/--no-{flag[2:]}"
        else:
            kw["is_flag"] = True
    elif (kind := _click_type(field.validator)) is not None:
        kw["type"] = kind
    if info.metavar:
        kw["metavar"] = info.metavar

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            if field.validator is not None:
                field.validator(None, field, value)
        except (TypeError, ValueError) as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        return value

    return _opt(flag, *info.aliases, callback=check, **kw)


def _flag_fields(cls: type) -> list[attrs.Attribute]:
    """The fields of settings class ``cls`` that ``skippy serve`` turns into flags, in declaration order."""
    import attrs

    from skippy.engine.config import setting_info

    return [f for f in attrs.fields(cls) if (info := setting_info(f)) is not None and info.flag]


def _read_template(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """``--chat-template NAME|FILE`` -> the template's text: a file's (closed before the server starts),
    else llama.cpp's built-in template of that name (``chatml``, ``llama3``...)."""
    if path is None:
        return None
    if not Path(path).exists():
        from skippy.engine.chat.builtin import builtin_template

        try:
            return builtin_template(path)
        except KeyError as exc:
            raise click.BadParameter(exc.args[0], ctx=ctx, param=param) from None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path!r}: {exc}", ctx=ctx, param=param) from None


def _parse_template_kwargs(ctx: click.Context, param: click.Parameter, text: str | None) -> dict:
    """``--chat-template-kwargs JSON`` -> a dict of template variables (``{}`` when not given)."""
    if not text:
        return {}
    try:
        kwargs = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", ctx=ctx, param=param) from None
    if not isinstance(kwargs, dict):
        raise click.BadParameter("must be a JSON object", ctx=ctx, param=param)
    return kwargs


def _split_origins(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    from skippy.http.settings import split_origins

    return split_origins(values)


def _split_hosts(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """``--host`` values, each possibly comma-separated (``127.0.0.1,::1``), as one tuple without duplicates."""
    hosts = [h.strip() for value in values for h in value.split(",") if h.strip()]
    if not hosts:
        raise click.BadParameter("give at least one address", ctx=ctx, param=param)
    return tuple(dict.fromkeys(hosts))


class _OneEnvValue(click.ParamType):
    """Text whose environment variable is one value, not split at spaces (a GGUF path may hold spaces)."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value

    def split_envvar_value(self, rv: str) -> list[str]:
        return [rv] if rv else []


_ONE_ENV_VALUE = _OneEnvValue()


def _not_nan(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if value != value:
        raise click.BadParameter("give a number of seconds", ctx=ctx, param=param)
    return value


LLAMA_SERVER_NOTE = ("skippy serve takes llama-server's flags -m, -c/--ctx-size, -np, -t, -fa, --host, --port, "
                     "--api-key, --api-key-file, --chat-template-file, --jinja, --metrics, --slots, --no-webui, "
                     "-ngl, -sm, -mg, -ts, -dev, --rpc, --ssl-key-file, --ssl-cert-file and refuses the others "
                     "rather than ignore them; "
                     "see 'skippy serve --help'")


class ServeCommand(SkippyCommand):
    """``skippy serve``'s click command: an unknown option is a usage error naming it as it was typed.

    click reads an unknown single-dash option such as llama-server's ``-ngl`` as the short option
    ``-n`` (``No such option '-n'``), and ``-cb`` as ``-c b`` (a bad ``--ctx-size`` value). Like
    llama-server's own parser, this one takes only whole option names: any word that starts with
    ``-`` and is no option name (nor an option's value, nor a number) is refused by name, with a
    note that skippy refuses the llama-server flags it does not support rather than ignore them.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        import difflib

        options = {name: p for p in self.get_params(ctx) if isinstance(p, click.Option)
                   for name in (*p.opts, *p.secondary_opts)}
        takes_value = False
        for arg in args:
            if takes_value:
                takes_value = False
                continue
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            option = options.get(name)
            if option is not None:
                takes_value = "=" not in arg and not option.is_flag and option.nargs > 0
            elif arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
                raise click.NoSuchOption(name, message=f"No such option '{name}' ({LLAMA_SERVER_NOTE}).",
                                         possibilities=difflib.get_close_matches(name, options), ctx=ctx)
        return super().parse_args(ctx, args)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _serve_options(fn: F) -> F:
    """Every ``skippy serve`` option, in ``--help`` order.

    Names are settings of :class:`~skippy.engine.config.EngineConfig` or
    :class:`~skippy.http.settings.ServerSettings`, whose options are
    generated from the fields (:func:`setting_option`); the others are the
    few explicit adapters: a flag that is not one field as it stands (a
    file read into text, JSON, keys from a flag and a file, comma-separated
    origins, llama-server's total ``--ctx-size``) or not a setting of either
    class (the model to pull, the listen addresses, logging, the llama-server
    flags accepted for compatibility). A flag field missing from this list
    still gets its option, at the end.
    """
    from skippy.engine.config import EngineConfig
    from skippy.http.settings import ServerSettings

    layout: list[Any] = [
        _opt("--model", "-m", multiple=True, default=(DEFAULT_MODEL,), type=_ONE_ENV_VALUE,
             help="Model name from the cache (pulled when missing) or a GGUF path. Repeat it to serve several "
                  "models: the request's model field picks one; the first is the default, loaded at start, "
                  "the others on their first request (the environment variable names one model)."),
        _opt("--alias", multiple=True, metavar="NAME", show_default=False,
             help="Another name the model answers to and /v1/models lists (repeatable; the environment "
                  "variable takes space-separated names). Requests may name any model when one is served; "
                  "with several, the aliases name the first."),
        _opt("--models-dir", "models_dirs", multiple=True, metavar="DIR", show_default=False,
             type=click.Path(exists=True, file_okay=False, path_type=str),
             help="Also serve every *.gguf file of this directory (repeatable; ':'-separated in the environment "
                  "variable), each under its file name without .gguf, as llama-server's --models-dir; without "
                  "--model, the first of them is the default."),
        _opt("--max-loaded", default=4, type=click.IntRange(0),
             help="Most models loaded at a time when several are served; loading one more first unloads the "
                  "least recently used, once its running requests end (llama-server's --models-max; 0: no "
                  "limit)."),
        _opt("--keep-alive", default=-1.0, type=float, metavar="SECONDS", callback=_not_nan,
             help="Unload a model idle for this many seconds; the next request loads it again (Ollama's "
                  "keep_alive; 0: as soon as its requests end; negative: never)."),
        _opt("--host", multiple=True, default=("127.0.0.1",), metavar="ADDRESS", callback=_split_hosts,
             help="Address to listen on; several comma-separated or repeated (e.g. '127.0.0.1,::1')."),
        _opt("--port", default=8080, type=click.IntRange(0, 65535), help="TCP port to listen on."),
        "n_ctx",
        _opt("--ctx-size", "-c", default=None, type=click.IntRange(16),
             help="llama-server's -c: total context of all slots in tokens; each sequence gets "
                  "ctx-size / parallel (exclusive with --n-ctx, which is per sequence)."),
        "parallel", "threads", "flash_attn", "cache_type_k", "cache_type_v", "kv_unified", "swa_full",
        "n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "device", "rpc",
        _opt("--chat-template", "--chat-template-file", default=None, metavar="NAME|FILE", callback=_read_template,
             help="Chat template overriding the model's: a jinja2 file, or one of llama.cpp's built-in template "
                  "names (chatml, llama3, mistral-v7, gemma, phi3, command-r, deepseek3, ...)."),
        _opt("--chat-template-kwargs", default=None, metavar="JSON", callback=_parse_template_kwargs,
             help='Default template variables as a JSON object, e.g. \'{"enable_thinking": false}\'; '
                  'requests override them.'),
        _opt("--jinja", is_flag=True, default=False,
             help="Accepted for llama-server command lines: skippy always renders chat templates with jinja2."),
        "force_tool_emulation", "step_tokens", "clamp_max_tokens", "prefix_cache", "ctx_checkpoints", "cache_ram",
        "spec_ngram", "scheduler_steps", "backend_sampling", "hook_policy",
        "hook_url",
        "hook_timeout", "hook_fail_closed", "hooks_default_on", "signal_window", "high_entropy_threshold",
        "max_queue", "embeddings", "pooling", "embeddings_batch",
        _opt("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]),
             help="Log level."),
        _opt("--log-format", default="text", type=click.Choice(["text", "json"]),
             help="Log lines as text, or one JSON object per line (python-json-logger)."),
        _opt("--log-file", default=None, type=click.Path(dir_okay=False, writable=True), metavar="PATH",
             help="Also append the log lines to this file."),
        _opt("--api-key", multiple=True, metavar="KEY", show_default=False,
             help="Accepted API key (repeatable; the environment variable takes space-separated keys). "
                  "Requests must send 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'; only /health stays "
                  "open. Prefer --api-key-file: other local users can read command lines."),
        _opt("--api-key-file", default=None, type=click.Path(exists=True, dir_okay=False),
             help="File of accepted API keys, one per line ('#' starts a comment); adds to --api-key."),
        _opt("--cors-origins", multiple=True, metavar="ORIGINS", show_default=False, callback=_split_origins,
             help="Browser origins allowed by CORS, comma-separated or repeated, e.g. "
                  "'https://app.example.com'; 'localhost' allows any localhost, 127.0.0.1 or [::1] origin "
                  "(any port); '*' allows any. [default: none, CORS off]"),
        "max_body_bytes", "max_messages", "max_tools", "max_chat_template_bytes", "max_grammar_bytes",
        "request_timeout", "shutdown_grace", "sse_ping_interval", "strict_fields", "responses_store_size",
        "metrics", "slots",
        "ssl_key_file", "ssl_cert_file",
        _opt("--no-webui", is_flag=True, default=False,
             help="Do not serve the web playground at GET / (it answers 404), as llama-server's --no-webui."),
    ]
    fields = {f.name: f for f in _flag_fields(EngineConfig) + _flag_fields(ServerSettings)}
    placed = [item for item in layout if isinstance(item, str)]
    layout += [name for name in fields if name not in placed]
    for item in reversed(layout):
        fn = (setting_option(fields[item]) if isinstance(item, str) else item)(fn)
    return fn


def _api_keys(api_key: tuple[str, ...], api_key_file: str | None) -> tuple[str, ...]:
    """``--api-key`` values plus the keys of ``--api-key-file``, without duplicates, checked like ServerSettings."""
    import attrs

    from skippy.http.settings import ServerSettings, read_api_key_file

    keys = list(api_key)
    if api_key_file:
        try:
            keys += read_api_key_file(api_key_file)
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--api-key-file") from None
    keys = tuple(dict.fromkeys(keys))
    field = attrs.fields(ServerSettings).api_keys
    try:
        field.validator(None, field, keys)  # type: ignore[misc]
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--api-key") from None
    return keys


def _context_per_sequence(ctx: click.Context, ctx_size: int | None, options: dict[str, Any]) -> None:
    """Turn llama-server's ``-c/--ctx-size`` (all slots) into ``n_ctx`` (one sequence) in ``options``.

    llama-server gives each of its ``-np`` slots ``ctx-size / np`` tokens; so does this (a flag beats
    ``SKIPPY_N_CTX``). Raises a usage error when ``--n-ctx`` is on the command line too, or when a
    sequence would get fewer than 16 tokens.
    """
    if ctx_size is None:
        return
    if ctx.get_parameter_source("n_ctx") is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("give either --ctx-size/-c (total context of all slots, llama-server's meaning) or "
                               "--n-ctx (context of each sequence), not both", ctx=ctx)
    per_sequence = ctx_size // options["parallel"]
    if per_sequence < 16:
        raise click.BadParameter(f"{ctx_size} tokens over {options['parallel']} slots leaves {per_sequence} per "
                                 "sequence; at least 16 are needed", ctx=ctx, param_hint="'--ctx-size' / '-c'")
    options["n_ctx"] = per_sequence


@main.command(cls=ServeCommand)
@_serve_options
@friendly_errors
def serve(model: tuple[str, ...], alias: tuple[str, ...], models_dirs: tuple[str, ...], max_loaded: int,
          keep_alive: float, host: tuple[str, ...], port: int, ctx_size: int | None,
          chat_template: str | None, chat_template_kwargs: dict, jinja: bool, log_level: str, log_format: str,
          log_file: str | None, api_key: tuple[str, ...], api_key_file: str | None, cors_origins: tuple[str, ...],
          no_webui: bool, **options: Any) -> None:
    """Serve the OpenAI-compatible API (``/v1/chat/completions`` and friends).

    The model is pulled into the cache first when it is a known name that is
    not there yet. ``/health`` answers 503 while the model loads, then 200.
    Several models (``--model`` repeated, ``--models-dir``) are routed by the
    request's ``model``, loaded on demand, unloaded by ``--max-loaded`` and
    ``--keep-alive``.
    llama-server command lines work as they are (``-m``, ``-c``, ``-np``,
    ``-t``, ``-fa``, ``--jinja``...); its other flags are refused by name.
    """
    import trio

    from skippy.engine.config import EngineConfig, check_cache_types
    from skippy.http.logs import configure_logging
    from skippy.http.serve import serve as run_server
    from skippy.http.settings import ServerSettings
    from skippy.models import ensure_model, lookup

    ctx = click.get_current_context()
    _context_per_sequence(ctx, ctx_size, options)
    if (options.get("ssl_key_file") is None) != (options.get("ssl_cert_file") is None):
        raise click.UsageError("--ssl-key-file and --ssl-cert-file go together", ctx=ctx)
    engine_options = {f.name: options.pop(f.name) for f in _flag_fields(EngineConfig)}
    settings = ServerSettings(api_keys=_api_keys(api_key, api_key_file), cors_origins=cors_origins,
                              webui=not no_webui, **options)
    configure_logging(log_level, log_format, log_file)
    try:  # the check across flags (a quantized V cache without flash attention), before any download
        check_cache_types(engine_options["cache_type_v"], engine_options["flash_attn"])
    except ValueError:
        click.echo(f"error: --cache-type-v {engine_options['cache_type_v']} (a quantized V cache) needs "
                   f"--flash-attn auto or on (llama.cpp refuses it without flash attention)", err=True)
        sys.exit(1)
    models: list[tuple[Path, str]] = []  # (GGUF, id): --model's (pulled when missing), then --models-dir's
    given = ctx.get_parameter_source("model") is not click.core.ParameterSource.DEFAULT
    for name in model if given or not models_dirs else ():
        path = ensure_model(name)
        spec = lookup(name)
        models.append((path, spec.name if spec else path.stem))
    for directory in models_dirs:
        files = sorted((p for p in Path(directory).expanduser().iterdir()
                        if p.suffix.lower() == ".gguf" and p.is_file()), key=lambda p: p.name.casefold())
        models += [(p, p.stem) for p in files]  # not checked here: one that cannot load answers 503
    if not models:
        raise ModelError(f"no .gguf file in --models-dir {', '.join(models_dirs)}")
    seen: set[Path] = set()  # a file named twice (-m x -m x, or -m and --models-dir) is served once
    models = [m for m in models if not (m[0].resolve() in seen or seen.add(m[0].resolve()))]
    ids = [i.casefold() for _, i in models]
    if len(set(ids)) != len(ids):
        twice = sorted({i for _, i in models if ids.count(i.casefold()) > 1})
        raise ModelError(f"two models would be served as {', '.join(twice)}; give each model once")
    configs = [EngineConfig(model=str(path), model_name=model_id, chat_template=chat_template,
                            chat_template_kwargs=chat_template_kwargs, model_alias=alias if i == 0 else (),
                            verbose=log_level == "debug", **engine_options)
               for i, (path, model_id) in enumerate(models)]
    sys.exit(trio.run(lambda: run_server(configs[0], host=host, port=port, settings=settings,
                                         more_models=configs[1:], max_loaded=max_loaded, keep_alive=keep_alive)))


if __name__ == "__main__":  # pragma: no cover
    main()
