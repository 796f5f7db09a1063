"""Input callback → voice loop hand-over: mono samples plus device-clock timestamps.

The input callback (device thread) downmixes into a preallocated scratch block and writes into a
ring; the voice loop pulls everything new in one go. The callback never allocates for blocks up
to ``max_block_frames`` and never blocks.
"""

from __future__ import annotations

import numpy as np

from app.audio.ringbuffer import RingBuffer


class CaptureBuffer:
    """Single producer (input callback), single consumer (voice loop)."""

    def __init__(self, sample_rate_hz: int, capacity_s: float = 4.0,
                 max_block_frames: int = 16384) -> None:
        self.sample_rate_hz = int(sample_rate_hz)
        self._ring = RingBuffer(int(capacity_s * sample_rate_hz), sample_rate_hz)
        self._scratch = np.zeros(max_block_frames, dtype=np.float32)
        # (absolute index one past the newest sample, its capture time in seconds); replaced as
        # one tuple so the reader always sees a consistent pair.
        self._stamp: tuple[int, float] = (0, 0.0)
        self._read_index = 0
        self.overflows = 0  # times the loop fell more than the capacity behind

    def push(self, block: np.ndarray, adc_time_s: float) -> None:
        """Input callback: ``block`` is [frames, channels] (or [frames]) float32."""
        frames = len(block)
        if block.ndim == 2 and block.shape[1] > 1:
            mono = self._scratch[:frames] if frames <= len(self._scratch) else np.empty(
                frames, np.float32)
            np.mean(block, axis=1, out=mono)
        else:
            mono = block.reshape(-1)
        self._ring.write(mono)
        self._stamp = (self._ring.total_written, adc_time_s + frames / self.sample_rate_hz)

    def pull(self) -> tuple[np.ndarray, float]:
        """Everything captured since the last pull, and the capture time of its end.

        The time of sample ``i`` of the result is ``end_s - (len(result) - i) / rate``.
        """
        end_index, end_s = self._stamp
        start = self._read_index
        if end_index - start > self._ring.capacity:
            self.overflows += 1
            start = end_index - self._ring.capacity
        out = np.empty(end_index - start, dtype=np.float32)
        copied = self._ring.read_range(start, out)
        self._read_index = end_index
        return out[:copied], end_s
