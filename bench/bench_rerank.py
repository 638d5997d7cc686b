"""Reranking benchmark: ``skippy serve --reranking`` (``POST /v1/rerank``) vs llama.cpp's rank pooling called
directly through llama-cpp-python's low-level API, in one run.

No reranker GGUF can be installed from the package registries, so the model is a random-weight
cross-encoder of ms-marco-MiniLM-L-6's size (llama.cpp's ``bert``: 384 wide, 6 blocks, 12 heads, 1536
feed-forward, a classification head; :func:`tests.tiny_models.write_tiny_reranker`): the scores mean
nothing, the cost per token is that model's. Each pair is a ~10-token query and a ~30-token document.

1. llama.cpp direct: the pairs packed into batches as the server's embedding context takes them (512 tokens,
   256 sequences; one ``llama_decode`` each, scores read with ``llama_get_embeddings_seq``), in-process.
2. skippy: ``POST /v1/rerank`` with DOCS documents per request, one request at a time (HTTP, JSON,
   tokenization in the tokenizer actor, the pairs queued with the decode scheduler).

Pairs/s, median of REPS runs of PAIRS pairs each. Run: ``python bench/bench_rerank.py [--reps N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import free_port  # noqa: E402
from tests.tiny_models import default_tokenizer_source, write_tiny_reranker  # noqa: E402

PAIRS = 256
DOCS = (1, 16, 64, 256)
QUERY = "Which animals live in the forests of South America?"
TEXTS = [f"Document {i}: a note about animal number {i} and where it lives, what it eats and how large it grows "
         f"in the wild, filed under topic {i % 17}." for i in range(PAIRS)]


def llama_cpp_direct(path: Path, reps: int) -> list[float]:
    """pairs/s of llama.cpp's rank pooling, the pairs packed into 512-token batches."""
    import llama_cpp

    model = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    vocab = llama_cpp.llama_model_get_vocab(model)

    def tokenize(text: str) -> list[int]:
        raw = text.encode()
        buf = (llama_cpp.llama_token * (len(raw) + 8))()
        return list(buf[:llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, False)])

    bos, eos, sep = llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab), llama_cpp.llama_vocab_sep(vocab)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 512
    params.n_seq_max, params.kv_unified, params.embeddings = 256, True, True
    params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_RANK
    params.n_threads = params.n_threads_batch = os.cpu_count() or 1
    ctx = llama_cpp.llama_init_from_model(model, params)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    mem = llama_cpp.llama_get_memory(ctx)
    rates = []
    for _ in range(reps + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        query = tokenize(QUERY)
        pairs = [[bos, *query, eos, sep, *tokenize(t), eos] for t in TEXTS]
        while pairs:
            k = seq = 0
            while pairs and k + len(pairs[0]) <= 512 and seq < 256:
                for pos, token in enumerate(pairs.pop(0)):
                    batch.token[k], batch.pos[k], batch.n_seq_id[k], batch.logits[k] = token, pos, 1, True
                    batch.seq_id[k][0] = seq
                    k += 1
                seq += 1
            batch.n_tokens = k
            if mem:
                llama_cpp.llama_memory_clear(mem, True)
            assert llama_cpp.llama_decode(ctx, batch) == 0
            _ = [llama_cpp.llama_get_embeddings_seq(ctx, s)[0] for s in range(seq)]
        rates.append(PAIRS / (time.perf_counter() - t0))
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return rates[1:]


def skippy_arm(path: Path, reps: int) -> dict[int, list[float]]:
    """pairs/s of ``POST /v1/rerank`` per documents-per-request, one request at a time."""
    port = free_port()
    with open(os.devnull, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "skippy", "serve", "--model", str(path), "--reranking",
                                 "--port", str(port), "--parallel", "1", "--n-ctx", "256"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        out: dict[int, list[float]] = {}
        with httpx.Client(timeout=300) as client:
            for docs in DOCS:
                rates = []
                for _ in range(reps + 1):
                    t0 = time.perf_counter()
                    for i in range(0, PAIRS, docs):
                        resp = client.post(url + "/v1/rerank", json={"query": QUERY, "documents": TEXTS[i:i + docs]})
                        assert resp.status_code == 200, resp.text
                    rates.append(PAIRS / (time.perf_counter() - t0))
                out[docs] = rates[1:]
        return out
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_reranker(Path(tmp) / "minilm-l6-size.gguf", default_tokenizer_source(), n_embd=384,
                                   n_layer=6, n_head=12, n_ff=1536)
        direct = llama_cpp_direct(path, args.reps)
        served = skippy_arm(path, args.reps)
    print(f"{'arm':<34}{'pairs/s (median)':>18}{'spread':>18}")
    print(f"{'llama.cpp direct, 512-token batches':<34}{st.median(direct):>18.0f}"
          f"{f'{min(direct):.0f}-{max(direct):.0f}':>18}")
    for docs, rates in served.items():
        label = f"skippy /v1/rerank, {docs} docs/request"
        print(f"{label:<34}{st.median(rates):>18.0f}{f'{min(rates):.0f}-{max(rates):.0f}':>18}")


if __name__ == "__main__":
    main()
