"""Ollama's model-management replies and names without I/O (skippy/engine/protocols/ollama/models.py), the
registry's Ollama names, the /api/copy aliases beside the cache, the typed GGUF metadata, and the model pool's
name lookup. The routes themselves run against the real server with the official ``ollama`` client:
tests/integration/test_ollama_models.py.
"""

from __future__ import annotations

import datetime
import os

import msgspec
import pytest

from skippy.actors.pool import ModelPool, PoolModel
from skippy.engine.config import EngineConfig
from skippy.engine.errors import ModelNotFound
from skippy.engine.protocols.ollama import models as om
from skippy.engine.protocols.ollama.model_wire import ShowRequest
from skippy.models import REGISTRY, add_alias, alias_target, gguf_metadata, lookup, read_aliases, remove_alias

MODEL = os.path.expanduser("~/.cache/skippy/models/SmolLM2-135M-Instruct.Q4_1.gguf")  # `skippy pull` (make test)
FACTS = om.ModelFacts(name="smollm2:135m", path="/m/SmolLM2.gguf", size=98_362_432, modified=0.0, digest="ab" * 32,
                      metadata={"general.architecture": "llama", "general.name": "SmolLM2",
                                "tokenizer.chat_template": "{{ x }}", "llama.context_length": 8192,
                                "general.license": "apache-2.0", "tokenizer.ggml.tokens": []},
                      n_params=134_515_008, quantization="Q4_1")


@pytest.mark.parametrize(("name", "expected"), [
    ("gemma3:270m", ("gemma3:270m",)),
    ("smollm2:latest", ("smollm2:latest", "smollm2")),
    ("library/smollm2:135m", ("library/smollm2:135m", "smollm2:135m")),
    ("registry.ollama.ai/library/smollm2:LATEST", ("registry.ollama.ai/library/smollm2:LATEST", "smollm2:LATEST",
                                                   "smollm2")),
    ("  SmolLM2-135M-Instruct  ", ("SmolLM2-135M-Instruct",)),
    ("hf.co/owner/repo:Q4_K_M", ("hf.co/owner/repo:Q4_K_M",)),
    ("", ()),
])
def test_name_candidates_drop_the_library_prefix_and_the_latest_tag(name: str, expected: tuple[str, ...]) -> None:
    assert om.name_candidates(name) == expected


@pytest.mark.parametrize("name", ["smollm2:135m", "my-smol", "my/copy", "my/copy:v1.2", "example.com/team/m:7b",
                                  "registry.ollama.ai/library/smollm2:135m", "hf.co/owner/repo:Q4_K_M", "a_b.c-d",
                                  "x" * 128])
def test_valid_names_follow_ollamas_grammar_with_a_namespace(name: str) -> None:
    assert om.valid_name(name)


@pytest.mark.parametrize("name", ["", "a b", "..", "../x", "a/../b", "x..y", "/abs", "/etc/passwd", "a//b", "a/",
                                  "/", ".", "a/./b", "x\\y", "ns.dot/m", "h/n.s/m", "a:b:c", "m:", ":t", "a/b/c/d",
                                  "h:80/n/m", "m+Q4_0", "m@sha256-00", "x" * 129, "caf\u00e9"])
def test_invalid_names_include_every_path_trick(name: str) -> None:
    assert not om.valid_name(name)


def test_display_name_adds_the_latest_tag_and_not_found_quotes_as_go() -> None:
    assert om.display_name("smollm2:135m") == "smollm2:135m"
    assert om.display_name("SmolLM2-135M-Instruct") == "SmolLM2-135M-Instruct:latest"
    assert om.display_name("localhost:8080/m") == "localhost:8080/m:latest"  # a port is no tag
    assert om.not_found('a"b') == 'model "a\\"b" not found'


@pytest.mark.parametrize(("n", "text"), [(134_515_008, "135M"), (268_098_176, "268M"), (7_615_616_512, "7.6B"),
                                         (8_030_261_248, "8.0B"), (12_345, "12K"), (999, "999"),
                                         (1_500_000_000_000, "1.5T"), (45_600_000, "45.6M")])
def test_parameter_size_is_written_as_ollama_writes_it(n: int, text: str) -> None:
    assert om.human_number(n) == text


def test_rfc3339_is_utc_with_microseconds_and_clamps_far_futures() -> None:
    assert om.rfc3339(0.5) == "1970-01-01T00:00:00.500000Z"
    assert datetime.datetime.fromisoformat(om.rfc3339(1.7e9)).tzinfo is not None
    assert om.rfc3339(1e13).startswith("9999-12-31T23:59:59")


def test_tags_entry_and_details_from_the_gguf_facts() -> None:
    entry = msgspec.to_builtins(om.tag_model(FACTS))
    assert entry == {"name": "smollm2:135m", "model": "smollm2:135m", "modified_at": "1970-01-01T00:00:00.000000Z",
                     "size": 98_362_432, "digest": "ab" * 32,
                     "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                                 "parameter_size": "135M", "quantization_level": "Q4_1"}}
    unknown = om.model_details(om.ModelFacts(name="x", path="x", size=1, modified=0, digest="", metadata={},
                                             n_params=0))
    assert (unknown.family, unknown.families, unknown.parameter_size) == ("", [], "")


def test_show_reply_hides_the_name_and_template_keys_and_writes_a_modelfile() -> None:
    params = [("num_ctx", 2048), ("temperature", 0.8), ("stop", "<|im_end|>")]
    reply = om.show_reply(FACTS, template="{{ messages }}", caps=["completion"], params=params)
    info = reply.model_info
    assert "general.name" not in info and "tokenizer.chat_template" not in info
    assert info["general.parameter_count"] == 134_515_008 and info["llama.context_length"] == 8192
    assert reply.template == "{{ messages }}" and reply.license == "apache-2.0"
    lines = reply.modelfile.splitlines()
    assert "FROM /m/SmolLM2.gguf" in lines and 'TEMPLATE """{{ messages }}"""' in lines
    assert "PARAMETER num_ctx 2048" in lines and 'PARAMETER stop "<|im_end|>"' in lines
    assert 'LICENSE """apache-2.0"""' in lines and "# FROM smollm2:135m" in lines
    assert reply.parameters.splitlines() == [f"{'num_ctx':<30} 2048", f"{'temperature':<30} 0.8",
                                             f"{'stop':<30} \"<|im_end|>\""]
    kept = om.show_reply(FACTS, template="", caps=[], params=[]).modelfile
    assert "TEMPLATE" not in kept and "PARAMETER" not in kept


def test_capabilities_in_ollamas_order() -> None:
    assert om.capabilities(native_tools=False, thinking=False, embeddings=False) == ["completion"]
    assert om.capabilities(native_tools=True, thinking=True, embeddings=True) == ["completion", "tools", "thinking",
                                                                                  "embedding"]
    assert om.capabilities(native_tools=True, thinking=False, embeddings=True, completion=False) == ["embedding"]
    assert om.generates({"general.architecture": "llama"}) and om.generates(FACTS.metadata)
    assert not om.generates({"general.architecture": "bert", "bert.attention.causal": False})


def test_expiry_follows_the_keep_alive_residency() -> None:
    assert om.expires_at(wall_now=1000.0, clock_now=50.0, last_used=40.0, users=0, keep_alive=-1) is None
    assert om.expires_at(wall_now=1000.0, clock_now=50.0, last_used=40.0, users=0, keep_alive=300) == 1290.0
    assert om.expires_at(wall_now=1000.0, clock_now=50.0, last_used=40.0, users=2, keep_alive=300) == 1300.0
    assert om.expires_at(wall_now=1000.0, clock_now=500.0, last_used=40.0, users=0, keep_alive=300) == 1000.0
    forever = om.process_model(FACTS, size=10, size_vram=0, expires=None, wall_now=0.0, context_length=2048)
    assert forever.expires_at.startswith("2262-04-11")  # Go's time.Now().Add(math.MaxInt64) from 1970
    soon = om.process_model(FACTS, size=10, size_vram=4, expires=60.0, wall_now=0.0, context_length=2048)
    assert (soon.expires_at, soon.size, soon.size_vram, soon.context_length) == ("1970-01-01T00:01:00.000000Z", 10,
                                                                                 4, 2048)


def test_pull_progress_line_names_the_digest_as_ollama() -> None:
    line = msgspec.to_builtins(om.pulling("0123456789abcdef" * 4, 100, 40))
    assert line == {"status": "pulling 0123456789ab", "digest": "sha256:" + "0123456789abcdef" * 4, "total": 100,
                    "completed": 40}


def test_show_request_takes_the_deprecated_name_and_ignores_other_fields() -> None:
    req = msgspec.json.decode(b'{"name": "x", "options": {"num_ctx": 4}}', type=ShowRequest)
    assert (req.model, req.name, req.verbose) == ("", "x", False)


def test_registry_models_have_their_ollama_names() -> None:
    assert lookup("smollm2:135m") is REGISTRY["SmolLM2-135M-Instruct"]
    assert lookup("GEMMA3:270M") is REGISTRY["gemma-3-270m"]
    assert {spec.ollama for spec in REGISTRY.values()} == {"smollm2:135m", "gemma3:270m"}
    assert lookup("smollm2:1.7b") is None


def test_copy_aliases_live_beside_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SKIPPY_HOME", str(tmp_path))
    assert read_aliases() == {} and alias_target("x") is None and not remove_alias("x")
    add_alias("My-Copy", "SmolLM2-135M-Instruct")
    add_alias("other", "gemma-3-270m")
    assert alias_target("my-copy") == "SmolLM2-135M-Instruct"
    add_alias("MY-COPY", "gemma-3-270m")  # replaced, case-insensitive
    assert read_aliases() == {"MY-COPY": "gemma-3-270m", "other": "gemma-3-270m"}
    assert remove_alias("my-copy") and read_aliases() == {"other": "gemma-3-270m"}
    (tmp_path / "models" / "aliases.json").write_text("[not an object")
    assert read_aliases() == {}


def test_gguf_metadata_is_typed_and_leaves_out_long_arrays_unless_asked() -> None:
    meta, n_params = gguf_metadata(MODEL)
    assert meta["general.architecture"] == "llama" and meta["llama.context_length"] == 8192
    assert meta["general.file_type"] == 3 and isinstance(meta["llama.rope.freq_base"], float)
    assert meta["tokenizer.ggml.tokens"] == [] and meta["general.languages"] == ["en"]
    assert n_params == 134_515_008 and not any(k.startswith("GGUF.") for k in meta)
    full, _ = gguf_metadata(MODEL, max_array=None)
    assert len(full["tokenizer.ggml.tokens"]) == 49152 and full["tokenizer.ggml.tokens"][0] == "<|endoftext|>"


def test_the_pool_answers_ollama_spellings_and_copies(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    monkeypatch.setenv("SKIPPY_HOME", str(home))
    for spec in REGISTRY.values():
        (home / "models" / spec.filename).symlink_to(tmp_path / spec.filename)
    pool = ModelPool([PoolModel.of(EngineConfig(model=str(home / "models" / s.filename))) for s in REGISTRY.values()])
    smol, gemma = pool.ids()
    for name in ("smollm2:135m", "library/smollm2:135m", "registry.ollama.ai/library/smollm2:135m", "smollm2:latest"):
        assert pool.match(name) == smol, name
    assert pool.match("gemma3:270m") == gemma and pool.match("Gemma3:270M") == gemma
    with pytest.raises(ModelNotFound):
        pool.match("my-copy")
    add_alias("my-copy", "gemma-3-270m")
    assert pool.match("my-copy:latest") == gemma and pool.answers("my-copy")
    assert pool.lookup("llama3:8b") is None


async def test_keys_guard_the_model_routes_but_not_the_version_or_the_root_path() -> None:
    from skippy.http.app import AppState, create_app
    from skippy.http.settings import ServerSettings

    c = create_app(AppState(), ServerSettings(api_keys=("sk-k",))).test_client()
    assert (await c.get("/api/version")).status_code == 200
    root = await c.get("/")
    assert root.status_code == 200 and await root.get_data() == b"Ollama is running"
    for method, path in (("GET", "/api/tags"), ("POST", "/api/show"), ("GET", "/api/ps"), ("POST", "/api/pull"),
                         ("DELETE", "/api/delete"), ("POST", "/api/copy")):
        assert (await c.open(path, method=method)).status_code == 401, path
    loading = await c.get("/api/tags", headers={"Authorization": "Bearer sk-k"})  # no model yet
    assert loading.status_code == 503 and isinstance((await loading.get_json())["error"], str)


def test_a_copy_of_the_registry_file_elsewhere_is_that_registry_model(tmp_path, monkeypatch) -> None:
    """The registry model served by a path outside $SKIPPY_HOME/models (the default cache while SKIPPY_HOME names
    another) keeps the registry's names: its file name and size are the registry's; a renamed file is not it."""
    from skippy.models import registry_file

    monkeypatch.setenv("SKIPPY_HOME", str(tmp_path / "home"))
    smol = REGISTRY["SmolLM2-135M-Instruct"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy = elsewhere / smol.filename
    with open(copy, "wb") as f:
        f.truncate(smol.size)  # sparse: the size alone
    assert registry_file(copy) is smol
    (elsewhere / "renamed.gguf").symlink_to(copy)
    assert registry_file(elsewhere / "renamed.gguf") is None
    other = tmp_path / "other"
    other.mkdir()
    (other / smol.filename).write_bytes(b"GGUF")  # the registry's name, another size: another model
    assert registry_file(other / smol.filename) is None and registry_file(tmp_path / "missing.gguf") is None
    pool = ModelPool([PoolModel.of(EngineConfig(model=str(copy)))])
    assert pool.lookup("smollm2:135m") == pool.default == "SmolLM2-135M-Instruct.Q4_1"
    assert pool.lookup("smollm2") == pool.default


def test_two_models_of_one_registry_file_do_not_share_its_names(tmp_path, monkeypatch) -> None:
    """``-m smollm2`` and a preset section ``[cold]`` serving the same file: the registry's names (``smollm2:135m``)
    reach the model served under the registry name, ``cold`` answers to its own (``/api/tags`` lists it as
    ``cold:latest``); without a model of the registry name, the first model of the file holds them."""
    from skippy.actors.pool import pool_models

    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    monkeypatch.setenv("SKIPPY_HOME", str(home))
    smol = REGISTRY["SmolLM2-135M-Instruct"]
    path = str(home / "models" / smol.filename)
    (home / "models" / smol.filename).symlink_to(tmp_path / smol.filename)
    default = EngineConfig(model=path, model_name=smol.name)
    cold = EngineConfig(model=path, model_name="cold")
    for configs in ([default, cold], [cold, default]):
        pool = ModelPool(pool_models(configs))
        for name in ("smollm2:135m", "smollm2", "SmolLM2-135M-Instruct", "library/smollm2:135m"):
            assert pool.match(name) == smol.name, (name, configs)
        assert pool.match("cold:latest") == "cold"
        assert "smollm2:135m" not in pool.model("cold").names
    first, second = pool_models([cold, EngineConfig(model=path, model_name="warm")])
    assert "smollm2:135m" in first.names and "smollm2:135m" not in second.names
