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
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import click

from skippy.models import DEFAULT_MODEL, ModelError, pull as pull_model

if TYPE_CHECKING:
    from skippy.http.settings import ServerSettings

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


def _hardening_options(fn: F) -> F:
    """``serve`` options of the HTTP layer: authentication, CORS, limits, deadline, shutdown."""
    options = [
        _opt("--api-key", multiple=True, metavar="KEY", show_default=False,
             help="Accepted API key (repeatable; the environment variable takes space-separated keys). "
                  "Requests must send 'Authorization: Bearer KEY'; only /health stays open. "
                  "Prefer --api-key-file: other local users can read command lines."),
        _opt("--api-key-file", default=None, type=click.Path(exists=True, dir_okay=False),
             help="File of accepted API keys, one per line ('#' starts a comment); adds to --api-key."),
        _opt("--cors-origins", multiple=True, metavar="ORIGINS", show_default=False,
             help="Browser origins allowed by CORS, comma-separated or repeated, e.g. "
                  "'https://app.example.com'; '*' allows any. [default: none, CORS off]"),
        _opt("--max-body-bytes", default=4 * 1024 * 1024, type=click.IntRange(1024, None),
             help="Largest request body in bytes; larger ones get 413."),
        _opt("--max-messages", default=2048, type=click.IntRange(1, None),
             help="Most messages in one chat request; more get 400."),
        _opt("--max-tools", default=128, type=click.IntRange(0, None),
             help="Most tools in one chat request; more get 400."),
        _opt("--max-chat-template-bytes", default=128 * 1024, type=click.IntRange(0, None),
             help="Largest request 'chat_template' in bytes; larger ones get 400."),
        _opt("--max-grammar-bytes", default=128 * 1024, type=click.IntRange(0, None),
             help="Largest request 'grammar' in bytes; larger ones get 400."),
        _opt("--request-timeout", default=600.0, type=click.FloatRange(0.0, None),
             help="Seconds a request may run (0: no limit). Past it the generation stops and the client "
                  "gets 504, or a final SSE error event once streaming has started."),
        _opt("--shutdown-grace", default=30.0, type=click.FloatRange(0.0, None),
             help="Seconds running requests may take to finish after SIGINT/SIGTERM; then they are "
                  "cancelled (streams get a final SSE error event). A second signal cancels at once."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _server_settings(api_key: tuple[str, ...], api_key_file: str | None, cors_origins: tuple[str, ...],
                     **limits: Any) -> "ServerSettings":
    from skippy.http.settings import ServerSettings, read_api_key_file, split_origins

    keys = list(api_key)
    if api_key_file:
        try:
            keys += read_api_key_file(api_key_file)
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--api-key-file") from None
    if any(not k.strip() or any(c.isspace() for c in k) for k in keys):
        raise click.BadParameter("API keys may not be empty or contain whitespace", param_hint="--api-key")
    return ServerSettings(api_keys=tuple(dict.fromkeys(keys)), cors_origins=split_origins(cors_origins), **limits)


@main.command()
@_opt("--model", default=DEFAULT_MODEL, help="Model name from the cache (pulled when missing) or a GGUF path.")
@_opt("--host", default="127.0.0.1", help="Address to listen on.")
@_opt("--port", default=8080, type=click.IntRange(0, 65535), help="TCP port to listen on.")
@_opt("--n-ctx", default=4096, type=click.IntRange(16, None),
      help="Context of each sequence in tokens (prompt + completion); clamped to the model's training context.")
@_opt("--parallel", default=8, type=click.IntRange(1, 256), help="Max sequences decoding at once (slots).")
@_opt("--threads", default=None, type=click.IntRange(1, None), help="CPU threads for llama.cpp [default: all cores].")
@_opt("--flash-attn", default="off", type=click.Choice(["on", "off", "auto"]),
      help="llama.cpp flash attention. Off by default: on CPU it slowed batched decode about 1.4x.")
@_opt("--chat-template", default=None, type=click.Path(exists=True, dir_okay=False),
      help="Jinja2 chat template file overriding the model's.")
@_opt("--chat-template-kwargs", default=None, metavar="JSON",
      help='Default template variables as a JSON object, e.g. \'{"enable_thinking": false}\'; requests override them.')
@_opt("--force-tool-emulation", is_flag=True, default=False,
      help="Use TOOL_CALL text emulation for tools even when the chat template supports tools.")
@_opt("--step-tokens", default=256, type=click.IntRange(8, 512),
      help="Token budget of one decode step, shared by prefill chunks and running streams (bounds ITL).")
@_opt("--clamp-max-tokens", is_flag=True, default=False,
      help="Clamp a max_tokens that does not fit the context to the room left (llama-server) "
           "instead of answering 400 context_length_exceeded (OpenAI, vLLM).")
@_opt("--prefix-cache/--no-prefix-cache", default=True,
      help="Keep finished sequences' KV cache and reuse shared prompt prefixes.")
@_opt("--hook-policy", default=None, metavar="MODULE:FACTORY",
      help="Python hook policy: package.module:factory returning an object with async hook methods.")
@_opt("--hook-url", default=None, metavar="URL",
      help='Webhook hook policy: each event is POSTed as JSON; the reply is {"action": "none"|"inject"|"stop", ...}.')
@_opt("--hook-timeout", default=2.0, type=click.FloatRange(0.0, None, min_open=True),
      help="Seconds per hook call; a timeout or error means no action (logged and counted).")
@_opt("--hook-fail-closed", is_flag=True, default=False,
      help="A failed or timed-out hook call stops the generation (finish_reason hook_error) instead.")
@_opt("--hooks-default-on", is_flag=True, default=False,
      help='Run hooks for every request, not only those with "mesh_hooks": true.')
@_opt("--signal-window", default=16, type=click.IntRange(1, 4096),
      help="Tokens in the sliding window of uncertainty signals for the mid-generation hook.")
@_opt("--high-entropy-threshold", default=2.0, type=click.FloatRange(0.0, None),
      help="Entropy (nats) above which a token counts as high-entropy.")
@_opt("--max-queue", default=1024, type=click.IntRange(1, None),
      help="Requests waiting for a slot before new ones get 429.")
@_opt("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]), help="Log level.")
@_hardening_options
@friendly_errors
def serve(model: str, host: str, port: int, n_ctx: int, parallel: int, threads: int | None, flash_attn: str,
          chat_template: str | None, chat_template_kwargs: str | None, force_tool_emulation: bool,
          clamp_max_tokens: bool, step_tokens: int, prefix_cache: bool, hook_policy: str | None, hook_url: str | None,
          hook_timeout: float, hook_fail_closed: bool,
          hooks_default_on: bool, signal_window: int, high_entropy_threshold: float,
          max_queue: int, log_level: str, **hardening: Any) -> None:
    """Serve the OpenAI-compatible API (``/v1/chat/completions`` and friends).

    The model is pulled into the cache first when it is a known name that is
    not there yet. ``/health`` answers 503 while the model loads, then 200.
    """
    import logging

    import trio

    from skippy.engine.config import EngineConfig
    from skippy.http.serve import serve as run_server
    from skippy.models import ensure_model, lookup

    settings = _server_settings(**hardening)
    kwargs = {}
    if chat_template_kwargs:
        try:
            kwargs = json.loads(chat_template_kwargs)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--chat-template-kwargs") from None
        if not isinstance(kwargs, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--chat-template-kwargs")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = ensure_model(model)
    template = open(chat_template, encoding="utf-8").read() if chat_template else None
    spec = lookup(model)
    name = spec.name if spec else path.stem
    config = EngineConfig(model=str(path), model_name=name, n_ctx=n_ctx, parallel=parallel, threads=threads,
                          flash_attn=flash_attn, chat_template=template, max_queue=max_queue,
                          chat_template_kwargs=kwargs,
                          force_tool_emulation=force_tool_emulation, hook_policy=hook_policy, hook_url=hook_url,
                          prefix_cache=prefix_cache, step_tokens=step_tokens, clamp_max_tokens=clamp_max_tokens,
                          hook_timeout=hook_timeout, hook_fail_closed=hook_fail_closed,
                          hooks_default_on=hooks_default_on, signal_window=signal_window,
                          high_entropy_threshold=high_entropy_threshold, verbose=log_level == "debug")
    sys.exit(trio.run(lambda: run_server(config, host=host, port=port, settings=settings)))


if __name__ == "__main__":  # pragma: no cover
    main()
