"""Keyboard and window: the talk key never clicks a button, standard shortcuts in the menus, a
focus ring you can see, a usable 800×500 window, listening that follows the devices, About."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QKeySequence
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from app.events import (
    AudioDevicesOpened,
    ConversationState,
    PressToTalk,
    SetMuted,
    StateChanged,
    TurnMeasured,
    TurnRecord,
)
from app.ui.style import FOCUS_COLOR
from app.ui.window_menus import about_html
from tests.ui.conftest import FakePort, done_first_run, open_window, save_after_layout


def test_the_talk_key_never_clicks_the_focused_button(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    mute = window.controls.mute_button
    mute.setFocus()
    qtbot.waitUntil(mute.hasFocus)
    qtbot.keyClick(mute, Qt.Key.Key_Space)  # always listening: Space is not "press"
    assert not mute.isChecked() and port.commands_of(SetMuted) == []
    assert "Always listening: just talk" in window.statusBar().currentMessage()
    qtbot.keyClick(mute, Qt.Key.Key_Return)  # Enter presses the focused button
    qtbot.waitUntil(mute.isChecked)
    assert port.commands_of(SetMuted) == [SetMuted(True)]
    assert window.state_label.text() == "Muted"
    assert "microphone muted" in window.mode_status.text()


def test_push_to_talk_without_a_microphone_does_not_pretend(qtbot: QtBot,
                                                           port: FakePort) -> None:
    window = open_window(qtbot, done_first_run().with_value("turn.mode", "push_to_talk"), port)
    port.emit(AudioDevicesOpened(None, "Speakers"))
    port.emit(StateChanged(ConversationState.IDLE, 0.0))
    qtbot.waitUntil(lambda: window.state_label.text() == "No microphone")
    assert window.mode_status.text() == "Push-to-talk — no microphone"
    assert not window.controls.talk_button.isEnabled()
    qtbot.keyPress(window, Qt.Key.Key_Space)
    qtbot.keyRelease(window, Qt.Key.Key_Space)
    assert port.commands_of(PressToTalk) == []  # nothing to record: nothing is sent
    assert window.state_label.text() == "No microphone"  # not "You are speaking"
    assert "No microphone is open" in window.statusBar().currentMessage()
    port.emit(AudioDevicesOpened("USB Mic", "Speakers"))  # plugged in
    qtbot.waitUntil(lambda: window.state_label.text() == "Hold Space to talk")
    qtbot.keyPress(window, Qt.Key.Key_Space)
    assert port.commands_of(PressToTalk) == [PressToTalk()]


def test_standard_shortcuts_are_in_the_menus(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    actions = window.menus.actions
    assert actions["quit"].shortcut() == QKeySequence("Ctrl+Q")
    assert actions["settings"].shortcut() == QKeySequence("Ctrl+,")
    assert actions["help"].shortcut() == QKeySequence("F1")
    assert actions["reload"].shortcut() == QKeySequence("Ctrl+R")
    actions["help"].trigger()
    help_dialog = window.menus.help_dialog
    assert help_dialog is not None and help_dialog.isVisible()
    assert "Push-to-talk" in help_dialog.browser.toPlainText()
    actions["settings"].trigger()
    assert window.settings_dialog is not None and window.settings_dialog.isVisible()
    actions["reload"].trigger()
    assert port.commands_of(type(port.commands[-1]))[-1].reload_engine is True
    html = about_html()
    for needed in ("Python", "Qt", "PySide6", "PyTorch", "Apache-2.0", "LGPL-3.0",
                   "github.com/OpenMOSS/MOSS-Speech", "arxiv.org/abs/2510.00499"):
        assert needed in html


def ring_pixels(image: QImage) -> int:
    """Pixels of (nearly) the focus ring's colour."""
    target = FOCUS_COLOR
    count = 0
    for y in range(image.height()):
        for x in range(image.width()):
            c = QColor(image.pixel(x, y))
            if (abs(c.red() - target.red()) + abs(c.green() - target.green())
                    + abs(c.blue() - target.blue())) < 60:
                count += 1
    return count


def test_the_focused_button_has_a_visible_ring(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    button = QPushButton("Focus me", window.centralWidget())
    button.resize(120, 32)
    button.show()
    plain = ring_pixels(button.grab().toImage())
    button.setFocus()
    qtbot.waitUntil(button.hasFocus)
    ringed = ring_pixels(button.grab().toImage())
    assert ringed > plain + 2 * (120 + 32)  # a 2 px ring all around, not a faint line


def test_a_small_window_keeps_the_transcript_and_a_readable_latency_table(
        qtbot: QtBot, port: FakePort, screenshot_dir: Path) -> None:
    window = open_window(qtbot, done_first_run(), port)
    window.resize(800, 500)
    qtbot.waitUntil(lambda: window.size().width() == 800 and window.size().height() == 500)
    for turn in range(1, 5):
        port.emit(TurnMeasured(TurnRecord(turn, 1.0, 2.0, 2.5, 2.6, 2.7, 700.0 + turn,
                                          {"endpoint_wait": 500.0, "output_buffer": 90.0},
                                          1500.0)))
    qtbot.waitUntil(lambda: window.latency.history.rowCount() == 4)
    table = window.latency.table
    rows_shown = table.viewport().height() // table.verticalHeader().defaultSectionSize()
    assert rows_shown >= 3, rows_shown
    assert window.page.transcript_section.height() > 150
    save_after_layout(qtbot, window, screenshot_dir / "main_window_800x500.png",
                      (table, window.transcript))
    window.page.waves_section.set_expanded(False)  # fold the waveforms: the rest grows
    qtbot.waitUntil(lambda: table.viewport().height() // table.verticalHeader()
                    .defaultSectionSize() > rows_shown)
