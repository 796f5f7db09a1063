"""The settings panel's audio helpers, run by the voice loop (the UI never opens a device).

- ``ListAudioDevices`` → ``AudioDevicesListed`` (names as the settings store them).
- ``MonitorInputLevel`` → ``InputLevelMeasured`` about 10 times a second for one microphone.
- ``PlayTestTone`` → a short sine with 10 ms fades on one speaker, then ``ToneTestFinished``.
- ``StartVoiceRecording``/``StopVoiceRecording`` → a 5–15 s WAV from the conversation's
  microphone, with ``VoiceRecordingProgressed`` and ``VoiceRecordingFinished``. Listening pauses
  while it records (the recording is not a user turn) and any reply is stopped first.

The device the conversation already uses is shared, not opened twice (some drivers refuse a
second stream): its captured blocks are tapped, and the tone is mixed into its output. Another
device gets a stream of its own. Device callbacks only add to small locked accumulators; the
voice loop collects them in :meth:`DeviceTools.poll`. Nothing here raises: a failure becomes
the answer event (or an ``ErrorReported``) with what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from app import events as ev
from app.audio.backend import AudioUnavailableError, DeviceUnavailableError, Direction, find_device
from app.conversation.audio_io import AudioIO
from app.conversation.clock import Clock
from app.conversation.recording import (
    LevelWindows,
    PcmSource,
    ToneSource,
    VoiceRecorder,
    clip_source,
)

log = logging.getLogger(__name__)
TONE_TIMEOUT_S = 3.0  # beyond the tone's length: the device stopped calling back
Emit = Callable[[ev.PipelineEvent], None]
CHECK = "device_check"  # errors answering the settings panel's checks, shown there
PauseListening = Callable[[bool], None]


class DeviceTools:
    def __init__(self, io: AudioIO, clock: Clock, emit: Emit, block_ms: float, *,
                 stop_reply: Callable[[], None], pause_listening: PauseListening) -> None:
        self._io = io
        self._clock = clock
        self._emit = emit
        self._pause_listening = pause_listening
        self._stop_reply = stop_reply
        self._block_ms = block_ms
        self._monitor: _LevelMonitor | None = None
        self._tone: _TonePlayback | None = None
        self._recording: _Recording | None = None

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Command type → handler, merged into the pipeline's dispatch table."""
        return {ev.ListAudioDevices: self.list_devices, ev.MonitorInputLevel: self.monitor,
                ev.PlayTestTone: self.play_tone, ev.StartVoiceRecording: self.start_recording,
                ev.StopVoiceRecording: self.stop_recording}

    @property
    def active(self) -> bool:
        return bool(self._monitor or self._tone or self._recording)

    # ---- commands (voice-loop thread) ------------------------------------------------------

    def list_devices(self, _command: ev.ListAudioDevices) -> None:
        try:
            devices = self._io.backend.list_devices()
        except (AudioUnavailableError, DeviceUnavailableError, OSError) as exc:
            problem = f"No audio devices can be listed: {exc}."
            self._emit(ev.AudioDevicesListed((), (), problem=problem))
            self._emit(ev.ErrorReported(CHECK, problem, "Install or start the system's audio, "
                                        "then restart the app."))
            return
        self._emit(ev.AudioDevicesListed(
            inputs=tuple(d.name for d in devices if d.supports("input")),
            outputs=tuple(d.name for d in devices if d.supports("output")),
            default_input=next((d.name for d in devices if d.is_default_input), None),
            default_output=next((d.name for d in devices if d.is_default_output), None)))

    def monitor(self, command: ev.MonitorInputLevel) -> None:
        if self._monitor is not None:
            self._monitor.close()
            self._monitor = None
        if not command.enabled:
            return
        monitor = _LevelMonitor(command.device_name)
        try:
            if self._is_current("input", command.device_name):
                monitor.tap(self._io)
            else:
                monitor.open(self._io, self._block_ms)
        except (AudioUnavailableError, DeviceUnavailableError) as exc:
            shown = command.device_name or "the default microphone"
            self._emit(ev.ErrorReported(CHECK, f"The level of {shown} cannot be measured: "
                                        f"{exc}.", "Choose another microphone."))
            return
        self._monitor = monitor

    def play_tone(self, command: ev.PlayTestTone) -> None:
        if self._tone is not None:
            self._emit(ev.ToneTestFinished(command.device_name, False,
                                           "A test tone is already playing."))
            return
        tone = _TonePlayback(command, self._clock)
        try:
            if self._is_current("output", command.device_name):
                tone.mix_into(self._io)
            else:
                tone.open(self._io, self._block_ms)
        except (AudioUnavailableError, DeviceUnavailableError) as exc:
            tone.close()
            self._emit(ev.ToneTestFinished(command.device_name, False, f"{exc}."))
            return
        except ValueError as exc:  # a recording to play back that cannot be read
            tone.close()
            self._emit(ev.ToneTestFinished(command.device_name, False,
                                           f"The recording cannot be played: {exc}."))
            return
        self._tone = tone

    def start_recording(self, command: ev.StartVoiceRecording) -> None:
        if self._recording is not None:
            self._emit(ev.VoiceRecordingFinished(None, 0.0, "A recording is already running."))
            return
        if self._io.input is None:
            self._emit(ev.VoiceRecordingFinished(
                None, 0.0, "No microphone is available. Connect one or choose it in the audio "
                "settings, then record again."))
            return
        self._stop_reply()
        self._pause_listening(True)
        self._recording = _Recording(command)
        self._io.add_input_tap(self._recording.recorder.add)

    def stop_recording(self, command: ev.StopVoiceRecording) -> None:
        if self._recording is not None:
            self._finish_recording(keep=command.keep)

    # ---- the voice loop's regular call -------------------------------------------------------

    def poll(self) -> None:
        """Turn what the device threads collected into events; end what is due."""
        if self._monitor is not None:
            self._poll_monitor(self._monitor)
        if self._tone is not None:
            self._poll_tone(self._tone)
        if self._recording is not None:
            self._poll_recording(self._recording)

    def inputs_changed(self) -> None:
        """The conversation's microphone changed: re-decide how the monitor listens."""
        if self._monitor is not None:
            self.monitor(ev.MonitorInputLevel(self._monitor.device_name, True))

    def close(self) -> None:
        if self._monitor is not None:
            self._monitor.close()
        if self._tone is not None:
            self._tone.close()
        if self._recording is not None:
            self._finish_recording(keep=False)
        self._monitor = self._tone = None

    # ---- steps -------------------------------------------------------------------------------

    def _poll_monitor(self, monitor: _LevelMonitor) -> None:
        for _end_s, rms_dbfs, peak_dbfs in monitor.levels.take():
            self._emit(ev.InputLevelMeasured(monitor.device_name, rms_dbfs, peak_dbfs))
        if monitor.lost:
            monitor.close()
            self._monitor = None
            self._emit(ev.ErrorReported(CHECK, f"The microphone {monitor.device_name or ''} "
                                        "stopped while its level was measured.",
                                        "Check the connection or choose another one."))

    def _poll_tone(self, tone: _TonePlayback) -> None:
        now = self._clock.now()
        outcome = tone.outcome(now)
        if outcome is None:
            return
        tone.close()
        self._tone = None
        ok, message = outcome
        self._emit(ev.ToneTestFinished(tone.device_name, ok, message))

    def _poll_recording(self, recording: _Recording) -> None:
        recorder = recording.recorder
        for elapsed_s, level_dbfs in recorder.progress():
            self._emit(ev.VoiceRecordingProgressed(elapsed_s, level_dbfs))
        if recorder.duration_s >= recording.command.max_duration_s or recorder.failed:
            self._finish_recording(keep=True)

    def _finish_recording(self, keep: bool) -> None:
        recording, self._recording = self._recording, None
        if recording is None:
            return
        self._io.remove_input_tap(recording.recorder.add)
        self._pause_listening(False)
        self._emit(recording.save() if keep else ev.VoiceRecordingFinished(
            None, recording.recorder.duration_s, "Recording discarded."))

    def _is_current(self, direction: Direction, name: str | None) -> bool:
        """Is ``name`` (None = the default) the device the conversation has open?"""
        handle = self._io.input if direction == "input" else self._io.output
        if handle is None:
            return False
        try:  # names match as the settings do (case, prefixes): resolve, then compare
            wanted = find_device(self._io.backend.list_devices(), name, direction)
        except (AudioUnavailableError, DeviceUnavailableError, OSError):
            return False
        return wanted.name == handle.device_name


class _LevelMonitor:
    """The level of one microphone: a tap on the conversation's stream, or a stream of its own."""

    def __init__(self, device_name: str | None) -> None:
        self.device_name = device_name
        self.levels = LevelWindows()
        self.lost = False
        self._io: AudioIO | None = None
        self._stream: Any = None

    def tap(self, io: AudioIO) -> None:
        io.add_input_tap(self.levels.add)
        self._io = io

    def open(self, io: AudioIO, block_ms: float) -> None:
        def on_block(block: np.ndarray, _adc_s: float) -> None:
            self.levels.add(block, rate_hz)

        def on_lost() -> None:
            self.lost = True

        self._stream = io.backend.open_input(self.device_name, None, block_ms, on_block, on_lost)
        rate_hz = self._stream.sample_rate_hz
        self._stream.start()

    def close(self) -> None:
        if self._io is not None:
            self._io.remove_input_tap(self.levels.add)
            self._io = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class _TonePlayback:
    """One test tone: mixed into the conversation's speaker, or on a stream of its own."""

    def __init__(self, command: ev.PlayTestTone, clock: Clock) -> None:
        self.device_name = command.device_name
        self._command = command
        self._clock = clock
        self._deadline_s = clock.now() + command.duration_ms / 1000 + TONE_TIMEOUT_S
        self.source: PcmSource | None = None
        self._io: AudioIO | None = None
        self._stream: Any = None
        self.lost = False

    def mix_into(self, io: AudioIO) -> None:
        assert io.output is not None
        self.source = self._make_source(io.output.sample_rate_hz)
        io.add_output_mixer(self._mix)
        self._io = io

    def open(self, io: AudioIO, block_ms: float) -> None:
        def on_block(out: np.ndarray, dac_s: float) -> None:
            out.fill(0.0)
            self._mix(out, self._clock.from_device_time(dac_s), 0)

        def on_lost() -> None:
            self.lost = True

        self._stream = io.backend.open_output(self.device_name, None, block_ms, on_block,
                                              on_lost)
        self.source = self._make_source(self._stream.sample_rate_hz)
        self._stream.start()

    def _make_source(self, rate_hz: int) -> PcmSource:
        """The tone, or the recording to play back (ValueError if it cannot be read)."""
        command = self._command
        if command.path is None:
            return ToneSource(rate_hz, command.frequency_hz, command.duration_ms)
        source = clip_source(command.path, rate_hz)
        self._deadline_s = self._clock.now() + source.duration_s + TONE_TIMEOUT_S
        return source

    def _mix(self, out: np.ndarray, dac_s: float, _rate_hz: int) -> None:
        if self.source is not None:
            self.source.add_to(out, dac_s)

    def outcome(self, now_s: float) -> tuple[bool, str] | None:
        """(ok, message) once the tone has left the speaker, failed, or timed out."""
        source = self.source
        if source is not None and source.end_dac_s is not None and now_s >= source.end_dac_s:
            return True, ""
        if self.lost:
            return False, "The device stopped while the tone played."
        if now_s >= self._deadline_s:
            return False, "No sound reached the device (it stopped asking for audio)."
        return None

    def close(self) -> None:
        if self._io is not None:
            self._io.remove_output_mixer(self._mix)
            self._io = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class _Recording:
    def __init__(self, command: ev.StartVoiceRecording) -> None:
        self.command = command
        self.recorder = VoiceRecorder(command.max_duration_s)

    def save(self) -> ev.VoiceRecordingFinished:
        command, recorder = self.command, self.recorder
        duration_s = recorder.duration_s
        if recorder.failed:
            return ev.VoiceRecordingFinished(None, duration_s, recorder.failed)
        if duration_s < command.min_duration_s:
            return ev.VoiceRecordingFinished(
                None, duration_s, f"Too short ({duration_s:.1f} s); record at least "
                f"{command.min_duration_s:.0f} s.")
        try:
            recorder.write_wav(command.path)
        except OSError as exc:
            return ev.VoiceRecordingFinished(None, duration_s, f"Could not save the recording "
                                             f"to {command.path}: {exc}. Check the folder.")
        log.info("voice prompt recorded: %s (%.1f s)", command.path, duration_s)
        return ev.VoiceRecordingFinished(command.path, duration_s)
