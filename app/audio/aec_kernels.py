"""The two echo-cancelling libraries measured for the app, behind one small interface.

Both wrap WebRTC's AEC3 on 16 kHz mono float32 in whole 10 ms frames, and both return each
sample 128 samples (8 ms) after it went in (measured with an impulse; checked by a test).
``python -m app bench aec`` compares them; :func:`default_kernel` is the one the app keeps, with
the reasons.

pywebrtc-audio slows down 5-10× when its far-end input falls to exact digital silence after
speech (denormal numbers in the filters; measured: 110-130 ms of CPU per second of audio in
the silences instead of ~9). A fixed dither at -100 dBFS on the far end keeps the cost flat and
is far below anything a speaker or a canceller can resolve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

RATE_HZ = 16000
FRAME_SAMPLES = 160  # AEC3 works on 10 ms frames
DITHER_RMS = 1e-5  # -100 dBFS


class AecKernel(Protocol):
    """One echo-cancelling algorithm, whole frames at a time."""

    name: str
    latency_samples: int  # the output lags the input by this much

    def process(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        """``near`` and ``far``: [n * FRAME_SAMPLES] float32 in [-1, 1]; returns [same]."""
        ...

    def reset(self) -> None: ...


class PyWebRtcAec3:
    """WebRTC AEC3 from ``pywebrtc-audio`` (numpy in, numpy out)."""

    name = "pywebrtc-audio"
    latency_samples = 128

    def __init__(self) -> None:
        from pywebrtc_audio import EchoCanceller

        self._canceller = EchoCanceller(RATE_HZ, 1, 0)
        self._dither = np.random.default_rng(0).normal(0, DITHER_RMS, RATE_HZ).astype(np.float32)
        self._dither_at = 0
        self._far = np.zeros(0, np.float32)

    def process(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        if len(self._far) < len(far):
            self._far = np.zeros(len(far), np.float32)
        dithered = self._far[:len(far)]
        for start in range(0, len(far), FRAME_SAMPLES):
            at = self._dither_at
            np.add(far[start:start + FRAME_SAMPLES], self._dither[at:at + FRAME_SAMPLES],
                   out=dithered[start:start + FRAME_SAMPLES])
            self._dither_at = (at + FRAME_SAMPLES) % (len(self._dither) - FRAME_SAMPLES)
        return self._canceller.process(np.ascontiguousarray(near, np.float32), dithered)

    def reset(self) -> None:
        self._canceller.reset()


class LiveKitAec3:
    """WebRTC AEC3 from livekit's ``AudioProcessingModule`` (int16 frames through its FFI).

    The module wants exactly 10 ms per call: the far frame goes in first (reverse stream),
    then the near frame is processed in place."""

    name = "livekit"
    latency_samples = 128

    def __init__(self) -> None:
        from livekit import rtc

        self._rtc = rtc
        self._apm = rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)

    def process(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        rtc = self._rtc
        near16 = _to_int16(near)
        far16 = _to_int16(far)
        out = np.empty(len(near), np.float32)
        for start in range(0, len(near), FRAME_SAMPLES):
            stop = start + FRAME_SAMPLES
            reverse = rtc.AudioFrame(far16[start:stop].tobytes(), RATE_HZ, 1, FRAME_SAMPLES)
            self._apm.process_reverse_stream(reverse)
            self._apm.set_stream_delay_ms(0)
            frame = rtc.AudioFrame(near16[start:stop].tobytes(), RATE_HZ, 1, FRAME_SAMPLES)
            self._apm.process_stream(frame)
            out[start:stop] = np.frombuffer(frame.data, np.int16) / 32768.0
        return out

    def reset(self) -> None:
        self._apm = self._rtc.AudioProcessingModule(echo_cancellation=True,
                                                    high_pass_filter=True)


def _to_int16(pcm: np.ndarray) -> np.ndarray:
    return (np.clip(pcm, -1.0, 32767 / 32768) * 32768).astype(np.int16)


KERNELS: dict[str, Callable[[], AecKernel]] = {"pywebrtc-audio": PyWebRtcAec3,
                                               "livekit": LiveKitAec3}


def default_kernel() -> AecKernel:
    """The library the app ships: pywebrtc-audio.

    Measured with ``bench aec`` (BENCHMARKS.md, "Echo cancellation"): in the whole voice loop
    both gave zero self-interruptions over 9 rooms × 20 replies and the same barge-in stop
    times; ERLE was within 1 dB. pywebrtc-audio costs less CPU (library ~7.5 vs ~9.4 ms per
    second of audio, with the dither above), hands back the person's voice nearly unchanged
    (correlation with the clean voice 0.91 alone / 0.86 in double talk, against 0.55 / 0.51:
    livekit's processing changes the waveform, and that audio is what the engine hears), and
    is a 0.4 MB numpy-only wheel for Linux and Windows, where livekit brings a 28 MB FFI library,
    protobuf and four runtime threads for the whole LiveKit client. livekit's suppressor cut
    the start of speech over a 0 dB echo less (onset 2.6 vs 5.2 frames late on average); that
    did not show in the pipeline's barge-ins beyond one room (30 ms), so it does not outweigh
    the rest.
    """
    return PyWebRtcAec3()
