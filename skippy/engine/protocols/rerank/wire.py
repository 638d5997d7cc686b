"""Rerank replies (msgspec Structs that build, encode and document them in ``/openapi.json``).

:class:`RerankResponse` is llama-server's ``format_response_rerank`` (``model``, ``object: "list"``,
``usage`` with ``prompt_tokens`` and ``total_tokens``, ``results`` of ``index`` and ``relevance_score``,
best first) with vLLM's and Cohere's ``id`` and, when asked for, Jina's and vLLM's ``document``.
:class:`ScoreResponse` is vLLM's ``/score`` reply: one ``score`` object per pair, in pair order.
"""

from __future__ import annotations

from typing import Literal

from skippy.engine.protocols.base import UNSET, UnsetType, WireStruct


class RerankDocumentText(WireStruct, kw_only=True):
    """A result's ``document``: the text that was scored."""

    text: str


class RerankResult(WireStruct, kw_only=True):
    """One document's result: its ``index`` in the request's ``documents`` and its ``relevance_score`` (the
    reranker's raw score, llama.cpp's rank pooling: a logit for a cross-encoder, higher is more relevant);
    ``document`` only with ``return_documents``."""

    index: int
    relevance_score: float
    document: RerankDocumentText | UnsetType = UNSET


class RerankUsage(WireStruct, kw_only=True):
    """Tokens of every pair scored (the query counted once per document, as llama-server counts them)."""

    prompt_tokens: int
    total_tokens: int


class RerankResponse(WireStruct, kw_only=True):
    """``POST /v1/rerank`` reply: the results sorted by ``relevance_score``, best first (ties in document order),
    at most ``top_n``."""

    id: str
    model: str
    object: Literal["list"] = "list"
    usage: RerankUsage
    results: list[RerankResult]


class ScoreData(WireStruct, kw_only=True):
    """One pair's ``score`` (the same raw score as ``relevance_score``), ``index`` in pair order."""

    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreUsage(WireStruct, kw_only=True):
    """vLLM's ``usage`` of a ``/score`` reply: the pairs' tokens; nothing is generated."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0


class ScoreResponse(WireStruct, kw_only=True):
    """vLLM's ``POST /score`` reply: one :class:`ScoreData` per pair, in pair order (not sorted)."""

    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ScoreData]
    usage: ScoreUsage


#: Every top-level reply of this API (for the OpenAPI components).
RESPONSES: tuple[type[WireStruct], ...] = (RerankResponse, ScoreResponse)
