"""Batch planning for continuous batching (sans-IO).

Each decode step is one ``llama_decode`` over a batch built by
:func:`plan_step`: first one token for every sequence that is generating
(its last sampled token, logits requested), then prefill chunks of waiting
prompts, shortest remaining first (the oldest always progresses), until the
step's token budget is spent. A prompt's
last chunk requests logits at its final position, from which the first
token is sampled (unless the sequence may generate nothing: ``max_tokens`` 0
only puts its prompt in the KV cache). So a request that arrives while others decode joins the
running batch at the next step, and a long prompt prefills over several
steps while running streams keep producing one token per step.
"""

from __future__ import annotations

import attrs

from skippy.engine.runtime.base import BatchEntry
from skippy.engine.runtime.media import MediaSpan, position


@attrs.define(eq=False)
class SeqState:
    """Decode state of one sequence in a slot.

    ``prompt`` are the prompt token ids; ``n_past`` how many tokens of this
    sequence are in the KV cache; ``pending`` the last sampled token, not yet
    in the KV cache (``None`` while prefilling). ``checkpoint_at``: a prompt position where the
    prefill stops for a step so the scheduler can save a context checkpoint there (0: none).
    ``media``: the prompt's images (:class:`~skippy.engine.runtime.media.MediaSpan`); a prefill chunk
    never crosses an image's start, and an image is prefilled whole, alone in its sequence's chunk.
    ``n_past`` and every index here count KV cells; :meth:`pos` gives the KV position of one (the same
    number unless an M-RoPE image before it took fewer positions than cells).
    """

    rid: int
    slot: int
    prompt: list[int]
    max_tokens: int
    n_past: int = 0
    pending: int | None = None
    n_generated: int = 0
    draft: tuple[int, ...] = ()
    checkpoint_at: int = 0
    media: tuple[MediaSpan, ...] = ()

    @property
    def prefilling(self) -> bool:
        return self.n_past < len(self.prompt)

    def pos(self, i: int) -> int:
        """The KV position of this sequence's ``i``-th cell (a prompt index, or past the prompt a generated one)."""
        return position(self.media, i) if self.media else i

    @property
    def image(self) -> MediaSpan | None:
        """The image whose first position is the next to prefill, if any."""
        for span in self.media:
            if span.start == self.n_past:
                return span
        return None

    @property
    def rem(self) -> int:
        """Prompt tokens to prefill before the next stop: the checkpoint position, else the prompt's end;
        an image's start is a stop, and an image at ``n_past`` is its whole length."""
        stop = self.checkpoint_at if self.n_past < self.checkpoint_at else len(self.prompt)
        for span in self.media:
            if span.start == self.n_past:
                return span.n
            if self.n_past < span.start < stop:
                stop = span.start
        return stop - self.n_past


@attrs.frozen
class BatchPlan:
    """The batch of one step, and which outputs to sample for which sequence.

    ``outputs`` pairs each sequence to sample with the batch index of its
    logits (llama.cpp ``llama_get_logits_ith`` takes batch indices);
    ``advance`` gives the tokens each sequence adds to its KV cache for good
    (a generating sequence's draft tokens follow its pending token in
    ``entries``, with logits, but are not in ``advance``: verification decides
    how many stay). ``media``: the images to decode before ``entries``, each with its sequence
    (:meth:`Runtime.decode_media`); their positions are in ``advance`` but not in ``entries``.
    """

    entries: tuple[BatchEntry, ...]
    outputs: tuple[tuple[SeqState, int], ...]
    advance: tuple[tuple[SeqState, int], ...]
    media: tuple[tuple[MediaSpan, int], ...] = ()


def _chunk(rem: int, n: int, *, must: bool = False) -> int:
    """Prompt tokens to prefill now, of ``rem`` left, when ``n`` fit: no lone token if avoidable.

    llama.cpp computes a sequence's lone token in a batch with other kernels than two or more,
    and its KV differs in the last bits; so a chunk never leaves exactly one token for the next
    step, and a lone token waits for room for two (unless ``must``: the oldest prefill always
    progresses). Then a prompt is prefilled with the same numbers however it is chunked.
    """
    n = min(n, rem)
    if n < rem and rem - n == 1:
        n -= 1
    if n == 1 and rem > 1 and not must:
        n = 0
    return max(n, 1) if must else n


#: A prefilling sequence with this many prompt tokens left or fewer (a cached prompt's tail, see
#: :data:`~skippy.engine.scheduling.prefix.MIN_TAIL`) advances one token per step while a generating
#: neighbour (the slot before or after it) decodes in the same step.
DRIP_TAIL = 2


def plan_step(seqs: list[SeqState], budget: int) -> BatchPlan | None:
    """Plan one step over ``seqs`` (in admission order) within ``budget`` tokens.

    Returns ``None`` when there is nothing to decode. ``budget`` must be
    >= the number of generating sequences (each needs one token). The
    caller applies ``advance`` (sequence, tokens added) after a successful
    decode.

    The budget goes to generating sequences first (one token each), then to
    prefill chunks, then to draft tokens (speculative decoding: each
    generating sequence's ``draft`` follows its pending token, with logits;
    drafts that do not fit are cut, in slot order, and ``draft`` is updated):
    shortest remaining prompt first (ties in admission order), so a short
    request's first token does not wait for a long prompt's whole prefill,
    while the oldest prefilling sequence always gets at least a quarter of
    what is left, so a long prompt is never starved by a stream of short
    ones; no chunk is a lone prompt token when two can go (:func:`_chunk`), and no chunk
    crosses a sequence's ``checkpoint_at`` (its state is saved there after the step).
    The batch itself lists each sequence's tokens together,
    in increasing slot order. With a non-unified KV cache llama.cpp splits a
    batch into micro-batches of consecutive sequence ids taken in batch order
    (``split_equal``), each one a full pass over the weights: unordered slots
    made a 64-sequence decode step about 1.6x slower.

    A micro-batch takes the same number of tokens from each sequence of its run, so one
    sequence with a 2-token tail beside sequences decoding one token each costs a second
    micro-batch (a whole pass over the weights for one token: 52.7 against 44.0 ms for 16
    sequences, SmolLM2-135M on 2 CPU cores). So a prompt with at most :data:`DRIP_TAIL`
    tokens left, next to a generating sequence's slot, takes one token per step: its token
    rides in the generating run's micro-batch, computed with the same multi-row kernels as a
    prefill (never alone), and its first token comes one step later.
    """
    take: list[tuple[SeqState, int]] = []
    for s in seqs:
        if not s.prefilling and s.pending is not None:
            take.append((s, 1))
    left = budget - len(take)
    prefilling = [s for s in seqs if s.prefilling]
    if prefilling and left > 0:
        decoding = {s.slot for s, _ in take}
        drip = {s for s in prefilling if s.rem <= DRIP_TAIL and s.image is None
                and (s.slot - 1 in decoding or s.slot + 1 in decoding)}
        oldest = prefilling[0]  # always progresses: a quarter of the prefill budget at least (two tokens)
        first = oldest.rem if oldest.image is not None else 1 if oldest in drip else (
            _chunk(oldest.rem, max(left // 4, min(left, 2)), must=True))
        share = {oldest: first}  # an image goes whole, even past the budget
        left -= share[oldest]
        for s in sorted(prefilling, key=lambda s: len(s.prompt) - s.n_past):  # stable: ties by admission
            if left <= 0:
                break
            rem, have = s.rem, share.get(s, 0)
            if s.image is not None:
                n = rem if have or rem <= left else 0
            elif s in drip:
                n = 1
            else:
                n = _chunk(rem, have + min(left, rem - have), must=have > 0)
            if n > have:
                share[s] = n
                left -= n - have
        take.extend((s, n) for s, n in share.items() if n > 0)
    if not take:
        return None
    take.sort(key=lambda t: t[0].slot)
    left = budget - sum(n for _, n in take)
    entries: list[BatchEntry] = []
    outputs: list[tuple[SeqState, int]] = []
    media: list[tuple[MediaSpan, int]] = []
    for s, n in take:
        if s.prefilling and (image := s.image) is not None:  # decoded whole before the batch; a prompt
            media.append((image, s.slot))                       # never ends with one (no logits there)
            continue
        at = s.pos(s.n_past)  # a chunk holds no image: its positions follow one another
        if not s.prefilling:  # generating: its last sampled token, then its draft
            outputs.append((s, len(entries)))
            entries.append(BatchEntry(s.pending, at, s.slot, True))  # type: ignore[arg-type]
            if s.draft:
                s.draft = s.draft[:max(left, 0)]
                left -= len(s.draft)
                entries.extend(BatchEntry(t, at + 1 + i, s.slot, True) for i, t in enumerate(s.draft))
            continue
        last = s.n_past + n == len(s.prompt) and s.max_tokens > 0  # max_tokens 0: the prompt only, no logits
        for i in range(n):
            entries.append(BatchEntry(s.prompt[s.n_past + i], at + i, s.slot, last and i == n - 1))
        if last:
            outputs.append((s, len(entries) - 1))
    return BatchPlan(tuple(entries), tuple(outputs), tuple(take), tuple(media))
