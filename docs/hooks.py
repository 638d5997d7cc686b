"""mkdocs hooks: the pages of the site that are generated at build time (none of them is committed).

- ``reference/flags.md``: every option of ``skippy serve``, read from the click command that ``skippy``
  itself runs (``skippy.cli.main.commands["serve"]``). Most options are generated there from the
  ``setting()`` fields of :class:`~skippy.engine.config.EngineConfig` and
  :class:`~skippy.http.settings.ServerSettings` (``skippy.cli.setting_option``), the rest are the
  CLI's explicit adapters; each option's names, value placeholder, environment variable, default and
  range come from click's own ``get_help_record``, the text ``skippy serve --help`` prints. Then the
  settings that have no flag of their own (what embedders set on ``EngineConfig``). A setting or an
  option without a help text makes the build fail (:class:`MissingHelp`).
- ``contributing.md``: ``CONTRIBUTING.md`` from the repository root, its links into ``docs/`` made
  relative to the site.

``docs/`` holds a placeholder of each (so links to them work when the Markdown is read in the
repository, on GitHub); the build replaces it.

``mkdocs.yml`` names this file under ``hooks:``; ``tests/unit/test_docs_reference.py`` imports it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The generated pages, by their path in the site.
FLAGS_PAGE = "reference/flags.md"
CONTRIBUTING_PAGE = "contributing.md"


class MissingHelp(ValueError):
    """A ``skippy serve`` option or a setting without a help text: the reference would have a hole."""


# -- mkdocs hook -----------------------------------------------------------------------------------

def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site's files (mkdocs 1.6 ``File.generated``: nothing is written
    to ``docs/``), in place of the placeholders of the same name that ``docs/`` keeps for readers of
    the repository (they say where the page comes from, and hold none of its content)."""
    from mkdocs.structure.files import File

    for uri, content in ((FLAGS_PAGE, flags_page()), (CONTRIBUTING_PAGE, contributing_page())):
        placeholder = files.get_file_from_path(uri)
        if placeholder is not None:
            files.remove(placeholder)
        files.append(File.generated(config, uri, content=content))
    return files


# -- Markdown helpers ------------------------------------------------------------------------------

_CODE = re.compile(r"(``.+?``|`[^`]+`)")


def md_text(text: str, *, table: bool = False) -> str:
    """``text`` (a help text: plain prose with reStructuredText's ````literal```` spans) as Markdown:
    the literal spans stay code, and outside them the characters Markdown or HTML would read (``*``,
    ``_``, ``<``, ``|``, ...) are escaped, so a help text always renders as it reads in ``--help``;
    ``table``: for a table cell (a ``|`` inside a code span escaped too)."""
    out = []
    for i, part in enumerate(_CODE.split(text)):
        if i % 2:  # a code span: ``x`` or `x`
            out.append(part.replace("|", "\\|") if table else part)
            continue
        part = part.replace("\\", "\\\\")
        for ch in "*_[]|#":
            part = part.replace(ch, "\\" + ch)
        out.append(part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    return "".join(out)


def code(text: str, *, table: bool = True) -> str:
    """``text`` as one inline code span (with enough backticks for what it holds); ``|`` escaped when it
    goes into a table cell (where Python-Markdown's tables read ``\\|`` as ``|``; elsewhere it would show)."""
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    span = f"{ticks}{pad}{text}{pad}{ticks}"
    return span.replace("|", "\\|") if table else span


# -- the flag reference ----------------------------------------------------------------------------

def serve_command() -> Any:
    """The ``skippy serve`` click command, as the ``skippy`` entry point (``skippy.cli:main``) has it."""
    from skippy.cli import main

    return main.commands["serve"]


def _setting_fields() -> dict[str, tuple[str, Any]]:
    """Every ``setting()`` field by name: (class name, attrs field), EngineConfig's then ServerSettings'."""
    import attrs

    from skippy.engine.config import EngineConfig, setting_info
    from skippy.http.settings import ServerSettings

    return {f.name: (cls.__name__, f) for cls in (EngineConfig, ServerSettings) for f in attrs.fields(cls)
            if setting_info(f) is not None}


def _default_text(param: Any, extras: dict[str, str]) -> str:
    """What an option defaults to: click's shown default, or ``on`` / ``off`` for a flag (click shows none
    for an off flag, and the flag's own name for an on one)."""
    if isinstance(param.default, bool) and (param.is_flag or param.secondary_opts):
        return "on" if param.default else "off"
    return extras.get("default", "")


def _split_record(help_text: str) -> tuple[str, dict[str, str]]:
    """click's help column -> (the help text, its trailing ``[env var: ...; default: ...; range]`` items).

    A ``[default: ...]`` written into the help text itself (an option whose default click cannot show,
    e.g. ``--threads``: all cores) becomes the ``default`` item when click shows none.
    """
    extras: dict[str, str] = {}
    if help_text.endswith("]") and "  [" in help_text:
        help_text, tail = help_text[:help_text.rfind("  [")], help_text[help_text.rfind("  [") + 3:-1]
        for item in tail.split("; "):
            key, sep, value = item.partition(": ")
            if sep and key in ("env var", "default"):
                extras[key] = value
            else:
                extras["range"] = item
    m = re.search(r"\s*\[default: ([^\]]+)\]", help_text)
    if m:
        help_text = (help_text[:m.start()] + help_text[m.end():]).strip()
        extras.setdefault("default", m.group(1))
    return help_text.strip(), extras


def flag_entries() -> list[dict[str, str]]:
    """One entry per ``skippy serve`` option, in ``--help`` order: ``name`` (the long flag without ``--``,
    the entry's anchor), ``usage`` (flags and value as ``--help`` writes them), ``env``, ``default``,
    ``range``, ``setting`` (``EngineConfig.n_ctx``, or ``""`` for the CLI's own options) and ``help``.

    Raises :class:`MissingHelp` for an option without a help text.
    """
    import click

    from skippy.engine.config import setting_info

    command = serve_command()
    ctx = click.Context(command, info_name="serve")
    fields = _setting_fields()
    entries = []
    help_option = command.get_help_option(ctx)
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param is help_option:
            continue
        if not (param.help or "").strip():
            raise MissingHelp(f"skippy serve option {param.opts[0]} has no help text")
        usage, text = param.get_help_record(ctx)
        help_text, extras = _split_record(text)
        name = next(o for o in param.opts if o.startswith("--"))[2:]
        cls, field = fields.get(param.name, ("", None))
        if field is None or not setting_info(field).flag:  # an explicit adapter (--model): not the field as is
            cls = ""
        entries.append({"name": name, "usage": usage, "env": extras.get("env var", ""),
                        "default": _default_text(param, extras), "range": extras.get("range", ""),
                        "setting": f"{cls}.{param.name}" if cls else "", "help": help_text})
    return entries


def unflagged_settings() -> list[dict[str, str]]:
    """The ``setting()`` fields with no flag of their own (``flag=False``): ``setting``, ``default``, ``help``.

    Raises :class:`MissingHelp` for a setting without a help text.
    """
    import attrs

    from skippy.engine.config import setting_info

    out = []
    for name, (cls, field) in _setting_fields().items():
        info = setting_info(field)
        if not info.help.strip():
            raise MissingHelp(f"setting {cls}.{name} has no help text")
        if info.flag or name.startswith("_"):
            continue
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()
        shown = "required" if default is attrs.NOTHING else repr(default)
        out.append({"setting": f"{cls}.{name}", "default": shown, "help": info.help.strip()})
    return out


FLAGS_INTRO = """\
# `skippy serve` flags

<!-- Generated at build time by docs/hooks.py from the `skippy serve` click command (its options come
from the setting() fields of EngineConfig and ServerSettings); edit the help texts there, not here. -->

Every option of `skippy serve`, in the order `skippy serve --help` lists them, with the same names,
environment variables, defaults and help texts: this page is generated from the command itself when
the site is built. Each option is also read from the environment variable shown; a flag on the
command line wins over it. Most options are settings of
[`EngineConfig`](python.md#skippy.engine.config.EngineConfig) (the engine, also set by programs that
embed it) or `ServerSettings` (the HTTP layer): each entry names its field; the others are options
of the command line alone (the model to serve, the listen addresses, logging, keys, CORS).

llama-server command lines run unchanged (`-m`, `-c`, `-np`, `-t`, `-fa`, `--jinja`, ...); flags
skippy does not support are refused by name, never ignored. The guides explain what the settings do:
[serving](../guides/serving.md), [KV memory](../explanations/kv-memory.md),
[the prefix cache](../explanations/prefix-cache.md), [GPU offload and RPC](../guides/gpu-rpc.md),
[embeddings](../guides/embeddings.md), [hooks](../guides/hooks.md),
[security and operations](../guides/operations.md).
"""


def flags_page() -> str:
    """The Markdown of ``reference/flags.md``: a summary table, one entry per option, the unflagged settings."""
    entries = flag_entries()
    lines = [FLAGS_INTRO, "## Summary", "", "| flag | env | default |", "|---|---|---|"]
    for e in entries:
        lines.append(f"| [{code('--' + e['name'])}](#{e['name']}) | {code(e['env']) if e['env'] else ''} | "
                     f"{code(e['default']) if e['default'] else 'none'} |")
    lines += ["", "## Options", ""]
    for e in entries:
        facts = [code(e["usage"], table=False)]
        if e["env"]:
            facts.append(f"env {code(e['env'], table=False)}")
        facts.append(f"default {code(e['default'], table=False)}" if e["default"] else "no default")
        if e["range"]:
            facts.append(code(e["range"], table=False))
        facts.append(f"setting {code(e['setting'], table=False)}" if e["setting"] else "a command-line option")
        lines += [f"### `--{e['name']}` {{#{e['name']}}}", "", " · ".join(facts), "", md_text(e["help"]), ""]
    lines += ["## Settings without a flag of their own", "",
              "Set by programs that embed the engine (`EngineConfig(...)`), or by the CLI from the options "
              "named in their text.", "", "| setting | default | meaning |", "|---|---|---|"]
    for s in unflagged_settings():
        lines.append(f"| {code(s['setting'])} | {code(s['default'])} | {md_text(s['help'], table=True)} |")
    return "\n".join(lines) + "\n"


# -- CONTRIBUTING.md as a page ---------------------------------------------------------------------

def contributing_page() -> str:
    """``CONTRIBUTING.md`` with its links to ``docs/x.md`` written as site links (``x.md``)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)
