# skippy-trio developer tasks.
#
#   make venv    .venv with the package (editable) and its test extras; llama-cpp-python is built
#                with llama.cpp's RPC backend (GGML_RPC, for `skippy rpc-worker` / `serve --rpc`);
#                GPU=cuda|vulkan|metal adds that GPU backend (README, "GPU offload"), e.g.
#                `make venv GPU=cuda`
#   make pull    download the default model and Gemma 3 270M (the second tested model) into the
#                cache ($SKIPPY_HOME or ~/.cache/skippy); without network the Gemma tests skip
#   make run     pull the default model only, then serve it (SERVE_ARGS="--port 8080 ..." to pass flags);
#                the `skippy` command is then .venv/bin/skippy (`source .venv/bin/activate` puts it on PATH)
#   make test    lint-imports (architecture contracts), ruff check, mypy, the documentation build
#                (mkdocs build --strict: broken links fail), then the test suite
#                (PYTEST_ARGS="-k foo" to pass flags to pytest)
#   make test-fast  the unit tests without the slow ones (those loading the real model; `-m "not slow"`):
#                a check before pushing, under a minute; not a substitute for make test
#   make lint    lint-imports, ruff check and mypy only
#   make docs    serve the documentation site (mkdocs.yml, docs/) on http://127.0.0.1:8000, rebuilt on edits
#   make docs-build  build it into site/ with mkdocs build --strict (what make test runs)
#   make bench-peer   build llama-server from the pinned llama-cpp-python sdist's llama.cpp, once,
#                into $SKIPPY_HOME/llama-server/<version>/ (~12 min on 2 cores): the benchmarks' peer
#   make gpu-bundle  gpu-bundle/ (ignored, under 64 MiB with the working tree): the trimmed llama.cpp source,
#                wheels for the GPU machine's Python 3.12, the models' skeletons and bench/gpu/run.sh, which builds
#                llama.cpp with CUDA there, runs the GPU tests and the benchmarks against llama-server in one
#                command (docs/guides/gpu-rpc.md, "The GPU run"); GPU=none bench/gpu/run.sh OUT is its dry run here
#   make bench   run the decode benchmark, skippy vs raw llama.cpp and llama-server (installs the bench extras)
#   make bench-burst  c256 connect burst, skippy vs llama-server and llama-cpp-python's server
#                (BURST_ARGS="--quick ...")
#   make bench-gpu-proxy  the burst ladder (c1 to c256, 64 slots, two reps) on tiny-dense, a generated model whose
#                64-sequence step takes ~6 ms on 2 cores (a small model's regime on a GPU, where the host's work per step
#                and token decides): skippy, skippy --backend-sampling and llama-server (BURST_ARGS adds flags)
#   make bench-scaleout  c64 burst: 1 replica vs 2 behind deploy/haproxy.cfg, and single-stream tok/s of
#                a model split over 2 skippy rpc-worker processes vs local (needs haproxy; SCALEOUT_ARGS="--quick")
#   make soak    mixed-load soak (bench/soak_mixed.py): 32 clients for 20 min of chat, completions, Responses
#                chains, Anthropic, embeddings, disconnects and bad inputs against one server; fails on any
#                5xx (SOAK_ARGS="--duration 120 ..."); not part of make test
#   make bench-embeddings  /v1/embeddings inputs/s vs llama-cpp-python's create_embedding, and the ITL of
#                running streams beside embedding batches (EMBEDDINGS_ARGS="--reps 1 ...")
#   make bench-rerank  /v1/rerank pairs/s vs llama.cpp's rank pooling called directly, on a generated
#                cross-encoder of ms-marco-MiniLM-L-6's size (RERANK_ARGS="--reps 1")
#
# The venv is (re)installed only when the content of pyproject.toml changes
# (not its mtime, which git checkouts bump): each install
# leaves a stamp .venv/.stamp-<extras>-<hash of pyproject.toml>.
# llama-cpp-python is compiled from source on its first install (several
# minutes on 2 cores); pip caches the built wheel for later installs. pip keys
# that cache by the sdist, not by CMAKE_ARGS or CFLAGS, so a cached wheel built
# without RPC (or without the GPU asked for, or with the AMX kernels) would be
# reused silently: after each install `python -m skippy.engine.runtime.backends`
# checks the build, and if it does not match removes the wheel from pip's cache,
# rebuilds llama-cpp-python once, and fails clearly if it still does not match.

PYTHON ?= python3
COMMA := ,
VENV ?= .venv
BIN := $(VENV)/bin
NPROC := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
PYPROJECT_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
STAMP_TEST := $(VENV)/.stamp-test-$(PYPROJECT_HASH)
STAMP_BENCH := $(VENV)/.stamp-bench-$(PYPROJECT_HASH)
SERVE_ARGS ?=
PYTEST_ARGS ?=
BURST_ARGS ?=
EMBEDDINGS_ARGS ?=
RERANK_ARGS ?=
SCALEOUT_ARGS ?=
SOAK_ARGS ?=
# GPU backend of the llama-cpp-python build: empty (CPU only), cuda, vulkan or metal.
GPU ?=
GPU_CMAKE_ARGS_cuda := -DGGML_CUDA=ON
GPU_CMAKE_ARGS_vulkan := -DGGML_VULKAN=ON
GPU_CMAKE_ARGS_metal := -DGGML_METAL=ON
ifneq ($(GPU),)
ifeq ($(GPU_CMAKE_ARGS_$(GPU)),)
$(error GPU=$(GPU) is not one of: cuda vulkan metal)
endif
endif
# CMAKE_ARGS from the environment come last, so they can override these.
LLAMA_CMAKE_ARGS := -DGGML_RPC=ON $(GPU_CMAKE_ARGS_$(GPU)) $(CMAKE_ARGS)
# llama.cpp's AMX kernels, which its -march=native build turns on for Sapphire Rapids and later x86-64
# CPUs, segfault in ggml_backend_amx_mul_mat on the first multi-token batch (llama.cpp issue 20824, open;
# seen on a 2-core Sapphire Rapids VM, in plain llama-cpp-python too): x86-64 builds leave them out
# (CMake takes CFLAGS/CXXFLAGS from the environment), and the backend check after the install
# (`noamx`) rebuilds a cached wheel that has them.
ifeq ($(shell uname -m),x86_64)
LLAMA_CFLAGS := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
NOAMX := noamx
endif
LLAMA_BUILD_ENV = CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' CFLAGS='$(LLAMA_CFLAGS) $(CFLAGS)' CXXFLAGS='$(LLAMA_CFLAGS) $(CXXFLAGS)' \
	CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC)
LLAMA_PIN := $(shell sed -n 's/^ *"\(llama-cpp-python==[^"]*\)".*/\1/p' pyproject.toml | head -n1)

# pip install of the project; $(1) = extras, $(2) = stamps to write (any
# older stamps are removed: they belong to another pyproject.toml).
define install
	@test -x $(BIN)/python || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --upgrade pip
	$(LLAMA_BUILD_ENV) $(BIN)/python -m pip install -e '.[$(1)]'
	@$(BIN)/python -m skippy.engine.runtime.backends rpc $(GPU) $(NOAMX) || { \
	  echo "llama-cpp-python does not match the build asked for (a cached wheel built with other flags?): removing it from pip's cache, rebuilding $(LLAMA_PIN)"; \
	  $(BIN)/python -m pip cache remove 'llama_cpp_python*' >/dev/null 2>&1; \
	  $(LLAMA_BUILD_ENV) $(BIN)/python -m pip install \
	    --force-reinstall --no-deps --no-binary llama-cpp-python '$(LLAMA_PIN)' && \
	  $(BIN)/python -m skippy.engine.runtime.backends rpc $(GPU) $(NOAMX); } || { \
	  echo "error: llama-cpp-python was built without the backends above (CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)')" >&2; exit 1; }
	@rm -f $(VENV)/.stamp-*
	@touch $(2)
endef

.PHONY: venv venv-bench pull pull-default run lint docs docs-build test test-fast bench bench-consult bench-burst bench-gpu-proxy bench-peer bench-embeddings bench-rerank bench-scaleout soak gpu-bundle

venv: $(STAMP_TEST)

venv-bench: $(STAMP_BENCH)

$(STAMP_TEST):
	$(call install,test,$@)

$(STAMP_BENCH):
	$(call install,test$(COMMA)bench,$@ $(STAMP_TEST))

# the default model alone: what `make run` serves
pull-default: venv
	$(BIN)/skippy pull

pull: pull-default
	@$(BIN)/skippy pull gemma-3-270m || echo "warning: could not pull gemma-3-270m; its integration tests will skip" >&2

run: venv pull-default
	$(BIN)/skippy serve $(SERVE_ARGS)

# The import contracts, ruff's rules and mypy's settings are in pyproject.toml ([tool.importlinter],
# [tool.ruff], [tool.mypy]; mypy checks the files listed there).
lint: venv
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check skippy tests bench
	$(BIN)/mypy

# The documentation site: the flag reference is generated from the settings at build time (docs/hooks.py).
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about MkDocs 2.0, printed on every build.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs-build: venv
	$(MKDOCS) build --strict

docs: venv
	$(MKDOCS) serve

test: lint docs-build pull
	@$(BIN)/python -m pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit code 5)" >&2; fi; \
	exit $$rc

# tests/unit without the tests marked slow (pyproject.toml registers the markers; tests/conftest.py applies
# integration and browser); a few fast unit tests read the default model's file.
test-fast: venv pull-default
	$(BIN)/python -m pytest -q tests/unit -m "not slow" $(PYTEST_ARGS)

bench-peer: venv
	bench/build_llama_server.sh $(BIN)/python

bench: venv-bench pull bench-peer
	$(BIN)/python bench/bench_decode.py
	$(BIN)/python bench/bench_hooks.py

# the consult benchmark: SmolLM2 alone, SmolLM2 consulting Gemma 3 270M, Gemma alone (CONSULT_ARGS="--limit 20",
# "--thresholds" to sweep --consult-entropy/--consult-margin pairs)
CONSULT_ARGS ?=
bench-consult: venv-bench pull
	$(BIN)/python bench/bench_consult.py $(CONSULT_ARGS)

bench-burst: venv-bench pull bench-peer
	$(BIN)/python bench/bench_burst.py $(BURST_ARGS)

bench-gpu-proxy: venv-bench pull bench-peer
	$(BIN)/python bench/bench_burst.py --arms skippy,llama-server --variant skippy-bs=--backend-sampling \
		--workloads short --concurrency 1,16,64,256 --parallel 64 --n-ctx 512 --max-tokens 64 --reps 2 \
		--model "$$($(BIN)/python -c 'from pathlib import Path; from tests.tiny_models import ensure_tiny; \
		print(ensure_tiny("dense", Path("bench/out/models")))')" $(BURST_ARGS)

bench-embeddings: venv-bench pull
	$(BIN)/python bench/bench_embeddings.py $(EMBEDDINGS_ARGS)

bench-rerank: venv-bench pull-default
	$(BIN)/python bench/bench_rerank.py $(RERANK_ARGS)

soak: venv pull
	$(BIN)/python bench/soak_mixed.py $(SOAK_ARGS)

bench-scaleout: venv pull
	$(BIN)/python bench/bench_scaleout.py $(SCALEOUT_ARGS)

# the GPU run's bundle (bench/gpu/bundle.sh): needs both models in the cache (pull) for their skeletons
gpu-bundle: venv pull
	bench/gpu/bundle.sh $(BIN)/python
