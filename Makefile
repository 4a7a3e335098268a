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

.PHONY: quickstart test install install-dev clean

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

test: install-dev
	$(PY) -m pytest -q -m "not slow" --timeout=900 --durations=15 tests

clean:
	rm -rf $(VENV) runs .pytest_cache
