from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from PySide6.QtGui import QColor
from pytestqt.qtbot import QtBot

from app.audio.ringbuffer import RingBuffer
from app.ui.waveform import SILENCE_DBFS, WaveformWidget


def make_widget(qtbot: QtBot, width: int = 400, height: int = 81) -> WaveformWidget:
    widget = WaveformWidget("Microphone", QColor("#1f78d1"), window_s=1.0)
    qtbot.addWidget(widget)
    widget.resize(width, height)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_ring_buffer_returns_the_newest_samples_in_order() -> None:
    ring = RingBuffer(10, 16000)
    out = np.full(6, -1.0, np.float32)
    assert ring.read_latest(out) == 0 and not out.any()
    ring.write(np.arange(4, dtype=np.float32))
    assert ring.read_latest(out) == 4
    assert out.tolist() == [0, 0, 0, 1, 2, 3]
    ring.write(np.arange(4, 13, dtype=np.float32))  # wraps around
    assert ring.read_latest(out) == 6
    assert out.tolist() == [7, 8, 9, 10, 11, 12]


def test_envelope_follows_the_amplitude(qtbot: QtBot) -> None:
    widget = make_widget(qtbot)
    ring = RingBuffer(16000 * 2, 16000)
    widget.set_source(ring)
    mid = (widget.height() - 1) / 2
    assert widget.column_extent(0) == (round(mid), round(mid))  # silence: one line
    assert widget.peak_dbfs == SILENCE_DBFS
    t = np.arange(16000) / 16000
    ring.write((0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32))
    widget.refresh()
    top, bottom = widget.column_extent(widget.width() - 1)
    assert abs(top - (mid - 0.5 * mid)) <= 1.5 and abs(bottom - (mid + 0.5 * mid)) <= 1.5
    assert -6.5 < widget.peak_dbfs < -5.5  # 0.5 peak = -6 dBFS
    image = widget.grab().toImage()
    column = widget.width() // 2
    assert image.pixelColor(column, int(mid - 0.4 * mid)) != image.pixelColor(column, 2)


def test_frames_reuse_their_buffers(qtbot: QtBot) -> None:
    widget = make_widget(qtbot)
    ring = RingBuffer(16000 * 2, 16000)
    widget.set_source(ring)
    ring.write(np.random.default_rng(0).uniform(-1, 1, 16000).astype(np.float32))
    widget.refresh()
    ids = widget.buffer_ids()
    smallest_buffer = widget.width() * widget.height()  # one bool mask
    tracemalloc.start()
    try:
        for _ in range(30):
            widget.refresh()
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert widget.buffer_ids() == ids
    # A few small Python objects per frame are fine; any frame-sized array is not.
    assert peak < min(16 * 1024, smallest_buffer / 2), f"frames allocated {peak} bytes"
    widget.resize(300, 60)
    qtbot.waitUntil(lambda: widget.buffer_ids() != ids)
    assert widget.column_extent(299) is not None


def test_a_source_that_changes_rate_keeps_the_window_length(qtbot: QtBot) -> None:
    from app.conversation.audio_io import ReplyWaveform

    widget = make_widget(qtbot)
    source = ReplyWaveform(24000)  # the pipeline's reply waveform before a device is open
    widget.set_source(source)
    source.use_rate(48000)  # the speaker that opened plays at 48 kHz
    source.write(np.full(48000, 0.5, np.float32))
    widget.refresh()
    assert widget._per_col == pytest.approx(widget.window_s * 48000 / widget.width(), abs=1)
    mid = (widget.height() - 1) / 2
    assert widget.column_extent(widget.width() - 1)[0] < mid - 0.4 * mid  # shows the new audio


def test_frame_timer_runs_at_30_fps_or_more() -> None:
    from app.ui.main_window import WAVEFORM_FPS

    assert WAVEFORM_FPS >= 30
