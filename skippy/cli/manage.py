"""The model cache commands: ``skippy pull``, ``skippy list``, ``skippy show`` and ``skippy rm``
(:mod:`skippy.models` does the work).
"""

from __future__ import annotations

from pathlib import Path

import click

from skippy.cli.common import _MODELS_DIR, _quiet_llama_log, _size, friendly_errors, main
from skippy.models import DEFAULT_MODEL, ModelError


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
    name), a copy's name (Ollama's /api/copy) or a GGUF path. The capabilities are what skippy detects by
    rendering probe conversations through the template (system role, tools,
    tool call ids, parallel calls, thinking), which decide native tool calls
    or their emulation: with a template that does not render tools, the
    model is taught to call them with TOOL_CALL lines.
    """
    from skippy.models import find_model, gguf_info, lookup, resolve_alias

    _quiet_llama_log()
    path = find_model(name, models_dirs)
    if not path.is_file():
        spec = lookup(resolve_alias(name))
        raise ModelError(f"{spec.name if spec else name} is not pulled yet: run 'skippy pull {name}'")
    projector = _projector_info(path)
    if projector is not None:  # a --mmproj file, not a model llama.cpp loads alone
        click.echo("Multimodal projector (for skippy serve --mmproj)")
        for k, v in projector:
            click.echo(f"  {k}  {v}")
        return
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
    beside = path.with_name(path.stem + ".mmproj.gguf")
    lines += [("vocabulary", f"{info.n_vocab} tokens ({md.get('tokenizer.ggml.model', '-')})"),
              ("license", md.get("general.license", "-")),
              ("image input", f"{beside.name} beside it (its --mmproj in --models-dir)" if beside.is_file()
               else "with its projector: skippy serve --mmproj FILE")]
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


def _projector_info(path: Path) -> list[tuple[str, str]] | None:
    """The lines ``skippy show`` prints for a multimodal projector GGUF (``general.architecture`` ``clip``:
    what ``--mmproj`` takes), else ``None`` (a model)."""
    from skippy.models.gguf import gguf_metadata

    try:
        md, n_params = gguf_metadata(path, max_array=0)
    except Exception:  # not readable by gguf-py: gguf_info says why
        return None
    if md.get("general.architecture") != "clip":
        return None
    inputs = [k for k in ("vision", "audio") if md.get(f"clip.has_{k}_encoder")]
    rows = [("path        ", str(path)), ("size        ", f"{_size(path.stat().st_size)}"),
            ("projector   ", str(md.get("clip.projector_type") or md.get("clip.vision.projector_type") or "-")),
            ("input       ", ", ".join(inputs) or "-"), ("parameters  ", f"{n_params / 1e6:.1f}M")]
    if "clip.vision.image_size" in md:
        rows.append(("image size  ", f"{md['clip.vision.image_size']} px, patch {md.get('clip.vision.patch_size')}"))
    return rows


@main.command()
@click.argument("name", metavar="MODEL")
@friendly_errors
def rm(name: str) -> None:
    """Delete a model from the model cache.

    MODEL is a known model name, the name of another GGUF of the cache (see
    'skippy list'), or a path inside the cache; a partial download of it goes
    too. Files outside the cache ($SKIPPY_HOME/models) are never deleted. A
    copy's name (Ollama's /api/copy) removes the copy alone, as 'ollama rm'
    does: the model it names stays.
    """
    from skippy.models import remove_alias, remove_model, resolve_alias

    target = resolve_alias(name)
    if target != name:  # a copy: its name goes, the file stays
        if not remove_alias(name.strip()):
            remove_alias(name.strip()[: -len(":latest")])
        click.echo(f"removed {name} (a copy of {target})")
        return
    for path in remove_model(name):
        click.echo(f"deleted {path}")
