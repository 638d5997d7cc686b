#!/usr/bin/env bash
# The GPU run (issue 43), one command: build llama.cpp with CUDA, install skippy from wheels, run the GPU
# tests and the benchmarks against llama-server, print one table of ratios last.
#
#   bench/gpu/run.sh OUTDIR            # on a CUDA machine, from the repository root, after `make gpu-bundle`
#   GPU=none bench/gpu/run.sh OUTDIR   # the dry run (tests/unit/test_gpu_run.py): no CUDA, this venv, one level
#
# Phases, each timed and bounded (its own cap, and never past BUDGET_S from the start less a reserve for
# the table): a phase that fails or times out is recorded and the later ones still run where they can;
# a phase that no longer fits is skipped. OUTDIR/phases.tsv lists them, OUTDIR/summary.md holds the table.
#
#   build    (GPU=cuda) the trimmed llama.cpp of the bundle (the pinned llama-cpp-python sdist's, `make
#            gpu-bundle`) with CUDA for this machine's GPU only (CMAKE_CUDA_ARCHITECTURES=native), GGML_RPC,
#            shared libraries, ninja on every core, once: the libraries llama-cpp-python loads and llama-server
#            come from this one build ($WORK/build/bin). Without AMX kernels on x86-64, as `make venv`.
#            A second run on the same machine reuses it.
#   venv     (GPU=cuda) a venv for this machine's python3 (3.12, the wheels' target) with skippy (editable, this
#            checkout) and its dependencies from the bundle's wheels, offline (pip --no-index); llama-cpp-python
#            is the bundle's pure-Python wheel, its llama_cpp/lib a link to the build's libraries (and
#            LLAMA_CPP_LIB_PATH / MTMD_CPP_LIB point there); checked with `skippy.engine.runtime.backends
#            rpc cuda noamx`. GPU=none: $PYTHON (this checkout's .venv) as it is.
#   models   the benchmark models rebuilt from the bundle's skeletons (bench/gpu/gguf_skeleton.py: the real
#            headers, seeded random weights of the same types; the real GGUFs do not fit in 64 MiB) into
#            $WORK/home/models, the cache skippy and the tests read (SKIPPY_HOME=$WORK/home).
#   tests    tests/integration/test_gpu.py with CI=true (GPU=cuda): a GPU test never skips there.
#   decode-M, burst-M   per model M: bench/bench_decode.py --no-raw and bench/bench_burst.py --quick, skippy
#            (-ngl 99) and skippy --backend-sampling against llama-server (-ngl 99), the same slots and context,
#            at LEVELS (bench_decode also skippy --reader-wait on); JSON and server logs in OUTDIR/M/.
#   sampling (the first model) bench/bench_sampling.py --loop: host sampling per step, skippy's vectorized chain
#            against llama.cpp's per row, and the scheduler's host loop per decode with the decode skipped (the
#            per-step overhead whatever the device); its tables printed before the report, JSON in OUTDIR/M/.
#   report   bench/gpu/report.py OUTDIR: the table, last.
#
# Knobs (environment): GPU (cuda | none), BUNDLE (gpu-bundle/), WORK (/tmp/skippy-gpu), BUDGET_S (530),
# MODELS (file names), LEVELS (1,16,64,256), MAX_TOKENS (128), REPS (2), PYTHON (GPU=none: .venv/bin/python;
# GPU=cuda: the base python3 of the venv), LLAMA_SERVER (GPU=none: the peer binary; default make bench-peer's),
# PACK (1 when OUTDIR is the device tool's $OUT: the logs and JSON into OUTDIR/results.tar.gz, since only 8
# files come back from there).
set -uo pipefail

OUTDIR="${1:-}"
if [ -z "$OUTDIR" ] || [ "$#" -ne 1 ]; then
    echo "usage: bench/gpu/run.sh OUTDIR (GPU=cuda|none; see the header of this script)" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
if [ -f "$here/../../pyproject.toml" ]; then REPO="$(cd "$here/../.." && pwd)"
elif [ -f "$here/../pyproject.toml" ]; then REPO="$(cd "$here/.." && pwd)"  # the bundle's copy, gpu-bundle/run.sh
else echo "error: cannot find the repository beside $here" >&2; exit 2; fi

export GPU="${GPU:-cuda}"
case "$GPU" in cuda|none) ;; *) echo "error: GPU=$GPU is not cuda or none" >&2; exit 2 ;; esac
export BUNDLE="${BUNDLE:-$REPO/gpu-bundle}"
export WORK="${WORK:-/tmp/skippy-gpu}"
if [ "$GPU" = cuda ]; then
    BUDGET_S="${BUDGET_S:-530}"; LEVELS="${LEVELS:-1,16,64,256}"; MAX_TOKENS="${MAX_TOKENS:-128}"; REPS="${REPS:-2}"
    MODELS="${MODELS:-SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf}"
    OFFLOAD="-ngl 99"
else
    BUDGET_S="${BUDGET_S:-150}"; LEVELS="${LEVELS:-1}"; MAX_TOKENS="${MAX_TOKENS:-4}"; REPS="${REPS:-1}"
    MODELS="${MODELS:-SmolLM2-135M-Instruct.Q4_1.gguf}"
    OFFLOAD=""
fi
export BUDGET_S LEVELS MAX_TOKENS REPS MODELS OFFLOAD REPO
VERSION="$(sed -n 's/^ *"llama-cpp-python==\([0-9.]*\)",*$/\1/p' "$REPO/pyproject.toml" | head -1)"
export VERSION
RESERVE=15
mkdir -p "$OUTDIR/logs" "$WORK"
OUTDIR="$(cd "$OUTDIR" && pwd)"
export OUTDIR
if [ -z "${PACK:-}" ]; then
    PACK=0
    if [ -n "${OUT:-}" ] && [ "$(cd "$OUT" 2>/dev/null && pwd)" = "$OUTDIR" ]; then PACK=1; fi
fi
: >"$OUTDIR/phases.tsv"
exec > >(tee -a "$OUTDIR/run.log") 2>&1
START=$(date +%s)
FAILED=0

# the peer binary of GPU=none, found before SKIPPY_HOME moves to $WORK/home
if [ "$GPU" = none ] && [ -z "${LLAMA_SERVER:-}" ]; then
    LLAMA_SERVER="${SKIPPY_HOME:-$HOME/.cache/skippy}/llama-server/$VERSION/bin/llama-server"
fi
export MODEL_SRC="${MODEL_SRC:-${SKIPPY_HOME:-$HOME/.cache/skippy}/models}"
export LLAMA_SERVER="${LLAMA_SERVER:-}"
export SKIPPY_HOME="$WORK/home"
export BUILD="$WORK/build"
if [ "$GPU" = cuda ]; then
    export PY="$WORK/venv/bin/python"
    export LLAMA_CPP_LIB_PATH="$BUILD/bin" MTMD_CPP_LIB="$BUILD/bin"
    export LD_LIBRARY_PATH="$BUILD/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    export PY="${PYTHON:-$REPO/.venv/bin/python}"
fi
export PYTHONUNBUFFERED=1

record() {  # name status seconds note
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$OUTDIR/phases.tsv"
    echo "=== $1: $2 (${3}s)${4:+ $4}"
}

# phase NAME CAP_S MIN_S FUNCTION: run FUNCTION in a bash of its own under `timeout`, its output in
# OUTDIR/logs/NAME.log (the tail printed on failure); skipped when fewer than MIN_S seconds are left.
phase() {
    local name=$1 cap=$2 min=$3 fn=$4 left t0 rc status
    left=$(( BUDGET_S - ($(date +%s) - START) - RESERVE ))
    if (( left < min )); then
        record "$name" skipped 0 "${left}s left, needs ${min}s"
        return 1
    fi
    (( cap > left )) && cap=$left
    echo "=== $name (at most ${cap}s)"
    t0=$(date +%s)
    timeout -k 10 "$cap" bash -c "set -euo pipefail; $(declare -f "$fn"); $fn" >"$OUTDIR/logs/$name.log" 2>&1
    rc=$?
    case $rc in
        0) status=ok ;;
        124|137) status=timeout ;;
        *) status="failed ($rc)" ;;
    esac
    record "$name" "$status" "$(( $(date +%s) - t0 ))" "$([ $rc -eq 0 ] || echo "see logs/$name.log")"
    if [ $rc -ne 0 ]; then
        tail -n 25 "$OUTDIR/logs/$name.log" | sed 's/^/    /'
        FAILED=1
    fi
    return $rc
}

build() {
    if [ "$GPU" = none ]; then echo "GPU=none: no build"; return 0; fi
    local stamp flags
    stamp="$(sha256sum "$BUNDLE/llama.cpp.tar.xz" | cut -c1-16)"
    if [ -x "$BUILD/bin/llama-server" ] && [ "$(cat "$BUILD/.stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "reusing $BUILD (same source)"; return 0
    fi
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv || true
    nvcc --version | tail -2
    rm -rf "$WORK/src" "$BUILD"
    mkdir -p "$WORK/src"
    tar -xJf "$BUNDLE/llama.cpp.tar.xz" -C "$WORK/src"
    flags=""
    [ "$(uname -m)" = x86_64 ] && flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    CFLAGS="$flags" CXXFLAGS="$flags" cmake -S "$WORK/src/llama.cpp" -B "$BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON -DGGML_RPC=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-native}" \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    cmake --build "$BUILD" --target llama-server -j "$(nproc)"
    ls -la "$BUILD/bin"
    echo "$stamp" >"$BUILD/.stamp"
}

venv() {
    if [ "$GPU" = none ]; then
        "$PY" -c 'import sys, llama_cpp, skippy; print(sys.version.split()[0], "llama_cpp", llama_cpp.__version__)'
        "$PY" -m skippy.engine.runtime.backends
        return 0
    fi
    local base="${PYTHON:-python3}" want have pipwhl site
    want="$(cat "$BUNDLE/PYTHON")"
    have="$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [ "$want" = "$have" ] || { echo "error: $base is Python $have, the bundle's wheels are for $want" >&2; return 1; }
    rm -rf "$WORK/venv"
    "$base" -m venv --without-pip "$WORK/venv"  # no ensurepip needed: pip comes from its wheel
    pipwhl="$(ls "$BUNDLE"/wheels/pip-*.whl | head -1)"
    "$PY" "$pipwhl/pip" install -q --no-index --find-links "$BUNDLE/wheels" pip setuptools wheel
    "$PY" -m pip install -q --no-index --find-links "$BUNDLE/wheels" --no-build-isolation -e "$REPO" \
        pytest pytest-trio
    site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    rm -rf "$site/llama_cpp/lib"
    ln -s "$BUILD/bin" "$site/llama_cpp/lib"
    "$PY" -m skippy.engine.runtime.backends rpc cuda noamx
    "$PY" -m pip list --format=freeze | tr '\n' ' '; echo
}

models() {
    local m prefix
    mkdir -p "$SKIPPY_HOME/models" "$SKIPPY_HOME/llama-server/$VERSION/bin" "$WORK/skel"
    if [ "$GPU" = cuda ]; then
        ln -sf "$BUILD/bin/llama-server" "$SKIPPY_HOME/llama-server/$VERSION/bin/llama-server"
    elif [ -x "$LLAMA_SERVER" ]; then
        ln -sf "$LLAMA_SERVER" "$SKIPPY_HOME/llama-server/$VERSION/bin/llama-server"
    else
        rm -f "$SKIPPY_HOME/llama-server/$VERSION/bin/llama-server"
        echo "no llama-server at '$LLAMA_SERVER' (make bench-peer): skippy alone, no peer ratios"
    fi
    for m in $MODELS; do
        prefix="$BUNDLE/models/$m"
        if [ ! -f "$prefix.head.xz" ]; then
            [ "$GPU" = none ] || { echo "error: no $prefix.head.xz (make gpu-bundle)" >&2; return 1; }
            [ -f "$WORK/skel/$m.head.xz" ] || "$PY" "$REPO/bench/gpu/gguf_skeleton.py" skeleton "$MODEL_SRC/$m" "$WORK/skel"
            prefix="$WORK/skel/$m"
        fi
        [ -f "$SKIPPY_HOME/models/$m" ] || "$PY" "$REPO/bench/gpu/gguf_skeleton.py" synth "$prefix" "$SKIPPY_HOME/models/$m"
        ls -la "$SKIPPY_HOME/models/$m"
    done
}

gpu_tests() {
    mkdir -p "$WORK/fixtures"  # tests/integration/conftest.py wants the chat-template fixtures' folder
    cd "$REPO"
    local ci=""
    [ "$GPU" = cuda ] && ci=true
    CI="$ci" SKIPPY_FIXTURES="${SKIPPY_FIXTURES:-$WORK/fixtures}" "$PY" -m pytest -q -p no:cacheprovider -rA \
        tests/integration/test_gpu.py --junitxml="$OUTDIR/tests.xml"
}

max_level() { tr ',' '\n' <<<"$LEVELS" | sort -n | tail -1; }

bench_decode_one() {
    cd "$REPO"
    # skippy-wait: the reader wait that --reader-wait auto leaves off with every layer on the GPU, to see it pays
    local wait=(--variant "skippy-wait=--reader-wait on")
    [ "$GPU" = none ] && wait=()
    "$PY" bench/bench_decode.py --no-raw --model "$SKIPPY_HOME/models/$MODEL" --out "$OUTDIR/$TAG/decode" \
        --levels "$LEVELS" --parallel "$(max_level)" --n-ctx 512 --max-tokens "$MAX_TOKENS" --reps "$REPS" \
        --skippy-args "$OFFLOAD" --peer-args "$OFFLOAD" --variant "skippy-bs=--backend-sampling" "${wait[@]}"
}

bench_burst_one() {
    cd "$REPO"
    local variant=(--variant "skippy-bs=--backend-sampling") arms=skippy,llama-server
    [ "$GPU" = none ] && variant=()  # the dry run: one skippy arm is enough to exercise the path
    # no peer binary (models() said so): skippy alone, as bench_decode runs without it
    [ -x "$SKIPPY_HOME/llama-server/$VERSION/bin/llama-server" ] || arms=skippy
    "$PY" bench/bench_burst.py --quick --arms "$arms" --workloads short --concurrency "$LEVELS" \
        --model "$SKIPPY_HOME/models/$MODEL" --out "$OUTDIR/$TAG/burst" --parallel "$(max_level)" --n-ctx 512 \
        --max-tokens "$(( MAX_TOKENS < 16 ? MAX_TOKENS : 16 ))" --skippy-args "$OFFLOAD" --peer-args "$OFFLOAD" \
        "${variant[@]}"
}

bench_sampling_one() {
    cd "$REPO"
    local levels=1,16,64 reps=10
    [ "$GPU" = none ] && levels=1 reps=1
    "$PY" bench/bench_sampling.py --model "$SKIPPY_HOME/models/$MODEL" --levels "$levels" --reps "$reps" --loop \
        --out "$OUTDIR/$TAG/sampling"
}

echo "skippy GPU run: GPU=$GPU, llama-cpp-python $VERSION, budget ${BUDGET_S}s, levels $LEVELS, models $MODELS"
echo "repo $REPO, bundle $BUNDLE, work $WORK, out $OUTDIR"
export -f max_level
ready=1
phase build 360 60 build || ready=0
if (( ready )); then phase venv 120 20 venv || ready=0; fi
if (( ready )); then phase models 90 10 models || ready=0; fi
if (( ready )); then
    phase tests 150 30 gpu_tests
    for MODEL in $MODELS; do
        TAG="$(tr '[:upper:]' '[:lower:]' <<<"${MODEL%%-*}")"  # smollm2, gemma
        export MODEL TAG
        phase "decode-$TAG" 150 30 bench_decode_one
        phase "burst-$TAG" 120 30 bench_burst_one
    done
    MODEL="${MODELS%% *}"; TAG="$(tr '[:upper:]' '[:lower:]' <<<"${MODEL%%-*}")"
    export MODEL TAG
    phase "sampling-$TAG" 60 20 bench_sampling_one
fi
echo "=== total $(( $(date +%s) - START ))s"
echo
for f in "$OUTDIR"/logs/sampling-*.log; do
    [ -f "$f" ] && { echo "=== ${f##*/}"; grep -E '^\||n_vocab|host loop' "$f"; echo; }
done
echo "=== results (also in OUTDIR/summary.md; logs and JSON under OUTDIR$([ "$PACK" = 1 ] && echo ", packed into results.tar.gz"))"
"$PY" "$REPO/bench/gpu/report.py" "$OUTDIR" 2>/dev/null || python3 "$REPO/bench/gpu/report.py" "$OUTDIR" || FAILED=1
if [ "$PACK" = 1 ]; then  # only 8 files come back from the device tool's $OUT: the rest goes into one archive
    (cd "$OUTDIR" && tar -czf "$WORK/results.tar.gz" --exclude=./run.log --exclude=./summary.md \
        --exclude=./phases.tsv --exclude=./tests.xml . && find . -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + \
        && mv "$WORK/results.tar.gz" .) >/dev/null 2>&1
fi
exit $FAILED
