# Two commands for a newcomer: `make demo` and `make test`. Both build the virtual
# environment first if it is missing or older than pyproject.toml / constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SHELL := /bin/bash
# Each step prints "[time] <target>: wall, user, sys" (where `make test`'s time goes).
TIMED = TIMEFORMAT='[time] $@: %R s wall, %U s user, %S s sys'; time
# numpy's SIMD dispatch capped below the CPU's own level, so the numerical tests run as
# on a CPU without AVX-512 (x86-64-v3) and without AVX2/FMA (x86-64-v2, numpy's
# baseline: it cannot be disabled). numpy >= 2.4 names the levels; unknown names are
# ignored, so on a CPU without a level its pass is the same as the default one.
NO_AVX512 := X86_V4 AVX512_ICL AVX512_SPR
NO_AVX2 := X86_V3 $(NO_AVX512)
# The numerical tests: the models' (the allocation solver, the estimators, the backtest).
NUMERICS := tests/models
PYTEST_TIMES := --durations=20

.PHONY: setup demo test lint types pytest pytest-waiting pytest-servers pytest-rest pytest-models numerics \
	numerics-v3 numerics-v2 reliability bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/recrawl demo

# The formatter and linter first; then mypy, the suite in three parts and the numerics
# passes side by side, each target's output kept together: the subprocess- and
# server-bound tests (faults, crashes, load, flows) mostly wait, so they share the two cores
# with the CPU-bound ones; -k: every part runs and reports even when one fails.
test: lint
	@$(MAKE) --no-print-directory -k -j4 --output-sync=target types pytest numerics

lint: $(STAMP)
	@$(TIMED) { $(BIN)/ruff format --check . && $(BIN)/ruff check .; }

types: $(STAMP)
	@$(TIMED) $(BIN)/mypy models sandbox

# The whole suite (pyproject's addopts leave out the long reliability runs), in four parts:
# two that mostly wait on subprocesses and servers (faults, crashes, load; flows, Prefect's
# first start, the UI and notebook tests), the rest, and the models. Four at a time keep
# both cores busy while the waiting parts wait.
WAITING := tests/reliability
SERVERS := tests/cycle tests/flows tests/ui tests/notebook tests/test_first_screen.py
pytest: pytest-waiting pytest-servers pytest-rest pytest-models

pytest-waiting: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(WAITING) $(PYTEST_TIMES)

pytest-servers: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(SERVERS) $(PYTEST_TIMES)

pytest-rest: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(foreach d,$(WAITING) $(SERVERS) $(NUMERICS),--ignore=$(d)) $(PYTEST_TIMES)

pytest-models: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(NUMERICS) $(PYTEST_TIMES)

# The numerical tests again under each capped dispatch (pytest ran them at the CPU's own
# level). A cap above what this CPU has is the CPU's own level: that pass is skipped.
numerics: numerics-v3 numerics-v2

numerics-v3: $(STAMP)
	@if $(BIN)/python -m tests.numpy_dispatch X86_V4; then \
		$(TIMED) NPY_DISABLE_CPU_FEATURES='$(NO_AVX512)' $(BIN)/pytest $(NUMERICS) $(PYTEST_TIMES); \
	else echo "[numerics-v3] no AVX-512 (X86_V4) here: pytest's run was this level"; fi

numerics-v2: $(STAMP)
	@if $(BIN)/python -m tests.numpy_dispatch X86_V3; then \
		$(TIMED) NPY_DISABLE_CPU_FEATURES='$(NO_AVX2)' $(BIN)/pytest $(NUMERICS) $(PYTEST_TIMES); \
	else echo "[numerics-v2] no AVX2/FMA (X86_V3) here: pytest's run was this level"; fi

reliability: $(STAMP)
	@$(TIMED) $(BIN)/pytest -m 'reliability or long_reliability' $(PYTEST_TIMES)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_estimation.py

clean:
	rm -rf $(VENV) data/demo .pytest_cache .mypy_cache .ruff_cache
