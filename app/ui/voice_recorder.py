"""Record your own voice for the replies: a short text to read, a level meter, playback.

Everything goes through the voice loop (the UI never opens a device): StartVoiceRecording /
StopVoiceRecording record from the conversation's microphone, PlayTestTone(path=...) plays the
take back on its speaker. Used by the settings panel and by the guided set-up's voice step.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.events import (
    PlayTestTone,
    StartVoiceRecording,
    StopVoiceRecording,
    ToneTestFinished,
    VoiceRecordingFinished,
    VoiceRecordingProgressed,
)
from app.paths import voices_dir
from app.ui.bridge import UiBridge
from app.ui.levels import LevelMeter, describe_level

RECORD_MIN_S, RECORD_MAX_S = 5.0, 15.0  # in-app recordings
SCRIPT = ("Hello! I am recording my voice, so that the assistant can answer in it. "
          "The quick brown fox jumps over the lazy dog, while a warm breeze carries the smell "
          "of fresh bread down the street. How are you today?")


class VoiceRecordDialog(QDialog):
    """Emits ``recorded(path)`` when a usable take was saved."""

    recorded = Signal(Path)

    def __init__(self, bridge: UiBridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Record your voice")
        self.setModal(True)
        self.bridge = bridge
        self.recording = False
        self.take: Path | None = None
        intro = QLabel(f"Read the text below aloud, in your normal voice, in a quiet room. "
                       f"{RECORD_MIN_S:.0f}–{RECORD_MAX_S:.0f} seconds are needed; recording "
                       f"stops by itself after {RECORD_MAX_S:.0f} s.")
        intro.setWordWrap(True)
        script = QLabel(SCRIPT)
        script.setObjectName("recordingScript")
        script.setWordWrap(True)
        script.setFrameShape(QFrame.Shape.StyledPanel)
        script.setStyleSheet("QLabel#recordingScript { font-size: 15px; padding: 10px; }")
        self.meter = LevelMeter()
        self.level_text = QLabel("Level: –")
        self.elapsed = QLabel("0.0 s")
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.start_button = QPushButton("Start recording")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(lambda: self.bridge.submit(StopVoiceRecording(True)))
        self.play_button = QPushButton("Play it back")
        self.play_button.setEnabled(False)
        self.play_button.clicked.connect(self.play_back)
        buttons = QHBoxLayout()
        for button in (self.start_button, self.stop_button, self.play_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.close)
        status = QHBoxLayout()
        status.addWidget(self.level_text, 1)
        status.addWidget(self.elapsed, 0, Qt.AlignmentFlag.AlignRight)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(script)
        layout.addWidget(self.meter)
        layout.addLayout(status)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        layout.addWidget(close)
        bridge.on(VoiceRecordingProgressed, self.on_progress)
        bridge.on(VoiceRecordingFinished, self.on_finished)
        bridge.on(ToneTestFinished, self.on_played)
        if bridge.port is None:
            self.start_button.setEnabled(False)
            self.message.setText("Recording needs the voice loop (the microphone), which is "
                                 "not running. Start a conversation or the echo demo first, "
                                 "or choose a file instead.")

    @staticmethod
    def new_path() -> Path:
        return voices_dir() / time.strftime("my-voice-%Y%m%d-%H%M%S.wav")

    def start(self) -> None:
        path = self.new_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.bridge.submit(StartVoiceRecording(path, RECORD_MIN_S, RECORD_MAX_S)):
            self.recording = True
            self.start_button.setEnabled(False)
            self.play_button.setEnabled(False)
            self.stop_button.setEnabled(True)
            self.message.setText("Recording… read the text now.")

    def on_progress(self, event: VoiceRecordingProgressed) -> None:
        self.meter.set_level(event.level_dbfs)
        self.level_text.setText(f"Level: {describe_level(event.level_dbfs)}")
        self.elapsed.setText(f"{event.elapsed_s:.1f} s")

    def on_finished(self, event: VoiceRecordingFinished) -> None:
        self.recording = False
        self.start_button.setEnabled(True)
        self.start_button.setText("Record again")
        self.stop_button.setEnabled(False)
        if event.path is None or event.duration_s < RECORD_MIN_S:
            self.message.setText(event.message or f"Too short ({event.duration_s:.1f} s); "
                                 f"record at least {RECORD_MIN_S:.0f} s.")
            return
        self.take = event.path
        self.play_button.setEnabled(True)
        self.message.setText(f"Recorded {event.duration_s:.1f} s and chosen as the voice "
                             f"({event.path.name}). Play it back to check it, or record again.")
        self.recorded.emit(event.path)

    def play_back(self) -> None:
        if self.take is not None and self.bridge.submit(PlayTestTone(None, path=self.take)):
            self.play_button.setEnabled(False)
            self.message.setText("Playing your recording…")

    def on_played(self, event: ToneTestFinished) -> None:
        if self.take is None or self.play_button.isEnabled():
            return  # another panel's test tone
        self.play_button.setEnabled(True)
        self.message.setText("Played back. Keep it, or record again." if event.ok else
                             f"It could not be played: {event.message}")

    def done(self, result: int) -> None:
        if self.recording:
            self.bridge.submit(StopVoiceRecording(keep=False))
        self.bridge.off(VoiceRecordingProgressed, self.on_progress)
        self.bridge.off(VoiceRecordingFinished, self.on_finished)
        self.bridge.off(ToneTestFinished, self.on_played)
        super().done(result)
