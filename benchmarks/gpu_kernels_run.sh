#!/usr/bin/env bash
# The one command a CUDA machine runs to check and time the CUDA kernels (no TensorFlow needed):
#
#   OUT=/some/dir bash benchmarks/gpu_kernels_run.sh [--quick]
#
# Needs nvcc and PyTorch (or CuPy: then no peers are timed) for python3 (or $PYTHON). Builds the kernels
# into a temporary directory, runs every correctness check, times ours against the torch peers, and writes
# GPU_RESULTS.md, GPU_RESULTS.json, gpu_kernels.png and the full log into $OUT (default: a new temporary
# directory) as well as benchmarks/GPU_RESULTS.md. About 3 minutes on an H100/H200-class GPU.
# Exit status: that of the harness (1 when a check fails).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
{
  echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(hostname)"
  nvidia-smi || true
  nvcc --version || true
  "$PYTHON" -c 'import numpy, sys; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || true
} >"$OUT/environment.txt" 2>&1
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 570 "$PYTHON" -m benchmarks.gpu_kernels --output-dir "$OUT" "$@" \
  2>&1 | tee "$OUT/gpu_kernels.log"
status=${PIPESTATUS[0]}
echo "results in $OUT (exit status $status)"
exit "$status"
