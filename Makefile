# Instructor / CI entry points. Each target sets up the virtual environment first,
# so on a fresh clone `make grade` and `make test` need nothing installed by hand.
SHELL := /bin/bash
# Debian's interpreter is world-readable; the sandbox drops to an unprivileged uid
# that must still be able to import the standard library (see docs/architecture.md).
PYTHON_BASE ?= $(shell test -x /usr/bin/python3.11 && echo /usr/bin/python3.11 || command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

SUBMISSIONS ?= demo/class
OUT ?= out/demo
JOBS ?=

.PHONY: setup test grade bench release gradescope stubs clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install -q $(FIND_LINKS) ".[dev]"
	@rm -f $(VENV)/.installed-* && touch $@

test: $(STAMP)
	$(PY) -m pytest -q tests

grade: $(STAMP)
	$(PY) -m grader grade $(SUBMISSIONS) --out $(OUT) $(if $(JOBS),--jobs $(JOBS),)

bench: $(STAMP)
	$(PY) -m grader.bench

release: $(STAMP)
	$(PY) -m grader release --out dist

gradescope: $(STAMP)
	$(PY) -m grader gradescope --out dist

stubs: $(STAMP)
	$(PY) -m grader stubs

clean:
	rm -rf out dist .pytest_cache
