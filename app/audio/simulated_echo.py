"""A simulated room for the simulated backend: the speaker's sound comes back into the mic.

What the virtual speaker plays (placed by DAC time) is resampled to the microphone's rate,
filtered by a small room impulse response (a direct path plus a decaying diffuse tail, unit
energy), scaled by ``gain_db`` and delayed by ``delay_ms``, then added to the microphone signal
at the matching capture times. So ``gain_db = 0`` means the echo reaches the microphone about as
loud as the signal sent to the speaker (an echo return loss of ~0 dB, a loud laptop), ``-10``
ten decibels quieter. ``converse --simulate-echo DELAY_MS:GAIN_DB`` sets it.

A measured or modelled room can replace the small built-in response (``response``, e.g. a
pyroomacoustics room in ``bench turn-taking``), and ``loudspeaker_clip`` adds a small
loudspeaker's nonlinearity (soft clipping of the peaks plus an even-order term) before the room.

Limits: the path is time-invariant and both devices share one clock (no drift, nobody walking
around).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.audio.far_end import SampleTimeline
from app.audio.resample import StreamResampler


@dataclass(frozen=True)
class SimulatedEcho:
    delay_ms: float
    gain_db: float
    rir_ms: float = 60.0  # length of the room impulse response (direct path + diffuse tail)
    seed: int = 11
    # A room of its own (direct path first, any scale: it is normalised to unit energy) ...
    response: np.ndarray | None = field(default=None, compare=False, repr=False)
    response_rate_hz: int = 16000  # ... at this rate
    loudspeaker_clip: float | None = None  # soft-clip level of the loudspeaker (None: linear)

    def impulse_response(self, rate_hz: int) -> np.ndarray:
        """The room's response at ``rate_hz``, unit energy."""
        if self.response is None:
            return room_impulse_response(rate_hz, self.rir_ms, self.seed)
        response = np.asarray(self.response, np.float64)
        if self.response_rate_hz != rate_hz:
            import soxr

            response = soxr.resample(response, self.response_rate_hz, rate_hz)
        return (response / max(1e-12, float(np.linalg.norm(response)))).astype(np.float32)

    def loudspeaker(self, sound: np.ndarray) -> np.ndarray:
        """What the loudspeaker makes of ``sound``: c·tanh(x/c) plus a small even-order term."""
        clip = self.loudspeaker_clip
        if clip is None:
            return sound
        return (clip * np.tanh(sound / clip) + 0.1 * sound * sound / clip).astype(np.float32)

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.rir_ms <= 0:
            raise ValueError("simulated echo: the delay must be ≥ 0 ms and the room response "
                             "longer than 0 ms")

    @classmethod
    def parse(cls, text: str) -> SimulatedEcho:
        """``DELAY_MS:GAIN_DB``, e.g. ``60:-6``."""
        delay, sep, gain = text.partition(":")
        try:
            if not sep:
                raise ValueError
            return cls(float(delay), float(gain))
        except ValueError as exc:
            raise ValueError(f"--simulate-echo {text!r}: expected DELAY_MS:GAIN_DB, e.g. 60:-6 "
                             "(delay ≥ 0)") from exc


def room_impulse_response(rate_hz: int, length_ms: float, seed: int) -> np.ndarray:
    """Direct path at index 0, then a diffuse tail decaying 60 dB over ``length_ms``; the whole
    response has unit energy (so it keeps the level of a broadband signal)."""
    length = max(1, int(rate_hz * length_ms / 1000))
    rng = np.random.default_rng(seed)
    t = np.arange(length) / rate_hz
    decay = 10 ** (-3.0 * t / (length_ms / 1000))  # -60 dB at the end
    response = rng.normal(0.0, 0.35, length) * decay
    response[0] = 1.0
    response[1:max(2, length // 50)] *= 0.3  # a short gap before the first reflections
    return (response / np.linalg.norm(response)).astype(np.float32)


class EchoPath:
    """Speaker blocks in (``speaker``), echo added to microphone blocks (``add_to``)."""

    def __init__(self, echo: SimulatedEcho, mic_rate_hz: int, capacity_s: float = 8.0) -> None:
        self.echo = echo
        self.mic_rate_hz = int(mic_rate_hz)
        self.gain = float(10 ** (echo.gain_db / 20))
        self.response = echo.impulse_response(self.mic_rate_hz)
        self.delay_samples = round(echo.delay_ms * self.mic_rate_hz / 1000)
        self._timeline = SampleTimeline(int(capacity_s * self.mic_rate_hz))
        self._resampler: StreamResampler | None = None
        self._out_rate = 0
        self._next_out = 0  # next expected output-rate position of a contiguous speaker stream
        self._next_mic = 0  # mic-rate index of the next resampled speaker sample
        self._tail = np.zeros(len(self.response) - 1, np.float32)

    def speaker(self, block: np.ndarray, dac_time_s: float, rate_hz: int) -> None:
        """A block the speaker plays from ``dac_time_s`` on (mono, ``rate_hz``)."""
        position = round(dac_time_s * rate_hz)
        if self._resampler is None or rate_hz != self._out_rate or position != self._next_out:
            self._resampler = StreamResampler(rate_hz, self.mic_rate_hz)
            self._out_rate = rate_hz
            self._next_mic = round(dac_time_s * self.mic_rate_hz)
            self._tail.fill(0.0)
        self._next_out = position + len(block)
        sound = self._resampler.process(self.echo.loudspeaker(block))
        if len(sound) == 0:
            return
        signal = np.concatenate([self._tail, sound])
        if len(self.response) > 512:  # a real room: FFT convolution
            from scipy.signal import fftconvolve

            echo = fftconvolve(signal, self.response, mode="valid").astype(np.float32)  # [len]
        else:
            echo = np.convolve(signal, self.response, mode="valid").astype(np.float32)  # [len]
        self._tail = signal[len(signal) - len(self._tail):] if len(self._tail) else self._tail
        self._timeline.write(self._next_mic + self.delay_samples, echo * self.gain)
        self._next_mic += len(sound)

    def add_to(self, block: np.ndarray, start_frame: int) -> None:
        """Add the echo to microphone ``block`` ([frames, channels]) captured from
        ``start_frame`` on (mic rate)."""
        echo = np.empty(len(block), np.float32)
        self._timeline.read(start_frame, echo)
        block += echo[:, None]
