"""Non-modal banners above the conversation: what happened, and one button to act on it.

Nothing here blocks: a banner never opens a modal dialog. Each cause has one banner (keyed by
what it is about), so every current problem is visible at once; a failure that happens again
counts up ("×3"), a condition reported again does not. Banners are compact: one line each,
elided, with "More" to read the whole text (and the technical details, if any).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape
from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics, QResizeEvent, QTextDocument
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
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
MAX_SHARE = 0.4  # banners may take this share of the window's height; past it they scroll
ROW_HEIGHT = 24  # buttons in a banner are this tall, so a banner is one compact line


def plain_text(html: str) -> str:
    document = QTextDocument()
    document.setHtml(html)
    return " ".join(document.toPlainText().split())


def split_title(html: str) -> tuple[str, str]:
    """('Title.', 'the rest') from '<b>Title.</b> the rest' (plain text)."""
    match = re.match(r"\s*<b>(.*?)</b>(.*)", html, re.DOTALL)
    if match is None:
        return "", plain_text(html)
    return plain_text(match.group(1)), plain_text(match.group(2))


class Banner(QFrame):
    def __init__(self, key: str, severity: Severity, message: str, action_text: str = "",
                 action: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.key = key
        self.count = 1
        self.details = ""
        self.expanded = False
        self.area: BannerArea | None = None
        self.setObjectName("banner")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.message_label = QLabel()
        self.message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message_label.setSizePolicy(QSizePolicy.Policy.Ignored,
                                         QSizePolicy.Policy.Preferred)
        self.more_button = QToolButton()
        self.more_button.setObjectName("bannerMore")
        self.more_button.setAutoRaise(True)
        self.more_button.clicked.connect(self.toggle)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(16)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.action_button = QPushButton()
        self.action_button.setFixedHeight(ROW_HEIGHT)
        self.action_button.hide()
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Dismiss")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 1, 2, 1)
        layout.setSpacing(6)
        layout.addWidget(self.message_label, 1)
        layout.addWidget(self.more_button)
        layout.addWidget(self.progress)
        layout.addWidget(self.action_button)
        layout.addWidget(self.close_button)
        self._action: Callable[[], None] | None = None
        self.action_button.clicked.connect(self._run_action)
        self.update_content(severity, message, action_text, action)

    def update_content(self, severity: Severity, message: str, action_text: str = "",
                       action: Callable[[], None] | None = None, details: str = "") -> None:
        self.severity = severity
        self.message = message
        self.details = details
        self.setStyleSheet(f"QFrame#banner {{ {STYLES[severity]} border-radius: 4px; }}")
        self._action = action
        self.action_button.setText(action_text)
        self.action_button.setVisible(bool(action_text and action))
        self._show_message()

    def full_text(self) -> str:
        """The whole message as shown when expanded (rich text)."""
        repeat = f"  (×{self.count})" if self.count > 1 else ""
        details = (f"<br><span style='font-family: monospace; font-size: 11px'>"
                   f"{escape(self.details)}</span>") if self.details else ""
        return self.message + repeat + details

    def _show_message(self) -> None:
        title, rest = split_title(self.message)
        repeat = f"  (×{self.count})" if self.count > 1 else ""
        self.setToolTip(plain_text(self.message) + repeat
                        + (f"\n\n{self.details}" if self.details else ""))
        if self.expanded:
            self.message_label.setWordWrap(True)
            self.message_label.setText(self.full_text())
            self.more_button.setText("Less")
            self.more_button.show()
            return
        self.message_label.setWordWrap(False)
        metrics = self.message_label.fontMetrics()
        bold = self.message_label.font()
        bold.setBold(True)
        title_width = QFontMetrics(bold).horizontalAdvance(title + " ") if title else 0
        room = max(40, self.message_label.width() - title_width
                   - metrics.horizontalAdvance(repeat))
        shown = metrics.elidedText(rest, Qt.TextElideMode.ElideRight, room)
        cut = shown != rest or bool(self.details)
        head = f"<b>{escape(title)}</b> " if title else ""
        self.message_label.setText(head + escape(shown) + escape(repeat))
        self.more_button.setText("More")
        self.more_button.setVisible(cut)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if not self.expanded:
            self._show_message()

    def toggle(self) -> None:
        self.expanded = not self.expanded
        self._show_message()
        if self.area is not None:
            self.area.fit()

    def repeat(self) -> None:
        self.count += 1
        self._show_message()

    def set_progress(self, fraction: float | None) -> None:
        """A determinate bar for 0..1, a busy bar for None."""
        if self.progress.isHidden():
            self.progress.show()
            if self.area is not None:
                self.area.fit()
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
        if self.area is not None:
            self.area.forget(self)


class BannerArea(QScrollArea):
    """A column of banners keyed by what they are about; scrolls past a few."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("bannerArea")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self._column = QWidget()
        self._layout = QVBoxLayout(self._column)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(3)
        self.setWidget(self._column)
        self.banners: dict[str, Banner] = {}
        self.room_px: Callable[[], int] = lambda: 4 * 30  # the owner says how much it may take
        self.fit()

    def show_banner(self, key: str, severity: Severity, message: str, action_text: str = "",
                    action: Callable[[], None] | None = None, counted: bool = True,
                    details: str = "") -> Banner:
        """Show (or update) the banner for ``key``. The same message again counts up when
        ``counted`` (a failure that happened again), not for a condition reported again."""
        banner = self.banners.get(key)
        if banner is not None:
            same = banner.message == message and banner.severity == severity
            if same and counted:
                banner.count += 1
            elif not same:
                banner.count = 1
            banner.update_content(severity, message, action_text, action, details)
            return banner
        banner = Banner(key, severity, message, action_text, action)
        banner.area = self
        if details:
            banner.update_content(severity, message, action_text, action, details)
        self.banners[key] = banner
        self._layout.addWidget(banner)
        self.fit()
        return banner

    def remove(self, key: str) -> None:
        banner = self.banners.get(key)
        if banner is not None:
            banner.dismiss()

    def forget(self, banner: Banner) -> None:
        if self.banners.get(banner.key) is banner:
            del self.banners[banner.key]
        self._layout.removeWidget(banner)
        self.fit()

    def messages(self) -> list[str]:
        return [b.message for b in self.banners.values()]

    def fit(self) -> None:
        """As tall as all its banners (every current problem visible at once), up to the room
        the window gives it (then it scrolls, never drops one); hidden when there are none."""
        shown = list(self.banners.values())
        self.setVisible(bool(shown))
        needed = sum(b.sizeHint().height() for b in shown) + 3 * max(0, len(shown) - 1)
        smallest = shown[0].sizeHint().height() if shown else 0
        self.setFixedHeight(min(needed, max(self.room_px(), smallest)))
