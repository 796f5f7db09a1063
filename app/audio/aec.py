"""Acoustic echo cancellation in front of the VAD: WebRTC AEC3 through ``pywebrtc-audio``.

Which library: ``python -m app bench aec`` measured both candidates on the same signals
(BENCHMARKS.md, "Echo cancellation"). ERLE and the cost per second of audio were close (both
AEC3 underneath); pywebrtc-audio keeps the near-end voice better during double talk and alone
(livekit's module also inverts its sign and lags 139 samples), is a 0.4 MB numpy-native wheel
for Linux and Windows with numpy as its only dependency, while livekit brings a 28 MB FFI
library and protobuf for the whole LiveKit client. So the app keeps pywebrtc-audio; the bench
still measures livekit when it is installed.

The stage (:class:`AecStage`) implements :class:`app.audio.echo_canceller.EchoCanceller`:
- modes from ``settings.echo.mode``, switchable live: ``automatic`` runs AEC3; ``headset``
  and ``half_duplex`` pass the microphone through (half-duplex deafness is the pipeline's job);
- the far end comes from :mod:`app.audio.far_end`: the speaker signal on the capture clock;
- alignment: both timestamps carry the device latencies; a coarse extra delay (``delay_ms``,
  from the acoustic check: e.g. Bluetooth speakers whose latency the driver does not report)
  shifts the far end; AEC3's own delay estimator finds the rest (0–400 ms measured here);
- warm-up guard: after a start, reset or delay change AEC3 lets parts of the echo through until
  its filter has converged (measured: up to 0.55 s of speech-like residue 0.6–1.2 s into the
  first reply). ``warming_up`` stays True until ``warmup_far_s`` of far-end activity has gone
  through; the turn controller then lets speech during a reply only duck it, never stop it.
- no echo, no cancelling: when the microphone plainly does not hear the speaker (a headset
  left in ``automatic``: over far-active frames, the median ratio of microphone energy to
  far-end energy, both summed over the last 0.5 s so echo delays do not matter, is below
  ``NO_ECHO_RATIO_DB``) the stage returns the microphone untouched
  (delayed like AEC3's output, so timing does not jump) and lifts the guard. AEC3 keeps running
  and adapting underneath, so its output is ready if the speaker becomes audible. Measured
  here: without this, AEC3 swallowed the start of barge-ins even with no echo at all (its
  suppressor cannot tell "no echo" from "not converged"). The threshold is conservative:
  silero still flags speech at -55 dBFS, and a -45 dB ratio keeps any echo of a -20 dBFS reply
  below -65 dBFS. Until enough frames decide it, AEC3's output is used and the guard holds.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import numpy as np

from app.audio.aec_kernels import FRAME_SAMPLES, AecKernel, default_kernel
from app.audio.far_end import RATE_HZ, FarEndReference
from app.settings import EchoMode

log = logging.getLogger(__name__)
WARMUP_FAR_S = 1.5  # far-end activity AEC3 needs before it is trusted (see module docstring)
FAR_ACTIVE_RMS = 10 ** (-55 / 20)  # a far-end frame louder than -55 dBFS counts as activity
NO_ECHO_RATIO_DB = -45.0  # microphone vs far-end energy: below this, no echo reaches the mic
ECHO_DECISION_FRAMES = 30  # far-active frames needed to decide whether there is an echo
ECHO_WINDOW_FRAMES = 50  # far-end energy averaged over 0.5 s: covers echo delays up to that


class AecUnavailableError(RuntimeError):
    """The echo-cancellation library could not be loaded."""


class AecStage:
    """The echo canceller the pipeline uses (see the module docstring)."""

    def __init__(self, mode: EchoMode = "automatic", delay_ms: float = 0.0,
                 kernel_factory: Callable[[], AecKernel] = default_kernel,
                 warmup_far_s: float = WARMUP_FAR_S) -> None:
        self.far = FarEndReference()
        self._kernel_factory = kernel_factory
        self._kernel: AecKernel | None = None
        self.kernel_name = ""
        self.warmup_far_s = warmup_far_s
        self._delay_samples = 0
        self._pending = np.zeros(0, np.float32)  # near samples short of a whole frame
        self._pending_index = 0  # capture index (16 kHz, pipeline clock) of _pending[0]
        self._far_frame = np.zeros(0, np.float32)
        self._raw_tail = np.zeros(0, np.float32)  # the microphone, delayed like AEC3's output
        self._far_active_samples = 0
        self._window: deque[tuple[float, float]] = deque(maxlen=ECHO_WINDOW_FRAMES)
        self._window_far = self._window_near = 0.0  # sums over _window
        self._echo_ratios_db: deque[float] = deque(maxlen=4 * ECHO_DECISION_FRAMES)
        self.near_energy = 0.0  # while the far end was active: what came in ...
        self.out_energy = 0.0  # ... and what went out (their ratio is the ERLE)
        self.mode: EchoMode = "headset"
        self.set_delay_ms(delay_ms)
        self.set_mode(mode)

    # ---- settings (voice-loop thread) ------------------------------------------------------

    def set_mode(self, mode: EchoMode) -> None:
        """Switch live. Raises AecUnavailableError (and stays a pass-through) if AEC3 cannot
        load."""
        if mode == self.mode:
            return
        self.mode = mode
        if mode != "automatic":
            self._kernel = None  # the held samples are passed through by the next process
            return
        try:
            self._kernel = self._kernel_factory()
        except Exception as exc:  # missing wheel, broken binary
            self.mode = "headset"
            raise AecUnavailableError(f"echo cancellation could not start ({exc})") from exc
        self.kernel_name = self._kernel.name
        self._raw_tail = np.zeros(self._kernel.latency_samples, np.float32)
        self._restart_warmup()

    def set_delay_ms(self, delay_ms: float) -> None:
        """Coarse far-end shift (the measured echo delay minus a margin); resets AEC3."""
        samples = max(0, round(delay_ms * RATE_HZ / 1000))
        if samples != self._delay_samples:
            self._delay_samples = samples
            self.reset()

    @property
    def delay_ms(self) -> float:
        return self._delay_samples * 1000 / RATE_HZ

    def reset(self) -> None:
        """Forget the echo path (new input device, new delay): AEC3 adapts again."""
        if self._kernel is not None:
            self._kernel.reset()
        self._restart_warmup()

    def _restart_warmup(self) -> None:
        self._far_active_samples = 0
        self._window.clear()
        self._window_far = self._window_near = 0.0
        self._echo_ratios_db.clear()

    # ---- state -------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._kernel is not None

    @property
    def echo_heard(self) -> bool | None:
        """Does the microphone hear the speaker? None until enough far end has played."""
        if len(self._echo_ratios_db) < ECHO_DECISION_FRAMES:
            return None
        return bool(np.median(self._echo_ratios_db) > NO_ECHO_RATIO_DB)

    @property
    def warming_up(self) -> bool:
        """AEC3 has not yet heard enough far end to be trusted (see the module docstring)."""
        return (self.active and self._far_active_samples < self.warmup_far_s * RATE_HZ
                and self.echo_heard is not False)

    @property
    def far_active_s(self) -> float:
        return self._far_active_samples / RATE_HZ

    @property
    def erle_db(self) -> float | None:
        """Echo return loss enhancement over all far-active frames so far (double talk
        included, so a lower bound while the person talks over replies)."""
        if self.out_energy <= 0.0 or self.near_energy <= 0.0:
            return None
        return float(10 * np.log10(self.near_energy / self.out_energy))

    @property
    def latency_s(self) -> float:
        if self._kernel is None:
            return 0.0
        return (len(self._pending) + self._kernel.latency_samples) / RATE_HZ

    # ---- EchoCanceller -----------------------------------------------------------------------

    def observe_playback(self, played: np.ndarray, dac_time_s: float) -> None:
        self.far.push(played, dac_time_s)

    def configure_output(self, sample_rate_hz: int) -> None:
        self.far.configure_output(sample_rate_hz)

    def process(self, mic: np.ndarray, adc_time_s: float) -> np.ndarray:
        self.far.update()
        kernel = self._kernel
        if kernel is None:
            if len(self._pending):
                mic, self._pending = np.concatenate([self._pending, mic]), self._pending[:0]
            return mic
        if len(self._pending) == 0:
            self._pending_index = round(adc_time_s * RATE_HZ)
            near = np.asarray(mic, np.float32)
        else:
            near = np.concatenate([self._pending, mic])
        count = len(near) // FRAME_SAMPLES * FRAME_SAMPLES
        self._pending = near[count:].copy()
        if count == 0:
            return near[:0]
        near = np.ascontiguousarray(near[:count])
        if len(self._far_frame) < count:
            self._far_frame = np.zeros(count, np.float32)
        far = self._far_frame[:count]
        self.far.read(self._pending_index - self._delay_samples, far)
        self._pending_index += count
        out = kernel.process(near, far)
        self._account(near, far, out)
        joined = np.concatenate([self._raw_tail, near])
        self._raw_tail = joined[len(near):]
        return joined[:len(near)] if self.echo_heard is False else out

    def _account(self, near: np.ndarray, far: np.ndarray, out: np.ndarray) -> None:
        frames = len(far) // FRAME_SAMPLES
        far_power = np.mean(np.square(far.reshape(frames, FRAME_SAMPLES)), axis=1)  # [frames]
        near_power = np.mean(np.square(near.reshape(frames, FRAME_SAMPLES)), axis=1)
        active = far_power > FAR_ACTIVE_RMS**2
        for far_p, near_p in zip(far_power.tolist(), near_power.tolist(), strict=True):
            if len(self._window) == ECHO_WINDOW_FRAMES:
                old_far, old_near = self._window[0]
                self._window_far -= old_far
                self._window_near -= old_near
            self._window.append((far_p, near_p))
            self._window_far += far_p
            self._window_near += near_p
            if far_p > FAR_ACTIVE_RMS**2 and len(self._window) == ECHO_WINDOW_FRAMES:
                ratio = max(self._window_near, 1e-14) / max(self._window_far, 1e-14)
                self._echo_ratios_db.append(10 * np.log10(ratio))
        if not np.any(active):
            return
        self._far_active_samples += int(np.count_nonzero(active)) * FRAME_SAMPLES
        mask = np.repeat(active, FRAME_SAMPLES)
        self.near_energy += float(np.sum(np.square(near[mask])))
        self.out_energy += float(np.sum(np.square(out[mask])))
