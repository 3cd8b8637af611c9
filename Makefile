# Set-up and everyday commands. `make demo` and `make test` work on a fresh machine with python3.11.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format crd clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agents-operator validate examples/pendulum.yaml
	$(BIN)/agents-operator render examples/pendulum.yaml

test: $(STAMP)
	$(BIN)/ruff check agents_operator tests benchmarks
	$(BIN)/ruff format --check agents_operator tests benchmarks
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check agents_operator tests benchmarks
	$(BIN)/ruff format --check agents_operator tests benchmarks

format: $(STAMP)
	$(BIN)/ruff format agents_operator tests benchmarks
	$(BIN)/ruff check --fix agents_operator tests benchmarks

crd: $(STAMP)
	$(BIN)/agents-operator crd > crds/agentsjob.yaml

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
