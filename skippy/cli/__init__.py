"""The ``skippy`` command line.

``skippy`` is a click group (:func:`main`, the ``[project.scripts]`` entry point; ``python -m
skippy.cli`` runs it too); each subcommand is a ``@main.command()`` function of one module, imported
here so that it registers:

- :mod:`~skippy.cli.common`: the group, the help formatter, the error wrapper (errors a person can act
  on, :class:`~skippy.models.ModelError`, are printed as ``error: <message>`` on stderr with exit
  code 1 and no traceback) and helpers the commands share;
- :mod:`~skippy.cli.manage`: ``skippy pull``, ``list``, ``show`` and ``rm``;
- :mod:`~skippy.cli.chat`: ``skippy run``, whose conversation (commands, multi-line messages, Ctrl-C)
  is :mod:`~skippy.cli.repl`;
- :mod:`~skippy.cli.serving`: ``skippy serve``, its options generated from the settings by
  :mod:`~skippy.cli.flags`;
- :mod:`~skippy.cli.rpc`: ``skippy rpc-worker``.

Every public name is re-exported here: ``from skippy.cli import X`` is the import to use.
"""

from skippy.cli.chat import run
from skippy.cli.common import (
    PlainHelpFormatter,
    SkippyCommand,
    SkippyContext,
    SkippyGroup,
    friendly_errors,
    main,
    plain_help,
)
from skippy.cli.flags import setting_option
from skippy.cli.manage import list_command, pull, rm, show
from skippy.cli.repl import (
    RUN_HELP,
    RUN_PARAMETERS,
    SET_HELP,
    SHOW_HELP,
    ChatState,
    MessageReader,
    RunParameter,
    chat_loop,
    read_message,
    run_command,
    set_parameter,
    stdin_reader,
)
from skippy.cli.rpc import rpc_worker
from skippy.cli.serving import LLAMA_SERVER_NOTE, ServeCommand, serve

__all__ = [
    "LLAMA_SERVER_NOTE",
    "RUN_HELP",
    "RUN_PARAMETERS",
    "SET_HELP",
    "SHOW_HELP",
    "ChatState",
    "MessageReader",
    "PlainHelpFormatter",
    "RunParameter",
    "ServeCommand",
    "SkippyCommand",
    "SkippyContext",
    "SkippyGroup",
    "chat_loop",
    "friendly_errors",
    "list_command",
    "main",
    "plain_help",
    "pull",
    "read_message",
    "rm",
    "rpc_worker",
    "run",
    "run_command",
    "serve",
    "set_parameter",
    "setting_option",
    "show",
    "stdin_reader",
]
