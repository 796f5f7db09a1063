"""Sample-rate conversion without torchaudio.

Offline (whole signals): soxr's high-quality resampler.

Streaming (microphone → 16 kHz, reply → speaker rate): our own polyphase windowed-sinc filter.
soxr's streaming mode was measured here to hold back 20–40 ms of output and to release it in
bursts (HQ, 48 → 16 kHz: 396 samples of delay, output only every 3rd–4th 10 ms block). That
delay lands directly in the endpoint decision and the barge-in reaction, so the live path uses a
short Kaiser-windowed sinc (16 zero crossings each side) whose look-ahead is about 1 ms and which
emits every possible sample at once. Output sample ``n`` always represents signal time
``n / out_rate``: the timeline stays aligned with the input.
"""

from __future__ import annotations

from math import gcd

import numpy as np
import soxr

ZERO_CROSSINGS = 16  # each side of the sinc; stop band ≈ -80 dB with the Kaiser window below
KAISER_BETA = 8.6
PASSBAND_FRACTION = 0.9  # cutoff as a fraction of the lower Nyquist frequency


def resample(pcm: np.ndarray, in_rate_hz: int, out_rate_hz: int) -> np.ndarray:
    """Resample a whole mono signal (float32 out) with soxr's HQ filter."""
    pcm = np.asarray(pcm, dtype=np.float32)
    if in_rate_hz == out_rate_hz or len(pcm) == 0:
        return pcm.copy()
    return soxr.resample(pcm, in_rate_hz, out_rate_hz, quality="HQ").astype(np.float32)


def _phase_table(up: int, down: int, cutoff: float, half_taps: int) -> np.ndarray:
    """Filter coefficients per output phase: [up, 2 * half_taps] float32.

    ``cutoff`` is in cycles per input sample. Output ``n`` sits at input position
    ``p = n * down / up``; taps ``k`` cover input samples ``floor(p) - half_taps + 1 + k``.
    """
    phases = (np.arange(up) * down % up) / up  # [up] fractional positions
    k = np.arange(2 * half_taps)
    offsets = phases[:, None] + (half_taps - 1) - k[None, :]  # [up, taps] p - m
    window_arg = np.clip(offsets / (half_taps + 1), -1.0, 1.0)
    window = np.i0(KAISER_BETA * np.sqrt(1.0 - window_arg**2)) / np.i0(KAISER_BETA)
    taps = 2.0 * cutoff * np.sinc(2.0 * cutoff * offsets) * window
    taps /= taps.sum(axis=1, keepdims=True)  # exact unity gain at DC for every phase
    return taps.astype(np.float32)


class StreamResampler:
    """Low-latency streaming mono resampler; ``process`` returns every sample it can.

    Call ``process(chunk)`` with consecutive chunks of any size and ``process(empty, last=True)``
    once at the end to drain the final ~1 ms.
    """

    def __init__(self, in_rate_hz: int, out_rate_hz: int) -> None:
        self.in_rate_hz = int(in_rate_hz)
        self.out_rate_hz = int(out_rate_hz)
        common = gcd(self.in_rate_hz, self.out_rate_hz)
        self._up = self.out_rate_hz // common
        self._down = self.in_rate_hz // common
        self._passthrough = self._up == self._down
        cutoff = PASSBAND_FRACTION * 0.5 * min(1.0, self.out_rate_hz / self.in_rate_hz)
        self._half = int(np.ceil(ZERO_CROSSINGS / (2.0 * cutoff)))
        self._table = (np.zeros((1, 1), np.float32) if self._passthrough
                       else _phase_table(self._up, self._down, cutoff, self._half))
        # History starts with half_taps - 1 zeros so the first outputs see a silent past.
        self._buffer = np.zeros(self._half - 1, dtype=np.float32)
        self._buffer_start = -(self._half - 1)  # absolute input index of _buffer[0]
        self._inputs_total = 0
        self._outputs_total = 0

    @property
    def latency_s(self) -> float:
        """How far the newest output lags the newest input (the filter's look-ahead)."""
        return 0.0 if self._passthrough else self._half / self.in_rate_hz

    def process(self, chunk: np.ndarray, last: bool = False) -> np.ndarray:
        """Feed the next input chunk; return the output samples it completes."""
        chunk = np.asarray(chunk, dtype=np.float32)
        if self._passthrough:
            return chunk.copy()
        self._inputs_total += len(chunk)
        self._buffer = np.concatenate([self._buffer, chunk])
        available = self._buffer_start + len(self._buffer)  # inputs known, padded if last
        if last:
            self._buffer = np.concatenate([self._buffer, np.zeros(self._half, np.float32)])
            available += self._half
            end = -(-self._inputs_total * self._up // self._down)  # ceil: cover all input
        else:
            # Output n needs inputs up to floor(n*down/up) + half: n*down < (available-half)*up.
            end = -(-(available - self._half) * self._up // self._down)
        out = self._compute(self._outputs_total, max(end, self._outputs_total))
        self._trim()
        return out

    def _compute(self, first: int, end: int) -> np.ndarray:
        if end <= first:
            return np.zeros(0, dtype=np.float32)
        n = np.arange(first, end, dtype=np.int64)
        base = n * self._down // self._up - self._half + 1 - self._buffer_start  # [N]
        index = base[:, None] + np.arange(2 * self._half)[None, :]  # [N, taps]
        phase = n % self._up
        out = np.einsum("ij,ij->i", self._buffer[index], self._table[phase]).astype(np.float32)
        self._outputs_total = end
        return out

    def _trim(self) -> None:
        keep_from = self._outputs_total * self._down // self._up - self._half + 1
        drop = keep_from - self._buffer_start
        if drop > 0:
            self._buffer = self._buffer[drop:]
            self._buffer_start += drop
