# The two commands a newcomer needs (README): `make dashboard` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup dashboard test lint system-deps bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "gpuledger needs Python >= 3.11"'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

# Fill data/gpuledger.duckdb with the demo fleet when it is empty, then serve http://localhost:8501
dashboard: setup
	$(BIN)/gpuledger dashboard

# Debian packages the tests drive for real: Chromium (browser tests), Prometheus, Slurm + MariaDB + munge.
system-deps:
	@bash .ci/system-deps.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup system-deps lint
	$(BIN)/pytest

bench: setup
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/queries.py
