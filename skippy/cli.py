"""The ``skippy`` command line.

``skippy`` is a click group; each subcommand is a ``@main.command()``
function below. Errors a person can act on (:class:`~skippy.models.ModelError`)
are printed as ``error: <message>`` on stderr with exit code 1 and no
traceback.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

import click

from skippy.models import DEFAULT_MODEL, ModelError, pull as pull_model

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="skippy", message="%(prog)s %(version)s")
def main() -> None:
    """skippy: an OpenAI-compatible LLM inference server on trio + llama.cpp."""


@main.command()
@click.argument("model", default=DEFAULT_MODEL, metavar="[MODEL]")
@click.option("-q", "--quiet", is_flag=True, help="Print only the model path (no progress).")
@friendly_errors
def pull(model: str, quiet: bool) -> None:
    """Download MODEL into the model cache and verify its SHA-256.

    MODEL is a known model name (default: SmolLM2-135M-Instruct). The cache
    is $SKIPPY_HOME/models (default ~/.cache/skippy/models). Does nothing if
    the model is already present and intact. Prints the model's path on
    stdout; progress goes to stderr.
    """
    path = pull_model(model, progress=not quiet)
    click.echo(str(path))


if __name__ == "__main__":  # pragma: no cover
    main()
