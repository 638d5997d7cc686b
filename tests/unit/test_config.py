"""EngineConfig and ServerSettings validate every setting at construction (embedders too), also through evolve.

The ranges pinned here are the ones ``skippy serve`` enforced with click
before the settings were declared once; the CLI now derives its checks from
these same fields (tests/unit/test_cli.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import pytest

from skippy.engine.config import EngineConfig, check_embeddings_batch, setting_info
from skippy.http.settings import ServerSettings


class Policy:
    """A hook policy as the hooks guide defines one: an object with any of the hook methods."""

    async def on_finish(self, request, info):
        pass


POLICY = Policy()

# field -> (values refused, values accepted at the boundary, the range the message must name)
ENGINE = {
    "model": (["", None, 3], ["m.gguf", "SmolLM2-135M-Instruct"], None),
    "model_name": ([3, b"x"], [None, "smollm2"], None),
    "model_alias": ([("",), (" ",), (1,), 5], [(), ("gpt-4o", "local"), "one"], None),
    "n_ctx": ([15, 1, -1, 16.0, "4096", True], [0, 16, 1 << 20], None),  # 0: the training context
    "parallel": ([0, 257, -1, 8.0, True], [1, 256], "1<=x<=256"),
    "threads": ([0, -2, 1.5, "4"], [None, 1, 64], "x>=1"),
    "flash_attn": (["maybe", "ON", True, None, ""], ["on", "off", "auto"], "'on', 'off', 'auto'"),
    "cache_type_k": (["q2_k", "F16", None, 1], ["f16", "q8_0", "q4_0", "bf16", "f32"], "'f16', 'bf16'"),
    "cache_type_v": (["q2_k", "", None], ["f16", "q8_0", "q4_0", "bf16", "f32"], "'f16', 'bf16'"),
    "kv_unified": (["yes", 1, None], [True, False], None),
    "swa_full": (["yes", 1, None], [True, False], None),
    "n_gpu_layers": ([-2, 1.5, "99", True], [None, -1, 0, 999], "x>=-1"),
    "split_mode": (["tensor", "ROW", None], ["none", "layer", "row"], "'none', 'layer', 'row'"),
    "main_gpu": ([-1, 1.0, None], [0, 7], "x>=0"),
    "tensor_split": (["3,x", [1, -1], "0,0", [math.nan], 5], [None, (), "3,1", [1, 0.5], "1/2"], None),
    "device": (["none,CUDA0", ("none", "RPC0"), 123], [None, (), "none", "CUDA0,RPC1", ["Vulkan0"]], None),
    "rpc": (["localhost", "h:0", "h:x", ["::1:50052"], 5], [None, (), "127.0.0.1:50052,h:1", ["h:65535"]], None),
    "override_tensor": (["x", "=CPU", "a=", "blk.(=CPU", ["ok=CPU", "(=CPU"], 3],
                        [(), "a=CPU", "a=CPU,b=CUDA0", ["\\.ffn_.*_exps\\.=CPU"]], None),
    "override_kv": ([7, "x", "=int:1", "a=int:x", "a=bool:yes", "a=list:1", "a=int:1,", ["a=str:" + "x" * 128]],
                    [(), "a=int:-1", "a=bool:true,b=float:1e-5", ['"k=str:a,b"', "k=str:" + "x" * 127]], None),
    "cpu_moe": (["yes", 1, None], [True, False], None),
    "n_cpu_moe": ([-1, 1.5, "2", True], [0, 1, 999], "x>=0"),
    "mlock": (["yes", 1, None], [True, False], None),
    "mmap": (["no", 0, None], [True, False], None),
    "repack": (["no", 0, None], [True, False], None),
    "numa": (["on", "DISTRIBUTE", None], ["disabled", "distribute", "isolate", "numactl"], "'disabled', 'distribute'"),
    "rope_scaling": (["ntk", "YARN", None], ["model", "none", "linear", "yarn"], "'model', 'none'"),
    "rope_scale": ([-1, math.nan, math.inf, "4"], [0, 0.5, 4], "x>=0.0"),
    "rope_freq_base": ([-1.0, math.nan, "1e6"], [0, 1e6], "x>=0.0"),
    "rope_freq_scale": ([-0.5, math.inf, None], [0, 0.25], "x>=0.0"),
    "yarn_orig_ctx": ([-1, 1.5, "32768"], [0, 32768], "x>=0"),
    "yarn_ext_factor": ([-1.5, math.nan, "1"], [-1, 0.0, 1.0], "x>=-1.0"),
    "yarn_attn_factor": ([math.nan, math.inf, "1"], [-1, 1.0], None),
    "yarn_beta_slow": ([math.nan, None], [-1, 1.0], None),
    "yarn_beta_fast": ([math.inf, "32"], [-1, 32.0], None),
    "mmproj": ([3, b"x"], [None, "mmproj-model-f16.gguf"], None),
    "mmproj_offload": (["yes", 1, None], [True, False], None),
    "image_min_tokens": ([0, -1, 1.5, "8", True], [None, 1, 1024], "x>=1"),
    "image_max_tokens": ([0, -1, 1.5, "8", True], [None, 1, 4096], "x>=1"),
    "lora": ([[("a.gguf",)], [("", 1.0)], [("a.gguf", float("nan"))], "a.gguf", [(None, 1.0)]],
             [(), [("a.gguf", 1.0)], [("a.gguf", 1), ("b.gguf", -0.5)]], None),
    "lora_init_without_apply": (["yes", 1, None], [True, False], None),
    "allow_image_urls": (["yes", 1, None], [True, False], None),
    "allow_private_image_urls": (["no", 0, None], [True, False], None),
    "chat_template": ([b"{{ x }}", 1], [None, "", "{{ messages }}"], None),
    "n_batch": ([7, 0, 512.0], [8, 4096], None),  # with the default parallel=8: n_batch >= parallel
    "n_ubatch": ([0, 1.5, "512"], [None, 1, 4096], "x>=1"),
    "step_tokens": ([7, 513, 0], [8, 512], "8<=x<=512"),
    "max_queue": ([0, -1], [1, 10**6], "x>=1"),
    "chat_template_kwargs": ([[], None, {1: True}, "x"], [{}, {"enable_thinking": False}], None),
    "force_tool_emulation": (["yes", 1, None], [True, False], None),
    "prefix_cache": (["no", 0], [True, False], None),
    "ctx_checkpoints": ([-1, 1025, True, 2.0], [0, 1024], "0<=x<=1024"),
    "cache_ram": ([-2, True, 2.0, "1"], [-1, 0, 1, 100000], "x>=-1"),
    "spec_ngram": ([-1, 17, True, 2.0], [0, 16], "0<=x<=16"),
    "scheduler_steps": ([0, 65, True, 2.0], [1, 64], "1<=x<=64"),
    "backend_sampling": (["yes", 1, None], [True, False], None),
    "reader_wait": (["yes", True, "AUTO", None], ["auto", "on", "off"], "'auto', 'on'"),
    "clamp_max_tokens": (["on", 1], [True, False], None),
    "n_predict": ([-2, 1.5, "8", True], [-1, 0, 4096], "x>=-1"),
    # sampling defaults: None (unset) or a value in the range a request may send
    # llama-server's --temp takes any temperature: 0 or below is greedy
    "temperature": ([101.0, float("nan"), float("-inf"), "0.7", True], [None, -1.0, -0.1, 0, 0.7, 2.0], "x<=100.0"),
    "top_k": ([-1, 1.5, "40", True], [None, 0, 40], "x>=0"),
    "top_p": ([-0.1, 1.5, float("nan")], [None, 0.0, 0.95, 1], "0.0<=x<=1.0"),
    "min_p": ([-0.1, 1.1], [None, 0, 0.05], "0.0<=x<=1.0"),
    "typical_p": ([0.0, 1.1], [None, 0.5, 1.0], "0.0<x<=1.0"),
    "repeat_penalty": ([0.0, -1.0, 101.0], [None, 1.1], "0.0<x<=100.0"),
    "repeat_last_n": ([-2, 1.5], [None, -1, 0, 64], "-1<=x<=16777216"),
    "presence_penalty": ([-2.1, 2.1], [None, -2, 0.5, 2.0], "-2.0<=x<=2.0"),
    "frequency_penalty": ([-2.1, 2.1], [None, 0.5], "-2.0<=x<=2.0"),
    # llama-server's -s: std::stoul into a uint32_t seed (what a request's seed decodes to: an int64 or a uint64)
    "seed": ([1 << 64, -(1 << 63) - 1, 1.5, "42"], [None, -1, -5, 0, 42, 0xFFFFFFFF, 1 << 32],
             "-9223372036854775808<=x<=18446744073709551615"),
    "top_n_sigma": ([-1.5, 101.0], [None, -1, 1.0], "-1.0<=x<=100.0"),
    "xtc_probability": ([-0.1, 1.1], [None, 0, 0.5], "0.0<=x<=1.0"),
    "xtc_threshold": ([-0.1, 1.1], [None, 0.1], "0.0<=x<=1.0"),
    "dry_multiplier": ([-0.1, 101.0], [None, 0, 0.8], "0.0<=x<=100.0"),
    "dry_base": ([0.9, 101.0], [None, 1.75], "1.0<=x<=100.0"),
    "dry_allowed_length": ([-1, 1.5], [None, 0, 2], "0<=x<=1048576"),
    "dry_penalty_last_n": ([-2, 1.5], [None, -1, 0], "-1<=x<=16777216"),
    "dynatemp_range": ([-0.1, 101.0], [None, 0, 0.5], "0.0<=x<=100.0"),
    "dynatemp_exponent": ([-0.1, 101.0], [None, 1.0], "0.0<=x<=100.0"),
    "mirostat": ([-1, 3, 1.5], [None, 0, 1, 2], "0<=x<=2"),
    "mirostat_eta": ([0.0, 1.1], [None, 0.1], "0.0<x<=1.0"),
    "mirostat_tau": ([-0.1, 101.0], [None, 5.0], "0.0<=x<=100.0"),
    "reasoning_format": (["r1", "DeepSeek", None], ["auto", "none", "deepseek", "deepseek-legacy", "hidden"],
                         "'auto', 'none'"),
    "cache_reuse": ([-1, 1.5, "256"], [0, 256], "x>=0"),
    "reasoning_budget": ([-2, 1.5, "8", True], [-1, 0, 4096], "x>=-1"),
    "reasoning_budget_message": ([1, b"x"], [None, "", " Let me answer now."], None),
    "embeddings": (["on", 1, None], [True, False], None),
    "pooling": (["RANK", "MEAN", "", None], ["model", "mean", "cls", "last", "none", "rank"], "'model', 'mean'"),
    "reranking": (["on", 1, None], [True, False], None),
    "embeddings_batch": ([15, 65537, 512.0, True], [16, 256, 512, 768, 65536], "16<=x<=65536"),
    "hook_policy": (["", "pkg.mod", "pkg.mod:", ":make", "a:b:c", "m:not an id", 5, object(), True],
                    [None, "pkg.mod:factory", "m:Class.create", POLICY], None),
    "hook_url": ([1, b"http://x"], [None, "http://127.0.0.1:9/hook"], None),
    "hook_timeout": ([0, 0.0, -1, math.nan, math.inf, "2", True], [1e-9, 2.0, 3600], "x>0.0"),
    "hook_fail_closed": (["true", 1], [True, False], None),
    "hooks_default_on": (["true", 0], [True, False], None),
    "signal_window": ([0, 4097, 16.0], [1, 4096], "1<=x<=4096"),
    "high_entropy_threshold": ([-0.1, -1, math.nan, math.inf, "2"], [0, 0.0, 20.5], "x>=0.0"),
    "consult": ([("",), ("a b",), ("ftp://h",), ("http://",), (1,), 5],
                [(), ("gemma-3-270m",), "http://127.0.0.1:8080/v1", ("a", "https://h")], None),
    "consult_entropy": ([-0.1, math.nan, math.inf, "2"], [0, 2.0, 20.5], "x>=0.0"),
    "consult_margin": ([-0.1, math.nan, math.inf], [0, 0.5, 30], "x>=0.0"),
    "consult_timeout": ([0, -1, math.nan, math.inf, "10"], [1e-3, 10, 600.0], "x>0.0"),
    "consult_max_tokens": ([0, 8193, 2.0, True], [1, 200, 8192], "1<=x<=8192"),
    "consult_api_key": ([3, b"k"], [None, "sk-local"], None),
    "consult_max_chars": ([15, 65537, 512.0], [16, 512, 65536], "16<=x<=65536"),
    "verbose": (["yes"], [True, False], None),
}
SERVER = {
    "api_keys": ([("",), ("a b",), ("k\t",), (" ",), (1,)], [(), ("sk-1", "sk-2"), "sk-only"], None),
    "cors_origins": ([("",), (None,)], [(), ("*",), ("https://a.example",)], None),
    "max_body_bytes": ([1023, 0, -1, 4.0], [1024, 4 * 1024 * 1024], "x>=1024"),
    "max_messages": ([0, -1], [1, 2048], "x>=1"),
    "max_tools": ([-1, 1.0], [0, 128], "x>=0"),
    "max_chat_template_bytes": ([-1], [0, 128 * 1024], "x>=0"),
    "max_grammar_bytes": ([-1], [0, 128 * 1024], "x>=0"),
    "request_timeout": ([-0.5, math.nan, "600"], [0, 0.0, 600.0, math.inf], "x>=0.0"),
    "body_timeout": ([0, -1, math.nan, math.inf, "60"], [1e-3, 60, 3600.0], "x>0.0"),
    "shutdown_grace": ([-1, math.nan], [0.0, 30], "x>=0.0"),
    "metrics": (["off", 0], [True, False], None),
    "props": ([0, "no"], [True, False], None),
    "slots": (["on", 1], [True, False], None),
    "slot_save_path": ([1, b"dir"], [None, "/tmp/slots"], None),
    "ssl_key_file": ([1, b"key.pem"], [None, "key.pem"], None),
    "ssl_cert_file": ([1, b"cert.pem"], [None, "cert.pem"], None),
    "sse_ping_interval": ([-1, math.nan, math.inf, "15"], [0, 0.5, 15.0], "x>=0.0"),
    "strict_fields": (["yes", 1], [True, False], None),
    "responses_store": ([1, b"memory:"], [None, "memory:", "redis://127.0.0.1:6379/0"], None),
    "responses_store_size": ([-1, 1.5, "8"], [0, 1, 1024], "x>=0"),
    "responses_ttl": ([0, -1.0, math.nan, math.inf, "60"], [1, 0.5, 2592000.0], "x>0.0"),
    "webui": (["no", 0], [True, False], None),
}


def _settings(cls: type) -> list[str]:
    return [f.name for f in attrs.fields(cls) if setting_info(f) is not None]


def test_every_setting_has_a_validator_help_and_a_case_here() -> None:
    for cls, table in ((EngineConfig, ENGINE), (ServerSettings, SERVER)):
        assert _settings(cls) == list(table), cls  # a new setting needs its cases above
        for field in attrs.fields(cls):
            info = setting_info(field)
            if info is not None:
                assert field.validator is not None and info.help.strip(), field.name


def _build(cls: type, name: str, value: object):
    base = {"model": "m.gguf"} if cls is EngineConfig and name != "model" else {}
    return cls(**base, **{name: value})


@pytest.mark.parametrize("cls,table", [(EngineConfig, ENGINE), (ServerSettings, SERVER)], ids=["engine", "server"])
def test_bad_values_raise_naming_the_field_and_range(cls: type, table: dict) -> None:
    for name, (bad, good, rng) in table.items():
        for value in bad:
            with pytest.raises((TypeError, ValueError)) as info:
                _build(cls, name, value)
            message = str(info.value)
            if name not in ("api_keys",):  # the key check keeps its old CLI wording
                assert name in message, (name, value, message)
            if rng is not None:
                assert rng in message, (name, value, message)
        for value in good:
            _build(cls, name, value)  # the boundary passes


def test_defaults_are_valid_and_the_same_as_the_serve_flags_documented() -> None:
    c = EngineConfig(model="m.gguf")
    assert (c.n_ctx, c.parallel, c.threads, c.flash_attn, c.step_tokens, c.max_queue) == \
        (8192, 8, None, "auto", 256, 1024)
    assert (c.prefix_cache, c.clamp_max_tokens, c.force_tool_emulation, c.hooks_default_on) == \
        (True, True, False, False)
    assert (c.hook_timeout, c.signal_window, c.high_entropy_threshold, c.n_batch) == (2.0, 16, 2.0, 512)
    s = ServerSettings()
    assert (s.max_body_bytes, s.max_messages, s.max_tools) == (32 * 1024 * 1024, 2048, 128)
    assert (s.max_chat_template_bytes, s.max_grammar_bytes, s.request_timeout, s.shutdown_grace) == \
        (131072, 131072, 600.0, 30.0)
    assert (s.sse_ping_interval, s.strict_fields, c.model_alias) == (15.0, False, ())


def test_required_model_and_path_like() -> None:
    with pytest.raises(TypeError):
        EngineConfig()  # type: ignore[call-arg]
    assert EngineConfig(model=Path("/models/x.gguf")).model == "/models/x.gguf"


def test_evolve_keeps_validating() -> None:
    c = EngineConfig(model="m.gguf")
    assert attrs.evolve(c, parallel=256).parallel == 256
    for change in ({"parallel": 0}, {"n_ctx": -1}, {"flash_attn": "maybe"}, {"signal_window": 0},
                   {"hook_timeout": -1}):
        with pytest.raises(ValueError, match=next(iter(change))):
            attrs.evolve(c, **change)
    with pytest.raises(ValueError, match="max_body_bytes"):
        attrs.evolve(ServerSettings(), max_body_bytes=10)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.parallel = 0  # type: ignore[misc]


def test_a_quantized_v_cache_needs_flash_attention() -> None:
    for v in ("q8_0", "q4_0", "q5_1", "iq4_nl"):
        with pytest.raises(ValueError, match=f"cache_type_v {v} .*needs flash attention"):
            EngineConfig(model="m", cache_type_v=v, flash_attn="off")
        with pytest.raises(ValueError, match="needs flash attention"):
            attrs.evolve(EngineConfig(model="m", cache_type_v=v), flash_attn="off")
        for fa in ("auto", "on"):
            assert EngineConfig(model="m", cache_type_v=v, flash_attn=fa).cache_type_v == v
    for v in ("f16", "bf16", "f32"):  # unquantized V, and any K, work without flash attention
        EngineConfig(model="m", cache_type_k="q4_0", cache_type_v=v, flash_attn="off")


def test_reranking_is_rank_pooling_on_the_embedding_context() -> None:
    from skippy.engine.runtime.params import RuntimeConfig

    for pooling in ("model", "rank"):  # llama-server's --reranking: --embedding --pooling rank
        rt = RuntimeConfig.from_engine_config(EngineConfig(model="m", reranking=True, pooling=pooling))
        assert (rt.embeddings, rt.pooling) == (True, "rank")
    rt = RuntimeConfig.from_engine_config(EngineConfig(model="m", embeddings=True, pooling="mean"))
    assert (rt.embeddings, rt.pooling) == (True, "mean")
    for pooling in ("mean", "cls", "last", "none"):  # one embedding context pools one way
        with pytest.raises(ValueError, match=f"reranking needs rank pooling, but pooling is '{pooling}'"):
            EngineConfig(model="m", reranking=True, pooling=pooling)


def test_n_batch_must_hold_one_token_per_running_sequence() -> None:
    assert EngineConfig(model="m", parallel=256, n_batch=256).n_batch == 256
    with pytest.raises(ValueError, match=r"n_batch must be >= parallel \(256\)"):
        EngineConfig(model="m", parallel=256, n_batch=255)


def test_the_docstring_lists_every_setting_with_its_range() -> None:
    doc = EngineConfig.__doc__ or ""
    for name in _settings(EngineConfig):
        assert f"``{name}``" in doc
    assert "``parallel`` (default 8, 1<=x<=256)" in doc
    assert "``max_body_bytes`` (default 33554432, x>=1024)" in (ServerSettings.__doc__ or "")


@pytest.mark.parametrize("n", [257, 300, 384, 800, 1000])
def test_an_embeddings_batch_that_llama_cpp_cannot_split_is_refused(n: int) -> None:
    # llama.cpp aborts (GGML_ASSERT(ggml_can_mul_mat)) when the embedding batch does not split evenly over its
    # min(n, 256) sequences: above 256 only multiples of 256 start; the message names the rule and both neighbours
    with pytest.raises(ValueError, match=rf"embeddings_batch above 256 must be a multiple of 256 .*got {n}: "
                                         rf"use {n // 256 * 256} or {n // 256 * 256 + 256}"):
        EngineConfig(model="m.gguf", embeddings_batch=n)
    check_embeddings_batch(n // 256 * 256)


def test_n_ubatch_above_n_batch_is_clamped_as_llama_cpp_does() -> None:
    # llama.cpp's llama_context: n_ubatch = min(n_batch, n_ubatch); llama-server command lines rely on it
    from skippy.engine.runtime.params import RuntimeConfig

    config = EngineConfig(model="m.gguf", n_batch=512, n_ubatch=1024)
    assert config.n_ubatch == 1024  # kept as given: attrs.evolve(config, n_batch=2048) still means 1024
    assert RuntimeConfig.from_engine_config(config).n_ubatch == 512
    assert RuntimeConfig.from_engine_config(attrs.evolve(config, n_batch=2048)).n_ubatch == 1024
    assert RuntimeConfig.from_engine_config(EngineConfig(model="m.gguf")).n_ubatch is None  # n_batch's
    help = setting_info(attrs.fields(EngineConfig).n_ubatch).help
    assert "clamped to n_batch" in help
