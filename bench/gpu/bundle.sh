#!/usr/bin/env bash
# `make gpu-bundle`: what bench/gpu/run.sh needs on a GPU machine without network, in gpu-bundle/ (ignored by
# git), under 64 MiB together with the working tree (the device tool's limit on what travels).
#
#   bench/gpu/bundle.sh [PYTHON]     # PYTHON: this checkout's venv python (pip, gguf-py)
#
# gpu-bundle/
#   llama.cpp.tar.xz   the llama.cpp of the pinned llama-cpp-python sdist (bench/build_llama_server.sh's source),
#                      trimmed to what libllama, libmtmd, ggml (CPU, CUDA, RPC) and llama-server need to build:
#                      no tests, docs, examples, models/ vocabularies, other backends (Vulkan, Metal, SYCL...),
#                      nor the web UI's sources (run.sh builds with LLAMA_BUILD_UI=OFF, LLAMA_USE_PREBUILT_UI=OFF)
#   wheels/            skippy's dependencies, pytest and pytest-trio, pip, setuptools and wheel for the GPU
#                      machine's Python (GPU_PYTHON, 3.12; manylinux x86-64), and llama-cpp-python as a pure-Python
#                      wheel made from the sdist (no libraries: run.sh links llama_cpp/lib to its own build)
#   models/            the skeletons (header + tensor table) of SmolLM2-135M and Gemma 3 270M: the GGUFs (98 and
#                      253 MB) do not fit; run.sh rebuilds same-shape models from them (bench/gpu/gguf_skeleton.py)
#   run.sh, PYTHON, MANIFEST
#
# Prints the bundle's size by part and fails if the bundle and the working tree exceed 64 MiB. On a machine with
# nvcc, CMake first configures the trimmed source with CUDA (CHECK=0 skips it), so a trim that dropped
# something the build needs fails here, not on the GPU machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${1:-$repo/.venv/bin/python}"
pyver="${GPU_PYTHON:-3.12}"
limit=$((64 * 1024 * 1024))
version="$(sed -n 's/^ *"llama-cpp-python==\([0-9.]*\)",*$/\1/p' "$repo/pyproject.toml" | head -1)"
[ -n "$version" ] || { echo "error: no llama-cpp-python==X pin in pyproject.toml" >&2; exit 1; }
home="${SKIPPY_HOME:-$HOME/.cache/skippy}"
models=(SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf)
out="$repo/gpu-bundle"
cache="$home/gpu-bundle-cache"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
rm -rf "$out"
mkdir -p "$out/wheels" "$out/models"

# -- the source ------------------------------------------------------------------------------------------------
sdist="$cache/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    echo "fetching the llama-cpp-python $version sdist"
    "$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$cache"
fi
tar -xzf "$sdist" -C "$work"
pkg="$work/llama_cpp_python-$version"
src="$work/llama.cpp"
mv "$pkg/vendor/llama.cpp" "$src"
(
    cd "$src"
    rm -rf .github .devops ci docs media models tests benches examples pocs gguf-py conversion skills requirements \
        grammars scripts/*.py scripts/*.sh scripts/*.md scripts/snapdragon scripts/jinja scripts/apple \
        convert_*.py build-xcframework.sh AUTHORS CONTRIBUTING.md SECURITY.md
    for b in vulkan metal sycl opencl cann hexagon openvino webgpu et virtgpu zdnn zendnn kompute; do
        rm -rf "ggml/src/ggml-$b"
    done
    # the web UI: its CMake and templates only (no npm build, no prebuilt assets at build time)
    find tools/ui -mindepth 1 -maxdepth 1 ! -name CMakeLists.txt ! -name '*.in' ! -name sources.cmake -exec rm -rf {} +
    rm -rf tools/server/tests tools/server/bench tools/server/*.md tools/mtmd/tests tools/mtmd/test-* \
        tools/mtmd/legacy-models tools/*/README.md
)
if [ "${CHECK:-1}" = 1 ] && command -v cmake >/dev/null && command -v ninja >/dev/null; then
    # CMake over the trimmed source (seconds): CPU + RPC must configure and name llama-server; with nvcc here,
    # CUDA too (a toolkit without cuBLAS fails that part: a warning, the GPU machine's toolkit has it)
    check() {  # build dir, extra cmake flags...
        local dir=$1; shift
        cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_RPC=ON \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "$@" >"$dir.log" 2>&1 \
            && ninja -C "$dir" -t targets all 2>/dev/null | grep -q '^llama-server:'
    }
    echo "configuring the trimmed source (CHECK=0 skips this)"
    check "$work/check-cpu" || { tail -30 "$work/check-cpu.log"; echo "error: the trimmed source does not configure" >&2; exit 1; }
    if command -v nvcc >/dev/null; then
        check "$work/check-cuda" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
            || echo "warning: the CUDA configure failed here: $(grep -m1 -A3 'CMake Error' "$work/check-cuda.log" | tr -s ' \n' ' ')"
    fi
    rm -rf "$work"/check-*
fi
tar -cJf "$out/llama.cpp.tar.xz" -C "$work" llama.cpp

# -- the wheels ------------------------------------------------------------------------------------------------
# skippy's dependencies from pyproject.toml, less llama-cpp-python (its pure wheel below) plus its own ones
deps="$("$python" - "$repo/pyproject.toml" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(d for d in project["dependencies"] if not d.startswith("llama-cpp-python")))
EOF
)"
mapfile -t reqs <<<"$deps"
platforms=()
for p in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
         manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1; do
    platforms+=(--platform "${p}_x86_64")
done
"$python" -m pip download --quiet --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$out/wheels" "${reqs[@]}" typing-extensions diskcache pytest pytest-trio pip setuptools wheel
# llama-cpp-python without its libraries: the sdist's Python package, its metadata, no build
"$python" - "$pkg" "$out/wheels" "$version" <<'EOF'
import base64, hashlib, sys, zipfile
from pathlib import Path
pkg, dest, version = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
name = f"llama_cpp_python-{version}"
meta = (pkg / "PKG-INFO").read_text()
files = {str(p.relative_to(pkg)): p.read_bytes() for p in sorted((pkg / "llama_cpp").rglob("*")) if p.is_file()}
files[f"{name}.dist-info/METADATA"] = meta.encode()
files[f"{name}.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: skippy bench/gpu/bundle.sh\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
          for n, d in files.items()] + [f"{name}.dist-info/RECORD,,"]
with zipfile.ZipFile(dest / f"{name}-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as z:
    for n, d in files.items():
        z.writestr(n, d)
    z.writestr(f"{name}.dist-info/RECORD", "\n".join(record) + "\n")
EOF

# -- the models' skeletons -------------------------------------------------------------------------------------
for m in "${models[@]}"; do
    [ -f "$home/models/$m" ] || { echo "error: $home/models/$m is missing (make pull)" >&2; exit 1; }
    "$python" "$here/gguf_skeleton.py" skeleton "$home/models/$m" "$out/models" >/dev/null
done

cp "$here/run.sh" "$out/run.sh"
echo "$pyver" >"$out/PYTHON"

# -- sizes -----------------------------------------------------------------------------------------------------
size() { du -sb "$@" | awk '{s += $1} END {print s}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
src_b=$(size "$out/llama.cpp.tar.xz"); whl_b=$(size "$out/wheels"); mod_b=$(size "$out/models")
total=$(size "$out")
tree=$(cd "$repo" && git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
{
    echo "llama-cpp-python $version, wheels for CPython $pyver manylinux x86-64"
    echo "source (trimmed llama.cpp, xz) $(mib "$src_b")"
    echo "wheels ($(ls "$out/wheels" | wc -l) files) $(mib "$whl_b")"
    echo "model skeletons $(mib "$mod_b")"
    echo "bundle $(mib "$total"); working tree $(mib "$tree"); together $(mib $((total + tree))) of 64 MiB"
} | tee "$out/MANIFEST"
ls -S "$out/wheels" >>"$out/MANIFEST"
if (( total + tree > limit )); then
    echo "error: the bundle and the working tree exceed 64 MiB" >&2
    exit 1
fi
