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

:class:`EmbedQueue` keeps the embedding requests of a
:class:`~skippy.engine.scheduling.core.SchedulerCore` (their inputs, the batch in flight, the vectors
as they come); :func:`embed_budget` and :func:`take_batch` are the rules above.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from skippy.engine.runtime.base import Runtime
from skippy.engine.scheduling.batch import SeqState
from skippy.engine.scheduling.events import EmbeddingsEvent, EmbedRequest, Output, SchedulerCounters


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
    vectors (float32, ``(len(items), n_embd)``; with pooling ``none`` every token's, ``(n_tokens, n_embd)``),
    or llama.cpp's error (``vectors`` is then ``None``)."""

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


@attrs.define(eq=False)
class _Embedding:
    """An embedding request in the queue: its vectors as they come (``None``: not yet), inputs left, times."""

    request: EmbedRequest
    vectors: list[Any]
    left: int
    n_tokens: int
    t_queued: float
    t_first: float = 0.0


class EmbedQueue:
    """The embedding requests of one scheduler core, from :meth:`add` to their :class:`EmbeddingsEvent`.

    Their inputs wait in arrival order; :meth:`plan` takes the step's embedding batch (in flight until
    :meth:`update`, or put back by :meth:`put_back`); a request gets one event once all its inputs are
    embedded, or when a batch holding one of them fails. ``runtime.meta.embeddings`` is the embedding
    context; ``counters`` gets the embedding counters; ``clock`` gives seconds. Not thread-safe.
    """

    def __init__(self, runtime: Runtime, counters: SchedulerCounters, clock: Callable[[], float]) -> None:
        self.runtime = runtime
        self._counters = counters
        self._clock = clock
        self._queue: deque[EmbedItem] = deque()  # inputs not yet in a batch
        self._embeds: dict[int, _Embedding] = {}  # requests not answered yet, by rid
        self._inflight: EmbedBatch | None = None  # planned, not yet updated

    def __len__(self) -> int:
        """Embedding requests not answered yet."""
        return len(self._embeds)

    def __contains__(self, rid: int) -> bool:
        return rid in self._embeds

    @property
    def has_inputs(self) -> bool:
        """Inputs wait for an embedding batch."""
        return bool(self._queue)

    def validate(self, request: EmbedRequest) -> None:
        """Raise ``ValueError`` when the runtime has no usable embedding context, or an input of ``request`` is
        empty or longer than its ``n_ctx``."""
        info = self.runtime.meta.embeddings
        if info is None or not info.usable:
            raise ValueError(info.error if info is not None and info.error else "embeddings are off")
        if not request.inputs or any(not 0 < len(t) <= info.n_ctx for t in request.inputs):
            raise ValueError(f"every input must have 1..{info.n_ctx} tokens")

    def add(self, request: EmbedRequest) -> None:
        """Queue a validated request's inputs (:meth:`validate`); ``request.rid`` must not be in use."""
        self._embeds[request.rid] = _Embedding(request, [None] * len(request.inputs), len(request.inputs),
                                               sum(len(t) for t in request.inputs), self._clock())
        self._queue.extend(EmbedItem(request.rid, i, tuple(t)) for i, t in enumerate(request.inputs))

    def cancel(self, rid: int) -> bool:
        """Drop request ``rid`` silently (its inputs in a running batch are dropped when it ends); False when
        it is not an embedding request here."""
        if self._embeds.pop(rid, None) is None:
            return False
        self._queue = deque(item for item in self._queue if item.rid != rid)
        return True

    def plan(self, active: Sequence[SeqState], step_tokens: int) -> EmbedBatch | None:
        """This step's embedding batch (:func:`embed_budget`'s share of ``step_tokens`` beside the ``active``
        generating sequences), if any input waits; it is in flight until :meth:`update`."""
        info = self.runtime.meta.embeddings
        if not self._queue or info is None:
            return None
        prefilling = any(kv.prefilling for kv in active)
        budget = embed_budget(step_tokens, sum(not kv.prefilling for kv in active), prefilling, info.n_ctx)
        self._inflight = take_batch(self._queue, budget, info.n_ctx, info.n_seq_max)
        return self._inflight

    def update(self, batch: EmbedBatch, result: EmbedResult) -> list[Output]:
        """Store an embedding batch's vectors; a request with all its vectors gets its :class:`EmbeddingsEvent`.
        A failed batch fails its requests (their other inputs leave the queue); cancelled ones are skipped."""
        self._inflight = None
        self._counters.embed_batches_total += 1
        now = self._clock()
        outputs: list[Output] = []
        info = self.runtime.meta.embeddings
        per_token = info is not None and info.per_token
        rows = result.vectors
        if rows is not None and per_token:  # each input's tokens' rows
            rows = np.split(rows, np.cumsum([len(item.tokens) for item in batch.items])[:-1])  # type: ignore[assignment]
        for k, item in enumerate(batch.items):
            emb = self._embeds.get(item.rid)
            if emb is None:
                continue
            emb.t_first = emb.t_first or now
            if result.vectors is None:
                self.cancel(item.rid)
                outputs.append((item.rid, EmbeddingsEvent(None, emb.n_tokens, result.error or "embedding failed",
                                                          queue_ms=(emb.t_first - emb.t_queued) * 1000.0)))
                continue
            emb.vectors[item.index] = rows[k]  # type: ignore[index]
            emb.left -= 1
            self._counters.embed_inputs_total += 1
            self._counters.embed_tokens_total += len(item.tokens)
            if not emb.left:
                del self._embeds[item.rid]
                outputs.append((item.rid, EmbeddingsEvent(
                    np.concatenate(emb.vectors) if per_token else np.stack(emb.vectors), emb.n_tokens,
                    queue_ms=(emb.t_first - emb.t_queued) * 1000.0, embed_ms=(now - emb.t_first) * 1000.0,
                    lengths=tuple(len(t) for t in emb.request.inputs) if per_token else None)))
        return outputs

    def put_back(self) -> None:
        """The planned batch did not run (the step's decode raised): its inputs go back to the front."""
        if self._inflight is not None:
            live = [item for item in self._inflight.items if item.rid in self._embeds]
            self._queue.extendleft(reversed(live))
            self._inflight = None

    def close(self) -> list[Output]:
        """Answer every request ``cancelled`` (shutdown) and empty the queue."""
        outputs: list[Output] = [(rid, EmbeddingsEvent(None, emb.n_tokens, "cancelled"))
                                 for rid, emb in self._embeds.items()]
        self._embeds.clear()
        self._queue.clear()
        self._inflight = None
        return outputs
