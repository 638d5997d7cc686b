"""The ``skippy`` command line.

``skippy`` is a click group; each subcommand is a ``@main.command()``
function below. Errors a person can act on (:class:`~skippy.models.ModelError`)
are printed as ``error: <message>`` on stderr with exit code 1 and no
traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from skippy.models import DEFAULT_MODEL, ModelError
from skippy.models import pull as pull_model

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


def _opt(name: str, **kw):
    """A ``serve`` option that also reads ``SKIPPY_<NAME>`` from the environment."""
    env = "SKIPPY_" + name.split("/")[0].lstrip("-").replace("-", "_").upper()
    return click.option(name, envvar=env, show_envvar=True, **{"show_default": True, **kw})


def _click_type(check: Any) -> Any:
    """The click type showing (and enforcing) what a setting's validator accepts; ``None``: plain text."""
    from skippy.engine.config import FloatRange, IntRange, OneOf

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
    ``--x/--no-x`` when the default is on). A callback then runs the field's
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

    return _opt(flag, callback=check, **kw)


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


def _serve_options(fn: F) -> F:
    """Every ``skippy serve`` option, in ``--help`` order.

    Names are settings of :class:`~skippy.engine.config.EngineConfig` or
    :class:`~skippy.http.settings.ServerSettings`, whose options are
    generated from the fields (:func:`setting_option`); the others are the
    few explicit adapters: a flag that is not one field as it stands (a
    file read into text, JSON, keys from a flag and a file, comma-separated
    origins) or not a setting of either class (the model to pull, the listen
    address, the log level). A flag field missing from this list still gets
    its option, at the end.
    """
    from skippy.engine.config import EngineConfig
    from skippy.http.settings import ServerSettings

    layout: list[Any] = [
        _opt("--model", default=DEFAULT_MODEL, help="Model name from the cache (pulled when missing) or a GGUF path."),
        _opt("--host", default="127.0.0.1", help="Address to listen on."),
        _opt("--port", default=8080, type=click.IntRange(0, 65535), help="TCP port to listen on."),
        "n_ctx", "parallel", "threads", "flash_attn",
        _opt("--chat-template", default=None, metavar="NAME|FILE", callback=_read_template,
             help="Chat template overriding the model's: a jinja2 file, or one of llama.cpp's built-in template "
                  "names (chatml, llama3, mistral-v7, gemma, phi3, command-r, deepseek3, ...)."),
        _opt("--chat-template-kwargs", default=None, metavar="JSON", callback=_parse_template_kwargs,
             help='Default template variables as a JSON object, e.g. \'{"enable_thinking": false}\'; '
                  'requests override them.'),
        "force_tool_emulation", "step_tokens", "clamp_max_tokens", "prefix_cache", "hook_policy", "hook_url",
        "hook_timeout", "hook_fail_closed", "hooks_default_on", "signal_window", "high_entropy_threshold",
        "max_queue",
        _opt("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]),
             help="Log level."),
        _opt("--api-key", multiple=True, metavar="KEY", show_default=False,
             help="Accepted API key (repeatable; the environment variable takes space-separated keys). "
                  "Requests must send 'Authorization: Bearer KEY'; only /health stays open. "
                  "Prefer --api-key-file: other local users can read command lines."),
        _opt("--api-key-file", default=None, type=click.Path(exists=True, dir_okay=False),
             help="File of accepted API keys, one per line ('#' starts a comment); adds to --api-key."),
        _opt("--cors-origins", multiple=True, metavar="ORIGINS", show_default=False, callback=_split_origins,
             help="Browser origins allowed by CORS, comma-separated or repeated, e.g. "
                  "'https://app.example.com'; '*' allows any. [default: none, CORS off]"),
        "max_body_bytes", "max_messages", "max_tools", "max_chat_template_bytes", "max_grammar_bytes",
        "request_timeout", "shutdown_grace",
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


@main.command()
@_serve_options
@friendly_errors
def serve(model: str, host: str, port: int, chat_template: str | None, chat_template_kwargs: dict, log_level: str,
          api_key: tuple[str, ...], api_key_file: str | None, cors_origins: tuple[str, ...],
          **options: Any) -> None:
    """Serve the OpenAI-compatible API (``/v1/chat/completions`` and friends).

    The model is pulled into the cache first when it is a known name that is
    not there yet. ``/health`` answers 503 while the model loads, then 200.
    """
    import logging

    import trio

    from skippy.engine.config import EngineConfig
    from skippy.http.serve import serve as run_server
    from skippy.http.settings import ServerSettings
    from skippy.models import ensure_model, lookup

    engine_options = {f.name: options.pop(f.name) for f in _flag_fields(EngineConfig)}
    settings = ServerSettings(api_keys=_api_keys(api_key, api_key_file), cors_origins=cors_origins, **options)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = ensure_model(model)
    spec = lookup(model)
    config = EngineConfig(model=str(path), model_name=spec.name if spec else path.stem, chat_template=chat_template,
                          chat_template_kwargs=chat_template_kwargs, verbose=log_level == "debug", **engine_options)
    sys.exit(trio.run(lambda: run_server(config, host=host, port=port, settings=settings)))


if __name__ == "__main__":  # pragma: no cover
    main()
