"""The echo-canceller stage between capture and resampling (a later issue fills it in).

The voice loop passes every captured block through ``process`` (device rate, mono, on the loop
thread) and every played block through ``observe_playback`` (on the output callback thread,
with its DAC time) so a real canceller gets the far-end reference with timing. Today the only
implementation passes audio through unchanged.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class EchoCanceller(Protocol):
    def process(self, mic: np.ndarray, adc_time_s: float) -> np.ndarray:
        """Return the microphone block with the speaker's echo removed (same length)."""
        ...

    def observe_playback(self, played: np.ndarray, dac_time_s: float) -> None:
        """The block just handed to the speaker (must not block: output callback thread)."""
        ...

    def reset(self) -> None: ...


class PassThroughEchoCanceller:
    """No echo cancellation (headset use, or until a real canceller is plugged in)."""

    def process(self, mic: np.ndarray, adc_time_s: float) -> np.ndarray:
        return mic

    def observe_playback(self, played: np.ndarray, dac_time_s: float) -> None:
        return None

    def reset(self) -> None:
        return None
