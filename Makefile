# Two commands for a fresh clone:  `make demo`  and  `make test`.
# Each creates .venv and installs the pinned dependencies when needed.

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.sparseflow-installed
PYTHON  ?= $(shell for p in python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' && echo $$p && break; done)
# Two pytest workers on a 2-core machine; override with `make test PYTEST_WORKERS=auto`.
PYTEST_WORKERS ?= 2

.PHONY: demo test lint bench lock clean native

$(STAMP): pyproject.toml requirements.lock
	@test -n "$(PYTHON)" || { echo "error: Python >= 3.11 not found on PATH" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# The native CPU kernels (ops/native), built against the installed TensorFlow into the user cache;
# without a compiler this warns once and the stock-op compositions run instead.
native: $(STAMP)
	$(PY) -m ops._native_build

demo: native
	$(PY) -m pipelines.demo $(ARGS)

test: native
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --timeout=900 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

bench: native
	$(PY) -m benchmarks $(ARGS)

# Re-resolve the pins (needs the package registry); commit requirements.lock afterwards.
lock:
	$(PY) -m pip install --quiet -e '.[tf,plots,test]'
	$(PY) -m pip freeze --exclude-editable | grep -v '^sparseflow' > requirements.lock

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
