"""Embedding batches beside decoding (sans-IO): how much of a step an embedding batch may take.

The embedding context (:class:`~skippy.engine.runtime.base.EmbeddingInfo`) is a second llama.cpp
context on the same weights, owned by the decode scheduler like the generation context: its batches
run on the decode thread, one per step at most, right after the step's generation batch. A step then
costs about its generation tokens plus its embedding tokens (the same weights do the same work per
token), so the embedding batch is cut from the step's token budget (``step_tokens``, which bounds ITL):

- **Nothing generating**: a whole embedding batch (up to the context's ``n_ctx`` tokens and
  ``n_seq_max`` inputs), for throughput.
- **Generating** (streams decoding or prompts prefilling): a quarter of the budget left after one
  token per decoding sequence (the share ``plan_step`` guarantees the oldest prefill), and the
  generation batch is planned with the rest. On CPU an embedding token costs about what a prefill
  token costs, linearly, so a small share loses little embedding throughput while each step, and so
  every stream's ITL, grows by a quarter of the budget instead of all of it.
- **Progress**: the oldest waiting input always goes (an input cannot be split: llama.cpp pools a
  sequence within one micro-batch), even when it is longer than the share; the decoding sequences
  still get their token in the same step, so neither side starves the other, and a step grows by at
  most one embedding batch of at most ``n_ctx`` tokens.

Inputs go in arrival order (FIFO over requests, then over a request's inputs), so a large request
cannot starve a later small one forever, and a later one does not overtake it.
"""

from __future__ import annotations

from collections import deque

import attrs
import numpy as np


@attrs.frozen
class EmbedItem:
    """Input ``index`` of embedding request ``rid``: its token ids."""

    rid: int
    index: int
    tokens: tuple[int, ...]


@attrs.frozen
class EmbedBatch:
    """The embedding batch of one step: its inputs, each its own sequence of the embedding context."""

    items: tuple[EmbedItem, ...]

    @property
    def n_tokens(self) -> int:
        return sum(len(item.tokens) for item in self.items)


@attrs.frozen(eq=False)
class EmbedResult:
    """What :func:`~skippy.engine.scheduling.decode.execute` got for an :class:`EmbedBatch`: the pooled
    vectors (float32, ``(len(items), n_embd)``), or llama.cpp's error (``vectors`` is then ``None``)."""

    vectors: np.ndarray | None
    error: str | None = None


#: The embedding batch's share of the step budget left by decoding sequences, while anything generates.
EMBED_SHARE = 4  # a quarter, as plan_step's guaranteed share of the oldest prefill


def embed_budget(step_tokens: int, n_decoding: int, prefilling: bool, n_ctx: int) -> int:
    """Tokens the step's embedding batch may take (the module docstring's rule).

    ``n_decoding``: sequences that decode one token this step; ``prefilling``: a prompt is being
    prefilled; both 0/``False``: nothing generates, and the whole embedding context ``n_ctx`` is the budget.
    May be 0: the oldest input goes anyway (:func:`take_batch`).
    """
    if not n_decoding and not prefilling:
        return n_ctx
    return min(max(step_tokens - n_decoding, 0) // EMBED_SHARE, n_ctx)


def take_batch(queue: deque[EmbedItem], budget: int, n_ctx: int, n_seq_max: int) -> EmbedBatch | None:
    """Pop the next embedding batch off ``queue`` (``None`` when it is empty): the oldest input always,
    then more in order while the batch stays within ``budget`` tokens (and ``n_ctx``) and ``n_seq_max``
    inputs. Every input must be 1..``n_ctx`` tokens (checked when it was queued)."""
    if not queue:
        return None
    items = [queue.popleft()]
    n = len(items[0].tokens)
    limit = min(budget, n_ctx)
    while queue and len(items) < n_seq_max and n + len(queue[0].tokens) <= limit:
        item = queue.popleft()
        items.append(item)
        n += len(item.tokens)
    return EmbedBatch(tuple(items))
