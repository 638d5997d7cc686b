"""What every ``skippy`` command shares: the click group :func:`main` that the commands register on,
the help formatter (:class:`PlainHelpFormatter`: reStructuredText literals shown as ``'x'``), the
error wrapper :func:`friendly_errors` (a :class:`~skippy.models.ModelError` is printed as
``error: <message>`` on stderr with exit code 1 and no traceback) and small helpers of the model
commands (``--models-dir``, sizes, llama.cpp's log kept quiet).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from skippy.models import ModelError

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

    return cast(F, wrapper)  # takes and returns what fn does


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


def _quiet_llama_log() -> None:
    """``list``/``show`` read GGUFs with llama.cpp: keep its load-time warnings off the terminal."""
    import logging

    logging.getLogger("skippy.runtime").setLevel(logging.ERROR)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""  # pragma: no cover


_MODELS_DIR = click.option("--models-dir", "models_dirs", multiple=True, metavar="DIR",
                           type=click.Path(file_okay=False), help="Also a directory of GGUF files (repeatable).")


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
