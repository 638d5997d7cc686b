"""Rerank pairs in (sans-IO): a query and a document as the one prompt a reranker scores.

The format is llama-server's ``format_prompt_rerank``: with the GGUF's rerank template
(``tokenizer.chat_template.rerank``, :attr:`RerankFormat.template <skippy.engine.runtime.base.RerankFormat>`)
the text :func:`template_prompt` makes, tokenized with special tokens parsed and none added; without one,
:func:`pair_tokens`: ``[BOS] query [EOS] [SEP] document [EOS]`` around the texts' own tokens (tokenized
with no special token added or parsed), each special id where the vocabulary adds it. A pair is one
sequence of the embedding context, pooled within one micro-batch, so it holds at most the context's
``n_ctx`` tokens (:func:`fit_pair`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from skippy.engine.errors import InvalidRequest
from skippy.engine.runtime.base import RerankFormat

#: Most documents (pairs) in one request: Voyage's limit and Cohere's advice (1000). vLLM and llama-server set
#: none; at ~10 ms a pair on 2 CPU cores for a 0.5B reranker this is already ten seconds of work.
MAX_DOCUMENTS = 1000

_SLOTS = re.compile(r"\{query\}|\{document\}")


def template_prompt(template: str, query: str, document: str) -> str:
    """``template`` with ``{query}`` and ``{document}`` replaced by the texts.

    One pass over the template, so a query that contains ``{document}`` stays as it is (llama.cpp replaces
    ``{query}`` first, then every ``{document}``, the query's own too); otherwise the same text.
    """
    return _SLOTS.sub(lambda m: query if m.group(0) == "{query}" else document, template)


def pair_tokens(fmt: RerankFormat, query: Sequence[int], document: Sequence[int]) -> tuple[int, ...]:
    """The token ids of one pair without a template: ``[BOS] query [EOS] [SEP] document [EOS]`` (each special
    id only where ``fmt`` has it), as llama-server's ``format_prompt_rerank``."""
    out: list[int] = []
    if fmt.bos is not None:
        out.append(fmt.bos)
    out += query
    if fmt.eos is not None:
        out.append(fmt.eos)
    if fmt.sep is not None:
        out.append(fmt.sep)
    out += document
    if fmt.eos is not None:
        out.append(fmt.eos)
    return tuple(out)


def fit_pair(tokens: Sequence[int], i: int, n_ctx: int, param: str = "documents", *, n_query: int = 0,
             query_param: str = "query") -> tuple[int, ...]:
    """Pair ``i``'s tokens, checked against the embedding context. Raises :class:`InvalidRequest` (naming
    ``param``) for a pair of no tokens, and (``context_length_exceeded``) for one longer than ``n_ctx``:
    llama.cpp pools a pair within one micro-batch, so it cannot be split. ``n_query``: the query's own tokens
    (0: not known apart); a query that alone fills the context is the error, naming ``query_param``."""
    if not tokens:
        raise InvalidRequest(f"pair {i} (the query and {param}[{i}]) has no tokens", param=param)
    if len(tokens) > n_ctx and n_query >= n_ctx:
        raise InvalidRequest(f"the query is {n_query} tokens, as long as the embedding context of {n_ctx} tokens "
                             "or longer (--embeddings-batch): no document fits beside it; shorten the query or "
                             "raise --embeddings-batch", param=query_param, code="context_length_exceeded")
    if len(tokens) > n_ctx:
        raise InvalidRequest(f"the query and {param}[{i}] are {len(tokens)} tokens together, longer than the "
                             f"embedding context of {n_ctx} tokens (--embeddings-batch); shorten the document or "
                             "raise --embeddings-batch", param=param, code="context_length_exceeded")
    return tuple(tokens)
