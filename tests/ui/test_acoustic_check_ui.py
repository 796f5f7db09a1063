"""The acoustic check in the settings panel and on the first-run screen; the false-interruption
count in the status bar."""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.events import (
    AcousticCheckFinished,
    ApplySettings,
    FalseInterruptionDetected,
    RunAcousticCheck,
)
from app.settings import Settings
from app.ui.bridge import UiBridge
from app.ui.main_window import MainWindow
from app.ui.settings_dialog import SettingsDialog
from tests.ui.conftest import FakePort, done_first_run, no_gpu, open_window, save_after_layout

FOUND = AcousticCheckFinished(True, "Mic", "Speakers", echo_detected=True, delay_ms=62.0,
                              round_trip_ms=84.0, echo_return_loss_db=4.6,
                              recommended_mode="automatic",
                              message="The microphone hears the speaker.")
LOUD = AcousticCheckFinished(True, "Mic", "Speakers", echo_detected=True, delay_ms=30.0,
                             round_trip_ms=50.0, echo_return_loss_db=-14.0,
                             recommended_mode="half_duplex", message="The echo is very loud.")


def test_the_echo_page_runs_the_check_and_applies_its_recommendation(
        qtbot: QtBot, port: FakePort, screenshot_dir: Path) -> None:
    bridge = UiBridge(port)
    dialog = SettingsDialog(Settings(), bridge, gpu_query=no_gpu)
    qtbot.addWidget(dialog)
    applied: list[Settings] = []
    dialog.applied.connect(lambda settings, _reload: applied.append(settings))
    dialog.show()
    dialog.show_group("echo")
    panel = dialog.acoustic_check
    assert panel.isVisible() and not panel.apply_button.isVisible()
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert port.commands_of(RunAcousticCheck) and not panel.run_button.isEnabled()
    port.emit(LOUD)
    qtbot.waitUntil(lambda: panel.apply_button.isVisible())
    text = panel.result.text()
    assert "30 ms after the sound left the speaker" in text and "14 dB louder than" in text
    assert "Half-duplex" in text
    assert panel.run_button.isEnabled()
    save_after_layout(qtbot, dialog, screenshot_dir / "settings_acoustic_check.png",
                      (panel.result, panel.apply_button))
    qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
    assert applied[-1].echo.mode == "half_duplex"
    assert dialog.value_of("echo.mode") == "half_duplex"


def test_a_check_that_could_not_run_says_so(qtbot: QtBot) -> None:
    dialog = SettingsDialog(Settings(), UiBridge(None), gpu_query=no_gpu)
    qtbot.addWidget(dialog)
    dialog.acoustic_check.run()  # no voice loop attached
    assert "cannot run" in dialog.acoustic_check.result.text()
    dialog.bridge.post(AcousticCheckFinished(False, None, None, message="No speaker."))
    qtbot.waitUntil(lambda: "did not work" in dialog.acoustic_check.result.text())
    assert not dialog.acoustic_check.apply_button.isVisible()


def test_the_first_run_screen_offers_the_check_and_starts_the_voice_loop_for_it(
        qtbot: QtBot, port: FakePort, screenshot_dir: Path) -> None:
    window = MainWindow(Settings(), port_factory=lambda _s: port, persist_settings=False,
                        gpu_query=no_gpu)
    qtbot.addWidget(window)
    window.show()
    assert window.showing_first_run
    panel = window.echo_ui.panel
    assert panel.isVisible()
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert window.bridge.port is port and port.commands_of(RunAcousticCheck)
    assert window.showing_first_run  # still on the first-run screen
    port.emit(FOUND)
    qtbot.waitUntil(lambda: panel.apply_button.isVisible())
    assert "62 ms after" in panel.result.text() and "Automatic" in panel.result.text()
    save_after_layout(qtbot, window, screenshot_dir / "first_run_acoustic_check.png",
                      (panel.result, panel.apply_button))
    panel.apply_requested.emit("headset")
    assert window.settings.echo.mode == "headset"
    assert port.commands_of(ApplySettings)[-1].settings.echo.mode == "headset"


def test_false_interruptions_are_counted_in_the_status_bar(qtbot: QtBot,
                                                           port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port, gpu_query=no_gpu,
                         persist_settings=False)
    label = window.echo_ui.false_interruptions
    assert not label.isVisible()
    port.emit(FalseInterruptionDetected(1, 3.2, False, 1))
    port.emit(FalseInterruptionDetected(2, 9.7, True, 2))
    qtbot.waitUntil(lambda: label.text() == "False interruptions: 2")
    assert label.isVisible()


class StartablePort(FakePort):
    """A port like the pipeline: its loop runs only after ``start()``."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()

    def start(self) -> None:
        self.started.set()


def test_the_first_run_check_starts_the_voice_loop_it_attaches(qtbot: QtBot) -> None:
    port = StartablePort()
    window = MainWindow(Settings(), port_factory=lambda _s: port, persist_settings=False,
                        gpu_query=no_gpu)
    qtbot.addWidget(window)
    window.show()
    window.echo_ui.panel.run()
    assert window.bridge.port is port and port.commands_of(RunAcousticCheck)
    qtbot.waitUntil(port.started.is_set, timeout=60_000)
