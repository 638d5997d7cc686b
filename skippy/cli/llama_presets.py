"""llama-server's preset flags on ``skippy serve`` (``--fim-qwen-1.5b-default`` and the others of the pinned
llama.cpp's ``common/arg.cpp``, "presets"): each stands for the flags it sets, expanded where it appears on
the command line, so that a flag after it overrides it and a flag before it is overridden, as llama-server
parses its arguments in order.

:data:`PRESETS` is the table (read once, by :class:`~skippy.cli.serving.ServeCommand`); :func:`expansion`
gives a preset's flags. A preset that needs what skippy lacks (a draft model, llama-server's ngram-mod
speculation, a GGUF split in files, a projector that ``-hf`` fetches too) is refused by name, with the
closest ``skippy serve`` command line. llama-server's ``verbose_prompt`` (``--embd-gemma-default``) has no
counterpart and is left out. Nothing here downloads: the model is an ``-hf`` reference, fetched when the
server starts.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import click

#: ``ctx.meta`` key: the preset flags of the command line, in order
PRESETS_USED = "skippy.presets_used"


@attrs.frozen
class Preset:
    """One preset flag: ``about`` (what llama-server's help says it serves) and either ``args`` (the
    ``skippy serve`` flags it stands for) or ``refused`` (the error: why skippy cannot, and its closest
    command line) with ``lacks`` (what skippy has not, for ``--help``)."""

    about: str
    args: tuple[str, ...] = ()
    refused: str | None = None
    lacks: str = ""

    @property
    def help(self) -> str:
        """The one-line ``--help`` text."""
        if self.refused is not None:
            return f"llama-server's preset for {self.about}: refused, skippy has no {self.lacks}."
        return f"llama-server's preset for {self.about}: stands for {' '.join(self.args)}."


def _hf(repo: str, file: str) -> tuple[str, ...]:
    """The ``-hf`` of an exact file of a Hugging Face repo (llama-server's ``hf_repo`` + ``hf_file``)."""
    return ("-hf", f"hf://{repo}/{file}")


#: what llama-server's code-completion presets set beside the model (llama.vim's server)
_FIM = ("--port", "8012", "-ub", "1024", "-b", "1024", "-c", "0", "--cache-reuse", "256")


def _coder(size: str) -> tuple[str, ...]:
    """A Qwen 2.5 Coder FIM preset's flags (ggml-org's Q8_0 GGUF of that size)."""
    return (*_hf(f"ggml-org/Qwen2.5-Coder-{size.upper()}-Q8_0-GGUF", f"qwen2.5-coder-{size}-q8_0.gguf"), *_FIM)


def _draft(line: str) -> str:
    return ("it needs a 0.5B draft model for speculative decoding, which skippy does not have; its prompt-lookup "
            f"speculation is closest: skippy serve {line} --spec-ngram 4")


#: what llama-server's gpt-oss presets set beside the model: slots, batches, context, sampling defaults
_GPT_OSS = ("--port", "8013", "--jinja", "-ub", "2048", "-b", "32768", "-np", "2", "-c", "262144",
            "--temp", "1", "--top-p", "1", "--top-k", "0", "--min-p", "0.01")


def _split(repo: str) -> str:
    return (f"its GGUF ({repo}) is split in several files, which skippy's -hf cannot pull; closest: skippy serve "
            f"-m FILE.gguf (the first file, downloaded yourself) {' '.join(_GPT_OSS)}")


def _vision(repo: str) -> str:
    return (f"skippy's -hf does not fetch the repo's projector; give it yourself: skippy serve -hf {repo}:Q4_0 "
            f"--mmproj FILE --port 8014 -c 0, the repo's mmproj GGUF pulled with skippy pull hf://{repo}/FILE")


#: the preset flags of the pinned llama-server, in its order
PRESETS: dict[str, Preset] = {
    "--embd-gemma-default": Preset(
        "EmbeddingGemma 300M (embeddings)",
        (*_hf("ggml-org/embeddinggemma-300M-qat-q4_0-GGUF", "embeddinggemma-300M-qat-Q4_0.gguf"), "--port", "8011",
         "-ub", "2048", "-b", "2048", "-np", "32", "-c", "65536", "--embeddings", "--embeddings-batch", "2048")),
    "--fim-qwen-1.5b-default": Preset("Qwen 2.5 Coder 1.5B (code completion)", _coder("1.5b")),
    "--fim-qwen-3b-default": Preset("Qwen 2.5 Coder 3B (code completion)", _coder("3b")),
    "--fim-qwen-7b-default": Preset("Qwen 2.5 Coder 7B (code completion)", _coder("7b")),
    "--fim-qwen-7b-spec": Preset("Qwen 2.5 Coder 7B with a 0.5B draft model",
                                 refused=_draft("--fim-qwen-7b-default"), lacks="draft models"),
    "--fim-qwen-14b-spec": Preset("Qwen 2.5 Coder 14B with a 0.5B draft model",
                                  refused=_draft(" ".join(_coder("14b"))), lacks="draft models"),
    "--fim-qwen-30b-default": Preset(
        "Qwen 3 Coder 30B A3B Instruct (code completion)",
        (*_hf("ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF", "qwen3-coder-30b-a3b-instruct-q8_0.gguf"), *_FIM)),
    "--gpt-oss-20b-default": Preset(
        "gpt-oss-20b", (*_hf("ggml-org/gpt-oss-20b-GGUF", "gpt-oss-20b-mxfp4.gguf"), *_GPT_OSS)),
    "--gpt-oss-120b-default": Preset(
        "gpt-oss-120b", refused=_split("ggml-org/gpt-oss-120b-GGUF"), lacks="pull of a GGUF split in several files"),
    "--vision-gemma-4b-default": Preset("Gemma 3 4B QAT with its vision projector",
                                        refused=_vision("ggml-org/gemma-3-4b-it-qat-GGUF"),
                                        lacks="projector download with -hf"),
    "--vision-gemma-12b-default": Preset("Gemma 3 12B QAT with its vision projector",
                                         refused=_vision("ggml-org/gemma-3-12b-it-qat-GGUF"),
                                         lacks="projector download with -hf"),
    "--spec-default": Preset(
        "speculative decoding",
        refused="its ngram-mod speculation (24-token matches, drafts of 48 to 64 tokens) is not in skippy; the "
                "closest is prompt-lookup speculation: --spec-ngram N (up to 16 drafted tokens, e.g. --spec-ngram 4)",
        lacks="ngram-mod speculation (see --spec-ngram)"),
}


def expansion(ctx: click.Context, flag: str) -> tuple[str, ...]:
    """The ``skippy serve`` flags that preset ``flag`` stands for; the flag is recorded in ``ctx.meta``
    (:data:`PRESETS_USED`) for the messages of :func:`preset_note`.

    Raises:
        click.UsageError: a preset skippy refuses (the message names it, says why and what comes closest).
    """
    preset = PRESETS[flag]
    if preset.refused is not None:
        raise click.UsageError(f"{flag} is refused: {preset.refused}", ctx=ctx)
    ctx.meta.setdefault(PRESETS_USED, []).append(flag)
    return preset.args


def preset_note(ctx: click.Context, flag: str) -> str:
    """`` (FLAG comes from --PRESET)`` when a preset of the command line sets ``flag`` (``-hf``, ``-c``), else
    ``""``: for an error about a flag the user did not type."""
    used = [p for p in ctx.meta.get(PRESETS_USED, []) if flag in PRESETS[p].args]
    return f" ({flag} comes from {used[-1]})" if used else ""


def preset_options() -> list[Callable[[click.decorators.FC], click.decorators.FC]]:
    """A ``skippy serve`` option per preset, for ``--help`` and the flag reference (no value reaches the
    command: :class:`~skippy.cli.serving.ServeCommand` replaces the flag by its expansion before click parses)."""
    return [click.option(flag, flag.lstrip("-").replace("-", "_").replace(".", "_"), is_flag=True, default=False,
                         expose_value=False, help=preset.help)
            for flag, preset in PRESETS.items()]
