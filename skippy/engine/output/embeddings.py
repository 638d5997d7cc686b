"""``/v1/embeddings`` in and out (sans-IO): the request's inputs, and the reply built from pooled vectors.

The shapes are OpenAI's Embeddings API: ``input`` is a string, a list of strings, a list of token
ids or a list of lists of token ids; the reply is a ``list`` of ``embedding`` objects in input
order, each vector L2-normalized (OpenAI's vectors have length 1; llama-server's default
``--embd-normalize 2`` is the same), as floats or, with ``encoding_format: "base64"``, the base64
of the little-endian float32 bytes (what the ``openai`` SDK asks for by default and decodes with
``numpy.frombuffer(..., dtype="float32")``).
"""

from __future__ import annotations

import numpy as np

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import prompt_items

#: Most inputs in one request: OpenAI's limit ("Input ... must be ... an array of 2048 or fewer items").
#: vLLM and llama-server set none; the body limit (--max-body-bytes) bounds them too.
MAX_INPUTS = 2048


def split_input(raw: str | list[str | int | list[int]], n_vocab: int) -> list[str | list[int]]:
    """The inputs of ``input``: strings (to tokenize) and token-id lists, in order.

    Raises :class:`InvalidRequest` (``param`` ``input``) for an empty string, list or token list, a
    mixed list (strings with token ids, as OpenAI's four shapes allow none), more than
    :data:`MAX_INPUTS` inputs, or a token id outside ``0..n_vocab - 1``.
    """
    items = prompt_items(raw, "input")
    if len(items) > MAX_INPUTS:
        raise InvalidRequest(f"input has {len(items)} items; at most {MAX_INPUTS} per request", param="input",
                             code="array_above_max_length")
    for i, item in enumerate(items):
        if not item:
            raise InvalidRequest(f"input {i} is empty", param="input")
        if not isinstance(item, str) and any(not 0 <= t < n_vocab for t in item):
            raise InvalidRequest(f"input {i} has a token id outside the vocabulary (0..{n_vocab - 1})", param="input")
    return items


def fit(tokens: list[int], i: int, n_ctx: int, truncate: bool) -> tuple[int, ...]:
    """Input ``i``'s tokens as the embedding context takes them: at most ``n_ctx`` (the first ``n_ctx``
    with ``truncate``). Raises :class:`InvalidRequest` (``input``, ``context_length_exceeded``) for a
    longer input without ``truncate``, and for an input with no tokens."""
    if not tokens:
        raise InvalidRequest(f"input {i} has no tokens", param="input")
    if len(tokens) > n_ctx:
        if not truncate:
            raise InvalidRequest(f"input {i} is {len(tokens)} tokens, longer than the embedding context of {n_ctx} "
                                 "tokens (--embeddings-batch); shorten it or send \"truncate\": true",
                                 param="input", code="context_length_exceeded")
        tokens = tokens[:n_ctx]
    return tuple(tokens)


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (a zero row stays zero: llama.cpp ``common_embd_normalize``), float32."""
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    return (vectors / np.where(norms > 0.0, norms, 1.0)).astype(np.float32)


def normalize_embd(vectors: np.ndarray, mode: int) -> np.ndarray:
    """Each row normalized as llama.cpp's ``common_embd_normalize(..., embd_norm=mode)``: -1 as it is, 0 scaled
    so its largest absolute value is 32760 (int16's range), 2 to Euclidean length 1, any other ``p`` (1:
    taxicab) to p-norm 1; a zero row stays zero. Float32, shape kept."""
    if mode == -1:
        return vectors.astype(np.float32)
    if mode == 2:
        return normalize(vectors)
    x = vectors.astype(np.float64)
    if mode == 0:
        norms = np.abs(x).max(axis=1, keepdims=True) / 32760.0
    else:
        norms = (np.abs(x) ** mode).sum(axis=1, keepdims=True) ** (1.0 / mode)
    return (x / np.where(norms > 0.0, norms, 1.0)).astype(np.float32)
