"""Preallocated single-producer/single-consumer float32 ring of recent samples.

The writer (an audio callback or the voice-loop thread) never allocates; readers copy out what
they need. Samples are addressed by their absolute index since the ring was created, so the
voice loop can fetch "the 300 ms before the onset" (pre-roll) and the UI can poll the newest
samples for its waveform (it implements :class:`app.events.WaveformSource`).
"""

from __future__ import annotations

import numpy as np


class RingBuffer:
    """Fixed-capacity mono ring; the oldest samples are overwritten."""

    def __init__(self, capacity: int, sample_rate_hz: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = int(capacity)
        self.sample_rate_hz = int(sample_rate_hz)
        self._data = np.zeros(self.capacity, dtype=np.float32)
        # Written last by the writer: a reader that sees the new count also sees the samples.
        self._total = 0

    @property
    def total_written(self) -> int:
        """Absolute index one past the newest sample."""
        return self._total

    @property
    def oldest_index(self) -> int:
        """Absolute index of the oldest sample still held."""
        return max(0, self._total - self.capacity)

    def write(self, samples: np.ndarray) -> None:
        """Append samples (writer thread only); keeps the newest ``capacity`` of them."""
        count = len(samples)
        if count == 0:
            return
        if count >= self.capacity:
            samples = samples[-self.capacity:]
            skipped = count - self.capacity
        else:
            skipped = 0
        start = (self._total + skipped) % self.capacity
        first = min(len(samples), self.capacity - start)
        self._data[start:start + first] = samples[:first]
        if first < len(samples):
            self._data[: len(samples) - first] = samples[first:]
        self._total += count

    def read_range(self, start_index: int, out: np.ndarray) -> int:
        """Copy samples from absolute ``start_index`` into ``out``; return how many were copied.

        Samples already overwritten are skipped: the copy then starts at the oldest sample held
        and the return value says how many of ``out``'s first entries are valid.
        """
        total = self._total
        start_index = max(start_index, total - self.capacity, 0)
        count = max(0, min(len(out), total - start_index))
        self._copy_out(start_index, out[:count])
        return count

    def read_latest(self, out: np.ndarray) -> int:
        """Copy the newest ``len(out)`` samples into ``out`` (oldest first).

        Returns how many were available; when fewer, the start of ``out`` is zero-filled.
        """
        total = self._total
        count = min(len(out), total, self.capacity)
        pad = len(out) - count
        if pad:
            out[:pad] = 0.0
        self._copy_out(total - count, out[pad:])
        return count

    def _copy_out(self, start_index: int, out: np.ndarray) -> None:
        count = len(out)
        if count == 0:
            return
        start = start_index % self.capacity
        first = min(count, self.capacity - start)
        out[:first] = self._data[start:start + first]
        if first < count:
            out[first:] = self._data[: count - first]
