"""LlamaRuntime against the real default model (synchronous, no event loop).

llama.cpp aborts the process on misuse, so every check that a bad call
raises a Python exception is also a check that the process survives.
"""

import logging
import os

import attrs
import numpy as np
import pytest

from skippy.engine.runtime.base import BatchEntry, NextTokens
from skippy.engine.sampling.params import SamplingParams

MODEL = os.path.expanduser("~/.cache/skippy/models/SmolLM2-135M-Instruct.Q4_1.gguf")

# slow: the real model in llama.cpp (make test-fast leaves it out)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(MODEL), reason="default model not downloaded (skippy pull)")]

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def rt():
    from skippy.engine.runtime.llama import LlamaRuntime

    runtime = LlamaRuntime(MODEL, n_ctx_seq=512, n_seq_max=2, backend_sampling=True)
    yield runtime
    runtime.close()
    runtime.close()  # idempotent


def tok(rt, text):
    return rt.vocab.tokenize(text, add_special=False, parse_special=True)


def prefill(rt, tokens, seq=0, start=0):
    """Decode ``tokens`` into ``seq`` (cleared first); logits only at the last one."""
    rt.seq_rm(seq)
    rt.decode([BatchEntry(t, start + i, seq, i == len(tokens) - 1) for i, t in enumerate(tokens)])
    return len(tokens) - 1


def generate(rt, sampler, tokens, n, seq=0, stop_ids=()):
    idx = prefill(rt, tokens, seq)
    out = []
    pos = len(tokens)
    for _ in range(n):
        t = rt.sample(sampler, idx)
        out.append(t)
        if t in stop_ids:
            break
        rt.decode([BatchEntry(t, pos, seq, True)])
        pos += 1
        idx = 0
    return out


# --- metadata & vocabulary -----------------------------------------------------


def test_meta(rt):
    m = rt.meta
    assert m.n_vocab == 49152
    assert m.n_ctx_seq == 512
    assert m.n_seq_max == 2
    assert m.n_batch == 512
    assert m.n_ctx_train >= 2048
    assert 0 <= m.eos_id < m.n_vocab
    assert m.eos_id in m.eog_ids
    assert all(0 <= t < m.n_vocab for t in m.eog_ids)
    assert m.eos_token == "<|im_end|>"
    assert m.chat_template and "messages" in m.chat_template and "<|im_start|>" in m.chat_template
    assert m.name == "SmolLM2-135M-Instruct.Q4_1"
    assert m.path == MODEL
    assert m.is_recurrent is False


def test_tokenize_detokenize_round_trip(rt):
    for text in ["The capital of France is", "Hello, world! 日本語 😀 naïve", "  spaces\n\ttabs  ", ""]:
        toks = tok(rt, text)
        assert all(isinstance(t, int) and 0 <= t < rt.meta.n_vocab for t in toks)
        assert rt.vocab.detokenize(toks) == text
    assert tok(rt, "") == []


def test_tokenize_special_tokens(rt):
    special = tok(rt, "<|im_start|>user")
    assert len(special) == 2
    assert rt.vocab.detokenize(special) == "<|im_start|>user"
    plain = rt.vocab.tokenize("<|im_start|>user", add_special=False, parse_special=False)
    assert len(plain) > 2  # parsed as ordinary text
    assert rt.vocab.detokenize(plain) == "<|im_start|>user"


def test_tokenize_long_text_grows_buffer(rt):
    text = "日本語" * 400 + "a b c " * 300
    assert rt.vocab.detokenize(tok(rt, text)) == text


def test_detokenize_rejects_out_of_range(rt):
    with pytest.raises(ValueError):
        rt.vocab.detokenize([rt.meta.n_vocab])
    with pytest.raises(ValueError):
        rt.vocab.detokenize([-1])


def test_pieces(rt):
    toks = tok(rt, "The capital of France is")
    assert [rt.vocab.piece(t) for t in toks] == [b"The", b" capital", b" of", b" France", b" is"]
    assert b"".join(rt.vocab.piece(t) for t in toks) == b"The capital of France is"
    # control tokens render as nothing in generated output
    assert rt.vocab.piece(rt.meta.eos_id) == b""
    # multi-byte text: pieces concatenate to its UTF-8 bytes even when a piece is not valid UTF-8
    text = "日本語 😀"
    assert b"".join(rt.vocab.piece(t) for t in tok(rt, text)) == text.encode("utf-8")
    assert all(isinstance(rt.vocab.piece(t), bytes) for t in range(0, rt.meta.n_vocab, 997))


# --- decode validation -----------------------------------------------------------


@pytest.mark.parametrize("entries", [
    [],
    [BatchEntry(1, i, 0, False) for i in range(513)],  # larger than n_batch
    [BatchEntry(1, 0, 2, True)],  # seq id >= n_seq_max
    [BatchEntry(1, 0, -1, True)],
    [BatchEntry(1, 512, 0, True)],  # position >= n_ctx_seq
    [BatchEntry(1, -1, 0, True)],
    [BatchEntry(49152, 0, 0, True)],  # token out of range
    [BatchEntry(-1, 0, 0, True)],
    [BatchEntry(1, 0, 0, False), BatchEntry(2, 1, 0, False), BatchEntry(10**6, 2, 0, True)],
])
def test_decode_validation_raises_value_error(rt, entries):
    with pytest.raises(ValueError):
        rt.decode(entries)


def test_decode_validation_names_the_value(rt):
    for entries, message in (([BatchEntry(1, 0, 0, True), BatchEntry(1, 0, 5, True)], "sequence id 5 out of range"),
                             ([BatchEntry(1, 600, 1, True)], "position 600 outside the sequence context 512"),
                             ([BatchEntry(7, 0, 0, True), BatchEntry(-3, 1, 0, True)], "token id -3 out of range")):
        with pytest.raises(ValueError, match=message):
            rt.decode(entries)


def test_a_batch_whose_sequences_swap_places_decodes_each_in_its_own(rt):
    """The batch's sequence ids are written only where they change (a multi-step run keeps them): tokens of two
    sequences in one order, then in the other, land in their own sequences (the same logits per sequence)."""
    a, b = tok(rt, "The capital of France is"), tok(rt, "Once upon a time")
    rows = {}
    for order in ((0, 1), (1, 0)):
        for s, t in ((0, a), (1, b)):
            rt.seq_rm(s)
            rt.decode([BatchEntry(x, i, s, i == len(t) - 1) for i, x in enumerate(t)])
        nxt = {0: (a[-1], len(a)), 1: (b[-1], len(b))}
        rt.decode([BatchEntry(nxt[s][0], nxt[s][1], s, True) for s in order])
        rows[order] = {s: rt.logits(i).copy() for i, s in enumerate(order)}
    for s in (0, 1):
        assert int(rows[(0, 1)][s].argmax()) == int(rows[(1, 0)][s].argmax())
        np.testing.assert_allclose(rows[(0, 1)][s], rows[(1, 0)][s], atol=1e-2)
    assert int(rows[(0, 1)][0].argmax()) != int(rows[(0, 1)][1].argmax())  # two different continuations
    rt.seq_rm(0)
    rt.seq_rm(1)


def test_next_tokens_decode_as_their_entries(rt):
    """A multi-step run's :class:`NextTokens` (columns, every token an output) decodes as the same entries would:
    the same logits per sequence; columns of another length than the sequence ids, or a token out of range, are a
    ``ValueError`` before anything is decoded."""
    a, b = tok(rt, "The capital of France is"), tok(rt, "Once upon a time")
    rows = []
    for columns in (False, True):
        for s, t in ((0, a), (1, b)):
            prefill(rt, t, s)
        tokens, pos = np.array([b[-1], a[-1]]), np.array([len(b), len(a)])
        if columns:
            rt.decode(NextTokens(tokens, pos, [1, 0]))
        else:
            rt.decode([BatchEntry(int(t), int(p), s, True) for t, p, s in zip(tokens, pos, (1, 0), strict=True)])
        rows.append(rt.output_logits([0, 1]).copy())
    np.testing.assert_allclose(rows[0], rows[1], atol=1e-3)
    assert list(NextTokens(np.array([7]), np.array([3]), [1])) == [BatchEntry(7, 3, 1, True)]
    n_past = (rt.seq_pos_max(0), rt.seq_pos_max(1))
    for bad, message in ((NextTokens(np.array([5]), np.array([len(a), len(b)]), [0, 1]), "2 sequences"),
                         (NextTokens(np.array([5, 49152]), np.array([len(a) + 1, len(b) + 1]), [0, 1]),
                          "token id 49152 out of range")):
        with pytest.raises(ValueError, match=message):
            rt.decode(bad)
    assert (rt.seq_pos_max(0), rt.seq_pos_max(1)) == n_past  # nothing decoded
    rt.seq_rm(0)
    rt.seq_rm(1)


def test_inconsistent_positions_raise_runtime_error(rt):
    rt.seq_rm(0)
    rt.decode([BatchEntry(1, 0, 0, True)])
    with pytest.raises(RuntimeError):
        rt.decode([BatchEntry(1, 5, 0, True)])  # gap after position 0
    rt.seq_rm(0)


def test_kv_ops_validate_seq_id(rt):
    with pytest.raises(ValueError):
        rt.seq_rm(2)
    with pytest.raises(ValueError):
        rt.seq_pos_max(2)
    with pytest.raises(ValueError):
        rt.seq_pos_max(-1)


def test_seq_rm_tail_and_continue(rt):
    toks = tok(rt, "The capital of France is")
    prefill(rt, toks)
    assert rt.seq_pos_max(0) == len(toks) - 1
    rt.seq_rm(0, 2, -1)
    assert rt.seq_pos_max(0) == 1
    rt.decode([BatchEntry(t, 2 + i, 0, True) for i, t in enumerate(toks[2:])])
    assert rt.seq_pos_max(0) == len(toks) - 1


# --- logits & sampling -----------------------------------------------------------


def test_logits_only_where_requested(rt):
    toks = tok(rt, "The capital of France is")
    last = prefill(rt, toks)
    lg = rt.logits(last)
    assert lg.dtype == np.float32 and lg.shape == (rt.meta.n_vocab,)
    assert np.isfinite(lg).all()
    for bad in (0, last - 1, last + 1, len(toks), -1, 10**6):
        with pytest.raises(IndexError):
            rt.logits(bad)
    s = rt.new_sampler(GREEDY)
    try:
        with pytest.raises(IndexError):
            rt.sample(s, 0)
    finally:
        rt.free_sampler(s)


def test_logits_views_follow_each_decode(rt):
    """The logits views are kept between decodes (by buffer address and row count): each decode's rows
    must still be that decode's, whatever the previous decode's output count was."""
    a, b = tok(rt, "The capital of France is"), tok(rt, "One, two, three,")
    rt.seq_rm(0)
    rt.seq_rm(1)
    rt.decode([BatchEntry(t, i, 0, i == len(a) - 1) for i, t in enumerate(a)]
              + [BatchEntry(t, i, 1, i == len(b) - 1) for i, t in enumerate(b)])
    both = rt.output_logits([len(a) - 1, len(a) + len(b) - 1]).copy()
    assert both.shape == (2, rt.meta.n_vocab) and not np.array_equal(both[0], both[1])
    assert np.array_equal(rt.logits(len(a) - 1), both[0])
    assert np.array_equal(rt.output_logits([len(a) + len(b) - 1])[0], both[1])
    for seq, toks, row in ((1, b, both[1]), (0, a, both[0])):  # one output now: the same rows come back
        prefill(rt, toks, seq)
        one = rt.output_logits([len(toks) - 1])
        assert one.shape == (1, rt.meta.n_vocab)
        np.testing.assert_allclose(one[0], row, rtol=0, atol=1e-3)
        assert np.array_equal(rt.logits(len(toks) - 1), one[0])


def test_greedy_continues_with_paris(rt):
    toks = tok(rt, "The capital of France is")
    s = rt.new_sampler(GREEDY)
    try:
        out = generate(rt, s, toks, 3)
    finally:
        rt.free_sampler(s)
    assert rt.vocab.piece(out[0]) == b" Paris"
    assert rt.vocab.detokenize(out).startswith(" Paris")
    # the greedy sample is the argmax of the logits
    last = prefill(rt, toks)
    assert int(np.argmax(rt.logits(last))) == out[0]


def test_sequences_are_independent(rt):
    toks = tok(rt, "The capital of France is")
    rt.seq_rm(0)
    rt.seq_rm(1)
    n = len(toks)
    rt.decode([BatchEntry(t, i, 0, i == n - 1) for i, t in enumerate(toks)]
              + [BatchEntry(t, i, 1, i == n - 1) for i, t in enumerate(toks)])
    a, b = rt.logits(n - 1).copy(), rt.logits(2 * n - 1).copy()
    assert np.allclose(a, b, atol=1e-3)
    rt.seq_rm(0)
    rt.seq_rm(1)


def test_seeded_sampling_is_reproducible(rt):
    toks = tok(rt, "Once upon a time")
    params = SamplingParams(temperature=1.0, seed=42)
    outs = []
    for _ in range(2):
        s = rt.new_sampler(params)
        try:
            outs.append(generate(rt, s, toks, 8))
        finally:
            rt.free_sampler(s)
    assert outs[0] == outs[1]


def test_logit_bias_forces_token(rt):
    toks = tok(rt, "The capital of France is")
    forced = tok(rt, " banana")[0]
    s = rt.new_sampler(SamplingParams(temperature=0.0, logit_bias=((forced, 100.0),)))
    try:
        idx = prefill(rt, toks)
        assert rt.sample(s, idx) == forced
    finally:
        rt.free_sampler(s)


@pytest.mark.parametrize("grammar", [
    'root ::= "unterminated',
    "root ::= undefined_rule",
    "not a grammar at all",
    'other ::= "x"',  # no root rule
])
def test_bad_grammar_raises_value_error(rt, grammar):
    with pytest.raises(ValueError):
        rt.new_sampler(SamplingParams(temperature=0.0, grammar=grammar))


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0, seed=7)])
def test_grammar_constrains_sample(rt, params):
    toks = tok(rt, "The capital of France is")
    s = rt.new_sampler(attrs_evolve(params, grammar='root ::= "yes" | "no"'))
    try:
        out = generate(rt, s, toks, 6, stop_ids=rt.meta.eog_ids)
    finally:
        rt.free_sampler(s)
    assert out[-1] in rt.meta.eog_ids  # grammar complete: only end-of-generation is allowed
    text = b"".join(rt.vocab.piece(t) for t in out[:-1]).decode()
    assert text in ("yes", "no")


def attrs_evolve(params, **kw):
    import attrs

    return attrs.evolve(params, **kw)


def test_flash_attn_modes() -> None:
    from skippy.engine.runtime.llama import LlamaRuntime

    with pytest.raises(ValueError, match="flash_attn"):
        LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, flash_attn="sometimes")
    on = LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, flash_attn="on")
    try:  # flash attention on gives the same greedy token as off
        prompt = on.vocab.tokenize("The capital of France is", add_special=True, parse_special=False)
        on.decode([BatchEntry(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
        assert on.vocab.detokenize([int(np.argmax(on.logits(len(prompt) - 1)))]).strip() == "Paris"
    finally:
        on.close()


# --- KV cache types, size and the unified cache --------------------------------------


def test_kv_cache_types_and_size() -> None:
    """The size matches what llama.cpp allocates for this model (30 layers, 3 KV heads of 64:
    a 192-value row per layer for K and for V): f16 2 bytes a value, q8_0 34 bytes per 32 values,
    q4_0 18 per 32 (llama.cpp's own log said 720.00 / 382.50 / 202.50 MiB at 2048 x 16 cells)."""
    from skippy.engine.runtime.llama import LlamaRuntime

    sizes = {}
    for kv_type in ("f16", "q8_0", "q4_0"):
        runtime = LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=2, type_k=kv_type, type_v=kv_type)
        try:
            kv = runtime.meta.kv_cache
            assert (kv.type_k, kv.type_v, kv.n_cells, kv.n_ctx_seq, kv.unified) == (kv_type, kv_type, 512, 256, False)
            sizes[kv_type] = kv.bytes
            assert kv.bytes_k == kv.bytes_v and kv.bytes_per_seq == kv.bytes / 2
            # a cache of the quantized type still decodes the same greedy token
            prompt = runtime.vocab.tokenize("The capital of France is", add_special=True, parse_special=False)
            runtime.decode([BatchEntry(t, i, 1, i == len(prompt) - 1) for i, t in enumerate(prompt)])
            assert runtime.vocab.detokenize([int(np.argmax(runtime.logits(len(prompt) - 1)))]).strip() == "Paris"
        finally:
            runtime.close()
    assert sizes == {"f16": 30 * 192 * 2 * 2 * 512, "q8_0": 30 * 192 // 32 * 34 * 2 * 512,
                     "q4_0": 30 * 192 // 32 * 18 * 2 * 512}


def test_bad_kv_cache_arguments_raise_before_loading() -> None:
    from skippy.engine.runtime.llama import LlamaRuntime

    with pytest.raises(ValueError, match="type_k"):
        LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, type_k="q2_k")
    with pytest.raises(ValueError, match="quantized V cache .*needs flash attention"):
        LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, type_v="q8_0", flash_attn="off")


def test_runtime_config_is_built_once_from_the_engine_settings() -> None:
    # every runtime option of EngineConfig reaches RuntimeConfig (load_runtime passes nothing else)
    from skippy.engine.config import EngineConfig
    from skippy.engine.runtime.llama import RuntimeConfig

    engine = EngineConfig(model="x.gguf", model_name="m", n_ctx=1024, parallel=3, n_batch=256, threads=2,
                          flash_attn="on", cache_type_k="q8_0", cache_type_v="q8_0", kv_unified=True, swa_full=True,
                          verbose=True, embeddings=True, pooling="mean", embeddings_batch=256, n_gpu_layers=0,
                          split_mode="none", main_gpu=1, tensor_split=(1.0, 2.0), device=("none",),
                          rpc=("127.0.0.1:50052",), backend_sampling=True)
    assert RuntimeConfig.from_engine_config(engine) == RuntimeConfig(
        n_ctx_seq=1024, n_seq_max=3, n_batch=256, n_threads=2, flash_attn="on", type_k="q8_0", type_v="q8_0",
        kv_unified=True, swa_full=True, name="m", verbose=True, embeddings=True, pooling="mean",
        embeddings_batch=256, n_gpu_layers=0, split_mode="none", main_gpu=1, tensor_split=[1.0, 2.0],
        devices=["none"], rpc=["127.0.0.1:50052"], backend_sampling=True)
    assert RuntimeConfig.from_engine_config(EngineConfig(model="x.gguf")).name is None  # the file name, then
    with pytest.raises(ValueError, match="pooling must be one of"):  # refused when made, before any load
        RuntimeConfig(pooling="median")


def test_prefix_copy_needs_a_unified_cache(rt):
    toks = tok(rt, "The capital of France is")
    prefill(rt, toks)
    rt.seq_rm(1)
    with pytest.raises(ValueError, match="unified"):
        rt.seq_cp(0, 1, 3)  # llama.cpp would abort on a partial copy between streams
    assert rt.seq_pos_max(1) == -1 and not rt.meta.kv_unified


@pytest.mark.parametrize("filler,host_kv", [(0, True), (300, True), (0, False)],
                         ids=["state-copy", "whole-stream", "offloaded-kv"])
def test_copy_between_streams_continues_as_the_source(filler, host_kv) -> None:
    """A copy between KV streams, by the source's state (a short source: its cells only) or by llama.cpp's
    whole-stream copy (a source using over STATE_COPY_FRACTION of the stream, or a KV cache on a device),
    then trimmed, continues exactly as the source did; a copy from a sequence whose own copy is still
    pending (applied in the next llama_decode) takes llama.cpp's queued copy too, and a state is not
    restored under one."""
    from skippy.engine.runtime.llama import STATE_COPY_FRACTION, LlamaRuntime

    runtime = LlamaRuntime(MODEL, n_ctx_seq=512, n_seq_max=4)
    try:
        if not host_kv:  # as when layers are offloaded (no device on this machine)
            runtime.meta = attrs.evolve(runtime.meta, devices={"offload": {"devices": ["CUDA0"]}})
        whole = filler or not host_kv
        head = [1000 + i % 300 for i in range(filler)]
        toks = head + tok(runtime, "The capital of France is Paris. The capital of Italy is")
        assert (len(toks) > STATE_COPY_FRACTION * 512) == bool(filler)
        n = len(toks) - 2
        runtime.decode([BatchEntry(t, i, 0, i == len(toks) - 1) for i, t in enumerate(toks)])
        cold = runtime.logits(len(toks) - 1).copy()
        state = runtime.state_seq_get_data(0)
        runtime.seq_cp(0, 1)
        assert (1 in runtime._copying) == bool(whole)  # whole-stream copies wait for the next decode
        runtime.seq_cp(1, 2)  # chained in the same step: from 1, whose data may not be there yet
        assert not runtime.state_seq_set_data(1, state) or not whole  # a pending copy would overwrite it
        if whole:
            runtime.seq_cp(0, 1)
        for seq in (0, 1, 2):  # the source trimmed too: the same two-token batch is the reference
            assert runtime.seq_pos_max(seq) == len(toks) - 1
            assert runtime.seq_rm(seq, n, -1)
        runtime.decode([BatchEntry(t, n + i, s, i == 1) for s in (0, 1, 2) for i, t in enumerate(toks[n:])])
        assert not runtime._copying
        ref = runtime.logits(1).copy()
        assert int(np.argmax(ref)) == int(np.argmax(cold))
        for row in (3, 5):
            assert np.allclose(runtime.logits(row), ref, atol=1e-4), row
        if not filler:
            assert runtime.vocab.detokenize([int(np.argmax(ref))]).strip() == "Rome"
    finally:
        runtime.close()


def test_unified_prefix_copy_shares_the_prefix() -> None:
    """A prefix copied into another sequence (shared cells) continues exactly as the source did,
    and every sequence still has n_ctx_seq positions of its own."""
    from skippy.engine.runtime.llama import LlamaRuntime

    runtime = LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=2, kv_unified=True)
    try:
        kv = runtime.meta.kv_cache
        assert runtime.meta.kv_unified and (kv.unified, kv.n_cells, runtime.meta.n_ctx_seq) == (True, 512, 256)
        toks = tok(runtime, "The capital of France is Paris. The capital of Italy is")
        n = len(toks) - 2
        runtime.decode([BatchEntry(t, i, 0, i == len(toks) - 1) for i, t in enumerate(toks)])
        cold = runtime.logits(len(toks) - 1).copy()
        runtime.seq_cp(0, 1, n)
        assert runtime.seq_pos_max(1) == n - 1
        runtime.decode([BatchEntry(t, n + i, 1, i == 1) for i, t in enumerate(toks[n:])])
        warm = runtime.logits(1)
        assert int(np.argmax(warm)) == int(np.argmax(cold))
        assert runtime.vocab.detokenize([int(np.argmax(warm))]).strip() == "Rome"
        with pytest.raises(ValueError, match="sequence context"):
            runtime.seq_cp(0, 1, 257)
        with pytest.raises(ValueError, match="position 256 outside"):  # per-sequence, though 512 cells
            runtime.decode([BatchEntry(1, 256, 1, True)])
    finally:
        runtime.close()
def test_the_warnings_of_readme_flags_are_said_once_in_our_words(caplog: pytest.LogCaptureFixture) -> None:
    """--kv-unified past the training context and --embeddings --pooling mean make llama.cpp warn ("possible
    training context overflow": it counts the shared buffer as one sequence; "model default pooling_type is
    [-1], but [1] was specified"): expected, so they log at DEBUG and the start-up lines say what they mean."""
    from skippy.engine.runtime.llama import LlamaRuntime

    caplog.set_level(logging.DEBUG, logger="skippy.runtime")
    runtime = LlamaRuntime(MODEL, n_ctx_seq=2304, n_seq_max=4, kv_unified=True, embeddings=True, pooling="mean",
                           embeddings_batch=256)  # 9216 cells, past the 8192 of training
    runtime.close()
    records = [r for r in caplog.records if r.name == "skippy.runtime"]
    assert not [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    expected = [r.getMessage() for r in records if r.levelno == logging.DEBUG and "(expected)" in r.getMessage()]
    assert any("possible training context overflow" in m for m in expected)
    assert any("model default pooling_type is" in m for m in expected)
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert any("KV cache: unified" in m and "each sequence stays within 2304" in m for m in info)
    assert any(m.startswith("embeddings: pooling mean (--pooling mean)") for m in info)


def test_a_genuine_llama_cpp_warning_stays_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    # outside the creation of a context that expects it (a unified buffer with each sequence inside the
    # training context), the same llama.cpp line keeps its level
    from skippy.engine.runtime import load

    caplog.set_level(logging.DEBUG, logger="skippy.runtime")
    line = "llama_context: n_ctx_seq (9216) > n_ctx_train (8192) -- possible training context overflow"
    load._llama_log(3, line.encode(), None)  # GGML_LOG_LEVEL_WARN
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, "llama.cpp: " + line)]


# --- llguidance constraints and end-of-generation control --------------------------

CHAT_2_2 = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


def constraint(**fields):
    from skippy.engine.protocols.openai.types import CompletionRequest
    from skippy.engine.sampling.constraints import constraint_from_request

    return constraint_from_request(CompletionRequest(prompt="x", **fields)).constraint


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.5, seed=3, top_k=0, min_p=0.0)])
@pytest.mark.parametrize("fields,check", [
    ({"guided_choice": ["red", "green", "blue"]}, lambda t: t in ("red", "green", "blue")),
    ({"guided_regex": "[0-9]{2}-[a-z]{3}"}, lambda t: len(t) == 6 and t[:2].isdigit() and t[2] == "-"),
    ({"json_schema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 9}},
                      "required": ["n"], "additionalProperties": False}},
     lambda t: __import__("json").loads(t)["n"] in range(5, 10)),
])
def test_constraint_masks_every_token_until_only_eog_is_left(rt, params, fields, check):
    s = rt.new_sampler(attrs_evolve(params, constraint=constraint(**fields)))
    try:
        out = generate(rt, s, tok(rt, "The capital of France is"), 40, stop_ids=rt.meta.eog_ids)
    finally:
        rt.free_sampler(s)
    assert out[-1] in rt.meta.eog_ids
    assert check(b"".join(rt.vocab.piece(t) for t in out[:-1]).decode())


def test_vocab_check_names_what_llguidance_refuses(rt):
    assert rt.vocab.check_constraint(constraint(guided_regex="[a-z]+").grammar) == ""
    assert "look-around" in rt.vocab.check_constraint(constraint(guided_regex="(?=a)b").grammar)
    with pytest.raises(ValueError):
        rt.new_sampler(attrs_evolve(GREEDY, constraint=constraint(guided_regex="(?=a)b")))


def test_ignore_eos_and_min_tokens_suppress_end_of_generation(rt):
    prompt = tok(rt, CHAT_2_2)
    plain = rt.new_sampler(GREEDY)
    try:
        out = generate(rt, plain, prompt, 40, stop_ids=rt.meta.eog_ids)
    finally:
        rt.free_sampler(plain)
    assert out[-1] in rt.meta.eog_ids and len(out) < 20
    n = len(out) - 1
    for params in (attrs_evolve(GREEDY, ignore_eos=True), attrs_evolve(GREEDY, min_tokens=n + 5)):
        s = rt.new_sampler(params)
        try:
            longer = generate(rt, s, prompt, n + 5, stop_ids=rt.meta.eog_ids)
        finally:
            rt.free_sampler(s)
        assert not set(longer) & rt.meta.eog_ids
        assert longer[:n] == out[:n]
    # min_tokens keeps stop_token_ids out too; past it they are sampled again
    stop = out[2]
    s = rt.new_sampler(attrs_evolve(GREEDY, min_tokens=3, stop_token_ids=frozenset({stop})))
    try:
        got = generate(rt, s, prompt, 6)
    finally:
        rt.free_sampler(s)
    assert stop not in got[:3] and got[:2] == out[:2]


def test_a_finished_constraint_ends_even_with_ignore_eos(rt):
    s = rt.new_sampler(attrs_evolve(GREEDY, ignore_eos=True, constraint=constraint(guided_choice=["yes", "no"])))
    try:
        out = generate(rt, s, tok(rt, "The capital of France is"), 10, stop_ids=rt.meta.eog_ids)
    finally:
        rt.free_sampler(s)
    assert out[-1] in rt.meta.eog_ids and len(out) <= 3


@pytest.mark.parametrize("extra", [
    {"mirostat": 1}, {"mirostat": 2}, {"typical_p": 0.5}, {"xtc_probability": 1.0, "xtc_threshold": 0.05},
    {"top_n_sigma": 1.0}, {"dynatemp_range": 0.5}, {"dry_multiplier": 1.0, "dry_penalty_last_n": 64},
])
def test_every_extended_sampler_builds_and_samples(rt, extra):
    s = rt.new_sampler(SamplingParams(temperature=0.9, seed=5, **extra))
    try:
        out = generate(rt, s, tok(rt, "The capital of France is"), 8, stop_ids=rt.meta.eog_ids)
    finally:
        rt.free_sampler(s)
    assert out and all(0 <= t < rt.meta.n_vocab for t in out)


@pytest.mark.parametrize("extra", [
    {"mirostat": 2}, {"typical_p": 0.5}, {"xtc_probability": 1.0, "xtc_threshold": 0.05},
    {"top_n_sigma": 1.0}, {"dynatemp_range": 0.5}, {"dry_multiplier": 1.0, "dry_penalty_last_n": 64},
])
def test_sampling_with_the_distribution_picks_the_tokens_llama_cpp_samples(rt, extra):
    """``sample_probs`` applies llama.cpp's chain to the runtime's own candidate array (as a grammar, a
    constraint or suppression do), ``sample`` calls ``llama_sampler_sample``: the same tokens. XTC moves the
    array's data pointer past the candidates it drops; the token was read from the array's start (a dropped
    one, the very token XTC excludes)."""
    prompt = tok(rt, "The capital of France is")
    runs = []
    for probs in (False, True):
        s = rt.new_sampler(SamplingParams(temperature=0.9, seed=5, **extra))
        idx, pos, out = prefill(rt, prompt), len(prompt), []
        try:
            for _ in range(8):
                t = rt.sample_probs(s, idx)[0] if probs else rt.sample(s, idx)
                out.append(t)
                rt.decode([BatchEntry(t, pos, 0, True)])
                pos, idx = pos + 1, 0
        finally:
            rt.free_sampler(s)
        runs.append(out)
    assert runs[0] == runs[1]


def test_dry_changes_a_repetitive_greedy_continuation(rt):
    prompt = tok(rt, "The capital of France is")
    outs = []
    for params in (GREEDY, attrs_evolve(GREEDY, dry_multiplier=2.0, dry_penalty_last_n=512)):
        s = rt.new_sampler(params)
        try:
            outs.append(generate(rt, s, prompt, 40, stop_ids=rt.meta.eog_ids))
        finally:
            rt.free_sampler(s)
    assert outs[0] != outs[1]


# --- a chat format's control-token markers (llama-server's preserved_tokens) -------------------------


def test_preserved_pieces_keep_the_text_of_control_token_markers(rt):
    from skippy.engine.chat.formats import preserved_markers, preserved_pieces

    assert "<|tool_call_begin|>" in preserved_markers("kimi_k2") and "<|channel|>" in preserved_markers("gpt_oss")
    markers = ("<|im_start|>", "<|im_end|>", "<think>", "Paris", "<|no_such_marker|>")
    kept = preserved_pieces(markers, lambda m: tok(rt, m), rt.vocab.piece)
    # only the markers that are one control token (rendered as nothing by default) need their text kept
    assert kept == {tok(rt, "<|im_start|>")[0]: b"<|im_start|>", tok(rt, "<|im_end|>")[0]: b"<|im_end|>"}
    assert rt.vocab.piece(tok(rt, "<|im_start|>")[0]) == b""
    # generated text shows the marker only through the kept text
    ids = tok(rt, 'Hi<|im_start|>{"name": "f", "arguments": {}}')
    plain = b"".join(rt.vocab.piece(t) for t in ids).decode()
    kept_text = b"".join(kept.get(t) or rt.vocab.piece(t) for t in ids).decode()
    assert "<|im_start|>" not in plain and kept_text == 'Hi<|im_start|>{"name": "f", "arguments": {}}'


def test_backend_greedy_picks_the_argmax_and_can_be_reattached(rt):
    """llama.cpp's greedy sampler in the decode graph picks the argmax of the logits a detached decode gives; the
    other sequence of the batch, without one, gets its raw logits unchanged; detaching and attaching again works (a
    chain is initialized once, so each attachment takes a fresh one)."""
    assert rt.meta.backend_sampling
    prompts = [tok(rt, "The capital of France is"), tok(rt, "One, two, three,")]
    n0, n1 = len(prompts[0]), len(prompts[1])

    def both(attach: bool) -> tuple[np.ndarray, np.ndarray, int | None]:
        rt.set_backend_sampler(0, GREEDY if attach else None)
        rt.seq_rm(0)
        rt.seq_rm(1)
        rt.decode([BatchEntry(t, i, 0, i == n0 - 1) for i, t in enumerate(prompts[0])]
                  + [BatchEntry(t, i, 1, i == n1 - 1) for i, t in enumerate(prompts[1])])
        return rt.logits(n0 - 1).copy(), rt.logits(n0 + n1 - 1).copy(), rt.sampled_token(n0 - 1) if attach else None

    ref0, ref1, _ = both(False)
    for _ in range(2):
        _, row1, picked = both(True)
        assert picked == int(np.argmax(ref0)) and rt.vocab.piece(picked) == b" Paris"
        assert np.array_equal(row1, ref1)
        with pytest.raises(RuntimeError):
            rt.sampled_token(n0 + n1 - 1)  # seq 1 has no backend sampler
        assert rt.sampled_tokens([n0 - 1]) == [picked] and rt.sampled_tokens([]) == []
        with pytest.raises(RuntimeError, match=f"batch index {n0 + n1 - 1}"):
            rt.sampled_tokens([n0 - 1, n0 + n1 - 1])
        with pytest.raises(IndexError, match="batch index 0 has no logits"):
            rt.sampled_tokens([n0 - 1, 0])
        assert np.array_equal(both(False)[0], ref0)
    with pytest.raises(ValueError):
        rt.set_backend_sampler(rt.meta.n_seq_max, GREEDY)
    rt.seq_rm(0)
    rt.seq_rm(1)



@pytest.mark.parametrize("params", [
    SamplingParams(seed=7), SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0, seed=3),
    SamplingParams(temperature=0.7, seed=5, repeat_penalty=1.3),
    SamplingParams(temperature=0.0, repeat_penalty=1.3, frequency_penalty=0.5),
    SamplingParams(temperature=0.9, seed=9, logit_bias=((28, 5.0), (198, -2.0))),
    SamplingParams(temperature=1.0, top_k=100_000, top_p=0.9, seed=4),
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05, seed=6),
], ids=["default", "top_p", "penalty", "greedy-penalty", "bias", "top_k-past-the-vocabulary", "min_p-only"])
def test_a_sampled_chain_in_the_graph_gives_the_host_chains_tokens(rt, params):
    """A sampled or penalized chain attached to a sequence samples in the decode graph the tokens the host's
    vectorized chain (llama.cpp's, exactly) samples from the same seed: each token read advances its random
    stream and penalty window; beside it, a sequence without one samples on the host from its raw row."""
    from skippy.engine.sampling.vector import SeqSampler, sample_rows

    assert rt.meta.backend_sampled and SeqSampler(params).graph_exact
    prompt = tok(rt, "<|im_start|>user\nTell me a story about a dragon.<|im_end|>\n<|im_start|>assistant\n")
    n = len(prompt)

    def generate(backend: bool) -> tuple[list[int], list[int]]:
        rt.set_backend_sampler(0, params if backend else None)
        host = [SeqSampler(params, rt.meta.eog_ids), SeqSampler(params, rt.meta.eog_ids)]
        rt.seq_rm(0)
        rt.seq_rm(1)
        rt.decode([BatchEntry(t, i, s, i == n - 1) for s in (0, 1) for i, t in enumerate(prompt)])
        out: list[list[int]] = [[], []]
        at = [n - 1, 2 * n - 1]
        for k in range(24):
            t0 = rt.sampled_tokens([at[0]])[0] if backend else sample_rows(rt.logits(at[0])[None, :], host[:1])[0]
            t1 = sample_rows(rt.logits(at[1])[None, :], host[1:])[0]
            out[0].append(t0)
            out[1].append(t1)
            rt.decode([BatchEntry(t0, n + k, 0, True), BatchEntry(t1, n + k, 1, True)])
            at = [0, 1]
        rt.set_backend_sampler(0, None)
        return out[0], out[1]

    got, beside = generate(True)
    ref, _ = generate(False)
    assert got == ref and beside == ref
    assert len(set(got)) > 4  # a story, not one token over and over
    rt.seq_rm(0)
    rt.seq_rm(1)


def test_a_constraint_after_reasoning_compiles_for_the_vocabulary_and_holds_after_the_tag(rt):
    """The answer's constraint behind a thinking block's closing tag, in the model's own tokens: a text tag
    (SmolLM2 has no ``</think>`` token: the tag may be cut anywhere, ``>\\n\\n`` one token) and a special token
    (``<|im_start|>`` here, as ``</think>`` is one in Qwen's vocabulary), which no text matches."""
    from llguidance import LLMatcher

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    c = attrs.evolve(constraint(json_schema=schema), think_close="</think>")
    special = tok(rt, "<|im_start|>")
    assert len(special) == 1

    def valid(grammar: str, tokens: list[int]) -> int:
        return LLMatcher(rt.vocab.lltokenizer(), grammar, log_level=0).validate_tokens(tokens)

    for close, tag in (("</think>", tok(rt, "</think>")), ("<|im_start|>", special)):
        g = c.after((close,) if len(tag) > 1 else tuple(tag)).grammar
        assert rt.vocab.check_constraint(g) == ""
        head = tok(rt, "I think it is 7.") + tag
        good = head + tok(rt, '\n\n{"n": 7}')
        assert valid(g, good) == len(good)
        bad = head + tok(rt, "It is 7.")
        assert valid(g, bad) == len(head)
    merged = tok(rt, 'So 7.</think>\n\n{"n": 7}')  # the tokenizer's own cut of tag and whitespace
    assert valid(c.after(("</think>",)).grammar, merged) == len(merged)


# --- temperature 0 and below: llama.cpp's whole chain, then the highest logit left ------------------------


def _common_sampler_chain(rt, p: SamplingParams):
    """The chain llama.cpp's ``common_sampler_init`` builds for ``p`` (its default order, ``infill`` where
    llama-server's ``samplers`` puts it before temperature, ``temp_ext`` always, then ``dist``): the oracle."""
    import llama_cpp

    sp = llama_cpp.llama_sampler_chain_default_params()
    chain = llama_cpp.llama_sampler_chain_init(sp)
    add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731
    add(llama_cpp.llama_sampler_init_top_n_sigma(p.top_n_sigma))
    add(llama_cpp.llama_sampler_init_top_k(p.top_k))
    add(llama_cpp.llama_sampler_init_typical(p.typical_p, p.min_keep))
    add(llama_cpp.llama_sampler_init_top_p(p.top_p, p.min_keep))
    add(llama_cpp.llama_sampler_init_min_p(p.min_p, p.min_keep))
    if p.infill:
        add(llama_cpp.llama_sampler_init_infill(rt.vocab._vocab))
    add(llama_cpp.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed))
    add(llama_cpp.llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent))
    add(llama_cpp.llama_sampler_init_dist(p.seed))
    return chain


def _oracle_sample(rt, chain, logits) -> int:
    import ctypes

    import llama_cpp

    cand = np.zeros(len(logits), dtype=rt._cand.dtype)
    cand["id"], cand["logit"] = np.arange(len(logits)), logits
    cur = llama_cpp.llama_token_data_array(data=cand.ctypes.data_as(llama_cpp.llama_token_data_p),
                                           size=len(logits), selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
    token = int(cur.data[cur.selected].id)
    llama_cpp.llama_sampler_accept(chain, token)
    return token


@pytest.mark.parametrize("temperature", [0.0, -1.0])
@pytest.mark.parametrize("extra", [
    {"typical_p": 0.05}, {"typical_p": 0.3, "top_k": 0}, {"xtc_probability": 1.0, "xtc_threshold": 0.05},
    {"xtc_probability": 0.5, "xtc_threshold": 0.02}, {"infill": True}, {"dynatemp_range": 0.7},
    {"top_n_sigma": 0.5, "typical_p": 0.2},
])
def test_temperature_0_and_below_runs_llama_cpps_whole_chain(rt, temperature, extra):
    """llama-server's ``common_sampler`` runs every sampler before temperature, and a temperature of 0 or below
    then keeps only the highest logit left: a filter that can drop the highest one (typical_p, XTC, infill),
    or a dynamic temperature, changes the token. Each step matches llama.cpp's own chain on the same logits."""
    params = SamplingParams(temperature=temperature, seed=11, **extra)
    prompt = tok(rt, "The best fruit in the world is")
    s, oracle = rt.new_sampler(params), _common_sampler_chain(rt, params)
    idx, pos, got, want, plain = prefill(rt, prompt), len(prompt), [], [], []
    try:
        for _ in range(12):
            logits = np.array(rt.logits(idx), dtype=np.float32)
            want.append(_oracle_sample(rt, oracle, logits))
            plain.append(int(logits.argmax()))
            got.append(rt.sample(s, idx))
            rt.decode([BatchEntry(got[-1], pos, 0, True)])
            pos, idx = pos + 1, 0
    finally:
        rt.free_sampler(s)
        import llama_cpp

        llama_cpp.llama_sampler_free(oracle)
    assert got == want
    if "dynatemp_range" not in extra and extra.get("xtc_probability") != 0.5:
        assert got != plain  # the filter moved at least one step off the plain argmax


@pytest.mark.parametrize("extra", [{"top_k": 3}, {"top_p": 0.1}, {"min_p": 0.5}, {"top_n_sigma": 0.0}])
def test_filters_that_keep_the_highest_logit_leave_temperature_0_plain_greedy(rt, extra):
    """top_k, top_p, min_p and top_n_sigma always keep the highest logit: temperature 0 with them is the plain
    argmax (llama.cpp's chain gives the same token), so such requests keep the greedy fast paths."""
    params = SamplingParams(temperature=0.0, seed=11, **extra)
    assert params.greedy
    prompt = tok(rt, "The best fruit in the world is")
    oracle = _common_sampler_chain(rt, params)
    try:
        for logits in [np.array(rt.logits(prefill(rt, prompt)), dtype=np.float32)]:
            assert _oracle_sample(rt, oracle, logits) == int(logits.argmax())
    finally:
        import llama_cpp

        llama_cpp.llama_sampler_free(oracle)
