"""Live waveform: a min/max (peak) and RMS envelope per pixel column, drawn from a ring buffer.

Every buffer is allocated when the widget is resized, never per frame: ``refresh()`` copies the
newest samples into a preallocated array, reduces them per column with numpy ``out=`` operations
and writes the pixels of a preallocated ARGB image that shares memory with a QImage, so a frame
costs a few vectorised passes and one ``drawImage`` (dependencies.md §4: ~2 ms per frame).
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.events import WaveformSource

SILENCE_DBFS = -96.0


def _argb(color: QColor) -> np.uint32:
    return np.uint32(color.rgba())


def dbfs(value: float) -> float:
    return 20.0 * math.log10(value) if value > 1e-5 else SILENCE_DBFS


class WaveformWidget(QWidget):
    """Shows the last ``window_s`` seconds of one WaveformSource; call ``refresh()`` per frame."""

    def __init__(self, title: str, color: QColor, window_s: float = 4.0,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.window_s = window_s
        self._source: WaveformSource | None = None
        self._peak_color = _argb(color)
        self._rms_color = _argb(color.lighter(150))
        self._background = _argb(self.palette().color(self.backgroundRole()).darker(108))
        self._axis_color = _argb(self.palette().color(self.foregroundRole()).lighter(180))
        self.peak_dbfs = SILENCE_DBFS  # of the newest column, shown as a level readout
        self.frames_drawn = 0
        self.setMinimumHeight(56)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self._scale = 1.0  # device pixels per logical pixel
        self._allocate(max(self.width(), 1), max(self.height(), 1), 16000)

    def sizeHint(self) -> QSize:
        return QSize(600, 90)

    def set_source(self, source: WaveformSource | None) -> None:
        self._source = source
        rate = source.sample_rate_hz if source is not None else self._sample_rate_hz
        self._allocate(self._cols, self._rows_n, rate)
        self.refresh()

    # ---- buffers (allocated on resize or source change only) -------------------------------

    def _allocate(self, cols: int, rows: int, sample_rate_hz: int) -> None:
        self._cols, self._rows_n, self._sample_rate_hz = cols, rows, sample_rate_hz
        self._per_col = max(1, math.ceil(self.window_s * sample_rate_hz / cols))
        self._samples = np.zeros(cols * self._per_col, np.float32)  # oldest first
        self._by_col = self._samples.reshape(cols, self._per_col)  # [cols, per_col] view
        self._squares = np.zeros((cols, self._per_col), np.float32)
        self._hi, self._lo, self._rms = (np.zeros(cols, np.float32) for _ in range(3))
        self._scratch = np.zeros(cols, np.float32)
        self._top, self._bottom, self._rms_top, self._rms_bottom = (
            np.zeros((1, cols), np.int32) for _ in range(4))
        # Full-size grids: comparing against a broadcast operand makes numpy allocate an
        # iteration buffer per call, a broadcast copy into a preallocated grid does not.
        self._row_grid = np.repeat(np.arange(rows, dtype=np.int32)[:, None], cols, axis=1)
        self._limit_grid = np.zeros((rows, cols), np.int32)  # [rows, cols]
        self._mask = np.zeros((rows, cols), bool)
        self._mask_b = np.zeros((rows, cols), bool)
        self._pixels = np.zeros((rows, cols), np.uint32)  # [rows, cols] ARGB32
        self._image = QImage(self._pixels.data, cols, rows, cols * 4,
                             QImage.Format.Format_ARGB32)
        self._image.setDevicePixelRatio(self._scale)

    def resizeEvent(self, event: QResizeEvent) -> None:
        # One column per physical pixel, so the envelope stays sharp on scaled (HiDPI) screens.
        self._scale = scale = self.devicePixelRatioF()
        size = event.size()
        self._allocate(max(round(size.width() * scale), 1), max(round(size.height() * scale), 1),
                       self._sample_rate_hz)
        self.refresh()
        super().resizeEvent(event)

    # ---- one frame ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the newest samples and redraw the envelope into the image (no allocation)."""
        if self._source is not None:
            if self._source.sample_rate_hz != self._sample_rate_hz:  # another output device
                self._allocate(self._cols, self._rows_n, self._source.sample_rate_hz)
            self._source.read_latest(self._samples)
        else:
            self._samples.fill(0.0)
        np.max(self._by_col, axis=1, out=self._hi)
        np.min(self._by_col, axis=1, out=self._lo)
        np.square(self._by_col, out=self._squares)
        np.sum(self._squares, axis=1, out=self._rms)
        np.multiply(self._rms, 1.0 / self._per_col, out=self._rms)
        np.sqrt(self._rms, out=self._rms)
        self.peak_dbfs = dbfs(max(float(self._hi[-1]), -float(self._lo[-1])))
        self._to_rows(self._hi, self._top)
        self._to_rows(self._lo, self._bottom)
        self._to_rows(self._rms, self._rms_top)
        np.negative(self._rms, out=self._rms)
        self._to_rows(self._rms, self._rms_bottom)
        self._paint_pixels()
        self.frames_drawn += 1
        self.update()

    def _to_rows(self, values: np.ndarray, out_rows: np.ndarray) -> None:
        """Amplitude in [-1, 1] → pixel row (row 0 at the top; +1 at the top)."""
        half = (self._rows_n - 1) / 2.0
        np.clip(values, -1.0, 1.0, out=self._scratch)
        np.multiply(self._scratch, -half, out=self._scratch)
        np.add(self._scratch, half, out=self._scratch)
        np.rint(self._scratch, out=self._scratch)
        np.copyto(out_rows[0], self._scratch, casting="unsafe")

    def _paint_pixels(self) -> None:
        self._pixels.fill(self._background)
        self._pixels[self._rows_n // 2, :] = self._axis_color
        for top, bottom, color in ((self._top, self._bottom, self._peak_color),
                                   (self._rms_top, self._rms_bottom, self._rms_color)):
            np.copyto(self._limit_grid, top)
            np.greater_equal(self._row_grid, self._limit_grid, out=self._mask)
            np.copyto(self._limit_grid, bottom)
            np.less_equal(self._row_grid, self._limit_grid, out=self._mask_b)
            np.logical_and(self._mask, self._mask_b, out=self._mask)
            np.copyto(self._pixels, color, where=self._mask)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.drawImage(self.rect(), self._image)
        painter.setPen(self.palette().color(self.foregroundRole()))
        margin = 6
        text_rect = self.rect().adjusted(margin, margin - 2, -margin, -margin)
        painter.drawText(text_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                         self.title)
        level = "silent" if self.peak_dbfs <= SILENCE_DBFS else f"{self.peak_dbfs:.0f} dBFS"
        painter.drawText(text_rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop,
                         level)
        painter.end()

    # ---- for tests ---------------------------------------------------------------------------

    def column_extent(self, col: int) -> tuple[int, int]:
        """Top and bottom pixel row of the peak envelope in one column."""
        return int(self._top[0, col]), int(self._bottom[0, col])

    def buffer_ids(self) -> tuple[int, ...]:
        """Identity of every per-frame buffer (unchanged between frames = nothing reallocated)."""
        return tuple(id(b) for b in (self._samples, self._squares, self._hi, self._lo, self._rms,
                                     self._mask, self._pixels, self._image))
