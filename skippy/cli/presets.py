"""``skippy serve --models-preset FILE``: per-model settings from an INI file (llama-server's router presets).

The file (llama-server's format)::

    version = 1            ; optional, before any section

    [*]                    ; every model's defaults
    n-gpu-layers = 99

    [SmolLM2-135M-Instruct]
    ctx-size = 8192        ; a key is a `skippy serve` flag without its dashes, long or short (c = 8192)
    parallel = 8

    [coder]
    model = /models/qwen2.5-coder-1.5b-q8_0.gguf   ; a model the command line does not name: this section adds it
    chat-template = chatml
    mmproj = /models/qwen.mmproj.gguf
    load-on-startup = true

A section names a served model (its id, as ``--model`` / ``--models-dir`` give it) or, with a ``model``
key (a GGUF path or a known model name), adds one served as the section's name. Precedence, as
llama-server: the command line (and ``SKIPPY_*`` variables) over the model's section over ``[*]`` over
the defaults; ``c``/``ctx-size`` and ``n-ctx`` spell one setting, the context, and the higher source's
spelling wins. Keys are the per-model flags: every engine setting (context, parallel, template,
projector, cache types, offload, sampling defaults...), ``chat-template``, ``chat-template-kwargs``,
``alias``, ``lora`` and ``lora-scaled`` (this model's adapters, the ``lora`` ones first; ``FILE SCALE``
per line), ``jinja`` (accepted), and ``load-on-startup`` (load the model when the server starts instead
of at its first request). A boolean is ``true``/``false`` (``1``/``0``, ``on``/``off``); ``no-mmap = true``
is ``mmap = false``. A repeated flag takes one value per line. Keys may keep their dashes (``-np = 3``).

Errors (:class:`PresetError`, a start-up error naming the file, the section and the key): a file that
cannot be read or parsed, another ``version``, an unknown key (with the closest flag), a server-wide flag
(``port``, ``api-key``...), a value its flag refuses, both spellings of the context in one section, a
section naming no served model and giving no ``model``. Nothing loads before the whole file is checked.
"""

from __future__ import annotations

import configparser
import difflib
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import attrs
import click

#: the flags of `skippy serve` a preset may set besides the engine settings (by parameter name)
MODEL_PARAMS = frozenset({"chat_template", "chat_template_kwargs", "alias", "jinja", "ctx_size", "lora",
                          "lora_scaled"})
#: the parameters that are two spellings of one setting (each -> the other): llama-server's total context
#: ``c``/``ctx-size`` and the per-sequence ``n-ctx``; the higher source's spelling wins, one source gives one
SAME_SETTING = {"ctx_size": "n_ctx", "n_ctx": "ctx_size"}
#: preset-only keys
LOAD_ON_STARTUP = "load-on-startup"
_TOP = "__top__"


class PresetError(click.ClickException):
    """A preset file that cannot be used; the message names the file, section and key."""


@attrs.frozen
class Preset:
    """One section's settings: ``options`` by `skippy serve` parameter name (converted as the flag would
    be), ``model`` (the ``model`` key: a path or name, ``None`` for a served model's section) and
    ``load_on_startup``."""

    name: str
    options: dict[str, Any]
    model: str | None = None
    load_on_startup: bool = False


@attrs.frozen
class Presets:
    """The file's ``[*]`` section (``defaults``) and its model sections in file order."""

    path: Path
    defaults: Preset
    models: tuple[Preset, ...]

    def get(self, model_id: str) -> Preset | None:
        """The section of ``model_id`` (case-insensitive), else ``None``."""
        key = model_id.casefold()
        return next((p for p in self.models if p.name.casefold() == key), None)


def _names(param: click.Parameter) -> dict[str, bool]:
    """The keys that set ``param`` -> whether the key is a ``--no-x`` form (sets the flag false)."""
    out: dict[str, bool] = {}
    for opt in getattr(param, "opts", ()):
        out[opt.lstrip("-")] = False
    for opt in getattr(param, "secondary_opts", ()):
        out[opt.lstrip("-")] = True
    return out


def read_presets(path: str | Path, command: click.Command, ctx: click.Context,
                 engine_params: Iterable[str]) -> Presets:
    """Parse and check the preset file ``path`` against ``command``'s parameters (``engine_params``: the
    names of the per-model engine settings). Raises :class:`PresetError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PresetError(f"--models-preset {path}: cannot be read: {exc}") from None
    parser = configparser.ConfigParser(interpolation=None, default_section="\x00", strict=True,
                                       comment_prefixes=("#", ";"), inline_comment_prefixes=(";", "#"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys as written (flags are case-sensitive)
    try:
        parser.read_string(f"[{_TOP}]\n" + text, source=str(path))
    except configparser.DuplicateOptionError as exc:
        line = (exc.lineno or 1) - 1  # the file's own numbering (a section line is put before it)
        where = "before the first section" if exc.section == _TOP else f"in [{exc.section}]"
        repeated = any(exc.option in _names(p) and (getattr(p, "multiple", False) or p.nargs > 1)
                       for p in command.params)
        raise PresetError(f"--models-preset {path}: line {line}: {exc.option} is set twice {where}"
                          + (f"; a flag that takes several values has them one per line under its key, the later "
                             f"ones indented (`{exc.option} = a` then `    b`)" if repeated else "")) from None
    except configparser.Error as exc:
        message = re.sub(r"\[line\s+(\d+)\]", lambda m: f"[line {int(m.group(1)) - 1}]",
                         str(exc).replace(f"[{_TOP}]", ""))  # the file's own line numbers
        raise PresetError(f"--models-preset {path}: not an INI file llama-server would read: {message}") from None
    top = dict(parser[_TOP])
    version = top.pop("version", "1")
    if version.strip() != "1":
        raise PresetError(f"--models-preset {path}: version {version!r}: this skippy reads version 1")
    if top:
        raise PresetError(f"--models-preset {path}: {', '.join(sorted(top))} before the first section: put "
                          "settings every model shares in [*]")
    per_model = set(engine_params) | MODEL_PARAMS
    keys: dict[str, tuple[click.Parameter, bool]] = {}
    server_wide: set[str] = set()
    for param in command.params:
        for key, negated in _names(param).items():
            if param.name in per_model:
                keys[key] = (param, negated)
            else:
                server_wide.add(key)
    sections = [s for s in parser.sections() if s != _TOP]
    defaults = Preset("*", {})
    models = []
    for section in sections:
        preset = _section(path, section, dict(parser[section]), keys, server_wide, ctx)
        if section == "*":
            if preset.model is not None or preset.load_on_startup:
                raise PresetError(f"--models-preset {path}: [*]: 'model' and '{LOAD_ON_STARTUP}' belong in a "
                                  "model's section")
            defaults = preset
        else:
            models.append(preset)
    seen: set[str] = set()
    for p in models:
        if p.name.casefold() in seen:
            raise PresetError(f"--models-preset {path}: [{p.name}] is there twice")
        seen.add(p.name.casefold())
    return Presets(path, defaults, tuple(models))


def _section(path: Path, section: str, items: dict[str, str], keys: dict[str, tuple[click.Parameter, bool]],
             server_wide: set[str], ctx: click.Context) -> Preset:
    options: dict[str, Any] = {}
    model = None
    load = False
    where = f"--models-preset {path}: [{section}]"
    for written, raw in items.items():
        key = written.lstrip("-")  # `-np = 3` or `--parallel = 3` too
        if key == "model":
            model = raw.strip()
            continue
        if key == LOAD_ON_STARTUP:
            load = _bool(raw, f"{where} {key}")
            continue
        if key in server_wide or (key.startswith("no-") and key[3:] in server_wide):
            raise PresetError(f"{where} {key}: a server-wide flag, not a model's: give it on the command line")
        if key not in keys:
            close = difflib.get_close_matches(key, list(keys) + ["model", LOAD_ON_STARTUP], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PresetError(f"{where} {key}: not a per-model flag of skippy serve{hint}")
        param, negated = keys[key]
        assert param.name is not None
        if param.name in options:
            raise PresetError(f"{where} {key}: {param.name.replace('_', '-')} is set twice in this section")
        if SAME_SETTING.get(param.name) in options:
            raise PresetError(f"{where} {key}: give either ctx-size/c (total context of all slots, llama-server's "
                              "meaning) or n-ctx (context of each sequence) in a section, not both")
        options[param.name] = _value(param, negated, raw, ctx, f"{where} {key}")
    return Preset(section, options, model, load)


def _bool(raw: str, where: str) -> bool:
    try:
        return bool(click.BOOL.convert(raw.strip(), None, None))
    except click.BadParameter:
        raise PresetError(f"{where}: {raw!r} is not a boolean (true/false, 1/0, on/off)") from None


def _value(param: click.Parameter, negated: bool, raw: str, ctx: click.Context, where: str) -> Any:
    """``raw`` converted as the flag's own value would be (its type and callback)."""
    if isinstance(param, click.Option) and param.is_flag and not param.count:
        flag = _bool(raw, where)
        return (not flag) if negated else flag
    lines = [line.strip() for line in raw.splitlines() if line.strip()]
    if param.nargs > 1:  # `lora-scaled = FILE SCALE`, one pair per line
        if any(len(line.split()) != param.nargs for line in lines):
            raise PresetError(f"{where}: each line takes {param.nargs} values separated by spaces")
        value: Any = [tuple(line.split()) for line in lines]
    else:
        value = lines if param.multiple else raw.strip()
    try:
        return param.process_value(ctx, value)
    except click.BadParameter as exc:
        raise PresetError(f"{where}: {exc.format_message()}") from None
    except click.UsageError as exc:
        raise PresetError(f"{where}: {exc.format_message()}") from None


def merged(ctx: click.Context, presets: Presets, preset: Preset | None, cli: dict[str, Any],
           not_given: Collection[str] = ()) -> dict[str, Any]:
    """``cli`` (parameter name -> value) with the preset's settings applied: a value given on the command
    line or in the environment wins, then the model's section, then ``[*]``, then the default (llama-server's
    precedence). The spellings of one setting (:data:`SAME_SETTING`: ``c`` and ``n-ctx``) rank as one: the
    command line's ``--n-ctx`` beats a section's ``c``, a section's ``n-ctx`` beats ``[*]``'s ``c`` (its
    ``ctx_size`` is dropped: ``None``). ``not_given``: parameters whose command-line value does not bind this
    model (``--mmproj`` and the other first-model flags, for the other models): the preset's value applies to
    them."""
    out = dict(cli)
    for layer in (presets.defaults, preset):
        if layer is None:
            continue
        for name, value in layer.options.items():
            if _given(ctx, name, not_given) or _given(ctx, SAME_SETTING.get(name), not_given):
                continue
            out[name] = value
            if name == "n_ctx":  # a -c below it would be turned into n_ctx later: this layer's n-ctx wins
                out["ctx_size"] = None
    return out


def _given(ctx: click.Context, name: str | None, not_given: Collection[str]) -> bool:
    """Whether the command line or the environment sets parameter ``name`` for this model (``None``: no
    parameter); not for a name of ``not_given``."""
    return name is not None and name not in not_given and ctx.get_parameter_source(name) in (
        click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
