"""llama.cpp runtime through llama-cpp-python's low-level API.

One :class:`LlamaRuntime` holds one ``llama_model`` and one
``llama_context`` with ``n_seq_max`` sequence slots and a non-unified KV
cache (``kv_unified=false``): each sequence gets its own KV stream of
``n_ctx_seq`` cells, which batches better and keeps a sequence's output
independent of its neighbours (see DESIGN.md, "Runtime facts").

llama.cpp aborts the whole process on misuse (``GGML_ASSERT``), so every
call is validated here first: batch size <= ``n_batch``, sequence ids <
``n_seq_max``, positions < ``n_ctx_seq``, output indices in range.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence

import llama_cpp
import numpy as np

from skippy.engine.runtime.base import BatchEntry, ModelMeta
from skippy.engine.sampling.params import SamplingParams

log = logging.getLogger("skippy.runtime")

_backend_lock = threading.Lock()
_backend_ready = False


def _init_backend(verbose: bool) -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            from llama_cpp import _logger

            _logger.set_verbose(verbose)
            llama_cpp.llama_backend_init()
            _backend_ready = True


class LlamaVocab:
    """Thread-safe, read-only vocabulary of a loaded model (see :class:`Vocab`)."""

    def __init__(self, vocab: llama_cpp.llama_vocab_p, n_vocab: int) -> None:
        self._vocab = vocab
        self.n_vocab = n_vocab
        self._pieces = [self._piece(t, special=False) for t in range(n_vocab)]

    def _piece(self, token: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        arr = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), arr, cap, add_special, parse_special)
        return list(arr[:n])

    def detokenize(self, tokens: Sequence[int]) -> str:
        for t in tokens:
            if not 0 <= t < self.n_vocab:
                raise ValueError(f"token id {t} is out of range (0..{self.n_vocab - 1})")
        arr = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        cap = 16 * len(tokens) + 16
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(self._vocab, arr, len(tokens), buf, cap, False, True)
        if n < 0:
            cap = -n
            buf = ctypes.create_string_buffer(cap)
            n = llama_cpp.llama_detokenize(self._vocab, arr, len(tokens), buf, cap, False, True)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def piece(self, token: int) -> bytes:
        return self._pieces[token]

    def grammar_sampler(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> object:
        """A llama.cpp grammar sampler (root rule ``root``), or a null pointer when the GBNF does not parse.

        With ``lazy_patterns`` the grammar applies only from the first regex
        match on (``llama_sampler_init_grammar_lazy_patterns``).
        """
        if not lazy_patterns:
            return llama_cpp.llama_sampler_init_grammar(self._vocab, gbnf.encode(), b"root")
        pats = (ctypes.c_char_p * len(lazy_patterns))(*[p.encode() for p in lazy_patterns])
        return llama_cpp.llama_sampler_init_grammar_lazy_patterns(
            self._vocab, gbnf.encode(), b"root", pats, len(lazy_patterns), None, 0)

    def check_grammar(self, gbnf: str, lazy_patterns: tuple[str, ...] = ()) -> bool:
        """True when llama.cpp parses ``gbnf`` (and its lazy trigger patterns)."""
        g = self.grammar_sampler(gbnf, lazy_patterns)
        if not g:
            return False
        llama_cpp.llama_sampler_free(g)
        return True

    def special_piece(self, token: int) -> str:
        return self._piece(token, special=True).decode("utf-8", errors="replace")


#: ``flash_attn`` names -> llama.cpp ``llama_flash_attn_type`` values
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


class LlamaRuntime:
    """A llama.cpp model + context (see module docstring).

    ``n_ctx_seq`` tokens per sequence, ``n_seq_max`` sequences; the llama.cpp
    context holds ``n_ctx_seq * n_seq_max`` cells. ``n_threads`` defaults to
    the number of CPUs. ``flash_attn`` is ``"on"``, ``"off"`` or ``"auto"``
    (llama.cpp's ``flash_attn_type``). Raises ``RuntimeError`` when the model
    or context cannot be created, ``ValueError`` for an unknown ``flash_attn``.
    """

    def __init__(self, path: str, *, n_ctx_seq: int = 2048, n_seq_max: int = 16, n_batch: int = 512,
                 n_threads: int | None = None, flash_attn: str = "auto", name: str | None = None,
                 verbose: bool = False) -> None:
        if flash_attn not in FLASH_ATTN:  # before loading: a refused argument must not leak the model
            raise ValueError(f"flash_attn must be one of {sorted(FLASH_ATTN)}, not {flash_attn!r}")
        _init_backend(verbose)
        mparams = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load model {path!r}")
        vocab = llama_cpp.llama_model_get_vocab(self._model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)
        if n_ctx_train > 0:
            n_ctx_seq = min(n_ctx_seq, n_ctx_train)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx_seq * n_seq_max
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq_max
        cparams.kv_unified = False
        threads = n_threads or os.cpu_count() or 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        cparams.flash_attn_type = FLASH_ATTN[flash_attn]
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise RuntimeError("llama.cpp could not create a context (out of memory?)")
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._n_vocab = n_vocab
        self._n_batch = n_batch
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._outputs: list[bool] = []
        self._cand = np.zeros(n_vocab, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self.vocab = LlamaVocab(vocab, n_vocab)
        tmpl = llama_cpp.llama_model_chat_template(self._model, None)
        bos = llama_cpp.llama_vocab_bos(vocab)
        eos = llama_cpp.llama_vocab_eos(vocab)
        eog = frozenset(t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t))
        self.meta = ModelMeta(
            name=name or os.path.splitext(os.path.basename(path))[0],
            path=path,
            chat_template=tmpl.decode("utf-8", errors="replace") if tmpl else None,
            bos_id=bos, eos_id=eos, eog_ids=eog,
            bos_token=self.vocab.special_piece(bos) if bos >= 0 else "",
            eos_token=self.vocab.special_piece(eos) if eos >= 0 else "",
            n_vocab=n_vocab, n_ctx_train=n_ctx_train,
            n_ctx_seq=llama_cpp.llama_n_ctx_seq(self._ctx),
            n_seq_max=llama_cpp.llama_n_seq_max(self._ctx),
            n_batch=n_batch,
            is_recurrent=bool(llama_cpp.llama_model_is_recurrent(self._model)
                              or llama_cpp.llama_model_is_hybrid(self._model)),
        )

    # -- decode -------------------------------------------------------------
    def decode(self, entries: Sequence[BatchEntry]) -> None:
        """One ``llama_decode`` (see :meth:`Runtime.decode`). Validates before calling."""
        n = len(entries)
        if not 0 < n <= self._n_batch:
            raise ValueError(f"batch of {n} tokens (allowed 1..{self._n_batch})")
        b = self._batch
        outputs = []
        for i, e in enumerate(entries):
            if not 0 <= e.seq_id < self.meta.n_seq_max:
                raise ValueError(f"sequence id {e.seq_id} out of range")
            if not 0 <= e.pos < self.meta.n_ctx_seq:
                raise ValueError(f"position {e.pos} outside the sequence context {self.meta.n_ctx_seq}")
            if not 0 <= e.token < self._n_vocab:
                raise ValueError(f"token id {e.token} out of range")
            b.token[i] = e.token
            b.pos[i] = e.pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = e.seq_id
            b.logits[i] = e.logits
            outputs.append(e.logits)
        b.n_tokens = n
        rc = llama_cpp.llama_decode(self._ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc}")
        self._outputs = outputs

    def _check_output(self, index: int) -> None:
        if not (0 <= index < len(self._outputs) and self._outputs[index]):
            raise IndexError(f"batch index {index} has no logits in the last decode")

    def logits(self, index: int) -> np.ndarray:
        self._check_output(index)
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    # -- sampling -----------------------------------------------------------
    def new_sampler(self, params: SamplingParams) -> object:
        """The sampler chain of one sequence, plus its grammar sampler kept apart.

        The grammar is checked the way llama.cpp's ``common_sampler`` does it:
        sample from the chain first and test only the chosen token against
        the grammar; only when the grammar rejects it, apply the grammar to
        the whole vocabulary and sample again. Raises ``ValueError`` when
        llama.cpp rejects the grammar.
        """
        sparams = llama_cpp.llama_sampler_chain_default_params()
        sparams.no_perf = True
        chain = llama_cpp.llama_sampler_chain_init(sparams)
        add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731
        grammar = None
        if params.grammar:
            grammar = self.vocab.grammar_sampler(params.grammar, params.grammar_lazy_patterns)
            if not grammar:
                llama_cpp.llama_sampler_free(chain)
                raise ValueError("llama.cpp rejected the grammar")
        if params.logit_bias:
            arr = (llama_cpp.llama_logit_bias * len(params.logit_bias))()
            for i, (tok, bias) in enumerate(params.logit_bias):
                arr[i].token = tok
                arr[i].bias = bias
            add(llama_cpp.llama_sampler_init_logit_bias(self._n_vocab, len(params.logit_bias), arr))
        if params.repeat_penalty != 1.0 or params.frequency_penalty or params.presence_penalty:
            add(llama_cpp.llama_sampler_init_penalties(self._n_vocab, params.penalty_last_n, params.repeat_penalty,
                                                       params.frequency_penalty, params.presence_penalty))
        if params.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(llama_cpp.llama_sampler_init_top_k(params.top_k))
            add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
            add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_dist(params.seed))
        return (chain, grammar)

    def _candidates(self, index: int) -> tuple[np.ndarray, llama_cpp.llama_token_data_array]:
        cand = self._cand
        cand["id"] = self._ids
        cand["logit"] = self.logits(index)
        cand["p"] = 0.0
        cur = llama_cpp.llama_token_data_array(
            data=cand.ctypes.data_as(llama_cpp.llama_token_data_p), size=self._n_vocab, selected=-1, sorted=False)
        return cand, cur

    def sample(self, sampler: object, index: int) -> int:
        self._check_output(index)
        chain, grammar = sampler  # type: ignore[misc]
        if grammar is None:
            return llama_cpp.llama_sampler_sample(chain, self._ctx, index)
        cand, cur = self._candidates(index)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
        token = int(cand["id"][cur.selected])
        one = llama_cpp.llama_token_data(id=token, logit=1.0, p=0.0)
        single = llama_cpp.llama_token_data_array(data=ctypes.pointer(one), size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(single))
        if single.data[0].logit == float("-inf"):
            cand, cur = self._candidates(index)
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(cur))
            llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
            token = int(cand["id"][cur.selected])
        llama_cpp.llama_sampler_accept(grammar, token)
        llama_cpp.llama_sampler_accept(chain, token)
        return token

    def free_sampler(self, sampler: object) -> None:
        chain, grammar = sampler  # type: ignore[misc]
        llama_cpp.llama_sampler_free(chain)
        if grammar is not None:
            llama_cpp.llama_sampler_free(grammar)

    # -- KV cache -----------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """``llama_memory_seq_rm``; False when a partial removal is impossible (recurrent models)."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        return bool(llama_cpp.llama_memory_seq_rm(self._mem, seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int) -> None:
        """Copy all of sequence ``src`` to ``dst`` (``llama_memory_seq_cp`` with p0 = p1 = -1).

        Only whole-sequence copies: with a non-unified KV cache llama.cpp
        aborts on a partial copy between streams; trim the tail with
        :meth:`seq_rm` afterwards.
        """
        for s in (src, dst):
            if not 0 <= s < self.meta.n_seq_max:
                raise ValueError(f"sequence id {s} out of range")
        if src == dst:
            raise ValueError("source and destination sequence are the same")
        llama_cpp.llama_memory_seq_cp(self._mem, src, dst, -1, -1)

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position held for ``seq_id`` in the KV cache, -1 when empty."""
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        return llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id)

    # -- sequence state files (llama-server /slots save / restore) ---------------
    def state_seq_save(self, path: str, seq_id: int, tokens: Sequence[int]) -> int:
        """Write sequence ``seq_id``'s KV state and its ``tokens`` to ``path`` (``llama_state_seq_save_file``).

        Returns the bytes written; raises ``ValueError`` for a bad sequence id or token count,
        ``OSError`` when llama.cpp wrote nothing.
        """
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        if len(tokens) > self.meta.n_ctx_seq:
            raise ValueError(f"{len(tokens)} tokens do not fit the sequence context {self.meta.n_ctx_seq}")
        arr = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        n = llama_cpp.llama_state_seq_save_file(self._ctx, path.encode(), seq_id, arr, len(tokens))
        if n == 0:
            raise OSError(f"llama.cpp could not write {path!r}")
        return int(n)

    def state_seq_load(self, path: str, seq_id: int) -> tuple[int, list[int]]:
        """Read a state file written by :meth:`state_seq_save` into sequence ``seq_id``
        (``llama_state_seq_load_file``; the sequence is cleared first).

        Returns ``(bytes read, tokens)``; ``(0, [])`` when the file is not a sequence state of this
        model or does not fit the sequence's KV stream (the sequence is then left empty).
        """
        if not 0 <= seq_id < self.meta.n_seq_max:
            raise ValueError(f"sequence id {seq_id} out of range")
        self.seq_rm(seq_id)
        cap = self.meta.n_ctx_seq
        arr = (llama_cpp.llama_token * cap)()
        count = ctypes.c_size_t(0)
        n = llama_cpp.llama_state_seq_load_file(self._ctx, path.encode(), seq_id, arr, cap, ctypes.byref(count))
        if n == 0:
            self.seq_rm(seq_id)
            return 0, []
        return int(n), list(arr[: count.value])

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            llama_cpp.llama_model_free(self._model)
            self._ctx = None
