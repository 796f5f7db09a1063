from __future__ import annotations

import pytest

from app.display import display_status


def test_offscreen_is_not_a_display(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert display_status().available is False


@pytest.mark.skipif(__import__("sys").platform != "linux", reason="Linux display rules")
def test_linux_without_display_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    status = display_status()
    assert not status.available and "DISPLAY" in status.reason
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    assert display_status().available
