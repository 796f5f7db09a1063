"""The devices side of the voice loop: streams opened by saved name, the player, the callbacks.

The device callbacks only copy audio and post to the inbox (never block). A saved device that
is missing, or one that vanishes mid-session, is reported as a ``DeviceLost`` event and
replaced by the system default; if there is no default either, an ``ErrorReported`` says what to
do and the app goes on without that direction (the UI keeps working, and a later settings
change can reopen a device). Nothing here raises.

Limitation: PortAudio reads its device list once, at initialisation, so a device plugged in
while the app runs is not offered until the next start.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.audio.audio_file import finite_or_silence
from app.audio.backend import (
    AudioBackend,
    AudioUnavailableError,
    DeviceUnavailableError,
    Direction,
    StreamHandle,
)
from app.audio.player import Player
from app.audio.ringbuffer import RingBuffer
from app.conversation.clock import Clock
from app.conversation.inbox import Inbox
from app.conversation.listener import Listener
from app.events import AudioDevicesOpened, DeviceLost, ErrorReported, PipelineEvent
from app.settings import AudioSettings

log = logging.getLogger(__name__)
# tap(block [frames, channels] float32, sample_rate_hz): sees every captured block (device thread)
InputTap = Callable[[np.ndarray, int], None]
# mixer(out [frames] float32, dac_time_s, sample_rate_hz): adds to what the speaker plays
OutputMixer = Callable[[np.ndarray, float, int], None]
STALL_LIMIT_S = 2.0  # a started stream whose callbacks stopped this long ago counts as lost
REPLY_WAVEFORM_S = 10.0


# A possible barge-in ducks the reply 26 dB (issue 14: 20 dB down within 80 ms of the onset);
# restored if the speech is not confirmed. Where no echo can be heard the duck is silence
# (pipeline_turns._on_duck).
DUCK_GAIN = 0.05
DUCK_RAMP_MS = 5.0  # 20 dB down 4 ms after the decision reaches the speaker

class ReplyWaveform:
    """What the speaker played recently, for the UI's reply waveform: one object for the whole
    session (the UI keeps it), whatever output device, and sample rate, is open."""

    def __init__(self, sample_rate_hz: int = 24000) -> None:
        self._ring = RingBuffer(int(sample_rate_hz * REPLY_WAVEFORM_S), sample_rate_hz)

    @property
    def sample_rate_hz(self) -> int:
        return self._ring.sample_rate_hz

    def use_rate(self, sample_rate_hz: int) -> None:
        if sample_rate_hz != self._ring.sample_rate_hz:
            self._ring = RingBuffer(int(sample_rate_hz * REPLY_WAVEFORM_S), sample_rate_hz)

    def write(self, pcm: np.ndarray) -> None:
        self._ring.write(pcm)

    def read_latest(self, out: np.ndarray) -> int:
        return self._ring.read_latest(out)


@dataclass(frozen=True)
class StreamLost:
    """Posted (from any thread) when a stream's device vanished."""

    direction: Direction
    handle: object


class AudioIO:
    def __init__(self, backend: AudioBackend, listener: Listener, clock: Clock, inbox: Inbox,
                 playback_start_ms: float, block_ms: float = 10.0) -> None:
        self.backend = backend
        self._listener = listener
        self._clock = clock
        self._inbox = inbox
        self._playback_start_ms = playback_start_ms
        self._block_ms = block_ms
        self.input: StreamHandle | None = None
        self.output: StreamHandle | None = None
        self.player: Player | None = None
        self.reply_waveform = ReplyWaveform()
        # Replaced whole (never mutated) so the device threads always see a consistent tuple.
        self._input_taps: tuple[InputTap, ...] = ()
        self._output_mixers: tuple[OutputMixer, ...] = ()
        self.non_finite_input_samples = 0  # NaN/Inf from the microphone, heard as silence
        self._non_finite_reported = False

    # ---- the voice loop's side -------------------------------------------------------------

    def start(self, audio: AudioSettings, now_s: float) -> list[PipelineEvent]:
        """Open the microphone and the speaker the settings name (or the defaults)."""
        events = (self.start_input(audio.input_device, now_s)
                  + self.start_output(audio.output_device, now_s))
        return [e for i, e in enumerate(events) if e not in events[:i]]  # "no audio" once

    def start_input(self, name: str | None, now_s: float) -> list[PipelineEvent]:
        self.close_direction("input")
        handle, events = self.open("input", name, None, now_s)
        self._run_input(handle)
        return events

    def start_output(self, name: str | None, now_s: float) -> list[PipelineEvent]:
        self.close_direction("output")
        handle, events = self.open("output", name, self._wanted_rate_hz("output"), now_s)
        self._run_output(handle, now_s)
        return events

    def opened(self) -> AudioDevicesOpened:
        """The devices open now, as the UI shows them."""
        return AudioDevicesOpened(self.input.device_name if self.input is not None else None,
                                  self.output.device_name if self.output is not None else None)

    def handle_lost(self, lost: StreamLost, now_s: float) -> list[PipelineEvent]:
        handle, events = self.replace_lost(lost, self._wanted_rate_hz(lost.direction), now_s)
        if events:
            if lost.direction == "input":
                self._run_input(handle)
            else:
                self._run_output(handle, now_s)
        return events

    def _wanted_rate_hz(self, direction: Direction) -> int | None:
        """The rate a new speaker should open at: the player's, so a reply in progress plays
        on unchanged (None: whatever the device likes)."""
        if direction == "output" and self.player is not None:
            return self.player.sample_rate_hz
        return None

    def set_playback_start_ms(self, playback_start_ms: float) -> None:
        self._playback_start_ms = playback_start_ms
        if self.player is not None:
            self.player.set_start_threshold_ms(playback_start_ms)

    def add_input_tap(self, tap: InputTap) -> None:
        """Also give every captured block of the conversation's microphone to ``tap``."""
        self._input_taps = (*self._input_taps, tap)

    def remove_input_tap(self, tap: InputTap) -> None:
        self._input_taps = tuple(t for t in self._input_taps if t is not tap)

    def add_output_mixer(self, mixer: OutputMixer) -> None:
        """Let ``mixer`` add to each block the conversation's speaker plays (after the reply)."""
        self._output_mixers = (*self._output_mixers, mixer)

    def remove_output_mixer(self, mixer: OutputMixer) -> None:
        self._output_mixers = tuple(m for m in self._output_mixers if m is not mixer)

    def _run_input(self, handle: StreamHandle | None) -> None:
        if handle is not None:
            self._listener.configure_input(handle.sample_rate_hz)
            handle.start()

    def _run_output(self, handle: StreamHandle | None, now_s: float) -> None:
        if handle is None:
            if self.player is not None:
                self.player.drop(now_s)  # the reply ends: nothing can play it
            self.player = None  # replies now end as soon as the engine is done
            return
        rate = int(handle.sample_rate_hz)
        if self.player is None or self.player.sample_rate_hz != rate:
            if self.player is not None:
                self.player.drop(now_s)
            self.player = Player(rate, self._playback_start_ms, self._inbox.post_control,
                                 duck_gain=DUCK_GAIN, duck_ramp_ms=DUCK_RAMP_MS)
            self.reply_waveform.use_rate(rate)
        self._listener.echo_canceller.configure_output(rate)
        handle.start()

    # ---- device callbacks (device threads: copy and post only) ------------------------------

    def input_warnings(self) -> list[PipelineEvent]:
        """Once per session: the microphone sent samples that are not numbers."""
        if not self.non_finite_input_samples or self._non_finite_reported:
            return []
        self._non_finite_reported = True
        return [ErrorReported(
            "bad_audio", "The microphone sends samples that are not numbers (NaN or "
            "infinite); they are heard as silence.",
            "If this repeats, choose another microphone in the settings or update its driver.")]

    def _on_input(self, block: np.ndarray, adc_time_s: float) -> None:
        if not math.isfinite(float(block.sum(dtype=np.float64))):  # no array allocated
            block, bad = finite_or_silence(block)
            self.non_finite_input_samples += bad
        capture = self._listener.capture
        capture.push(block, self._clock.from_device_time(adc_time_s))
        for tap in self._input_taps:
            tap(block, capture.sample_rate_hz)
        self._inbox.signal_capture()

    def _on_output(self, out: np.ndarray, dac_time_s: float) -> None:
        dac = self._clock.from_device_time(dac_time_s)
        player = self.player
        rate = self.reply_waveform.sample_rate_hz

        def mix(block: np.ndarray) -> None:
            for mixer in self._output_mixers:
                mixer(block, dac, rate)

        if player is not None:
            player.fill(out, dac, mix if self._output_mixers else None)  # its limiter is last
        else:
            out.fill(0.0)
            mix(out)
        self.reply_waveform.write(out)
        self._listener.echo_canceller.observe_playback(out, dac)

    # ---- streams ---------------------------------------------------------------------------

    def open(self, direction: Direction, name: str | None, rate_hz: int | None,
             now_s: float) -> tuple[StreamHandle | None, list[PipelineEvent]]:
        """Open ``name`` (or the default), falling back to the default; stream not started."""
        try:
            handle = self._try_open(direction, name, rate_hz)
            return self._keep(direction, handle), []
        except AudioUnavailableError as exc:
            return None, [ErrorReported("audio", f"No audio devices: {exc}.",
                                        "Install the audio system, then restart the app.")]
        except DeviceUnavailableError as exc:
            if name is None:
                return None, [self._nothing_left(direction, str(exc))]
            log.warning("%s device %r unavailable: %s", direction, name, exc)
        return self._open_default(direction, name, rate_hz, now_s)

    def replace_lost(self, lost: StreamLost, rate_hz: int | None,
                     now_s: float) -> tuple[StreamHandle | None, list[PipelineEvent]]:
        """The current stream of ``lost.direction`` died: switch to the default device."""
        current = self.input if lost.direction == "input" else self.output
        if current is None or lost.handle is not current:
            return current, []  # stale report about a stream already replaced
        name = current.device_name
        current.close()
        self._keep(lost.direction, None)
        return self._open_default(lost.direction, name, rate_hz, now_s)

    def _open_default(self, direction: Direction, lost_name: str, rate_hz: int | None,
                      now_s: float) -> tuple[StreamHandle | None, list[PipelineEvent]]:
        """Fall back to the default device; either way, say that ``lost_name`` is gone."""
        try:
            handle = self._try_open(direction, None, rate_hz)
        except (AudioUnavailableError, DeviceUnavailableError) as exc:
            return None, [DeviceLost(direction, lost_name, None, now_s),
                          self._nothing_left(direction, str(exc))]
        return (self._keep(direction, handle),
                [DeviceLost(direction, lost_name, handle.device_name, now_s)])

    def stalled(self) -> list[StreamLost]:
        """Streams whose callbacks stopped arriving (real devices only report this)."""
        found = []
        for direction, handle in (("input", self.input), ("output", self.output)):
            stalled_for = getattr(handle, "stalled_for_s", None)
            if handle is not None and stalled_for is not None and stalled_for() > STALL_LIMIT_S:
                found.append(StreamLost(direction, handle))  # type: ignore[arg-type]
        return found

    def close_direction(self, direction: Direction) -> None:
        handle = self.input if direction == "input" else self.output
        if handle is not None:
            handle.close()
        self._keep(direction, None)

    def close(self) -> None:
        for handle in (self.input, self.output):
            if handle is not None:
                handle.close()
        self.input = self.output = None

    def _try_open(self, direction: Direction, name: str | None,
                  rate_hz: int | None) -> StreamHandle:
        holder: list[StreamHandle] = []

        def lost() -> None:
            self._inbox.post_control(StreamLost(direction, holder[0] if holder else None))

        if direction == "input":
            handle = self.backend.open_input(name, rate_hz, self._block_ms, self._on_input, lost)
        else:
            handle = self.backend.open_output(name, rate_hz, self._block_ms, self._on_output,
                                              lost)
        holder.append(handle)
        return handle

    def _keep(self, direction: Direction, handle: StreamHandle | None) -> StreamHandle | None:
        if direction == "input":
            self.input = handle
        else:
            self.output = handle
        return handle

    @staticmethod
    def _nothing_left(direction: Direction, detail: str) -> ErrorReported:
        if direction == "input":
            return ErrorReported("audio", f"No microphone is available ({detail}).",
                                 "Connect a microphone or choose one in the settings.")
        return ErrorReported("audio", f"No speaker is available ({detail}).",
                             "Connect headphones or speakers or choose them in the settings.")
