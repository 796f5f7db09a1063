"""Microphone levels in words: a meter, and what a level in dBFS means for a person."""

from __future__ import annotations

from PySide6.QtWidgets import QProgressBar, QWidget

DBFS_EXPLAINED = ("dBFS counts down from the loudest sound the microphone can record (0 dBFS). "
                  "Speech usually peaks between −30 and −6 dBFS; −12 dBFS is a good level.")
SILENT_DBFS = -60.0


def level_word(dbfs: float) -> str:
    if dbfs <= SILENT_DBFS:
        return "silent: is the microphone muted, or is it another one?"
    if dbfs < -40:
        return "very quiet: speak up or move closer"
    if dbfs < -30:
        return "quiet"
    if dbfs <= -3:
        return "good"
    return "too loud: it may distort; lower the input volume"


def describe_level(dbfs: float) -> str:
    """'−12 dBFS (good)' — the number and what it means."""
    if dbfs <= SILENT_DBFS:
        return level_word(dbfs)
    return f"{dbfs:.0f} dBFS ({level_word(dbfs)})".replace("-", "−")


class LevelMeter(QProgressBar):
    """Input level in dBFS (−60…0), with its meaning in the bar and dBFS explained on hover."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setRange(-60, 0)
        self.setValue(-60)
        self.setFormat("silent")
        self.setMaximumHeight(18)
        self.setToolTip(DBFS_EXPLAINED)

    def set_level(self, dbfs: float) -> None:
        self.setValue(int(max(-60.0, min(0.0, dbfs))))
        self.setFormat("silent" if dbfs <= SILENT_DBFS else
                       f"{dbfs:.0f} dBFS · {level_word(dbfs).split(':')[0]}".replace("-", "−"))

    def set_unavailable(self, text: str) -> None:
        self.setValue(-60)
        self.setFormat(text)
