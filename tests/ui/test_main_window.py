from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from app.engine.base import EngineInfo
from app.events import ConversationState
from app.settings import Settings
from app.ui.main_window import MainWindow


def test_window_opens_offscreen_with_all_areas(qtbot: QtBot, tmp_path: Path) -> None:
    window = MainWindow(Settings())
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    for name in ("waveformArea", "transcriptArea", "latencyArea"):
        assert window.findChild(object, name) is not None, name
    assert "demo, no model loaded" in window.engine_status.text()
    assert window.mode_status.text() == "Always listening"
    window.grab().save(str(tmp_path / "main_window.png"))
    assert (tmp_path / "main_window.png").stat().st_size > 0


def test_status_bar_follows_settings_and_engine(qtbot: QtBot) -> None:
    window = MainWindow(Settings())
    qtbot.addWidget(window)
    settings = Settings().with_value("turn.mode", "push_to_talk")
    window.apply_settings(settings, EngineInfo(name="MOSS-Speech", is_demo=False, device="cuda:0"))
    assert window.engine_status.text() == "Engine: MOSS-Speech"
    assert window.device_status.text() == "Device: cuda:0"
    assert window.mode_status.text() == "Push-to-talk"
    window.set_state(ConversationState.SPEAKING)
    assert window.state_label.text() == "Speaking"


def test_settings_warning_is_shown(qtbot: QtBot) -> None:
    window = MainWindow(Settings())
    qtbot.addWidget(window)
    window.show_warning("Some settings were reset:\n  - vad.threshold: bad")
    assert window.statusBar().currentMessage() == "Some settings were reset:"
