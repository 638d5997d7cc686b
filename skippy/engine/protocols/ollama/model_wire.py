"""The msgspec Structs of Ollama's model-management API: requests and replies of ``/api/tags``, ``/api/show``,
``/api/ps``, ``/api/pull``, ``/api/delete``, ``/api/copy`` and ``/api/version``.

Field names and shapes follow Ollama's API reference (docs/api.md of ollama/ollama) and its Go types
(``api.ListModelResponse``, ``api.ShowResponse``, ``api.ProcessModelResponse``, ``api.ProgressResponse``);
times are RFC 3339 strings, sizes bytes. Errors are ``{"error": "..."}`` (:class:`OllamaError`). The
request Structs ignore unknown fields (Ollama's clients send ``options``, ``keep_alive``...); the route
names them in ``X-Skippy-Ignored-Fields``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from skippy.engine.protocols.base import WireStruct

__all__ = ["CopyRequest", "DeleteRequest", "ModelDetails", "OllamaError", "ProcessList", "ProcessModel",
           "ProgressStatus", "PullRequest", "ShowReply", "ShowRequest", "TagList", "TagModel", "VersionReply"]


# -- requests -------------------------------------------------------------------------------------------

class ShowRequest(msgspec.Struct, kw_only=True):
    """``POST /api/show``: ``model`` (``name``: its deprecated spelling), ``verbose``: the big arrays of
    ``model_info`` (the tokens, merges) in full."""

    model: str = ""
    name: str = ""
    verbose: bool = False


class PullRequest(msgspec.Struct, kw_only=True):
    """``POST /api/pull``: ``model`` (``name``: deprecated), ``insecure`` (accepted, no meaning here: the
    registry's wheels come over pip's own connection), ``stream`` (default true: NDJSON progress)."""

    model: str = ""
    name: str = ""
    insecure: bool = False
    stream: bool = True


class DeleteRequest(msgspec.Struct, kw_only=True):
    """``DELETE /api/delete``: ``model`` (``name``: deprecated)."""

    model: str = ""
    name: str = ""


class CopyRequest(msgspec.Struct, kw_only=True):
    """``POST /api/copy``: a new name ``destination`` for the model ``source``."""

    source: str
    destination: str


# -- replies --------------------------------------------------------------------------------------------

class OllamaError(WireStruct):
    """Ollama's error body: ``{"error": "model \\"x\\" not found"}``."""

    error: str


class ModelDetails(WireStruct):
    """``details``: ``format`` (``gguf``), ``family`` (``general.architecture``), ``families``,
    ``parameter_size`` (``135M``), ``quantization_level`` (``Q4_1``), ``parent_model`` (``""``)."""

    parent_model: str = ""
    format: str = "gguf"
    family: str = ""
    families: list[str] = msgspec.field(default_factory=list)
    parameter_size: str = ""
    quantization_level: str = ""


class TagModel(WireStruct):
    """One model of ``/api/tags``: ``size`` in bytes (the GGUF), ``digest`` (its SHA-256, hex), ``modified_at``
    (the file's modification time)."""

    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: ModelDetails


class TagList(WireStruct):
    """``GET /api/tags``."""

    models: list[TagModel]


class ShowReply(WireStruct):
    """``POST /api/show``: ``modelfile`` (a Modelfile: FROM, TEMPLATE, PARAMETER lines), ``parameters`` (the
    PARAMETER lines as ``name value`` rows), ``template`` (the chat template, Jinja, as the server uses it),
    ``details``, ``model_info`` (the GGUF metadata, typed), ``capabilities``, ``modified_at``, ``license``."""

    modelfile: str
    parameters: str
    template: str
    details: ModelDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str
    license: str = ""


class ProcessModel(WireStruct):
    """One loaded model of ``/api/ps``: ``size`` (bytes in memory: weights and KV cache), ``size_vram`` (the
    part on a GPU), ``expires_at`` (when it unloads if left idle), ``context_length`` (tokens per sequence)."""

    name: str
    model: str
    size: int
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int


class ProcessList(WireStruct):
    """``GET /api/ps``."""

    models: list[ProcessModel]


class ProgressStatus(WireStruct):
    """One line of ``/api/pull``'s NDJSON stream (and its one object with ``stream: false``)."""

    status: str
    digest: str | msgspec.UnsetType = msgspec.UNSET
    total: int | msgspec.UnsetType = msgspec.UNSET
    completed: int | msgspec.UnsetType = msgspec.UNSET


class VersionReply(WireStruct):
    """``GET /api/version``: ``version`` (the Ollama version this server's API matches; clients compare it),
    ``skippy`` (this server's own version)."""

    version: str
    skippy: str = ""
