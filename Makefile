# The two commands at the top of README.md: `make demo` and `make test`.
# Both create .venv if it is missing and install the project into it from pyproject.toml.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test fast lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,dev,flower]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cloaknet demo

# tests/mixnet runs with cloaknet made unimportable (tests/conftest.py): the mixnet stands alone.
test: $(STAMP)
	$(BIN)/ruff check cloaknet mixnet scripts tests
	$(BIN)/mypy
	MIXNET_ONLY=1 $(BIN)/python -m pytest -q tests/mixnet
	$(BIN)/python -m pytest -q tests --ignore=tests/mixnet

# For iteration: lint, types and every test not marked slow (no real OS processes).
fast: $(STAMP)
	$(BIN)/ruff check cloaknet mixnet scripts tests
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check cloaknet mixnet scripts tests

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python scripts/bench_encode.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
