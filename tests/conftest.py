"""Test setup: offscreen Qt, and every test gets its own settings/data/log folders."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Point MOSS_VOICE_HOME at a fresh folder so no test touches the real user folders."""
    home = tmp_path_factory.mktemp("moss-voice-home")
    monkeypatch.setenv("MOSS_VOICE_HOME", str(home))
    monkeypatch.delenv("MOSS_VOICE_SETTINGS", raising=False)
    return home


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The package build (minutes) runs last, after the quick feedback of everything else."""
    items.sort(key=lambda item: item.get_closest_marker("package") is not None)
