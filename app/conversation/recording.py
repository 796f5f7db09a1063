"""Small audio accumulators shared by a device thread (writer) and the voice loop (reader):
level windows for the meter, a voice-prompt recorder, a precomputed test tone.

Writers run in device callbacks: they do a little numpy work and hold a lock only to swap a
few numbers or append one block; readers take everything finished in one go.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np

from app.audio.acoustic_check import apply_fades

LEVEL_WINDOW_S = 0.1  # the meter and the recording progress update ~10 times a second
SILENCE_DBFS = -120.0
MAX_PENDING_WINDOWS = 50  # a reader that stopped reading does not grow memory
PROMPT_MIN_RATE_HZ = 16000
TONE_AMPLITUDE = 0.25
TONE_FADE_MS = 10.0


def dbfs(value: float) -> float:
    return 20.0 * math.log10(value) if value > 1e-6 else SILENCE_DBFS


class LevelWindows:
    """RMS and peak level (dBFS) of what was added, in consecutive ~100 ms windows."""

    def __init__(self, window_s: float = LEVEL_WINDOW_S) -> None:
        self._window_s = window_s
        self._lock = threading.Lock()
        self._sum_sq = 0.0
        self._values = 0
        self._peak = 0.0
        self._frames = 0  # in the current window
        self._total_frames = 0
        self._done: list[tuple[float, float, float]] = []

    def add(self, block: np.ndarray, rate_hz: int) -> None:
        """Device thread: ``block`` is [frames] or [frames, channels] float32."""
        flat = block.reshape(-1)
        if flat.size == 0 or rate_hz <= 0:
            return
        sum_sq = float(np.dot(flat, flat))
        peak = float(max(flat.max(), -flat.min()))
        with self._lock:
            self._sum_sq += sum_sq
            self._values += flat.size
            self._peak = max(self._peak, peak)
            self._frames += len(block)
            self._total_frames += len(block)
            if self._frames >= self._window_s * rate_hz:
                rms = math.sqrt(self._sum_sq / self._values)
                self._done.append((self._total_frames / rate_hz, dbfs(rms), dbfs(self._peak)))
                del self._done[:-MAX_PENDING_WINDOWS]
                self._sum_sq, self._values, self._peak, self._frames = 0.0, 0, 0.0, 0

    def take(self) -> list[tuple[float, float, float]]:
        """Finished windows: (seconds added by the window's end, rms dBFS, peak dBFS)."""
        with self._lock:
            done, self._done = self._done, []
        return done


class VoiceRecorder:
    """Mono samples from one microphone, at most ``max_duration_s``; one sample rate only."""

    def __init__(self, max_duration_s: float) -> None:
        self._max_duration_s = max_duration_s
        self._lock = threading.Lock()
        self._blocks: list[np.ndarray] = []
        self._frames = 0
        self.rate_hz = 0
        self.failed = ""  # why the recording cannot be used
        self.levels = LevelWindows()

    def add(self, block: np.ndarray, rate_hz: int) -> None:
        """Device thread (an input tap)."""
        if self.failed:
            return
        if self.rate_hz and rate_hz != self.rate_hz:
            self.failed = "The microphone changed during the recording; record again."
            return
        self.rate_hz = rate_hz
        room = int(self._max_duration_s * rate_hz) - self._frames
        if room <= 0:
            return
        mono = block.mean(axis=1) if block.ndim == 2 else np.array(block)  # [frames]
        mono = mono[:room].astype(np.float32, copy=False)
        with self._lock:
            self._blocks.append(mono)
            self._frames += len(mono)
        self.levels.add(mono, rate_hz)

    @property
    def duration_s(self) -> float:
        return self._frames / self.rate_hz if self.rate_hz else 0.0

    def progress(self) -> list[tuple[float, float]]:
        """(elapsed seconds, peak dBFS) per finished level window."""
        return [(end_s, peak) for end_s, _rms, peak in self.levels.take()]

    def audio(self) -> tuple[np.ndarray, int]:
        """Everything recorded ([T] float32) at its rate (resampled up to 16 kHz if lower)."""
        with self._lock:
            pcm = np.concatenate(self._blocks) if self._blocks else np.zeros(0, np.float32)
        if self.rate_hz and self.rate_hz < PROMPT_MIN_RATE_HZ:
            from app.audio.resample import resample  # lazy: soxr only when needed

            return resample(pcm, self.rate_hz, PROMPT_MIN_RATE_HZ), PROMPT_MIN_RATE_HZ
        return pcm, self.rate_hz

    def write_wav(self, path: Path) -> None:
        """16-bit mono WAV at the microphone's rate (16 kHz or more); raises OSError."""
        import soundfile  # lazy: importing the pipeline does not load soundfile

        from app.audio.simulated import write_wav

        pcm, rate_hz = self.audio()
        try:
            write_wav(path, pcm, rate_hz)
        except (RuntimeError, soundfile.LibsndfileError) as exc:
            raise OSError(str(exc)) from exc


class PcmSource:
    """Precomputed samples at the device's rate, added to the output block by block."""

    def __init__(self, samples: np.ndarray, rate_hz: int) -> None:
        self.rate_hz = int(rate_hz)
        self.samples = np.asarray(samples, np.float32)  # [count]
        self._position = 0
        self.end_dac_s: float | None = None  # when the last sample reaches the speaker

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.rate_hz

    def add_to(self, out: np.ndarray, dac_s: float) -> None:
        """Device thread: add the next ``len(out)`` samples; ``dac_s`` is when ``out`` plays."""
        left = len(self.samples) - self._position
        if left <= 0:
            return
        count = min(len(out), left)
        out[:count] += self.samples[self._position:self._position + count]
        self._position += count
        if self._position >= len(self.samples):
            self.end_dac_s = dac_s + count / self.rate_hz


class ToneSource(PcmSource):
    """A sine with raised-cosine fades (no click)."""

    def __init__(self, rate_hz: int, frequency_hz: float, duration_ms: float,
                 amplitude: float = TONE_AMPLITUDE, fade_ms: float = TONE_FADE_MS) -> None:
        count = max(1, round(int(rate_hz) * duration_ms / 1000))
        frequency_hz = min(max(frequency_hz, 20.0), 0.45 * rate_hz)
        t = np.arange(count) / rate_hz
        tone = amplitude * np.sin(2 * np.pi * frequency_hz * t)
        apply_fades(tone, min(count // 2, round(rate_hz * fade_ms / 1000)))
        super().__init__(tone, rate_hz)


def clip_source(path: Path, rate_hz: int, max_s: float = 60.0) -> PcmSource:
    """A recording (mono, at most ``max_s``) at the device's rate; raises ValueError if the
    file cannot be read."""
    from app.audio.resample import resample
    from app.audio.simulated import read_wav

    pcm, file_rate_hz = read_wav(path)  # [frames, channels]
    mono = pcm[: int(max_s * file_rate_hz)].mean(axis=1)
    if file_rate_hz != rate_hz:
        mono = resample(mono, file_rate_hz, rate_hz)
    apply_fades(mono, min(len(mono) // 2, round(rate_hz * TONE_FADE_MS / 1000)))
    return PcmSource(mono, rate_hz)
