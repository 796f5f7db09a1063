"""The main window: live waveforms, transcript, latency, and a status bar."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app import APP_NAME
from app.engine.base import EngineInfo
from app.events import ConversationState
from app.paths import resource
from app.settings import Settings

STATE_TEXT = {
    ConversationState.IDLE: "Not listening",
    ConversationState.LISTENING: "Listening",
    ConversationState.USER_SPEAKING: "You are speaking",
    ConversationState.ENDPOINTING: "You are speaking",
    ConversationState.RESPONDING: "Thinking",
    ConversationState.SPEAKING: "Speaking",
    ConversationState.INTERRUPTED: "Interrupted",
}
MODE_TEXT = {"always_listening": "Always listening", "push_to_talk": "Push-to-talk"}


def engine_label(settings: Settings, info: EngineInfo | None) -> str:
    if info is not None:
        demo = " — demo, no model loaded" if info.is_demo else ""
        return f"Engine: {info.name}{demo}"
    if settings.engine.kind == "echo":
        return "Engine: echo — demo, no model loaded"
    return "Engine: MOSS-Speech (not loaded)"


class MainWindow(QMainWindow):
    def __init__(self, settings: Settings, engine_info: EngineInfo | None = None) -> None:
        super().__init__()
        self.setWindowTitle(APP_NAME)
        self.setWindowIcon(QIcon(str(resource("icons", "moss-voice.svg"))))
        self.resize(1000, 720)
        self._settings = settings
        self.state_label = QLabel(STATE_TEXT[ConversationState.IDLE])
        self.state_label.setObjectName("stateLabel")
        self.state_label.setStyleSheet("font-size: 18px; font-weight: 600;")
        self.waveform_area = self._titled_area("Microphone and reply", "waveformArea")
        self.transcript_view = QTextBrowser()
        self.transcript_view.setObjectName("transcriptView")
        self.transcript_view.setPlaceholderText("The conversation appears here.")
        self.latency_area = self._titled_area("Latency", "latencyArea")
        self.latency_label = QLabel("No turns yet.")
        self.latency_area.layout().addWidget(self.latency_label)
        self.setCentralWidget(self._build_central())
        self.engine_status = QLabel()
        self.device_status = QLabel()
        self.mode_status = QLabel()
        for label in (self.engine_status, self.device_status, self.mode_status):
            label.setStyleSheet("padding: 0 10px; border-left: 1px solid palette(mid);")
            self.statusBar().addPermanentWidget(label)
        self.apply_settings(settings, engine_info)

    def _titled_area(self, title: str, name: str) -> QGroupBox:
        box = QGroupBox(title)
        box.setObjectName(name)
        QVBoxLayout(box)
        return box

    def _build_central(self) -> QWidget:
        transcript_box = self._titled_area("Transcript", "transcriptArea")
        transcript_box.layout().addWidget(self.transcript_view)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.waveform_area)
        splitter.addWidget(transcript_box)
        splitter.addWidget(self.latency_area)
        splitter.setSizes([220, 380, 120])
        header = QHBoxLayout()
        header.addWidget(self.state_label)
        header.addStretch(1)
        central = QFrame()
        layout = QVBoxLayout(central)
        layout.addLayout(header)
        layout.addWidget(splitter, 1)
        return central

    def apply_settings(self, settings: Settings, engine_info: EngineInfo | None = None) -> None:
        self._settings = settings
        self.engine_status.setText(engine_label(settings, engine_info))
        device = engine_info.device if engine_info else settings.engine.device
        self.device_status.setText(f"Device: {device}")
        self.mode_status.setText(MODE_TEXT[settings.turn.mode])

    def set_state(self, state: ConversationState) -> None:
        self.state_label.setText(STATE_TEXT[state])

    def show_warning(self, text: str) -> None:
        first_line = text.splitlines()[0] if text else ""
        self.statusBar().showMessage(first_line)
        self.statusBar().setToolTip(text)
