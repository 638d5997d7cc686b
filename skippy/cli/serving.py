"""``skippy serve``: its options in ``--help`` order (:func:`_serve_options`: the settings' generated
options and the explicit adapters), the parser that refuses llama-server flags it does not take
(:class:`ServeCommand`), and the command, which pulls the models and runs the server.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from skippy.cli.common import F, SkippyCommand, friendly_errors, main
from skippy.cli.flags import (
    _ONE_ENV_VALUE,
    _aliases,
    _flag_fields,
    _not_nan,
    _opt,
    _parse_template_kwargs,
    _read_template,
    _split_hosts,
    _split_origins,
    setting_option,
)
from skippy.models import DEFAULT_MODEL, ModelError

if TYPE_CHECKING:
    from skippy.engine.config import EngineConfig

#: per-model flags that, given on the command line, name the first model only (a preset section's value
#: applies to the others), with the value the other models have without one
FIRST_MODEL_ONLY: dict[str, Any] = {"alias": (), "mmproj": None, "lora": ()}

LLAMA_SERVER_NOTE = ("skippy serve takes llama-server's flags -m, -hf, -a, -c/--ctx-size, -np, -t, -fa, -n, -b, -ub, "
                     "-cb, -ctk, -ctv, -kvu, -mm, -bs, --host, --port, --api-key, --api-key-file, "
                     "--chat-template-file, --jinja, --metrics, "
                     "--slots, --no-webui, -ngl, -sm, -mg, -ts, -dev, --rpc, -ot, --override-kv, -cmoe, -ncmoe, "
                     "--mlock, --no-mmap, -nr/--no-repack, "
                     "--numa, --rope-*, --yarn-*, --reasoning-format, --cache-reuse, --lora, --lora-scaled, "
                     "--lora-init-without-apply, --ssl-key-file, "
                     "--ssl-cert-file, -dt (ignored), the sampling defaults (--temp, --top-k, --top-p, --min-p, "
                     "--repeat-penalty, -s, --dry-*, --xtc-*, --mirostat*...), the presets --fim-qwen-*-default, "
                     "--gpt-oss-20b-default and --embd-gemma-default, "
                     "and refuses the others "
                     "rather than ignore them; "
                     "see 'skippy serve --help'")


#: ``ctx.meta`` key: the order of the ``--lora`` / ``--lora-scaled`` options on the command line
LORA_ORDER = "skippy.lora_order"


class ServeCommand(SkippyCommand):
    """``skippy serve``'s click command: an unknown option is a usage error naming it as it was typed.

    click reads an unknown single-dash option such as llama-server's ``-ngl`` as the short option
    ``-n`` (``No such option '-n'``), and ``-cb`` as ``-c b`` (a bad ``--ctx-size`` value). Like
    llama-server's own parser, this one takes only whole option names: any word that starts with
    ``-`` and is no option name (nor an option's value, nor a number) is refused by name, with a
    note that skippy refuses the llama-server flags it does not support rather than ignore them.
    llama-server's preset flags (``--fim-qwen-1.5b-default``...) are replaced by the flags they stand for
    where they stand (:mod:`skippy.cli.llama_presets`), before click reads the line.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        import difflib

        from skippy.cli.llama_presets import PRESETS, expansion

        options = {name: p for p in self.get_params(ctx) if isinstance(p, click.Option)
                   for name in (*p.opts, *p.secondary_opts)}
        takes_value = False
        lora_order = ctx.meta.setdefault(LORA_ORDER, [])  # --lora and --lora-scaled, as they come (adapter ids)
        pending = args[::-1]  # a stack: a preset flag's expansion is pushed back and read next, in its place
        parsed: list[str] = []
        while pending:
            arg = pending.pop()
            if takes_value:
                takes_value = False
            elif arg == "--":
                parsed += [arg, *pending[::-1]]
                break
            elif arg in PRESETS:  # llama-server's --fim-qwen-1.5b-default...: its flags, where it stands
                pending += expansion(ctx, arg)[::-1]
                continue
            else:
                name = arg.split("=", 1)[0]
                option = options.get(name)
                if option is not None:
                    if option.name in ("lora", "lora_scaled"):
                        lora_order.append(option.name)
                    takes_value = "=" not in arg and not option.is_flag and option.nargs > 0
                elif arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
                    raise click.NoSuchOption(name, message=f"No such option '{name}' ({LLAMA_SERVER_NOTE}).",
                                             possibilities=difflib.get_close_matches(name, options), ctx=ctx)
            parsed.append(arg)
        return super().parse_args(ctx, parsed)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _serve_options(fn: F) -> F:
    """Every ``skippy serve`` option, in ``--help`` order.

    Names are settings of :class:`~skippy.engine.config.EngineConfig` or
    :class:`~skippy.http.settings.ServerSettings`, whose options are
    generated from the fields (:func:`~skippy.cli.flags.setting_option`); the others are the
    few explicit adapters: a flag that is not one field as it stands (a
    file read into text, JSON, keys from a flag and a file, comma-separated
    origins, llama-server's total ``--ctx-size``) or not a setting of either
    class (the model to pull, the listen addresses, logging, the llama-server
    flags accepted for compatibility). A flag field missing from this list
    still gets its option, at the end.
    """
    from skippy.cli.llama_presets import preset_options
    from skippy.engine.config import EngineConfig
    from skippy.http.settings import ServerSettings

    layout: list[Any] = [
        _opt("--model", "-m", multiple=True, default=(DEFAULT_MODEL,), type=_ONE_ENV_VALUE,
             help="Model name from the cache (pulled when missing) or a GGUF path. Repeat it to serve several "
                  "models: the request's model field picks one; the first is the default, loaded at start, "
                  "the others on their first request (the environment variable names one model)."),
        _opt("--hf-repo", "-hf", "-hfr", default=None, metavar="OWNER/REPO[:QUANT]", show_default=False,
             help="A model on Hugging Face, as llama-server's -hf: the repo's GGUF of that quantization "
                  "(default Q4_K_M), or one file as hf://OWNER/REPO/FILE.gguf, downloaded into the model cache "
                  "unless it is there; the cached file when the hub cannot be reached or HF_HUB_OFFLINE=1. Instead "
                  "of --model."),
        _opt("--alias", "-a", multiple=True, metavar="NAME", show_default=False, callback=_aliases,
             help="Another name the model answers to and /v1/models lists (repeatable; the environment "
                  "variable takes space-separated names). Requests may name any model when one is served; "
                  "with several, the aliases name the first."),
        _opt("--models-dir", "models_dirs", multiple=True, metavar="DIR", show_default=False,
             type=click.Path(exists=True, file_okay=False, path_type=str),
             help="Also serve every *.gguf file of this directory (repeatable; ':'-separated in the environment "
                  "variable), each under its file name without .gguf, as llama-server's --models-dir; without "
                  "--model, the first of them is the default. A NAME.mmproj.gguf beside NAME.gguf is NAME's image "
                  "projector (--mmproj), not a model; a LoRA adapter (general.type adapter) is no model either "
                  "(load it with --lora)."),
        _opt("--models-preset", default=None, type=click.Path(exists=True, dir_okay=False, path_type=str),
             metavar="FILE",
             help="Per-model settings from an INI file, llama-server's router presets: one [MODEL] section "
                  "per model (a served model's id, or a new one with 'model = PATH'), [*] for all; keys are "
                  "per-model flags without their dashes ('ctx-size = 8192', 'mmproj = ...', "
                  "'load-on-startup = true'); the command line wins over a section, a section over [*]."),
        _opt("--max-loaded", default=4, type=click.IntRange(0),
             help="Most models loaded at a time when several are served; loading one more first unloads the "
                  "least recently used, once its running requests end (llama-server's --models-max; 0: no "
                  "limit)."),
        _opt("--keep-alive", default=-1.0, type=float, metavar="SECONDS", callback=_not_nan,
             help="Unload a model idle for this many seconds; the next request loads it again (Ollama's "
                  "keep_alive; 0: as soon as its requests end; negative: never)."),
        _opt("--host", multiple=True, default=("127.0.0.1",), metavar="ADDRESS", callback=_split_hosts,
             help="Address to listen on; several comma-separated or repeated (e.g. '127.0.0.1,::1')."),
        _opt("--port", default=8080, type=click.IntRange(0, 65535), help="TCP port to listen on."),
        "n_ctx",
        _opt("--ctx-size", "-c", default=None, type=click.IntRange(0), callback=_ctx_size,
             help="llama-server's -c: total context of all slots in tokens; each sequence gets "
                  "ctx-size / parallel (exclusive with --n-ctx, which is per sequence); 0: the model's training "
                  "context (read from its GGUF when the server starts), shared so."),
        "parallel", "threads", "flash_attn", "cache_type_k", "cache_type_v", "kv_unified", "swa_full",
        "n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "device", "rpc",
        "override_tensor", "override_kv", "cpu_moe", "n_cpu_moe", "n_batch", "n_ubatch", "mlock", "mmap", "repack",
        "numa",
        "rope_scaling", "rope_scale", "rope_freq_base", "rope_freq_scale", "yarn_orig_ctx", "yarn_ext_factor",
        "yarn_attn_factor", "yarn_beta_slow", "yarn_beta_fast", "mmproj", "mmproj_offload", "image_min_tokens",
        "image_max_tokens", "allow_image_urls",
        "allow_private_image_urls",
        _opt("--lora", multiple=True, metavar="FILE", show_default=False,
             type=click.Path(exists=True, dir_okay=False, path_type=str),
             help="A LoRA adapter GGUF of the model, applied at scale 1 (llama-server's --lora; repeatable: ids "
                  "from 0 in command-line order, with --lora-scaled). Requests pick adapters with \"lora\": "
                  "[{\"id\", \"scale\"}] or model \"BASE:ADAPTER\" (the file name without .gguf); GET/POST "
                  "/lora-adapters list them and set their global scales. With several models: the first one's. "
                  "An adapter made for another model is a start-up error."),
        _opt("--lora-scaled", "lora_scaled", multiple=True, nargs=2, metavar="FILE SCALE", show_default=False,
             type=(click.Path(exists=True, dir_okay=False, path_type=str), float), callback=_finite_scales,
             help="A LoRA adapter GGUF with its scale (llama-server's --lora-scaled; repeatable, ids in "
                  "command-line order with --lora)."),
        "lora_init_without_apply",
        _opt("--cont-batching/--no-cont-batching", "-cb/-nocb", default=True, callback=_cont_batching,
             help="Accepted for llama-server command lines: skippy always batches continuously (a new request "
                  "joins the running batch at the next step); --no-cont-batching is refused."),
        _opt("--defrag-thold", "-dt", default=None, type=float, metavar="N", show_default=False,
             help="Accepted for llama-server command lines (llama.cpp's KV cache defragmentation threshold, "
                  "deprecated there and no longer needed): no effect; a warning says so."),
        _opt("--chat-template", "--chat-template-file", default=None, metavar="NAME|FILE", callback=_read_template,
             help="Chat template overriding the model's: a jinja2 file, or a llama.cpp built-in template name "
                  "(chatml, llama3, mistral-v7, gemma, phi3, command-r, deepseek3, ...: all 54 of llama.cpp's; an "
                  "error lists them)."),
        _opt("--chat-template-kwargs", default=None, metavar="JSON", callback=_parse_template_kwargs,
             help='Default template variables as a JSON object, e.g. \'{"enable_thinking": false}\'; '
                  'requests override them.'),
        _opt("--jinja", is_flag=True, default=False,
             help="Accepted for llama-server command lines: skippy always renders chat templates with jinja2."),
        "n_predict", "temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
        "presence_penalty", "frequency_penalty", "seed", "top_n_sigma", "xtc_probability", "xtc_threshold",
        "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dynatemp_range",
        "dynatemp_exponent", "mirostat", "mirostat_eta", "mirostat_tau", "reasoning_format",
        "force_tool_emulation", "step_tokens", "clamp_max_tokens", "prefix_cache", "cache_reuse", "ctx_checkpoints",
        "cache_ram",
        "spec_ngram", "scheduler_steps", "backend_sampling", "reader_wait", "hook_policy",
        "hook_url",
        "hook_timeout", "hook_fail_closed", "hooks_default_on", "signal_window", "high_entropy_threshold",
        "max_queue", "embeddings", "pooling", "reranking", "embeddings_batch",
        _opt("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]),
             help="Log level."),
        _opt("--log-format", default="text", type=click.Choice(["text", "json"]),
             help="Log lines as text, or one JSON object per line (python-json-logger)."),
        _opt("--log-file", default=None, type=click.Path(dir_okay=False, writable=True), metavar="PATH",
             help="Also append the log lines to this file."),
        _opt("--api-key", multiple=True, metavar="KEY", show_default=False,
             help="Accepted API key (repeatable; the environment variable takes space-separated keys). "
                  "Requests must send 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'; /health, Ollama's GET "
                  "/api/version and the playground's page and files (GET /, /webui/...) stay open. Prefer "
                  "--api-key-file: other local users can read command lines."),
        _opt("--api-key-file", default=None, type=click.Path(exists=True, dir_okay=False),
             help="File of accepted API keys, one per line ('#' starts a comment); adds to --api-key."),
        _opt("--cors-origins", multiple=True, metavar="ORIGINS", show_default=False, callback=_split_origins,
             help="Browser origins allowed by CORS, comma-separated or repeated, e.g. "
                  "'https://app.example.com'; 'localhost' allows any localhost, 127.0.0.1 or [::1] origin "
                  "(any port); '*' allows any. [default: none, CORS off]"),
        "max_body_bytes", "max_messages", "max_tools", "max_chat_template_bytes", "max_grammar_bytes",
        "request_timeout", "body_timeout", "shutdown_grace", "sse_ping_interval", "strict_fields", "responses_store",
        "responses_store_size", "responses_ttl", "metrics", "slots",
        "ssl_key_file", "ssl_cert_file",
        _opt("--no-webui", is_flag=True, default=False,
             help="Do not serve the web playground at GET / (it answers 404), as llama-server's --no-webui."),
    ]
    fields = {f.name: f for f in _flag_fields(EngineConfig) + _flag_fields(ServerSettings)}
    placed = [item for item in layout if isinstance(item, str)]
    layout += [name for name in fields if name not in placed]
    layout += preset_options()  # llama-server's --fim-qwen-1.5b-default..., last
    for item in reversed(layout):
        fn = (setting_option(fields[item]) if isinstance(item, str) else item)(fn)
    return fn


def _finite_scales(ctx: click.Context, param: click.Parameter,
                   value: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    import math

    for path, scale in value:
        if not math.isfinite(scale):
            raise click.BadParameter(f"the scale of {path} must be a finite number, got {scale}", ctx=ctx,
                                     param=param)
    return value


def _lora_adapters(ctx: click.Context, lora: tuple[str, ...],
                   lora_scaled: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """``--lora`` and ``--lora-scaled`` as ``(path, scale)`` pairs in command-line order (llama-server numbers
    the adapters so; the environment variables' come after, ``SKIPPY_LORA``'s first)."""
    plain, scaled = [(p, 1.0) for p in lora], [(p, float(s)) for p, s in lora_scaled]
    out = []
    for name in ctx.meta.get(LORA_ORDER, []):
        source = plain if name == "lora" else scaled
        if source:
            out.append(source.pop(0))
    return tuple(out + plain + scaled)


def _ctx_size(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """``-c``: 0 (the model's training context, as llama-server's ``-c 0``) or at least 16 tokens."""
    if value is not None and 0 < value < 16:
        raise click.BadParameter(f"give 0 (the model's training context) or at least 16 tokens, got {value}",
                                 ctx=ctx, param=param)
    return value


def _cont_batching(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if not value:
        raise click.BadParameter("--no-cont-batching (-nocb) is refused: skippy always batches continuously (a new "
                                 "request joins the running batch at the next step)",
                                 ctx=ctx, param=param)
    return value


def _check_overrides(engine_options: dict[str, Any]) -> None:
    """``-ot`` / ``-cmoe`` / ``-ncmoe`` buffer types against this llama.cpp build's (a usage error naming the
    flag, before any download or load; llama-server refuses them so, listing the available ones)."""
    if not (engine_options["override_tensor"] or engine_options["cpu_moe"] or engine_options["n_cpu_moe"]):
        return
    from skippy.engine.runtime.overrides import buffer_types, check_buffers, parse_overrides

    try:
        check_buffers(parse_overrides(engine_options["override_tensor"]), buffer_types())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--override-tensor' / '-ot'") from None


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
    unique = tuple(dict.fromkeys(keys))
    field = attrs.fields(ServerSettings).api_keys
    check = field.validator
    assert check is not None  # setting() gives every field one
    try:
        check(None, field, unique)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--api-key") from None
    return unique


def _context_spelling(ctx: click.Context, options: dict[str, Any]) -> None:
    """Pick the command line's spelling of the context in ``options`` when the environment gives the other.

    ``-c/--ctx-size`` (llama-server's total of all slots) and ``--n-ctx`` (one sequence's) are two spellings
    of one setting; like every flag, the command line's beats an environment variable's: ``--n-ctx`` over
    ``SKIPPY_CTX_SIZE`` drops the ``ctx_size`` here, ``-c`` over ``SKIPPY_N_CTX`` wins in
    :func:`_context_per_sequence`. Raises a usage error when one source (the command line, or the
    environment) gives both.
    """
    given = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    total, per_sequence = ctx.get_parameter_source("ctx_size"), ctx.get_parameter_source("n_ctx")
    if total not in given or per_sequence not in given:
        return
    if total is per_sequence:
        from skippy.cli.llama_presets import preset_note

        names = (("--ctx-size/-c", "--n-ctx") if total is click.core.ParameterSource.COMMANDLINE
                 else ("SKIPPY_CTX_SIZE", "SKIPPY_N_CTX"))
        raise click.UsageError(f"give either {names[0]} (total context of all slots, llama-server's meaning) or "
                               f"{names[1]} (context of each sequence), not both{preset_note(ctx, '-c')}", ctx=ctx)
    if per_sequence is click.core.ParameterSource.COMMANDLINE:
        options["ctx_size"] = None


def _context_per_sequence(ctx: click.Context, ctx_size: int | None, options: dict[str, Any]) -> None:
    """Turn llama-server's ``-c/--ctx-size`` (all slots) into ``n_ctx`` (one sequence) in ``options``.

    llama-server gives each of its ``-np`` slots ``ctx-size / np`` tokens; so does this, over the ``n_ctx``
    of a lower source (:func:`_context_spelling` and :func:`~skippy.cli.presets.merged` leave ``ctx_size``
    ``None`` when ``n_ctx`` wins). ``-c 0`` (the training context) sets ``n_ctx`` 0 here;
    :func:`_training_share` divides the model's own once its GGUF is there. Raises a usage error when a
    sequence would get fewer than 16 tokens.
    """
    if ctx_size is None:
        return
    if ctx_size == 0:
        options["n_ctx"] = 0
        return
    per_sequence = ctx_size // options["parallel"]
    if per_sequence < 16:
        raise click.BadParameter(f"{ctx_size} tokens over {options['parallel']} slots leaves {per_sequence} per "
                                 "sequence; at least 16 are needed", ctx=ctx, param_hint="'--ctx-size' / '-c'")
    options["n_ctx"] = per_sequence


@main.command(cls=ServeCommand)
@_serve_options
@friendly_errors
def serve(model: tuple[str, ...], hf_repo: str | None, alias: tuple[str, ...], models_dirs: tuple[str, ...],
          models_preset: str | None, max_loaded: int,
          keep_alive: float, host: tuple[str, ...], port: int, ctx_size: int | None,
          chat_template: str | None, chat_template_kwargs: dict, jinja: bool, log_level: str, log_format: str,
          log_file: str | None, api_key: tuple[str, ...], api_key_file: str | None, cors_origins: tuple[str, ...],
          no_webui: bool, cont_batching: bool, defrag_thold: float | None, lora: tuple[str, ...],
          lora_scaled: tuple[tuple[str, float], ...], **options: Any) -> None:
    """Serve the OpenAI-compatible API (``/v1/chat/completions`` and friends).

    The model is pulled into the cache first when it is a known name that is
    not there yet. ``/health`` answers 503 while the model loads, then 200.
    Several models (``--model`` repeated, ``--models-dir``) are routed by the
    request's ``model``, loaded on demand, unloaded by ``--max-loaded`` and
    ``--keep-alive``.
    llama-server command lines work as they are (``-m``, ``-c``, ``-np``,
    ``-t``, ``-fa``, ``--jinja``...), and its presets (``--fim-qwen-1.5b-default``...);
    its other flags are refused by name.
    """
    import trio

    from skippy.engine.config import EngineConfig
    from skippy.http.logs import configure_logging
    from skippy.http.serve import serve as run_server
    from skippy.http.settings import ServerSettings
    from skippy.models import ensure_model, lookup, resolve_alias

    ctx = click.get_current_context()
    if (options.get("ssl_key_file") is None) != (options.get("ssl_cert_file") is None):
        raise click.UsageError("--ssl-key-file and --ssl-cert-file go together", ctx=ctx)
    engine_names = [f.name for f in _flag_fields(EngineConfig)]
    engine_options = {name: options.pop(name) for name in engine_names}
    presets = None
    if models_preset is not None:
        from skippy.cli.presets import read_presets

        presets = read_presets(models_preset, ctx.command, ctx, engine_names)
    settings = ServerSettings(api_keys=_api_keys(api_key, api_key_file), cors_origins=cors_origins,
                              webui=not no_webui, **options)
    try:
        configure_logging(log_level, log_format, log_file)
    except OSError as exc:  # a folder that does not exist, no permission
        raise click.BadParameter(f"cannot open {log_file!r}: {exc.strerror or exc}", ctx=ctx,
                                 param_hint="'--log-file'") from None
    if defrag_thold is not None:  # llama-server warns so too, and goes on
        import logging

        logging.getLogger("skippy.serve").warning("--defrag-thold/-dt is deprecated in llama.cpp and no longer "
                                                  "necessary to specify: skippy ignores it")
    per_model = {**engine_options, "chat_template": chat_template, "chat_template_kwargs": chat_template_kwargs,
                 "alias": alias, "ctx_size": ctx_size, "lora": _lora_adapters(ctx, lora, lora_scaled)}
    _context_spelling(ctx, per_model)
    _check_model_options(ctx, per_model, "")  # the command line's own, before any download
    models: list[tuple[Path, str]] = []  # (GGUF, id): --model's (pulled when missing), then --models-dir's
    given = ctx.get_parameter_source("model") is not click.core.ParameterSource.DEFAULT
    if hf_repo is not None:  # llama-server's -hf: the model, instead of -m
        from skippy.models import hf_model

        if given:
            from skippy.cli.llama_presets import preset_note

            raise click.UsageError(f"give either --model/-m or --hf-repo/-hf, not both{preset_note(ctx, '-hf')}",
                                   ctx=ctx)
        path = hf_model(hf_repo)
        models.append((path, path.stem))
        given = True
        model = ()
    preset_models = [p for p in presets.models if p.model is not None] if presets is not None else []
    for name in model if given or not (models_dirs or preset_models) else ():
        path = ensure_model(name)
        spec = lookup(resolve_alias(name))  # an /api/copy alias serves its model under the model's own id
        models.append((path, spec.name if spec else path.stem))
    projectors: dict[Path, str] = {}  # a model file -> the NAME.mmproj.gguf beside it in its --models-dir
    for directory in models_dirs:
        files = sorted((p for p in Path(directory).expanduser().iterdir()
                        if p.suffix.lower() == ".gguf" and p.is_file()), key=lambda p: p.name.casefold())
        for p in files:
            if p.name.lower().endswith(".mmproj.gguf"):
                continue
            projector = p.with_name(p.stem + ".mmproj.gguf")
            if projector.is_file():
                projectors[p.resolve()] = str(projector)
        models += [(p, p.stem) for p in files  # not checked here: one that cannot load answers 503
                   if not p.name.lower().endswith(".mmproj.gguf") and not _is_adapter(p)]
    if not models and not preset_models:
        raise ModelError(f"no .gguf file in --models-dir {', '.join(models_dirs)}")
    # a file named twice (-m x -m x, or -m and --models-dir, or a file and a link to it) is served once, where it
    # came first, under the name of the file itself rather than a link's when both are there
    first: dict[Path, int] = {}
    unique: list[tuple[Path, str]] = []
    for m in models:
        resolved = m[0].resolve()
        if resolved not in first:
            first[resolved] = len(unique)
            unique.append(m)
        elif unique[first[resolved]][0].is_symlink() and not m[0].is_symlink():
            unique[first[resolved]] = m
    models = unique
    for preset in preset_models:  # a section with `model = PATH|NAME` adds a model served as its name, even a
        assert preset.model is not None  # file served already (its own instance, with the section's settings)
        models.append((_preset_model(presets, preset.name, preset.model, ensure_model), preset.name))
    ids = [i.casefold() for _, i in models]
    if len(set(ids)) != len(ids):
        twice = sorted({i for _, i in models if ids.count(i.casefold()) > 1})
        raise ModelError(f"two models would be served as {', '.join(twice)}; give each model once")
    if presets is not None:
        from skippy.cli.presets import PresetError

        unknown = [p.name for p in presets.models if p.name.casefold() not in ids]
        if unknown:
            raise PresetError(f"--models-preset {presets.path}: [{unknown[0]}] names no served model "
                              f"({', '.join(i for _, i in models)}); give it 'model = PATH' to add one")
    configs = []
    preload = []
    for i, (path, model_id) in enumerate(models):
        values = dict(per_model)
        if i > 0:  # --alias, --mmproj and --lora on the command line name the first model
            for name, empty in FIRST_MODEL_ONLY.items():
                if ctx.get_parameter_source("lora_scaled" if name == "lora" and not lora else name) in (
                        click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT):
                    values[name] = empty
        where = ""
        if presets is not None:
            from skippy.cli.presets import merged

            section = presets.get(model_id)
            values = merged(ctx, presets, section, values, () if i == 0 else (*FIRST_MODEL_ONLY, "lora_scaled"))
            where = f"--models-preset {presets.path}: [{section.name if section else '*'}] "
            if section is not None and section.load_on_startup:
                preload.append(model_id)
        if presets is not None and section is not None and ("lora" in section.options
                                                             or "lora_scaled" in section.options):
            values["lora"] = tuple([(p, 1.0) for p in section.options.get("lora", ())]
                                   + [(p, float(x)) for p, x in section.options.get("lora_scaled", ())])
        values.pop("lora_scaled", None)
        if values["mmproj"] is None:
            values["mmproj"] = projectors.get(path.resolve())
        _check_model_options(ctx, values, where)
        if values["ctx_size"] == 0:  # -c 0: the model's training context over its slots
            values["n_ctx"] = _training_share(ctx, path, values["parallel"], where)
        values.pop("ctx_size")
        configs.append(EngineConfig(model=str(path), model_name=model_id, model_alias=values.pop("alias"),
                                    verbose=log_level == "debug", **values))
    _check_aliases(configs)
    if any(c.consult for c in configs):  # a --consult peer must be a served model (not the only one) or a URL
        from skippy.actors.pool import pool_models
        from skippy.engine.hooks.consult import check_peers

        try:
            check_peers([(m.names, m.config.consult) for m in pool_models(configs)])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--consult'") from None
    sys.exit(trio.run(lambda: run_server(configs[0], host=host, port=port, settings=settings,
                                         more_models=configs[1:], max_loaded=max_loaded, keep_alive=keep_alive,
                                         preload=preload)))


def _check_aliases(configs: list[EngineConfig]) -> None:
    """Refuse an ``--alias`` (or a preset's ``alias``) that another served model also answers to (its id, file
    name, registry or Ollama name: :func:`~skippy.actors.pool.pool_models`; in any of Ollama's spellings of the
    alias, ``:latest`` or the library prefix added): requests for that name would
    reach one model while ``/api/tags`` lists it as the other's. Raises :class:`click.BadParameter`."""
    from skippy.actors.pool import pool_models
    from skippy.engine.protocols.ollama.models import name_candidates

    names = [{n.casefold() for n in m.names} for m in pool_models(configs)]
    for i, config in enumerate(configs):
        for alias in config.model_alias:
            spellings = {n.casefold() for n in name_candidates(alias)}  # Ollama's: smol:latest is smol
            other = next((c for j, c in enumerate(configs) if j != i and spellings & names[j]), None)
            if other is not None:
                raise click.BadParameter(f"{alias!r} (an alias of {config.model_name}) is also a name of the served "
                                         f"model {other.model_name}: a name must reach one model",
                                         param_hint="'--alias'")


def _preset_model(presets: Any, section: str, model: str, ensure_model: Any) -> Path:
    """A preset section's ``model``: a GGUF file (its magic bytes checked now), or a model name pulled into
    the cache; a :class:`~skippy.cli.presets.PresetError` naming the file, section and key otherwise."""
    from skippy.cli.presets import PresetError
    from skippy.models import ModelError

    where = f"--models-preset {presets.path}: [{section}] model"
    path = Path(model).expanduser()
    if path.is_file():
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise PresetError(f"{where}: {path} is not a GGUF file")
        return path
    try:
        found: Path = ensure_model(model)
    except ModelError as exc:
        raise PresetError(f"{where}: {exc}") from None
    return found


def _training_context(path: Path) -> int:
    """The training context of the GGUF at ``path`` in tokens (``<arch>.context_length``, read by llama.cpp
    without the weights, about a second for a large vocabulary; its load-time warnings are left for the load);
    0 when the GGUF names none or cannot be read (its load then says why)."""
    import logging

    from skippy.models import ModelError
    from skippy.models.gguf import gguf_info

    runtime_log = logging.getLogger("skippy.runtime")
    level = runtime_log.level
    runtime_log.setLevel(logging.ERROR)
    try:
        return gguf_info(path).context_length
    except ModelError:
        return 0
    finally:
        runtime_log.setLevel(level)


def _is_adapter(path: Path) -> bool:
    """Whether the GGUF ``path`` is a LoRA adapter (``general.type`` ``adapter``, read from its header alone:
    :func:`~skippy.models.gguf_type`), which ``--models-dir`` does not serve as a model (it is ``--lora``'s); a
    file whose header cannot be read is no adapter here (it is served, and answers 503 when it fails to load)."""
    from skippy.models import ModelError, gguf_type

    try:
        kind = gguf_type(path)
    except ModelError:
        return False
    if kind == "adapter":
        import logging

        logging.getLogger("skippy.serve").info("--models-dir: %s is a LoRA adapter (general.type adapter), not "
                                               "served as a model; load it with --lora", path)
    return kind == "adapter"


def _training_share(ctx: click.Context, path: Path, parallel: int, where: str) -> int:
    """llama-server's ``-c 0`` for the model at ``path``: its training context (:func:`_training_context`) over
    the ``parallel`` slots, as ``-c N`` shares N: the context of each sequence (``n_ctx``). 0 (each sequence
    the training context, as the engine reads ``n_ctx`` 0) when the GGUF names none. Raises a usage error (a
    :class:`~skippy.cli.presets.PresetError` with a preset section's ``where``) when a sequence would get
    fewer than 16 tokens."""
    n_ctx_train = _training_context(path)
    if not n_ctx_train:
        return 0
    per_sequence = n_ctx_train // parallel
    if per_sequence < 16:
        message = (f"-c 0: the training context of {path.name} ({n_ctx_train} tokens) over {parallel} slots leaves "
                   f"{per_sequence} per sequence; at least 16 are needed")
        if where:
            from skippy.cli.presets import PresetError

            raise PresetError(where + message)
        raise click.UsageError(message, ctx=ctx)
    return per_sequence


def _check_model_options(ctx: click.Context, values: dict[str, Any], where: str) -> None:
    """The checks across one model's flags that click cannot make alone, on ``values`` (parameter name ->
    value; ``ctx_size`` turned into ``n_ctx`` per sequence here): -c over --parallel, a
    quantized V cache without flash attention (exit 1, before any download), -ot buffer types, the
    settings' own cross-checks (-b below -np...). ``where`` is a preset section's prefix: then every
    failure is a :class:`~skippy.cli.presets.PresetError` naming it."""
    from skippy.engine.config import EngineConfig, check_cache_types

    try:
        _context_per_sequence(ctx, values["ctx_size"], values)
        try:
            check_cache_types(values["cache_type_v"], values["flash_attn"])
        except ValueError:
            message = (f"--cache-type-v {values['cache_type_v']} (a quantized V cache) needs --flash-attn auto or "
                       "on (llama.cpp refuses it without flash attention)")
            if where:
                raise click.UsageError(message) from None
            click.echo(f"error: {message}", err=True)
            sys.exit(1)
        _check_overrides(values)
        try:
            EngineConfig(model="-", **{k: v for k, v in values.items() if k not in ("alias", "ctx_size")})
        except (TypeError, ValueError) as exc:
            raise click.UsageError(str(exc), ctx=ctx) from None
    except click.ClickException as exc:
        if not where:
            raise
        from skippy.cli.presets import PresetError

        raise PresetError(where + exc.format_message()) from None
