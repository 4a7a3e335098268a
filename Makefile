# Two commands for a fresh machine: `make quickstart` and `make test`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
QUICKSTART_ARGS ?=
PY := $(VENV)/bin/python
# glibc would hand freed pages back to the OS after every step and re-fault them on the next, which cost
# 15-35% of a CPU training step on the 2-core development machine; keep them mapped instead.
export MALLOC_MMAP_THRESHOLD_ ?= 17179869184
export MALLOC_TRIM_THRESHOLD_ ?= 17179869184
export HF_HUB_OFFLINE ?= 1
export HF_EVALUATE_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: quickstart test test-slow install install-dev clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

quickstart: install
	$(VENV)/bin/hfzoo quickstart $(QUICKSTART_ARGS)

# Two workers, one per core, with one torch thread each (tests/conftest.py). Each test file runs whole in one
# worker: its module fixtures are built once and the README's blocks run in order (`--dist loadgroup` would be
# finer, but pytest 9.2 drops its groups: pytest-xdist issue 1386). The slow tests are each covered by a faster
# one in `make test`, but for the benchmarks' tiny runs, which test benchmark scripts rather than hfzoo; CI (.ci/run)
# runs both.
PYTEST := $(PY) -m pytest -q -n 2 --dist loadfile --timeout=900 --durations=15

test: install-dev
	$(PYTEST) -m "not slow" tests

test-slow: install-dev
	$(PYTEST) -m slow tests

clean:
	rm -rf $(VENV) runs .pytest_cache
