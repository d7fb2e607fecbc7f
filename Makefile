# Two commands for a fresh clone:  `make demo`  and  `make test`.
# Each creates .venv and installs the pinned dependencies when needed.

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.sparseflow-installed
# A candidate that is missing, or a version manager's shim without that version, is skipped in silence.
PYTHON  ?= $(shell for p in python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo $$p && break; done)
# Two pytest workers on a 2-core machine; override with `make test PYTEST_WORKERS=auto`.
PYTEST_WORKERS ?= 2
# Each test module on one worker: its module-scoped fixtures (an ingest, a trained model) then run once,
# not once per worker that draws one of its tests (7-8% less time on the fixture-heavy modules).
PYTEST_DIST ?= loadscope

.PHONY: demo test lint bench lock clean native gpu-ops notebooks

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
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist $(PYTEST_DIST) --timeout=900 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: native
	$(PY) -m benchmarks $(ARGS)

# Runs notebooks/*.ipynb top to bottom and saves them with their outputs; commit the result.
notebooks: native
	$(PY) notebooks/regenerate.py

# The TensorFlow GPU ops (ops/cuda/tf/ over ops/cuda/*.cu): TensorFlow built with CUDA, the nvcc of the CUDA release it
# was built with (found on PATH, under CUDA_HOME or /usr/local/cuda-X.Y, or named by NVCC=; any other is refused),
# a C++17 compiler. GPU_ARCHS lists the SASS targets; PTX for the newest is embedded too. GPU_OPS_ANY_NVCC=1 takes
# any nvcc release, for a compile check only (a library built so must not run on a GPU).
GPU_ARCHS   ?= sm_80,sm_90
GPU_PY      ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_OPS_DIR ?= build/gpu_ops
GPU_ENV      = $(if $(filter command line environment,$(origin NVCC)),NVCC=$(NVCC)) $(if $(filter command line environment,$(origin CUDA_HOME)),CUDA_HOME=$(CUDA_HOME))

gpu-ops:
	@$(GPU_PY) -c 'import tensorflow' >/dev/null 2>&1 || { echo "error: gpu-ops needs TensorFlow, which $(GPU_PY) cannot import" >&2; exit 1; }
	@env $(GPU_ENV) $(GPU_PY) ops/cuda/build_tf_ops.py --out $(GPU_OPS_DIR) --archs $(GPU_ARCHS) $(if $(GPU_OPS_ANY_NVCC),--any_nvcc)

# Re-resolve the pins (needs the package registry); commit requirements.lock afterwards.
lock:
	$(PY) -m pip install --quiet -e '.[gcp,tf,plots,test]'
	$(PY) -m pip freeze --exclude-editable | grep -v '^sparseflow' \
	  | sed -E 's/^(nvidia-cuda-(cuobjdump|nvdisasm)==.*)$$/\1 ; platform_system == "Linux" and platform_machine == "x86_64"/' \
	  > requirements.lock

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
