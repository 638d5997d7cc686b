"""How settings become command-line options: :func:`setting_option` generates a ``skippy serve``
option from a ``setting()`` field of :class:`~skippy.engine.config.EngineConfig` or
:class:`~skippy.http.settings.ServerSettings` (flag, environment variable, default, help, click type
from its validator); :func:`_opt` makes the explicit ones; and the option callbacks and types the
adapters use (a chat template file or name, JSON template variables, hosts, CORS origins).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from skippy.cli.common import F

if TYPE_CHECKING:
    import attrs


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
    if isinstance(check, FloatRange):  # unbounded: a plain float (the validator refuses NaN, infinities)
        if check.min is None and check.max is None:
            return click.FLOAT
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
    ``--x/--no-x`` when the default is on; a ``file`` setting: a file that must
    exist, as ``--lora``'s ``click.Path``), and the field's aliases
    (llama-server's ``-np`` for ``--parallel``). A callback then runs the field's
    own validator, so the flag refuses exactly what the class refuses
    (e.g. ``nan``, which click's ranges let through), as a usage error
    (exit code 2) naming the flag.
    """
    from skippy.engine.config import FACTORY, IsBool, setting_info

    info = setting_info(field)
    assert info is not None and info.flag, field.name
    flag = "--" + field.name.replace("_", "-")
    default = field.default
    if isinstance(default, FACTORY):
        default = default.factory()
    kw: dict[str, Any] = {"help": info.help, "show_default": info.show_default, "default": default}
    if isinstance(field.validator, IsBool):
        if field.default:
            flag = f"{flag}/--no-{flag[2:]}"
        else:
            kw["is_flag"] = True
    elif info.file:
        kw["type"] = click.Path(exists=True, dir_okay=False, path_type=str)
    elif (kind := _click_type(field.validator)) is not None:
        kw["type"] = kind
    if info.metavar:
        kw["metavar"] = info.metavar
    if info.multiple:  # a repeatable flag: click gives the tuple of its values
        kw["multiple"] = True

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
    from skippy.http.settings import ServerSettings, split_origins

    origins = split_origins(values)
    try:
        ServerSettings(cors_origins=origins)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return origins


def _aliases(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """``--alias`` names: not empty, not only space (the environment variable splits on space)."""
    if any(not v.strip() for v in values):
        raise click.BadParameter("an alias must name the model: not empty or only space", ctx=ctx, param=param)
    return values


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
