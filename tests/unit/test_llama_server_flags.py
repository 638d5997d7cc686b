"""llama-server's placement and memory flags on ``skippy serve`` (issue 41, part 2): real llama-server
command lines parse to the intended settings through the click command (no server started), the bad
inputs are usage errors naming the flag, and the sans-IO pieces behind them: ``-ot`` / ``-cmoe`` /
``-ncmoe`` overrides, the load mode, ``-hf`` resolution (no network), ``-n``'s default budget.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from skippy.cli import main
from skippy.cli.llama_presets import PRESETS
from skippy.cli.serving import serve
from skippy.engine.config import REASONING_FORMAT_CHOICES, EngineConfig
from skippy.engine.preparation import Limits, completion_budget
from skippy.engine.protocols.openai.types import ChatCompletionRequest
from skippy.engine.runtime.overrides import (
    FFN_EXPS_REGEX,
    KVOverride,
    check_buffers,
    ffn_exps_block_regex,
    kv_override_array,
    moe_overrides,
    parse_kv_overrides,
    parse_overrides,
)
from skippy.engine.runtime.params import RuntimeConfig, _model_params, load_mode
from skippy.models import ModelError, cached_hf_file, hf_model, hf_repo_ref

#: a command line of the shape agent-model guides give (Unsloth's, llama.cpp's docs), less the sampling
#: flags (--temp, --top-p, --min-p: part 1 of issue 41, not in skippy serve yet)
GUIDE = ('-m M -ngl 99 -c 8192 -fa on --jinja -ot ".ffn_.*_exps.=CPU" -ub 2048 -b 2048 --ctx-size 16384 '
         '--cache-reuse 256 -n 4096 -a my-model --mlock --no-mmap -nr --numa distribute --rope-scaling yarn '
         '--rope-scale 4 --yarn-orig-ctx 32768 -cb --reasoning-format deepseek')

CASES = [
    (GUIDE, {"n_gpu_layers": 99, "ctx_size": 16384, "flash_attn": "on", "jinja": True,
             "override_tensor": (".ffn_.*_exps.=CPU",), "n_ubatch": 2048, "n_batch": 2048, "cache_reuse": 256,
             "n_predict": 4096, "alias": ("my-model",), "mlock": True, "mmap": False, "repack": False,
             "numa": "distribute",
             "rope_scaling": "yarn", "rope_scale": 4.0, "yarn_orig_ctx": 32768, "cont_batching": True,
             "reasoning_format": "deepseek"}),
    # Unsloth's Qwen3-30B-A3B / gpt-oss guides: all experts on the CPU, or those of the first layers
    ("-hf unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M --jinja -ngl 99 --ctx-size 16384 -cmoe",
     {"hf_repo": "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M", "cpu_moe": True, "n_gpu_layers": 99}),
    ("-m M --n-cpu-moe 10 -ot 'blk\\.(1[0-9])\\.ffn_.*_exps\\.=CPU,token_embd=CPU' -ot 'output=CPU'",
     {"n_cpu_moe": 10, "override_tensor": ("blk\\.(1[0-9])\\.ffn_.*_exps\\.=CPU", "token_embd=CPU",
                                           "output=CPU")}),
    # llama.cpp docs: YaRN from 32k to 128k, and linear scaling with explicit RoPE values
    ("-m M --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768 --yarn-ext-factor 1.0 --yarn-attn-factor 1.0 "
     "--yarn-beta-slow 1.0 --yarn-beta-fast 32.0",
     {"rope_scaling": "yarn", "rope_scale": 4.0, "yarn_orig_ctx": 32768, "yarn_ext_factor": 1.0,
      "yarn_attn_factor": 1.0, "yarn_beta_slow": 1.0, "yarn_beta_fast": 32.0}),
    ("-m M --rope-scaling linear --rope-freq-base 1000000 --rope-freq-scale 0.5 --batch-size 1024 "
     "--ubatch-size 256 --predict 128 --reasoning-format none --alias a --alias b",
     {"rope_scaling": "linear", "rope_freq_base": 1e6, "rope_freq_scale": 0.5, "n_batch": 1024, "n_ubatch": 256,
      "n_predict": 128, "reasoning_format": "none", "alias": ("a", "b")}),
    ("-m M --override-tensor exps=CPU --cont-batching --numa isolate -ncmoe 2",
     {"override_tensor": ("exps=CPU",), "cont_batching": True, "numa": "isolate", "n_cpu_moe": 2,
      "mlock": False, "mmap": True, "repack": True}),
]


def _params(line: str) -> dict:
    """``skippy serve``'s parsed parameters for a command line (click's parsing and the options' callbacks,
    not the command: nothing loads)."""
    with serve.make_context("serve", shlex.split(line)) as ctx:
        params = dict(ctx.params)
    params["override_tensor"] = parse_overrides(params["override_tensor"])  # EngineConfig's converter
    return params


@pytest.mark.parametrize(("line", "expected"), CASES, ids=[f"line{i}" for i in range(len(CASES))])
def test_llama_server_command_lines_parse_to_the_settings(line: str, expected: dict) -> None:
    params = _params(line)
    for name, value in expected.items():
        assert params[name] == value, name


def test_the_guide_line_makes_the_intended_runtime_config() -> None:
    params = _params(GUIDE)
    fields = {f.name for f in attrs.fields(EngineConfig)}
    config = EngineConfig(model="M", **{k: v for k, v in params.items() if k in fields and k != "model"})
    rc = RuntimeConfig.from_engine_config(config)
    assert rc.override_tensor == (".ffn_.*_exps.=CPU",)
    assert (rc.n_batch, rc.n_ubatch, rc.mmap, rc.mlock, rc.repack, rc.numa) == (2048, 2048, False, True, False,
                                                                              "distribute")
    assert rc.rope_scaling == "yarn" and math.isclose(rc.rope_freq_scale, 0.25) and rc.yarn_orig_ctx == 32768
    assert config.n_predict == 4096 and config.reasoning_format == "deepseek" and config.cache_reuse == 256


def test_moe_flags_become_overrides_after_ot_in_llama_cpp_patterns() -> None:
    config = EngineConfig(model="M", override_tensor="a=CPU", cpu_moe=True, n_cpu_moe=2)
    assert RuntimeConfig.from_engine_config(config).override_tensor == (
        "a=CPU", f"{FFN_EXPS_REGEX}=CPU", r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
        r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU")
    assert moe_overrides(False, 0) == ()
    assert ffn_exps_block_regex(7) == r"blk\.7\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def test_parse_overrides_splits_commas_and_repeats_as_llama_cpp() -> None:
    assert parse_overrides(["a=CPU,b=CUDA0", " c=CPU"]) == ("a=CPU", "b=CUDA0", " c=CPU")
    assert parse_overrides("x=y") == ("x=y",)
    assert parse_overrides(()) == ()
    for bad, why in [("noequals", "not PATTERN=BUFFER"), ("=CPU", "not PATTERN=BUFFER"), ("a=", "not PATTERN"),
                     ("blk.(=CPU", "not a valid regular expression")]:
        with pytest.raises(ValueError, match=why):
            parse_overrides(bad)


def test_parse_kv_overrides_reads_llama_servers_key_type_value() -> None:
    """--override-kv as llama.cpp's string_parse_kv_override and parse_csv_row read it: the key before the
    first '=', a type prefix, a comma between overrides unless double-quoted, a repeated flag in order."""
    got = parse_kv_overrides(["tokenizer.ggml.add_bos_token=bool:false,general.name=str:a=b:c", "n=int:-3",
                              'x=float:1e-5,"s=str:one, two ""2""",t=str:', "b=bool:true"])
    assert got == (KVOverride("tokenizer.ggml.add_bos_token", "bool", False),
                   KVOverride("general.name", "str", "a=b:c"), KVOverride("n", "int", -3),
                   KVOverride("x", "float", 1e-5), KVOverride("s", "str", 'one, two "2"'), KVOverride("t", "str", ""),
                   KVOverride("b", "bool", True))
    assert [str(o) for o in got[:3]] == ["tokenizer.ggml.add_bos_token=bool:false", "general.name=str:a=b:c",
                                         "n=int:-3"]
    assert parse_kv_overrides(got) == got and parse_kv_overrides(()) == parse_kv_overrides(None) == ()
    assert parse_kv_overrides("k=str:" + "é" * 63) == (KVOverride("k", "str", "é" * 63),)  # 126 bytes
    for bad, why in [("noequals", "not KEY=TYPE:VALUE"), ("=int:1", "not KEY=TYPE:VALUE"),
                     ("a=1", "type must be one of int, float, bool, str"), ("a=list:1", "type must be one of"),
                     ("a=int:1.5", "'1.5' is not an integer within int64"), ("a=int:", "not an integer"),
                     ("a=int:9223372036854775808", "not an integer within int64"), ("a=float:x", "not a number"),
                     ("a=bool:True", "'True' is not true or false"), ("a=bool:1", "not true or false"),
                     ("a=str:" + "x" * 128, "at most 127 bytes, this one has 128"),
                     ("k=str:" + "é" * 64, "this one has 128"), ("k" * 128 + "=int:1", "key is longer than 127"),
                     ("a=int:1,", "an empty override"), ("", "an empty override"), ("a=str:x\ny", "new-line")]:
        with pytest.raises(ValueError, match=why):
            parse_kv_overrides(bad)


def test_kv_overrides_reach_llama_model_params_ending_with_an_empty_key() -> None:
    import ctypes

    import llama_cpp

    from skippy.engine.runtime.backends import plan_offload

    overrides = parse_kv_overrides("a=int:-7,b=float:0.5,c=bool:true,d=str:" + "z" * 127)
    array = kv_override_array(overrides)
    assert array is not None and len(array) == 5 and kv_override_array(()) is None
    assert [(o.key, o.tag) for o in array] == [(b"a", llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT),
                                               (b"b", llama_cpp.LLAMA_KV_OVERRIDE_TYPE_FLOAT),
                                               (b"c", llama_cpp.LLAMA_KV_OVERRIDE_TYPE_BOOL),
                                               (b"d", llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR), (b"", 0)]
    assert (array[0].value.val_i64, array[1].value.val_f64, array[2].value.val_bool) == (-7, 0.5, True)
    assert array[3].value.val_str == b"z" * 127
    config = RuntimeConfig.from_engine_config(EngineConfig(model="M", override_kv=("a=int:-7", "b=float:0.5")))
    assert config.kv_overrides == overrides[:2]
    mparams, keep = _model_params(plan_offload(), config)
    kept = [k for k in keep if isinstance(k, ctypes.Array) and k._type_ is llama_cpp.llama_model_kv_override]
    assert len(kept) == 1  # alive as long as the model: the runtime holds `keep`
    assert ctypes.addressof(mparams.kv_overrides.contents) == ctypes.addressof(kept[0])
    assert mparams.kv_overrides[0].key == b"a" and mparams.kv_overrides[2].key == b""
    assert not _model_params(plan_offload(), RuntimeConfig())[0].kv_overrides  # NULL: none


def test_check_buffers_names_the_available_ones() -> None:
    check_buffers(["a=CPU"], ["CPU"])
    with pytest.raises(ValueError, match=r"unknown buffer type 'CUDA0' in 'a=CUDA0'; available buffer types: CPU"):
        check_buffers(["a=CUDA0"], ["CPU"])


def test_load_mode_follows_no_mmap_and_mlock() -> None:
    import llama_cpp

    assert load_mode(mmap=True, mlock=False) == llama_cpp.LLAMA_LOAD_MODE_AUTO
    assert load_mode(mmap=True, mlock=True) == llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    assert load_mode(mmap=False, mlock=True) == llama_cpp.LLAMA_LOAD_MODE_MLOCK
    assert load_mode(mmap=False, mlock=False) == llama_cpp.LLAMA_LOAD_MODE_NONE


def test_reasoning_format_choices_are_the_parsers() -> None:
    from skippy.engine.chat.formats.core import REASONING_FORMATS

    assert REASONING_FORMAT_CHOICES == REASONING_FORMATS


def test_n_predict_is_the_budget_of_a_request_without_max_tokens() -> None:
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    limits = Limits(n_vocab=10, n_ctx=100, n_seq_max=1, n_predict=30)
    assert completion_budget(req, 10, limits).max_tokens == 30
    assert completion_budget(req, 90, limits).max_tokens == 10  # within the room left, no 400
    assert completion_budget(req, 10, attrs.evolve(limits, n_predict=-1)).max_tokens == 90
    asked = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert completion_budget(asked, 10, limits).max_tokens == 5  # the request's own wins


# -- bad input: usage errors (exit 2) naming the flag ------------------------------------------------------

BAD = [
    ("-ot 'blk.(=CPU'", "--override-tensor", "not a valid regular expression"),
    ("-ot noequals", "--override-tensor", "not PATTERN=BUFFER"),
    ("-ot 'exps=NOPE0'", "--override-tensor", "unknown buffer type 'NOPE0'"),
    ("--override-kv tokenizer.ggml.add_bos_token", "--override-kv", "not KEY=TYPE:VALUE"),
    ("--override-kv a=int:1 --override-kv a=bool:yes", "--override-kv", "'yes' is not true or false"),
    ("--override-kv a=int:0x10", "--override-kv", "not an integer within int64"),
    ("-ncmoe -1", "--n-cpu-moe", "x>=0"),
    ("--rope-scale abc", "--rope-scale", "not a valid float"),
    ("--rope-freq-base x1", "--rope-freq-base", "not a valid float"),
    ("--yarn-ext-factor nan", "--yarn-ext-factor", "yarn_ext_factor"),
    ("--yarn-orig-ctx 1.5", "--yarn-orig-ctx", "not a valid integer"),
    ("--rope-scaling ntk", "--rope-scaling", "'ntk' is not one of"),
    ("--numa everywhere", "--numa", "'everywhere' is not one of"),
    ("--no-cont-batching", "--no-cont-batching", "always batches continuously"),
    ("-nocb", "--no-cont-batching", "always batches continuously"),
    ("--reasoning-format r1", "--reasoning-format", "'r1' is not one of"),
    ("-b 4 -np 8", "n_batch must be >= parallel", "n_batch"),
    ("--rope-scale 4 --rope-freq-scale 0.5", "rope_scale 4 and rope_freq_scale 0.5 disagree", "give one of them"),
    ("-ub 0", "--n-ubatch", "x>=1"),
    ("--image-min-tokens 0", "--image-min-tokens", "x>=1"),
    ("--image-min-tokens 64 --image-max-tokens 32", "image_min_tokens (64) is above image_max_tokens (32)", "above"),
]


@pytest.mark.parametrize(("args", "flag", "why"), BAD, ids=[b[0] for b in BAD])
def test_bad_values_are_usage_errors_naming_the_flag(args: str, flag: str, why: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIPPY_HOME", str(tmp_path))  # nothing is pulled: every case fails before
    result = CliRunner().invoke(main, ["serve", "-m", str(tmp_path / "none.gguf"), *shlex.split(args)])
    assert result.exit_code == 2, result.output
    assert flag in result.output and why in result.output, result.output


# -- -hf: resolution without the network ---------------------------------------------------------------------

def test_hf_repo_ref_reads_llama_servers_form() -> None:
    ref = hf_repo_ref("ggml-org/gemma-3-270m-GGUF:Q8_0")
    assert (ref.repo, ref.quant, ref.file) == ("ggml-org/gemma-3-270m-GGUF", "Q8_0", None)
    assert hf_repo_ref("unsloth/Qwen3-30B-A3B-GGUF").quant == "Q4_K_M"  # llama-server's default
    assert hf_repo_ref("hf://o/r/sub/m-Q2_K.gguf").file == "sub/m-Q2_K.gguf"
    with pytest.raises(ModelError):
        hf_repo_ref("not a repo")


def test_cached_hf_file_picks_the_repos_quant_from_the_cache_names() -> None:
    names = ["gemma-3-270m-Q8_0.gguf", "gemma-3-270m-Q4_K_M.gguf", "Qwen3-30B-A3B-Q8_0.gguf", "other.gguf"]
    assert cached_hf_file(hf_repo_ref("ggml-org/gemma-3-270m-GGUF:Q8_0"), names) == "gemma-3-270m-Q8_0.gguf"
    assert cached_hf_file(hf_repo_ref("ggml-org/gemma-3-270m-GGUF"), names) == "gemma-3-270m-Q4_K_M.gguf"
    assert cached_hf_file(hf_repo_ref("unsloth/Qwen3-30B-A3B-GGUF:q8_0"), names) == "Qwen3-30B-A3B-Q8_0.gguf"
    assert cached_hf_file(hf_repo_ref("unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M"), names) is None
    assert cached_hf_file(hf_repo_ref("hf://x/y/dir/other.gguf"), names) == "other.gguf"


def test_hf_offline_without_the_file_is_refused_saying_how_to_pull(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIPPY_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match=r"offline .* skippy pull ggml-org/gemma-3-270m-GGUF:Q8_0"):
        hf_model("ggml-org/gemma-3-270m-GGUF:Q8_0")
    cached = tmp_path / "models" / "gemma-3-270m-Q8_0.gguf"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF")
    assert hf_model("ggml-org/gemma-3-270m-GGUF:Q8_0") == cached  # offline, from the cache
    result = CliRunner().invoke(main, ["serve", "-hf", "ggml-org/other-GGUF:Q8_0"])
    assert result.exit_code == 1 and "offline" in result.output and "skippy pull" in result.output, result.output
    result = CliRunner().invoke(main, ["serve", "-hf", "a/b:Q8_0", "-m", "x"])
    assert result.exit_code == 2 and "not both" in result.output, result.output


def test_reasoning_format_is_the_default_of_a_request_that_sets_none() -> None:
    from skippy.engine.chat.prepare import PreparedTemplate, render_chat

    tmpl = PreparedTemplate.build("{% for m in messages %}{{ m.content }}{% endfor %}", bos_token="", eos_token="")
    ask = [{"role": "user", "content": "hi"}]
    assert render_chat(tmpl, ChatCompletionRequest(messages=ask), reasoning_format="none").plan.reasoning_format \
        == "none"
    own = ChatCompletionRequest(messages=ask, reasoning_format="deepseek")
    assert render_chat(tmpl, own, reasoning_format="none").plan.reasoning_format == "deepseek"
    assert render_chat(tmpl, ChatCompletionRequest(messages=ask)).plan.reasoning_format == "auto"



# -- -dt and llama-server's presets (--fim-qwen-1.5b-default...) ------------------------------------------------

#: llama.vim's doc (less its bare -fa, which the pinned llama-server refuses too: -fa takes on|off|auto)
LLAMA_VIM = "-m M --port 8012 -ngl 99 -fa on -dt 0.1 --ubatch-size 512 --batch-size 1024 --ctx-size 0 --cache-reuse 256"

QWEN_15B = "hf://ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF/qwen2.5-coder-1.5b-q8_0.gguf"
QWEN_7B = "hf://ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF/qwen2.5-coder-7b-q8_0.gguf"
GEMMA_EMBD = "hf://ggml-org/embeddinggemma-300M-qat-q4_0-GGUF/embeddinggemma-300M-qat-Q4_0.gguf"
FIM = {"port": 8012, "n_ubatch": 1024, "n_batch": 1024, "ctx_size": 0, "cache_reuse": 256}

PRESET_CASES = [
    (LLAMA_VIM, {"port": 8012, "n_gpu_layers": 99, "flash_attn": "on", "defrag_thold": 0.1, "n_ubatch": 512,
                 "n_batch": 1024, "ctx_size": 0, "cache_reuse": 256}),
    ("--defrag-thold -1", {"defrag_thold": -1.0}),
    ("", {"defrag_thold": None, "ctx_size": None, "hf_repo": None, "port": 8080}),
    ("--fim-qwen-1.5b-default", {"hf_repo": QWEN_15B, **FIM}),
    ("--fim-qwen-3b-default", {"hf_repo": "hf://ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF/qwen2.5-coder-3b-q8_0.gguf",
                               **FIM}),
    ("--fim-qwen-7b-default", {"hf_repo": QWEN_7B, **FIM}),
    ("--fim-qwen-30b-default", {"hf_repo": "hf://ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF/"
                                           "qwen3-coder-30b-a3b-instruct-q8_0.gguf", **FIM}),
    ("--gpt-oss-20b-default", {"hf_repo": "hf://ggml-org/gpt-oss-20b-GGUF/gpt-oss-20b-mxfp4.gguf", "port": 8013,
                               "n_ubatch": 2048, "n_batch": 32768, "parallel": 2, "ctx_size": 262144,
                               "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.01}),
    ("--gpt-oss-20b-default --temp 0.7", {"temperature": 0.7, "top_p": 1.0}),  # a flag after it wins
    ("--embd-gemma-default", {"hf_repo": GEMMA_EMBD, "port": 8011, "n_ubatch": 2048, "n_batch": 2048, "parallel": 32,
                              "ctx_size": 65536, "embeddings": True, "embeddings_batch": 2048, "cache_reuse": 0}),
    # in order, as llama-server parses: a flag after the preset overrides it, one before it is overridden
    ("--fim-qwen-1.5b-default --port 9000 -c 8192 -ub 256 --cache-reuse 64 -hf a/b:Q8_0",
     {**FIM, "hf_repo": "a/b:Q8_0", "port": 9000, "ctx_size": 8192, "n_ubatch": 256, "cache_reuse": 64}),
    ("-hf a/b:Q8_0 --port 9000 -c 8192 -ub 256 --cache-reuse 64 -np 2 --fim-qwen-1.5b-default",
     {"hf_repo": QWEN_15B, **FIM, "parallel": 2}),
    ("--fim-qwen-7b-default --embd-gemma-default", {"hf_repo": GEMMA_EMBD, "port": 8011, "ctx_size": 65536,
                                                    "cache_reuse": 256}),  # the first's flags the second sets not
    ("--alias --fim-qwen-1.5b-default", {"alias": ("--fim-qwen-1.5b-default",), "hf_repo": None}),  # a value
]


@pytest.mark.parametrize(("line", "expected"), PRESET_CASES, ids=[f"line{i}" for i in range(len(PRESET_CASES))])
def test_dt_and_the_presets_parse_to_the_settings_in_order(line: str, expected: dict) -> None:
    params = _params(line)
    for name, value in expected.items():
        assert params[name] == value, name


REFUSED = [
    ("--fim-qwen-7b-spec", "a 0.5B draft model", "skippy serve --fim-qwen-7b-default --spec-ngram 4"),
    ("--fim-qwen-14b-spec", "draft model", "-hf hf://ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF/qwen2.5-coder-14b-q8_0.gguf "
                                           "--port 8012 -ub 1024 -b 1024 -c 0 --cache-reuse 256 --spec-ngram 4"),
    ("--spec-default", "ngram-mod", "--spec-ngram 4"),
    ("--gpt-oss-120b-default", "split in several files",
     "-m FILE.gguf (the first file, downloaded yourself) --port 8013 --jinja -ub 2048 -b 32768 -np 2 -c 262144 "
     "--temp 1 --top-p 1 --top-k 0 --min-p 0.01"),
    ("--vision-gemma-4b-default", "does not fetch the repo's projector",
     "-hf ggml-org/gemma-3-4b-it-qat-GGUF:Q4_0 --mmproj FILE"),
    ("--vision-gemma-12b-default", "projector", "skippy pull hf://ggml-org/gemma-3-12b-it-qat-GGUF/FILE"),
]


@pytest.mark.parametrize(("flag", "why", "closest"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_preset_skippy_cannot_serve_is_refused_by_name_saying_the_closest(flag: str, why: str, closest: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import skippy.models

    monkeypatch.setattr(skippy.models, "hf_model", _no_download)
    result = CliRunner().invoke(main, ["serve", "--port", "1", flag, "-np", "2"], terminal_width=1000)
    assert result.exit_code == 2, result.output
    assert f"{flag} is refused" in result.output and why in result.output and closest in result.output, result.output


def _no_download(spec: str, **kw: object) -> Path:
    raise AssertionError(f"downloaded {spec}")


def test_help_and_a_dry_parse_of_a_preset_download_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import skippy.models

    monkeypatch.setattr(skippy.models, "hf_model", _no_download)
    result = CliRunner().invoke(main, ["serve", "--fim-qwen-1.5b-default", "--help"], terminal_width=200)
    assert result.exit_code == 0, (result.output, result.exception)
    for flag, preset in PRESETS.items():  # each preset on one line of its own, with its description
        assert any(line.split()[:1] == [flag] for line in result.output.splitlines()), flag
        assert "".join(preset.help.split()) in "".join(result.output.split())  # click wraps long words too
    assert _params("--fim-qwen-1.5b-default")["hf_repo"] == QWEN_15B  # parsed, not fetched


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list:
    """``skippy serve`` up to the server: ``-hf`` offline from a cache in ``tmp_path`` holding the Qwen 1.5B and
    EmbeddingGemma files (4 bytes each), their training contexts 32768 and 2048, the server a recorder of its
    (config, port) calls."""
    import skippy.cli.serving
    import skippy.http.serve

    calls: list = []

    async def fake_serve(config, *, host, port, settings, **pool):
        calls.append((config, port))
        return 0

    monkeypatch.setenv("SKIPPY_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in [n for n in __import__("os").environ if n.startswith("SKIPPY_") and n != "SKIPPY_HOME"]:
        monkeypatch.delenv(name)
    (tmp_path / "models").mkdir()
    trained = {"qwen2.5-coder-1.5b-q8_0.gguf": 32768, "embeddinggemma-300M-qat-Q4_0.gguf": 2048}
    for name in trained:
        (tmp_path / "models" / name).write_bytes(b"GGUF")
    monkeypatch.setattr(skippy.cli.serving, "_training_context", lambda path: trained[path.name])
    monkeypatch.setattr(skippy.http.serve, "serve", fake_serve)
    return calls


def test_a_preset_serves_its_model_with_its_settings(started: list) -> None:
    result = CliRunner().invoke(main, ["serve", "--fim-qwen-1.5b-default"])
    assert result.exit_code == 0, (result.output, result.exception)
    [(config, port)] = started
    assert (config.model_name, port) == ("qwen2.5-coder-1.5b-q8_0", 8012)
    assert (config.n_batch, config.n_ubatch, config.cache_reuse, config.parallel) == (1024, 1024, 256, 8)
    assert config.n_ctx == 32768 // 8  # -c 0: the training context over the slots, as -c N
    started.clear()
    result = CliRunner().invoke(main, ["serve", "--fim-qwen-1.5b-default", "-np", "1", "--port", "9000"])
    assert result.exit_code == 0, (result.output, result.exception)
    [(config, port)] = started
    assert (config.n_ctx, config.parallel, port) == (32768, 1, 9000)
    started.clear()
    result = CliRunner().invoke(main, ["serve", "--embd-gemma-default"])
    assert result.exit_code == 0, (result.output, result.exception)
    [(config, port)] = started
    assert (config.n_ctx, config.parallel, config.embeddings, config.embeddings_batch, port) == (2048, 32, True, 2048,
                                                                                                 8011)


def test_dt_is_accepted_with_one_warning_line(started: list) -> None:
    result = CliRunner().invoke(main, ["serve", "--fim-qwen-1.5b-default", "-dt", "0.1"])
    assert result.exit_code == 0, (result.output, result.exception)
    [warning] = [line for line in result.output.splitlines() if "WARNING" in line]
    assert "--defrag-thold/-dt is deprecated in llama.cpp and no longer necessary" in warning
    assert [c.n_ctx for c, _ in started] == [4096]  # nothing else changed


@pytest.mark.parametrize(("args", "message"), [
    (["--fim-qwen-1.5b-default", "-m", "x.gguf"], "not both (-hf comes from --fim-qwen-1.5b-default)"),
    (["--n-ctx", "2048", "--fim-qwen-1.5b-default"], "not both (-c comes from --fim-qwen-1.5b-default)"),
    (["-c", "8"], "give 0 (the model's training context) or at least 16 tokens, got 8"),
])
def test_conflicts_name_the_preset_and_c_takes_0_or_16(args: list[str], message: str, started: list) -> None:
    result = CliRunner().invoke(main, ["serve", *args], terminal_width=1000)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not started


def test_c_0_over_too_many_slots_is_a_usage_error(started: list, monkeypatch: pytest.MonkeyPatch) -> None:
    import skippy.cli.serving

    monkeypatch.setattr(skippy.cli.serving, "_training_context", lambda path: 512)
    result = CliRunner().invoke(main, ["serve", "--fim-qwen-1.5b-default", "-np", "64"], terminal_width=1000)
    assert result.exit_code == 2, result.output
    assert "-c 0: the training context of qwen2.5-coder-1.5b-q8_0.gguf (512 tokens) over 64 slots leaves 8" \
        in result.output
    assert not started


def test_training_context_is_the_ggufs_read_by_llama_cpp(tmp_path: Path) -> None:
    from skippy.cli.serving import _training_context
    from skippy.models import DEFAULT_MODEL, REGISTRY

    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"nope")
    assert _training_context(not_gguf) == 0 and _training_context(tmp_path / "missing.gguf") == 0
    real = Path.home() / ".cache" / "skippy" / "models" / REGISTRY[DEFAULT_MODEL].filename
    if not real.is_file():
        pytest.skip(f"{real} is not pulled")
    assert _training_context(real) == 8192  # SmolLM2-135M's


def test_no_repack_turns_llama_cpps_extra_buffer_types_off() -> None:
    from skippy.engine.runtime.backends import plan_offload

    assert _model_params(plan_offload(), RuntimeConfig())[0].use_extra_bufts  # llama.cpp's default: repacked
    config = RuntimeConfig.from_engine_config(EngineConfig(model="M", repack=False))
    assert not _model_params(plan_offload(), config)[0].use_extra_bufts
