"""A peak limiter in front of the output device: whatever an engine returns, the speaker never
gets a sample at or beyond full scale.

Look-ahead-free (no added latency, which barge-in cannot afford): the envelope follows each
sample's magnitude at once (instant attack) and falls back exponentially (``release_ms``). The
gain is ``curve(env) / env`` with a soft knee:

    curve(e) = e                                      for e ≤ T
    curve(e) = T + (C − T) · tanh((e − T) / (C − T))  for e > T

with T the threshold and C the ceiling. The curve has slope 1 at T (no corner) and approaches C
without reaching it; since ``|x| ≤ env`` and ``curve(e) / e`` never rises, every output sample
stays below C. While the envelope stays at or below T the gain is exactly 1: speech below the
threshold passes bit for bit (the fast path does not even multiply). A loud steady tone gets a
steady gain (the envelope holds its peaks), so the limiter lowers it rather than clipping it.
"""

from __future__ import annotations

import numpy as np

THRESHOLD_DBFS = -1.0
CEILING_DBFS = -0.1
RELEASE_MS = 150.0


def dbfs_to_amplitude(dbfs: float) -> float:
    return float(10 ** (dbfs / 20))


class PeakLimiter:
    """One output stream's limiter (mono float32 blocks, processed in place, in order)."""

    def __init__(self, sample_rate_hz: int, threshold_dbfs: float = THRESHOLD_DBFS,
                 ceiling_dbfs: float = CEILING_DBFS, release_ms: float = RELEASE_MS) -> None:
        if not threshold_dbfs < ceiling_dbfs < 0.0:
            raise ValueError("need threshold < ceiling < 0 dBFS")
        self.threshold = dbfs_to_amplitude(threshold_dbfs)
        self.ceiling = dbfs_to_amplitude(ceiling_dbfs)
        self._log_release = -1.0 / max(1e-9, release_ms / 1000 * sample_rate_hz)  # ln r
        self._env = 0.0  # envelope after the last sample; 0.0 whenever it is ≤ threshold
        self.limited_samples = 0  # samples whose gain was below 1 (for tests and figures)

    def curve(self, envelope: np.ndarray) -> np.ndarray:
        """The soft-knee output level for an envelope level (array, any shape)."""
        span = self.ceiling - self.threshold
        over = np.maximum(envelope - self.threshold, 0.0)
        return np.where(envelope > self.threshold,
                        self.threshold + span * np.tanh(over / span), envelope)

    def process(self, block: np.ndarray) -> None:
        """Limit ``block`` in place."""
        if len(block) == 0:
            return
        peak = float(np.max(np.abs(block)))
        if self._env == 0.0 and peak <= self.threshold:
            return  # the usual case: nothing near full scale, nothing to release
        envelope = self._envelope(np.abs(block).astype(np.float64))  # [N]
        self._env = float(envelope[-1]) if envelope[-1] > self.threshold else 0.0
        active = envelope > self.threshold
        if not active.any():
            return
        gain = np.ones_like(envelope)
        gain[active] = self.curve(envelope[active]) / envelope[active]
        block *= gain.astype(np.float32)
        self.limited_samples += int(np.count_nonzero(active))

    def _envelope(self, magnitude: np.ndarray) -> np.ndarray:
        """env[n] = max(|x[n]|, env[n-1]·r), vectorised in the log domain: a running maximum
        of log|x[k]| − k·ln r, shifted back by n·ln r."""
        n = np.arange(len(magnitude), dtype=np.float64)
        log_r = self._log_release
        lifted = np.log(np.maximum(magnitude, 1e-30)) - n * log_r
        if self._env > 0.0:
            lifted[0] = max(lifted[0], np.log(self._env) + log_r)
        return np.exp(np.maximum.accumulate(lifted) + n * log_r)
