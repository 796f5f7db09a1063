"""Non-modal banners above the conversation: what happened, and one button to act on it.

Nothing here blocks: a banner never opens a modal dialog, and repeated errors of one kind
update one banner (with a count) instead of piling up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

Severity = Literal["error", "warning", "info"]
STYLES = {
    "error": "background: #fdecea; border: 1px solid #e0a19a; color: #611a15;",
    "warning": "background: #fff4e5; border: 1px solid #e6c07b; color: #663c00;",
    "info": "background: #e8f1fb; border: 1px solid #9dbfe6; color: #0d3c61;",
}
MAX_BANNERS = 4


class Banner(QFrame):
    def __init__(self, key: str, severity: Severity, message: str, action_text: str = "",
                 action: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.key = key
        self.count = 1
        self.setObjectName("banner")
        self.message_label = QLabel()
        self.message_label.setWordWrap(True)
        self.message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.action_button = QPushButton()
        self.action_button.hide()
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Dismiss")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 4, 4)
        layout.addWidget(self.message_label, 1)
        layout.addWidget(self.progress)
        layout.addWidget(self.action_button)
        layout.addWidget(self.close_button)
        self._action: Callable[[], None] | None = None
        self.action_button.clicked.connect(self._run_action)
        self.update_content(severity, message, action_text, action)

    def update_content(self, severity: Severity, message: str, action_text: str = "",
                       action: Callable[[], None] | None = None) -> None:
        self.severity = severity
        self.message = message
        self.setStyleSheet(f"QFrame#banner {{ {STYLES[severity]} border-radius: 4px; }}")
        self._show_message()
        self._action = action
        self.action_button.setText(action_text)
        self.action_button.setVisible(bool(action_text and action))

    def _show_message(self) -> None:
        repeat = f"  (×{self.count})" if self.count > 1 else ""
        self.message_label.setText(self.message + repeat)

    def repeat(self) -> None:
        self.count += 1
        self._show_message()

    def set_progress(self, fraction: float | None) -> None:
        """A determinate bar for 0..1, a busy bar for None."""
        self.progress.show()
        if fraction is None:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(round(100 * max(0.0, min(1.0, fraction))))

    def _run_action(self) -> None:
        if self._action is not None:
            self._action()

    def dismiss(self) -> None:
        self.hide()
        self.deleteLater()
        parent = self.parentWidget()
        if isinstance(parent, BannerArea):
            parent.forget(self)


class BannerArea(QWidget):
    """A column of banners keyed by what they are about."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)
        self.banners: dict[str, Banner] = {}

    def show_banner(self, key: str, severity: Severity, message: str, action_text: str = "",
                    action: Callable[[], None] | None = None) -> Banner:
        """Show (or update) the banner for ``key``; the same message again counts up."""
        banner = self.banners.get(key)
        if banner is not None:
            if banner.message == message and banner.severity == severity:
                banner.repeat()
            else:
                banner.count = 1
            banner.update_content(severity, message, action_text, action)
            return banner
        banner = Banner(key, severity, message, action_text, action)
        self.banners[key] = banner
        self._layout.addWidget(banner)
        while len(self.banners) > MAX_BANNERS:  # the oldest one goes
            self.banners[next(iter(self.banners))].dismiss()
        return banner

    def remove(self, key: str) -> None:
        banner = self.banners.get(key)
        if banner is not None:
            banner.dismiss()

    def forget(self, banner: Banner) -> None:
        if self.banners.get(banner.key) is banner:
            del self.banners[banner.key]

    def messages(self) -> list[str]:
        return [b.message for b in self.banners.values()]
