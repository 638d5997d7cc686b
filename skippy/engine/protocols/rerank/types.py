"""Rerank request bodies (msgspec Structs; decode with :func:`~skippy.engine.protocols.base.decode_request`,
any failure a 400 naming the field). Unknown fields are ignored (Cohere's ``rank_fields``,
``max_chunks_per_doc``, vLLM's ``truncate_prompt_tokens``...)."""

from __future__ import annotations

import msgspec

from skippy.engine.protocols.base import convert_nested


class RerankDocument(msgspec.Struct):
    """A document given as an object (Jina's and Cohere v1's ``{"text": ...}``); its other fields are ignored."""

    text: str


class RerankRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/rerank`` (also ``/rerank``, ``/v2/rerank``): Jina's and Cohere's reranking, as llama-server and
    vLLM accept it.

    ``query``: the text the documents are ranked against. ``documents``: strings or ``{"text"}`` objects, at
    most :data:`~skippy.engine.output.rerank.MAX_DOCUMENTS`. ``top_n``: the best results returned, a positive
    integer (default: all; a larger one returns all). ``return_documents``: each result also carries its
    ``document`` (``{"text"}``); off by default as llama-server (vLLM always sends it, Jina by default).
    ``model`` may be any name (echoed).
    """

    query: str
    documents: list[str | RerankDocument]
    model: str | None = None
    top_n: int | None = None
    return_documents: bool = False

    def __post_init__(self) -> None:
        convert_nested(self)  # documents=[{"text": ...}] built in Python, as JSON decodes them


class ScoreRequest(msgspec.Struct, kw_only=True):
    """vLLM's ``POST /score`` (also ``/v1/score``): the relevance of ``text_1`` and ``text_2`` paired up.

    Each is a string or a list of strings: one ``text_1`` is paired with every ``text_2`` (1:N), lists of the
    same length are paired by position (N:N). ``model`` may be any name (echoed).
    """

    text_1: str | list[str]
    text_2: str | list[str]
    model: str | None = None
