# Two commands set everything up on a fresh machine: `make run` and `make test`.
# Both go through `make setup`, which creates .venv when it is missing and (re)installs the app
# whenever pyproject.toml changed since the last install.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU machines pin the local CPU wheel: an unpinned torch pulls several GB of CUDA packages.
# GPU users: see README ("GPU installation"), e.g. make setup TORCH="torch --index-url URL".
TORCH ?= torch==2.13.0
# Debian's libportaudio2: yes = install it, no = never; empty = install as root on CI or without
# a terminal, ask at a terminal, else only say how (scripts/ensure-portaudio.sh).
INSTALL_PORTAUDIO ?=
STAMP := $(VENV)/.moss-voice-installed
# The smart-turn end-of-turn model, taken from the pipecat-ai wheel (scripts/fetch_smart_turn.py).
SMART_TURN := app/vad/data/smart-turn-v3.2-cpu.onnx

.PHONY: setup run test test-under-load lint package clean actionlint installer-check gpu-report

setup: $(STAMP) $(SMART_TURN)

$(SMART_TURN): scripts/fetch_smart_turn.py | $(STAMP)
	-$(PY) scripts/fetch_smart_turn.py

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@INSTALL_PORTAUDIO="$(INSTALL_PORTAUDIO)" sh scripts/ensure-portaudio.sh
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

# GitHub Actions workflows checked by actionlint (from the dev extras; shellcheck on PATH checks
# the run: scripts too). tests/test_workflows.py runs the same in make test.
actionlint: setup
	$(VENV)/bin/actionlint .github/workflows/*.yml

# The Windows installer (packaging/windows/installer.iss) compiled with Inno Setup's compiler
# (npm package innosetup, installed into build/innosetup) under wine, with a stand-in payload;
# then installed, checked, uninstalled and fed broken parts in a throwaway wine prefix.
# Needs wine with wine32 and xvfb-run; says what is missing otherwise. See docs/windows.md.
installer-check:
	$(PYTHON) packaging/windows/installer_check.py --install-compiler

# bandit: new security findings fail; the reviewed ones are in bandit-baseline.json (SECURITY.md).
lint: setup
	$(PY) -m ruff check app tests packaging scripts
	$(PY) -m mypy app
	$(PY) -m bandit -q -r app packaging scripts -c pyproject.toml -b bandit-baseline.json

clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache
