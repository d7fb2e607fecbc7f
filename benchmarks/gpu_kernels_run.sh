#!/usr/bin/env bash
# The one command a CUDA machine runs to check and time the CUDA kernels (no TensorFlow needed):
#
#   OUT=/some/dir bash benchmarks/gpu_kernels_run.sh [--quick]
#
# Needs a CUDA GPU, nvcc, compute-sanitizer (from the CUDA toolkit: on PATH or beside nvcc) and PyTorch (or CuPy:
# then no peers are timed) for python3 (or $PYTHON). In order:
#   1. builds the kernels once for the GPU (nvcc) into $OUT/build;
#   2. runs the CPU emulation tests' cases (benchmarks/gpu_kernel_cases.py) and the block-sparse checks on the GPU
#      under compute-sanitizer (benchmarks/gpu_kernel_sanitized.py): memcheck over everything, racecheck and
#      synccheck over the kernels that use shared memory and barriers (block-sparse), synccheck also over the
#      embedding kernels (warp shuffles); any sanitizer error or failed case fails the script;
#   3. times ours against the torch peers as before (python -m benchmarks.gpu_kernels), writing GPU_RESULTS.md,
#      GPU_RESULTS.json, gpu_kernels.png and the full log into $OUT (default: a new temporary directory) as well
#      as benchmarks/GPU_RESULTS.md. TIMINGS=0 stops after step 2.
# Logs: $OUT/environment.txt, $OUT/sanitizer-<tool>-<part>.log, $OUT/gpu_kernels.log.
# Exit status: 2 refused (no GPU visible, no nvcc or no compute-sanitizer: nothing checked or timed); else 0 when
# every step passed, or the status of the first failed step (a sanitizer's error exit code is 86).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(hostname)"
  nvidia-smi || true
  nvcc --version || true
  "$PYTHON" -c 'import numpy, sys; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || true
} >"$OUT/environment.txt" 2>&1

# Refuse, with one line, where nothing could be checked: the same device lookup as the harness's.
if ! "$PYTHON" -m benchmarks.gpu_kernel_sanitized --probe >>"$OUT/environment.txt"; then
  echo "gpu_kernels_run.sh: refused: no CUDA GPU visible; nothing checked or timed (environment in $OUT)" >&2
  exit 2
fi
NVCC="${NVCC:-$(command -v nvcc || true)}"
if [ -z "$NVCC" ] && [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then NVCC="$CUDA_HOME/bin/nvcc"; fi
if [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
if [ -z "$NVCC" ]; then
  echo "gpu_kernels_run.sh: refused: nvcc not found (PATH, \$NVCC, \$CUDA_HOME, /usr/local/cuda)" >&2
  exit 2
fi
CUDA_ROOT="$(dirname "$(dirname "$(readlink -f "$NVCC")")")"
SANITIZER="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}"
for candidate in "$CUDA_ROOT/bin/compute-sanitizer" "$CUDA_ROOT/compute-sanitizer/compute-sanitizer"; do
  if [ -z "$SANITIZER" ] && [ -x "$candidate" ]; then SANITIZER="$candidate"; fi
done
if [ -z "$SANITIZER" ]; then
  echo "gpu_kernels_run.sh: refused: compute-sanitizer not found (PATH, \$COMPUTE_SANITIZER, $CUDA_ROOT)" >&2
  exit 2
fi

status=0
note() {  # keeps the first failure's status
  if [ "$1" -ne 0 ] && [ "$status" -eq 0 ]; then status=$1; fi
  echo "== $2: exit status $1" | tee -a "$OUT/summary.txt"
}

BUILD="$OUT/build"
"$PYTHON" -m benchmarks.gpu_kernel_sanitized --build-only --build-dir "$BUILD" 2>&1 | tee "$OUT/build.log"
note "${PIPESTATUS[0]}" "build"

# tool part: the cases of `part` under compute-sanitizer's `tool`; a reported error exits 86. SANITIZER_FLAGS adds
# options (e.g. "--report-api-errors no" should the peer library's own expected API errors be reported).
sanitize() {
  # shellcheck disable=SC2086  # SANITIZER_FLAGS is a list of words
  timeout 400 "$SANITIZER" --tool "$1" --error-exitcode 86 --print-limit 50 ${SANITIZER_FLAGS:-} \
    "$PYTHON" -m benchmarks.gpu_kernel_sanitized --part "$2" --build-dir "$BUILD" 2>&1 \
    | tee "$OUT/sanitizer-$1-$2.log"
  note "${PIPESTATUS[0]}" "compute-sanitizer --tool $1, $2 cases"
}
if [ "$status" -eq 0 ]; then
  sanitize memcheck all
  sanitize racecheck block-sparse
  sanitize synccheck all
fi

if [ "${TIMINGS:-1}" != 0 ]; then
  timeout 570 "$PYTHON" -m benchmarks.gpu_kernels --output-dir "$OUT" --build-dir "$BUILD" "$@" \
    2>&1 | tee "$OUT/gpu_kernels.log"
  note "${PIPESTATUS[0]}" "checks and timings"
fi
echo "results in $OUT (exit status $status)"
exit "$status"
