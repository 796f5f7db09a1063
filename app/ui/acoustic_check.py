"""The acoustic check, as the person sees it: one button, the result, the recommended mode.

Used in the settings panel's "Echo handling" page and on the first-run screen. The check itself
runs in the voice loop (``RunAcousticCheck`` → ``AcousticCheckFinished``); the panel only sends
the command through ``runner`` and shows the answer. "Use …" emits ``apply_requested(mode)``
and the owner changes ``echo.mode``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QStatusBar, QVBoxLayout, QWidget

from app.events import AcousticCheckFinished, FalseInterruptionDetected, RunAcousticCheck
from app.settings import Settings
from app.ui.bridge import UiBridge


class EchoWindow(Protocol):
    """What the echo parts need of the main window (not the window itself: no import
    circle)."""

    @property
    def bridge(self) -> UiBridge: ...

    @property
    def settings(self) -> Settings: ...

    def statusBar(self) -> QStatusBar: ...  # Qt's name

    def attach_voice_loop(self, announce_missing: bool = True) -> bool: ...

    def update_settings(self, settings: Settings, reload_engine: bool = False) -> None: ...

MODE_NAMES = {"automatic": "Automatic (echo cancellation)",
              "headset": "Headset (no echo cancellation)",
              "half_duplex": "Half-duplex (no interrupting while it speaks)"}
EXPLANATION = ("Using speakers? The check plays a short chirp and listens to it with the "
               "microphone, so the app knows how loud the echo is and how late it comes back, "
               "and can recommend how to handle it. Keep the room quiet for a second.")


def describe(event: AcousticCheckFinished) -> str:
    """The result in one short paragraph (rich text)."""
    if not event.ok:
        return f"<b>The check did not work.</b> {event.message}"
    if not event.echo_detected:
        found = "<b>No echo heard.</b>"
    else:
        loss = event.echo_return_loss_db or 0.0
        level = (f"{loss:.0f} dB quieter than" if loss >= 0.5 else
                 f"{-loss:.0f} dB louder than" if loss <= -0.5 else "as loud as")
        found = (f"<b>Echo found:</b> the microphone hears the speaker {level} what was "
                 f"played, {event.delay_ms:.0f} ms after the sound left the speaker "
                 f"({event.round_trip_ms:.0f} ms from the app playing it to the app hearing "
                 "it, counting the sound card's buffers). The echo canceller uses this delay.")
    mode = MODE_NAMES.get(event.recommended_mode or "", event.recommended_mode or "")
    return f"{found}<br>Recommended: <b>{mode}</b>. {event.message}"


class AcousticCheckPanel(QWidget):
    apply_requested = Signal(str)

    def __init__(self, bridge: UiBridge, runner: Callable[[], bool] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("acousticCheckPanel")
        self.bridge = bridge
        self.runner = runner or (lambda: bridge.submit(RunAcousticCheck()))
        self.recommended: str | None = None
        intro = QLabel(EXPLANATION)
        intro.setWordWrap(True)
        self.run_button = QPushButton("Run the acoustic check")
        self.run_button.setObjectName("runAcousticCheck")
        self.run_button.clicked.connect(self.run)
        self.result = QLabel()
        self.result.setObjectName("acousticCheckResult")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.RichText)
        self.result.hide()
        self.apply_button = QPushButton()
        self.apply_button.setObjectName("applyAcousticCheck")
        self.apply_button.clicked.connect(self._apply)
        self.apply_button.hide()
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.apply_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 0)
        layout.addWidget(intro)
        layout.addLayout(buttons)
        layout.addWidget(self.result)
        bridge.on(AcousticCheckFinished, self.show_result)

    def run(self) -> None:
        self.apply_button.hide()
        self.result.show()
        if not self.runner():
            self.result.setText("<b>The check cannot run:</b> no voice loop is running, so "
                                "there is no microphone or speaker to test.")
            return
        self.run_button.setEnabled(False)
        self.result.setText("Playing the chirp and listening…")

    def show_result(self, event: AcousticCheckFinished) -> None:
        self.run_button.setEnabled(True)
        self.run_button.setText("Run the check again")
        self.result.setText(describe(event))
        self.result.show()
        self.recommended = event.recommended_mode if event.ok else None
        if self.recommended:
            self.apply_button.setEnabled(True)
            self.apply_button.setText(f"Use {MODE_NAMES[self.recommended].split(' (')[0]}")
            self.apply_button.show()

    def _apply(self) -> None:
        if self.recommended:
            self.apply_requested.emit(self.recommended)
            self.apply_button.setText("Applied")
            self.apply_button.setEnabled(False)

    def detach(self) -> None:
        """Stop listening for results (the owner is closing)."""
        self.bridge.off(AcousticCheckFinished, self.show_result)


class EchoUi:
    """The main window's echo parts: the check step of the first-run screen (which starts the
    voice loop if none runs yet) and the session's count of false interruptions in the status
    bar."""

    def __init__(self, window: EchoWindow) -> None:
        self.window = window
        self.panel = AcousticCheckPanel(window.bridge, runner=self.run_check)
        self.panel.apply_requested.connect(self.use_mode)
        self.false_interruptions = QLabel()
        self.false_interruptions.setObjectName("falseInterruptions")
        self.false_interruptions.setToolTip(
            "Speech during a reply that was not confirmed (a cough, a door, echo the canceller "
            "let through): the reply ducked and carried on, or stopped with no turn after it.")
        self.false_interruptions.hide()
        window.statusBar().addPermanentWidget(self.false_interruptions)
        window.bridge.on(FalseInterruptionDetected, self.on_false_interruption)

    def run_check(self) -> bool:
        self.window.attach_voice_loop(announce_missing=False)  # starts it too, if it can
        return self.window.bridge.submit(RunAcousticCheck())

    def use_mode(self, mode: str) -> None:
        self.window.update_settings(self.window.settings.with_value("echo.mode", mode))

    def on_false_interruption(self, event: FalseInterruptionDetected) -> None:
        self.false_interruptions.setText(f"False interruptions: {event.session_count}")
        self.false_interruptions.setStyleSheet(
            "padding: 0 10px; border-left: 1px solid palette(mid);")
        self.false_interruptions.show()
