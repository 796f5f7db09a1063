"""Paths shown elided in the middle ("/home/…/models/MOSS-Speech"): the start and the end of a
long path stay readable, the whole path is on hover, and editing shows it in full."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFocusEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QLineEdit, QSizePolicy, QWidget


class ElidedPathEdit(QLineEdit):
    """A path field: elided in the middle while not being edited; ``path_text()`` is the whole
    path whatever is shown."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = text
        self.textEdited.connect(self._typed)
        self._show()

    def path_text(self) -> str:
        return self._full

    def set_path(self, text: str) -> None:
        self._full = text
        self._show()

    def _typed(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)

    def _show(self) -> None:
        self.setToolTip(self._full)
        if self.hasFocus():
            if self.text() != self._full:
                self.setText(self._full)
            return
        room = self.contentsRect().width() - 12
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideMiddle,
                                              max(room, 40))
        self.setText(shown)
        self.setCursorPosition(0)

    def focusInEvent(self, event: QFocusEvent) -> None:
        self.setText(self._full)  # edit the whole path, never the elided one
        super().focusInEvent(event)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self._show()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if not self.hasFocus():
            self._show()


class ElidedLabel(QLabel):
    """A one-line label elided in the middle; the whole text is its tooltip."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = text
        self.setMinimumWidth(60)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.set_full_text(text)

    def full_text(self) -> str:
        return self._full

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._show()

    def _show(self) -> None:
        self.setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideMiddle,
                                                   max(self.width(), 60)))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._show()
