"""Test setup: offscreen Qt, and every test gets its own settings/data/log folders."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from app.hub_offline import APPLIED_MARKER, OFFLINE_FLAGS


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
