"""``skippy serve`` options: generated from the settings, the same flags/env vars/defaults as before, parsed into them.

No server starts here: a case either fails while click parses the command
line (exit code 2), or runs with ``skippy.http.serve.serve`` and
``skippy.models.ensure_model`` replaced by recorders, so the test sees the
``EngineConfig`` and ``ServerSettings`` that the command line produced.

Also: what ``make -n`` says ``make run`` pulls, the README's note on where the ``skippy``
command is, and every command's ``--help`` page (no reStructuredText markup, the usage lines).
"""

from __future__ import annotations

import gc
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import attrs
import click
import pytest
from click.testing import CliRunner

from skippy.cli import main, serve
from skippy.cli.llama_presets import PRESETS
from skippy.engine.config import EngineConfig, setting_info
from skippy.http.settings import ServerSettings

README = Path(__file__).resolve().parents[2] / "README.md"

# Every option of `skippy serve` as `--help` shows it (the ones from before the settings were declared
# once, plus llama-server's names and flags): (flags and metavar, "[env var; default; range]", default)
BEFORE = [
    ("-m, --model TEXT", "[env var: SKIPPY_MODEL; default: SmolLM2-135M-Instruct]", None),  # repeatable
    ("-hf, -hfr, --hf-repo OWNER/REPO[:QUANT]", "[env var: SKIPPY_HF_REPO]", None),
    ("-a, --alias NAME", "[env var: SKIPPY_ALIAS]", None),
    ("--models-dir DIR", "[env var: SKIPPY_MODELS_DIR]", None),
    ("--models-preset FILE", "[env var: SKIPPY_MODELS_PRESET]", None),
    ("--max-loaded INTEGER RANGE", "[env var: SKIPPY_MAX_LOADED; default: 4; x>=0]", 4),
    ("--keep-alive SECONDS", "[env var: SKIPPY_KEEP_ALIVE; default: -1.0]", -1.0),
    ("--host ADDRESS", "[env var: SKIPPY_HOST; default: 127.0.0.1]", None),
    ("--port INTEGER RANGE", "[env var: SKIPPY_PORT; default: 8080; 0<=x<=65535]", 8080),
    ("--n-ctx INTEGER RANGE", "[env var: SKIPPY_N_CTX; default: 8192; x>=0]", 8192),
    ("-c, --ctx-size INTEGER RANGE", "[env var: SKIPPY_CTX_SIZE; x>=0]", None),
    ("-np, --parallel INTEGER RANGE", "[env var: SKIPPY_PARALLEL; default: 8; 1<=x<=256]", 8),
    ("-t, --threads INTEGER RANGE", "[env var: SKIPPY_THREADS; x>=1]", None),
    ("-fa, --flash-attn [on|off|auto]", "[env var: SKIPPY_FLASH_ATTN; default: auto]", "auto"),
    ("-ctk, --cache-type-k [f16|bf16|f32|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1]",
     "[env var: SKIPPY_CACHE_TYPE_K; default: f16]", "f16"),
    ("-ctv, --cache-type-v [f16|bf16|f32|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1]",
     "[env var: SKIPPY_CACHE_TYPE_V; default: f16]", "f16"),
    ("-kvu, --kv-unified", "[env var: SKIPPY_KV_UNIFIED]", False),
    ("--swa-full", "[env var: SKIPPY_SWA_FULL]", False),
    ("-ngl, --n-gpu-layers, --gpu-layers N", "[env var: SKIPPY_N_GPU_LAYERS; x>=-1]", None),
    ("-sm, --split-mode [none|layer|row]", "[env var: SKIPPY_SPLIT_MODE; default: layer]", "layer"),
    ("-mg, --main-gpu INTEGER RANGE", "[env var: SKIPPY_MAIN_GPU; default: 0; x>=0]", 0),
    ("-ts, --tensor-split N0,N1,...", "[env var: SKIPPY_TENSOR_SPLIT]", None),
    ("-dev, --device DEV1,DEV2|none", "[env var: SKIPPY_DEVICE]", None),
    ("--rpc HOST:PORT,...", "[env var: SKIPPY_RPC]", None),
    ("-ot, --override-tensor PATTERN=BUFFER,...", "[env var: SKIPPY_OVERRIDE_TENSOR]", None),
    ("--override-kv KEY=TYPE:VALUE,...", "[env var: SKIPPY_OVERRIDE_KV]", None),
    ("-cmoe, --cpu-moe", "[env var: SKIPPY_CPU_MOE]", False),
    ("-ncmoe, --n-cpu-moe N", "[env var: SKIPPY_N_CPU_MOE; default: 0; x>=0]", 0),
    ("-b, --n-batch, --batch-size N", "[env var: SKIPPY_N_BATCH; default: 512; x>=1]", 512),
    ("-ub, --n-ubatch, --ubatch-size N", "[env var: SKIPPY_N_UBATCH; x>=1]", None),
    ("--mlock", "[env var: SKIPPY_MLOCK]", False),
    ("--mmap / --no-mmap", "[env var: SKIPPY_MMAP; default: mmap]", True),
    ("--repack / -nr, --no-repack", "[env var: SKIPPY_REPACK; default: repack]", True),
    ("--numa [disabled|distribute|isolate|numactl]", "[env var: SKIPPY_NUMA; default: disabled]", "disabled"),
    ("--rope-scaling [model|none|linear|yarn]", "[env var: SKIPPY_ROPE_SCALING; default: model]", "model"),
    ("--rope-scale N", "[env var: SKIPPY_ROPE_SCALE; default: 0.0; x>=0.0]", 0.0),
    ("--rope-freq-base N", "[env var: SKIPPY_ROPE_FREQ_BASE; default: 0.0; x>=0.0]", 0.0),
    ("--rope-freq-scale N", "[env var: SKIPPY_ROPE_FREQ_SCALE; default: 0.0; x>=0.0]", 0.0),
    ("--yarn-orig-ctx N", "[env var: SKIPPY_YARN_ORIG_CTX; default: 0; x>=0]", 0),
    ("--yarn-ext-factor N", "[env var: SKIPPY_YARN_EXT_FACTOR; default: -1.0; x>=-1.0]", -1.0),
    ("--yarn-attn-factor N", "[env var: SKIPPY_YARN_ATTN_FACTOR; default: -1.0]", -1.0),
    ("--yarn-beta-slow N", "[env var: SKIPPY_YARN_BETA_SLOW; default: -1.0]", -1.0),
    ("--yarn-beta-fast N", "[env var: SKIPPY_YARN_BETA_FAST; default: -1.0]", -1.0),
    ("-mm, --mmproj FILE", "[env var: SKIPPY_MMPROJ]", None),
    ("--mmproj-offload / --no-mmproj-offload", "[env var: SKIPPY_MMPROJ_OFFLOAD; default: mmproj-offload]", True),
    ("--image-min-tokens N", "[env var: SKIPPY_IMAGE_MIN_TOKENS; x>=1]", None),
    ("--image-max-tokens N", "[env var: SKIPPY_IMAGE_MAX_TOKENS; x>=1]", None),
    ("--allow-image-urls", "[env var: SKIPPY_ALLOW_IMAGE_URLS]", False),
    ("--allow-private-image-urls", "[env var: SKIPPY_ALLOW_PRIVATE_IMAGE_URLS]", False),
    ("--lora FILE", "[env var: SKIPPY_LORA]", None),
    ("--lora-scaled FILE SCALE", "[env var: SKIPPY_LORA_SCALED]", None),
    ("--lora-init-without-apply", "[env var: SKIPPY_LORA_INIT_WITHOUT_APPLY]", False),
    ("-cb, --cont-batching / -nocb, --no-cont-batching",
     "[env var: SKIPPY_CONT_BATCHING; default: cont-batching]", True),
    ("-dt, --defrag-thold N", "[env var: SKIPPY_DEFRAG_THOLD]", None),
    ("--chat-template, --chat-template-file NAME|FILE", "[env var: SKIPPY_CHAT_TEMPLATE]", None),
    ("--chat-template-kwargs JSON", "[env var: SKIPPY_CHAT_TEMPLATE_KWARGS]", None),
    ("--jinja", "[env var: SKIPPY_JINJA]", False),
    ("-n, --n-predict, --predict N", "[env var: SKIPPY_N_PREDICT; default: -1; x>=-1]", -1),
    ('--temperature, --temp T', '[env var: SKIPPY_TEMPERATURE; x<=100.0]', None),
    ('--top-k N', '[env var: SKIPPY_TOP_K; x>=0]', None),
    ('--top-p P', '[env var: SKIPPY_TOP_P; 0.0<=x<=1.0]', None),
    ('--min-p P', '[env var: SKIPPY_MIN_P; 0.0<=x<=1.0]', None),
    ('--typical-p, --typical P', '[env var: SKIPPY_TYPICAL_P; 0.0<x<=1.0]', None),
    ('--repeat-penalty X', '[env var: SKIPPY_REPEAT_PENALTY; 0.0<x<=100.0]', None),
    ('--repeat-last-n N', '[env var: SKIPPY_REPEAT_LAST_N; -1<=x<=16777216]', None),
    ('--presence-penalty X', '[env var: SKIPPY_PRESENCE_PENALTY; -2.0<=x<=2.0]', None),
    ('--frequency-penalty X', '[env var: SKIPPY_FREQUENCY_PENALTY; -2.0<=x<=2.0]', None),
    ('-s, --seed N', '[env var: SKIPPY_SEED; -9223372036854775808<=x<=18446744073709551615]', None),
    ('--top-n-sigma, --top-nsigma X', '[env var: SKIPPY_TOP_N_SIGMA; -1.0<=x<=100.0]', None),
    ('--xtc-probability P', '[env var: SKIPPY_XTC_PROBABILITY; 0.0<=x<=1.0]', None),
    ('--xtc-threshold P', '[env var: SKIPPY_XTC_THRESHOLD; 0.0<=x<=1.0]', None),
    ('--dry-multiplier X', '[env var: SKIPPY_DRY_MULTIPLIER; 0.0<=x<=100.0]', None),
    ('--dry-base X', '[env var: SKIPPY_DRY_BASE; 1.0<=x<=100.0]', None),
    ('--dry-allowed-length N', '[env var: SKIPPY_DRY_ALLOWED_LENGTH; 0<=x<=1048576]', None),
    ('--dry-penalty-last-n N', '[env var: SKIPPY_DRY_PENALTY_LAST_N; -1<=x<=16777216]', None),
    ('--dynatemp-range X', '[env var: SKIPPY_DYNATEMP_RANGE; 0.0<=x<=100.0]', None),
    ('--dynatemp-exponent, --dynatemp-exp X', '[env var: SKIPPY_DYNATEMP_EXPONENT; 0.0<=x<=100.0]', None),
    ('--mirostat N', '[env var: SKIPPY_MIROSTAT; 0<=x<=2]', None),
    ('--mirostat-eta, --mirostat-lr X', '[env var: SKIPPY_MIROSTAT_ETA; 0.0<x<=1.0]', None),
    ('--mirostat-tau, --mirostat-ent X', '[env var: SKIPPY_MIROSTAT_TAU; 0.0<=x<=100.0]', None),
    ("--reasoning-format [auto|none|deepseek|deepseek-legacy|hidden]",
     "[env var: SKIPPY_REASONING_FORMAT; default: auto]", "auto"),
    ("--force-tool-emulation", "[env var: SKIPPY_FORCE_TOOL_EMULATION]", False),
    ("--step-tokens INTEGER RANGE", "[env var: SKIPPY_STEP_TOKENS; default: 256; 8<=x<=512]", 256),
    ("--clamp-max-tokens / --no-clamp-max-tokens", "[env var: SKIPPY_CLAMP_MAX_TOKENS; default: clamp-max-tokens]",
     True),
    ("--prefix-cache / --no-prefix-cache", "[env var: SKIPPY_PREFIX_CACHE; default: prefix-cache]", True),
    ("--cache-reuse N", "[env var: SKIPPY_CACHE_REUSE; default: 0; x>=0]", 0),
    ("-ctxcp, --ctx-checkpoints, --swa-checkpoints INTEGER RANGE",
     "[env var: SKIPPY_CTX_CHECKPOINTS; default: 32; 0<=x<=1024]", 32),
    ("-cram, --cache-ram MIB", "[env var: SKIPPY_CACHE_RAM; default: 8192; x>=-1]", 8192),
    ("--spec-ngram INTEGER RANGE", "[env var: SKIPPY_SPEC_NGRAM; default: 0; 0<=x<=16]", 0),
    ("--scheduler-steps INTEGER RANGE", "[env var: SKIPPY_SCHEDULER_STEPS; default: 8; 1<=x<=64]", 8),
    ("-bs, --backend-sampling", "[env var: SKIPPY_BACKEND_SAMPLING]", False),
    ("--reader-wait [auto|on|off]", "[env var: SKIPPY_READER_WAIT; default: auto]", "auto"),
    ("--hook-policy MODULE:FACTORY", "[env var: SKIPPY_HOOK_POLICY]", None),
    ("--hook-url URL", "[env var: SKIPPY_HOOK_URL]", None),
    ("--hook-timeout FLOAT RANGE", "[env var: SKIPPY_HOOK_TIMEOUT; default: 2.0; x>0.0]", 2.0),
    ("--hook-fail-closed", "[env var: SKIPPY_HOOK_FAIL_CLOSED]", False),
    ("--hooks-default-on", "[env var: SKIPPY_HOOKS_DEFAULT_ON]", False),
    ("--signal-window INTEGER RANGE", "[env var: SKIPPY_SIGNAL_WINDOW; default: 16; 1<=x<=4096]", 16),
    ("--high-entropy-threshold FLOAT RANGE",
     "[env var: SKIPPY_HIGH_ENTROPY_THRESHOLD; default: 2.0; x>=0.0]", 2.0),
    ("--max-queue INTEGER RANGE", "[env var: SKIPPY_MAX_QUEUE; default: 1024; x>=1]", 1024),
    ("--embeddings, --embedding", "[env var: SKIPPY_EMBEDDINGS]", False),
    ("--pooling [model|mean|cls|last|none|rank]", "[env var: SKIPPY_POOLING; default: model]", "model"),
    ("--reranking, --rerank", "[env var: SKIPPY_RERANKING]", False),
    ("--embeddings-batch INTEGER RANGE", "[env var: SKIPPY_EMBEDDINGS_BATCH; default: 512; 16<=x<=65536]", 512),
    ("--log-level [debug|info|warning|error]", "[env var: SKIPPY_LOG_LEVEL; default: info]", "info"),
    ("--log-format [text|json]", "[env var: SKIPPY_LOG_FORMAT; default: text]", "text"),
    ("--log-file PATH", "[env var: SKIPPY_LOG_FILE]", None),
    ("--api-key KEY", "[env var: SKIPPY_API_KEY]", None),
    ("--api-key-file FILE", "[env var: SKIPPY_API_KEY_FILE]", None),
    ("--cors-origins ORIGINS", "[env var: SKIPPY_CORS_ORIGINS]", None),
    ("--max-body-bytes INTEGER RANGE", "[env var: SKIPPY_MAX_BODY_BYTES; default: 33554432; x>=1024]", 33554432),
    ("--max-messages INTEGER RANGE", "[env var: SKIPPY_MAX_MESSAGES; default: 2048; x>=1]", 2048),
    ("--max-tools INTEGER RANGE", "[env var: SKIPPY_MAX_TOOLS; default: 128; x>=0]", 128),
    ("--max-chat-template-bytes INTEGER RANGE",
     "[env var: SKIPPY_MAX_CHAT_TEMPLATE_BYTES; default: 131072; x>=0]", 131072),
    ("--max-grammar-bytes INTEGER RANGE", "[env var: SKIPPY_MAX_GRAMMAR_BYTES; default: 131072; x>=0]", 131072),
    ("--request-timeout FLOAT RANGE", "[env var: SKIPPY_REQUEST_TIMEOUT; default: 600.0; x>=0.0]", 600.0),
    ("--body-timeout FLOAT RANGE", "[env var: SKIPPY_BODY_TIMEOUT; default: 60.0; x>0.0]", 60.0),
    ("--shutdown-grace FLOAT RANGE", "[env var: SKIPPY_SHUTDOWN_GRACE; default: 30.0; x>=0.0]", 30.0),
    ("--sse-ping-interval FLOAT RANGE", "[env var: SKIPPY_SSE_PING_INTERVAL; default: 15.0; x>=0.0]", 15.0),
    ("--strict-fields", "[env var: SKIPPY_STRICT_FIELDS]", False),
    ("--responses-store URL", "[env var: SKIPPY_RESPONSES_STORE; default: (sqlite:$SKIPPY_HOME/responses.db)]", None),
    ("--responses-store-size INTEGER RANGE", "[env var: SKIPPY_RESPONSES_STORE_SIZE; default: 10000; x>=0]", 10000),
    ("--responses-ttl SECONDS", "[env var: SKIPPY_RESPONSES_TTL; default: 2592000.0; x>0.0]", 2592000.0),
    ("--metrics / --no-metrics", "[env var: SKIPPY_METRICS; default: metrics]", True),
    ("--slots / --no-slots", "[env var: SKIPPY_SLOTS; default: slots]", True),
    ("--ssl-key-file FILE", "[env var: SKIPPY_SSL_KEY_FILE]", None),
    ("--ssl-cert-file FILE", "[env var: SKIPPY_SSL_CERT_FILE]", None),
    ("--no-webui", "[env var: SKIPPY_NO_WEBUI]", False),
    ("--reasoning-budget INTEGER RANGE", "[env var: SKIPPY_REASONING_BUDGET; default: -1; x>=-1]", -1),
    ("--reasoning-budget-message TEXT", "[env var: SKIPPY_REASONING_BUDGET_MESSAGE]", None),
    ("--consult PEER", "[env var: SKIPPY_CONSULT]", None),
    ("--consult-entropy FLOAT RANGE", "[env var: SKIPPY_CONSULT_ENTROPY; default: 3.5; x>=0.0]", 3.5),
    ("--consult-margin FLOAT RANGE", "[env var: SKIPPY_CONSULT_MARGIN; default: 0.2; x>=0.0]", 0.2),
    ("--consult-timeout FLOAT RANGE", "[env var: SKIPPY_CONSULT_TIMEOUT; default: 10.0; x>0.0]", 10.0),
    ("--consult-max-tokens INTEGER RANGE", "[env var: SKIPPY_CONSULT_MAX_TOKENS; default: 200; 1<=x<=8192]", 200),
    ("--consult-api-key KEY", "[env var: SKIPPY_CONSULT_API_KEY]", None),
    ("--consult-max-chars INTEGER RANGE", "[env var: SKIPPY_CONSULT_MAX_CHARS; default: 512; 16<=x<=65536]", 512),
    ("--props", "[env var: SKIPPY_PROPS]", False),
    ("--slot-save-path DIR", "[env var: SKIPPY_SLOT_SAVE_PATH]", None),
    # llama-server's presets: flags that stand for others where they are (no environment variable)
    *[(flag, "", False) for flag in ("--embd-gemma-default", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default",
                                     "--fim-qwen-7b-default", "--fim-qwen-7b-spec", "--fim-qwen-14b-spec",
                                     "--fim-qwen-30b-default", "--gpt-oss-20b-default", "--gpt-oss-120b-default",
                                     "--vision-gemma-4b-default", "--vision-gemma-12b-default", "--spec-default")],
]


def _options() -> list[click.Option]:
    return [p for p in serve.params if isinstance(p, click.Option) and p.name != "help"]


def _default(p: click.Option) -> object:
    return None if p.multiple else p.default  # click 8.2+ keeps an UNSET sentinel for multiple options


def test_serve_options_are_the_same_as_before() -> None:
    ctx = click.Context(serve)
    now = []
    for p in _options():
        flags, text = p.get_help_record(ctx)
        now.append((flags, text[text.rfind("  [") + 2:] if "  [" in text else "", _default(p)))
    assert now == BEFORE


def test_options_are_generated_from_the_settings_fields() -> None:
    by_name = {p.name: p for p in _options()}
    for cls in (EngineConfig, ServerSettings):
        for field in attrs.fields(cls):
            info = setting_info(field)
            if info is None or not info.flag:
                continue
            p = by_name.pop(field.name)  # every flag field has its option
            assert p.opts[0] == "--" + field.name.replace("_", "-")
            # llama-server's names (-np, -t, -fa), a " /-nr" alias the off side's (click's form)
            assert (*p.opts[1:], *(f" /{o}" for o in p.secondary_opts[1:])) == info.aliases
            assert p.envvar == "SKIPPY_" + field.name.upper()
            assert p.default == field.default and p.help == info.help
            assert p.show_envvar
    # the explicit adapters: not one settings field as it stands
    presets = {p.name for p in by_name.values() if not p.expose_value}  # llama-server's presets: no value
    assert sorted(presets) == sorted(flag[2:].replace("-", "_").replace(".", "_") for flag in PRESETS)
    assert sorted(set(by_name) - presets) == [
        "alias", "api_key", "api_key_file", "chat_template", "chat_template_kwargs", "cont_batching", "cors_origins",
        "ctx_size", "defrag_thold", "hf_repo", "host", "jinja", "keep_alive", "log_file", "log_format", "log_level",
        "lora", "lora_scaled", "max_loaded", "model", "models_dirs", "models_preset", "no_webui", "port"]


def test_readme_flags_table_matches_the_options() -> None:
    """The README lists the ten most used flags (docs/reference/flags.md, generated, lists them all): each
    row's flags, environment variable and default are the option's, and every flag it names exists."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| (`-[^|]+) \| (`SKIPPY_[^|]+) \| ([^|]+) \|", line)
        if m:
            flags = re.findall(r"`(--?[a-z][a-z-]*)`", m.group(1))
            envs = re.findall(r"`(SKIPPY_[A-Z_]+)`", m.group(2))
            for flag, env in zip(flags, envs if len(envs) == len(flags) else envs * len(flags), strict=False):
                rows[flag] = (env, m.group(3).strip())
    options = {name: p for p in _options() for name in (*p.opts, *p.secondary_opts)}
    assert not set(rows) - set(options), set(rows) - set(options)  # the README names no flag that does not exist
    assert len({options[flag].name for flag in rows}) >= 10
    shown = {"True": "on", "False": "off", "None": None}
    for flag, (env, default) in rows.items():
        p = options[flag]
        assert env == p.envvar, flag
        if isinstance(p.default, bool):
            assert default == shown[str(p.default)], flag
        elif isinstance(p.default, (int, float)):
            first = default.split(" / ")[-1] if flag == "--port" else default.split()[0]
            assert float(first.strip("`")) == p.default, flag
        elif isinstance(p.default, str):
            assert f"`{p.default}`" in default, flag
        elif isinstance(p.default, tuple) and p.default:  # --host, --model
            assert all(f"`{d}`" in default for d in p.default), flag
        elif isinstance(p.show_default, str):  # a default computed at start (--responses-store)
            assert f"`{p.show_default}`" == default, flag
        else:
            assert _default(p) is None, flag
            assert default.startswith(("none", "all cores", "the GGUF's", "all layers", "by free memory",
                                       "every GPU")), flag


@pytest.mark.parametrize("args,env,where,message", [
    (["--parallel", "0"], {}, "--parallel", "0 is not in the range 1<=x<=256"),
    (["--parallel", "257"], {}, "--parallel", "1<=x<=256"),
    (["--n-ctx", "15"], {}, "--n-ctx", "n_ctx must be 0 (the model's training context) or >= 16"),
    (["--n-ctx", "-1"], {}, "--n-ctx", "x>=0"),
    (["--step-tokens", "513"], {}, "--step-tokens", "8<=x<=512"),
    (["--flash-attn", "maybe"], {}, "--flash-attn", "'on', 'off', 'auto'"),
    (["--hook-timeout", "0"], {}, "--hook-timeout", "x>0.0"),
    (["--cache-type-k", "q2_k"], {}, "--cache-type-k", "'f16', 'bf16', 'f32', 'q8_0'"),
    ([], {"SKIPPY_CACHE_TYPE_V": "f8"}, "SKIPPY_CACHE_TYPE_V", "'f16', 'bf16'"),
    (["--hook-timeout", "nan"], {}, "--hook-timeout", "hook_timeout must be in the range x>0.0"),
    (["--high-entropy-threshold", "inf"], {}, "--high-entropy-threshold", "x>=0.0"),
    (["--hook-timeout", "inf"], {}, "--hook-timeout", "hook_timeout must be a finite number in the range x>0.0"),
    (["--hook-policy", "mypolicies"], {}, "--hook-policy", "hook_policy must be 'package.module:factory'"),
    (["--max-body-bytes", "1023"], {}, "--max-body-bytes", "x>=1024"),
    (["--request-timeout", "-1"], {}, "--request-timeout", "x>=0.0"),
    ([], {"SKIPPY_SIGNAL_WINDOW": "4097"}, "SKIPPY_SIGNAL_WINDOW", "1<=x<=4096"),
    ([], {"SKIPPY_THREADS": "0"}, "SKIPPY_THREADS", "x>=1"),
    ([], {"SKIPPY_MAX_TOOLS": "-1"}, "SKIPPY_MAX_TOOLS", "x>=0"),
    ([], {"SKIPPY_PARALLEL": "eight"}, "SKIPPY_PARALLEL", "'eight' is not a valid integer"),
    (["--api-key", "two words"], {}, "--api-key", "may not be empty or contain whitespace"),
    (["--chat-template-kwargs", "[1]"], {}, "--chat-template-kwargs", "must be a JSON object"),
    (["--chat-template-kwargs", "{"], {}, "--chat-template-kwargs", "not JSON"),
    (["--embeddings-batch", "300"], {}, "--embeddings-batch", "must be a multiple of 256"),
    (["--rerank", "--pooling", "mean"], {}, "--reranking", "reranking needs rank pooling, but pooling is 'mean'"),
    (["--alias", ""], {}, "--alias", "an alias must name the model"),
    (["--alias", "gpt", "--alias", "  "], {}, "--alias", "an alias must name the model"),
    (["--cors-origins", "notaurl"], {}, "--cors-origins", "'notaurl' is not an origin"),
    (["--cors-origins", "https://a.example,app.example"], {}, "--cors-origins", "'app.example' is not an origin"),
    (["--hook-url", "not a url"], {}, "--hook-url", "hook_url must be an http:// or https:// URL"),
    ([], {"SKIPPY_HOOK_URL": "ftp://x"}, "SKIPPY_HOOK_URL", "hook_url must be an http:// or https:// URL"),
    (["--slot-save-path", __file__], {}, "--slot-save-path", "slot_save_path must be a directory"),
])
def test_an_out_of_range_value_is_a_usage_error(args: list[str], env: dict, where: str, message: str,
                                                  serve_recorder: list) -> None:
    result = CliRunner().invoke(main, ["serve", *args], env=env)
    assert result.exit_code == 2, result.output
    assert where in result.output and message in result.output, result.output
    assert not serve_recorder  # nothing started


class _Calls(list):
    """The recorded ``serve`` calls; ``pool``: the keyword arguments of the models past the first."""

    def __init__(self) -> None:
        super().__init__()
        self.pool: list[dict] = []


@pytest.fixture
def serve_recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list:
    """Replace the model pull and the server by recorders; the list receives (config, host, port, settings)."""
    import skippy.http.serve
    import skippy.models

    calls = _Calls()
    gguf = tmp_path / "tiny.gguf"

    async def fake_serve(config, *, host, port, settings, **pool):
        calls.append((config, host, port, settings))
        calls.pool.append(pool)
        return 0

    monkeypatch.setattr(skippy.models, "ensure_model", lambda name: gguf if name == "tiny" else Path(name))
    monkeypatch.setattr(skippy.http.serve, "serve", fake_serve)
    for name in [n for n in __import__("os").environ if n.startswith("SKIPPY_") and n != "SKIPPY_HOME"]:
        monkeypatch.delenv(name)
    return calls


def _run(args: list[str], env: dict | None = None, calls: list | None = None):
    result = CliRunner().invoke(main, ["serve", "--model", "tiny", *args], env=env or {})
    assert result.exit_code == 0, (result.output, result.exception)
    assert calls is not None and len(calls) == 1
    return calls.pop()


def test_defaults_reach_the_engine_and_server_settings(serve_recorder: list) -> None:
    config, host, port, settings = _run([], calls=serve_recorder)
    assert (host, port) == (("127.0.0.1",), 8080)
    assert config.model.endswith("tiny.gguf") and config.model_name == "tiny"
    assert attrs.evolve(config, model="m", model_name=None) == EngineConfig(model="m")
    assert settings == ServerSettings() and settings.webui


def test_env_vars_and_flags_are_parsed_into_the_settings(serve_recorder: list, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    keys = tmp_path / "keys"
    keys.write_text("# keys\nsk-file\nsk-env\n", encoding="utf-8")
    env = {"SKIPPY_PARALLEL": "4", "SKIPPY_PREFIX_CACHE": "false", "SKIPPY_FLASH_ATTN": "on",
           "SKIPPY_HOOK_TIMEOUT": "0.5", "SKIPPY_HOOKS_DEFAULT_ON": "1", "SKIPPY_THREADS": "2",
           "SKIPPY_API_KEY": "sk-env sk-two", "SKIPPY_API_KEY_FILE": str(keys),
           "SKIPPY_CORS_ORIGINS": "https://a.example/,https://b.example", "SKIPPY_CHAT_TEMPLATE": str(template),
           "SKIPPY_CHAT_TEMPLATE_KWARGS": '{"enable_thinking": false}', "SKIPPY_MAX_BODY_BYTES": "2048",
           "SKIPPY_REQUEST_TIMEOUT": "0", "SKIPPY_PORT": "9001", "SKIPPY_LOG_LEVEL": "warning"}
    config, host, port, settings = _run(["--parallel", "2"], env, serve_recorder)  # a flag beats its env var
    assert (config.parallel, config.prefix_cache, config.flash_attn, config.threads) == (2, False, "on", 2)
    assert (config.hook_timeout, config.hooks_default_on, config.verbose) == (0.5, True, False)
    assert config.chat_template == "{{ messages }}" and config.chat_template_kwargs == {"enable_thinking": False}
    assert port == 9001
    assert settings.api_keys == ("sk-env", "sk-two", "sk-file")
    assert settings.cors_origins == ("https://a.example", "https://b.example")
    assert (settings.max_body_bytes, settings.request_timeout) == (2048, 0.0)
    config, _, _, _ = _run(["--log-level", "debug", "--no-prefix-cache", "--clamp-max-tokens"], None, serve_recorder)
    assert config.verbose and not config.prefix_cache and config.clamp_max_tokens  # the old flag still works
    config, _, _, _ = _run(["--no-clamp-max-tokens"], None, serve_recorder)
    assert not config.clamp_max_tokens  # strict: a max_tokens beyond the context is a 400


def test_kv_cache_flags_reach_the_engine(serve_recorder: list) -> None:
    config, _, _, _ = _run(["--cache-type-k", "q8_0", "--cache-type-v", "q4_0", "--kv-unified"], None, serve_recorder)
    assert (config.cache_type_k, config.cache_type_v, config.kv_unified) == ("q8_0", "q4_0", True)
    config, _, _, _ = _run([], {"SKIPPY_CACHE_TYPE_V": "bf16", "SKIPPY_FLASH_ATTN": "off"}, serve_recorder)
    assert (config.cache_type_k, config.cache_type_v, config.kv_unified) == ("f16", "bf16", False)


@pytest.mark.parametrize("args,env", [(["--cache-type-v", "q8_0", "--flash-attn", "off"], {}),
                                      (["--flash-attn", "off"], {"SKIPPY_CACHE_TYPE_V": "q4_0"})])
def test_a_quantized_v_cache_without_flash_attention_is_one_error_line(args: list[str], env: dict,
                                                                       serve_recorder: list) -> None:
    result = CliRunner().invoke(main, ["serve", "--model", "tiny", *args], env=env)
    assert result.exit_code == 1, result.output
    [line] = result.output.splitlines()
    assert line.startswith("error: --cache-type-v q") and "--flash-attn auto or on" in line, line
    assert not serve_recorder  # nothing started


def test_offload_flags_reach_the_engine(serve_recorder: list) -> None:
    config, *_ = _run([], calls=serve_recorder)  # defaults: llama.cpp's (all layers, which is none without a device)
    assert (config.n_gpu_layers, config.split_mode, config.main_gpu) == (None, "layer", 0)
    assert (config.tensor_split, config.device, config.rpc) == ((), (), ())
    config, *_ = _run(["-ngl", "99", "-sm", "row", "-mg", "1", "-ts", "3,1", "-dev", "CUDA0,CUDA1", "--rpc",
                       "127.0.0.1:50052, worker-2:50053"], calls=serve_recorder)  # llama-server's names
    assert (config.n_gpu_layers, config.split_mode, config.main_gpu) == (99, "row", 1)
    assert config.tensor_split == (3.0, 1.0) and config.device == ("CUDA0", "CUDA1")
    assert config.rpc == ("127.0.0.1:50052", "worker-2:50053")
    config, *_ = _run(["--n-gpu-layers", "-1", "--device", "none"],
                      {"SKIPPY_RPC": "10.0.0.2:50052", "SKIPPY_TENSOR_SPLIT": "1/2"}, serve_recorder)
    assert (config.n_gpu_layers, config.device, config.rpc, config.tensor_split) == (
        -1, ("none",), ("10.0.0.2:50052",), (1.0, 2.0))


@pytest.mark.parametrize("args,where,message", [
    (["-ngl", "-2"], "-ngl", "x>=-1"),
    (["--split-mode", "tensor"], "--split-mode", "'none', 'layer', 'row'"),
    (["--main-gpu", "-1"], "--main-gpu", "x>=0"),
    (["--tensor-split", "3,x"], "--tensor-split", "'x' is not a number"),
    (["-ts", "0,0"], "-ts", "at least one proportion must be > 0"),
    (["--device", "none,CUDA0"], "--device", "'none' (no offload) goes alone"),
    (["--rpc", "127.0.0.1"], "--rpc", "'127.0.0.1' is not HOST:PORT"),
    (["--rpc", "[::1]:50052"], "--rpc", "is not HOST:PORT"),
    (["--rpc", "host:70000"], "--rpc", "port 1-65535"),
])
def test_a_bad_offload_flag_is_a_usage_error(args: list[str], where: str, message: str,
                                             serve_recorder: list) -> None:
    result = CliRunner().invoke(main, ["serve", *args])
    assert result.exit_code == 2 and where in result.output and message in result.output, result.output
    assert not serve_recorder


def test_alias_n_ctx_zero_and_http_compat_flags(serve_recorder: list) -> None:
    config, _, _, settings = _run(["--alias", "gpt-4o", "--alias", "local", "--n-ctx", "0", "--strict-fields",
                                   "--sse-ping-interval", "2.5"], None, serve_recorder)
    assert config.model_alias == ("gpt-4o", "local") and config.n_ctx == 0
    assert settings.strict_fields and settings.sse_ping_interval == 2.5
    config, _, _, settings = _run([], {"SKIPPY_ALIAS": "a b", "SKIPPY_SSE_PING_INTERVAL": "0"}, serve_recorder)
    assert config.model_alias == ("a", "b") and settings.sse_ping_interval == 0.0 and not settings.strict_fields


def test_chat_template_file_is_closed(serve_recorder: list, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        config, *_ = _run(["--chat-template", str(template)], calls=serve_recorder)
        gc.collect()
    assert config.chat_template == "{{ messages }}"
    assert not [w for w in caught if issubclass(w.category, ResourceWarning) and str(template) in str(w.message)]


def test_unreadable_template_and_empty_key_file_are_usage_errors(serve_recorder: list, tmp_path: Path) -> None:
    template = tmp_path / "latin1.jinja"
    template.write_bytes(b"\xff{{ messages }}")
    result = CliRunner().invoke(main, ["serve", "--chat-template", str(template)])
    assert result.exit_code == 2 and "--chat-template" in result.output and "utf-8" in result.output
    keys = tmp_path / "keys"
    keys.write_text("# none\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["serve", "--api-key-file", str(keys)])
    assert result.exit_code == 2 and "holds no API key" in result.output
    assert not serve_recorder


def test_a_log_file_that_cannot_be_opened_is_a_usage_error(serve_recorder: list, tmp_path: Path) -> None:
    """It was a FileNotFoundError traceback."""
    result = CliRunner().invoke(main, ["serve", "--log-file", str(tmp_path / "no" / "such" / "x.log")])
    assert result.exit_code == 2 and "--log-file" in result.output and "No such file" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not serve_recorder


# -- llama-server's command line ------------------------------------------------------------------

def test_a_llama_server_command_line_works_as_it_is(serve_recorder: list, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    config, host, port, settings = _run(
        ["-c", "8192", "-np", "4", "-t", "2", "-fa", "on", "--port", "8081", "--host", "127.0.0.1,::1",
         "--host", "0.0.0.0", "--jinja", "--metrics", "--no-slots", "--no-webui", "-ngl", "0",
         "--chat-template-file", str(template), "--api-key", "sk-1"], calls=serve_recorder)
    assert (config.n_ctx, config.parallel, config.threads, config.flash_attn) == (2048, 4, 2, "on")  # 8192 / 4
    assert config.chat_template == "{{ messages }}"
    assert (host, port) == (("127.0.0.1", "::1", "0.0.0.0"), 8081)
    assert settings.metrics and not settings.slots and settings.api_keys == ("sk-1",)
    assert not settings.webui  # --no-webui: no playground at GET /
    config, *_ = _run(["-m", "tiny", "--ctx-size", "4096"], calls=serve_recorder)  # default 8 slots
    assert config.model.endswith("tiny.gguf") and config.n_ctx == 512
    _, _, _, settings = _run(["--no-metrics"], calls=serve_recorder)
    assert not settings.metrics
    config, *_ = _run(["-c", "2048", "-np", "2"], {"SKIPPY_N_CTX": "4096"}, serve_recorder)  # the flag wins
    assert config.n_ctx == 1024
    # llama-server's short forms of the KV cache, projector and backend sampling flags
    (tmp_path / "proj.gguf").write_bytes(b"GGUF")
    config, *_ = _run(["-ctk", "q8_0", "-ctv", "q8_0", "-kvu", "-bs", "-mm", str(tmp_path / "proj.gguf")],
                      calls=serve_recorder)
    assert (config.cache_type_k, config.cache_type_v, config.kv_unified, config.backend_sampling) == \
        ("q8_0", "q8_0", True, True)
    assert config.mmproj is not None and config.mmproj.endswith("proj.gguf")


def test_a_context_flag_beats_the_other_spellings_environment_variable(serve_recorder: list) -> None:
    """-c/--ctx-size and --n-ctx are two spellings of the context: the command line's beats the environment's,
    either way round (SKIPPY_CTX_SIZE with --n-ctx was refused as if both were on the command line); one source
    giving both is a usage error."""
    config, *_ = _run(["--n-ctx", "1024", "-np", "1"], {"SKIPPY_CTX_SIZE": "2048"}, serve_recorder)
    assert config.n_ctx == 1024
    config, *_ = _run(["-c", "2048", "-np", "2"], {"SKIPPY_N_CTX": "4096"}, serve_recorder)
    assert config.n_ctx == 1024
    result = CliRunner().invoke(main, ["serve", "-m", "tiny"], env={"SKIPPY_CTX_SIZE": "2048", "SKIPPY_N_CTX": "512"})
    assert result.exit_code == 2, result.output
    assert "give either SKIPPY_CTX_SIZE" in result.output and "SKIPPY_N_CTX" in result.output, result.output
    assert not serve_recorder


@pytest.mark.parametrize("args,message", [
    (["-c", "8192", "--n-ctx", "1024"], "not both"),
    (["-c", "64", "-np", "8"], "leaves 8 per sequence"),
    (["--ssl-key-file", "key.pem"], "--ssl-key-file and --ssl-cert-file go together"),
])
def test_llama_server_flags_that_cannot_work_are_usage_errors(args: list[str], message: str,
                                                              serve_recorder: list) -> None:
    result = CliRunner().invoke(main, ["serve", *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not serve_recorder


@pytest.mark.parametrize("flag", ["-ngld", "--control-vector", "-kvo"])
def test_an_unknown_llama_server_flag_is_an_error_naming_it(flag: str, serve_recorder: list) -> None:
    result = CliRunner().invoke(main, ["serve", "-m", "tiny", flag, "1"])
    assert result.exit_code == 2, result.output
    assert f"No such option '{flag}'" in result.output and "refuses the others rather than ignore them" in result.output
    assert not serve_recorder


def test_several_models_reach_the_server(serve_recorder: list, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("b.gguf", "A.GGUF", "notes.txt"):
        (models / name).write_bytes(b"GGUF")
    config, _, _, _ = _run(["--model", str(tmp_path / "x y.gguf"), "--models-dir", str(models), "--alias", "gpt",
                            "--max-loaded", "1", "--keep-alive", "2.5"], calls=serve_recorder)
    pool = serve_recorder.pool.pop()
    assert (config.model_name, config.model_alias) == ("tiny", ("gpt",))  # the first model is the default
    assert [(c.model_name, c.model_alias) for c in pool["more_models"]] == [("x y", ()), ("A", ()), ("b", ())]
    _run(["--model", "tiny"], calls=serve_recorder)  # a model named twice is served once
    assert serve_recorder.pool.pop()["more_models"] == []
    assert (pool["max_loaded"], pool["keep_alive"]) == (1, 2.5)
    # without --model, --models-dir's files alone are served (the first is the default)
    result = CliRunner().invoke(main, ["serve", "--models-dir", str(models)], env={})
    assert result.exit_code == 0, result.output
    config, pool = serve_recorder.pop()[0], serve_recorder.pool.pop()
    assert [config.model_name, *(c.model_name for c in pool["more_models"])] == ["A", "b"]
    # one model: as before (defaults: at most 4 loaded, never unloaded for idleness)
    _run([], calls=serve_recorder)
    assert serve_recorder.pool.pop() == {"more_models": [], "max_loaded": 4, "keep_alive": -1.0, "preload": []}


def test_a_projector_beside_a_model_in_models_dir_is_its_mmproj_not_a_model(serve_recorder: list,
                                                                          tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("eye.gguf", "eye.mmproj.gguf", "text.gguf", "orphan.mmproj.gguf"):
        (models / name).write_bytes(b"GGUF")
    result = CliRunner().invoke(main, ["serve", "--models-dir", str(models)], env={})
    assert result.exit_code == 0, result.output
    config, pool = serve_recorder.pop()[0], serve_recorder.pool.pop()
    served = [config, *pool["more_models"]]
    assert [(c.model_name, c.mmproj) for c in served] == [("eye", str(models / "eye.mmproj.gguf")), ("text", None)]
    # --mmproj is the first model's, and wins over a projector beside it
    (tmp_path / "x.gguf").write_bytes(b"GGUF")
    result = CliRunner().invoke(main, ["serve", "--models-dir", str(models), "--mmproj", str(tmp_path / "x.gguf")],
                                env={})
    config, pool = serve_recorder.pop()[0], serve_recorder.pool.pop()
    assert config.mmproj == str(tmp_path / "x.gguf") and pool["more_models"][0].mmproj is None


def test_an_alias_that_names_another_served_model_is_refused(serve_recorder: list, tmp_path: Path) -> None:
    """``--alias text`` on the first of two models served as eye and text: one name would reach two models
    (requests went to the first while /api/tags listed the other's)."""
    models = tmp_path / "models"
    models.mkdir()
    for name in ("eye.gguf", "text.gguf"):
        (models / name).write_bytes(b"GGUF")
    for alias in ("text", "TEXT", "text.gguf", "text:latest", "registry.ollama.ai/library/text:latest"):
        result = CliRunner().invoke(main, ["serve", "--models-dir", str(models), "--alias", alias], env={})
        assert result.exit_code == 2 and "--alias" in result.output and "a name must reach one model" in \
            result.output, result.output
    assert not serve_recorder
    result = CliRunner().invoke(main, ["serve", "--models-dir", str(models), "--alias", "picture"], env={})
    assert result.exit_code == 0, result.output
    assert serve_recorder.pop()[0].model_alias == ("picture",)


def test_a_lora_adapter_in_models_dir_is_not_served_as_a_model(serve_recorder: list, tmp_path: Path) -> None:
    from tests.tiny_models import ensure_tiny_lora

    models = tmp_path / "models"
    models.mkdir()
    ensure_tiny_lora(models, "a-adapter")  # sorts first: it would have been the default model
    for name in ("b.gguf", "c.gguf"):
        (models / name).write_bytes(b"GGUF")  # unreadable headers: served, checked when loaded
    result = CliRunner().invoke(main, ["serve", "--models-dir", str(models)], env={})
    assert result.exit_code == 0, result.output
    config, pool = serve_recorder.pop()[0], serve_recorder.pool.pop()
    assert [config.model_name, *(c.model_name for c in pool["more_models"])] == ["b", "c"]


def test_a_models_dir_file_and_a_link_to_it_are_one_model_under_the_files_name(serve_recorder: list,
                                                                                  tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "smol.gguf").write_bytes(b"GGUF")
    (models / "link-smol.gguf").symlink_to(models / "smol.gguf")  # sorts first
    (models / "z.gguf").write_bytes(b"GGUF")
    result = CliRunner().invoke(main, ["serve", "--models-dir", str(models)], env={})
    assert result.exit_code == 0, result.output
    config, pool = serve_recorder.pop()[0], serve_recorder.pool.pop()
    assert [config.model_name, *(c.model_name for c in pool["more_models"])] == ["smol", "z"]


PRESET = """version = 1
; settings every model shares
[*]
n-predict = 64
-np = 3

[tiny]
c = 4096
parallel = 2
no-mmap = true
alias = small
    smol

[coder]
model = {coder}
lora-scaled = {coder} 0.5
chat-template = chatml
mmproj = {mmproj}
load-on-startup = true
batch-size = 1024
"""


def test_a_models_preset_sets_each_models_flags(serve_recorder: list, tmp_path: Path) -> None:
    (tmp_path / "coder.gguf").write_bytes(b"GGUF")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    preset = tmp_path / "models.ini"
    preset.write_text(PRESET.format(coder=tmp_path / "coder.gguf", mmproj=tmp_path / "m.gguf"))
    config, _, _, _ = _run(["--models-preset", str(preset), "--n-predict", "9"], calls=serve_recorder)
    pool = serve_recorder.pool.pop()
    (coder,) = pool["more_models"]
    assert pool["preload"] == ["coder"]
    # [tiny]: -c over its own parallel; [*] below it; the command line (--n-predict 9) over both
    assert (config.model_name, config.n_ctx, config.parallel, config.mmap) == ("tiny", 2048, 2, False)
    assert config.model_alias == ("small", "smol") and config.n_predict == 9 and config.mmproj is None
    # [coder]: added by its `model` key, served as the section's name; [*]'s -np applies
    assert (coder.model_name, coder.model, coder.parallel, coder.n_batch) == ("coder", str(tmp_path / "coder.gguf"),
                                                                              3, 1024)
    assert coder.mmproj == str(tmp_path / "m.gguf") and "im_start" in coder.chat_template and coder.n_predict == 9
    assert coder.lora == ((str(tmp_path / "coder.gguf"), 0.5),) and config.lora == ()
    assert config.chat_template is None


@pytest.mark.parametrize("args, env, text, n_ctx", [
    (["--n-ctx", "1024"], {}, "[tiny]\nc = 4096\nparallel = 2\n", 1024),  # was refused: "not both"
    ([], {"SKIPPY_N_CTX": "1024"}, "[tiny]\nc = 4096\nparallel = 2\n", 1024),  # was 2048: the section's c
    ([], {}, "[*]\nc = 4096\n\n[tiny]\nn-ctx = 1024\nparallel = 2\n", 1024),  # was 2048: [*]'s c
    ([], {}, "[*]\nn-ctx = 1024\n\n[tiny]\nc = 4096\nparallel = 2\n", 2048),
    (["-c", "2048"], {}, "[tiny]\nn-ctx = 512\nparallel = 2\n", 1024),
    ([], {"SKIPPY_CTX_SIZE": "2048"}, "[*]\nn-ctx = 512\n\n[tiny]\nparallel = 2\n", 1024),
])
def test_a_presets_c_and_n_ctx_are_one_setting_of_the_usual_precedence(args: list[str], env: dict, text: str,
                                                                       n_ctx: int, serve_recorder: list,
                                                                       tmp_path: Path) -> None:
    """A section's c (total context) and n-ctx (per sequence) spell one setting: the spelling of the higher
    source wins, the command line (and SKIPPY_* variables) over the model's section over [*]."""
    preset = tmp_path / "models.ini"
    preset.write_text(text)
    config = _run([*args, "--models-preset", str(preset)], env, serve_recorder)[0]
    assert (config.n_ctx, config.parallel) == (n_ctx, 2)


@pytest.mark.parametrize("text, message", [
    ("[tiny]\nparalel = 2\n", "[tiny] paralel: not a per-model flag of skippy serve (did you mean 'parallel'?)"),
    ("[tiny]\nport = 9\n", "[tiny] port: a server-wide flag, not a model's"),
    ("[*]\napi-key = k\n", "[*] api-key: a server-wide flag"),
    ("[tiny]\nparallel = 0\n", "[tiny] parallel: "),
    ("[tiny]\nmmap = maybe\n", "is not a boolean"),
    ("[ghost]\nparallel = 2\n", "[ghost] names no served model (tiny); give it 'model = PATH'"),
    ("version = 2\n[tiny]\n", "version '2'"),
    ("parallel = 2\n[tiny]\n", "parallel before the first section: put settings every model shares in [*]"),
    ("[tiny]\nparallel = 2\nparallel = 3\n", "line 3: parallel is set twice in [tiny]"),
    ("[tiny]\nalias = a\nalias = b\n", "later ones indented (`alias = a` then `    b`)"),
    ("[tiny]\nparallel = 2\n[tiny]\n", "[line 3]: section 'tiny' already exists"),  # the file's own lines
    ("version = 1\nversion = 1\n[tiny]\n", "line 2: version is set twice before the first section"),
    ("[tiny]\nparallel = 2\nnp = 3\n", "parallel is set twice"),
    ("[tiny]\ncache-type-v = q8_0\nflash-attn = off\n", "[tiny] --cache-type-v q8_0 (a quantized V cache) needs"),
    ("[tiny]\nc = 20\nparallel = 4\n", "[tiny] Invalid value for '--ctx-size' / '-c': 20 tokens over 4 slots"),
    ("[*]\nc = 4096\nn-ctx = 1024\n", "[*] n-ctx: give either ctx-size/c (total context of all slots"),
    ("[*]\nload-on-startup = true\n", "[*]: 'model' and 'load-on-startup' belong in a model's section"),
    ("[other]\nmodel = {tmp}/notes.txt\n", "[other] model: {tmp}/notes.txt is not a GGUF file"),
    ("[other]\nmodel = tiny\nmmproj = {tmp}/no.mmproj.gguf\n", "[other] mmproj: Invalid value for '--mmproj'"),
])
def test_a_bad_models_preset_is_a_start_up_error_naming_it(text: str, message: str, serve_recorder: list,
                                                           tmp_path: Path) -> None:
    preset = tmp_path / "models.ini"
    (tmp_path / "notes.txt").write_text("not a model")
    preset.write_text(text.replace("{tmp}", str(tmp_path)))
    message = message.replace("{tmp}", str(tmp_path))
    result = CliRunner().invoke(main, ["serve", "--model", "tiny", "--models-preset", str(preset)], env={})
    assert result.exit_code == 1, result.output
    assert f"--models-preset {preset}" in result.output and message in result.output, result.output
    assert not serve_recorder  # nothing started


def test_the_command_lines_mmproj_is_the_first_models_and_a_sections_own_applies_to_its_model(
        serve_recorder: list, tmp_path: Path) -> None:
    """--mmproj, --alias and --lora on the command line name the first model; a preset section's own values
    still apply to its model (they were dropped when the command line gave the flag too). A section may serve
    the first model's file again under its own name, with its own settings (llama-server's router: a section
    is an instance)."""
    for name in ("qvl.gguf", "qvl.mmproj.gguf", "tiny.mmproj.gguf", "first.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    preset = tmp_path / "models.ini"
    preset.write_text(f"[qvl]\nmodel = {tmp_path / 'qvl.gguf'}\nmmproj = {tmp_path / 'qvl.mmproj.gguf'}\nalias = q\n\n"
                      f"[plain]\nmodel = tiny\n\n[again]\nmodel = tiny\nmmproj = {tmp_path / 'tiny.mmproj.gguf'}\n")
    config = _run(["--mmproj", str(tmp_path / "first.gguf"), "--alias", "first", "--models-preset", str(preset)],
                  calls=serve_recorder)[0]
    qvl, plain, again = serve_recorder.pool.pop()["more_models"]
    assert (config.mmproj, config.model_alias) == (str(tmp_path / "first.gguf"), ("first",))
    assert (qvl.model_name, qvl.mmproj, qvl.model_alias) == ("qvl", str(tmp_path / "qvl.mmproj.gguf"), ("q",))
    assert (plain.model_name, plain.mmproj, plain.model_alias, plain.model) == ("plain", None, (), config.model)
    assert (again.model_name, again.mmproj) == ("again", str(tmp_path / "tiny.mmproj.gguf"))


def test_a_models_preset_serves_a_reranker_beside_a_chat_model(serve_recorder: list, tmp_path: Path) -> None:
    (tmp_path / "bge.gguf").write_bytes(b"GGUF")
    preset = tmp_path / "models.ini"
    preset.write_text(f"[bge]\nmodel = {tmp_path / 'bge.gguf'}\nrerank = true\n")
    config = _run(["--models-preset", str(preset)], calls=serve_recorder)[0]
    (bge,) = serve_recorder.pool.pop()["more_models"]
    assert (bge.model_name, bge.reranking, config.reranking) == ("bge", True, False)
    preset.write_text("[tiny]\nreranking = true\npooling = mean\n")
    result = CliRunner().invoke(main, ["serve", "--model", "tiny", "--models-preset", str(preset)], env={})
    assert result.exit_code == 1 and "reranking needs rank pooling" in result.output, result.output


def test_lora_adapters_are_numbered_in_command_line_order_and_go_to_the_first_model(serve_recorder: list,
                                                                                    tmp_path: Path) -> None:
    a, b, c = (tmp_path / f"{n}.gguf" for n in "abc")
    for f in (a, b, c):
        f.write_bytes(b"GGUF")
    config = _run(["--lora", str(a), "--lora-scaled", str(b), "0.5", "--lora", str(c), "--lora-init-without-apply"],
                  calls=serve_recorder)[0]
    assert config.lora == ((str(a), 1.0), (str(b), 0.5), (str(c), 1.0)) and config.lora_init_without_apply
    assert _run([], calls=serve_recorder)[0].lora == ()
    for bad in (["--lora", str(tmp_path / "missing.gguf")], ["--lora-scaled", str(a), "nan"],
                ["--lora-scaled", str(a), "x"]):
        result = CliRunner().invoke(main, ["serve", "--model", "tiny", *bad], env={})
        assert result.exit_code == 2 and "lora" in result.output, result.output


@pytest.mark.parametrize("args, env", [(["--mmproj", "{missing}"], {}), (["-mm", "{missing}"], {}),
                                       ([], {"SKIPPY_MMPROJ": "{missing}"})])
def test_a_projector_file_that_is_not_there_is_a_usage_error(args: list[str], env: dict, serve_recorder: list,
                                                              tmp_path: Path) -> None:
    """--mmproj naming no file is refused while the flags are read, as --lora's is (exit 2, naming the flag);
    it used to pass, and the server stopped only after loading the model."""
    missing = str(tmp_path / "missing.mmproj.gguf")
    args = [a.replace("{missing}", missing) for a in args]
    env = {k: v.replace("{missing}", missing) for k, v in env.items()}
    result = CliRunner().invoke(main, ["serve", "--model", "tiny", *args], env=env)
    assert result.exit_code == 2, result.output
    assert "'--mmproj'" in result.output and f"'{missing}' does not exist" in result.output, result.output
    assert not serve_recorder


def test_the_model_environment_variable_is_one_path(serve_recorder: list) -> None:
    result = CliRunner().invoke(main, ["serve"], env={"SKIPPY_MODEL": "/models/with space.gguf"})
    assert result.exit_code == 0, result.output
    assert serve_recorder.pop()[0].model == "/models/with space.gguf"


@pytest.mark.parametrize("args, message", [
    (["--model", "tiny", "--model", "{other}/tiny.gguf"], "two models would be served as tiny"),
    (["--models-dir", "{empty}"], "no .gguf file in --models-dir"),
    (["--keep-alive", "nan"], "give a number of seconds"),
])
def test_unusable_model_lists_are_refused(args: list[str], message: str, serve_recorder: list,
                                          tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    args = [a.replace("{empty}", str(tmp_path / "empty")).replace("{other}", str(tmp_path / "empty")) for a in args]
    result = CliRunner().invoke(main, ["serve", *args], env={})
    assert result.exit_code in (1, 2) and message in result.output, result.output
    assert not serve_recorder


# -- make run, and where the README says the skippy command is --------------------------------------

def test_make_run_pulls_only_the_default_model() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on this machine")

    def pulls(target: str) -> list[str]:
        out = subprocess.run([make, "-n", target], cwd=README.parent, capture_output=True, text=True,
                             check=True).stdout
        return [line.split(" ||")[0] for line in out.splitlines() if line.startswith(".venv/bin/skippy pull")]

    assert pulls("run") == [".venv/bin/skippy pull"]  # the model it serves, not Gemma
    assert pulls("pull") == pulls("test") == [".venv/bin/skippy pull", ".venv/bin/skippy pull gemma-3-270m"]


def test_readme_says_where_the_skippy_command_is() -> None:
    text = README.read_text(encoding="utf-8")
    commands = text[text.index("### Commands"):text.index("| command | what it does |")]
    assert "`.venv/bin/`" in commands and "`source .venv/bin/activate`" in commands and "`pip install .`" in commands


# -- every command's --help ----------------------------------------------------------------------

def _help_pages() -> dict[str, str]:
    def page(*args: str):
        return CliRunner().invoke(main, [*args, "--help"], prog_name="skippy")

    pages = {"skippy": page(), **{f"skippy {name}": page(name) for name in main.commands}}
    for name, result in pages.items():
        assert result.exit_code == 0, (name, result.output)
    return {name: result.output for name, result in pages.items()}


def test_help_pages_show_no_rst_markup_and_optional_arguments_in_brackets() -> None:
    pages = _help_pages()
    assert {"skippy serve", "skippy run", "skippy pull", "skippy show"} <= set(pages)
    for name, text in pages.items():
        assert "``" not in text, (name, text)  # reStructuredText's inline literals read as 'x'
    assert "'/v1/chat/completions'" in pages["skippy serve"] and "'--keep-alive'" in pages["skippy serve"]
    assert "Usage: skippy run [OPTIONS] [MODEL] [PROMPT]...\n" in pages["skippy run"]  # MODEL has a default
    assert "Usage: skippy show [OPTIONS] MODEL\n" in pages["skippy show"]  # this one is required


def test_setting_help_texts_are_rendered_plain() -> None:
    """The flags generated from ``setting()`` help texts go through the same formatter (the generation
    point), whatever markup a setting's help text carries."""
    from skippy.cli import SkippyCommand, setting_option
    from skippy.engine.config import IsBool, setting

    @attrs.frozen
    class Demo:
        shiny: bool = setting(False, help="Make it shine (``--dull`` undoes it; see ``/props``).", check=IsBool())

    cmd = setting_option(attrs.fields(Demo).shiny)(SkippyCommand("demo", callback=lambda **kw: None))
    text = CliRunner().invoke(cmd, ["--help"]).output
    assert "Make it shine ('--dull' undoes it; see '/props')." in text and "``" not in text, text


def test_consult_peers_are_repeatable_and_checked_at_start_up(serve_recorder: list) -> None:
    config, _, _, _ = _run(["--consult", "http://127.0.0.1:9/v1", "--consult", "https://h", "--consult-entropy",
                            "0"], calls=serve_recorder)
    assert config.consult == ("http://127.0.0.1:9/v1", "https://h") and config.consult_entropy == 0.0
    for peer, words in (("llama", "is neither a model this server serves"), ("tiny", "cannot consult itself"),
                        ("ftp://h", "http://")):
        result = CliRunner().invoke(main, ["serve", "--model", "tiny", "--consult", peer])
        assert result.exit_code == 2 and words in result.output, result.output
    assert not serve_recorder


def test_a_negative_temp_and_seed_start_the_server_as_llama_servers_do(serve_recorder: list) -> None:
    """llama-server's --temp takes a temperature below 0 (greedy) and -s any integer (std::stoul into its
    uint32_t seed: -5 is 4294967291, -1 a random one)."""
    config = _run(["--temp", "-1", "-s", "-5"], calls=serve_recorder)[0]
    assert (config.temperature, config.seed) == (-1.0, -5)
    assert dict(config.sampling_defaults)["seed"] == 4294967291
    assert "seed" not in dict(_run(["-s", "-1"], calls=serve_recorder)[0].sampling_defaults)
