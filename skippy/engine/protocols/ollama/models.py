"""Ollama's model-management replies from plain facts, and Ollama's model names (sans-IO).

The route (:mod:`skippy.http.routes.ollama_models`) gathers what it knows of a model into a
:class:`ModelFacts` (its file, size, SHA-256, GGUF metadata) and the builders here make the wire
Structs of :mod:`.model_wire`: :func:`tag_model` (``/api/tags``), :func:`show_reply` (``/api/show``),
:func:`process_model` (``/api/ps``), :func:`pulling` (a line of ``/api/pull``). The shapes follow
Ollama's API reference (docs/api.md) and its server (``server/routes.go``): ``details`` from the GGUF's
``general.architecture`` and ``general.file_type``, ``parameter_size`` written as Ollama's
``format.HumanNumber`` (``135M``, ``7.6B``), ``model_info`` the GGUF metadata without
``general.name`` and ``tokenizer.chat_template``, times RFC 3339 in UTC.

Names: an Ollama name is ``[host/][namespace/]model[:tag]``, the tag ``latest`` when absent
(docs/api.md, "Model names"); :func:`valid_name` checks that grammar. :func:`name_candidates` gives the
spellings to try against the names a server knows: the name as sent, without the ``registry.ollama.ai/library/``
or ``library/`` prefix Ollama clients may add, and without ``:latest``. :func:`display_name` writes a name the
way ``/api/tags`` lists it (with its tag).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import msgspec

from skippy.engine.protocols.ollama.model_wire import ModelDetails, ProcessModel, ProgressStatus, ShowReply, TagModel

__all__ = ["FOREVER_NS", "LIBRARY_PREFIXES", "OLLAMA_VERSION", "ModelFacts", "capabilities", "display_name",
           "expires_at", "human_number", "model_details", "modelfile", "name_candidates", "not_found", "not_served",
           "parameter_lines", "process_model", "pulling", "rfc3339", "show_reply", "tag_model", "valid_name"]

#: the Ollama version ``/api/version`` reports: clients (Open WebUI, the ollama CLI) compare it against the
#: release that brought a feature; the model-management and generation routes here follow the API of 0.12
OLLAMA_VERSION = "0.12.0"

#: prefixes of a fully spelled Ollama library name (lower case): ``registry.ollama.ai/library/smollm2:135m``
LIBRARY_PREFIXES = ("registry.ollama.ai/library/", "library/")

#: how far in the future a model kept loaded forever expires: Go's ``time.Now().Add(math.MaxInt64)``, what
#: Ollama writes for a negative ``keep_alive`` (about 292 years), in nanoseconds
FOREVER_NS = 2**63 - 1


def name_candidates(name: str) -> tuple[str, ...]:
    """The spellings of the Ollama name ``name`` to look up, most specific first, without repeats.

    ``"registry.ollama.ai/library/smollm2:latest"`` -> ``("registry.ollama.ai/library/smollm2:latest",
    "smollm2:latest", "smollm2")``; ``"gemma3:270m"`` -> ``("gemma3:270m",)``. Prefixes and the
    ``:latest`` tag are matched case-insensitively; surrounding spaces are dropped.
    """
    current = name.strip()
    out = [current]
    for prefix in LIBRARY_PREFIXES:
        if current.casefold().startswith(prefix):
            current = current[len(prefix):]
            out.append(current)
            break
    if current.casefold().endswith(":latest"):
        out.append(current[: -len(":latest")])
    return tuple(dict.fromkeys(n for n in out if n))


#: the longest model name Ollama takes (``MaxNamePartLen`` of its ``types/model/name.go``)
MAX_NAME_LEN = 128
_NAME_PART = re.compile(r"[A-Za-z0-9._-]+")


def valid_name(name: str) -> bool:
    """Whether ``name`` is a model name by Ollama's grammar (``ParseName`` of its ``types/model/name.go``):
    ``[host/][namespace/]model[:tag]``, at most :data:`MAX_NAME_LEN` characters, each part non-empty and of
    letters, digits, ``_``, ``-`` and ``.`` (no ``.`` in the namespace), no ``..`` anywhere. So
    ``my/copy`` and ``example.com/team/model:7b`` are names, and what could act as a path is not: ``..``,
    ``/abs``, ``a//b``, ``a/``, ``.`` as a part, a backslash, spaces. Ollama's ``+build`` and ``@digest``
    suffixes are not taken."""
    if not name or len(name) > MAX_NAME_LEN or ".." in name:
        return False
    *prefix, last = name.split("/")
    if len(prefix) > 2:
        return False
    model, colon, tag = last.partition(":")
    parts = [*prefix, model, *([tag] if colon else [])]
    if any(p in ("", ".") or not _NAME_PART.fullmatch(p) for p in parts):
        return False
    return not (len(prefix) >= 1 and "." in prefix[-1])  # the namespace (host/namespace/model or namespace/model)


def display_name(name: str) -> str:
    """``name`` as Ollama lists it, with a tag: ``"smollm2:135m"`` as is, ``"my-model"`` -> ``"my-model:latest"``
    (a ``:`` before the last ``/`` is a host's port, not a tag)."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def not_found(name: str) -> str:
    """Ollama's message for an unknown model: ``model "x" not found`` (Go's ``%q`` quoting)."""
    return f"model {msgspec.json.encode(name).decode()} not found"


def not_served(name: str, *, served: Sequence[str], cached: bool, pullable: bool) -> str:
    """The 404 message for a model this server does not serve, saying what is true of it (Ollama's ``model "x"
    not found`` first, which clients match; never Ollama's ``try pulling it first``: a pull puts a model in the
    cache, and this server serves only the models it was started with). ``served``: the ids it serves;
    ``cached``: the name is a model file in the model cache; ``pullable``: a registry model (``/api/pull``
    takes it)."""
    serving = ", ".join(repr(s) for s in served) or "none"
    how = "restart it with --model <name> or put the GGUF file in a --models-dir (skippy serve)"
    if cached:
        why = "it is in the model cache, but this server does not serve it"
    elif pullable:
        why = "this server does not serve it (pulling it only puts it in the model cache)"
    else:
        why = "this server does not serve it"
    return f"{not_found(name)}: {why}; it serves {serving}; to serve another model, {how}"


def human_number(n: int) -> str:
    """A parameter count as Ollama writes ``parameter_size``: ``134515008`` -> ``"135M"``, ``7615616512`` ->
    ``"7.6B"``, ``8030261248`` -> ``"8.0B"``, ``12000`` -> ``"12K"``, below a thousand the number itself. Three
    digits are written without decimals, fewer with one."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M")):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{suffix}" if value >= 100 else f"{value:.1f}{suffix}"
    if n >= 1000:
        return f"{n // 1000}K"
    return str(n)


def rfc3339(t: float) -> str:
    """Unix seconds -> RFC 3339 in UTC with microseconds (``2026-12-04T03:23:00.123456Z``), as Go's
    ``time.Time`` encodes to JSON; a time past year 9999 is written as 9999-12-31T23:59:59Z."""
    try:
        when = datetime.datetime.fromtimestamp(t, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        when = datetime.datetime.max.replace(tzinfo=datetime.UTC)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


@attrs.frozen
class ModelFacts:
    """What the builders need to know of one model file.

    ``name``: the Ollama name it is listed under (:func:`display_name` is applied by the builders);
    ``path``: the GGUF; ``size``: its bytes; ``modified``: its modification time (Unix seconds);
    ``digest``: its SHA-256 (64 hex digits); ``metadata``: its GGUF metadata, typed (long arrays already
    emptied unless verbose); ``n_params``: the elements of its tensors; ``quantization``: llama.cpp's name
    of ``general.file_type`` (``Q4_1``), ``""`` when unknown.
    """

    name: str
    path: str
    size: int
    modified: float
    digest: str
    metadata: dict[str, Any]
    n_params: int
    quantization: str = ""


def model_details(facts: ModelFacts) -> ModelDetails:
    """``details`` of ``/api/tags``, ``/api/show`` and ``/api/ps``: ``family`` and ``families`` from
    ``general.architecture``, ``parameter_size`` from the tensors' elements, ``quantization_level`` from
    ``general.file_type``."""
    family = str(facts.metadata.get("general.architecture", ""))
    return ModelDetails(family=family, families=[family] if family else [],
                        parameter_size=human_number(facts.n_params) if facts.n_params else "",
                        quantization_level=facts.quantization)


def tag_model(facts: ModelFacts) -> TagModel:
    """One entry of ``/api/tags``: ``name`` and ``model`` the Ollama name, the file's size, SHA-256 and time."""
    name = display_name(facts.name)
    return TagModel(name=name, model=name, modified_at=rfc3339(facts.modified), size=facts.size,
                    digest=facts.digest, details=model_details(facts))


def capabilities(*, native_tools: bool, thinking: bool, embeddings: bool, vision: bool = False,
                 completion: bool = True) -> list[str]:
    """``/api/show`` ``capabilities`` in Ollama's order: ``completion`` unless the model is an encoder
    (``completion`` false: embeddings only, as Ollama shows ``nomic-embed-text``),
    ``vision`` when the model has a ``--mmproj`` projector, ``tools`` when the chat template calls tools itself
    (not for skippy's emulated tools, which every template gets), ``thinking`` when the template has a
    reasoning block, ``embedding`` when the server runs with ``--embeddings``; never ``insert``."""
    if not completion:
        return ["embedding"] if embeddings else []
    caps = ["completion"]
    if vision:
        caps.append("vision")
    if native_tools:
        caps.append("tools")
    if thinking:
        caps.append("thinking")
    if embeddings:
        caps.append("embedding")
    return caps


def generates(metadata: dict[str, Any]) -> bool:
    """Whether a GGUF's metadata describe a model that generates text: not one whose attention is declared
    non-causal (``<arch>.attention.causal`` false: BERT and its kin, encoders)."""
    arch = metadata.get("general.architecture", "")
    return metadata.get(f"{arch}.attention.causal", True) is not False


def _go_value(value: Any) -> str:
    """A PARAMETER value as Ollama prints it (Go's ``%#v``): strings quoted, booleans and numbers as is."""
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parameter_lines(params: Sequence[tuple[str, Any]]) -> str:
    """``/api/show`` ``parameters``: one ``name value`` row per parameter, the name padded to 30 columns
    (Ollama's ``%-30s %#v``); a repeated name (``stop``) is one row per value."""
    return "\n".join(f"{name:<30} {_go_value(value)}" for name, value in params)


def modelfile(facts: ModelFacts, template: str, params: Iterable[tuple[str, Any]], license_text: str = "") -> str:
    """A Modelfile that describes the served model (``ollama show --modelfile``): ``FROM`` the GGUF's path,
    ``TEMPLATE`` the chat template as is (Jinja, not Go's template language: skippy renders Jinja),
    ``PARAMETER`` lines, ``LICENSE`` when the GGUF names one."""
    lines = ['# Modelfile generated by skippy (in the format of "ollama show --modelfile")',
             "# To build a new Modelfile based on this, replace FROM with:",
             f"# FROM {display_name(facts.name)}", "", f"FROM {facts.path}"]
    if template:
        lines.append(f'TEMPLATE """{template}"""')
    lines += [f"PARAMETER {name} {_go_value(value)}" for name, value in params]
    if license_text:
        lines.append(f'LICENSE """{license_text}"""')
    return "\n".join(lines) + "\n"


#: GGUF keys Ollama leaves out of ``model_info`` (``server/routes.go`` ``GetModelInfo``)
HIDDEN_KEYS = ("general.name", "tokenizer.chat_template")


def show_reply(facts: ModelFacts, *, template: str, caps: list[str], params: Sequence[tuple[str, Any]]) -> ShowReply:
    """``/api/show``'s reply: ``model_info`` the GGUF metadata without :data:`HIDDEN_KEYS`, with
    ``general.parameter_count`` (the tensors' elements) when the file does not carry it; ``license`` the
    GGUF's ``general.license``."""
    info = {k: v for k, v in facts.metadata.items() if k not in HIDDEN_KEYS}
    info.setdefault("general.parameter_count", facts.n_params)
    license_text = str(facts.metadata.get("general.license", "") or "")
    return ShowReply(modelfile=modelfile(facts, template, params, license_text), parameters=parameter_lines(params),
                     template=template, details=model_details(facts), model_info=info, capabilities=caps,
                     modified_at=rfc3339(facts.modified), license=license_text)


def expires_at(*, wall_now: float, clock_now: float, last_used: float, users: int, keep_alive: float) -> float | None:
    """When a loaded model unloads if no request comes (Unix seconds), from the pool's residency
    (:mod:`skippy.engine.residency`): ``None`` when it is kept forever (``keep_alive`` < 0); ``keep_alive``
    seconds from now while requests hold it; else ``keep_alive`` after its last use (``last_used`` and
    ``clock_now`` on the pool's monotonic clock), never before now."""
    if keep_alive < 0:
        return None
    if users > 0:
        return wall_now + keep_alive
    return wall_now + max(0.0, last_used + keep_alive - clock_now)


def process_model(facts: ModelFacts, *, size: int, size_vram: int, expires: float | None, wall_now: float,
                  context_length: int) -> ProcessModel:
    """One entry of ``/api/ps``. ``expires``: :func:`expires_at` (``None``: forever, written as Ollama does,
    :data:`FOREVER_NS` nanoseconds from ``wall_now``)."""
    name = display_name(facts.name)
    when = expires if expires is not None else wall_now + FOREVER_NS / 1e9
    return ProcessModel(name=name, model=name, size=size, digest=facts.digest, details=model_details(facts),
                        expires_at=rfc3339(when), size_vram=size_vram, context_length=context_length)


def pulling(digest: str, total: int, completed: int) -> ProgressStatus:
    """A download line of ``/api/pull``: ``status`` ``pulling <the first 12 hex digits>``, ``digest``
    ``sha256:<hex>``, ``total`` and ``completed`` in bytes (Ollama's ``PullModel`` progress)."""
    return ProgressStatus(status=f"pulling {digest[:12]}", digest=f"sha256:{digest}", total=total,
                          completed=completed)
