"""Test setup: offscreen Qt, and every test gets its own settings/data/log folders."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from hypothesis import settings

from app.hub_offline import APPLIED_MARKER, OFFLINE_FLAGS

# Property tests draw the same examples on every run ("checks": a red CI run means a change, not
# the luck of a draw; a CLI option the draw reached only sometimes failed 1 run in 3 on
# 2026-11-26). HYPOTHESIS_PROFILE=explore draws new examples each run, to look for more.
settings.register_profile("checks", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "checks"))


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Point MOSS_VOICE_HOME at a fresh folder so no test touches the real user folders."""
    home = tmp_path_factory.mktemp("moss-voice-home")
    monkeypatch.setenv("MOSS_VOICE_HOME", str(home))
    monkeypatch.delenv("MOSS_VOICE_SETTINGS", raising=False)
    return home


@pytest.fixture(autouse=True)
def hugging_face_flags_restored(monkeypatch: pytest.MonkeyPatch):
    """Each test starts with no Hugging Face offline flags, and ends with huggingface_hub online
    again: ``app.cli.main`` (called in-process by many tests) turns the process offline."""
    for name in (*OFFLINE_FLAGS, APPLIED_MARKER):
        monkeypatch.delenv(name, raising=False)
    yield
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = False  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The package build (minutes) runs last, after the quick feedback of everything else."""
    items.sort(key=lambda item: item.get_closest_marker("package") is not None)


# What the suite writes to the temp folder at its peak: the one-folder bundle (~0.8 GiB, built
# once and deleted), and the download tests, which refuse (as the app does) when less than the
# 1 GiB reserve would be left after their few KiB.
TEMP_NEEDED_BYTES = 5 << 29  # 2.5 GiB


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A full temp folder fails a dozen unrelated tests (downloads refused, the bundle build's
    ENOSPC); say so at the end of the log, where CI's excerpt shows it."""
    import tempfile
    from pathlib import Path

    from app.download_progress import format_bytes
    from app.model_store import free_disk_bytes

    temp = Path(tempfile.gettempdir())
    free = free_disk_bytes(temp)
    if free < TEMP_NEEDED_BYTES:
        terminalreporter.write_line(
            f"note: only {format_bytes(free)} free in {temp} (the suite needs about "
            f"{format_bytes(TEMP_NEEDED_BYTES)}): failures of the download tests and the bundle "
            "build may be the disk, not the code", yellow=True)
