"""The application's look: a focus ring you can see.

Qt's styles draw keyboard focus faintly (Fusion: a thin highlight line). A proxy style draws a
2 px ring in a strong colour around the focused button, check box, combo box or tool button,
on top of whatever the platform style drew, so the native look stays.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (
    QApplication,
    QProxyStyle,
    QStyle,
    QStyleOption,
    QStyleOptionComplex,
    QWidget,
)

FOCUS_COLOR = QColor("#1f78d1")
FOCUS_WIDTH = 2
_RINGED_CONTROLS = (QStyle.ControlElement.CE_PushButton, QStyle.ControlElement.CE_CheckBox,
                    QStyle.ControlElement.CE_RadioButton)
_RINGED_COMPLEX = (QStyle.ComplexControl.CC_ComboBox, QStyle.ComplexControl.CC_ToolButton,
                   QStyle.ComplexControl.CC_SpinBox, QStyle.ComplexControl.CC_Slider)


class FocusRingStyle(QProxyStyle):
    def drawControl(self, element: QStyle.ControlElement, option: QStyleOption,
                    painter: QPainter, widget: QWidget | None = None) -> None:
        super().drawControl(element, option, painter, widget)
        if element in _RINGED_CONTROLS and option.state & QStyle.StateFlag.State_HasFocus:
            draw_ring(painter, option.rect)

    def drawComplexControl(self, control: QStyle.ComplexControl, option: QStyleOptionComplex,
                           painter: QPainter, widget: QWidget | None = None) -> None:
        super().drawComplexControl(control, option, painter, widget)
        if control in _RINGED_COMPLEX and option.state & QStyle.StateFlag.State_HasFocus:
            draw_ring(painter, option.rect)


def draw_ring(painter: QPainter, rect: QRect) -> None:
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    pen = QPen(FOCUS_COLOR, FOCUS_WIDTH)
    painter.setPen(pen)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    inset = FOCUS_WIDTH / 2
    painter.drawRoundedRect(rect.toRectF().adjusted(inset, inset, -inset, -inset), 4, 4)
    painter.restore()


def apply_app_style(app: QApplication | None = None) -> None:
    """Install the focus ring once (idempotent; keeps the platform's base style)."""
    app = app or QApplication.instance()  # type: ignore[assignment]
    if not isinstance(app, QApplication) or isinstance(app.style(), FocusRingStyle):
        return
    app.setStyle(FocusRingStyle(app.style().name()))
