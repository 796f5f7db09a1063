from __future__ import annotations

import numpy as np

from app.audio.capture import CaptureBuffer
from app.audio.ringbuffer import RingBuffer
from app.events import WaveformSource


def test_read_latest_zero_fills_the_start_until_enough_was_written() -> None:
    ring = RingBuffer(8, 16000)
    ring.write(np.array([1, 2, 3], np.float32))
    out = np.full(5, -1.0, np.float32)
    assert ring.read_latest(out) == 3
    assert out.tolist() == [0, 0, 1, 2, 3]


def test_wraps_and_keeps_only_the_newest_samples() -> None:
    ring = RingBuffer(5, 16000)
    for start in range(0, 12, 3):
        ring.write(np.arange(start, start + 3, dtype=np.float32))
    out = np.zeros(5, np.float32)
    assert ring.read_latest(out) == 5
    assert out.tolist() == [7, 8, 9, 10, 11]
    assert ring.total_written == 12 and ring.oldest_index == 7


def test_a_write_longer_than_the_ring_keeps_its_tail() -> None:
    ring = RingBuffer(4, 16000)
    ring.write(np.arange(10, dtype=np.float32))
    out = np.zeros(4, np.float32)
    ring.read_latest(out)
    assert out.tolist() == [6, 7, 8, 9]


def test_read_range_by_absolute_index_skips_what_was_overwritten() -> None:
    ring = RingBuffer(6, 16000)
    ring.write(np.arange(10, dtype=np.float32))
    out = np.zeros(3, np.float32)
    assert ring.read_range(5, out) == 3 and out.tolist() == [5, 6, 7]
    assert ring.read_range(1, out) == 3 and out.tolist() == [4, 5, 6]  # 0..3 are gone
    assert ring.read_range(9, out) == 1 and out[0] == 9


def test_ring_is_a_waveform_source() -> None:
    source: WaveformSource = RingBuffer(16, 24000)
    assert source.sample_rate_hz == 24000


def test_capture_downmixes_and_stamps_the_end_time() -> None:
    capture = CaptureBuffer(48000)
    block = np.stack([np.full(480, 0.2, np.float32), np.full(480, 0.4, np.float32)], axis=1)
    capture.push(block, adc_time_s=1.0)
    capture.push(block, adc_time_s=1.01)
    samples, end_s = capture.pull()
    assert len(samples) == 960 and np.allclose(samples, 0.3)
    assert end_s == 1.01 + 480 / 48000
    assert len(capture.pull()[0]) == 0


def test_capture_overflow_drops_the_oldest_and_counts() -> None:
    capture = CaptureBuffer(1000, capacity_s=1.0)
    for i in range(3):
        capture.push(np.full((500, 1), i, np.float32), adc_time_s=i * 0.5)
    samples, end_s = capture.pull()
    assert capture.overflows == 1 and len(samples) == 1000
    assert samples[0] == 1 and samples[-1] == 2 and end_s == 1.5
