"""The echo-canceller stage in front of the VAD: its interface and the pass-through.

The listener resamples the microphone to 16 kHz and passes every block through ``process`` (on
the voice-loop thread) before the VAD and the turn audio see it; the output callback hands every
played block to ``observe_playback`` with its DAC time (the far-end reference). The real
canceller (WebRTC AEC3, with modes and a warm-up guard) is :class:`app.audio.aec.AecStage`.

Why 16 kHz and not the device rate: the VAD and the engines only consume 16 kHz, the
capture-time anchor of the 16 kHz stream already exists, and AEC3 costs least there (the CPU
target is stated at 16 kHz); AEC3 would otherwise split a 48 kHz stream into three bands.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class EchoCanceller(Protocol):
    def process(self, mic: np.ndarray, adc_time_s: float) -> np.ndarray:
        """Return the 16 kHz microphone block with the speaker's echo removed.

        ``adc_time_s`` is the capture time of ``mic[0]``. The result may be shorter or longer
        than ``mic`` (a canceller works in whole frames); ``latency_s`` says how far the newest
        returned sample lags the newest given one.
        """
        ...

    @property
    def latency_s(self) -> float: ...

    @property
    def echo_power_bound(self) -> float:
        """The loudest echo power that can be in what ``process`` returned last (0: none);
        the sound gate (app.vad.sound) wants sound well over it."""
        ...

    def observe_playback(self, played: np.ndarray, dac_time_s: float) -> None:
        """The block just handed to the speaker (must not block: output callback thread)."""
        ...

    def configure_output(self, sample_rate_hz: int) -> None:
        """A (new) output stream plays at ``sample_rate_hz``; called before it starts."""
        ...

    def reset(self) -> None: ...


class PassThroughEchoCanceller:
    """No echo cancellation (tests that inject it, or where the canceller cannot load)."""

    latency_s = 0.0
    echo_power_bound = 0.0  # nothing is cancelled, and nothing is known about an echo

    def process(self, mic: np.ndarray, adc_time_s: float) -> np.ndarray:
        return mic

    def observe_playback(self, played: np.ndarray, dac_time_s: float) -> None:
        return None

    def configure_output(self, sample_rate_hz: int) -> None:
        return None

    def reset(self) -> None:
        return None
