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

.PHONY: setup run test test-under-load lint package clean gpu-report

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

# The one-folder bundle dist/moss-voice/ (PyInstaller), its self-test (offscreen) and, on Linux,
# dist/moss-voice-<version>-linux-<arch>.tar.gz. See README, "Installing".
package: setup
	$(PY) packaging/build.py

# On a CUDA machine: GPU tests, full-size benchmarks per precision and decode step, codec
# streaming, TTFA/RTF and peak memory against the VRAM plan -> gpu-report/report.{json,md}
# (docs/memory.md). Without CUDA it exits 2 at once. No `setup` first: it must not install.
GPU_PY := $(if $(wildcard $(PY)),$(PY),$(PYTHON))
gpu-report:
	@$(GPU_PY) -m app gpu-report

lint: setup
	$(PY) -m ruff check app tests packaging
	$(PY) -m mypy app

clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache
