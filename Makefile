# Two commands for a fresh clone:  `make demo`  and  `make test`.
# Each creates .venv and installs the pinned dependencies when needed.

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.sparseflow-installed
PYTHON  ?= $(shell for p in python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' && echo $$p && break; done)
# Two pytest workers on a 2-core machine; override with `make test PYTEST_WORKERS=auto`.
PYTEST_WORKERS ?= 2

.PHONY: demo test lint bench lock clean

$(STAMP): pyproject.toml requirements.lock
	@test -n "$(PYTHON)" || { echo "error: Python >= 3.11 not found on PATH" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m pipelines.demo $(ARGS)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --timeout=900 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks $(ARGS)

# Re-resolve the pins (needs the package registry); commit requirements.lock afterwards.
lock:
	$(PY) -m pip install --quiet -e '.[tf,plots,test]'
	$(PY) -m pip freeze --exclude-editable | grep -v '^sparseflow' > requirements.lock

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
