#!/usr/bin/env bash
# A virtual environment with llama.cpp (through llama-cpp-python, built here from the
# registry's source package), for the single-stream benchmark's side-by-side runs only
# (never the project's dev requirements). The source package carries llama.cpp's own
# converter, convert_hf_to_gguf.py, which `single_stream.py` uses to make the GGUF files
# it compares (run in place, beside its own `gguf-py`: see benchmarks/gguf_files.py).
# Building takes 10-30 min on 2 cores. Usage: bash benchmarks/llama_cpp_venv.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-benchmarks/results/llama-cpp-venv}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null \
    && [ -f "$VENV/src/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
    echo "llama.cpp venv ready: $VENV"; exit 0
fi
python -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# the converter's own needs (protobuf: transformers reads a SentencePiece model with it, for
# tests/models/gguf_files), and the tandem packages so the runner shares bench_runners.py
"$VENV/bin/python" -m pip install -q -c constraints.txt torch numpy sentencepiece protobuf psutil \
    "transformers>=4.50" safetensors
"$VENV/bin/python" -m pip install -q --no-deps -e ./kernels -e ./packages/core
"$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: \
    "llama-cpp-python==$VERSION" -d "$VENV/sdist"
mkdir -p "$VENV/src"
tar -xzf "$VENV/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$VENV/src" --strip-components=1
# native CPU build (AVX2 / AVX-512 where the machine has it), no GPU backends
CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF" \
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$VENV/bin/python" -m pip install -q "$VENV/src"
"$VENV/bin/python" -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"
echo "llama.cpp venv ready: $VENV"
