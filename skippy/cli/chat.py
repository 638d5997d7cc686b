"""``skippy run``: chat with a model in the terminal (the model runs in this process; the
conversation is :mod:`skippy.cli.repl`'s).
"""

from __future__ import annotations

import os
import sys
from contextlib import AsyncExitStack
from typing import NoReturn

import click

from skippy.cli.common import _MODELS_DIR, _isatty, _quiet_llama_log, friendly_errors, main
from skippy.cli.flags import _read_template
from skippy.cli.repl import chat_loop, stdin_reader
from skippy.engine.errors import EngineError
from skippy.models import DEFAULT_MODEL


@main.command()
@click.argument("name", metavar="[MODEL]", default=DEFAULT_MODEL)
@click.argument("prompt", nargs=-1, metavar="[PROMPT]...")
@_MODELS_DIR
@click.option("--system", default=None, metavar="TEXT", help="A system message opening the conversation.")
@click.option("--max-tokens", default=None, type=click.IntRange(1), help="Cap on each reply's tokens.  "
              "[default: the context left]")
@click.option("--temperature", default=None, type=click.FloatRange(0.0), help="Sampling temperature.  [default: 0.8]")
@click.option("--seed", default=None, type=click.IntRange(0), help="Sampling seed, for repeatable replies.")
@click.option("--n-ctx", default=4096, show_default=True, type=click.IntRange(16),
              help="Context in tokens (rounded up to a multiple of 256, as llama.cpp pads it).")
@click.option("--chat-template", default=None, metavar="NAME|FILE", callback=lambda c, p, v: _read_template(c, p, v),
              help="Chat template overriding the model's (as for 'skippy serve').")
@friendly_errors
def run(name: str, prompt: tuple[str, ...], models_dirs: tuple[str, ...], system: str | None,
        max_tokens: int | None, temperature: float | None, seed: int | None, n_ctx: int,
        chat_template: str | None) -> None:
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

    With a PROMPT (its words joined by spaces) it answers that once and
    exits, as 'ollama run MODEL PROMPT' does; text piped in then goes
    before it: 'cat notes.txt | skippy run smollm2 Summarize this'.
    """
    import logging
    import signal

    import trio

    from skippy import EngineConfig, open_engine
    from skippy.models import ensure_model, find_model, lookup, resolve_alias

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    _quiet_llama_log()
    path = find_model(name, models_dirs)
    if not path.is_file():
        path = ensure_model(name)
    spec = lookup(resolve_alias(name))
    once = " ".join(prompt) if prompt else None
    if once is not None and not _isatty(sys.stdin):  # ollama run: piped input, then the prompt
        once = " ".join(t for t in (sys.stdin.read(), once) if t)

    async def session() -> bool:
        config = EngineConfig(model=str(path), model_name=spec.name if spec else path.stem, n_ctx=n_ctx,
                              parallel=1, chat_template=chat_template)
        async with AsyncExitStack() as stack:
            try:  # the model file or a setting the engine refuses (a template that does not compile)
                engine = await stack.enter_async_context(open_engine(config))
            except (RuntimeError, ValueError, EngineError) as exc:
                click.echo(f"error: could not start the engine: {exc}", err=True)
                return False
            if once is None and _isatty(sys.stdin):
                click.echo(f"{engine.model_id}: type /? for help, /bye to leave")
            info = (("name", engine.model_id), ("path", str(path)),
                    ("context", f"{engine.meta.n_ctx_seq} tokens (--n-ctx)"))
            with trio.open_signal_receiver(signal.SIGINT) as interrupts:  # Ctrl-C: chat_loop decides
                return await chat_loop(engine, system=system, max_tokens=max_tokens, temperature=temperature,
                                       seed=seed, readline=stdin_reader(), out=sys.stdout, interrupts=interrupts,
                                       model_info=info, prompt=once)

    try:
        ok = trio.run(session)
    except BaseException as exc:
        leaves = _leaves(exc)
        if all(isinstance(e, BrokenPipeError) for e in leaves):  # the reader of a pipe went away ('| head')
            _pipe_gone()
        if all(isinstance(e, KeyboardInterrupt) for e in leaves):  # Ctrl-C while the model loads or unloads
            click.echo("", err=True)
            sys.exit(130)
        raise
    if not ok:
        sys.exit(1)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc`` (a trio nursery's group, nested or not), or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _pipe_gone() -> NoReturn:
    """Exit 1 quietly once stdout's reader is gone, as Python's documentation of SIGPIPE advises: stdout
    pointed at /dev/null, so the interpreter's own flush at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)
