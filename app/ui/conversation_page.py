"""The conversation page: the live waveforms side by side, then the transcript and the latency
panel, each in a section that folds to its title so a small window (800×500) keeps the
transcript and a readable latency table."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout, QSplitter, QWidget

from app.events import (
    ReplyFinished,
    ReplyStarted,
    TranscriptUpdated,
    TurnMeasured,
    UserSpeechStarted,
    UserTurnDropped,
    UserTurnEnded,
)
from app.ui.bridge import UiBridge
from app.ui.latency_panel import LatencyPanel
from app.ui.sections import CollapsibleSection
from app.ui.transcript_view import TranscriptView
from app.ui.waveform import WaveformWidget

WAVES_HEIGHT = 96  # both waveforms fit side by side in this much
WAVES_MAX_HEIGHT = 170


class ConversationPage(QSplitter):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Vertical, parent)
        self.setObjectName("conversationPage")
        self.setChildrenCollapsible(False)
        self.mic_wave = WaveformWidget("Microphone", QColor("#1f78d1"))
        self.reply_wave = WaveformWidget("Reply", QColor("#8e44ad"))
        self.transcript = TranscriptView()
        self.latency = LatencyPanel()
        waves = QWidget()
        row = QHBoxLayout(waves)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.mic_wave)
        row.addWidget(self.reply_wave)
        self.waves_section = CollapsibleSection("Microphone and reply", "waveformArea", waves)
        self.waves_section.setMaximumHeight(WAVES_MAX_HEIGHT)  # the rest goes to the turns
        self.transcript_section = CollapsibleSection("Transcript", "transcriptArea",
                                                     self.transcript)
        self.latency_section = CollapsibleSection("Latency", "latencyArea", self.latency,
                                                  self.latency.detail_label)
        self.side_by_side = QSplitter(Qt.Orientation.Horizontal)
        self.side_by_side.setChildrenCollapsible(False)
        self.side_by_side.addWidget(self.transcript_section)
        self.side_by_side.addWidget(self.latency_section)
        self.side_by_side.setSizes([480, 560])
        self.addWidget(self.waves_section)
        self.addWidget(self.side_by_side)
        self.setStretchFactor(0, 0)
        self.setStretchFactor(1, 1)
        self.setSizes([WAVES_HEIGHT + 30, 520])
        for section in (self.transcript_section, self.latency_section):
            section.toggled.connect(self._give_room)
        self._waves_height = WAVES_HEIGHT + 30
        self.waves_section.toggled.connect(self._fold_waves)

    def connect_bridge(self, bridge: UiBridge) -> None:
        for kind in (UserSpeechStarted, UserTurnEnded, UserTurnDropped, ReplyStarted,
                     ReplyFinished, TranscriptUpdated):
            bridge.on(kind, self.transcript.apply)
        bridge.on(TurnMeasured, lambda e: self.latency.add_record(e.record))

    def refresh_waveforms(self) -> None:
        if self.waves_section.expanded:
            self.mic_wave.refresh()
            self.reply_wave.refresh()

    def _fold_waves(self, expanded: bool) -> None:
        """A splitter keeps a pane's size when its content folds: hand the room over."""
        total = sum(self.sizes())
        if not expanded:
            self._waves_height = self.sizes()[0]
            folded = self.waves_section.folded_height()
            self.setSizes([folded, total - folded])
        else:
            self.setSizes([self._waves_height, max(0, total - self._waves_height)])

    def _give_room(self, _expanded: bool) -> None:
        """A folded side panel gives its width to the other one."""
        sections = (self.transcript_section, self.latency_section)
        folded = [not s.expanded for s in sections]
        if folded[0] != folded[1]:
            total = sum(self.side_by_side.sizes())
            narrow = sections[0 if folded[0] else 1].minimumSizeHint().width()
            self.side_by_side.setSizes([narrow, total - narrow] if folded[0] else
                                [total - narrow, narrow])
