"""A real ``skippy serve`` started with llama-server's placement and memory flags (issue 41, part 2):
it answers ``/health``, ``/props`` shows the values as llama.cpp took them, ``-n`` bounds a request
without ``max_tokens``, ``-a`` names the model; on the tiny generated MoE GGUF, ``-ncmoe`` overrides the
expert tensors (llama.cpp's debug log line: on this CPU-only machine every buffer is a CPU one anyway)
and ``-ncmoe`` beyond the model's layers stops the start with a one-line error; ``--override-kv`` gives the
default model FIM tokens its GGUF lacks, so ``/infill`` answers 200 (400 without them: test_choices.py).
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from tests.support import FIM_KV, GEMMA, Server, gemma_path
from tests.tiny_models import ensure_tiny

FLAGS = ["-a", "my-model", "-n", "7", "-b", "256", "-ub", "128", "--no-mmap", "--mlock", "--no-repack", "--numa",
         "distribute",
         "--rope-scaling", "linear", "--rope-freq-scale", "1.0", "--reasoning-format", "none", "--cache-reuse", "256",
         "-cb", "-np", "2", "-c", "4096", "--jinja"]


@pytest.fixture(scope="module")
def flags_server(tmp_path_factory: pytest.TempPathFactory):
    with Server(FLAGS, tmp_path_factory.mktemp("llama-flags") / "server.log") as srv:
        yield srv


def test_a_guide_command_line_starts_and_props_shows_the_values(flags_server: Server) -> None:
    assert httpx.get(flags_server.base_url + "/health").status_code == 200
    props = httpx.get(flags_server.base_url + "/props").json()
    load = props["model_load"]
    assert {k: load[k] for k in ("n_batch", "n_ubatch", "load_mode", "mmap", "mlock", "repack", "numa",
                                 "rope_scaling", "rope_freq_scale")} == {
        "n_batch": 256, "n_ubatch": 128, "load_mode": "mlock", "mmap": False, "mlock": True, "repack": False,
        "numa": "distribute", "rope_scaling": "linear", "rope_freq_scale": 1.0}
    assert props["reasoning_format"] == "none" and props["cache_reuse"] == 256
    assert props["default_generation_settings"]["params"]["n_predict"] == 7
    assert props["n_ctx"] == 2048 and props["total_slots"] == 2
    assert "--cache-reuse" not in flags_server.log()  # applied: SmolLM2's KV shifts, one stream per slot


def test_n_predict_bounds_a_request_without_max_tokens_and_the_alias_answers(flags_server: Server) -> None:
    r = httpx.post(flags_server.base_url + "/v1/chat/completions", timeout=60, json={
        "model": "my-model", "temperature": 0, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Count from one to fifty in words."}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == 7 and body["choices"][0]["finish_reason"] == "length"
    assert "my-model" in [m["id"] for m in httpx.get(flags_server.base_url + "/v1/models").json()["data"]]


def test_n_cpu_moe_overrides_the_experts_of_a_moe_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = ensure_tiny("moe", tmp_path_factory.mktemp("tiny-moe"))
    log = tmp_path_factory.mktemp("moe-server") / "server.log"
    with Server(["-m", str(path), "-ncmoe", "1", "-ot", r"blk\.3\.ffn_up_exps=CPU", "--log-level", "debug",
                 "-np", "1", "--n-ctx", "256"], log) as srv:
        r = httpx.post(srv.base_url + "/v1/completions", timeout=60,
                       json={"prompt": "Hello", "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        text = srv.log()
    for name in ("blk.0.ffn_gate_exps", "blk.0.ffn_up_exps", "blk.0.ffn_down_exps", "blk.3.ffn_up_exps"):
        assert f"tensor {name}.weight" in text and f"{name}.weight (" in text
    overridden = [line for line in text.splitlines() if "buffer type overridden to CPU" in line]
    assert len(overridden) == 4, overridden


def test_n_cpu_moe_beyond_the_layers_stops_the_start(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = ensure_tiny("moe", tmp_path_factory.mktemp("tiny-moe-bad"))
    proc = subprocess.run([sys.executable, "-m", "skippy", "serve", "-m", str(path), "-ncmoe", "9", "--port", "0",
                           "-np", "1", "--n-ctx", "256"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "--n-cpu-moe 9: the model has only 4 layers" in proc.stdout + proc.stderr, proc.stderr[-2000:]


def test_cache_reuse_moves_a_cached_chunk_to_its_new_place_in_the_prompt(flags_server: Server) -> None:
    """--cache-reuse 256 (llama.vim's advice): a file seen again with a 300-token block removed near its start
    reuses the 300 tokens after it from the cache, shifted, instead of prefilling them again."""
    head, a, b = list(range(1000, 1100)), list(range(1100, 1400)), list(range(1400, 1700))
    tail = list(range(2000, 2020))

    def complete(prompt: list[int], n_predict: int) -> dict:
        r = httpx.post(flags_server.base_url + "/completion", timeout=120,
                       json={"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": True})
        assert r.status_code == 200, r.text
        return r.json()

    complete(head + a + b, 0)  # a warm-up: the whole file into a slot's KV cache
    moved = complete(head + b + tail, 4)
    assert moved["timings"]["cache_n"] == len(head) + len(b)  # the prefix, and b moved 300 positions down
    assert moved["timings"]["prompt_n"] == len(tail) and moved["tokens_predicted"] == 4


def test_a_moved_chunk_still_reads_as_the_text_it_holds(flags_server: Server) -> None:
    """The moved KV is the chunk's (its keys rotated to the new positions): the greedy continuation of a
    Python file with a function removed is the cold prefill's, chunk moved or not."""
    funcs = [f"def f{i}(x):\n    return x * {i} + {i * 7} - len(str(x)) // {i + 1}\n\n" for i in range(40)]
    head, removed, kept = "import math\n\n", "".join(funcs[:20]), "".join(funcs[20:]) + "def f40(x):\n    return"

    def tokens(text: str) -> list[int]:
        return httpx.post(flags_server.base_url + "/tokenize", json={"content": text}).json()["tokens"]

    def complete(prompt: list[int], n_predict: int, cache: bool) -> dict:
        r = httpx.post(flags_server.base_url + "/completion", timeout=120,
                       json={"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": cache})
        assert r.status_code == 200, r.text
        return r.json()

    h, r, k = tokens(head), tokens(removed), tokens(kept)
    assert len(r) > 256 and len(k) > 256
    cold = complete(h + k, 8, cache=False)
    complete(h + r + k, 0, cache=True)
    moved = complete(h + k, 8, cache=True)
    assert moved["timings"]["cache_n"] >= len(k) - 4  # the prefix and k (the token at the seam may differ)
    assert moved["content"] == cold["content"]


def test_override_kv_gives_the_model_the_fim_tokens_infill_needs(fim_server_process: Server, fim_server: str) -> None:
    r = httpx.post(fim_server + "/infill", timeout=60, json={
        "input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n", "n_predict": 4,
        "temperature": 0, "return_tokens": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens_predicted"] == len(body["tokens"]) > 0 and body["tokens_evaluated"] > 3
    r = httpx.post(fim_server + "/v1/completions", timeout=60, json={
        "prompt": "def add(a, b):", "suffix": "\n    return c", "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    props = httpx.get(fim_server + "/props").json()
    assert props["model_load"]["kv_overrides"] == list(FIM_KV)
    text = fim_server_process.log()
    assert "Traceback" not in text and "override" not in text.lower(), text[-3000:]  # no type warning either


#: three echoed, scored prompts in one request: more sequences than the server's two slots
SCORED = {"prompt": ["Old story sun night green king old old",
                     "The my sun river sun red a new weather sun weather moon your new night blue music our cat story "
                     "blue my city sun our sun",
                     "The music old red old your river dog the sun city green my sun city dog sun blue city weather "
                     "green green city"],
          "echo": True, "logprobs": 3, "seed": 823, "max_tokens": 16, "temperature": 0}


@pytest.mark.skipif(gemma_path() is None, reason=f"{GEMMA} is not in the model cache")
def test_no_repack_makes_a_seeded_request_repeat_with_more_sequences_than_slots(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Gemma 3 270M (Q4_K_M), two slots: with llama.cpp's repacked CPU kernels a sequence's logits depend on its
    place in a batch, and the prompts of this request swap slots from one request to the next (the prefix
    cache's LRU), so identical requests alternated between two sets of logprobs. With ``--no-repack`` (the
    weights as stored, llama-server's flag) every repeat is the same, bit for bit."""
    with Server(["--model", GEMMA, "-np", "2", "--n-ctx", "512", "--no-repack"],
                tmp_path_factory.mktemp("no-repack") / "server.log") as srv:
        assert httpx.get(srv.base_url + "/props").json()["model_load"]["repack"] is False
        seen = set()
        for _ in range(4):
            r = httpx.post(srv.base_url + "/v1/completions", json=SCORED, timeout=120)
            assert r.status_code == 200, r.text
            seen.add(repr([(c["text"], c["logprobs"]["token_logprobs"]) for c in r.json()["choices"]]))
        assert len(seen) == 1
