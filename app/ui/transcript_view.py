"""Transcript panel: one bubble per side of a turn, filled in place; copy and export."""

from __future__ import annotations

from html import escape
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.ui.transcript_model import ROLE_NAMES, TranscriptEntry, TranscriptModel

EXPORT_FILTERS = "Text (*.txt);;Markdown (*.md);;JSON (*.json)"


class TurnBubble(QFrame):
    """One side of one turn."""

    def __init__(self, entry: TranscriptEntry) -> None:
        super().__init__()
        self.setObjectName("userBubble" if entry.role == "user" else "assistantBubble")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.header = QLabel()
        self.header.setObjectName("bubbleHeader")
        self.body = QLabel()
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.body.setTextFormat(Qt.TextFormat.RichText)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 8)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.body)
        self.show_entry(entry)

    def show_entry(self, entry: TranscriptEntry) -> None:
        extra = ""
        if entry.role == "assistant" and entry.text and not entry.spoken:
            extra = " · text reply"
        if entry.role == "user" and entry.duration_s is not None:
            extra = f" · {entry.duration_s:.1f} s"
        self.header.setText(f"<b>{ROLE_NAMES[entry.role]}</b>"
                            f"<span style='color: palette(mid)'> · turn {entry.turn_id}{extra}"
                            "</span>")
        status = entry.status_text()
        if not entry.text:
            self.body.setText(f"<i style='color: gray'>{escape(status)}</i>")
        elif entry.interrupted:
            # The text covers what was heard; the marker sits where playback stopped.
            self.body.setText(f"{escape(entry.text)} <span style='color: #c0392b'>"
                              f"■ {escape(status)}</span>")
        else:
            tail = f" <i style='color: gray'>{escape(status)}</i>" if status else ""
            self.body.setText(escape(entry.text) + tail)
        self.setProperty("interrupted", entry.interrupted)


class TranscriptView(QWidget):
    """Scrollable list of bubbles over a TranscriptModel; follows the newest turn."""

    export_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None,
                 model: TranscriptModel | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcriptView")
        self.model = model or TranscriptModel()
        self.expiry_timer = QTimer(self)  # "transcribing…" never stays forever
        self.expiry_timer.setInterval(1000)
        self.expiry_timer.timeout.connect(self.expire)
        self._bubbles: list[TurnBubble] = []
        self._list = QWidget()
        self._list_layout = QVBoxLayout(self._list)
        self._list_layout.setContentsMargins(4, 4, 4, 4)
        self._list_layout.setSpacing(6)
        self.placeholder = QLabel("The conversation appears here. Speak, or hold the talk key "
                                  "in push-to-talk mode.")
        self.placeholder.setWordWrap(True)
        self.placeholder.setStyleSheet("color: gray; padding: 12px;")
        self._list_layout.addWidget(self.placeholder)
        self._list_layout.addStretch(1)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setWidget(self._list)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the whole conversation as text")
        self.copy_button.clicked.connect(self.copy_to_clipboard)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Save the conversation as text, Markdown or JSON")
        self.export_button.clicked.connect(self._ask_export_path)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.copy_button)
        buttons.addWidget(self.export_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll_area, 1)
        layout.addLayout(buttons)
        self.scroll_area.verticalScrollBar().rangeChanged.connect(self._follow_newest)
        self._at_bottom = True
        self.scroll_area.verticalScrollBar().valueChanged.connect(self._remember_position)

    def apply(self, event: object) -> None:
        """Update from a pipeline event (non-transcript events are ignored)."""
        found = self.model.apply(event)
        if found is None:
            return
        entry, index, created = found
        if created:
            bubble = TurnBubble(entry)
            self._bubbles.insert(index, bubble)
            self._list_layout.insertWidget(index + 1, bubble)  # after the placeholder
            self.placeholder.hide()
        else:
            self._bubbles[index].show_entry(entry)
        if self.model.waiting and not self.expiry_timer.isActive():
            self.expiry_timer.start()

    def expire(self) -> None:
        """Placeholders whose text did not come in time say so."""
        for index in self.model.expire():
            self._bubbles[index].show_entry(self.model.entries[index])
        if not self.model.waiting:
            self.expiry_timer.stop()

    def set_transcribing(self, transcribing: bool) -> None:
        """Say "not transcribed" instead of "transcribing…" when nothing will fill in text."""
        for index in self.model.set_transcribing(transcribing):
            self._bubbles[index].show_entry(self.model.entries[index])

    def bubble_texts(self) -> list[str]:
        return [b.body.text() for b in self._bubbles]

    def clear(self) -> None:
        for bubble in self._bubbles:
            bubble.deleteLater()
        self._bubbles.clear()
        self.model.clear()
        self.placeholder.show()

    def copy_to_clipboard(self) -> None:
        QApplication.clipboard().setText(self.model.to_text())

    def export(self, path: Path) -> Path:
        """Write the transcript; the format follows the suffix (.json, .md, else text)."""
        path = Path(path)
        suffix = path.suffix.lower()
        text = (self.model.to_json() if suffix == ".json" else
                self.model.to_markdown() if suffix == ".md" else self.model.to_text())
        path.write_text(text, encoding="utf-8")
        return path

    def _ask_export_path(self) -> None:
        name, chosen = QFileDialog.getSaveFileName(self, "Export conversation",
                                                   "conversation.txt", EXPORT_FILTERS)
        if not name:
            return
        path = Path(name)
        if not path.suffix:
            path = path.with_suffix(".json" if "JSON" in chosen else
                                    ".md" if "Markdown" in chosen else ".txt")
        try:
            self.export(path)
        except OSError as exc:
            self.export_failed.emit(f"Could not save the conversation to {path}: {exc}. "
                                    "Choose another folder.")

    def _remember_position(self, value: int) -> None:
        bar = self.scroll_area.verticalScrollBar()
        self._at_bottom = value >= bar.maximum() - 4

    def _follow_newest(self, _minimum: int, maximum: int) -> None:
        if self._at_bottom:
            self.scroll_area.verticalScrollBar().setValue(maximum)
