"""The documentation's generated flag reference (``docs/hooks.py``, run by ``mkdocs build``): every
``skippy serve`` option and every setting has a help text, and the page shows each option as the CLI
has it (names, environment variable, default, help). A setting or option without help fails here and
fails the docs build (``make test`` runs ``mkdocs build --strict``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import attrs
import click
import pytest

from skippy.cli import setting_option
from skippy.engine.config import EngineConfig, IntRange, IsBool, setting, setting_info
from skippy.http.settings import ServerSettings

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks.py"


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("skippy_docs_hooks", HOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _serve_options(hooks) -> list[click.Option]:
    command = hooks.serve_command()
    ctx = click.Context(command)
    return [p for p in command.get_params(ctx) if isinstance(p, click.Option) and p is not command.get_help_option(ctx)]


def test_every_serve_option_and_every_setting_has_a_help_text(hooks) -> None:
    for p in _serve_options(hooks):
        assert (p.help or "").strip(), p.opts  # the explicit adapters of skippy/cli.py too
    for cls in (EngineConfig, ServerSettings):
        for field in attrs.fields(cls):
            info = setting_info(field)
            if info is not None:
                assert info.help.strip(), f"{cls.__name__}.{field.name}"


def test_the_flag_reference_shows_every_option_as_the_cli_has_it(hooks) -> None:
    entries = {e["name"]: e for e in hooks.flag_entries()}
    page = hooks.flags_page()
    options = _serve_options(hooks)
    assert len(entries) == len(options)
    flag_fields = {f.name: cls.__name__ for cls in (EngineConfig, ServerSettings) for f in attrs.fields(cls)
                   if (info := setting_info(f)) is not None and info.flag}
    for p in options:
        name = next(o for o in p.opts if o.startswith("--"))[2:]
        e = entries[name]
        assert e["env"] == (p.envvar or ""), name  # llama-server's presets have none
        assert all(o in e["usage"] for o in p.opts), name  # every alias: -np, --chat-template-file...
        assert f"### `--{name}` {{#{name}}}" in page
        assert hooks.md_text(e["help"]) in page
        assert e["help"] == re.sub(r"\s*\[default: [^\]]+\]", "", p.help).strip()  # less an inline default
        if p.name in flag_fields:
            assert e["setting"] == f"{flag_fields[p.name]}.{p.name}"
    assert entries["parallel"]["default"] == "8" and entries["parallel"]["range"] == "1<=x<=256"
    assert entries["threads"]["default"] == "all cores"  # written in the help text: click shows none
    assert entries["kv-unified"]["default"] == "off" and entries["prefix-cache"]["default"] == "on"
    assert entries["model"]["setting"] == ""  # --model is an adapter (pulled, repeatable), not the field
    unflagged = {s["setting"] for s in hooks.unflagged_settings()}
    assert {"EngineConfig.chat_template", "EngineConfig.model", "ServerSettings.api_keys"} <= unflagged


def test_a_setting_without_help_fails_the_reference(hooks, monkeypatch) -> None:
    @attrs.frozen
    class Demo:
        shiny: bool = setting(False, help="", check=IsBool())
        level: int = setting(3, help="  ", check=IntRange(0), flag=False)

    command = setting_option(attrs.fields(Demo).shiny)(click.Command("serve", callback=lambda **kw: None))
    monkeypatch.setattr(hooks, "serve_command", lambda: command)
    with pytest.raises(hooks.MissingHelp, match="--shiny"):
        hooks.flag_entries()
    monkeypatch.setattr(hooks, "_setting_fields", lambda: {"level": ("Demo", attrs.fields(Demo).level)})
    with pytest.raises(hooks.MissingHelp, match="Demo.level"):
        hooks.unflagged_settings()


def test_help_text_markup_renders_as_it_reads(hooks) -> None:
    assert hooks.md_text("inside <think> *.gguf a|b ``--x_y``") == \
        "inside &lt;think&gt; \\*.gguf a\\|b ``--x_y``"
