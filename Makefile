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

# uv installs what pip would, with the same versions, in a fraction of the time (the dev extras from empty caches,
# bytecode compiled by both: 68 s against pip's 168 s on the 2-core development machine). It does not read pip's
# configuration, so the folder of local wheels pip is told of (there, the CPU build of torch) is handed on. Nor does
# it compile bytecode for every module it installs (18,466 files, 32 of the 37 s of an install from uv's cache
# there): Python writes a module's bytecode when a process first imports it (the whole test suite imports 5,997 of
# them). An environment that sets PYTHONDONTWRITEBYTECODE forbids that, so that every process recompiles what it
# imports (20 s to import hfzoo's libraries against 8 s there): the commands below run without it.
unexport PYTHONDONTWRITEBYTECODE
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL = $(VENV)/bin/uv pip install -q --python $(PY) $(foreach d,$(FIND_LINKS),--find-links $(d))

$(VENV)/bin/uv:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "uv>=0.9"

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/uv
	$(UV_INSTALL) "$(TORCH_SPEC)" -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(UV_INSTALL) -e ".[dev]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

quickstart: install
	$(VENV)/bin/hfzoo quickstart $(QUICKSTART_ARGS)

# Two workers, one per core, with one torch thread each (tests/conftest.py). Each test file runs whole in one
# worker: its module fixtures are built once and the README's blocks run in order (`--dist loadgroup` would be
# finer, but pytest 9.2 drops its groups: pytest-xdist issue 1386). The slow tests are each covered by a faster
# one in `make test`, but for the benchmarks' tiny runs, which test benchmark scripts rather than hfzoo; CI (.ci/run)
# runs both. Files go out in the order tests/conftest.py gives, longest first, not xdist's most-tests-first.
PYTEST := $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --timeout=900 --durations=15

test: install-dev
	$(PYTEST) -m "not slow" tests

test-slow: install-dev
	$(PYTEST) -m slow tests

clean:
	rm -rf $(VENV) runs .pytest_cache
