"""Image-input benchmark: do images slow the text streams beside them?

One ``skippy serve --mmproj P --parallel 16`` run on the default model (SmolLM2-135M) with a random-weight
projector of a real ViT-B/16's size (224 px, 16 px patches: 196 image tokens, 768 wide, 12 blocks,
~86M parameters, written by ``tests.tiny_models.write_tiny_mmproj``): its encoder costs what a real
one of that size costs, its output means nothing (the text is not judged). Two waves, alternated REPS
times:

- text: 8 streaming chats, greedy, ``ignore_eos``, MAX_TOKENS tokens each;
- mixed: the same 8 text streams, and 8 streams that each send a different image (a 320x240 PNG), started
  one every STAGGER seconds after the text streams began, so their encodes land while the text decodes.

The text streams' inter-token latency (ITL: gap between content chunks) p50 / p99 alone and beside the
images, the ratio (target: mixed p99 <= 2x alone), the image streams' TTFT p50 and the text waves' wall
time. Tables are printed; samples go to bench/out/images-<time>.json. Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.images import png_bytes  # noqa: E402
from tests.support import free_port  # noqa: E402
from tests.tiny_models import DEFAULT_N_EMBD_TEXT, write_tiny_mmproj  # noqa: E402

MAX_TOKENS, STREAMS, STAGGER = 64, 8, 0.15
QUESTIONS = ["Tell me about the sea.", "Describe a forest in spring.", "Explain how a bicycle works.",
             "Write about a city at night.", "Describe a mountain village.", "Tell me about rain.",
             "Explain what a library is for.", "Describe a summer market."]


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


async def stream(client: httpx.AsyncClient, content: object) -> tuple[float, list[float]]:
    """(TTFT s, gaps between content chunks s) of one streaming chat."""
    body = {"messages": [{"role": "user", "content": content}], "stream": True, "temperature": 0,
            "max_tokens": MAX_TOKENS, "ignore_eos": True}
    t0 = time.perf_counter()
    times: list[float] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                times.append(time.perf_counter())
    return (times[0] - t0 if times else float("nan")), [b - a for a, b in zip(times, times[1:], strict=False)]


async def wave(base_url: str, images: list[bytes]) -> dict[str, object]:
    gaps: list[float] = []
    image_ttft: list[float] = []
    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        async with trio.open_nursery() as nursery:
            async def text(q: str) -> None:
                _, g = await stream(client, q)
                gaps.extend(g)

            async def image(k: int, data: bytes) -> None:
                await trio.sleep(STAGGER * (k + 1))
                url = "data:image/png;base64," + base64.b64encode(data).decode()
                ttft, _ = await stream(client, [{"type": "image_url", "image_url": {"url": url}},
                                                {"type": "text", "text": "Describe the picture."}])
                image_ttft.append(ttft)

            for q in QUESTIONS[:STREAMS]:
                nursery.start_soon(text, q)
            for k, data in enumerate(images):
                nursery.start_soon(image, k, data)
    return {"gaps": gaps, "image_ttft": image_ttft, "wall": time.perf_counter() - t0}


def picture(k: int) -> bytes:
    return png_bytes(320, 240, lambda x, y: ((x * (k + 3)) % 256, (y * (k + 5)) % 256, (x + y + 40 * k) % 256))


async def run(base_url: str, reps: int) -> list[dict[str, object]]:
    out = []
    pictures = [picture(k) for k in range(STREAMS)]
    for rep in range(reps):
        for kind in ("text", "mixed"):
            # a fresh set of images each mixed wave (the prefix cache would otherwise skip the encoder)
            imgs = [picture(100 * rep + k) for k in range(STREAMS)] if kind == "mixed" and rep else (
                pictures if kind == "mixed" else [])
            w = await wave(base_url, imgs)
            gaps = w["gaps"]
            print(f"rep {rep + 1} {kind}: ITL p50 {percentile(gaps, 0.5) * 1e3:.1f} ms, "
                  f"p99 {percentile(gaps, 0.99) * 1e3:.1f} ms, wall {w['wall']:.1f} s" +
                  (f", image TTFT p50 {st.median(w['image_ttft']) * 1e3:.0f} ms" if w["image_ttft"] else ""),
                  flush=True)
            out.append({"rep": rep + 1, "kind": kind, **w})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="the tests' 32 px projector instead of a ViT-B/16-sized one")
    args = ap.parse_args()
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    mmproj = out_dir / ("tiny-mmproj.gguf" if args.tiny else "vitb16-mmproj.gguf")
    if not mmproj.is_file():
        print(f"writing {mmproj.name} ...", flush=True)
        sizes = {} if args.tiny else dict(image_size=224, patch_size=16, n_embd=768, n_ff=3072, n_head=12,
                                          n_layer=12)
        write_tiny_mmproj(mmproj, DEFAULT_N_EMBD_TEXT, **sizes)
    port = free_port()
    log = open(out_dir / "images-server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "skippy", "serve", "--mmproj", str(mmproj), "--port", str(port),
                               "--parallel", "16", "--n-ctx", "2048"], stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        results = trio.run(run, base_url, args.reps)
    finally:
        server.terminate()
        server.wait()
    alone = [g for r in results if r["kind"] == "text" for g in r["gaps"]]
    mixed = [g for r in results if r["kind"] == "mixed" for g in r["gaps"]]
    ttft = [t for r in results for t in r["image_ttft"]]
    p99a, p99m = percentile(alone, 0.99), percentile(mixed, 0.99)
    print(f"\nprojector: {mmproj.name}; {STREAMS} text streams x {MAX_TOKENS} tokens, {STREAMS} image streams\n")
    print("| measure | text alone | beside images | ratio | target |")
    print("|---|---:|---:|---:|---|")
    print(f"| text ITL p50 ms | {percentile(alone, 0.5) * 1e3:.1f} | {percentile(mixed, 0.5) * 1e3:.1f} | "
          f"{percentile(mixed, 0.5) / percentile(alone, 0.5):.2f} | |")
    print(f"| text ITL p99 ms | {p99a * 1e3:.1f} | {p99m * 1e3:.1f} | {p99m / p99a:.2f} | <= 2.0 |")
    print(f"| text ITL max ms | {max(alone) * 1e3:.1f} | {max(mixed) * 1e3:.1f} | | |")
    print(f"| image stream TTFT p50 ms | | {st.median(ttft) * 1e3:.0f} | | |")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out_dir / f"images-{stamp}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
