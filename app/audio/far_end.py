"""The echo canceller's far end: what the speaker played, at 16 kHz, on the capture clock.

The output callback hands every played block over with its DAC time (no allocation, no lock:
a single-producer ring). The voice loop pulls what is new, resamples it to 16 kHz and writes it
into a timeline indexed by ``round(t_s * 16000)`` on the pipeline clock, so the canceller reads
the far-end sample that reached the speaker at the same moment a microphone sample was
captured (device latencies are already in both timestamps). Callback jitter of a few
milliseconds is absorbed (blocks are kept contiguous); a larger jump (a new output stream, a
stall, clock drift building up) re-anchors the timeline at the block's own timestamp.

Most of the time nothing plays and the player hands out exact zeros: those blocks are not
resampled at all (the timeline reads zeros wherever nothing was written), which keeps the far
end's cost near zero between replies.
"""

from __future__ import annotations

import numpy as np

from app.audio.capture import CaptureBuffer
from app.audio.resample import StreamResampler

RATE_HZ = 16000
JITTER_TOLERANCE_S = 0.005


class SampleTimeline:
    """A ring of samples addressed by absolute index; unwritten samples read as zeros."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._data = np.zeros(self.capacity, np.float32)
        self._end: int | None = None  # one past the newest written index

    @property
    def end_index(self) -> int | None:
        return self._end

    def write(self, start: int, pcm: np.ndarray) -> None:
        """Place ``pcm`` at absolute index ``start`` (overwrites; zero-fills a gap before it)."""
        if len(pcm) > self.capacity:
            start, pcm = start + len(pcm) - self.capacity, pcm[-self.capacity:]
        if len(pcm) == 0:
            return
        if self._end is None:
            self._end = start
        if start > self._end:  # a gap: nothing was played there
            gap_first = max(self._end, start - self.capacity)
            self._store(gap_first, np.zeros(start - gap_first, np.float32))
        oldest = self._end - self.capacity
        if start < oldest:  # older than what the ring holds
            pcm, start = pcm[oldest - start:], oldest
        self._store(start, pcm)
        self._end = max(self._end, start + len(pcm))

    def _store(self, start: int, pcm: np.ndarray) -> None:
        offset = start % self.capacity
        head = min(len(pcm), self.capacity - offset)
        self._data[offset:offset + head] = pcm[:head]
        self._data[:len(pcm) - head] = pcm[head:]

    def read(self, start: int, out: np.ndarray) -> None:
        """Fill ``out`` with samples ``[start, start + len(out))``; zeros where none are held."""
        out.fill(0.0)
        if self._end is None:
            return
        first = max(start, self._end - self.capacity)
        last = min(start + len(out), self._end)
        if last <= first:
            return
        offset = first % self.capacity
        count = last - first
        head = min(count, self.capacity - offset)
        out[first - start:first - start + head] = self._data[offset:offset + head]
        out[first - start + head:last - start] = self._data[:count - head]


class FarEndReference:
    """Output callback → 16 kHz far-end timeline (``push`` on the output thread, the rest on
    the voice loop)."""

    def __init__(self, capacity_s: float = 4.0) -> None:
        self.timeline = SampleTimeline(int(capacity_s * RATE_HZ))
        self._ring: CaptureBuffer | None = None
        self._resampler: StreamResampler | None = None
        self._next: int | None = None  # where the next resampled block continues
        self._silent_run = 0  # zero samples fed to the resampler since the last sound

    def configure_output(self, sample_rate_hz: int) -> None:
        """A (new) output stream at ``sample_rate_hz``; call before it starts."""
        self._ring = CaptureBuffer(sample_rate_hz, capacity_s=2.0)
        self._resampler = None
        self._next = None

    def push(self, played: np.ndarray, dac_time_s: float) -> None:
        """Output callback: ``played`` [frames] float32 reaches the speaker at ``dac_time_s``."""
        ring = self._ring
        if ring is not None:
            ring.push(played, dac_time_s)

    def update(self) -> None:
        """Move everything pushed so far onto the timeline (voice-loop thread)."""
        ring = self._ring
        if ring is None:
            return
        pcm, end_s = ring.pull()
        if len(pcm) == 0:
            return
        if np.any(pcm):
            self._silent_run = 0
        elif self._silent_run >= ring.sample_rate_hz // 50:  # the resampler holds only zeros
            self._resampler, self._next = None, None  # a fresh one when sound comes back
            return
        else:
            self._silent_run += len(pcm)
        if self._resampler is None:
            self._resampler = StreamResampler(ring.sample_rate_hz, RATE_HZ)
        resampler = self._resampler
        far = resampler.process(pcm)
        if len(far) == 0:
            return
        start = round((end_s - resampler.latency_s) * RATE_HZ) - len(far)
        if self._next is not None and abs(start - self._next) <= JITTER_TOLERANCE_S * RATE_HZ:
            start = self._next
        self.timeline.write(start, far)
        self._next = start + len(far)

    def read(self, start: int, out: np.ndarray) -> None:
        self.timeline.read(start, out)
