"""Acoustic echo cancellation in front of the VAD: WebRTC AEC3 (see ``aec_kernels`` for which
library and why).

:class:`AecStage` implements :class:`app.audio.echo_canceller.EchoCanceller`:
- modes from ``settings.echo.mode``, switchable live: ``automatic`` runs AEC3; ``headset`` and
  ``half_duplex`` pass the microphone through (half-duplex deafness is the pipeline's job);
- the far end comes from :mod:`app.audio.far_end`: the speaker signal on the capture clock;
- alignment: both timestamps carry the device latencies; a coarse extra delay (``delay_ms``,
  from the acoustic check: e.g. Bluetooth speakers whose latency the driver does not report)
  shifts the far end; AEC3's own delay estimator finds the rest (0–400 ms measured here).

Does the microphone hear the speaker at all? (:mod:`app.audio.echo_detector`, by correlating
the microphone with what was played.) Measured: AEC3 swallows the start of speech over a reply
even with no echo at all, because its suppressor cannot tell "no echo" from "not converged
yet". So while the verdict is *no echo* (a headset left in ``automatic``) the stage hands out
the microphone untouched, with no added latency; AEC3 keeps running and adapting underneath,
and its output is used again as soon as an echo shows up. Until the far end has played at all
the microphone is also passed straight through (there is nothing to cancel), so turns before
the first reply do not pay AEC3's 8 ms. While the verdict is still open (the first ~0.65 s of
far end after a start, unless the acoustic check left a prior) AEC3's output is used: on
speakers that keeps the echo out; on a headset it delays a barge-in that early until the
verdict (measured in ``bench voice-loop``'s barge_in_early).

Warm-up guard: after a start, a reset or a delay change AEC3 lets parts of the echo through
until its filter has converged (``bench aec``: in 6 of 54 first replies, runs of speech-like
residue up to 0.4 s long, starting as early as 0.22 s and over by 1.0 s into the reply; up to
0.55 s and 1.2 s with an earlier room model). ``warming_up`` is True for the first
``warmup_far_s`` of far-end activity, unless the verdict is no echo or the latest look at the
microphone found sound in it that is not an echo (the VAD hears a person, not a leak); the
turn controller lets speech during a reply only duck it while the guard holds.

Double talk while AEC3 is not trusted yet (issue 14): a person over the reply is recognised
from the far-end reference (:mod:`app.audio.double_talk`: the microphone 10 dB over the loudest
echo the far end could make) or by correlation (the detector's sound that is no echo). Then
the VAD gets the microphone itself, not AEC3's output (which swallowed the start of speech
even with no echo at all), and the guard lets the barge-in through. The echo level it needs is
learnt only once the correlation has told echo from no echo in a reply: before that the
microphone holds the room's noise or a person, and their level is no echo's (rain over the
far end's first frames read as an echo 6-12 dB under it, which the sound gate then waited
for a talker's first syllable to clear), nor while a look is undecided (a person's first
syllable matching the reply's start by chance was learnt as an echo 8 dB under the far end).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from app.audio.aec_kernels import FRAME_SAMPLES, AecKernel, default_kernel
from app.audio.double_talk import FAR_ACTIVE_POWER, NearEndDetector
from app.audio.echo_detector import EchoDetector
from app.audio.far_end import RATE_HZ, FarEndReference
from app.settings import EchoMode

log = logging.getLogger(__name__)
WARMUP_FAR_S = 1.5  # far-end activity AEC3 needs before it is trusted (see module docstring)
FAR_ACTIVE_RMS = 10 ** (-55 / 20)  # a far-end frame louder than -55 dBFS counts as activity


class AecUnavailableError(RuntimeError):
    """The echo-cancellation library could not be loaded."""


class AecStage:
    """The echo canceller the pipeline uses (see the module docstring).

    Bookkeeping in microphone samples since the stage started: ``_in_total`` came in,
    ``_emitted`` went out (AEC3's output, or the microphone itself), ``_fed`` went into AEC3.
    Switching between AEC3's output and the microphone never drops or repeats a sample.
    """

    def __init__(self, mode: EchoMode = "automatic", delay_ms: float = 0.0,
                 kernel_factory: Callable[[], AecKernel] = default_kernel,
                 warmup_far_s: float = WARMUP_FAR_S) -> None:
        self.far = FarEndReference()
        self.detector = EchoDetector()
        self.double_talk = NearEndDetector()
        self._kernel_factory = kernel_factory
        self._kernel: AecKernel | None = None
        self.kernel_name = ""
        self.warmup_far_s = warmup_far_s
        self._delay_samples = 0
        self._in_total = self._emitted = self._fed = 0
        self._recent = np.zeros(0, np.float32)  # the newest microphone samples
        self._pending = np.zeros(0, np.float32)  # microphone samples short of a whole frame
        self._pending_index = 0  # capture index (16 kHz, pipeline clock) of _pending[0]
        self._far_buffer = np.zeros(0, np.float32)
        self._far_active_samples = 0
        self._unseen_after: int | None = None  # the far end (re)started after so many told
        self.near_energy = 0.0  # while the far end was active: what came in ...
        self.out_energy = 0.0  # ... and what AEC3 let out (their ratio is the ERLE)
        self.echo_power_bound = 0.0  # the loudest echo in what ``process`` returned last
        self.mode: EchoMode = "headset"
        self.set_delay_ms(delay_ms)
        self.set_mode(mode)

    # ---- settings (voice-loop thread) ------------------------------------------------------

    def set_mode(self, mode: EchoMode) -> None:
        """Switch live. Raises AecUnavailableError (and passes through) if AEC3 cannot load."""
        if mode == self.mode:
            return
        self.mode = mode
        self._pending = self._pending[:0]  # AEC3 (re)starts with the next microphone sample
        self._fed = self._in_total
        if mode != "automatic":
            self._kernel = None
            return
        try:
            self._kernel = self._kernel_factory()
        except Exception as exc:  # missing wheel, broken binary
            self.mode = "headset"
            raise AecUnavailableError(f"echo cancellation could not start ({exc})") from exc
        self.kernel_name = self._kernel.name
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
        self._unseen_after = None
        self.detector.clear()
        self.double_talk.reset()

    # ---- state -------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._kernel is not None

    @property
    def echo_heard(self) -> bool | None:
        return self.detector.echo_heard

    @property
    def warming_up(self) -> bool:
        """AEC3 is not trusted yet (see the module docstring)."""
        return self._untrusted and not self.person_over_echo

    @property
    def _untrusted(self) -> bool:
        return (self.active and 0 < self._far_active_samples < self.warmup_far_s * RATE_HZ
                and self.echo_heard is not False)

    @property
    def person_over_echo(self) -> bool:
        """The microphone holds a person, not (only) an echo: by correlation (sound that is no
        echo of what played) or by level (well over the loudest echo the far end could make)."""
        return self.detector.sound_without_echo or self.double_talk.near_end

    @property
    def far_active_s(self) -> float:
        return self._far_active_samples / RATE_HZ

    @property
    def erle_db(self) -> float | None:
        """AEC3's echo return loss enhancement over all far-active frames so far (double talk
        included, so a lower bound while the person talks over replies)."""
        if self.out_energy <= 0.0 or self.near_energy <= 0.0:
            return None
        return float(10 * np.log10(self.near_energy / self.out_energy))

    @property
    def latency_s(self) -> float:
        return (self._in_total - self._emitted) / RATE_HZ

    # ---- EchoCanceller -----------------------------------------------------------------------

    def observe_playback(self, played: np.ndarray, dac_time_s: float) -> None:
        self.far.push(played, dac_time_s)

    def configure_output(self, sample_rate_hz: int) -> None:
        """A new speaker: a new echo path, so AEC3 adapts again."""
        self.far.configure_output(sample_rate_hz)
        self.reset()

    def process(self, mic: np.ndarray, adc_time_s: float) -> np.ndarray:
        self.far.update()
        mic = np.asarray(mic, np.float32)
        keep = len(mic) + len(self._pending) + 4 * FRAME_SAMPLES
        self._recent = np.concatenate([self._recent, mic])[-keep:]
        self._in_total += len(mic)
        self.echo_power_bound = 0.0
        if self._kernel is None:
            return self._emit_microphone()
        if len(self._pending) == 0:
            self._pending_index = round(adc_time_s * RATE_HZ)
        near = np.concatenate([self._pending, mic])
        count = len(near) // FRAME_SAMPLES * FRAME_SAMPLES
        self._pending = near[count:].copy()
        out = self._cancel(self._kernel, np.ascontiguousarray(near[:count])) if count else None
        if self._far_active_samples == 0 or self.echo_heard is False:
            return self._emit_microphone()
        if self._untrusted and self.person_over_echo:
            # AEC3 is not converged and would eat the person's words; the echo is well under
            # them (or absent), so the VAD hears the microphone itself.
            self.echo_power_bound = self.double_talk.echo_bound(
                raw=True, observed=self.detector.sound_without_echo)
            return self._emit_microphone()
        self.echo_power_bound = self.double_talk.echo_bound(raw=False)
        if out is None:
            return mic[:0]
        first = self._fed - count - self._kernel.latency_samples  # input index of out[0]
        skip = max(0, self._emitted - first)
        self._emitted = max(self._emitted, first + len(out))
        return out[skip:]

    def _emit_microphone(self) -> np.ndarray:
        count = self._in_total - self._emitted
        self._emitted = self._in_total
        return self._recent[len(self._recent) - count:]

    def _cancel(self, kernel: AecKernel, near: np.ndarray) -> np.ndarray | None:
        """AEC3 on whole frames; None while nothing has played yet since the last reset (AEC3
        would only burn CPU on a silent far end; the microphone goes out as it is)."""
        count = len(near)
        if len(self._far_buffer) < count:
            self._far_buffer = np.zeros(count, np.float32)
        far = self._far_buffer[:count]
        self.far.read(self._pending_index - self._delay_samples, far)
        self._pending_index += count
        self._fed += count
        frames = count // FRAME_SAMPLES
        far_frames = far.reshape(frames, FRAME_SAMPLES)
        far_power = np.einsum("ij,ij->i", far_frames, far_frames) / FRAME_SAMPLES  # [frames]
        active = far_power > FAR_ACTIVE_RMS**2
        active_samples = int(np.count_nonzero(active)) * FRAME_SAMPLES
        if self._far_active_samples == 0 and active_samples == 0:
            return None
        out = kernel.process(near, far)
        if active_samples and self.double_talk.far_bound <= FAR_ACTIVE_POWER:
            self._unseen_after = self.detector.told  # the far end starts (again)
        # A possible person over the reply while AEC3 is not trusted: look again at once.
        self.detector.add(near, far, active_samples, urgent=self._untrusted)
        if self._unseen_after is not None and self.detector.told > self._unseen_after:
            self._unseen_after = None
        # Until the correlation has told echo from no echo in a reply, the microphone teaches
        # no echo level: the echo may not have arrived yet, what it holds may be the room's
        # noise or a person.
        talking = (self.detector.sound_without_echo or self.detector.undecided
                   or self._unseen_after is not None)
        self.double_talk.update(near, far, talking, out)
        if active_samples:
            self._far_active_samples += active_samples
            mask = np.repeat(active, FRAME_SAMPLES)
            self.near_energy += float(np.sum(np.square(near[mask])))
            self.out_energy += float(np.sum(np.square(out[mask])))
        return out
