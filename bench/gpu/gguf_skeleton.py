"""A GGUF's skeleton (header and tensor table, no weights) and a model of the same shape rebuilt from it.

The benchmark models do not fit the 64 MiB that travels to the GPU machine (SmolLM2-135M Q4_1 is 98 MB,
Gemma 3 270M Q4_K_M 253 MB), but their headers do (1.8 and 6.5 MB before compression). ``skeleton``
keeps a GGUF's header verbatim (metadata: architecture, hyperparameters, tokenizer, chat template; and the
tensor infos: names, shapes, types, offsets) and a JSON table of its tensors; ``synth`` writes a GGUF of
exactly the same bytes layout, header and size, whose tensor data are seeded random values of each
tensor's own type:

- quantized blocks (Q8_0, Q4_1, Q5_0, Q4_K, Q6_K) get random quants and fixed small scales, so weights
  fall in about +-0.03 (no overflow in f16 on a GPU); F32/F16 tensors named ``*norm*`` are ones, others
  normal(0, 0.02);
- the rows of the control tokens (EOS, EOT, ChatML's and Gemma's turn markers...) in the output matrix
  (``output.weight``, else the tied ``token_embd.weight``) are zero, so their logit is exactly 0 while the
  largest of the others is well above it: greedy decoding never ends early, every request runs to
  ``max_tokens`` on both servers.

Same shapes and types mean the same kernels and the same speed as the real model; the text is nonsense,
so the GPU tests compare the GPU with the CPU on this model rather than with known answers.

    python bench/gpu/gguf_skeleton.py skeleton MODEL.gguf OUTDIR   # OUTDIR/MODEL.gguf.head.xz + .tensors.json
    python bench/gpu/gguf_skeleton.py synth OUTDIR/MODEL.gguf OUT.gguf [--seed 0]

``synth`` needs numpy only (no gguf-py): it runs on the GPU machine before anything else is installed.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
from pathlib import Path

import numpy as np

#: ggml type id -> (name, elements per block, bytes per block); ggml.h / ggml-common.h
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
         7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
         14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2)}
#: llama_token_type CONTROL (llama.h)
CONTROL = 3
#: texts llama.cpp takes for end-of-generation tokens even when the file does not type them CONTROL (llama-vocab.cpp)
EOG_TEXTS = {"</s>", "<eos>", "<|endoftext|>", "<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>",
             "<|end|>", "<|return|>", "<|call|>", "<EOT>", "<|end_of_text|>", "<end_of_utterance>"}
CHUNK_ROWS = 4096  # blocks are written in chunks, to keep memory small on large tensors


def skeleton(model: Path, outdir: Path) -> tuple[Path, Path]:
    """Write ``outdir/<name>.head.xz`` (the header, verbatim) and ``outdir/<name>.tensors.json``."""
    import gguf  # bundle time only (skippy depends on it)

    r = gguf.GGUFReader(model)
    raw = model.read_bytes()[: r.data_offset]
    fields = r.fields
    types = fields["tokenizer.ggml.token_type"].contents() if "tokenizer.ggml.token_type" in fields else []
    texts = fields["tokenizer.ggml.tokens"].contents() if "tokenizer.ggml.tokens" in fields else []
    control = sorted(i for i, t in enumerate(types) if t == CONTROL)
    control += [i for i, text in enumerate(texts) if text in EOG_TEXTS]
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        if key in fields:
            control.append(int(fields[key].contents()))
    tensors = []
    for t in r.tensors:
        if int(t.tensor_type) not in TYPES:
            raise SystemExit(f"{model}: tensor {t.name} has type {t.tensor_type.name}, which synth does not write")
        tensors.append({"name": t.name, "type": int(t.tensor_type), "shape": [int(x) for x in t.shape],
                        "offset": int(t.data_offset), "n_bytes": int(t.n_bytes)})
    outdir.mkdir(parents=True, exist_ok=True)
    head = outdir / f"{model.name}.head.xz"
    head.write_bytes(lzma.compress(raw, preset=9))
    table = outdir / f"{model.name}.tensors.json"
    table.write_text(json.dumps({"model": model.name, "size": model.stat().st_size, "data_offset": r.data_offset,
                                 "zero_rows": sorted(set(control)), "tensors": tensors}))
    return head, table


def _f16(x: float) -> np.ndarray:
    return np.array([x], dtype=np.float16).view(np.uint8)


def _blocks(type_id: int, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """``n_blocks`` random blocks of a quantized type, shape (n_blocks, bytes per block), uint8."""
    _, _, size = TYPES[type_id]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    name = TYPES[type_id][0]
    if name == "Q8_0":  # d, qs[32] int8: w = d * q
        b[:, 0:2] = _f16(0.03 / 127)
    elif name == "Q4_0":  # d, qs[16]: w = d * (q - 8)
        b[:, 0:2] = _f16(0.004)
    elif name == "Q4_1":  # d, m, qs[16]: w = d * q + m
        b[:, 0:2], b[:, 2:4] = _f16(0.004), _f16(-0.03)
    elif name == "Q5_0":  # d, qh[4], qs[16]: w = d * (q - 16)
        b[:, 0:2] = _f16(0.002)
    elif name == "Q5_1":  # d, m, qh[4], qs[16]: w = d * q + m
        b[:, 0:2], b[:, 2:4] = _f16(0.002), _f16(-0.03)
    elif name in ("Q4_K", "Q5_K"):  # d, dmin, scales[12] (6-bit), qs: w = d * sc * q - dmin * m
        b[:, 0:2], b[:, 2:4] = _f16(3e-5 if name == "Q4_K" else 1.5e-5), _f16(2e-4)
    elif name == "Q6_K":  # ql[128], qh[64], scales[16] int8, d: w = d * sc * (q - 32)
        b[:, 192:208] = (rng.integers(-16, 17, size=(n_blocks, 16), dtype=np.int8)).view(np.uint8)
        b[:, 208:210] = _f16(5e-5)
    else:
        raise ValueError(f"no block writer for {name}")
    return b


def _tensor_bytes(t: dict, rng: np.random.Generator, zero_rows: list[int], out_matrix: bool):
    """Yield the tensor's data in chunks of bytes."""
    name, block, size = TYPES[t["type"]]
    ne0 = t["shape"][0]
    n_rows = int(np.prod(t["shape"][1:])) if len(t["shape"]) > 1 else 1
    if block == 1:  # float types
        dtype = {"F32": np.float32, "F16": np.float16, "BF16": np.float32}[name]
        for r0 in range(0, n_rows, CHUNK_ROWS):
            rows = min(CHUNK_ROWS, n_rows - r0)
            if "norm" in t["name"]:
                a = np.ones((rows, ne0), dtype=np.float32)
            else:
                a = rng.normal(0.0, 0.02, size=(rows, ne0)).astype(np.float32)
            if out_matrix:
                for z in zero_rows:
                    if r0 <= z < r0 + rows:
                        a[z - r0] = 0
            if name == "BF16":
                yield (a.view(np.uint32) >> 16).astype(np.uint16).tobytes()
            else:
                yield a.astype(dtype).tobytes()
        return
    per_row = ne0 // block
    for r0 in range(0, n_rows, CHUNK_ROWS):
        rows = min(CHUNK_ROWS, n_rows - r0)
        b = _blocks(t["type"], rows * per_row, rng).reshape(rows, per_row * size)
        if out_matrix:
            for z in zero_rows:
                if r0 <= z < r0 + rows:
                    b[z - r0] = 0  # d = 0 (and dmin = 0): every weight of the row is 0
        yield b.tobytes()


def synth(prefix: Path, out: Path, seed: int = 0) -> Path:
    """Write ``out``: the header of ``<prefix>.head.xz`` and seeded random tensor data of the same layout."""
    table = json.loads(Path(f"{prefix}.tensors.json").read_text())
    head = lzma.decompress(Path(f"{prefix}.head.xz").read_bytes())
    assert len(head) == table["data_offset"], "header and tensor table do not match"
    names = {t["name"] for t in table["tensors"]}
    out_name = "output.weight" if "output.weight" in names else "token_embd.weight"
    rng = np.random.default_rng(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        f.write(head)
        for t in sorted(table["tensors"], key=lambda t: t["offset"]):
            f.seek(t["offset"])
            n = 0
            for chunk in _tensor_bytes(t, rng, table["zero_rows"], t["name"] == out_name):
                f.write(chunk)
                n += len(chunk)
            if n != t["n_bytes"]:
                raise RuntimeError(f"{t['name']}: wrote {n} bytes, the table says {t['n_bytes']}")
        f.truncate(table["size"])
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("skeleton", help="MODEL.gguf OUTDIR: the header and the tensor table")
    s.add_argument("model", type=Path)
    s.add_argument("outdir", type=Path)
    y = sub.add_parser("synth", help="PREFIX OUT.gguf: a model rebuilt from PREFIX.head.xz and PREFIX.tensors.json")
    y.add_argument("prefix", type=Path)
    y.add_argument("out", type=Path)
    y.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "skeleton":
        for p in skeleton(args.model, args.outdir):
            print(f"{p} ({p.stat().st_size / 2**20:.2f} MiB)")
    else:
        print(synth(args.prefix, args.out, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
