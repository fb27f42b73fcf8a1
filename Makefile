# Instructor / CI entry points. Each target sets up the virtual environment first,
# so on a fresh clone `make grade` and `make test` need nothing installed by hand.
SHELL := /bin/bash
# A supported Python (3.11-3.13), preferring one every user can read: the sandbox's unprivileged uid
# imports the standard library from it (.ci/pick-python says what to install when there is none).
PYTHON_BASE ?= $(shell .ci/pick-python 2>/dev/null)
# The kit's venv; `make test-python` and the suite's own make runs name another (VENV=.venv-3.12).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
WHEELS ?= /opt/wheels
FIND_LINKS := $(if $(wildcard $(WHEELS)),--find-links $(WHEELS),)
TORCH := 2.13.0

# The lesson every instructor target works on (grade, review, release, gradescope, stubs, bench, killrate):
# a folder's name under grader/ (make grade LESSON=day14) or a lesson folder's path. Unset: the only lesson
# under grader/, or of several the kit's default (pyproject.toml, [tool.grader] default_lesson).
LESSON ?=
LESSON_OPTION = $(if $(LESSON),--lesson $(LESSON),)
# The class `make grade` and `make review` work on: unless SUBMISSIONS= says another, the lesson's demo class
# (lesson.toml [docs] demo_class; the default lesson's is demo/class), into out/demo (out/<lesson> for LESSON=).
# Read from the lesson once, when a recipe first needs it (after `make setup`).
LESSON_DEMO = $(eval LESSON_DEMO := $(shell $(PY) -c 'import os, sys; from grader.lesson import load_lesson; \
  found = load_lesson(sys.argv[1]).demo_class; print(os.path.relpath(found) if found else "")' $(LESSON) 2>/dev/null))$(LESSON_DEMO)
SUBMISSIONS ?= $(if $(LESSON),$(LESSON_DEMO),demo/class)
OUT ?= out/$(if $(LESSON),$(notdir $(patsubst %/,%,$(LESSON))),demo)
JOBS ?=
FORCE ?=
ONLY ?=
# The run's seed (`make grade SEED=N`, --seed): the hidden tests' probe inputs and call order; unset: the one
# kept in OUT/_seed, or a new one.
SEED ?=
# One more test worker than cores: see `test` below.
TEST_WORKERS ?= $(shell n=$$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); echo $$((n + 1)))
BASE ?=
SCALE ?=
N ?=
# Who each submission belongs to (grader/intake/roster.py): grades.csv gets a row per student. A lesson's demo
# class has its roster beside it (demo/class: demo/roster.csv, where a pair shares kim_zip; demo/bpe/class:
# demo/bpe/roster.csv), and maybe regrade requests there, copied into OUT unless OUT has some.
DEMO_CLASS = $(filter demo/class demo/class/ $(if $(LESSON),$(LESSON_DEMO) $(LESSON_DEMO)/,),$(SUBMISSIONS))
DEMO_HOME = $(dir $(patsubst %/,%,$(firstword $(DEMO_CLASS))))
ROSTER ?= $(if $(DEMO_CLASS),$(wildcard $(DEMO_HOME)roster.csv),)
DEMO_REGRADES = $(if $(DEMO_CLASS),$(wildcard $(DEMO_HOME)regrade_requests.csv),)

.PHONY: setup bytecode test test-python grade review bench killrate release gradescope stubs clean

setup: $(STAMP)

# umask 022: the sandbox's unprivileged uid must be able to read every installed file.
$(STAMP): pyproject.toml
	@test -x $(PY) || test -n "$(PYTHON_BASE)" || .ci/pick-python
	@test -x $(PY) || (umask 022 && $(PYTHON_BASE) -m venv $(VENV))
	@# On Linux x86_64, PyPI's torch is a multi-GB CUDA build: install only a CPU wheel found locally.
	@tag=$$($(PY) -c 'import sys; print("cp%d%d" % sys.version_info[:2])'); \
	if [ "$$(uname -sm)" = "Linux x86_64" ] && ! $(PY) -c 'import torch' 2>/dev/null && \
	   ! ls $(WHEELS)/torch-$(TORCH)+cpu-$$tag-*.whl >/dev/null 2>&1; then \
	  echo "make setup: no CPU build of torch $(TORCH) for $$tag in $(WHEELS), and PyPI's Linux build is the" \
	       "multi-GB CUDA one. Either build .venv from Python 3.11 (rm -rf $(VENV) && make setup" \
	       "PYTHON_BASE=/usr/bin/python3.11), or first install torch's CPU wheel for this Python:" \
	       "$(PY) -m pip install torch==$(TORCH) --index-url <PyTorch's CPU-only index, from the install" \
	       "selector on PyTorch's website>, then run make setup again." >&2; exit 1; fi
	umask 022 && $(PY) -m pip install -q $(FIND_LINKS) -e ".[dev]"
	@# Left out (see pyproject.toml, [project.optional-dependencies]): jsonschema's optional IRI checker, whose
	@# import alone takes most of every `import nbformat` (each nbgrader command, each release build).
	@if $(PY) -m pip show -q rfc3987-syntax 2>/dev/null; then $(PY) -m pip uninstall -y -q rfc3987-syntax; fi
	@# A venv that already has PyPI's CUDA build is used as it is: the sandbox grades alike with it.
	@$(PY) -c 'import torch; torch.version.cuda and print("make setup: using the torch in $(VENV) (" + torch.__version__ + "), a CUDA build: several GB where the CPU build is under 1 GB; it grades the same")'
	@rm -f $(VENV)/.installed-* && touch $@

# The suite's files spread over TEST_WORKERS processes (default: one per core and one more), a file's tests kept
# together in one worker so its module fixtures (a graded class, a built release) are made once. About a sixth of
# a worker's time is waiting (on kernels, sandboxed children, nbgrader, a browser), which a worker more than cores
# fills: on a quiet 2-core machine, one run each, 2 workers took 307 s, 3 took 278 s, 4 took 292 s. Each
# worker has its own sandbox uids (tests/fixtures/engine_helpers.py: uid_base_for_tests, by pid).
# TEST_WORKERS=0 runs everything in this one process. The longest files are handed out first, and the
# visible-parity slices spread over the workers (tests/conftest.py, LongestFirst); --durations lists the
# slowest tests in every log, CI's included, so a test that grows slow is seen where it grew.
# The engine's bytecode, compiled beside its sources (grader/**/__pycache__: ignored by git, the release and the
# Gradescope zip). Where the shell sets PYTHONDONTWRITEBYTECODE (this machine's image does), Python never writes it,
# and every process that imports the engine compiled grader/ from source again: ~0.25 s of CPU each, for the grader,
# its zygote, each checker and scan helper, and the hundreds of processes of the suite. Up to date: ~0.3 s.
# Only grader/: solutions/ and assignments/ never get a __pycache__.
bytecode: $(STAMP)
	@umask 022 && $(PY) -m compileall -q -j 0 grader >/dev/null

test: $(STAMP) bytecode
	$(PY) -m pytest -q --durations=25 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) tests

# The same suite on another supported Python (its own .venv-X.Y, PyPI's torch): make test-python PY=3.13
test-python:
	.ci/test-python $(PY)

grade: $(STAMP) bytecode
	@test -n "$(SUBMISSIONS)" || { echo "make grade: the lesson $(LESSON) declares no demo class; say which class to" \
	  "grade: make grade LESSON=$(LESSON) SUBMISSIONS=path/to/class" >&2; exit 2; }
	$(if $(DEMO_REGRADES),@mkdir -p $(OUT) && { test -e $(OUT)/regrade_requests.csv || cp $(DEMO_REGRADES) $(OUT)/; })
	$(PY) -m grader grade $(SUBMISSIONS) --out $(OUT) $(if $(JOBS),--jobs $(JOBS),) $(if $(FORCE),--force,) $(if $(ONLY),--only $(ONLY),) $(if $(SEED),--seed $(SEED),) $(if $(ROSTER),--roster $(ROSTER),) $(LESSON_OPTION)

# The page for looking at each student and setting points by hand (OUT/overrides.csv).
review: $(STAMP)
	$(PY) -m grader review $(OUT) --submissions $(SUBMISSIONS) $(LESSON_OPTION)

# make bench BASE=<commit>: the same class graded by that commit too, in turns, so ratios come from one run.
# SCALE=1000 grades a class of that size too (the per-submission figure should not grow with the class).
bench: $(STAMP)
	$(PY) -m grader.devtools.bench $(if $(N),-n $(N),) $(if $(JOBS),--jobs $(JOBS),) $(if $(BASE),--base $(BASE),) $(if $(SCALE),--scale $(SCALE),) $(LESSON_OPTION)

# The kill rate: every catalogue mutant and correct variant of the lesson graded, the rates printed.
killrate: $(STAMP)
	$(PY) -m grader killrate $(LESSON_OPTION)

release: $(STAMP)
	$(PY) -m grader release --out dist $(LESSON_OPTION)

gradescope: $(STAMP)
	$(PY) -m grader gradescope --out dist $(LESSON_OPTION)

stubs: $(STAMP)
	$(PY) -m grader stubs $(LESSON_OPTION)

clean:
	rm -rf out dist .pytest_cache
