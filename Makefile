# Two commands set everything up on a fresh machine: `make run` and `make test`.
# Both go through `make setup`, which creates .venv when it is missing and (re)installs the app
# whenever pyproject.toml changed since the last install.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU machines pin the local CPU wheel: an unpinned torch pulls several GB of CUDA packages.
# GPU users: see README ("GPU installation"), e.g. make setup TORCH="torch --index-url URL".
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.moss-voice-installed

.PHONY: setup run test test-under-load mutation lint package clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@sh scripts/ensure-portaudio.sh
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e ".[dev,package]"
	@touch $(STAMP)

run: setup
	$(PY) -m app

test: lint
	$(PY) -m pytest

# The UI and conversation tests, 10 runs in a row while another process keeps a core busy: what
# CI's shared cores do to a test that waits for the wrong thing (scripts/test_under_load.py).
test-under-load: setup
	$(PY) scripts/test_under_load.py

# Mutation testing of the core modules, each against its own tests (scripts/mutation.py,
# docs/mutation.md); fails when a module kills < 90 % of its non-equivalent mutants. Not part of
# `make test`. MODULES="sampling vad" picks some; the working folders are in mutants/.
mutation: setup
	nice -n 10 $(PY) scripts/mutation.py $(MODULES)

# The one-folder bundle dist/moss-voice/ (PyInstaller), its self-test (offscreen) and, on Linux,
# dist/moss-voice-<version>-linux-<arch>.tar.gz. See README, "Installing".
package: setup
	$(PY) packaging/build.py

lint: setup
	$(PY) -m ruff check app tests packaging
	$(PY) -m mypy app

clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache mutants
