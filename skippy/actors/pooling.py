"""The pooled routes of one model: embeddings, reranking and scoring on its embedding context.

:class:`Pooling` is the part of the :class:`~skippy.actors.engine.Engine` facade that pools instead of
generating: OpenAI's ``/v1/embeddings``, llama-server's ``/embedding``, the Jina / Cohere ``/v1/rerank`` and
vLLM's ``/score``. Each request's inputs are tokenized through the tokenizer actor, fitted to the embedding
context (llama-server's ``--embeddings`` context: ``meta.embeddings``), queued with the decode scheduler as
one request and embedded in its batches beside decoding (:mod:`skippy.engine.scheduling.embed`); the replies
are built by the protocol modules (:mod:`skippy.engine.protocols.openai.translate`,
:mod:`skippy.engine.protocols.rerank`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import trio

from skippy.actors.metrics import EngineMetrics
from skippy.actors.scheduler import DecodeScheduler
from skippy.actors.tokenizer import Tokenizer
from skippy.actors.trace import TRACE, reply_id
from skippy.engine.errors import EngineClosed, InvalidRequest, NotSupported
from skippy.engine.output.embeddings import fit, normalize_embd, split_input
from skippy.engine.output.generation import GenerationError
from skippy.engine.output.rerank import fit_pair, pair_tokens, template_prompt
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.llama_server.types import NativeEmbeddingRequest
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.protocols.openai.translate import embedding_list
from skippy.engine.protocols.openai.types import EmbeddingRequest
from skippy.engine.protocols.rerank import wire as rerank_wire
from skippy.engine.protocols.rerank.translate import (
    rerank_response,
    rerank_texts,
    score_pairs,
    score_response,
)
from skippy.engine.protocols.rerank.types import RerankRequest, ScoreRequest
from skippy.engine.runtime.base import ModelMeta
from skippy.engine.scheduling.events import EmbeddingsEvent, EmbedRequest, SeqEvent


class Pooling:
    """Embeddings, reranking and scoring for one model (see module docstring).

    ``rids``: the engine's request-id counter (shared with its generations: the scheduler cancels by id);
    ``reply_model``: the model name a reply reports for a request's ``model``; ``closed``: whether the engine
    is shutting down (new requests then raise :class:`EngineClosed`).
    """

    def __init__(self, meta: ModelMeta, tokenizer: Tokenizer, scheduler: DecodeScheduler, metrics: EngineMetrics, *,
                 rids: Iterator[int], reply_model: Callable[[str | None], str], closed: Callable[[], bool]) -> None:
        self.meta = meta
        self.tokenizer = tokenizer
        self.scheduler = scheduler
        self.metrics = metrics
        self._rids = rids
        self.reply_model = reply_model
        self._closed = closed

    async def embeddings(self, req: EmbeddingRequest) -> openai_wire.EmbeddingList:
        """OpenAI ``POST /v1/embeddings``: one L2-normalized vector per input (``embd_normalize`` otherwise),
        pooled on the embedding context.

        Strings are tokenized as llama-server does (the vocabulary's special tokens added and parsed);
        the inputs are queued with the scheduler as one request and embedded in its batches beside
        decoding (:mod:`skippy.engine.scheduling.embed`). Raises :class:`NotSupported` (501, llama-server's
        answer) when the engine was started without ``embeddings``; :class:`InvalidRequest` (400) when the
        model or pooling cannot embed (``pooling_not_supported``), for ``dimensions`` other than the model's,
        and for a bad ``input`` (:func:`~skippy.engine.output.embeddings.split_input`; longer than the embedding
        context without ``truncate``: ``context_length_exceeded``); :class:`QueueFull` (429); :class:`EngineClosed`.
        """
        _check_normalize(req.embd_normalize)
        if req.dimensions is not None and req.dimensions != self.meta.n_embd:
            raise InvalidRequest(f"dimensions is {req.dimensions}, but this model's embeddings have "
                                 f"{self.meta.n_embd} (they cannot be shortened); leave dimensions out",
                                 param="dimensions")
        event = await self._embed(req.input, req.truncate)
        assert event.vectors is not None
        return embedding_list(event.vectors, model=self.reply_model(req.model), prompt_tokens=event.prompt_tokens,
                              encoding_format=req.encoding_format, rid=reply_id("embd"), created=int(time.time()),
                              embd_normalize=req.embd_normalize)

    async def embeddings_native(self, req: NativeEmbeddingRequest) -> list[wire.NativeEmbedding]:
        """llama-server's ``POST /embedding``: one entry per input, its pooled vector normalized as
        ``embd_normalize`` says (:func:`~skippy.engine.output.embeddings.normalize_embd`); with pooling ``none``
        one vector per token of the input instead, not normalized (llama-server's ``send_embedding``). Raises as
        :meth:`embeddings`, and :class:`InvalidRequest` (400) for an ``embd_normalize`` below -1."""
        _check_normalize(req.embd_normalize)
        mixed = req.mixed()
        raw = req.inputs() if mixed is None else [await self.tokenizer.tokenize_mixed(parts) for parts in mixed]
        if mixed is not None and not all(raw):  # the ids' range is checked with the others' (split_input)
            raise InvalidRequest("an input has no tokens", param=req.param)
        event = await self._embed(raw, req.truncate, param=req.param, per_token=True)  # type: ignore[arg-type]
        assert event.vectors is not None
        if event.lengths is not None:
            return [wire.NativeEmbedding(index=i, embedding=rows.tolist()) for i, rows in enumerate(event.per_input())]
        rows = normalize_embd(event.vectors, req.embd_normalize)
        return [wire.NativeEmbedding(index=i, embedding=[row.tolist()]) for i, row in enumerate(rows)]

    async def _embed(self, raw: str | list[str | int | list[int]], truncate: bool,
                     param: str = "input", per_token: bool = False) -> EmbeddingsEvent:
        """Pool the inputs of ``raw`` (OpenAI's ``input`` shapes; strings tokenized as llama-server does, the
        vocabulary's special tokens added and parsed); ``per_token``: the caller takes pooling ``none``'s
        per-token vectors. Raises :class:`NotSupported` (501) without ``embeddings``, :class:`InvalidRequest`
        (400) as :meth:`embeddings` says, naming ``param``."""
        if self._closed():
            raise EngineClosed("the engine is shutting down")
        info = self.meta.embeddings
        if info is None:
            raise NotSupported("This server does not support embeddings. Start it with `--embeddings`",
                               code="not_supported")
        if info.error is not None and not (per_token and info.per_token):
            raise InvalidRequest(info.error, code="pooling_not_supported")
        inputs = []
        try:
            for i, item in enumerate(split_input(raw, self.meta.n_vocab)):
                tokens = (await self.tokenizer.tokenize(item, add_special=True, parse_special=True)
                          if isinstance(item, str) else item)
                inputs.append(fit(tokens, i, info.n_ctx, truncate))
        except InvalidRequest as exc:
            exc.param = param if exc.param == "input" else exc.param
            raise
        return await self._pool(inputs)

    async def rerank(self, req: RerankRequest) -> rerank_wire.RerankResponse:
        """``POST /v1/rerank`` (Jina / Cohere, as llama-server and vLLM): ``req.documents`` scored against
        ``req.query`` by the reranker's rank pooling, best first (:mod:`skippy.engine.protocols.rerank`).

        Each query-document pair is one input of the embedding context (:meth:`_pair_scores`). Raises
        :class:`InvalidRequest` (400) when the server does not rerank (code ``not_supported``, naming
        ``--reranking``), for a bad field (:func:`~skippy.engine.protocols.rerank.translate.rerank_texts`) and a
        pair longer than the embedding context (``context_length_exceeded``); :class:`QueueFull` (429);
        :class:`EngineClosed`.
        """
        texts = rerank_texts(req)
        scores, n_tokens = await self._pair_scores([(req.query, t) for t in texts], "documents")
        return rerank_response(req, texts, scores, rid=reply_id("rerank"), model=self.reply_model(req.model),
                               prompt_tokens=n_tokens)

    async def score(self, req: ScoreRequest) -> rerank_wire.ScoreResponse:
        """vLLM's ``POST /score``: the score of each ``(text_1, text_2)`` pair, in pair order (1:N or N:N,
        :func:`~skippy.engine.protocols.rerank.translate.score_pairs`); errors as :meth:`rerank`."""
        scores, n_tokens = await self._pair_scores(score_pairs(req), "text_2")
        return score_response(scores, rid=reply_id("score"), model=self.reply_model(req.model),
                              created=int(time.time()), prompt_tokens=n_tokens)

    async def _pair_scores(self, pairs: list[tuple[str, str]], param: str) -> tuple[list[float], int]:
        """Each pair's relevance score (the first float of its rank pooling, as llama-server reads it) and the
        pairs' tokens. A pair is the GGUF's rerank template filled in, or ``[BOS] query [EOS] [SEP] document
        [EOS]`` (:mod:`skippy.engine.output.rerank`); the query of consecutive pairs is tokenized once."""
        if self._closed():
            raise EngineClosed("the engine is shutting down")
        info = self.meta.embeddings
        if info is None or info.rerank is None:
            raise InvalidRequest("This server does not support reranking. Start it with `--reranking`"
                                 + (f" (its embedding context pools {info.pooling!r})" if info is not None else ""),
                                 code="not_supported")
        fmt = info.rerank
        inputs = []
        query_text: str | None = None
        query: tuple[int, ...] = ()
        for i, (q, d) in enumerate(pairs):
            if fmt.template is not None:
                tokens: Sequence[int] = await self.tokenizer.tokenize(template_prompt(fmt.template, q, d),
                                                                      add_special=False, parse_special=True)
            else:
                if q != query_text:
                    query_text, query = q, tuple(await self.tokenizer.tokenize(q, add_special=False,
                                                                               parse_special=False))
                doc = await self.tokenizer.tokenize(d, add_special=False, parse_special=False)
                tokens = pair_tokens(fmt, query, doc)
            inputs.append(fit_pair(tokens, i, info.n_ctx, param, n_query=len(query) if fmt.template is None else 0,
                                   query_param="query" if param == "documents" else "text_1"))
        event = await self._pool(inputs)
        assert event.vectors is not None
        return [float(v) for v in event.vectors[:, 0]], event.prompt_tokens

    async def _pool(self, inputs: list[tuple[int, ...]]) -> EmbeddingsEvent:
        """Pool ``inputs`` (token ids, each fitting the embedding context) on the embedding context: queued with
        the scheduler as one request, embedded in its batches beside decoding. Returns the event with the
        vectors; raises :class:`QueueFull`, :class:`EngineClosed` (shutdown) or ``GenerationError`` (llama.cpp
        failed the batch)."""
        rid = next(self._rids)
        send, recv = trio.open_memory_channel[SeqEvent](1)
        with send, recv:
            self.scheduler.submit_embeddings(EmbedRequest(rid, tuple(inputs)), send)  # QueueFull: 429 here
            try:
                event = await recv.receive()
            except BaseException:  # cancelled (the client left, the deadline): its inputs leave the queue
                self.scheduler.cancel(rid)
                raise
        assert isinstance(event, EmbeddingsEvent)
        if event.vectors is None:
            if event.error == "cancelled":
                raise EngineClosed("the engine is shutting down")
            raise GenerationError(f"embedding failed: {event.error}")
        self.metrics.queue_wait.observe(event.queue_ms / 1000.0)
        trace = TRACE.get()
        if trace is not None:
            trace.prompt_tokens = event.prompt_tokens
        return event


def _check_normalize(mode: int) -> None:
    """400 naming ``embd_normalize`` for a mode below -1 (llama.cpp would take a negative p-norm)."""
    if mode < -1:
        raise InvalidRequest("embd_normalize must be -1 (none), 0 (max absolute), 1 (taxicab), 2 (Euclidean) "
                             "or a p-norm above 2", param="embd_normalize")
