"""A titled area that folds to its title line, so a small window can give its room to what
matters now (the transcript, the latency table)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QToolButton, QVBoxLayout, QWidget

QWIDGETSIZE_MAX = 16777215


class CollapsibleSection(QFrame):
    """``toggled(expanded)`` when folded or unfolded; ``corner`` widgets sit on the title line."""

    toggled = Signal(bool)

    def __init__(self, title: str, name: str, content: QWidget, *corner: QWidget,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.content = content
        self._unfolded_max = QWIDGETSIZE_MAX
        self.header = QToolButton()
        self.header.setObjectName(f"{name}Toggle")
        self.header.setText(title)
        self.header.setCheckable(True)
        self.header.setChecked(True)
        self.header.setAutoRaise(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setArrowType(Qt.ArrowType.DownArrow)
        self.header.setStyleSheet("QToolButton { font-weight: 600; border: none; }")
        self.header.setToolTip(f"Show or hide {title.lower()}")
        self.header.toggled.connect(self.set_expanded)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.header)
        top.addStretch(1)
        for widget in corner:
            top.addWidget(widget)
        layout = self.contents_layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 6)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(content, 1)

    @property
    def expanded(self) -> bool:
        return self.header.isChecked()

    def setMaximumHeight(self, height: int) -> None:  # Qt's name
        """The height it may take when unfolded (folded, it is its title line)."""
        self._unfolded_max = height
        super().setMaximumHeight(height if self.expanded else self.folded_height())

    def folded_height(self) -> int:
        """The title line with the frame's margins."""
        margins = self.contents_layout.contentsMargins()
        return self.header.sizeHint().height() + margins.top() + margins.bottom() + 2

    def set_expanded(self, expanded: bool) -> None:
        if self.header.isChecked() != expanded:
            self.header.setChecked(expanded)  # comes back here through toggled
            return
        self.header.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.content.setVisible(expanded)
        # Folded, the section is only its title line, and a splitter gives the rest away.
        super().setMaximumHeight(self._unfolded_max if expanded else self.folded_height())
        self.toggled.emit(expanded)
