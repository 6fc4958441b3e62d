# Two commands for a newcomer: `make demo` and `make test`. Both build the virtual
# environment first if it is missing or older than pyproject.toml / constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint types pytest reliability bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/recrawl demo

test: lint types pytest

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

types: $(STAMP)
	$(BIN)/mypy models sandbox

pytest: $(STAMP)
	$(BIN)/pytest

reliability: $(STAMP)
	$(BIN)/pytest -m 'reliability or long_reliability'

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_estimation.py

clean:
	rm -rf $(VENV) data/demo .pytest_cache .mypy_cache .ruff_cache
