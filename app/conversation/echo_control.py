"""Echo handling on the voice-loop thread: canceller mode and delay, half-duplex deafness, the
acoustic check and its stored results.

- ``settings.echo.mode`` switches live: ``automatic`` runs the canceller, ``headset`` passes
  the microphone through, ``half_duplex`` passes it through and makes the listener deaf from
  the first audible reply sample until the reply's last sample plus the echo's way back
  (measured delay, or a default) and a reverberation margin, so no part of the reply can be
  heard as speech. (The turn controller also disables barge-in in half-duplex.)
- The canceller's warm-up state is the turn controller's ``echo_guard``.
- ``RunAcousticCheck``: any reply is stopped by the pipeline, the listener goes deaf, the
  sweep plays (:mod:`app.audio.acoustic_check`); the result is stored for the device pair and
  its delay (minus a margin: AEC3 must never see the echo *before* its reference) becomes the
  canceller's coarse delay. Whenever the device pair changes, the stored delay for the new
  pair is applied.
"""

from __future__ import annotations

import logging

from app.audio.acoustic_check import (
    AcousticCheckRun,
    AcousticCheckStore,
    EchoMeasurement,
)
from app.audio.aec import AecStage, AecUnavailableError
from app.conversation.audio_io import AudioIO
from app.conversation.barge_in import DEFAULT_ECHO_WAY_BACK_S, REVERB_MARGIN_S
from app.conversation.listener import Listener
from app.events import AcousticCheckFinished, ErrorReported, PipelineEvent
from app.settings import EchoMode, Settings

log = logging.getLogger(__name__)
ALIGNMENT_MARGIN_MS = 60.0  # the coarse delay stays this far below the measured one


class EchoControl:
    def __init__(self, settings: Settings, listener: Listener, io: AudioIO,
                 store: AcousticCheckStore | None = None) -> None:
        self._listener = listener
        self._io = io
        stage = listener.echo_canceller
        self.stage = stage if isinstance(stage, AecStage) else None
        self.mode: EchoMode = settings.echo.mode
        self.store = store or AcousticCheckStore()
        self.measured_delay_ms: float | None = None
        self._pair: tuple[str, str] | None = None
        self._check: AcousticCheckRun | None = None
        self._check_pair: tuple[str | None, str | None] = (None, None)
        self._deaf_from_s: float | None = None

    def start(self) -> list[PipelineEvent]:
        return self._stage_mode(self.mode)

    def apply(self, settings: Settings) -> list[PipelineEvent]:
        """New settings: switch the echo mode live."""
        mode = settings.echo.mode
        if mode == self.mode:
            return []
        self.mode = mode
        if mode != "half_duplex" and self._check is None:
            self._listener.set_deaf(None)
            self._deaf_from_s = None
        return self._stage_mode(mode)

    def _stage_mode(self, mode: EchoMode) -> list[PipelineEvent]:
        if self.stage is None:
            return []
        try:
            self.stage.set_mode(mode)
        except AecUnavailableError as exc:
            log.warning("%s", exc)
            return [ErrorReported("audio", f"Echo cancellation is not available: {exc}.",
                                  "Use a headset, or choose half-duplex under Settings → Echo "
                                  "handling.")]
        return []

    @property
    def echo_settled(self) -> bool:
        """An echo of the speaker would be cancelled (or there is none to cancel): the
        canceller has converged, found no echo, or is not in use. Until then an early reply
        could hide a person who goes on (AEC3 warming up swallows speech over a reply)."""
        stage = self.stage
        return (stage is None or not stage.active or stage.echo_heard is False
                or stage.far_active_s >= stage.warmup_far_s)

    @property
    def echo_guard(self) -> bool:
        """The canceller is warming up: speech during a reply may only duck it."""
        return self.stage is not None and self.stage.warming_up

    def status(self) -> dict[str, object]:
        """For reports: the mode, the canceller, its delays and the ERLE it achieved."""
        stage = self.stage
        erle = stage.erle_db if stage is not None else None
        return {"mode": self.mode,
                "canceller": stage.kernel_name if stage is not None and stage.active else None,
                "measured_delay_ms": self.measured_delay_ms,
                "coarse_delay_ms": stage.delay_ms if stage is not None else None,
                "estimated_delay_ms": stage.detector.delay_ms if stage is not None else None,
                "far_active_s": round(stage.far_active_s, 3) if stage is not None else None,
                "echo_heard": stage.echo_heard if stage is not None else None,
                "erle_db": None if erle is None else round(erle, 1)}

    # ---- half-duplex -----------------------------------------------------------------------

    def reply_audible(self, t_s: float) -> None:
        if self.mode == "half_duplex" and self._check is None:
            self._deaf_from_s = t_s
            self._listener.set_deaf(t_s)

    def reply_over(self, t_s: float) -> None:
        if self.mode == "half_duplex" and self._check is None and self._deaf_from_s is not None:
            way_back = (DEFAULT_ECHO_WAY_BACK_S if self.measured_delay_ms is None
                        else max(0.0, self.measured_delay_ms / 1000))
            self._listener.set_deaf(self._deaf_from_s, t_s + way_back + REVERB_MARGIN_S)
            self._deaf_from_s = None

    # ---- the acoustic check ----------------------------------------------------------------

    def start_check(self, now_s: float, talking: bool = False) -> list[PipelineEvent]:
        if self._check is not None:
            return []
        mic, speaker = self._io.input, self._io.output
        pair = (mic.device_name if mic else None, speaker.device_name if speaker else None)
        if talking:
            return [AcousticCheckFinished(False, *pair, message=(
                "Someone was talking; the check needs a quiet moment. Run it again."))]
        if mic is None or speaker is None:
            return [AcousticCheckFinished(False, *pair, message=(
                "The acoustic check needs a microphone and a speaker; connect them (or choose "
                "them in the settings) and run it again."))]
        run = AcousticCheckRun(speaker.sample_rate_hz, now_s)
        self._check, self._check_pair = run, pair
        self._listener.raw_taps.append(run.feed_mic)
        self._io.add_output_mixer(run.mix)
        self._listener.set_deaf(now_s)  # the sweep must not start a turn
        return []

    def poll(self, now_s: float) -> list[PipelineEvent]:
        """Follow device changes, and finish the acoustic check when it is done."""
        self._follow_devices()
        run = self._check
        if run is None:
            return []
        if run.done():
            self._end_check(run)
            try:
                measurement = run.result()
            except ValueError as exc:
                return [AcousticCheckFinished(False, *self._check_pair,
                                              message=f"The check failed: {exc}.")]
            return [self._finished(measurement)]
        if run.timed_out(now_s) or self._io.output is None or self._io.input is None:
            self._end_check(run)
            return [AcousticCheckFinished(False, *self._check_pair, message=(
                "The check got no sound through: the speaker or the microphone stopped. "
                "Check the devices in the settings and run it again."))]
        return []

    def _end_check(self, run: AcousticCheckRun) -> None:
        self._check = None
        if run.feed_mic in self._listener.raw_taps:
            self._listener.raw_taps.remove(run.feed_mic)
        self._io.remove_output_mixer(run.mix)
        self._listener.set_deaf(None)

    def _finished(self, m: EchoMeasurement) -> AcousticCheckFinished:
        mic, speaker = self._check_pair
        self.store.put(mic, speaker, m)
        round_trip = None
        self._use_delay(m.delay_ms, m.echo_detected)
        if m.delay_ms is not None:
            latencies = sum(h.latency_s for h in (self._io.input, self._io.output) if h)
            round_trip = m.delay_ms + latencies * 1000
        return AcousticCheckFinished(
            True, mic, speaker, m.echo_detected, m.delay_ms, round_trip,
            m.echo_return_loss_db, m.recommended_mode, m.reason)

    # ---- delay per device pair -------------------------------------------------------------

    def _follow_devices(self) -> None:
        mic, speaker = self._io.input, self._io.output
        pair = (mic.device_name, speaker.device_name) if mic and speaker else None
        if pair == self._pair:
            return
        self._pair = pair
        entry = self.store.get(*pair) if pair is not None else None
        delay = entry.get("delay_ms") if entry else None
        detected = entry.get("echo_detected") if entry else None
        self._use_delay(float(delay) if isinstance(delay, int | float) else None,
                        detected if isinstance(detected, bool) else None)

    def _use_delay(self, delay_ms: float | None, echo_detected: bool | None) -> None:
        """What a check found for the pair in use: the canceller's coarse delay, and whether
        there is an echo at all until the canceller can tell by itself."""
        self.measured_delay_ms = delay_ms
        if self.stage is not None:
            self.stage.set_delay_ms(max(0.0, (delay_ms or 0.0) - ALIGNMENT_MARGIN_MS))
            self.stage.detector.prior = echo_detected
