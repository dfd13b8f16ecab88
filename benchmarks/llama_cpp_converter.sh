#!/usr/bin/env bash
# llama.cpp's converter alone, without building anything: convert_hf_to_gguf.py, its
# `conversion` package and its `gguf-py`, unpacked from the registry's source package of
# llama-cpp-python (the version benchmarks/llama_cpp_venv.sh builds) into DIR/src/vendor/
# llama.cpp, where the venv keeps them too. The converter is pure Python and runs in the
# project's own environment (torch, and transformers with what it brings: numpy, pyyaml),
# with the one package it needs that the project leaves out, sentencepiece, in DIR/site;
# the tests of tests/models/test_gguf_moe*.py that need only it then run, and those that
# need llama.cpp's quantizer or logits skip (they need the venv). About 15 s on a fast
# link (a 77 MB download, 8 MB kept). CI runs it before its tests (.ci/run).
# Usage: bash benchmarks/llama_cpp_converter.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-benchmarks/results/llama-cpp-converter}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PYTHON="${PYTHON:-python}"
if grep -qx "Version: $VERSION" "$DIR/src/PKG-INFO" 2>/dev/null \
    && [ -f "$DIR/src/vendor/llama.cpp/conversion/base.py" ] && [ -d "$DIR/site/sentencepiece" ]; then
    echo "llama.cpp converter ready: $DIR"; exit 0
fi
sdist="$(mktemp -d)"
trap 'rm -rf "$sdist"' EXIT
# the source package (llama-cpp-python's only), while its build requirements for reading
# the package's metadata come as wheels (with `:all:`, pip would build them from source too)
"$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" \
    -d "$sdist"
rm -rf "$DIR/src"
mkdir -p "$DIR/src"
# only what the converter reads (and the licence), not the C++ sources
tar -xzf "$sdist/llama_cpp_python-$VERSION.tar.gz" -C "$DIR/src" --strip-components=1 \
    --wildcards '*/PKG-INFO' '*/vendor/llama.cpp/LICENSE' \
    '*/vendor/llama.cpp/convert_hf_to_gguf.py' '*/vendor/llama.cpp/conversion' \
    '*/vendor/llama.cpp/gguf-py'
# the converter imports sentencepiece for Llama-like checkpoints (the venv installs it; the
# project does not): a wheel, put only where the converter looks
rm -rf "$DIR/site"
"$PYTHON" -m pip install -q --no-deps --only-binary sentencepiece -c constraints.txt \
    --target "$DIR/site" sentencepiece
echo "llama.cpp converter ready: $DIR"
