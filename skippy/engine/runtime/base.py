"""What the decode scheduler needs from a model runtime.

A runtime owns one model and one inference context. Only the decode
scheduler calls :meth:`Runtime.decode` and the sampler/KV methods (from
one worker thread at a time); :class:`Vocab` is read-only and thread-safe,
so the tokenizer actor may use it from any thread concurrently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import numpy as np

from skippy.engine.sampling.params import SamplingParams

if TYPE_CHECKING:
    from skippy.engine.lora import LoraSet
    from skippy.engine.runtime.media import MediaSpan
    from skippy.engine.runtime.tokenization import SpecialTokens


#: what :meth:`Runtime.sample` returns when a grammar or constraint leaves no token to sample (a grammar that
#: matches nothing, or ``logit_bias`` banning every token it allows): the sequence ends there with finish
#: reason ``no_token`` (llama.cpp would abort on accepting a token its grammar rejects)
NO_TOKEN = -1


@attrs.frozen
class KVCacheInfo:
    """The KV cache a runtime allocated (llama-server's start-up line ``llama_kv_cache: size = ...``).

    ``type_k`` / ``type_v``: ggml type names (``f16``, ``q8_0``...). ``n_cells``: cells of
    the whole cache (``n_ctx_seq x n_seq_max``, unified or not). ``bytes_k`` / ``bytes_v``:
    bytes of the K and V tensors over all layers. ``unified``: one buffer whose cells all
    sequences share (llama.cpp ``kv_unified``), else one stream of ``n_ctx_seq`` cells per sequence.
    """

    type_k: str
    type_v: str
    n_cells: int
    n_ctx_seq: int
    n_seq_max: int
    unified: bool
    bytes_k: int
    bytes_v: int

    @property
    def bytes(self) -> int:
        """Bytes of the whole KV cache (K + V)."""
        return self.bytes_k + self.bytes_v

    @property
    def bytes_per_token(self) -> float:
        """Bytes of one cell (one token of one sequence, K + V over all layers)."""
        return self.bytes / self.n_cells if self.n_cells else 0.0

    @property
    def bytes_per_seq(self) -> float:
        """Bytes of ``n_ctx_seq`` cells: one sequence's full context."""
        return self.bytes_per_token * self.n_ctx_seq

    def as_dict(self) -> dict[str, Any]:
        """The ``/props`` ``kv_cache`` object (sizes in bytes)."""
        return {"type_k": self.type_k, "type_v": self.type_v, "n_cells": self.n_cells,
                "n_ctx_seq": self.n_ctx_seq, "n_seq_max": self.n_seq_max, "unified": self.unified,
                "bytes": self.bytes, "bytes_k": self.bytes_k, "bytes_v": self.bytes_v,
                "bytes_per_token": self.bytes_per_token}


@attrs.frozen
class FimTokens:
    """The vocabulary's fill-in-the-middle tokens (llama.cpp ``llama_vocab_fim_pre`` / ``_suf`` / ``_mid`` /
    ``_pad`` / ``_rep`` / ``_sep``); -1 where it has none."""

    pre: int = -1
    suf: int = -1
    mid: int = -1
    pad: int = -1
    rep: int = -1
    sep: int = -1

    @property
    def available(self) -> bool:
        """The model can infill: it has FIM prefix, suffix and middle tokens."""
        return min(self.pre, self.suf, self.mid) >= 0


@attrs.frozen
class RerankFormat:
    """How a reranker's vocabulary makes a query-document pair into one prompt (llama-server's
    ``format_prompt_rerank``), read at load.

    ``template``: the GGUF's rerank prompt (``tokenizer.chat_template.rerank``, e.g. Qwen3-Reranker's), whose
    ``{query}`` and ``{document}`` are replaced by the texts and the result tokenized with special tokens
    parsed and none added; ``None``: the pair is ``[BOS] query [EOS] [SEP] document [EOS]``, each id present
    when the vocabulary adds that token (``llama_vocab_get_add_bos`` / ``_eos`` / ``_sep``), and ``eos`` the
    vocabulary's EOS, else its SEP (BERT vocabularies have no EOS).
    """

    template: str | None = None
    bos: int | None = None
    eos: int | None = None
    sep: int | None = None


@attrs.frozen
class EmbeddingInfo:
    """The embedding context of a runtime: a second llama.cpp context on the same model weights, made with
    ``embeddings = true`` (llama-server ``--embeddings``, or ``--reranking`` for rank pooling).

    ``pooling``: llama.cpp's pooling type by name (``none``, ``mean``, ``cls``, ``last``, ``rank``), the
    GGUF's (``<arch>.pooling_type``) unless one was asked for. ``n_ctx``: tokens of one embedding batch
    (the context's ``n_batch = n_ubatch``): every input is pooled within one micro-batch, so this is also
    the longest input. ``n_seq_max``: inputs in one batch. ``error``: why this model or pooling cannot
    answer ``/v1/embeddings`` (pooling ``none`` gives per-token vectors and ``rank`` a relevance score,
    neither an OpenAI embedding; or llama.cpp refused the context); ``None`` when it can. With pooling
    ``none`` the context still runs batches (:attr:`per_token`: llama-server's ``/embedding`` answers them).
    ``n_out``: floats llama.cpp pools per input (``llama_get_embeddings_seq``): the model's ``n_embd`` for
    a vector (``0`` says the same), its classifier outputs (``llama_model_n_cls_out``) with ``rank``.
    ``rerank``: with ``rank`` pooling on a usable context, how a pair becomes a prompt (``/v1/rerank``
    answers); ``None`` otherwise.
    """

    pooling: str
    n_ctx: int
    n_seq_max: int
    error: str | None = None
    n_out: int = 0
    rerank: RerankFormat | None = None

    @property
    def per_token(self) -> bool:
        """Pooling ``none``: a batch gives one vector per token of each input, not one per input."""
        return self.pooling == "none"

    @property
    def usable(self) -> bool:
        """The context runs batches: it pools vectors (``error`` is ``None``), relevance scores (``rerank``) or
        gives per-token vectors (:attr:`per_token`)."""
        return self.error is None or self.rerank is not None or self.per_token


@attrs.frozen
class ModelMeta:
    """Model metadata read once at load.

    ``n_ctx_seq`` is the context of one sequence (tokens), ``n_seq_max`` the
    number of sequence slots, ``n_batch`` the most tokens one decode call
    takes. Token ids are ``int``; ``eog_ids`` are all end-of-generation ids.
    ``kv_unified``: the KV cache is one buffer shared by all sequences (llama.cpp
    ``kv_unified``), so :meth:`Runtime.seq_cp` also copies a prefix (``n``), nearly free;
    otherwise only whole sequences are copied. ``kv_cache``: the KV cache's types and
    size, when the runtime knows them. ``fim``: the fill-in-the-middle tokens. ``n_embd``: the size of
    one embedding vector (llama.cpp ``llama_model_n_embd_out``). ``embeddings``: the embedding context
    (``None``: embeddings are off).
    ``n_swa``: the sliding-window size of the model's SWA layers (llama.cpp ``llama_model_n_swa``;
    0: no sliding-window attention, e.g. Gemma 3 has 512). ``swa_full``: the SWA layers keep a
    full-size cache (llama.cpp ``swa_full``); otherwise llama.cpp overwrites their cells once they
    fall out of the window, so a trimmed sequence may no longer serve a prefix
    (:meth:`Runtime.seq_pos_min` tells).
    ``backend_sampling``: a plain greedy sequence may be sampled inside llama.cpp's graph
    (:meth:`Runtime.set_backend_sampler`, :meth:`Runtime.sampled_token`); ``backend_sampled``: a sampled
    chain too (logit bias, penalties, top_k, top_p, min_p, temperature and ``dist`` run there).
    ``devices``: what ``/props`` reports about llama.cpp's backends and the model's offload, keys
    ``backends`` (names), ``devices`` (every device found at load) and ``offload`` (the devices the
    layers went to, layers offloaded, split settings, RPC workers); ``None`` when the runtime does not say.
    """

    name: str
    path: str
    chat_template: str | None
    bos_id: int
    eos_id: int
    eog_ids: frozenset[int]
    bos_token: str
    eos_token: str
    n_vocab: int
    n_ctx_train: int
    n_ctx_seq: int
    n_seq_max: int
    n_batch: int
    is_recurrent: bool
    kv_unified: bool = False
    kv_cache: KVCacheInfo | None = None
    fim: FimTokens = FimTokens()
    n_embd: int = 0
    embeddings: EmbeddingInfo | None = None
    n_swa: int = 0
    swa_full: bool = False
    devices: dict[str, Any] | None = None
    backend_sampling: bool = False
    backend_sampled: bool = False
    #: images are accepted: a ``--mmproj`` projector with an image encoder is loaded
    #: (:mod:`~skippy.engine.runtime.media`; ``/props`` ``modalities``)
    vision: bool = False
    #: how the model was loaded, for ``/props`` ``model_load`` (the llama.cpp context's ``n_batch`` and
    #: ``n_ubatch``, load mode, NUMA, tensor and metadata overrides, RoPE and YaRN settings); ``None``: not known
    load: dict[str, Any] | None = None
    #: the LoRA adapter GGUFs loaded onto the model, by adapter id (:meth:`Runtime.set_lora`)
    lora: tuple[str, ...] = ()
    #: the model generates text (a decoder with causal attention); ``False``: an encoder (BERT and its kin),
    #: served for embeddings and reranking only (:func:`~skippy.engine.runtime.kv.generates`)
    generates: bool = True
    #: cached KV can move to other positions (:meth:`Runtime.seq_add`; llama.cpp ``llama_memory_can_shift``:
    #: not for M-RoPE or recurrent models)
    can_shift: bool = False

    @property
    def is_swa(self) -> bool:
        """The model has sliding-window attention layers (``n_swa`` > 0)."""
        return self.n_swa > 0

    @property
    def kv_on_host(self) -> bool:
        """The KV cache is in host memory: no layer went to a device (a GPU, an RPC worker) per ``devices``
        (``None``, a runtime that does not say, counts as host memory)."""
        return not ((self.devices or {}).get("offload") or {}).get("devices")


class Vocab(Protocol):
    """Read-only, thread-safe vocabulary access."""

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Text -> token ids (llama.cpp ``llama_tokenize``)."""
        ...

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids -> text, special tokens rendered (llama.cpp ``llama_detokenize``)."""
        ...

    def piece(self, token: int) -> bytes:
        """The bytes of one token as generated output (control tokens render as b"")."""
        ...

    def special_piece(self, token: int) -> bytes:
        """The bytes of one token with control tokens rendered as their text (llama.cpp
        ``common_token_to_piece(vocab, token, special=true)``, what llama-server's ``/tokenize`` shows)."""
        ...

    def check_grammar(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> bool:
        """True when the runtime's grammar sampler accepts ``gbnf`` (root rule ``root``)."""
        ...

    def check_constraint(self, grammar: str) -> str:
        """``""`` when the runtime can enforce the llguidance ``grammar`` with this vocabulary, else why not."""
        ...

    def special_tokens(self) -> SpecialTokens | None:
        """The tokens the tokenizer cuts a text at, for :class:`~skippy.engine.runtime.tokenization.TokenizationCache`
        (``None``: the cache does not apply to this vocabulary)."""
        ...


@attrs.frozen
class BatchEntry:
    """One token of a decode batch: ``pos`` in sequence ``seq_id``; ``logits`` requested or not."""

    token: int
    pos: int
    seq_id: int
    logits: bool


@attrs.frozen(eq=False)
class NextTokens(Sequence[BatchEntry]):
    """A decode batch of one token per sequence, every one an output (a multi-step run's later decodes), held
    as columns: ``tokens`` and ``pos`` (integer arrays, shape ``(n,)``) and ``seq_ids`` (``n`` ints).

    It is a ``Sequence[BatchEntry]`` (entry ``i`` is ``BatchEntry(tokens[i], pos[i], seq_ids[i], True)``, made
    when read), so any :meth:`Runtime.decode` takes it; a runtime that knows it reads the columns without
    making the entries."""

    tokens: np.ndarray
    pos: np.ndarray
    seq_ids: list[int]

    def __len__(self) -> int:
        return len(self.seq_ids)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return BatchEntry(int(self.tokens[i]), int(self.pos[i]), self.seq_ids[i], True)


class Runtime(Protocol):
    meta: ModelMeta

    @property
    def vocab(self) -> Vocab:
        """The model's vocabulary (read-only: an implementation's own :class:`Vocab` type satisfies it)."""
        ...

    def decode(self, entries: Sequence[BatchEntry]) -> None:
        """One ``llama_decode`` over ``entries`` (any sequence of entries; a multi-step run gives
        :class:`NextTokens`); raises ``RuntimeError`` on failure."""
        ...

    def decode_media(self, span: MediaSpan, seq_id: int) -> None:
        """Put the image of ``span`` in sequence ``seq_id``'s KV cache from its first position ``span.pos``
        (:func:`~skippy.engine.runtime.media.position`: M-RoPE images take fewer positions than cells; a runtime with
        ``meta.vision``); the logits of the last decode are gone after it. Raises ``RuntimeError``."""
        ...

    def logits(self, index: int) -> np.ndarray:
        """Raw logits (float32, shape ``(n_vocab,)``) at batch index ``index`` of the last decode."""
        ...

    def output_logits(self, indices: Sequence[int]) -> np.ndarray:
        """Raw logits at batch ``indices`` of the last decode, float32, shape ``(len(indices), n_vocab)``
        (llama.cpp ``llama_get_logits``: one row per output, in batch order)."""
        ...

    def new_sampler(self, params: SamplingParams) -> object:
        """Build a per-sequence sampler; raises ``ValueError`` for a grammar or constraint it cannot enforce.

        ``params.constraint`` is applied as a token mask before the sampler
        chain; ``params.ignore_eos`` / ``min_tokens`` keep end-of-generation
        (and, for ``min_tokens``, ``stop_token_ids``) from being sampled.

        A :class:`~skippy.engine.sampling.vector.SeqSampler` is sampled by the scheduler with the
        step's other such rows (``sample_rows``); any other object through :meth:`sample`.
        """
        ...

    def sample(self, sampler: object, index: int) -> int:
        """Sample (and accept) a token from the logits at batch index ``index`` of the last decode; :data:`NO_TOKEN`
        (nothing accepted) when the sampler's grammar or constraint, with its ``logit_bias``, allows no token."""
        ...

    def sample_probs(self, sampler: object, index: int) -> tuple[int, np.ndarray, np.ndarray]:
        """:meth:`sample`, and the distribution the token was drawn from: ``(token, ids, probabilities)``,
        the candidates the sampler's chain kept (float64 probabilities, descending; llama-server's
        ``post_sampling_probs``). Any sampler, a :class:`~skippy.engine.sampling.vector.SeqSampler` too."""
        ...

    def accept(self, sampler: object, token: int) -> None:
        """Advance ``sampler`` by a token it did not sample (a forced one), as sampling it would have."""
        ...

    def sampler_error(self, sampler: object) -> str | None:
        """Why ``sampler``'s constraint failed, when :meth:`sample` gave :data:`NO_TOKEN` because of it (llguidance
        reached one of its limits, say); ``None`` when its grammar simply allows nothing."""
        ...

    def free_sampler(self, sampler: object) -> None: ...

    def set_backend_sampler(self, seq_id: int, params: SamplingParams | None) -> None:
        """Attach llama.cpp's sampler chain of ``params`` to ``seq_id`` in the decode graph (backend sampling,
        llama.cpp ``llama_set_sampler``), or detach it (``None``): the token of each of its outputs is then
        sampled in ``llama_decode`` and read with :meth:`sampled_token`, which also advances the chain by it
        (its random stream and penalty window, as ``llama_sampler_accept`` on the host); its raw logits are not
        copied out when no sequence of the batch needs them. Each attachment is a fresh chain. ``params``
        must be vectorizable and greedy unless ``meta.backend_sampled``. Only when ``meta.backend_sampling``;
        a change costs one graph reserve in the next decode. Raises ``RuntimeError`` when llama.cpp refuses."""
        ...

    def sampled_token(self, index: int) -> int:
        """The token the backend sampler picked at batch index ``index`` of the last decode (llama.cpp
        ``llama_get_sampled_token_ith``), taken by its chain; ``RuntimeError`` when it picked none. Read once
        per output: a second read would advance a sampled chain again."""
        ...

    def sampled_tokens(self, indices: Sequence[int]) -> list[int]:
        """:meth:`sampled_token` at each of batch ``indices``, in order (one check for them all)."""
        ...

    def set_lora(self, lora: LoraSet) -> None:
        """Apply the LoRA adapter set ``lora`` (``(id, scale)`` pairs of ``meta.lora``'s adapters; ``()``: none)
        to the context for the next decodes (llama.cpp ``llama_set_adapters_lora``: per context, not per
        sequence). Decode thread only; a no-op when it is applied already. Raises ``ValueError`` for an
        unknown id or a scale that is not finite."""
        ...

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions ``[p0, p1)`` of ``seq_id`` from the KV cache (-1: open end).

        Returns False when a partial removal is impossible (recurrent models).
        """
        ...

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        """Move ``seq_id``'s KV at positions ``[p0, p1)`` by ``delta`` positions (llama.cpp
        ``llama_memory_seq_add``; the keys are rotated again at the next decode). Only when
        ``meta.can_shift``; with a unified KV cache a cell another sequence shares moves for it too."""
        ...

    def seq_pos_min(self, seq_id: int) -> int:
        """Smallest position of ``seq_id`` in the KV cache, -1 when it holds none (llama.cpp
        ``llama_memory_seq_pos_min``; with an iSWA cache, the SWA layers' smallest position, every
        position from it up to the largest being held). Only read for a model with ``meta.is_swa``."""
        ...

    def seq_cp(self, src: int, dst: int, n: int | None = None) -> None:
        """Copy sequence ``src`` to ``dst`` in the KV cache: positions ``[0, n)``, or all of it
        (``n=None``). A prefix (``n``) only when ``meta.kv_unified``; ``ValueError`` otherwise."""
        ...

    def state_seq_get_data(self, seq_id: int) -> bytes | bytearray:
        """Sequence ``seq_id``'s whole state (KV cells and recurrent state) in host memory (llama.cpp
        ``llama_state_seq_get_data_ext``): a context checkpoint, or a prompt-cache entry.
        Optional: only a scheduler with context checkpoints (recurrent, hybrid, sliding-window models) needs it."""
        ...

    def state_seq_set_data(self, seq_id: int, data: bytes | bytearray) -> bool:
        """Restore a state from :meth:`state_seq_get_data` into ``seq_id`` (cleared first; llama.cpp
        ``llama_state_seq_set_data_ext``); False when it does not fit (the sequence is left empty)."""
        ...

    def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """One embedding batch: the pooled vector of each input (token ids), float32, shape
        ``(len(inputs), meta.embeddings.n_out or meta.n_embd)``, not normalized (llama.cpp
        ``llama_get_embeddings_seq``; with rank pooling, each input's classifier outputs, the first its
        relevance score). With pooling ``none`` (:attr:`EmbeddingInfo.per_token`): one row per token instead,
        the inputs' tokens in order, shape ``(sum(map(len, inputs)), meta.n_embd)`` (llama.cpp
        ``llama_get_embeddings``).

        On the embedding context (``meta.embeddings``), from the decode thread, like :meth:`decode`.
        Raises ``ValueError`` for a batch the embedding context cannot take (embeddings off or
        unusable, no input, an empty input, more than ``n_seq_max`` inputs or ``n_ctx`` tokens, a token
        outside the vocabulary) and ``RuntimeError`` when llama.cpp fails.
        """
        ...

    def state_seq_save(self, path: str, seq_id: int, tokens: Sequence[int]) -> int:
        """Write ``seq_id``'s KV state and ``tokens`` to ``path``; returns the bytes written (llama.cpp
        ``llama_state_seq_save_file``). Optional: only llama-server's slot save needs it."""
        ...

    def state_seq_load(self, path: str, seq_id: int) -> tuple[int, list[int]]:
        """Load a state file into ``seq_id``; returns ``(bytes read, tokens)``, ``(0, [])`` on failure
        (llama.cpp ``llama_state_seq_load_file``). Optional: only llama-server's slot restore needs it."""
        ...

    def close(self) -> None: ...
