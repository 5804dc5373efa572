# The two commands a newcomer needs (README): `make dashboard` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup dashboard test check lint system-deps bench constraints screenshots

setup: $(VENV)/.installed

# Installs exactly the versions in constraints.txt, so a new upstream release never changes a run by itself.
$(VENV)/.installed: pyproject.toml constraints.txt
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "gpuledger needs Python >= 3.11"'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test,kubernetes]'
	@touch $@

# Fill an empty ledger with the demo fleet (it says so: about 30 s), then serve and print http://localhost:8501
dashboard: setup
	$(BIN)/gpuledger dashboard

# Debian packages the tests drive for real: Chromium (browser tests), Prometheus, Slurm + MariaDB + munge.
system-deps:
	@bash .ci/system-deps.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Two xdist workers, a test module each at a time; tests/conftest.py says in what order modules are handed out.
# PYTHONDONTWRITEBYTECODE emptied: the suite starts dozens of Python processes (servers, the CLI, the wheel's
# venv), and each one compiling our modules again costs 0.2-0.3 s (measured: imports 0.88-1.02 s vs 0.64-0.76 s).
test: setup system-deps lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 2 --dist loadscope --no-loadscope-reorder

# The edit loop (under 90 s): ruff, then the fast unit tests in one process: the layering and docs checks, the
# ledger's schema and migrations, settings, and the budgets' and alerts' rules. No browser, service or real
# dataset (markers), no Hypothesis money runs, no six-week item scans; `make test` runs everything.
CHECK_TESTS := tests/test_layering.py tests/test_docs.py tests/test_settings.py tests/ledger \
	tests/budgets/test_alert_rules.py tests/budgets/test_forecast.py tests/budgets/test_daily.py
check: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -q -p no:cacheprovider -m "not browser and not service and not datasets" \
		-k "not every_reading_command" $(CHECK_TESTS)

# The browser tests with every page they visit saved in test-artifacts/ (make test saves only failed pages).
screenshots: setup system-deps
	PYTHONDONTWRITEBYTECODE= GPULEDGER_SCREENSHOTS=1 $(BIN)/pytest -n 2 --dist loadscope --no-loadscope-reorder tests/browser

bench: setup
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/queries.py

# Refresh the pins: resolve the newest releases the bounds in pyproject.toml allow in a scratch venv, then
# write them to constraints.txt. Run `make test` before committing the new file.
constraints:
	rm -rf .constraints-venv
	$(PY) -m venv .constraints-venv
	.constraints-venv/bin/pip install -q --upgrade pip
	.constraints-venv/bin/pip install -q -e '.[test,kubernetes]'
	(echo "# Exact versions CI installs (make setup: pip install -c constraints.txt). Refresh: make constraints"; \
	 .constraints-venv/bin/pip freeze | grep -v -e '^-e' -e '^gpuledger') > constraints.txt
	rm -rf .constraints-venv
