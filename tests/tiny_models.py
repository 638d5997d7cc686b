"""Tiny random-weight GGUFs of a recurrent (``mamba``) and a hybrid (``lfm2``) architecture (issue 21).

No small recurrent GGUF is available to the tests, so they are written here with the ``gguf``
package (llama.cpp's gguf-py): a few layers, a small embedding, random weights, and the vocabulary,
special tokens and ChatML template of the default model (SmolLM2-135M's GGUF, read with
``gguf.GGUFReader``), so the server renders and tokenizes chat requests as usual. Output quality is
irrelevant; what the tests compare is state equality (restored checkpoint against a cold prefill).

llama.cpp loads them as it would the real thing: ``llama_model_is_recurrent`` is true for
``mamba``, ``llama_model_is_hybrid`` for ``lfm2`` (short-convolution layers with a rolling state,
and attention layers with a KV cache).

Usage: ``python -m tests.tiny_models OUT_DIR`` writes ``tiny-mamba.gguf``, ``tiny-lfm2.gguf``, ``tiny-moe.gguf``,
``tiny-dense.gguf`` (:func:`write_tiny_dense`: a GPU-like step time on the CPU, for the benchmarks),
``tiny-mmproj-576.gguf``, ``tiny-qwen2vl.gguf`` with ``tiny-qwen2vl-mmproj.gguf``, ``tiny-qwen3vl.gguf`` with
``tiny-qwen3vl-mmproj.gguf`` and the rerankers; tests call :func:`ensure_tiny` / :func:`ensure_tiny_mmproj` /
:func:`ensure_tiny_qwen2vl` / :func:`ensure_tiny_qwen3vl` from a fixture.

:func:`write_tiny_mmproj` writes a tiny random-weight vision projector (``--mmproj``, libmtmd's
``clip`` GGUF: a llava-1.5-style CLIP ViT and MLP projector) that pairs with the real default model.
:func:`write_tiny_qwen2vl` and :func:`write_tiny_qwen2vl_mmproj` write a Qwen2-VL pair (M-RoPE text model and
its ``qwen2vl_merger`` projector), where an image of nx x ny embeddings takes max(nx, ny) positions;
:func:`write_tiny_qwen3vl` and :func:`write_tiny_qwen3vl_mmproj` a Qwen3-VL pair (interleaved M-RoPE, DeepStack:
an image embedding is wider than the text model, ``llama_model_n_embd_inp``; ``qwen3vl_merger``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

ARCHS = ("mamba", "lfm2")
N_EMBD = 64
N_LAYER = 4
N_CTX_TRAIN = 4096


def _tokenizer_fields(source: Path) -> list[tuple[str, object, object, object]]:
    """The ``tokenizer.*`` key-value pairs of ``source`` (a GGUF): (key, value, type, array item type)."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    out = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        out.append((key, field.contents(), vtype, sub))
    return out


def _finish(writer: Any, tmp: Path, path: Path) -> Path:
    """Write ``writer``'s GGUF to ``tmp``, then move it to ``path`` (a reader never sees a partial file)."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def _random(seed: int, scale: float = 0.08) -> tuple[Any, Any]:
    """``(w, ones)``: ``w(*shape, scale=scale)`` f32 normal weights drawn in call order from ``seed`` (numpy shapes
    are llama.cpp's ne reversed: ``(rows, cols)`` is ``{cols, rows}`` there), ``ones(n)`` a vector of ones."""
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = scale) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    return w, ones


def _open(path: Path, arch: str) -> tuple[Any, Path]:
    """A GGUF writer of ``arch`` into ``path``'s temporary sibling, which :func:`_finish` moves to ``path``."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    return gguf.GGUFWriter(str(tmp), arch), tmp


def _open_llama(path: Path, name: str, d: int, n_layer: int, n_ff: int, n_head: int, n_vocab: int) -> tuple[Any, Path]:
    """:func:`_open` for architecture ``llama`` with its hyperparameters written: width ``d``, ``n_layer`` layers,
    ``n_head`` query and KV heads, RoPE base 10000, f32 weights."""
    import gguf

    writer, tmp = _open(path, "llama")
    writer.add_name(name)
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(d)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(d // n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(n_vocab)
    return writer, tmp


def write_tiny(arch: str, path: Path, tokenizer_from: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight GGUF of ``arch`` (``mamba`` or ``lfm2``) to ``path``; returns ``path``.

    The vocabulary (tokens, merges, special tokens, chat template) is copied from ``tokenizer_from``.
    Weights are f32, drawn from a fixed ``seed``: the same call writes the same file.
    """
    import gguf

    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}")
    tok = _tokenizer_fields(tokenizer_from)
    n_vocab = next(len(v) for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    w, ones = _random(seed)

    writer, tmp = _open(path, arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(n_vocab)
    writer.add_tensor("token_embd.weight", w(n_vocab, N_EMBD, scale=0.5))
    if arch == "mamba":
        d_inner, d_state, d_conv, dt_rank = 2 * N_EMBD, 8, 4, 4
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_ssm_conv_kernel(d_conv)
        writer.add_ssm_inner_size(d_inner)
        writer.add_ssm_state_size(d_state)
        writer.add_ssm_time_step_rank(dt_rank)
        writer.add_tensor("output_norm.weight", ones(N_EMBD))
        for i in range(N_LAYER):
            p = f"blk.{i}."
            writer.add_tensor(p + "attn_norm.weight", ones(N_EMBD))
            writer.add_tensor(p + "ssm_in.weight", w(2 * d_inner, N_EMBD))
            writer.add_tensor(p + "ssm_conv1d.weight", w(d_inner, d_conv, scale=0.3))
            writer.add_tensor(p + "ssm_conv1d.bias", w(d_inner, scale=0.1))
            writer.add_tensor(p + "ssm_x.weight", w(dt_rank + 2 * d_state, d_inner))
            writer.add_tensor(p + "ssm_dt.weight", w(d_inner, dt_rank, scale=0.3))
            writer.add_tensor(p + "ssm_dt.bias", w(d_inner, scale=0.1) - 2.0)
            # A = -exp(A_log), as the converter stores it: negative, so the state decays
            writer.add_tensor(p + "ssm_a", -np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1)))
            writer.add_tensor(p + "ssm_d", ones(d_inner))
            writer.add_tensor(p + "ssm_out.weight", w(N_EMBD, d_inner))
    else:  # lfm2: layers 0 and 2 short convolution (recurrent state), 1 and 3 attention (KV cache)
        n_head, n_ff, l_cache = 4, 128, 3
        head_dim = N_EMBD // n_head
        kv_heads = [0 if i % 2 == 0 else n_head for i in range(N_LAYER)]
        writer.add_feed_forward_length(n_ff)
        writer.add_head_count(n_head)
        writer.add_head_count_kv(kv_heads)
        writer.add_rope_freq_base(10000.0)
        writer.add_shortconv_l_cache(l_cache)
        writer.add_tensor("token_embd_norm.weight", ones(N_EMBD))
        for i in range(N_LAYER):
            p = f"blk.{i}."
            writer.add_tensor(p + "attn_norm.weight", ones(N_EMBD))
            writer.add_tensor(p + "ffn_norm.weight", ones(N_EMBD))
            writer.add_tensor(p + "ffn_gate.weight", w(n_ff, N_EMBD))
            writer.add_tensor(p + "ffn_up.weight", w(n_ff, N_EMBD))
            writer.add_tensor(p + "ffn_down.weight", w(N_EMBD, n_ff))
            if kv_heads[i] == 0:
                writer.add_tensor(p + "shortconv.conv.weight", w(N_EMBD, l_cache, scale=0.3))
                writer.add_tensor(p + "shortconv.in_proj.weight", w(3 * N_EMBD, N_EMBD))
                writer.add_tensor(p + "shortconv.out_proj.weight", w(N_EMBD, N_EMBD))
            else:
                writer.add_tensor(p + "attn_q_norm.weight", ones(head_dim))
                writer.add_tensor(p + "attn_k_norm.weight", ones(head_dim))
                writer.add_tensor(p + "attn_q.weight", w(N_EMBD, N_EMBD))
                writer.add_tensor(p + "attn_k.weight", w(N_EMBD, N_EMBD))
                writer.add_tensor(p + "attn_v.weight", w(N_EMBD, N_EMBD))
                writer.add_tensor(p + "attn_output.weight", w(N_EMBD, N_EMBD))
    for key, value, vtype, sub in tok:
        writer.add_key_value(key, value, vtype, sub_type=sub)
    return _finish(writer, tmp, path)


N_EXPERT = 4


def write_tiny_moe(path: Path, tokenizer_from: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Mixture-of-Experts GGUF (architecture ``llama`` with ``llama.expert_count``
    4, 2 used per token, Mixtral's layout: ``blk.N.ffn_{gate,up,down}_exps`` and the router
    ``blk.N.ffn_gate_inp``) of :data:`N_LAYER` layers to ``path``; returns ``path``. Vocabulary as
    :func:`write_tiny`; f32 weights from a fixed ``seed``."""

    tok = _tokenizer_fields(tokenizer_from)
    n_vocab = next(len(v) for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    w, ones = _random(seed)
    n_head, n_ff = 4, 64

    writer, tmp = _open_llama(path, "tiny-moe", N_EMBD, N_LAYER, n_ff, n_head, n_vocab)
    writer.add_expert_count(N_EXPERT)
    writer.add_expert_used_count(2)
    writer.add_tensor("token_embd.weight", w(n_vocab, N_EMBD, scale=0.5))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", w(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(p + name + ".weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(p + "ffn_gate_inp.weight", w(N_EXPERT, N_EMBD))
        writer.add_tensor(p + "ffn_gate_exps.weight", w(N_EXPERT, n_ff, N_EMBD))
        writer.add_tensor(p + "ffn_up_exps.weight", w(N_EXPERT, n_ff, N_EMBD))
        writer.add_tensor(p + "ffn_down_exps.weight", w(N_EXPERT, N_EMBD, n_ff))
    for key, value, vtype, sub in tok:
        writer.add_key_value(key, value, vtype, sub_type=sub)
    return _finish(writer, tmp, path)


#: The dense model's width: small enough that a 64-sequence decode step takes a few milliseconds on 2 CPU cores.
DENSE_N_EMBD = 16


def write_tiny_dense(path: Path, tokenizer_from: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight dense ``llama`` GGUF to ``path`` (2 layers of width :data:`DENSE_N_EMBD`,
    2 heads, SwiGLU, an untied output); returns ``path``. Vocabulary as :func:`write_tiny`; f32 weights from
    a fixed ``seed``.

    A stand-in for a GPU's step time on the CPU: its decode is mostly the output projection and the logits
    (a 64-sequence step ~6 ms on 2 cores, against ~200 ms for SmolLM2-135M), so what a server adds per step
    and per token decides its throughput, as with a small model on a GPU (``bench/bench_burst.py --model``).
    The output rows of the special tokens (the first 17 ids of SmolLM2's vocabulary) are zero, so their logit is
    0 while the largest of the other ~49k is far above it: greedy generation never ends before ``max_tokens``.
    """

    tok = _tokenizer_fields(tokenizer_from)
    n_vocab = next(len(v) for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    w, ones = _random(seed)
    d, n_head, n_layer = DENSE_N_EMBD, 2, 2
    n_ff = 2 * d

    writer, tmp = _open_llama(path, "tiny-dense", d, n_layer, n_ff, n_head, n_vocab)
    writer.add_tensor("token_embd.weight", w(n_vocab, d, scale=0.5))
    writer.add_tensor("output_norm.weight", ones(d))
    output = w(n_vocab, d, scale=1.0)
    output[:17] = 0.0
    writer.add_tensor("output.weight", output)
    for i in range(n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(d))
        writer.add_tensor(p + "ffn_norm.weight", ones(d))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(p + name + ".weight", w(d, d))
        writer.add_tensor(p + "ffn_gate.weight", w(n_ff, d))
        writer.add_tensor(p + "ffn_up.weight", w(n_ff, d))
        writer.add_tensor(p + "ffn_down.weight", w(d, n_ff))
    for key, value, vtype, sub in tok:
        writer.add_key_value(key, value, vtype, sub_type=sub)
    return _finish(writer, tmp, path)


#: The tiny projector's vision tower (a CLIP ViT): :data:`MMPROJ_IMAGE_SIZE` pixels square in
#: patches of :data:`MMPROJ_PATCH_SIZE`, so every image is 16 embeddings (libmtmd resizes any image,
#: letterboxed, to the square: the llava-1.5 preprocessing when the GGUF lists no grid pinpoints).
MMPROJ_IMAGE_SIZE = 32
MMPROJ_PATCH_SIZE = 8
MMPROJ_N_EMBD = 32
MMPROJ_N_FF = 64
MMPROJ_N_HEAD = 2
MMPROJ_N_LAYER = 2
MMPROJ_IMAGE_TOKENS = (MMPROJ_IMAGE_SIZE // MMPROJ_PATCH_SIZE) ** 2
#: The default model's (SmolLM2-135M-Instruct) embedding width: the projector's output width.
DEFAULT_N_EMBD_TEXT = 576


def write_tiny_mmproj(path: Path, n_embd_text: int, seed: int = 0, *, image_size: int = MMPROJ_IMAGE_SIZE,
                      patch_size: int = MMPROJ_PATCH_SIZE, n_embd: int = MMPROJ_N_EMBD, n_ff: int = MMPROJ_N_FF,
                      n_head: int = MMPROJ_N_HEAD, n_layer: int = MMPROJ_N_LAYER) -> Path:
    """Write a tiny random-weight vision projector GGUF for a text model of embedding width ``n_embd_text``
    to ``path``; returns ``path``.

    The layout is llava-1.5's as libmtmd reads it (``tools/mtmd/clip.cpp``): architecture ``clip``,
    ``clip.projector_type`` ``mlp``, a CLIP ViT (``v.patch_embd`` convolution without bias,
    ``v.class_embd``, ``v.position_embd`` for the patches and the class token, ``v.pre_ln``,
    :data:`MMPROJ_N_LAYER` pre-norm blocks ``v.blk.N.{ln1,attn_q,attn_k,attn_v,attn_out,ln2,ffn_up,
    ffn_down}`` with biases, no ``v.post_ln``) and the projector ``mm.0`` -> GELU -> ``mm.2`` into
    ``n_embd_text``. As for llava, the embeddings come from the second-to-last block: libmtmd runs
    ``v.blk.0`` only (it still loads ``v.blk.1``). Weights are f32 from a fixed ``seed``, scaled small.
    The keyword arguments size the encoder (``bench/bench_images.py`` writes one of a real ViT-B/16's size:
    224 px, 16 px patches, 768 wide, 12 blocks, to cost what a real projector costs).
    """
    import gguf

    w, ones = _random(seed)
    d, p = n_embd, patch_size
    n_pos = (image_size // patch_size) ** 2 + 1  # the patches and the class token

    writer, tmp = _open(path, "clip")
    writer.add_name("tiny-mmproj")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_clip_has_vision_encoder(True)
    writer.add_clip_projector_type("mlp")
    writer.add_vision_image_size(image_size)
    writer.add_vision_patch_size(p)
    writer.add_vision_embedding_length(d)
    writer.add_vision_feed_forward_length(n_ff)
    writer.add_vision_projection_dim(n_embd_text)
    writer.add_vision_block_count(n_layer)
    writer.add_vision_head_count(n_head)
    writer.add_vision_attention_layernorm_eps(1e-5)
    writer.add_vision_image_mean([0.48145466, 0.4578275, 0.40821073])  # CLIP's
    writer.add_vision_image_std([0.26862954, 0.26130258, 0.27577711])
    # numpy shapes are ggml's ne reversed; the convolution kernel is ne {p, p, 3, d}
    writer.add_tensor("v.patch_embd.weight", w(d, 3, p, p, scale=0.05))
    writer.add_tensor("v.class_embd", w(d, scale=0.5))
    writer.add_tensor("v.position_embd.weight", w(n_pos, d, scale=0.5))
    writer.add_tensor("v.pre_ln.weight", ones(d))
    writer.add_tensor("v.pre_ln.bias", w(d, scale=0.02))
    for i in range(n_layer):
        b = f"v.blk.{i}."
        for norm in ("ln1", "ln2"):
            writer.add_tensor(b + norm + ".weight", ones(d))
            writer.add_tensor(b + norm + ".bias", w(d, scale=0.02))
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(b + name + ".weight", w(d, d, scale=0.15))
            writer.add_tensor(b + name + ".bias", w(d, scale=0.02))
        # ffn_down's ne[0] must be n_ff, not n_embd: libmtmd takes the other way round for an old
        # converter's swapped up/down and swaps them back
        writer.add_tensor(b + "ffn_up.weight", w(n_ff, d, scale=0.15))
        writer.add_tensor(b + "ffn_up.bias", w(n_ff, scale=0.02))
        writer.add_tensor(b + "ffn_down.weight", w(d, n_ff, scale=0.1))
        writer.add_tensor(b + "ffn_down.bias", w(d, scale=0.02))
    writer.add_tensor("mm.0.weight", w(n_embd_text, d, scale=0.15))
    writer.add_tensor("mm.0.bias", w(n_embd_text, scale=0.02))
    writer.add_tensor("mm.2.weight", w(n_embd_text, n_embd_text, scale=0.02))
    writer.add_tensor("mm.2.bias", w(n_embd_text, scale=0.02))
    return _finish(writer, tmp, path)


#: The tiny Qwen2-VL text model (:func:`write_tiny_qwen2vl`): llama.cpp's ``qwen2vl`` (Qwen2 with M-RoPE), 2 layers
#: of width :data:`N_EMBD`, 4 query heads and 2 KV heads of 16 dimensions.
QWEN2VL_N_LAYER = 2
QWEN2VL_N_HEAD = 4
QWEN2VL_N_HEAD_KV = 2
QWEN2VL_N_FF = 128
#: ``qwen2vl.rope.dimension_sections``: how the head's 8 rotary frequency pairs split between the temporal,
#: height and width positions (and a fourth, unused): Qwen2-VL's [16, 24, 24, 0] of 64 pairs scaled to 8.
QWEN2VL_ROPE_SECTIONS = (2, 3, 3, 0)
#: The tiny Qwen2-VL projector's vision tower (:func:`write_tiny_qwen2vl_mmproj`): Qwen2-VL's 14-pixel patches,
#: 2x2 of them merged into one embedding, so an image is resized (aspect kept) to multiples of 28 pixels, at least
#: 8 merged embeddings (libmtmd's minimum for Qwen2-VL: 32x32 becomes 84x84, 3x3), at most 4096.
QWEN2VL_MMPROJ_PATCH_SIZE = 14
QWEN2VL_MMPROJ_N_EMBD = 32
QWEN2VL_MMPROJ_N_FF = 128
QWEN2VL_MMPROJ_N_HEAD = 2
QWEN2VL_MMPROJ_N_LAYER = 2
#: The tiny Qwen3-VL text model (:func:`write_tiny_qwen3vl`): llama.cpp's ``qwen3vl``, 3 layers of width :data:`N_EMBD`
#: (heads as Qwen2-VL's), the first :data:`QWEN3VL_N_DEEPSTACK` of which add a DeepStack slice of the input: an
#: input embedding is ``N_EMBD * (1 + QWEN3VL_N_DEEPSTACK)`` wide (``llama_model_n_embd_inp``: 192, not 64).
QWEN3VL_N_LAYER = 3
QWEN3VL_N_DEEPSTACK = 2
#: ``qwen3vl.rope.dimension_sections``: the 8 frequency pairs interleaved t, h, w, t, h, w, t, h (IMROPE: pair i goes
#: to section i % 3 while it is below 3 x that section's count), Qwen3-VL's [24, 20, 20, 0] of 64 pairs scaled to 8.
QWEN3VL_ROPE_SECTIONS = (3, 3, 2, 0)
#: The tiny Qwen3-VL projector (:func:`write_tiny_qwen3vl_mmproj`): Qwen3-VL's 16-pixel patches, 2x2 merged (images
#: resized to multiples of 32 pixels, at least 8 merged embeddings), :data:`QWEN3VL_MMPROJ_N_LAYER` blocks, DeepStack
#: mergers after blocks :data:`QWEN3VL_MMPROJ_DEEPSTACK` (Qwen3-VL-2B's [5, 11, 17] of 24: each but the last), and
#: a learned position embedding of :data:`QWEN3VL_MMPROJ_POS_SIDE` squared patches (interpolated to other grids).
QWEN3VL_MMPROJ_PATCH_SIZE = 16
QWEN3VL_MMPROJ_N_LAYER = 3
QWEN3VL_MMPROJ_DEEPSTACK = (0, 1)
QWEN3VL_MMPROJ_POS_SIDE = 6


def write_tiny_qwen2vl(path: Path, tokenizer_from: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen2-VL text model GGUF to ``path``; returns ``path``.

    llama.cpp's ``qwen2vl`` architecture (``src/models/qwen2vl.cpp``): Qwen2's decoder (pre-norm RMSNorm,
    q/k/v projections with biases, no output bias, SwiGLU feed-forward), with M-RoPE
    (``LLAMA_ROPE_TYPE_MROPE``: each position has temporal, height and width parts, whose frequency split is
    ``qwen2vl.rope.dimension_sections`` :data:`QWEN2VL_ROPE_SECTIONS`), so libmtmd places an image's
    embeddings on a 2-D grid (``mtmd_decode_use_mrope``) and an image of nx x ny embeddings advances the
    position by max(nx, ny). :data:`QWEN2VL_N_LAYER` layers of width :data:`N_EMBD`, :data:`QWEN2VL_N_HEAD`
    query and :data:`QWEN2VL_N_HEAD_KV` KV heads, the output tied to the token embedding (as Qwen2-VL-2B).
    Vocabulary as :func:`write_tiny`; f32 weights from a fixed ``seed``: the same call writes the same file.
    :func:`write_tiny_qwen2vl_mmproj` writes its projector.
    """
    return _write_tiny_qwenvl_text("qwen2vl", path, tokenizer_from, seed, n_layer=QWEN2VL_N_LAYER,
                                   sections=QWEN2VL_ROPE_SECTIONS)


def write_tiny_qwen3vl(path: Path, tokenizer_from: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen3-VL text model GGUF to ``path``; returns ``path``.

    llama.cpp's ``qwen3vl`` architecture (``src/models/qwen3vl.cpp``): Qwen3's decoder (q/k/v projections
    without biases, RMSNorm of each head's q and k: ``attn_q_norm``, ``attn_k_norm``), with interleaved M-RoPE
    (``LLAMA_ROPE_TYPE_IMROPE``; frequency split :data:`QWEN3VL_ROPE_SECTIONS`) and DeepStack:
    ``qwen3vl.n_deepstack_layers`` :data:`QWEN3VL_N_DEEPSTACK` means an input embedding is
    ``n_embd * (1 + n_deepstack)`` wide (``llama_model_n_embd_inp``), the first ``n_embd`` the layer input
    and slice ``i + 1`` added to layer ``i``'s output (zeros for a text token; an image's deepstack features
    from :func:`write_tiny_qwen3vl_mmproj`'s mergers). :data:`QWEN3VL_N_LAYER` layers of width
    :data:`N_EMBD`, heads as :func:`write_tiny_qwen2vl`, the output tied to the token embedding (as
    Qwen3-VL-2B). Vocabulary as :func:`write_tiny`; f32 weights from a fixed ``seed``.
    """
    return _write_tiny_qwenvl_text("qwen3vl", path, tokenizer_from, seed, n_layer=QWEN3VL_N_LAYER,
                                   sections=QWEN3VL_ROPE_SECTIONS, n_deepstack=QWEN3VL_N_DEEPSTACK)


def _write_tiny_qwenvl_text(arch: str, path: Path, tokenizer_from: Path, seed: int, *, n_layer: int,
                            sections: tuple[int, int, int, int], n_deepstack: int = 0) -> Path:
    """:func:`write_tiny_qwen2vl` (``arch`` ``qwen2vl``: q/k/v biases) and :func:`write_tiny_qwen3vl`
    (``qwen3vl``: q/k norms, ``n_deepstack`` DeepStack layers)."""
    import gguf

    tok = _tokenizer_fields(tokenizer_from)
    n_vocab = next(len(v) for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    w, ones = _random(seed)
    d, head_dim = N_EMBD, N_EMBD // QWEN2VL_N_HEAD
    n_embd_kv = head_dim * QWEN2VL_N_HEAD_KV
    assert sum(sections) == head_dim // 2
    qwen3 = arch == "qwen3vl"

    writer, tmp = _open(path, arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(d)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(QWEN2VL_N_FF)
    writer.add_head_count(QWEN2VL_N_HEAD)
    writer.add_head_count_kv(QWEN2VL_N_HEAD_KV)
    writer.add_rope_freq_base(1000000.0)
    writer.add_rope_dimension_sections(list(sections))
    if qwen3:
        writer.add_num_deepstack_layers(n_deepstack)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(n_vocab)
    writer.add_tensor("token_embd.weight", w(n_vocab, d, scale=0.5))
    writer.add_tensor("output_norm.weight", ones(d))
    for i in range(n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(d))
        for name, rows in (("attn_q", d), ("attn_k", n_embd_kv), ("attn_v", n_embd_kv)):
            writer.add_tensor(p + name + ".weight", w(rows, d, scale=0.15))
            if not qwen3:
                writer.add_tensor(p + name + ".bias", w(rows, scale=0.02))
        if qwen3:
            writer.add_tensor(p + "attn_q_norm.weight", ones(head_dim))
            writer.add_tensor(p + "attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(p + "attn_output.weight", w(d, d))
        writer.add_tensor(p + "ffn_norm.weight", ones(d))
        writer.add_tensor(p + "ffn_gate.weight", w(QWEN2VL_N_FF, d))
        writer.add_tensor(p + "ffn_up.weight", w(QWEN2VL_N_FF, d))
        writer.add_tensor(p + "ffn_down.weight", w(d, QWEN2VL_N_FF))
    for key, value, vtype, sub in tok:
        writer.add_key_value(key, value, vtype, sub_type=sub)
    return _finish(writer, tmp, path)


def write_tiny_qwen2vl_mmproj(path: Path, n_embd_text: int, seed: int = 0, *,
                              patch_size: int = QWEN2VL_MMPROJ_PATCH_SIZE, n_embd: int = QWEN2VL_MMPROJ_N_EMBD,
                              n_ff: int = QWEN2VL_MMPROJ_N_FF, n_head: int = QWEN2VL_MMPROJ_N_HEAD,
                              n_layer: int = QWEN2VL_MMPROJ_N_LAYER) -> Path:
    """Write a tiny random-weight Qwen2-VL vision projector GGUF for a text model of embedding width
    ``n_embd_text`` (:func:`write_tiny_qwen2vl`'s: :data:`N_EMBD`) to ``path``; returns ``path``.

    The layout is what llama.cpp's converter writes for Qwen2-VL and libmtmd reads (``tools/mtmd/clip.cpp``,
    ``models/qwen2vl.cpp``): architecture ``clip``, ``clip.projector_type`` ``qwen2vl_merger``; the patch
    embedding is Qwen2-VL's temporal Conv3D split into two Conv2D kernels without bias (``v.patch_embd.weight``
    and ``v.patch_embd.weight.1``, both applied to a still image and summed); no class token, no position
    embedding (the blocks rotate q and k with 2-D M-RoPE over the patch grid); ``n_layer`` pre-norm blocks
    ``v.blk.N.{ln1,attn_q,attn_k,attn_v,attn_out,ln2,ffn_up,ffn_down}`` with biases (LayerNorm, quick GELU);
    the merger's LayerNorm ``v.post_ln``; then each 2x2 block of patches, concatenated (4 * ``n_embd``), goes
    through ``mm.0`` -> GELU -> ``mm.2`` into ``n_embd_text``. Image mean and std are Qwen2-VL's (CLIP's).
    libmtmd has no GGUF keys for Qwen2-VL's pixel limits: its defaults (8 to 4096 merged embeddings) apply,
    and the head size (``n_embd / n_head``) must be a multiple of 4 (four M-RoPE sections). Weights are f32
    from a fixed ``seed``.
    """
    return _write_tiny_qwenvl_mmproj("qwen2vl_merger", path, n_embd_text, seed, patch_size=patch_size,
                                     n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_layer=n_layer)


def write_tiny_qwen3vl_mmproj(path: Path, n_embd_text: int, seed: int = 0, *,
                              patch_size: int = QWEN3VL_MMPROJ_PATCH_SIZE, n_embd: int = QWEN2VL_MMPROJ_N_EMBD,
                              n_ff: int = QWEN2VL_MMPROJ_N_FF, n_head: int = QWEN2VL_MMPROJ_N_HEAD,
                              n_layer: int = QWEN3VL_MMPROJ_N_LAYER,
                              deepstack: tuple[int, ...] = QWEN3VL_MMPROJ_DEEPSTACK,
                              pos_side: int = QWEN3VL_MMPROJ_POS_SIDE) -> Path:
    """Write a tiny random-weight Qwen3-VL vision projector GGUF for a text model of embedding width
    ``n_embd_text`` (:func:`write_tiny_qwen3vl`'s: :data:`N_EMBD`) to ``path``; returns ``path``.

    The layout llama.cpp's converter writes for Qwen3-VL and libmtmd reads (``tools/mtmd/clip.cpp``,
    ``models/qwen3vl.cpp``): ``clip.projector_type`` ``qwen3vl_merger``, ``clip.use_gelu``; the temporal patch
    Conv3D as two Conv2D kernels as for Qwen2-VL, with a bias (``v.patch_embd.bias``); a learned position
    embedding ``v.position_embd.weight`` of ``pos_side`` x ``pos_side`` patches (``clip.vision.image_size`` is
    ``pos_side * patch_size``), bilinearly interpolated to the image's grid; ``n_layer`` pre-norm blocks with a
    fused ``attn_qkv`` (LayerNorms, GELU feed-forward, biases), rotating q and k with 2-D M-RoPE; after each block
    of ``deepstack`` a DeepStack merger ``v.deepstack.N.{norm,fc1,fc2}`` (LayerNorm over the 2x2 concatenated
    patches, fc1 -> GELU -> fc2 into ``n_embd_text``); the main merger ``v.post_ln`` then ``mm.0`` -> GELU ->
    ``mm.2``. The encoder's output per merged embedding is the main merger's ``n_embd_text`` then each DeepStack
    merger's: ``n_embd_text * (1 + len(deepstack))``, which must be the text model's ``llama_model_n_embd_inp``
    (so ``len(deepstack)`` its ``n_deepstack_layers``; else ``mtmd_init_from_file`` fails). libmtmd's graph needs
    the fused ``attn_qkv``, the patch bias and the position embedding (a square count), and counts the DeepStack
    mergers from their tensors (``clip.vision.is_deepstack_layers``, written as the converter does, is not read).
    Image mean and std are Qwen3-VL's (0.5). f32 weights from a fixed ``seed``.
    """
    return _write_tiny_qwenvl_mmproj("qwen3vl_merger", path, n_embd_text, seed, patch_size=patch_size,
                                     n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_layer=n_layer,
                                     deepstack=deepstack, pos_side=pos_side)


def _write_tiny_qwenvl_mmproj(projector: str, path: Path, n_embd_text: int, seed: int, *, patch_size: int,
                              n_embd: int, n_ff: int, n_head: int, n_layer: int, deepstack: tuple[int, ...] = (),
                              pos_side: int = 0) -> Path:
    """:func:`write_tiny_qwen2vl_mmproj` (``projector`` ``qwen2vl_merger``) and :func:`write_tiny_qwen3vl_mmproj`
    (``qwen3vl_merger``: patch bias, learned positions, fused qkv, ``deepstack`` mergers)."""
    import gguf

    if (n_embd // n_head) % 4:
        raise ValueError("the head size n_embd / n_head must be a multiple of 4 (M-RoPE sections)")
    qwen3 = projector == "qwen3vl_merger"
    if not all(0 <= i < n_layer for i in deepstack):
        raise ValueError("deepstack names blocks 0 .. n_layer - 1")
    w, ones = _random(seed)
    d, p, d_merged = n_embd, patch_size, 4 * n_embd

    writer, tmp = _open(path, "clip")
    writer.add_name(f"tiny-{projector.removesuffix('_merger')}-mmproj")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_clip_has_vision_encoder(True)
    writer.add_clip_projector_type(projector)
    # Qwen2-VL: the converter's default, unused by the dynamic resize; Qwen3-VL: the position embedding's side
    writer.add_vision_image_size(pos_side * p if qwen3 else 560)
    writer.add_vision_patch_size(p)
    writer.add_vision_embedding_length(d)
    writer.add_vision_feed_forward_length(n_ff)
    writer.add_vision_projection_dim(n_embd_text)
    writer.add_vision_block_count(n_layer)
    writer.add_vision_head_count(n_head)
    writer.add_vision_attention_layernorm_eps(1e-6)
    if qwen3:
        writer.add_vision_use_gelu(True)
        writer.add_vision_spatial_merge_size(2)
        writer.add_vision_is_deepstack_layers([i in deepstack for i in range(n_layer)])
        writer.add_vision_image_mean([0.5, 0.5, 0.5])
        writer.add_vision_image_std([0.5, 0.5, 0.5])
    else:
        writer.add_vision_image_mean([0.48145466, 0.4578275, 0.40821073])
        writer.add_vision_image_std([0.26862954, 0.26130258, 0.27577711])
    # numpy shapes are ggml's ne reversed; each convolution kernel is ne {p, p, 3, d}
    writer.add_tensor("v.patch_embd.weight", w(d, 3, p, p, scale=0.03))
    writer.add_tensor("v.patch_embd.weight.1", w(d, 3, p, p, scale=0.03))
    if qwen3:
        writer.add_tensor("v.patch_embd.bias", w(d, scale=0.02))
        writer.add_tensor("v.position_embd.weight", w(pos_side * pos_side, d, scale=0.5))
    for i in range(n_layer):
        b = f"v.blk.{i}."
        for norm in ("ln1", "ln2"):
            writer.add_tensor(b + norm + ".weight", ones(d))
            writer.add_tensor(b + norm + ".bias", w(d, scale=0.02))
        for name in ("attn_qkv",) if qwen3 else ("attn_q", "attn_k", "attn_v"):
            rows = 3 * d if qwen3 else d  # attn_qkv: q, k and v stacked
            writer.add_tensor(b + name + ".weight", w(rows, d, scale=0.15))
            writer.add_tensor(b + name + ".bias", w(rows, scale=0.02))
        writer.add_tensor(b + "attn_out.weight", w(d, d, scale=0.15))
        writer.add_tensor(b + "attn_out.bias", w(d, scale=0.02))
        # ffn_down's ne[0] must be n_ff, not n_embd (else libmtmd swaps up and down back, as for an old converter)
        writer.add_tensor(b + "ffn_up.weight", w(n_ff, d, scale=0.15))
        writer.add_tensor(b + "ffn_up.bias", w(n_ff, scale=0.02))
        writer.add_tensor(b + "ffn_down.weight", w(d, n_ff, scale=0.1))
        writer.add_tensor(b + "ffn_down.bias", w(d, scale=0.02))
        if i in deepstack:  # a merger of this block's output (2x2 patches concatenated) into the text width
            ds = f"v.deepstack.{i}."
            writer.add_tensor(ds + "norm.weight", ones(d_merged))
            writer.add_tensor(ds + "norm.bias", w(d_merged, scale=0.02))
            writer.add_tensor(ds + "fc1.weight", w(d_merged, d_merged, scale=0.1))
            writer.add_tensor(ds + "fc1.bias", w(d_merged, scale=0.02))
            writer.add_tensor(ds + "fc2.weight", w(n_embd_text, d_merged, scale=0.1))
            writer.add_tensor(ds + "fc2.bias", w(n_embd_text, scale=0.02))
    writer.add_tensor("v.post_ln.weight", ones(d))
    writer.add_tensor("v.post_ln.bias", w(d, scale=0.02))
    writer.add_tensor("mm.0.weight", w(d_merged, d_merged, scale=0.1))
    writer.add_tensor("mm.0.bias", w(d_merged, scale=0.02))
    writer.add_tensor("mm.2.weight", w(n_embd_text, d_merged, scale=0.1))
    writer.add_tensor("mm.2.bias", w(n_embd_text, scale=0.02))
    return _finish(writer, tmp, path)


#: The weights the test LoRA adapts (:func:`write_tiny_lora`): each layer's attention projections.
LORA_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output")


def write_tiny_lora(path: Path, base: Path, *, layers: tuple[int, ...] = (0, 1, 2), rank: int = 4,
                    alpha: float = 8.0, seed: int = 0, scale: float = 0.05, arch: str | None = None,
                    n_vocab: int | None = None) -> Path:
    """Write a random LoRA adapter GGUF for the model ``base`` (a GGUF) to ``path``; returns ``path``.

    The layout is what llama.cpp's ``convert_lora_to_gguf.py`` writes and ``llama-adapter.cpp`` reads:
    ``general.type`` ``adapter``, ``general.architecture`` the base's (``arch`` overrides it: an adapter for
    another architecture), ``adapter.type`` ``lora``, ``adapter.lora.alpha``, and for each adapted weight
    ``W`` of ggml shape ``ne = [n_in, n_out]`` (numpy ``(n_out, n_in)``) a pair ``W.lora_a`` of ne
    ``[n_in, rank]`` and ``W.lora_b`` of ne ``[rank, n_out]``, f32, so that llama.cpp computes
    ``W x + s * alpha / rank * B (A x)`` at adapter scale ``s``. The adapted weights are
    :data:`LORA_TARGETS` of ``layers``, with deltas drawn from ``seed`` (``scale``: their standard
    deviation). ``n_vocab`` adds a pair for ``token_embd.weight`` of that vocabulary (another model's,
    which llama.cpp refuses: ``tensor ... has incorrect shape``).
    """
    import gguf

    reader = gguf.GGUFReader(str(base))
    shapes = {t.name: [int(x) for x in t.shape] for t in reader.tensors}
    base_arch = reader.fields["general.architecture"].contents()
    rng = np.random.default_rng(seed)
    writer, tmp = _open(path, arch or base_arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_name(path.stem)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(alpha))
    if n_vocab is not None:  # token_embd's pair is transposed: A ne [rank, n_vocab], B [rank, n_embd]
        n_embd = shapes["token_embd.weight"][0]
        writer.add_tensor("token_embd.weight.lora_a", (rng.standard_normal((n_vocab, rank)) * scale).astype(np.float32))
        writer.add_tensor("token_embd.weight.lora_b", (rng.standard_normal((n_embd, rank)) * scale).astype(np.float32))
    for i in layers:
        for target in LORA_TARGETS:
            name = f"blk.{i}.{target}.weight"
            n_in, n_out = shapes[name]
            writer.add_tensor(name + ".lora_a", (rng.standard_normal((rank, n_in)) * scale).astype(np.float32))
            writer.add_tensor(name + ".lora_b", (rng.standard_normal((n_out, rank)) * scale).astype(np.float32))
    return _finish(writer, tmp, path)


def ensure_tiny_lora(directory: Path, name: str = "tiny-lora", **options: object) -> Path:
    """``directory/<name>.gguf``, a LoRA adapter for the default model (:func:`write_tiny_lora` with
    ``options``), written when it is not there yet."""
    path = directory / f"{name}.gguf"
    if not path.is_file():
        write_tiny_lora(path, default_tokenizer_source(), **options)  # type: ignore[arg-type]
    return path


#: The tiny reranker's encoder: :data:`RERANKER_N_LAYER` BERT blocks of width :data:`RERANKER_N_EMBD`, positions up
#: to :data:`RERANKER_N_CTX` (the embedding context's default batch, so one pair fills at most one batch).
RERANKER_N_EMBD = 64
RERANKER_N_LAYER = 2
RERANKER_N_CTX = 512
#: The rerank prompt template of :func:`write_tiny_reranker`'s ``template`` variant (llama.cpp's
#: ``tokenizer.chat_template.rerank``: ``{query}`` and ``{document}`` are replaced, special tokens parsed).
RERANKER_TEMPLATE = "<|im_start|>query\n{query}<|im_end|>\n<|im_start|>document\n{document}<|im_end|>"
#: Separator id of the tiny reranker's vocabulary (SmolLM2's ``<|endoftext|>``; BOS ``<|im_start|>`` is 1, EOS
#: ``<|im_end|>`` 2): the pair prompt is ``BOS query EOS SEP document EOS`` (llama.cpp's format_prompt_rerank).
RERANKER_SEP = 0


def write_tiny_reranker(path: Path, tokenizer_from: Path, seed: int = 0, *, template: bool = False,
                        n_embd: int = RERANKER_N_EMBD, n_layer: int = RERANKER_N_LAYER, n_head: int = 4,
                        n_ff: int = 2 * RERANKER_N_EMBD) -> Path:
    """Write a tiny random-weight cross-encoder (a reranker) GGUF to ``path``; returns ``path``.

    llama.cpp's ``bert`` architecture with a classification head and ``bert.pooling_type`` RANK, the layout
    of a converted bge-reranker / ms-marco cross-encoder: token, token-type and position embeddings, an
    embedding LayerNorm, :data:`RERANKER_N_LAYER` post-norm encoder blocks (q/k/v/output with biases,
    GELU feed-forward), then the head llama.cpp's rank pooling runs on the first token (``cls``: dense +
    tanh, ``cls.output``: one logit, the relevance score). The vocabulary is ``tokenizer_from``'s (as
    :func:`write_tiny`) with BOS, EOS and SEP added around a pair (:data:`RERANKER_SEP`); ``template``
    adds :data:`RERANKER_TEMPLATE` as ``tokenizer.chat_template.rerank``. f32 weights from a fixed ``seed``.
    ``n_embd``, ``n_layer``, ``n_head`` and ``n_ff`` size the encoder (``bench/bench_rerank.py`` writes one of
    ms-marco-MiniLM-L-6's size: 384 wide, 6 blocks, 12 heads, 1536 feed-forward, to cost what it costs).
    """
    import gguf

    skip = {"tokenizer.ggml.add_bos_token", "tokenizer.chat_template"}
    tok = [t for t in _tokenizer_fields(tokenizer_from) if t[0] not in skip]
    n_vocab = next(len(v) for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    w, ones = _random(seed, scale=0.1)
    d = n_embd

    writer, tmp = _open(path, "bert")
    writer.add_name("tiny-reranker")
    writer.add_context_length(RERANKER_N_CTX)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(n_ff)
    writer.add_block_count(n_layer)
    writer.add_head_count(n_head)
    writer.add_layer_norm_eps(1e-12)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(n_vocab)
    writer.add_token_type_count(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    writer.add_add_sep_token(True)
    writer.add_sep_token_id(RERANKER_SEP)
    if template:
        writer.add_chat_template([{"name": "rerank", "template": RERANKER_TEMPLATE}])
    writer.add_tensor("token_embd.weight", w(n_vocab, d, scale=0.5))
    writer.add_tensor("token_types.weight", w(2, d))
    writer.add_tensor("position_embd.weight", w(RERANKER_N_CTX, d))
    writer.add_tensor("token_embd_norm.weight", ones(d))
    writer.add_tensor("token_embd_norm.bias", w(d, scale=0.02))
    for i in range(n_layer):
        p = f"blk.{i}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(p + name + ".weight", w(d, d, scale=0.2))
            writer.add_tensor(p + name + ".bias", w(d, scale=0.02))
        for norm in ("attn_output_norm", "layer_output_norm"):
            writer.add_tensor(p + norm + ".weight", ones(d))
            writer.add_tensor(p + norm + ".bias", w(d, scale=0.02))
        writer.add_tensor(p + "ffn_up.weight", w(n_ff, d, scale=0.2))
        writer.add_tensor(p + "ffn_up.bias", w(n_ff, scale=0.02))
        writer.add_tensor(p + "ffn_down.weight", w(d, n_ff, scale=0.2))
        writer.add_tensor(p + "ffn_down.bias", w(d, scale=0.02))
    writer.add_tensor("cls.weight", w(d, d, scale=0.3))
    writer.add_tensor("cls.bias", w(d, scale=0.05))
    writer.add_tensor("cls.output.weight", w(1, d, scale=1.0))
    writer.add_tensor("cls.output.bias", w(1, scale=0.1))
    for key, value, vtype, sub in tok:
        writer.add_key_value(key, value, vtype, sub_type=sub)
    return _finish(writer, tmp, path)


def default_tokenizer_source() -> Path:
    """The default model's GGUF in the model cache (``skippy pull``), whose vocabulary the tiny models share."""
    from skippy.models import resolve_model

    return Path(resolve_model("SmolLM2-135M-Instruct"))


def ensure_tiny(arch: str, directory: Path) -> Path:
    """``directory/tiny-<arch>.gguf`` (``arch`` one of :data:`ARCHS`, ``moe`` or ``dense``), written when it is not
    there yet."""
    path = directory / f"tiny-{arch}.gguf"
    if not path.is_file() and arch in ("moe", "dense"):
        (write_tiny_moe if arch == "moe" else write_tiny_dense)(path, default_tokenizer_source())
    elif not path.is_file():
        write_tiny(arch, path, default_tokenizer_source())
    return path


def ensure_tiny_reranker(directory: Path, *, template: bool = False) -> Path:
    """``directory/tiny-reranker.gguf`` (``tiny-reranker-template.gguf`` with ``template``: the same weights with
    a rerank prompt template), written by :func:`write_tiny_reranker` when it is not there yet."""
    path = directory / f"tiny-reranker{'-template' if template else ''}.gguf"
    if not path.is_file():
        write_tiny_reranker(path, default_tokenizer_source(), template=template)
    return path


def ensure_tiny_mmproj(directory: Path) -> Path:
    """``directory/tiny-mmproj-<n>.gguf``, the tiny projector for the default model (embedding width
    :data:`DEFAULT_N_EMBD_TEXT`, SmolLM2-135M-Instruct's), written when it is not there yet."""
    path = directory / f"tiny-mmproj-{DEFAULT_N_EMBD_TEXT}.gguf"
    if not path.is_file():
        write_tiny_mmproj(path, DEFAULT_N_EMBD_TEXT)
    return path


def ensure_tiny_qwen2vl(directory: Path) -> tuple[Path, Path]:
    """``directory/tiny-qwen2vl.gguf`` and its projector ``directory/tiny-qwen2vl-mmproj.gguf``
    (:func:`write_tiny_qwen2vl`, :func:`write_tiny_qwen2vl_mmproj`), each written when it is not there yet:
    ``(model, mmproj)``."""
    return _ensure_pair(directory, "qwen2vl", write_tiny_qwen2vl, write_tiny_qwen2vl_mmproj)


def ensure_tiny_qwen3vl(directory: Path) -> tuple[Path, Path]:
    """``directory/tiny-qwen3vl.gguf`` and its projector ``directory/tiny-qwen3vl-mmproj.gguf``
    (:func:`write_tiny_qwen3vl`, :func:`write_tiny_qwen3vl_mmproj`), each written when it is not there yet:
    ``(model, mmproj)``."""
    return _ensure_pair(directory, "qwen3vl", write_tiny_qwen3vl, write_tiny_qwen3vl_mmproj)


def _ensure_pair(directory: Path, name: str, write_model: Any, write_mmproj: Any) -> tuple[Path, Path]:
    model = directory / f"tiny-{name}.gguf"
    mmproj = directory / f"tiny-{name}-mmproj.gguf"
    if not model.is_file():
        write_model(model, default_tokenizer_source())
    if not mmproj.is_file():
        write_mmproj(mmproj, N_EMBD)
    return model, mmproj


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for a in (*ARCHS, "moe", "dense"):
        print(ensure_tiny(a, out))
    print(ensure_tiny_mmproj(out))
    print(*ensure_tiny_qwen2vl(out), sep="\n")
    print(*ensure_tiny_qwen3vl(out), sep="\n")
    print(ensure_tiny_reranker(out))
    print(ensure_tiny_reranker(out, template=True))
