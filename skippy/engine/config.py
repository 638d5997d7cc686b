"""Engine configuration (what ``skippy serve`` flags and embedders set), declared once.

Every setting is one attrs field made by :func:`setting`: its default, its
validator (a range, a set of choices or a type) and its help text (in the
field's metadata under :data:`SETTING`). ``EngineConfig(...)`` and
``attrs.evolve(config, ...)`` run the validators, so an embedder's bad
value raises at construction exactly where ``skippy serve`` refuses the
flag. ``skippy/cli/flags.py`` generates the ``skippy serve`` options from these
fields (flag ``--n-ctx`` and environment variable ``SKIPPY_N_CTX`` for the
field ``n_ctx``, with its default, help, type, choices and range);
:class:`~skippy.http.settings.ServerSettings` declares the HTTP layer's
settings the same way. Plain Python: no click here (``skippy.engine`` is
sans-IO).
"""

from __future__ import annotations

import math
import os
import urllib.parse
from typing import TYPE_CHECKING, Any, TypeGuard, cast

import attrs

if TYPE_CHECKING:
    from skippy.engine.runtime.overrides import KVOverride

SETTING = "skippy.setting"
"""Key of a field's :class:`SettingInfo` in ``attrs.Attribute.metadata``."""


@attrs.frozen
class SettingInfo:
    """What a setting says about itself beyond its default and validator.

    ``help``: one or two sentences for ``--help`` and the generated docs.
    ``flag``: whether ``skippy serve`` generates a flag from the field
    (``False`` for settings that only embedders set, or that the CLI fills
    through an explicit adapter, such as a file path read into text).
    ``metavar``: the flag's value placeholder (``None``: from the type).
    ``show_default``: ``True`` to show the default in ``--help``, or a text
    to show instead. ``aliases``: more names of the flag, e.g. llama-server's
    ``-np`` for ``--parallel`` (so a llama-server command line works as it is).
    ``multiple``: the flag is repeatable and the setting a tuple of its values (``--consult A --consult B``).
    ``file``: the value names a file that must exist; ``skippy serve`` checks it as it reads the flag, its
    environment variable or a ``--models-preset`` key (a usage error naming it, as ``--lora``'s), before
    anything loads.
    """

    help: str
    flag: bool = True
    metavar: str | None = None
    show_default: bool | str = True
    aliases: tuple[str, ...] = ()
    multiple: bool = False
    file: bool = False


def setting(default: Any = attrs.NOTHING, *, help: str, check: Any, factory: Any = None, flag: bool = True,
            metavar: str | None = None, show_default: bool | str = True, converter: Any = None,
            aliases: tuple[str, ...] = (), multiple: bool = False, secret: bool = False, file: bool = False) -> Any:
    """An attrs field for a setting: ``default`` (or ``factory``), validator ``check``, ``help`` in metadata.

    ``check`` is one of :class:`IntRange`, :class:`FloatRange`,
    :class:`OneOf`, :class:`IsBool`, :class:`IsText` or another attrs
    validator; the first five are the ones ``skippy serve`` turns into click
    types. ``flag``, ``metavar``, ``show_default``, ``aliases``, ``multiple`` and ``file`` go to
    :class:`SettingInfo`. ``secret``: the value stays out of the config's ``repr`` (a key).
    """
    info = SettingInfo(help=help, flag=flag, metavar=metavar, show_default=show_default, aliases=aliases,
                       multiple=multiple, file=file)
    if factory is not None:
        default = attrs.Factory(factory)
    return attrs.field(default=default, validator=check, converter=converter, metadata={SETTING: info},
                       repr=not secret)


#: the class of ``attrs.Factory(...)``, for ``isinstance`` on a field's default (attrs' stubs declare
#: ``Factory`` a function returning the field's type)
FACTORY = cast("type[Any]", attrs.Factory)


def setting_info(field: attrs.Attribute[Any]) -> SettingInfo | None:
    """The :class:`SettingInfo` of a field made by :func:`setting`, else ``None``."""
    return field.metadata.get(SETTING)


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _bounds(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    """The range as click writes it (``1<=x<=256``, ``x>=16``, ``x>0.0``), so both paths name it alike."""
    left = "" if lo is None else f"{lo}{'<' if lo_open else '<='}"
    right = "" if hi is None else f"<={hi}"
    if lo is not None and hi is None:
        return f"x{'>' if lo_open else '>='}{lo}"
    return f"{left}x{right}"


@attrs.frozen
class IntRange:
    """Validator: an ``int`` (not a ``bool``) with ``min <= value <= max`` (``None``: unbounded).

    ``optional`` also accepts ``None``. Raises ``TypeError`` for another
    type and ``ValueError`` out of range; both messages name the field and
    the range, e.g. ``parallel must be in the range 1<=x<=256, got 0``.
    """

    min: int | None = None
    max: int | None = None
    optional: bool = False

    def describe(self) -> str:
        return _bounds(self.min, self.max)

    def __call__(self, inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if value is None and self.optional:
            return
        if not _int(value):
            none = " or None" if self.optional else ""
            raise TypeError(f"{attr.name} must be an int{none} in the range {self.describe()}, got {value!r}")
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise ValueError(f"{attr.name} must be in the range {self.describe()}, got {value!r}")


@attrs.frozen
class FloatRange:
    """Validator: a real number (``int`` or ``float``, never NaN) in ``[min, max]``.

    ``min_open`` excludes ``min`` itself (``x>0.0``); ``finite`` also refuses
    infinities; ``optional`` also accepts ``None``. Raises ``TypeError`` for another type and ``ValueError``
    out of range; both messages name the field and the range.
    """

    min: float | None = None
    max: float | None = None
    min_open: bool = False
    finite: bool = False
    optional: bool = False

    def describe(self) -> str:
        return _bounds(self.min, self.max, self.min_open)

    def __call__(self, inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if value is None and self.optional:
            return
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            none = " or None" if self.optional else ""
            raise TypeError(f"{attr.name} must be a number{none} in the range {self.describe()}, got {value!r}")
        x = float(value)
        low = self.min is not None and (x <= self.min if self.min_open else x < self.min)
        high = self.max is not None and x > self.max
        if math.isnan(x) or low or high:
            raise ValueError(f"{attr.name} must be in the range {self.describe()}, got {value!r}")
        if self.finite and math.isinf(x):
            raise ValueError(f"{attr.name} must be a finite number in the range {self.describe()}, got {value!r}")


@attrs.frozen
class OneOf:
    """Validator: one of ``choices`` (strings); ``ValueError`` naming the field and the choices otherwise."""

    choices: tuple[str, ...]

    def __call__(self, inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise ValueError(f"{attr.name} must be one of {allowed}, got {value!r}")


@attrs.frozen
class IsBool:
    """Validator: ``True`` or ``False`` (``TypeError`` otherwise: ``"no"`` would be truthy)."""

    def __call__(self, inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"{attr.name} must be True or False, got {value!r}")


@attrs.frozen
class IsText:
    """Validator: a ``str`` (``optional`` also accepts ``None``); ``nonempty`` refuses ``""``."""

    optional: bool = True
    nonempty: bool = False

    def __call__(self, inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, str):
            none = " or None" if self.optional else ""
            raise TypeError(f"{attr.name} must be a str{none}, got {value!r}")
        if self.nonempty and not value:
            raise ValueError(f"{attr.name} must not be empty")


def _template_kwargs(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"{attr.name} must be a dict with str keys (template variables), got {value!r}")


def _hook_policy(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    """``None``, a ``package.module:factory`` spec (imported by ``open_engine``) or a policy object: one with
    any of the hook methods (:data:`~skippy.engine.hooks.policy.EVENTS`), as the hooks guide defines a policy.
    Raises ``ValueError`` for a malformed spec, ``TypeError`` for any other value."""
    from skippy.engine.hooks.policy import EVENTS, check_policy_spec

    if value is None:
        return
    if isinstance(value, str):
        try:
            check_policy_spec(value)
        except ValueError:
            raise ValueError(f"{attr.name} must be 'package.module:factory', a policy object or None, "
                             f"got {value!r}") from None
    elif not any(callable(getattr(value, event, None)) for event in EVENTS):
        raise TypeError(f"{attr.name} must be 'package.module:factory', None or a policy object with any of the "
                        f"hook methods {', '.join(EVENTS)}, got {value!r}")


def _fspath(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _n_ctx(inst: Any, attr: attrs.Attribute[Any], value: int) -> None:
    if 0 < value < 16:
        raise ValueError(f"{attr.name} must be 0 (the model's training context) or >= 16, got {value!r}")


#: most sequences of one llama.cpp context (``LLAMA_MAX_SEQ``, ``llama_max_parallel_sequences()``): the
#: embedding context's inputs per batch
EMBEDDING_MAX_SEQS = 256


def check_embeddings_batch(n: int, name: str = "embeddings_batch") -> None:
    """Raise ``ValueError`` unless ``n`` (the embedding context's ``n_ctx = n_batch = n_ubatch``) is at most
    :data:`EMBEDDING_MAX_SEQS` or a multiple of it.

    The embedding context holds ``min(n, 256)`` sequences, and llama.cpp reserves its compute graph with a
    batch of ``n // n_seq_max`` tokens per sequence; when that division is not exact the pooling's matrix
    product gets mismatched shapes and llama.cpp aborts the process (``GGML_ASSERT(ggml_can_mul_mat(a,
    b))``, seen with 257, 300, 384, 800 and 1000).
    """
    m = EMBEDDING_MAX_SEQS
    if n > m and n % m:
        below, above = n - n % m, n - n % m + m
        raise ValueError(f"{name} above {m} must be a multiple of {m} (llama.cpp splits an embedding batch "
                         f"evenly over its {m} sequences), got {n}: use {below} or {above}")


def _embeddings_batch(inst: Any, attr: attrs.Attribute[Any], value: int) -> None:
    check_embeddings_batch(value, attr.name)


def _aliases(inst: Any, attr: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not isinstance(value, tuple) or not all(isinstance(a, str) and a.strip() for a in value):
        raise TypeError(f"{attr.name} must be non-empty strings, got {value!r}")


def _http_url(inst: Any, attr: attrs.Attribute[Any], value: str | None) -> None:
    """``None``, or an ``http(s)://host[:port][/path]`` URL."""
    IsText()(inst, attr, value)
    if value is not None:
        url = urllib.parse.urlsplit(value)
        if url.scheme not in ("http", "https") or not url.hostname or any(c.isspace() for c in value):
            raise ValueError(f"{attr.name} must be an http:// or https:// URL, got {value!r}")


def _peers(inst: Any, attr: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    """Each consultation peer is a model name (no spaces) or an ``http(s)://host[:port][/path]`` base URL;
    whether a name is served is checked where the served models are known
    (:func:`skippy.engine.hooks.consult.check_peers`)."""
    from skippy.engine.hooks.consult import peer_problem

    if not isinstance(value, tuple):
        raise TypeError(f"{attr.name} must be a str or a sequence of str, got {value!r}")
    for peer in value:
        problem = peer_problem(peer)
        if problem is not None:
            raise ValueError(f"{attr.name}: {problem}")


def _strings(value: Any) -> Any:
    """A str as a 1-tuple, another iterable as a tuple; anything else is left for the validator to refuse
    (a ``TypeError`` naming the field)."""
    if isinstance(value, str):
        return (value,)
    try:
        return tuple(value)
    except TypeError:
        return value


def _lora_pairs(value: Any) -> Any:
    """``lora``: any iterable of ``(path, scale)`` pairs as a tuple of ``(str, float)`` tuples (a path-like
    path as its string); a value that is not such pairs is left for :func:`_lora` to refuse."""
    try:
        return tuple((_fspath(p), float(s)) for p, s in value)
    except (TypeError, ValueError):
        return value


def _lora(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple) or not all(
            isinstance(p, str) and p and isinstance(s, float) and math.isfinite(s) for p, s in value):
        raise TypeError(f"{attr.name} must be (path, scale) pairs with a non-empty path and a finite scale, "
                        f"got {value!r}")


def _n_batch_fits(inst: Any, attr: attrs.Attribute[Any], value: int) -> None:
    if inst is None:  # a flag checked alone (skippy serve -b): the class checks it against parallel
        return
    if value < inst.parallel:
        raise ValueError(f"{attr.name} must be >= parallel ({inst.parallel}): each running sequence decodes "
                         f"one token per step, got {value!r}")


FLASH_ATTN_CHOICES = ("on", "off", "auto")

#: ``split_mode`` values (llama-server's ``--split-mode``; its experimental ``tensor`` is left out)
SPLIT_MODE_CHOICES = ("none", "layer", "row")


def _parsed(name: str, parser: str) -> Any:
    """A converter running ``skippy.engine.runtime.backends.<parser>`` (``overrides.<parser>`` for
    ``parse_overrides`` and ``parse_kv_overrides``; str or sequence -> tuple), whose
    ``ValueError`` names the field (a value that is neither a str nor a sequence: ``TypeError`` naming it); the
    same function is the field's validator, so the ``skippy serve``
    flag (a str, checked before conversion) and an embedder's tuple are checked by the same code."""

    def convert(value: Any) -> Any:
        from skippy.engine.runtime import backends, overrides

        try:
            return getattr(overrides if hasattr(overrides, parser) else backends, parser)(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        except TypeError:  # not a str nor an iterable (device=123)
            raise TypeError(f"{name} must be a comma-separated str or a sequence of values, got {value!r}") from None

    return convert


def _check(convert: Any) -> Any:
    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        convert(value)

    return check


_tensor_split = _parsed("tensor_split", "parse_tensor_split")
_devices = _parsed("device", "parse_devices")
_rpc = _parsed("rpc", "parse_rpc")

_overrides = _parsed("override_tensor", "parse_overrides")
_kv_overrides = _parsed("override_kv", "parse_kv_overrides")

#: ``numa`` values (llama-server's ``--numa``; ``disabled``: no NUMA set-up, ggml's GGML_NUMA_STRATEGY_DISABLED)
NUMA_CHOICES = ("disabled", "distribute", "isolate", "numactl")

#: ``rope_scaling`` values (llama-server's ``--rope-scaling``; ``model``: the GGUF's, LLAMA_ROPE_SCALING_TYPE_
#: UNSPECIFIED)
ROPE_SCALING_CHOICES = ("model", "none", "linear", "yarn")

#: ``reasoning_format`` values: skippy.engine.chat.formats.core.REASONING_FORMATS (llama-server's
#: --reasoning-format none, deepseek, deepseek-legacy, auto, and skippy's hidden); a test keeps them equal
REASONING_FORMAT_CHOICES = ("auto", "none", "deepseek", "deepseek-legacy", "hidden")

#: ``reader_wait`` values: whether the decode loop waits for request tasks to write a step's tokens before the
#: next decode (``auto``: where llama.cpp computes on the event loop's cores;
#: :func:`~skippy.engine.scheduling.config.host_bound`)
READER_WAIT_CHOICES = ("auto", "on", "off")

#: ``pooling`` values (llama-server's ``--pooling``; ``model``: the GGUF's ``<arch>.pooling_type``; ``rank``: a
#: reranker's relevance score, what ``--reranking`` sets)
POOLING_CHOICES = ("model", "mean", "cls", "last", "none", "rank")


def check_reranking(reranking: bool, pooling: str) -> None:
    """Raise ``ValueError`` when ``reranking`` (rank pooling) is asked for with another ``pooling``: one embedding
    context pools one way, so it serves either embedding vectors or relevance scores, as in llama-server."""
    if reranking and pooling not in ("model", "rank"):
        raise ValueError(f"reranking needs rank pooling, but pooling is {pooling!r}: one embedding context serves "
                         "either /v1/embeddings or /v1/rerank; drop --pooling or --reranking")

#: KV cache types (llama-server's ``--cache-type-k`` / ``--cache-type-v`` values, ggml type names)
CACHE_TYPE_CHOICES = ("f16", "bf16", "f32", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

#: the quantized ones (ggml_is_quantized): a quantized V cache needs flash attention
QUANTIZED_CACHE_TYPES = frozenset({"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})


def check_cache_types(cache_type_v: str, flash_attn: str) -> None:
    """Raise ``ValueError`` for a combination llama.cpp refuses: a quantized V cache without flash
    attention (``llama_init_from_model`` returns NULL; with ``auto`` it turns flash attention on)."""
    if cache_type_v in QUANTIZED_CACHE_TYPES and flash_attn == "off":
        raise ValueError(f"cache_type_v {cache_type_v} (a quantized V cache) needs flash attention: use "
                         f"flash_attn auto or on, or an f16/bf16/f32 V cache")


def check_rope_scale(rope_scale: float, rope_freq_scale: float) -> None:
    """Raise ``ValueError`` when ``rope_scale`` (N) and ``rope_freq_scale`` (1/N) are both set and disagree
    (llama-server lets the later flag win; here the order is lost)."""
    if rope_scale > 0 and rope_freq_scale > 0 and not math.isclose(1.0 / rope_scale, rope_freq_scale):
        raise ValueError(f"rope_scale {rope_scale:g} and rope_freq_scale {rope_freq_scale:g} disagree (rope_scale N "
                         f"is rope_freq_scale 1/N): give one of them")


def check_image_tokens(image_min_tokens: int | None, image_max_tokens: int | None) -> None:
    """Raise ``ValueError`` when both image token bounds are set and the minimum is above the maximum."""
    if image_min_tokens and image_max_tokens and image_min_tokens > image_max_tokens:
        raise ValueError(f"image_min_tokens ({image_min_tokens}) is above image_max_tokens ({image_max_tokens})")


def _default_of(field: str, llama: str) -> str:
    """The ``--help`` text of a sampling default: the request field it fills in, and llama-server's default."""
    return (f"Default {field} of a request that sets none (llama-server's flag; unset: llama-server's default, "
            f"{llama}). Requests override it.")


#: the sampling defaults among :class:`EngineConfig`'s settings: each is the request field of its name
SAMPLING_DEFAULTS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
                     "presence_penalty", "frequency_penalty", "seed", "top_n_sigma", "xtc_probability",
                     "xtc_threshold", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
                     "dynatemp_range", "dynatemp_exponent", "mirostat", "mirostat_eta", "mirostat_tau")


@attrs.frozen
class EngineConfig:
    """How to load and serve one model; every field is validated at construction.

    Only ``model`` is required. Each field's default, range and help text
    are declared once below (:func:`setting`); ``skippy serve`` derives its
    flags from them, and the list of fields with their ranges is appended
    to this docstring. A bad value raises ``TypeError`` (wrong type) or
    ``ValueError`` (out of range) naming the field and its range, also
    through ``attrs.evolve``.

    The llama.cpp context holds ``n_ctx * parallel`` KV cells (as Ollama's
    ``num_ctx`` x ``num_parallel``). ``n_ctx`` defaults to 8192 so that a
    short chat with ``"max_tokens": 4096`` (a default of several clients)
    fits the default model (SmolLM2-135M, trained on 8192): measured RSS of
    ``skippy serve`` with 8 slots was 1.67 GB at 8192 and 0.93 GB at 4096;
    ``0`` takes the model's training context (llama-server's ``-c 0``). ``flash_attn`` follows llama-server's
    ``--flash-attn`` (default ``auto``; measured twice on 2 CPU cores with
    bench/bench_decode.py, auto gave 295-309 tok/s at 16 streams against
    264-282 with off, and 139-144 against 129-135 single-stream). With ``off`` a cached prompt's last two
    tokens are prefilled again instead of one, so its greedy answer equals a cold run's (README, Prefix cache).
    ``cache_type_k`` / ``cache_type_v``, ``kv_unified`` and ``swa_full`` follow llama-server's
    ``--cache-type-k`` / ``--cache-type-v`` / ``--kv-unified`` / ``--swa-full``; a quantized V
    cache with ``flash_attn="off"`` raises ``ValueError`` (llama.cpp refuses it).
    ``ctx_checkpoints`` and ``cache_ram`` (MiB) follow llama-server's ``--ctx-checkpoints`` and
    ``--cache-ram`` (its defaults, 32 and 8192); they matter only for recurrent, hybrid and
    sliding-window models (:mod:`skippy.engine.scheduling.checkpoint`).
    ``spec_ngram`` is vLLM's ``ngram`` speculative method
    (``num_speculative_tokens``; n-grams of 4 down to 2 tokens); output is the
    same as without it (up to near-ties, see the README). Off by default: on 2 CPU cores
    a 2-token verify batch costs 2.07 decode steps and bench/bench_spec.py measured no gain.
    ``clamp_max_tokens`` (on by default) follows llama-server and Ollama: a ``max_tokens``
    beyond the context is clamped to the room left (Anthropic clients send 32000); off, it is a
    400, as in OpenAI and vLLM. ``reasoning_budget`` and
    ``reasoning_budget_message`` follow llama-server's ``--reasoning-budget`` /
    ``--reasoning-budget-message`` (:mod:`skippy.engine.scheduling.budget`).
    Embedders may pass a policy object as ``hook_policy`` instead of a
    ``package.module:factory`` spec; ``hook_policy`` and ``hook_url`` are
    exclusive (checked by ``open_engine``).
    """

    model: str = setting(help="GGUF path (str or os.PathLike) or model-cache name (skippy pull).",
                         check=IsText(optional=False, nonempty=True), converter=_fspath, flag=False)
    model_name: str | None = setting(None, check=IsText(),
                                     help="Model id reported by /v1/models and in responses [default: the "
                                          "GGUF's name].", flag=False)
    model_alias: tuple[str, ...] = setting((), check=_aliases, converter=_strings, flag=False,
                                           help="More names the model answers to and /v1/models lists (llama-server "
                                                "--alias, vLLM --served-model-name).")
    n_ctx: int = setting(8192, check=attrs.validators.and_(IntRange(0), _n_ctx),
                         help="Context of each sequence in tokens (prompt + completion), rounded up to a multiple "
                              "of 256 as llama.cpp pads it; clamped to the model's training context; 0: the training "
                              "context.")
    parallel: int = setting(8, check=IntRange(1, 256), help="Max sequences decoding at once (slots).",
                            aliases=("-np",))
    threads: int | None = setting(None, check=IntRange(1, optional=True),
                                  help="CPU threads for llama.cpp [default: all cores].", aliases=("-t",))
    flash_attn: str = setting("auto", check=OneOf(FLASH_ATTN_CHOICES), aliases=("-fa",),
                              help="llama.cpp flash attention; auto (llama-server's default) turns it on where "
                                   "the backend supports it.")
    cache_type_k: str = setting("f16", aliases=("-ctk",), check=OneOf(CACHE_TYPE_CHOICES),
                                help="KV cache type of K (llama-server's --cache-type-k); q8_0 takes 53% of f16's "
                                     "memory, q4_0 28%.")
    cache_type_v: str = setting("f16", aliases=("-ctv",), check=OneOf(CACHE_TYPE_CHOICES),
                                help="KV cache type of V (llama-server's --cache-type-v); a quantized V cache "
                                     "needs flash attention (auto or on).")
    kv_unified: bool = setting(False, aliases=("-kvu",), check=IsBool(),
                               help="One KV buffer whose n_ctx x parallel cells all sequences share "
                                    "(llama-server's --kv-unified): a cached prefix is shared, not copied; "
                                    "on 2 CPU cores a 256-client burst sharing one long prompt took 7% less "
                                    "time with it, short chats the same. Off by default: greedy output can "
                                    "then depend on other requests.")
    swa_full: bool = setting(False, check=IsBool(),
                             help="Full-size KV cache for the sliding-window attention layers (llama-server's "
                                  "--swa-full; Gemma 2/3...): every cached prefix can be reused, at the memory of "
                                  "a full cache. Off: those layers keep about the window (512 on Gemma 3), and a "
                                  "prefix whose window they no longer hold is prefilled again.")
    n_gpu_layers: int | None = setting(None, check=IntRange(-1, optional=True), aliases=("-ngl", "--gpu-layers"),
                                       metavar="N", show_default=False,
                                       help="Layers to offload to the GPU and RPC devices (llama-server's -ngl); "
                                            "-1 or more than the model has: all [default: all when a GPU or RPC "
                                            "device is in use, else 0]. Without one it is ignored, as in "
                                            "llama-server.")
    split_mode: str = setting("layer", check=OneOf(SPLIT_MODE_CHOICES), aliases=("-sm",),
                              help="How the model is split over several devices (llama-server's --split-mode): "
                                   "none (the --main-gpu device only), layer (layers and KV), row (weight rows).")
    main_gpu: int = setting(0, check=IntRange(0), aliases=("-mg",),
                            help="Index of the device used alone with --split-mode none, or for intermediate "
                                 "results and KV with row (llama-server's --main-gpu).")
    tensor_split: tuple[float, ...] = setting(None, check=_check(_tensor_split), converter=_tensor_split,
                                              aliases=("-ts",), metavar="N0,N1,...", show_default=False,
                                              help="Proportion of the model for each device, e.g. 3,1 "
                                                   "(llama-server's --tensor-split) [default: by free memory].")
    device: tuple[str, ...] = setting(None, check=_check(_devices), converter=_devices, aliases=("-dev",),
                                      metavar="DEV1,DEV2|none", show_default=False,
                                      help="Devices to offload to, by llama.cpp name (CUDA0, Vulkan0, RPC0...; "
                                           "/props lists them), or none (llama-server's --device) [default: every "
                                           "GPU and RPC device].")
    rpc: tuple[str, ...] = setting(None, check=_check(_rpc), converter=_rpc, metavar="HOST:PORT,...",
                                   show_default=False,
                                   help="llama.cpp RPC workers (skippy rpc-worker) whose devices hold layers of "
                                        "the model (llama-server's --rpc); a worker that does not answer is a "
                                        "start-up error. The protocol has no authentication: trusted networks "
                                        "only.")
    override_tensor: tuple[str, ...] = setting((), check=_check(_overrides), converter=_overrides, multiple=True,
                                               aliases=("-ot",), metavar="PATTERN=BUFFER,...", show_default=False,
                                               help="Put the weights whose name matches the regular expression "
                                                    "PATTERN in buffer type BUFFER (CPU, CUDA0...; llama-server's "
                                                    "--override-tensor): repeatable or comma-separated, the first "
                                                    "match wins; an unknown buffer type or a pattern that matches "
                                                    "no tensor of the model is a start-up error.")
    override_kv: tuple[KVOverride, ...] = setting((), check=_check(_kv_overrides), converter=_kv_overrides,
                                                 multiple=True, metavar="KEY=TYPE:VALUE,...", show_default=False,
                                                 help="Load the model as if its GGUF metadata held VALUE for KEY "
                                                      "(llama-server's --override-kv), e.g. "
                                                      "tokenizer.ggml.add_bos_token=bool:false; TYPE is int, "
                                                      "float, bool (true or false) or str (at most 127 bytes). "
                                                      "Repeatable or comma-separated (double-quote an item "
                                                      "holding a comma); the first of a key given twice wins. "
                                                      "A type other than the one llama.cpp reads for KEY is "
                                                      "ignored with a warning in the log.")
    cpu_moe: bool = setting(False, check=IsBool(), aliases=("-cmoe",),
                            help="Keep every Mixture-of-Experts expert weight in CPU memory (llama-server's "
                                 "--cpu-moe: -ot '\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU').")
    n_cpu_moe: int = setting(0, check=IntRange(0), aliases=("-ncmoe",), metavar="N",
                             help="Keep the expert weights of the first N layers in CPU memory (llama-server's "
                                  "--n-cpu-moe); more than the model's layers is a start-up error.")
    mlock: bool = setting(False, check=IsBool(),
                          help="Lock the model's weights in RAM (llama-server's --mlock; llama.cpp load mode "
                               "mmap+mlock, or mlock with --no-mmap): no swapping; needs RLIMIT_MEMLOCK.")
    mmap: bool = setting(True, check=IsBool(),
                         help="Memory-map the GGUF (llama.cpp's default); --no-mmap reads it into memory instead "
                              "(llama-server's --no-mmap, load mode none).")
    repack: bool = setting(True, check=IsBool(), aliases=(" /-nr",),
                           help="Repack quantized weights at load into the layouts of llama.cpp's faster CPU "
                                "kernels (its extra buffer types; llama.cpp's default); --no-repack keeps them as "
                                "stored (llama-server's --no-repack): slower on the CPU, but a sequence's logits no "
                                "longer depend on its place in a batch (reproducible seeded output with several "
                                "slots).")
    numa: str = setting("disabled", check=OneOf(NUMA_CHOICES),
                        help="NUMA optimisations (llama-server's --numa, llama_numa_init, once per process): "
                             "distribute (threads over all nodes), isolate (the node the server started on), "
                             "numactl (the CPU map numactl gave).")
    rope_scaling: str = setting("model", check=OneOf(ROPE_SCALING_CHOICES),
                                help="RoPE frequency scaling (llama-server's --rope-scaling): none, linear or yarn; "
                                     "model: the GGUF's.")
    rope_scale: float = setting(0.0, check=FloatRange(0.0, finite=True), metavar="N",
                                help="RoPE context scaling factor: the context grows by N (llama-server's "
                                     "--rope-scale; --rope-freq-scale 1/N); 0: the model's.")
    rope_freq_base: float = setting(0.0, check=FloatRange(0.0, finite=True), metavar="N",
                                    help="RoPE base frequency (llama-server's --rope-freq-base); 0: the model's.")
    rope_freq_scale: float = setting(0.0, check=FloatRange(0.0, finite=True), metavar="N",
                                     help="RoPE frequency scaling factor, the context grows by 1/N (llama-server's "
                                          "--rope-freq-scale); 0: the model's.")
    yarn_orig_ctx: int = setting(0, check=IntRange(0), metavar="N",
                                 help="YaRN's original training context (llama-server's --yarn-orig-ctx); 0: the "
                                      "model's.")
    yarn_ext_factor: float = setting(-1.0, check=FloatRange(-1.0, finite=True), metavar="N",
                                     help="YaRN extrapolation mix factor (llama-server's --yarn-ext-factor); 0.0: "
                                          "full interpolation, -1: the model's.")
    yarn_attn_factor: float = setting(-1.0, check=FloatRange(finite=True), metavar="N",
                                      help="YaRN magnitude scaling factor (llama-server's --yarn-attn-factor); -1: "
                                           "the model's.")
    yarn_beta_slow: float = setting(-1.0, check=FloatRange(finite=True), metavar="N",
                                    help="YaRN high correction dimension or alpha (llama-server's "
                                         "--yarn-beta-slow); -1: the model's.")
    yarn_beta_fast: float = setting(-1.0, check=FloatRange(finite=True), metavar="N",
                                    help="YaRN low correction dimension or beta (llama-server's "
                                         "--yarn-beta-fast); -1: the model's.")
    mmproj: str | None = setting(None, aliases=("-mm",), check=IsText(), converter=_fspath, metavar="FILE",
                                 show_default=False, file=True,
                                 help="Multimodal projector GGUF of the model (llama-server's --mmproj): requests may "
                                      "then send images (OpenAI image_url parts with base64 data URLs; http(s) "
                                      "URLs with --allow-image-urls), read by llama.cpp's libmtmd. With several "
                                      "models: the first one's (--models-dir takes NAME.mmproj.gguf beside NAME.gguf "
                                      "as NAME's).")
    mmproj_offload: bool = setting(True, check=IsBool(),
                                   help="Run the --mmproj projector on the GPU when there is one (llama-server's "
                                        "--mmproj-offload / --no-mmproj-offload).")
    image_min_tokens: int | None = setting(None, check=IntRange(1, optional=True), metavar="N", show_default=False,
                                           help="Fewest embeddings an image becomes, for projectors that resize "
                                                "images to a variable grid (Qwen2-VL and later; llama-server's "
                                                "--image-min-tokens); default: the projector's.")
    image_max_tokens: int | None = setting(None, check=IntRange(1, optional=True), metavar="N", show_default=False,
                                           help="Most embeddings an image becomes, for projectors that resize "
                                                "images to a variable grid (llama-server's --image-max-tokens); "
                                                "default: the projector's.")
    lora: tuple[tuple[str, float], ...] = setting((), check=_lora, converter=_lora_pairs, flag=False,
                                                  help="LoRA adapter GGUFs of the model with their start-up "
                                                       "scales, as (path, scale) pairs, ids from 0 in this order "
                                                       "(skippy serve --lora FILE / --lora-scaled FILE SCALE, "
                                                       "llama-server's flags). Requests pick adapters with "
                                                       "\"lora\": [{\"id\", \"scale\"}] or model "
                                                       "\"BASE:ADAPTER\"; an adapter for another model is a "
                                                       "start-up error.")
    lora_init_without_apply: bool = setting(False, check=IsBool(),
                                            help="Load the --lora adapters with a global scale of 0 (requests "
                                                 "without a lora field run the base model) until POST "
                                                 "/lora-adapters sets one (llama-server's "
                                                 "--lora-init-without-apply).")
    allow_image_urls: bool = setting(False, check=IsBool(),
                                     help="Fetch http(s) image URLs of chat image_url parts (as vLLM and "
                                          "llama-server do) before rendering; without it only base64 data URLs "
                                          "are read. Public addresses only (every address the host resolves to "
                                          "is checked, redirects too, at most 3), 10 s and 20 MiB per image, at "
                                          "most 16 images per request.")
    allow_private_image_urls: bool = setting(False, check=IsBool(),
                                             help="UNSAFE: with --allow-image-urls, also fetch image URLs whose "
                                                  "host is a private, loopback or link-local address (this "
                                                  "machine, the local network, cloud metadata services): any "
                                                  "client could then make the server read them. For tests and "
                                                  "trusted networks only.")
    chat_template: str | None = setting(None, check=IsText(), flag=False,
                                        help="Jinja2 chat template text overriding the model's (skippy serve "
                                             "--chat-template reads it from a file).")
    n_batch: int = setting(512, check=attrs.validators.and_(IntRange(1), _n_batch_fits),
                           aliases=("-b", "--batch-size"), metavar="N",
                           help="llama.cpp n_batch: most tokens in one llama_decode call (llama-server's "
                                "-b/--batch-size; >= parallel: each running sequence decodes one token per step); "
                                "bounds step_tokens.")
    n_ubatch: int | None = setting(None, check=IntRange(1, optional=True), aliases=("-ub", "--ubatch-size"),
                                   metavar="N", show_default=False,
                                   help="llama.cpp n_ubatch: most tokens of one physical batch inside a decode "
                                        "(llama-server's -ub/--ubatch-size); more than n_batch is clamped to "
                                        "n_batch, as llama.cpp does [default: n_batch].")
    step_tokens: int = setting(256, check=IntRange(8, 512),
                               help="Token budget of one decode step while a stream is decoding, shared by "
                                    "prefill chunks and running streams (bounds ITL); a step with no stream "
                                    "decoding prefills up to -b/--batch-size tokens.")
    max_queue: int = setting(1024, check=IntRange(1), help="Requests waiting for a slot before new ones get 429 "
                                                           "(a request a free slot takes does not wait).")
    chat_template_kwargs: dict[str, Any] = setting(factory=dict, check=_template_kwargs, flag=False,
                                         help="Default template variables (requests override them).")
    force_tool_emulation: bool = setting(False, check=IsBool(),
                                         help="Use TOOL_CALL text emulation for tools even when the chat template "
                                              "supports tools.")
    prefix_cache: bool = setting(True, check=IsBool(),
                                 help="Keep finished sequences' KV cache and reuse shared prompt prefixes.")
    ctx_checkpoints: int = setting(32, check=IntRange(0, 1024), aliases=("-ctxcp", "--swa-checkpoints"),
                                   help="Context checkpoints kept per slot for recurrent, hybrid and sliding-window "
                                        "models (llama-server's --ctx-checkpoints): the state saved at a chat's "
                                        "history boundary, restored by the next turn; 0 turns them off.")
    cache_ram: int = setting(8192, check=IntRange(-1), aliases=("-cram",), metavar="MIB",
                             help="Host memory in MiB (llama-server's --cache-ram) for context checkpoints "
                                  "and, on other models, the prompt cache: a cached prompt about to be "
                                  "overwritten in its slot (or, with the KV cache in host memory, any cached "
                                  "prompt while the server is idle) is kept here and restored for a later prompt "
                                  "that shares it (at most 1024 prompts); the least recently used go first; -1: "
                                  "no limit, 0: none.")
    spec_ngram: int = setting(0, check=IntRange(0, 16),
                              help="Prompt-lookup speculative decoding (vLLM's ngram method): draft up to this many "
                                   "tokens per step from an earlier occurrence of the last n-gram, verified in one "
                                   "batch; 0 turns it off (requests may set \"speculative\").")
    scheduler_steps: int = setting(8, check=IntRange(1, 64),
                                   help="Decodes a batch without prefill may run back to back on the decode thread "
                                        "before the loop hands out their tokens (multi-step scheduling, vLLM's "
                                        "--num-scheduler-steps): fewer thread handoffs and socket writes per token, "
                                        "tokens streamed in bursts of up to this many; 1 turns it off.")
    backend_sampling: bool = setting(False, aliases=("-bs",), check=IsBool(),
                                     help="Sample requests without logprobs, hooks, a grammar or extended "
                                          "samplers inside llama.cpp's decode graph (llama-server's "
                                          "--backend-sampling, off there too), greedy or sampled (the same tokens "
                                          "for the same seed): no logits copied out, no sampling in Python; a slot "
                                          "taking a sampled request, or switching between greedy and other "
                                          "requests, costs one graph reserve (~10 ms on 2 cores). Off by default: "
                                          "on CPU cores llama.cpp's sampling nodes cost more than they save "
                                          "(bench/bench_sampling.py --loop).")
    reader_wait: str = setting("auto", check=OneOf(READER_WAIT_CHOICES),
                               help="Before a decode, wait (at most 5 ms a decode) until the request tasks have "
                                    "written the tokens of the last one (on), or let them write while the next "
                                    "decode runs (off). auto: wait only where llama.cpp computes on the cores the "
                                    "event loop runs on (some layer or expert on the CPU and --threads taking every "
                                    "core), where Python beside llama.cpp's spinning threads stalls its steps; "
                                    "with every layer on a GPU the writes overlap the decode.")
    clamp_max_tokens: bool = setting(True, check=IsBool(),
                                     help="Clamp a max_tokens that does not fit the context to the room left, as "
                                          "llama-server and Ollama do (reported in the X-Skippy-Max-Tokens-Clamped "
                                          "header); --no-clamp-max-tokens answers 400 context_length_exceeded "
                                          "instead (OpenAI, vLLM). A prompt that alone fills the context is a 400 "
                                          "either way.")
    n_predict: int = setting(-1, check=IntRange(-1), aliases=("-n", "--predict"), metavar="N",
                             help="Tokens to generate when a request sets no max_tokens (llama-server's "
                                  "-n/--n-predict): -1 until the context is full; always within the room left.")
    # -- sampling defaults: a request that leaves the field out gets the server's value (llama-server's flags)
    temperature: float | None = setting(None, check=FloatRange(None, 100.0, finite=True, optional=True),
                                        aliases=("--temp",), metavar="T", show_default=False,
                                        help=_default_of("temperature", "0.8; 0 or below: greedy"))
    top_k: int | None = setting(None, check=IntRange(0, optional=True), metavar="N", show_default=False,
                                help=_default_of("top_k", "40; 0: off"))
    top_p: float | None = setting(None, check=FloatRange(0.0, 1.0, optional=True), metavar="P",
                                  show_default=False, help=_default_of("top_p", "0.95; 1: off"))
    min_p: float | None = setting(None, check=FloatRange(0.0, 1.0, optional=True), metavar="P", show_default=False,
                                  help=_default_of("min_p", "0.05; 0: off"))
    typical_p: float | None = setting(None, check=FloatRange(0.0, 1.0, min_open=True, optional=True),
                                      aliases=("--typical",), metavar="P", show_default=False,
                                      help=_default_of("typical_p", "1: off"))
    repeat_penalty: float | None = setting(None, check=FloatRange(0.0, 100.0, min_open=True, optional=True),
                                           metavar="X", show_default=False,
                                           help=_default_of("repeat_penalty", "1: off"))
    repeat_last_n: int | None = setting(None, check=IntRange(-1, 1 << 24, optional=True), metavar="N",
                                        show_default=False,
                                        help=_default_of("repeat_last_n", "64; -1: the whole context"))
    presence_penalty: float | None = setting(None, check=FloatRange(-2.0, 2.0, optional=True), metavar="X",
                                             show_default=False, help=_default_of("presence_penalty", "0: off"))
    frequency_penalty: float | None = setting(None, check=FloatRange(-2.0, 2.0, optional=True), metavar="X",
                                              show_default=False, help=_default_of("frequency_penalty", "0: off"))
    seed: int | None = setting(None, check=IntRange(-(1 << 63), (1 << 64) - 1, optional=True), aliases=("-s",),
                               metavar="N", show_default=False,
                               help=_default_of("seed", "-1 (or 4294967295): a random one per request; taken "
                                                        "modulo 2^32 as llama-server's uint32 seed, -5 is 4294967291"))
    top_n_sigma: float | None = setting(None, check=FloatRange(-1.0, 100.0, optional=True),
                                        aliases=("--top-nsigma",), metavar="X", show_default=False,
                                        help=_default_of("top_n_sigma", "-1: off"))
    xtc_probability: float | None = setting(None, check=FloatRange(0.0, 1.0, optional=True), metavar="P",
                                            show_default=False, help=_default_of("xtc_probability", "0: off"))
    xtc_threshold: float | None = setting(None, check=FloatRange(0.0, 1.0, optional=True), metavar="P",
                                          show_default=False, help=_default_of("xtc_threshold", "0.1"))
    dry_multiplier: float | None = setting(None, check=FloatRange(0.0, 100.0, optional=True), metavar="X",
                                           show_default=False, help=_default_of("dry_multiplier", "0: off"))
    dry_base: float | None = setting(None, check=FloatRange(1.0, 100.0, optional=True), metavar="X",
                                     show_default=False, help=_default_of("dry_base", "1.75"))
    dry_allowed_length: int | None = setting(None, check=IntRange(0, 1 << 20, optional=True), metavar="N",
                                             show_default=False, help=_default_of("dry_allowed_length", "2"))
    dry_penalty_last_n: int | None = setting(None, check=IntRange(-1, 1 << 24, optional=True), metavar="N",
                                             show_default=False,
                                             help=_default_of("dry_penalty_last_n", "-1: the whole context"))
    dynatemp_range: float | None = setting(None, check=FloatRange(0.0, 100.0, optional=True), metavar="X",
                                           show_default=False, help=_default_of("dynatemp_range", "0: off"))
    dynatemp_exponent: float | None = setting(None, check=FloatRange(0.0, 100.0, optional=True),
                                              aliases=("--dynatemp-exp",), metavar="X", show_default=False,
                                              help=_default_of("dynatemp_exponent", "1"))
    mirostat: int | None = setting(None, check=IntRange(0, 2, optional=True), metavar="N", show_default=False,
                                   help=_default_of("mirostat", "0: off; 1 or 2: Mirostat's version"))
    mirostat_eta: float | None = setting(None, check=FloatRange(0.0, 1.0, min_open=True, optional=True),
                                         aliases=("--mirostat-lr",), metavar="X", show_default=False,
                                         help=_default_of("mirostat_eta", "0.1"))
    mirostat_tau: float | None = setting(None, check=FloatRange(0.0, 100.0, optional=True),
                                         aliases=("--mirostat-ent",), metavar="X", show_default=False,
                                         help=_default_of("mirostat_tau", "5"))
    reasoning_format: str = setting("auto", check=OneOf(REASONING_FORMAT_CHOICES),
                                    help="Where <think> reasoning goes when a request sets no reasoning_format "
                                         "(llama-server's --reasoning-format): auto and deepseek in "
                                         "reasoning_content, deepseek-legacy there and in content too, none left "
                                         "in content, hidden dropped.")
    cache_reuse: int = setting(0, check=IntRange(0), metavar="N",
                               help="Past a prompt's cached prefix, reuse cached chunks of at least N tokens "
                                    "that the prompt holds further on by shifting their KV to the new positions "
                                    "(llama-server's --cache-reuse; code-completion clients such as llama.vim "
                                    "ask for 256); 0: off. Not with --kv-unified, sliding-window or recurrent "
                                    "models, or images (a warning says so).")
    reasoning_budget: int = setting(-1, check=IntRange(-1),
                                    help="Reasoning tokens allowed inside <think> before the closing tag is forced "
                                         "(llama-server's --reasoning-budget): -1 unlimited, 0 close at once; "
                                         "requests may set \"thinking_budget_tokens\".")
    reasoning_budget_message: str | None = setting(None, check=IsText(),
                                            help="Text forced before the closing tag when the reasoning budget is "
                                                 "spent (llama-server's --reasoning-budget-message).")
    embeddings: bool = setting(False, check=IsBool(), aliases=("--embedding",),
                               help="Serve POST /v1/embeddings from a second llama.cpp context on the same weights "
                                    "(embeddings = true), batched beside decoding; generation stays on.")
    pooling: str = setting("model", check=OneOf(POOLING_CHOICES),
                           help="Pooling of the embedding context (llama-server's --pooling); model: the GGUF's "
                                "(none for most chat models, which /v1/embeddings refuses and POST /embedding "
                                "answers with a vector per token; rank: a reranker's score, as --reranking sets).")
    reranking: bool = setting(False, check=IsBool(), aliases=("--rerank",),
                              help="Serve POST /v1/rerank, /rerank, /v2/rerank and /score (llama-server's "
                                   "--reranking): the embedding context with rank pooling scores query-document "
                                   "pairs with the model's classification head, batched beside decoding; for a "
                                   "reranker GGUF (bge-reranker, ms-marco cross-encoders). /v1/embeddings is then "
                                   "refused: one embedding context pools one way.")
    embeddings_batch: int = setting(512, check=attrs.validators.and_(IntRange(16, 65536), _embeddings_batch),
                                    help="Tokens of one embedding batch: the longest input, and what one batch "
                                         "may add to running streams' ITL (llama-server's -ub); 16 to 256, or a "
                                         "multiple of 256 (llama.cpp splits a batch evenly over 256 sequences).")
    hook_policy: Any = setting(None, check=_hook_policy, metavar="MODULE:FACTORY",
                               help="Python hook policy: package.module:factory returning an object with async "
                                    "hook methods.")
    hook_url: str | None = setting(None, check=_http_url, metavar="URL",
                                   help='Webhook hook policy: each event is POSTed as JSON; the reply is '
                                        '{"action": "none"|"inject"|"stop", ...}.')
    hook_timeout: float = setting(2.0, check=FloatRange(0.0, min_open=True, finite=True),
                                  help="Seconds per hook call; a timeout or error means no action (logged and "
                                       "counted).")
    hook_fail_closed: bool = setting(False, check=IsBool(),
                                     help="A failed or timed-out hook call stops the generation (finish_reason "
                                          "hook_error) instead.")
    hooks_default_on: bool = setting(False, check=IsBool(),
                                     help='Run hooks for every request, not only those with "mesh_hooks": true.')
    signal_window: int = setting(16, check=IntRange(1, 4096),
                                 help="Tokens in the sliding window of uncertainty signals for the "
                                      "mid-generation hook.")
    high_entropy_threshold: float = setting(2.0, check=FloatRange(0.0, finite=True),
                                            help="Entropy (nats) above which a token counts as high-entropy.")
    consult: tuple[str, ...] = setting((), check=_peers, converter=_strings, metavar="PEER", multiple=True,
                                       show_default=False,
                                       help="Another model to consult when this one is unsure (repeatable): the name "
                                            "of another model this server serves, or the base URL of an "
                                            "OpenAI-compatible server (http://host:port or .../v1: another skippy, "
                                            "llama-server, vLLM, Ollama). Its short answer is read as hidden "
                                            "context before the model goes on (docs: guides/consult). Runs for "
                                            "requests with hooks on (\"mesh_hooks\": true or --hooks-default-on).")
    consult_entropy: float = setting(3.5, check=FloatRange(0.0, finite=True),
                                     help="Consult when the first token's entropy (nats) is at or above this "
                                          "(chosen by bench_consult: the measured pair that consulted least; see "
                                          "the consult guide).")
    consult_margin: float = setting(0.2, check=FloatRange(0.0, finite=True),
                                    help="Consult when the first token's margin (nats, top-1 minus top-2 log "
                                         "probability) is at or below this (chosen by bench_consult with "
                                         "--consult-entropy; see the consult guide).")
    consult_timeout: float = setting(10.0, check=FloatRange(0.0, min_open=True, finite=True),
                                     help="Seconds one consultation may take (the peers' /v1/models reads "
                                          "and questions together); past it the model goes on without a note. "
                                          "With --consult the hook timeout is at least this + 1 s (with a hook "
                                          "policy too: both added + 1 s).")
    consult_max_tokens: int = setting(200, check=IntRange(1, 8192),
                                      help="max_tokens of a consultation request (the peer's answer).")
    consult_api_key: str | None = setting(None, check=IsText(), metavar="KEY", show_default=False, secret=True,
                                          help="API key sent to the --consult peers given by URL (Authorization: "
                                               "Bearer KEY), for a peer served with an API key (another skippy or "
                                               "llama-server with --api-key, vLLM, a hosted API). A peer URL with "
                                               "user:password@ takes those as Basic auth instead.")
    consult_max_chars: int = setting(512, check=IntRange(16, 65536),
                                     help="Characters of a peer's answer injected at most (cut at a sentence or "
                                          "word boundary).")
    verbose: bool = setting(False, check=IsBool(), flag=False,
                            help="llama.cpp's own log lines on stderr (skippy serve --log-level debug).")

    def __attrs_post_init__(self) -> None:
        check_cache_types(self.cache_type_v, self.flash_attn)  # the checks across fields
        check_rope_scale(self.rope_scale, self.rope_freq_scale)
        check_reranking(self.reranking, self.pooling)
        check_image_tokens(self.image_min_tokens, self.image_max_tokens)

    @property
    def sampling_defaults(self) -> tuple[tuple[str, float | int], ...]:
        """The sampling defaults set (``(request field, value)``, :data:`SAMPLING_DEFAULTS` order). The seed is
        taken modulo 2**32 (llama-server's ``-s`` reads it with ``std::stoul`` into a ``uint32_t``: -5 is
        4294967291, as a request's seed of -5 is); one of 4294967295 (``LLAMA_DEFAULT_SEED``: -1 too), llama.cpp's
        random one, is none."""
        values = ((name, getattr(self, name)) for name in SAMPLING_DEFAULTS)
        values = ((n, v & 0xFFFFFFFF if n == "seed" and v is not None else v) for n, v in values)
        return tuple((n, v) for n, v in values if v is not None and not (n == "seed" and v == 0xFFFFFFFF))


def settings_doc(cls: type) -> str:
    """One line per setting of attrs class ``cls``: name, default, range or choices, help."""
    lines = []
    for field in attrs.fields(cls):
        info = setting_info(field)
        if info is None:
            continue
        check = field.validator
        rng = ""
        if isinstance(check, (IntRange, FloatRange)):
            rng = f", {check.describe()}"
        elif isinstance(check, OneOf):
            rng = ", one of " + "/".join(check.choices)
        default = field.default
        if default is attrs.NOTHING:
            shown = "required"
        elif isinstance(default, FACTORY):
            shown = f"default {default.factory()!r}"
        else:
            shown = f"default {default!r}"
        lines.append(f"    ``{field.name}`` ({shown}{rng}): {info.help}")
    return "\n\nSettings:\n\n" + "\n".join(lines) + "\n"


EngineConfig.__doc__ = (EngineConfig.__doc__ or "") + settings_doc(EngineConfig)
