"""A loudness-based scorer: no model, for tests, benchmarks of the loop, and as a fallback.

It cannot tell speech from noise (a fan is "speech" if it is loud enough); the app uses silero.
"""

from __future__ import annotations

import math

import numpy as np

from app.vad.base import SpeechScorer


class EnergyScorer(SpeechScorer):
    """Probability = logistic((RMS level in dBFS - ``threshold_dbfs``) / ``slope_db``)."""

    def __init__(self, threshold_dbfs: float = -40.0, slope_db: float = 3.0) -> None:
        self.threshold_dbfs = threshold_dbfs
        self.slope_db = slope_db

    def score(self, frame: np.ndarray) -> float:
        rms = float(np.sqrt(np.mean(np.square(frame, dtype=np.float64)))) if len(frame) else 0.0
        level_dbfs = 20.0 * math.log10(max(rms, 1e-10))
        return 1.0 / (1.0 + math.exp(-(level_dbfs - self.threshold_dbfs) / self.slope_db))
