# The two entry points of the README: `make demo` and `make test`.
# Both create .venv with olr-buffer, its spark and test extras (Java 17 must be on the machine for Spark).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO   ?= demo-data

.PHONY: demo lint test test-fast venv clean

venv: $(VENV)/.installed

# setup.py and the .pyx: the install compiles the readers' loops and the read-back step (pip rebuilds them when they change)
$(VENV)/.installed: setup.cfg pyproject.toml setup.py olr_buffer/sources/redo/linescan.pyx olr_buffer/sources/postgres/tuplescan.pyx olr_buffer/changes/recscan.pyx olr_buffer/dispatcher/batchscan.pyx olr_buffer/_cython/utf8.pxd
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,test]'
	touch $@

demo: venv
	$(BIN)/python -m olr_buffer.demo $(DEMO)

# pytest-xdist workers. Many end-to-end tests wait on child processes, fsyncs, Spark or a
# PostgreSQL server, so four workers keep two cores busy (measured on one tree: 3 workers
# 441 s, 4 workers 374 s, 6 workers 401 s); every Spark test runs on one worker
# (tests/conftest.py groups them), so a run starts one Spark session.
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 4

# ruff (lint and format: olr_buffer, tests, bench) and mypy (the package), configured in
# pyproject.toml; `make test`, and so CI, runs it before the tests
LINTED := olr_buffer tests bench

lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

test: venv lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# the edit-test loop: neither slow nor spark (CI runs the full `make test`)
test-fast: venv
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m 'not slow and not spark and not e2e' $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .hypothesis .ruff_cache .mypy_cache
