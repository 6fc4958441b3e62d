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
# The capped passes leave out the modules marked numerics_free (strings, bytes, URLs, bloom
# filters: no float arithmetic whose rounding could change an outcome).
# A -m here replaces pyproject's, so the long suites' markers are left out again.
CAPPED := -m 'not numerics_free and not long_reliability and not scale and not long_backtest'
PYTEST_TIMES := --durations=20

.PHONY: setup demo test lint types pytest pytest-servers pytest-firsts pytest-journeys pytest-waiting pytest-rest pytest-models numerics \
	numerics-v3 numerics-v2 reliability scale backtest bench bench-transports clean

# uv installs the pinned set in a tenth of pip's time (16 s against 160 s on 2 cores, cold
# caches); where uv cannot be installed, pip does the same. Bytecode is not compiled at
# install (compiling all of site-packages cost 35 s): each module is compiled when first
# imported, so only what runs pays. An environment that forbids writing bytecode
# (PYTHONDONTWRITEBYTECODE) would make every process recompile prefect's import tree, so
# make's commands run without it.
unexport PYTHONDONTWRITEBYTECODE
$(STAMP): pyproject.toml constraints.txt
	@$(TIMED) { $(PYTHON) -m venv $(VENV) && \
	  if $(BIN)/python -m pip install --quiet -c constraints.txt uv; then \
	    $(BIN)/uv pip install --quiet --python $(BIN)/python -c constraints.txt -e '.[dev]'; \
	  else $(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[dev]'; fi; }
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/recrawl demo

# The formatter and linter first; then the suite in six parts, the numerics passes and mypy
# side by side, each target's output kept together: four parts mostly wait on subprocesses
# and servers (flows; Prefect's first start, crashes, the UI, notebook and first-screen
# tests; faults and load), so they share the two cores with the CPU-bound ones. Every part
# starts at once (-j9: mypy queued behind them added 100 s); -k: every part runs and reports
# even when one fails.
test: lint
	@$(MAKE) --no-print-directory -k -j9 --output-sync=target pytest numerics types

lint: $(STAMP)
	@$(TIMED) { $(BIN)/ruff format --check . && $(BIN)/ruff check .; }

types: $(STAMP)
	@$(TIMED) $(BIN)/mypy models sandbox tasks flows

# The whole suite (pyproject's addopts leave out the long reliability runs).
WAITING := tests/reliability
FIRST_START := tests/flows/test_first_start.py
FIRSTS := $(FIRST_START) tests/test_first_screen.py
JOURNEYS := tests/tasks/cycle tests/ui tests/notebook
SERVERS := tests/flows
pytest: pytest-servers pytest-firsts pytest-journeys pytest-waiting pytest-rest pytest-models

pytest-servers: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(SERVERS) --ignore=$(FIRST_START) $(PYTEST_TIMES)

pytest-firsts: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(FIRSTS) $(PYTEST_TIMES)

pytest-journeys: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(JOURNEYS) $(PYTEST_TIMES)

pytest-waiting: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(WAITING) $(PYTEST_TIMES)

pytest-rest: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(foreach d,$(WAITING) $(SERVERS) $(FIRSTS) $(JOURNEYS) $(NUMERICS),--ignore=$(d)) $(PYTEST_TIMES)

pytest-models: $(STAMP)
	@$(TIMED) $(BIN)/pytest $(NUMERICS) $(PYTEST_TIMES)

# The numerical tests again under each capped dispatch (pytest ran them at the CPU's own
# level). A cap above what this CPU has is the CPU's own level: that pass is skipped.
numerics: numerics-v3 numerics-v2

numerics-v3: $(STAMP)
	@if $(BIN)/python -m tests.numpy_dispatch X86_V4; then \
		$(TIMED) NPY_DISABLE_CPU_FEATURES='$(NO_AVX512)' $(BIN)/pytest $(NUMERICS) $(CAPPED) $(PYTEST_TIMES); \
	else echo "[numerics-v3] no AVX-512 (X86_V4) here: pytest's run was this level"; fi

numerics-v2: $(STAMP)
	@if $(BIN)/python -m tests.numpy_dispatch X86_V3; then \
		$(TIMED) NPY_DISABLE_CPU_FEATURES='$(NO_AVX2)' $(BIN)/pytest $(NUMERICS) $(CAPPED) $(PYTEST_TIMES); \
	else echo "[numerics-v2] no AVX2/FMA (X86_V3) here: pytest's run was this level"; fi

reliability: $(STAMP)
	@$(TIMED) $(BIN)/pytest -m 'reliability or long_reliability' $(PYTEST_TIMES)

# The scale-out run (issue 21): PostgreSQL from Debian's package (a throwaway cluster in /tmp,
# a free loopback port), a Prefect server on it, three workers with their own PREFECT_HOME,
# two overlapping cycles over 1,000 sandbox hosts, one worker SIGKILLed. Prints the figures.
# Needs `apt-get install -y postgresql`; without it the test says so and skips.
scale: $(STAMP)
	@$(TIMED) $(BIN)/pytest tests/scaleout tests/models/allocation/test_shards.py \
	  tests/tasks/cycle/test_sharded_planning.py -m scale -s $(PYTEST_TIMES)

# Issue 18's acceptance run: the deployed planner from scratch (no seed crawl, no
# Last-Modified) over 4 seeds x 3 web families x 5 budgets, the periodic and shifting webs and
# change capture, 20,000 pages; prints the figures and fails on every missed target.
backtest: $(STAMP)
	@$(TIMED) $(BIN)/pytest tests/models/backtest -m long_backtest -s $(PYTEST_TIMES)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_estimation.py

# Fetch CPU per page, one run: the engine vs bare aiohttp, bare httpx and Scrapy on Debian's
# nginx (1,000 loopback hosts, 20,000 pages of ~20 KiB). Scrapy and httpx-aiohttp are the
# [bench] extra, installed here; a peer that is missing is skipped with a message.
bench-transports: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(BIN)/python benchmarks/bench_transports.py --hosts 1000 --pages 20 --concurrency 64 --repeat 3

clean:
	rm -rf $(VENV) data/demo .pytest_cache .mypy_cache .ruff_cache
