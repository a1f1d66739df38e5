# traceladder: `make demo` runs a whole ladder on the embedded default; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.traceladder-setup

.PHONY: setup demo test bench validate images clean

setup: $(STAMP)

# Idempotent: a re-run that finds the venv up to date does nothing.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	@touch $(STAMP)

demo: setup
	$(BIN)/traceladder demo

test: setup
	$(BIN)/python -m pytest tests

bench: setup
	$(BIN)/python -m traceladder.bench

validate: setup
	@for f in include/configs/ladders/*.yaml; do $(BIN)/traceladder validate $$f || exit 1; done

clean:
	rm -rf .traceladder test-artifacts
