"""The acoustic check: play a short chirp, listen to it, measure the echo, recommend a mode.

A logarithmic sweep (200 Hz → 6 kHz, 0.6 s, -10 dBFS) is mixed into the speaker output after a
quarter second of silence (the microphone's noise floor); the 16 kHz microphone signal before
the echo canceller is collected with its capture times. A matched filter (cross-correlation
with the sweep) finds the echo:
- delay = capture time of the echo's first strong arrival (the direct path) − DAC time of the
  sweep's first sample
  (what the device latencies do not already account for; the echo canceller's coarse delay);
- echo return loss (ERL) = energy of the sweep as played / energy of its echo at the
  microphone (noise floor removed), in dB: 0 dB means as loud, higher means quieter;
- no echo: the correlation peak does not stand out of the noise (a headset, a muted speaker).

Recommendation (thresholds chosen for the canceller measured in ``bench aec``, which handles
echo up to as loud as the played signal, ERL ≥ 0 dB, with margin):
- no echo → ``headset`` (nothing to cancel);
- the microphone clipped, or ERL < -12 dB (echo far louder than what was played: a loud
  speaker next to a sensitive microphone) → ``half_duplex``: a linear canceller cannot remove
  distorted or overwhelming echo reliably;
- otherwise → ``automatic``.

Results are stored per (microphone, speaker) pair in ``acoustic_checks.json`` in the config
folder; the pipeline gives the stored delay to the canceller whenever that pair is in use.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from app.paths import write_private
from app.settings import EchoMode

log = logging.getLogger(__name__)
RATE_HZ = 16000
LEAD_S = 0.25  # silence before the sweep: the microphone's noise floor
CHIRP_S = 0.6
LISTEN_S = 0.6  # after the sweep: echo delays up to ~0.5 s are found
EARLIEST_DELAY_S = -0.02  # misreported device latencies can make the echo look early
F0_HZ, F1_HZ = 200.0, 6000.0
LEVEL = 0.3  # peak amplitude (-10.5 dBFS)
FADE_S = 0.01
DETECTION_SIGMAS = 8.0  # correlation peak over its noise-only spread (noise max ≈ 4.5 σ)
CLIP_LEVEL = 0.99
HALF_DUPLEX_ERL_DB = -12.0
TIMEOUT_S = 5.0  # no speaker or no microphone callbacks for this long: give up


def apply_fades(signal: np.ndarray, fade: int) -> None:
    """Raised-cosine fade-in and fade-out over ``fade`` samples each, in place (no click)."""
    if fade <= 0:
        return
    ramp = 0.5 * (1 - np.cos(np.pi * np.arange(fade) / fade))
    signal[:fade] *= ramp
    signal[len(signal) - fade:] *= ramp[::-1]


def log_sweep(rate_hz: int, duration_s: float = CHIRP_S, f0_hz: float = F0_HZ,
              f1_hz: float = F1_HZ, level: float = LEVEL) -> np.ndarray:
    """Exponential sine sweep with 10 ms raised-cosine fades; [samples] float32."""
    t = np.arange(int(duration_s * rate_hz)) / rate_hz
    rate = np.log(f1_hz / f0_hz) / duration_s
    sweep = np.sin(2 * np.pi * f0_hz * (np.exp(rate * t) - 1.0) / rate)
    apply_fades(sweep, min(len(t) // 2, int(FADE_S * rate_hz)))
    return (level * sweep).astype(np.float32)


@dataclass(frozen=True)
class EchoMeasurement:
    echo_detected: bool
    delay_ms: float | None
    echo_return_loss_db: float | None
    noise_floor_dbfs: float
    mic_peak_dbfs: float
    clipped: bool
    recommended_mode: EchoMode
    reason: str


def _dbfs(value: float) -> float:
    return float(20 * np.log10(max(value, 1e-10)))


def recommend(echo_detected: bool, erl_db: float | None, clipped: bool) -> tuple[EchoMode, str]:
    """The mode for a measurement, and why (shown to the person)."""
    if clipped:
        return "half_duplex", ("The chirp overloaded the microphone, so its echo is distorted "
                               "and cannot be cancelled reliably. Lower the speaker volume or "
                               "the microphone gain and run the check again, or use "
                               "half-duplex (no interrupting while it speaks).")
    if not echo_detected or erl_db is None:
        return "headset", ("The microphone did not hear the speaker (a headset, or the speaker "
                           "is muted): no echo cancellation is needed.")
    if erl_db < HALF_DUPLEX_ERL_DB:
        return "half_duplex", (f"The echo is very loud ({-erl_db:.0f} dB louder than what was "
                               "played). Lower the speaker volume and run the check again, or "
                               "use half-duplex (no interrupting while it speaks).")
    level = (f"{erl_db:.0f} dB below" if erl_db >= 0.5 else
             f"{-erl_db:.0f} dB louder than" if erl_db <= -0.5 else "as loud as")
    return "automatic", (f"The microphone hears the speaker (the echo is {level} what was "
                         "played); echo cancellation removes it, so you can interrupt by "
                         "talking.")


def analyse(mic: np.ndarray, mic_start_s: float, sweep_dac_s: float,
            sweep: np.ndarray | None = None) -> EchoMeasurement:
    """Measure the echo of ``sweep`` (16 kHz, first sample at the speaker at ``sweep_dac_s``)
    in ``mic`` (16 kHz, before echo cancellation, first sample captured at ``mic_start_s``)."""
    sweep = log_sweep(RATE_HZ) if sweep is None else sweep
    at = round((sweep_dac_s - mic_start_s) * RATE_HZ)  # where a zero-delay echo would start
    noise = mic[max(0, at - int(LEAD_S * RATE_HZ) + 160):max(0, at)]
    noise_power = float(np.mean(np.square(noise))) if len(noise) else 0.0
    first = max(0, at + round(EARLIEST_DELAY_S * RATE_HZ))
    window = mic[first:at + len(sweep) + round(LISTEN_S * RATE_HZ)]
    peak_level = float(np.max(np.abs(window))) if len(window) else 0.0
    clipped = peak_level >= CLIP_LEVEL
    lags = len(window) - len(sweep) + 1
    if lags <= 0:
        raise ValueError("the microphone recording does not cover the sweep and its echo")
    size = 1 << int(np.ceil(np.log2(len(window) + len(sweep))))
    corr = np.fft.irfft(np.fft.rfft(window, size) * np.conj(np.fft.rfft(sweep, size)), size)
    corr = corr[:lags]  # [lags] correlation of the window with the sweep at each lag
    # The direct path is the first strong arrival (reflections can be as strong): the first
    # lag within 6 dB of the peak, then its own local maximum.
    magnitude = np.abs(corr)
    first_strong = int(np.argmax(magnitude >= 0.5 * magnitude.max()))
    lag = first_strong + int(np.argmax(magnitude[first_strong:first_strong + 16]))
    spread = np.sqrt(max(noise_power, 1e-12)) * float(np.linalg.norm(sweep))
    detected = bool(abs(corr[lag]) > DETECTION_SIGMAS * spread)
    delay_ms = erl_db = None
    if detected:
        delay_ms = (first + lag - at) * 1000 / RATE_HZ
        echo = window[lag:lag + len(sweep) + int(0.1 * RATE_HZ)]
        echo_energy = float(np.sum(np.square(echo))) - noise_power * len(echo)
        sweep_energy = float(np.sum(np.square(sweep)))
        erl_db = float(10 * np.log10(sweep_energy / max(echo_energy, 1e-12)))
    mode, reason = recommend(detected, erl_db, clipped)
    return EchoMeasurement(detected, delay_ms, erl_db, 0.5 * _dbfs(noise_power),
                           _dbfs(peak_level), clipped, mode, reason)


class AcousticCheckRun:
    """One check in progress: ``fill`` (output callback) mixes the sweep into the speaker,
    ``feed_mic`` (voice loop) collects the microphone, ``poll`` says when it is over."""

    def __init__(self, output_rate_hz: int, started_s: float) -> None:
        self.output_rate_hz = int(output_rate_hz)
        self.started_s = started_s
        self._sweep_out = log_sweep(self.output_rate_hz)
        self._start_frame: int | None = None  # output frame index where the sweep begins
        self._frames_seen = 0
        self.sweep_dac_s: float | None = None
        self._mic: list[np.ndarray] = []
        self._mic_start_s: float | None = None
        self._mic_end_s = -np.inf

    def mix(self, out: np.ndarray, dac_time_s: float, rate_hz: int) -> None:
        """An output mixer (app.conversation.audio_io): the sweep at the rate it was made for;
        after a device change to another rate the check times out and says so."""
        if rate_hz == self.output_rate_hz:
            self.fill(out, dac_time_s)

    def fill(self, out: np.ndarray, dac_time_s: float) -> None:
        """Output callback: add the part of the sweep that falls in this block."""
        if self._start_frame is None:
            self._start_frame = self._frames_seen + int(LEAD_S * self.output_rate_hz)
            self.sweep_dac_s = dac_time_s + LEAD_S
        begin = self._start_frame - self._frames_seen
        self._frames_seen += len(out)
        first, last = max(0, begin), min(len(out), begin + len(self._sweep_out))
        if last > first:
            out[first:last] += self._sweep_out[first - begin:last - begin]

    def feed_mic(self, pcm_16k: np.ndarray, start_s: float) -> None:
        if self._mic_start_s is None:
            self._mic_start_s = start_s
        self._mic.append(pcm_16k.copy())
        self._mic_end_s = start_s + len(pcm_16k) / RATE_HZ

    @property
    def sweep_end_dac_s(self) -> float | None:
        return None if self.sweep_dac_s is None else self.sweep_dac_s + CHIRP_S

    def done(self) -> bool:
        """The microphone has captured the sweep and the time its echo can take."""
        end = self.sweep_end_dac_s
        return end is not None and self._mic_end_s >= end + LISTEN_S

    def timed_out(self, now_s: float) -> bool:
        return not self.done() and now_s - self.started_s > TIMEOUT_S + CHIRP_S + LISTEN_S

    def result(self) -> EchoMeasurement:
        assert self._mic_start_s is not None and self.sweep_dac_s is not None
        return analyse(np.concatenate(self._mic), self._mic_start_s, self.sweep_dac_s)


def pair_key(input_device: str | None, output_device: str | None) -> str:
    return f"{input_device or '(default microphone)'} → {output_device or '(default speaker)'}"


class AcousticCheckStore:
    """Results per device pair in a small JSON file; a damaged file is set aside, not fatal."""

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            from app.paths import config_dir

            path = config_dir() / "acoustic_checks.json"
        self.path = path

    def _load(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, input_device: str | None, output_device: str | None) -> dict[str, object] | None:
        entry = self._load().get(pair_key(input_device, output_device))
        return entry if isinstance(entry, dict) else None

    def put(self, input_device: str | None, output_device: str | None,
            measurement: EchoMeasurement) -> None:
        data = self._load()
        entry: dict[str, object] = {k: v for k, v in asdict(measurement).items() if k != "reason"}
        entry["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        data[pair_key(input_device, output_device)] = entry
        write_private(self.path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
