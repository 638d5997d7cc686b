"""KV cache types, sizes and the unified KV cache against the real server.

``--cache-type-k`` / ``--cache-type-v`` change the bytes ``/props`` and ``/metrics`` report
(and llama.cpp's own start-up line agrees); ``--kv-unified`` shares a cached prefix's cells
instead of copying the whole sequence, and must give the same greedy output as a cold run.
"""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from skippy.engine.scheduling.prefix import EXACT_TAIL
from tests.support import SYSTEM_LONG, Server, ask, read_metrics

QUESTIONS = ("Suggest a city to visit in Italy.", "Suggest a beach in Spain.")
#: the prefix test's prompts: the same prompt twice, then one sharing its long prefix
SYSTEM_PREFIX = {"role": "system", "content": SYSTEM_LONG + " (prefix test)"}
SAME = [SYSTEM_PREFIX, {"role": "user", "content": QUESTIONS[0]}]
OTHER = [SYSTEM_PREFIX, {"role": "user", "content": QUESTIONS[1]}]


# flash attention off: there the engine prefills a cached prompt's last two tokens again, so a cached
# answer equals a cold one (with flash attention it can part at a near-tie, README, Prefix cache)
KV_ARGS = ["--parallel", "4", "--n-ctx", "2048", "--flash-attn", "off"]


@pytest.fixture(scope="module", params=["per-sequence", "unified"])
def kv_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    # --cache-reuse is not applied with a unified cache (logged): the unified arm runs as without it
    extra = ["--kv-unified", "--cache-reuse", "256"] if request.param == "unified" else []
    with Server([*KV_ARGS, *extra], tmp_path_factory.mktemp(f"kv-{request.param}") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def per_sequence_cold_reply(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The unified arm's reference: the greedy reply to :data:`SAME` of a cold prefill (cache_prompt false)
    on a server of its own with one KV stream per sequence (the per-sequence arm checks its replies equal
    such a cold run), so the unified arm runs alone too (``-k unified``)."""
    with Server(KV_ARGS, tmp_path_factory.mktemp("kv-reference") / "server.log") as srv:
        return _content(ask(srv.base_url, SAME, 24, cache_prompt=False))


def _content(reply: dict) -> str:
    return reply["choices"][0]["message"]["content"]


def _cached(reply: dict) -> int:
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_prefix_reuse_greedy_output_equals_a_cold_run(kv_server: Server, request: pytest.FixtureRequest) -> None:
    """The same prompt twice, then a prompt sharing its long prefix, on a fresh server.

    The first request leaves its prompt resident in slot 0 and the others find free slots. With one
    stream per sequence both reuse slot 0 in place (a copy would move the whole stream): the same prompt
    keeps all of it, the other less, so the host prompt cache saves it first; with the unified cache
    each reuse copies the prefix alone into a free slot (shared cells). With one stream per sequence the greedy
    outputs equal a cold prefill (cache_prompt false; logits differ slightly with batch splits,
    the argmax agrees for these prompts, the ones of test_scheduler.py; see DESIGN.md). With the
    unified cache a sequence's logits also depend on where its cells sit in the shared buffer
    (measured: the same prompt prefilled into other cells moved the logits by up to 0.54, and a
    cold rerun after other requests diverged after 15 tokens), so a cold rerun there is not a
    reference; the unified server, fresh and given the same requests, must reply to the same prompt
    twice exactly as a cold run with one stream per sequence does (``per_sequence_cold_reply``, on a
    server of its own, so that this arm needs no other to have run). The prompt that shares only
    the prefix gets its suffix prefilled into other cells of the shared buffer than the per-sequence
    stream's, and with flash attention off that tips a near-tie in its answer; it is checked for
    its cache hit only.
    """
    props = httpx.get(kv_server.base_url + "/props").json()
    unified = props["kv_cache"]["unified"]
    replies = {"first": ask(kv_server.base_url, SAME, 24),
               "again": ask(kv_server.base_url, SAME, 24),  # the same prompt twice
               "shared": ask(kv_server.base_url, OTHER, 24)}  # a prompt sharing the long prefix
    first = replies["first"]
    assert _cached(first) == 0
    assert _cached(replies["again"]) == first["usage"]["prompt_tokens"] - EXACT_TAIL  # flash attention off
    assert _cached(replies["shared"]) >= 300
    metrics = read_metrics(kv_server.base_url)
    assert metrics["skippy:prefix_cache_hits_total"] == 2
    # with the unified cache the copies share the prefix's cells, which kv_cache_used_bytes
    # counts once per sequence (an upper bound there)
    tokens = metrics["llamacpp:kv_cache_tokens"]
    assert tokens >= (3 if unified else 1) * 300
    assert metrics["skippy:kv_cache_used_bytes"] == pytest.approx(tokens * props["kv_cache"]["bytes_per_token"])
    if not unified:
        for msgs, name in ((SAME, "first"), (SAME, "again"), (OTHER, "shared")):
            cold = ask(kv_server.base_url, msgs, 24, cache_prompt=False)
            assert _cached(cold) == 0
            assert _content(replies[name]) == _content(cold), name
    else:
        reference = request.getfixturevalue("per_sequence_cold_reply")
        assert {k: _content(replies[k]) for k in ("first", "again")} == {"first": reference, "again": reference}


@pytest.fixture(scope="module")
def q8_server(tmp_path_factory: pytest.TempPathFactory):
    # --log-level debug: llama.cpp's own start-up lines go to the log, to compare its KV size with ours
    with Server(["--parallel", "4", "--n-ctx", "2048", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
                 "--log-level", "debug"], tmp_path_factory.mktemp("kv-q8") / "server.log") as srv:
        yield srv


def test_cache_types_are_reported_in_props_and_metrics(kv_server: Server, q8_server: Server) -> None:
    f16 = httpx.get(kv_server.base_url + "/props").json()["kv_cache"]
    q8 = httpx.get(q8_server.base_url + "/props").json()["kv_cache"]
    assert (f16["type_k"], f16["type_v"], q8["type_k"], q8["type_v"]) == ("f16", "f16", "q8_0", "q8_0")
    assert f16["n_cells"] == q8["n_cells"] == 4 * 2048 and f16["n_ctx_seq"] == 2048
    assert q8["unified"] is False
    # q8_0 stores blocks of 32 values in 34 bytes (32 int8 + an f16 scale), f16 32 values in 64
    assert q8["bytes"] * 64 == f16["bytes"] * 34
    assert f16["bytes"] == f16["bytes_k"] + f16["bytes_v"] == f16["bytes_per_token"] * f16["n_cells"]
    for srv, kv in ((kv_server, f16), (q8_server, q8)):
        assert read_metrics(srv.base_url)["skippy:kv_cache_bytes"] == kv["bytes"]
    # the size is the one llama.cpp allocated (its start-up line, MiB with two decimals)
    m = re.search(r"llama_kv_cache: size = +([\d.]+) MiB .*K \(q8_0\): +([\d.]+) MiB, V \(q8_0\): +([\d.]+) MiB",
                  q8_server.log())
    assert m, "llama.cpp's KV size line is missing from the debug log"
    assert [float(x) for x in m.groups()] == [round(q8[k] / 2**20, 2) for k in ("bytes", "bytes_k", "bytes_v")]
    # and skippy's own start-up line says it too
    assert re.search(r"KV cache: one stream per sequence, K q8_0 \+ V q8_0, 8192 cells .*: "
                     rf"{q8['bytes'] / 2**20:.2f} MiB total, {q8['bytes'] / 4 / 2**20:.2f} MiB per sequence",
                     q8_server.log())
    # a quantized cache still answers
    reply = ask(q8_server.base_url, [{"role": "user", "content": "What is the capital of France?"}], 8)
    assert reply["usage"]["completion_tokens"] > 0


def test_a_quantized_v_cache_without_flash_attention_exits_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "skippy", "serve", "--port", "0", "--cache-type-v", "q8_0",
                           "--flash-attn", "off"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: --cache-type-v q8_0 (a quantized V cache) needs --flash-attn auto or on (llama.cpp refuses it "
        "without flash attention)"]


@pytest.mark.parametrize("cache_ram", ["8192", "0"])
def test_prompt_cache_restores_a_prompt_its_slot_no_longer_holds(cache_ram: str,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """llama-server's host-memory prompt cache (``--cache-ram``) on the real server, one slot: a's prompt is
    resident, b shares only the system prompt and takes the slot in place, a's state
    saved first, then a again is restored from
    host memory (all but the last EXACT_TAIL tokens cached) and answers as the first time. With ``--cache-ram 0``
    the third request finds only the system prompt. Flash attention is off: with it llama.cpp rounds a long
    prefill differently from a short tail, and this prompt's greedy answer parts at a near-tie after a
    restore as after any cached prefix (README, Prefix cache); off, the engine prefills the last two
    tokens again and a cached prompt answers as a cold one."""
    with Server(["--parallel", "1", "--n-ctx", "2048", "--cache-ram", cache_ram, "--flash-attn", "off"],
                tmp_path_factory.mktemp(f"prompt-cache-{cache_ram}") / "server.log") as srv:
        # b keeps the system prompt only, a small part of a
        system = {"role": "system", "content": "You are a meticulous travel assistant for the Northwind travel "
                                               "agency. (prompt cache test)"}
        a = [system, {"role": "user", "content": "My notes: " + "I like museums and quiet beaches. " * 30
                      + QUESTIONS[0]}]
        b = [system, {"role": "user", "content": QUESTIONS[1]}]
        first = ask(srv.base_url, a)
        shared = _cached(ask(srv.base_url, b))  # the system prompt and the chat template's head
        assert 0 < shared < first["usage"]["prompt_tokens"] - EXACT_TAIL
        again = ask(srv.base_url, a)
        after = read_metrics(srv.base_url)
        if cache_ram == "0":
            assert _cached(again) == shared and after["skippy:ctx_checkpoints"] == 0
            return
        assert _cached(again) == first["usage"]["prompt_tokens"] - EXACT_TAIL
        assert _content(again) == _content(first)
        assert after["skippy:ctx_checkpoints_restored_total"] == 1
        assert after["skippy:ctx_checkpoints"] >= 1 and after["skippy:ctx_checkpoint_bytes"] > 0


def test_props_shows_the_cache_reuse_applied(kv_server: Server) -> None:
    """``/props`` ``cache_reuse`` is the value in effect, as llama-server's params: with ``--kv-unified`` the
    server logs that ``--cache-reuse 256`` is not applied and shows 0 (it showed 256)."""
    props = httpx.get(kv_server.base_url + "/props", timeout=30).json()
    assert props["cache_reuse"] == 0
    if props["kv_cache"]["unified"]:
        assert "--cache-reuse 256 is not applied: with --kv-unified" in kv_server.log()
