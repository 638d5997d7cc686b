"""GGUF files: the magic that tells one (:func:`_check_gguf`) and the metadata ``skippy list`` /
``skippy show`` print (:func:`gguf_info`, read by llama.cpp with the vocabulary only).

``skippy show`` and Ollama's /api/show read the header with :func:`gguf_metadata` (:mod:`skippy.models.gguf_header`).

(``from gguf import ...`` below is llama.cpp's gguf-py package, not this module.)
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from skippy.models.registry import ModelError

GGUF_MAGIC = b"GGUF"
"""First four bytes of every GGUF file (ggml's ``gguf.h``)."""


def _check_gguf(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror or e}") from e
    if magic != GGUF_MAGIC:
        raise ModelError(
            f"{path} is not a GGUF model file (it does not start with the bytes "
            f"{GGUF_MAGIC!r}); skippy runs GGUF models through llama.cpp, so convert "
            "the model to GGUF first or pass a known model name."
        )


@dataclasses.dataclass(frozen=True)
class GGUFInfo:
    """What ``skippy list`` / ``skippy show`` say about a GGUF file, read by llama.cpp (vocabulary only).

    Attributes:
        path: the file; size: its size in bytes.
        architecture: ``general.architecture`` (``llama``, ``gemma3``...); name: ``general.name``.
        quantization: the file type as llama.cpp names it (``Q4_K_M``, ``Q4_1``, ``F16``...), else ``""``.
        n_params: parameters (elements of all tensors).
        context_length: ``<arch>.context_length``, the training context in tokens (0 when absent).
        chat_template: ``tokenizer.chat_template`` or ``None``.
        n_vocab: tokens in the vocabulary.
        metadata: every metadata key with its value as llama.cpp prints it (arrays are omitted).
    """

    path: Path
    size: int
    architecture: str
    name: str
    quantization: str
    n_params: int
    context_length: int
    chat_template: str | None
    n_vocab: int
    metadata: dict[str, str]


def file_type_name(file_type: int) -> str:
    """``general.file_type`` -> llama.cpp's name (``15`` -> ``Q4_K_M``); ``"type N"`` for an unknown one."""
    from gguf import LlamaFileType

    try:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    except ValueError:
        return f"type {file_type}"


def gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Read a GGUF's metadata with llama.cpp (``vocab_only``: the vocabulary, no weights; about a second).

    Raises:
        ModelError: not a GGUF file, or llama.cpp cannot read it.
    """
    import ctypes

    import llama_cpp

    from skippy.engine.runtime.load import _init_backend

    path = Path(path)
    _check_gguf(path)
    _init_backend(False)  # llama.cpp's log goes to logging (warnings only), not raw to stderr
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise ModelError(f"llama.cpp cannot read {path} (a truncated or unsupported GGUF?)")
    try:
        def text(call, *args) -> str:
            size = 1024
            while True:
                buf = ctypes.create_string_buffer(size)
                n = call(model, *args, buf, size)
                if n < size:
                    return buf.value.decode("utf-8", errors="replace") if n >= 0 else ""
                size = n + 1

        metadata = {}
        for i in range(llama_cpp.llama_model_meta_count(model)):
            metadata[text(llama_cpp.llama_model_meta_key_by_index, i)] = text(
                llama_cpp.llama_model_meta_val_str_by_index, i)
        arch = metadata.get("general.architecture", "")
        template = llama_cpp.llama_model_chat_template(model, None)
        vocab = llama_cpp.llama_model_get_vocab(model)
        file_type = metadata.get("general.file_type", "")
        return GGUFInfo(
            path=path,
            size=path.stat().st_size,
            architecture=arch,
            name=metadata.get("general.name", ""),
            quantization=file_type_name(int(file_type)) if file_type.isdigit() else "",
            n_params=int(llama_cpp.llama_model_n_params(model)),
            context_length=int(metadata.get(f"{arch}.context_length", "0") or 0),
            chat_template=template.decode("utf-8", errors="replace") if template else None,
            n_vocab=int(llama_cpp.llama_vocab_n_tokens(vocab)),
            metadata=metadata,
        )
    finally:
        llama_cpp.llama_model_free(model)


def gguf_metadata(path: str | os.PathLike[str], *, max_array: int | None = 5) -> tuple[dict[str, Any], int]:
    """A GGUF's metadata with typed values, read from its header (:func:`~skippy.models.gguf_header.read_gguf_header`:
    memory-mapped, no weights read, an array not kept is skipped undecoded: milliseconds where gguf-py's
    ``GGUFReader`` took seconds for a large vocabulary).

    Returns ``(metadata, n_params)``: every metadata key, numbers as ``int`` / ``float``, booleans, strings,
    arrays as lists; an array longer than ``max_array`` elements becomes ``[]`` (as Ollama's ``/api/show``
    leaves out the token arrays unless ``verbose``; ``None``: every array in full). ``n_params``: the elements
    of all tensors (``general.parameter_count`` as Ollama computes it).

    Raises:
        ModelError: not a GGUF file, or its header cannot be parsed (truncated, an unknown version).
    """
    from skippy.models.gguf_header import read_gguf_header

    path = Path(path)
    _check_gguf(path)
    return read_gguf_header(path, max_array=max_array)
