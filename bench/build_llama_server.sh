#!/usr/bin/env bash
# Build llama-server from the llama.cpp sources vendored in the pinned
# llama-cpp-python sdist, once, into a cache folder; print its path.
#
#   bench/build_llama_server.sh [PYTHON]
#
# The version comes from pyproject.toml's llama-cpp-python pin, so the peer is
# the same llama.cpp that skippy runs on. The binary lands in
# ${SKIPPY_HOME:-~/.cache/skippy}/llama-server/<version>/bin/llama-server and a
# second call only prints that path. CPU build, LLAMA_BUILD_SERVER=ON, Release;
# ~12 min on 2 cores. On x86-64 without llama.cpp's AMX kernels, as skippy's own
# build (Makefile, LLAMA_CFLAGS: they segfault on Sapphire Rapids, llama.cpp issue 20824).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-$here/.venv/bin/python}"
version="$(sed -n 's/^ *"llama-cpp-python==\([0-9.]*\)",*$/\1/p' "$here/pyproject.toml" | head -1)"
[ -n "$version" ] || { echo "error: no llama-cpp-python==X pin in pyproject.toml" >&2; exit 1; }
cache="${SKIPPY_HOME:-$HOME/.cache/skippy}/llama-server/$version"
binary="$cache/bin/llama-server"
if [ -x "$binary" ]; then echo "$binary"; exit 0; fi
mkdir -p "$cache"
work="$(mktemp -d "$cache/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "fetching the llama-cpp-python $version sdist" >&2
"$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "error: no vendored llama.cpp in the sdist" >&2; exit 1; }
echo "building llama-server from $src (several minutes)" >&2
if [ "$(uname -m)" = x86_64 ]; then
    export CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16 ${CFLAGS:-}" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16 ${CXXFLAGS:-}"
fi
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$cache/bin"
cp "$work/build/bin/llama-server" "$binary.tmp" && mv "$binary.tmp" "$binary"
echo "$binary"
