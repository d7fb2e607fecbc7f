# Two commands for a fresh clone:  `make demo`  and  `make test`.
# Each creates .venv and installs the pinned dependencies when needed.

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.sparseflow-installed
# A candidate that is missing, or a version manager's shim without that version, is skipped in silence.
PYTHON  ?= $(shell for p in python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo $$p && break; done)
# Two pytest workers on a 2-core machine; override with `make test PYTEST_WORKERS=auto`.
PYTEST_WORKERS ?= 2

.PHONY: demo test lint bench lock clean native gpu-ops

$(STAMP): pyproject.toml requirements.lock
	@test -n "$(PYTHON)" || { echo "error: Python >= 3.11 not found on PATH" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# The native CPU kernels (ops/native), built against the installed TensorFlow into the user cache;
# without a compiler this warns once and the stock-op compositions run instead.
native: $(STAMP)
	$(PY) ops/_native_build.py

demo: native
	$(PY) -m pipelines.demo $(ARGS)

test: native
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest -n $(PYTEST_WORKERS) --timeout=900 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: native
	$(PY) -m benchmarks $(ARGS)

# The TensorFlow GPU ops (ops/cuda/tf/ over ops/cuda/*.cu): TensorFlow built with CUDA, nvcc, a C++17 compiler.
NVCC        ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME   ?= $(firstword $(wildcard /usr/local/cuda) $(patsubst %/bin/nvcc,%,$(NVCC)))
GPU_ARCHS   ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90
GPU_PY      ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_OPS_DIR ?= build/gpu_ops
TF_FLAGS     = $(GPU_PY) -c 'import sys, tensorflow as tf; print(" ".join(getattr(tf.sysconfig, sys.argv[1])()))'

gpu-ops:
	@$(GPU_PY) -c 'import tensorflow' >/dev/null 2>&1 || { echo "error: gpu-ops needs TensorFlow, which $(GPU_PY) cannot import" >&2; exit 1; }
	@$(GPU_PY) -c 'import sys, tensorflow as tf; sys.exit(not tf.test.is_built_with_cuda())' >/dev/null 2>&1 || { echo "error: gpu-ops needs TensorFlow built with CUDA; this TensorFlow has no CUDA support" >&2; exit 1; }
	@test -x "$(NVCC)" || { echo "error: gpu-ops needs nvcc (not found; set NVCC=/path/to/nvcc)" >&2; exit 1; }
	mkdir -p $(GPU_OPS_DIR)
	$(NVCC) -std=c++17 -O3 $(GPU_ARCHS) -Xcompiler -fPIC -c ops/cuda/embedding_bag.cu -o $(GPU_OPS_DIR)/embedding_bag.o
	$(NVCC) -std=c++17 -O3 $(GPU_ARCHS) -Xcompiler -fPIC -c ops/cuda/block_sparse.cu -o $(GPU_OPS_DIR)/block_sparse.o
	$(CXX) -std=c++17 -O2 -shared -fPIC -DGOOGLE_CUDA=1 -Wno-deprecated-declarations -Wno-interference-size -I$(CUDA_HOME)/include \
	  $$($(TF_FLAGS) get_compile_flags) ops/cuda/tf/op_defs.cc ops/cuda/tf/gpu_kernels.cc \
	  $(GPU_OPS_DIR)/embedding_bag.o $(GPU_OPS_DIR)/block_sparse.o -o $(GPU_OPS_DIR)/libsparseflow_gpu_ops.so \
	  $$($(TF_FLAGS) get_link_flags) -L$(CUDA_HOME)/lib64 -lcudart
	@echo "built $(GPU_OPS_DIR)/libsparseflow_gpu_ops.so"

# Re-resolve the pins (needs the package registry); commit requirements.lock afterwards.
lock:
	$(PY) -m pip install --quiet -e '.[gcp,tf,plots,test]'
	$(PY) -m pip freeze --exclude-editable | grep -v '^sparseflow' > requirements.lock

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
