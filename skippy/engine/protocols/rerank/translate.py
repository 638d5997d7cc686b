"""Rerank requests checked and replies built (sans-IO).

:func:`rerank_texts` and :func:`score_pairs` check a request and give the texts to pair; each failure is
an :class:`~skippy.engine.errors.InvalidRequest` (400) naming the field. :func:`rerank_response` and
:func:`score_response` build the replies from the scores the engine's rank pooling gave, one per pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from skippy.engine.errors import InvalidRequest
from skippy.engine.output.rerank import MAX_DOCUMENTS
from skippy.engine.protocols.base import UNSET
from skippy.engine.protocols.rerank import wire
from skippy.engine.protocols.rerank.types import RerankRequest, ScoreRequest


def _count(n: int, param: str) -> None:
    if not n:
        raise InvalidRequest(f"{param} must be a non-empty list", param=param)
    if n > MAX_DOCUMENTS:
        raise InvalidRequest(f"{param} has {n} items; at most {MAX_DOCUMENTS} per request", param=param,
                             code="array_above_max_length")


def rerank_texts(req: RerankRequest) -> list[str]:
    """The texts of ``req.documents`` in order (a string, or an object's ``text``).

    Raises :class:`InvalidRequest` for an empty ``query`` (param ``query``), no documents or more than
    :data:`~skippy.engine.output.rerank.MAX_DOCUMENTS` (``documents``), and a ``top_n`` below 1 (``top_n``).
    """
    if not req.query:
        raise InvalidRequest("query must be a non-empty string", param="query")
    _count(len(req.documents), "documents")
    if req.top_n is not None and req.top_n < 1:
        raise InvalidRequest(f"top_n must be a positive integer (or left out for all), got {req.top_n}",
                             param="top_n")
    return [d if isinstance(d, str) else d.text for d in req.documents]


def score_pairs(req: ScoreRequest) -> list[tuple[str, str]]:
    """vLLM's pairing of ``text_1`` and ``text_2``: one ``text_1`` with each ``text_2`` (1:N), or lists of the same
    length by position (N:N). Raises :class:`InvalidRequest` for an empty list (naming it), an empty
    ``text_1`` string, other lengths (``text_2``), or more than :data:`~skippy.engine.output.rerank.MAX_DOCUMENTS`
    pairs."""
    first = [req.text_1] if isinstance(req.text_1, str) else req.text_1
    second = [req.text_2] if isinstance(req.text_2, str) else req.text_2
    if not first:
        raise InvalidRequest("text_1 must be a string or a non-empty list", param="text_1")
    if not second:
        raise InvalidRequest("text_2 must be a string or a non-empty list", param="text_2")
    if any(not t for t in first):
        raise InvalidRequest("text_1 must not hold an empty string", param="text_1")
    if len(first) == 1:
        first = first * len(second)
    elif len(first) != len(second):
        raise InvalidRequest(f"text_1 has {len(first)} items and text_2 {len(second)}: pairs are 1:N or N:N",
                             param="text_2")
    _count(len(second), "text_2")
    return list(zip(first, second, strict=True))


def rerank_response(req: RerankRequest, texts: Sequence[str], scores: Sequence[float], *, rid: str, model: str,
                    prompt_tokens: int) -> wire.RerankResponse:
    """The reply: one result per document sorted by score, best first (Python's stable sort: ties keep
    document order), cut to ``req.top_n``; each with its ``document`` when ``req.return_documents``."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:req.top_n]
    results = [wire.RerankResult(index=i, relevance_score=float(scores[i]),
                                 document=wire.RerankDocumentText(text=texts[i]) if req.return_documents
                                 else UNSET)
               for i in order]
    return wire.RerankResponse(id=rid, model=model, results=results,
                               usage=wire.RerankUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens))


def score_response(scores: Sequence[float], *, rid: str, model: str, created: int,
                   prompt_tokens: int) -> wire.ScoreResponse:
    """vLLM's ``/score`` reply: one ``score`` per pair, in pair order."""
    return wire.ScoreResponse(id=rid, created=created, model=model,
                              data=[wire.ScoreData(index=i, score=float(s)) for i, s in enumerate(scores)],
                              usage=wire.ScoreUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens))
