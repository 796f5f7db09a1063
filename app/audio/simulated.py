"""Simulated audio devices on one virtual clock: a WAV file as the microphone, a virtual speaker.

Nothing here runs by itself: a driver (:mod:`app.conversation.simulation`) calls
:meth:`SimulatedBackend.deliver_input` and :meth:`SimulatedBackend.render_output` once per step
with the virtual time. The same inputs always give the same callbacks with the same timestamps,
and a run can go much faster than real time.

Timing model (seconds from the first microphone sample):
- the input callback for samples ``[a, b)`` is called at time ``b / rate`` with
  ``adc_time_s = a / rate`` (the block is complete only once its last sample was captured);
- the output callback called at step time ``t`` fills the block that reaches the speaker at
  ``dac_time_s = position / rate + output_latency_s``;
- every speaker writes into one recording of the room, placed by DAC time, so the output WAV
  lines up sample for sample with the input's timeline.

With ``echo`` (:class:`app.audio.simulated_echo.SimulatedEcho`) the speaker's sound comes back
into the microphone through a small simulated room, delayed and scaled.

Failures can be injected (:class:`DeviceFailure`): at the given time the device disappears from
the list, its open streams stop calling back and their ``on_lost`` is called, as with a USB
headset pulled out.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from app.audio.audio_file import read_audio_file
from app.audio.backend import (
    DeviceInfo,
    DeviceUnavailableError,
    Direction,
    InputCallback,
    LostCallback,
    OutputCallback,
    find_device,
)
from app.audio.simulated_echo import EchoPath, SimulatedEcho


def read_wav(path: Path | str) -> tuple[np.ndarray, int]:
    """Audio file → ([frames, channels] float32, sample_rate_hz); NaN/Inf samples become
    silence. Raises ValueError (AudioFileError) saying what is wrong with the file."""
    audio = read_audio_file(path)
    return audio.pcm, audio.sample_rate_hz


def write_wav(path: Path | str, pcm: np.ndarray, sample_rate_hz: int) -> None:
    """Write float32 samples as 16-bit PCM WAV (values are clipped to [-1, 1]). Inside the
    app's own folders (voice recordings, the demo) the file is private: 0600 in a 0700 folder;
    elsewhere (a path the person chose) it follows the umask."""
    from app.paths import is_app_path, write_private

    clipped = np.clip(pcm, -1.0, 1.0)
    if is_app_path(path):
        buffer = io.BytesIO()
        sf.write(buffer, clipped, sample_rate_hz, subtype="PCM_16", format="WAV")
        write_private(path, buffer.getvalue())
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), clipped, sample_rate_hz, subtype="PCM_16")


def _frame_at(t_s: float, rate_hz: int) -> int:
    """Frames complete by virtual time ``t_s`` (a hair of slack for float error)."""
    return int(np.floor(t_s * rate_hz + 1e-9))


class SimulatedMicrophone:
    """Recorded audio played into the input callback; silence after its end."""

    def __init__(self, pcm: np.ndarray, sample_rate_hz: int, repeat: int = 1) -> None:
        pcm = np.asarray(pcm, dtype=np.float32)
        self.pcm = pcm[:, None] if pcm.ndim == 1 else pcm  # [frames, channels]
        self.sample_rate_hz = int(sample_rate_hz)
        self.repeat = max(1, int(repeat))

    @classmethod
    def from_wav(cls, path: Path | str, repeat: int = 1) -> SimulatedMicrophone:
        pcm, rate = read_wav(path)
        return cls(pcm, rate, repeat)

    @property
    def channels(self) -> int:
        return int(self.pcm.shape[1])

    @property
    def duration_s(self) -> float:
        return len(self.pcm) * self.repeat / self.sample_rate_hz

    def read(self, start_frame: int, frames: int) -> np.ndarray:
        """[frames, channels] starting at ``start_frame``; zeros past the end."""
        out = np.zeros((frames, self.channels), dtype=np.float32)
        length = len(self.pcm)
        end = min(start_frame + frames, length * self.repeat)
        position = start_frame
        while position < end:
            offset = position % length
            count = min(end - position, length - offset)
            out[position - start_frame:position - start_frame + count] = \
                self.pcm[offset:offset + count]
            position += count
        return out


class RoomRecording:
    """What all speakers played, placed by DAC time on one mono timeline."""

    def __init__(self, sample_rate_hz: int, keep_audio: bool = True) -> None:
        self.sample_rate_hz = int(sample_rate_hz)
        self.keep_audio = keep_audio
        self._blocks: list[tuple[int, np.ndarray]] = []

    def write(self, block: np.ndarray, dac_time_s: float, rate_hz: int) -> None:
        if self.keep_audio and np.any(block):
            if rate_hz != self.sample_rate_hz:
                raise ValueError("all simulated speakers share the recording's sample rate")
            self._blocks.append((round(dac_time_s * rate_hz), block.copy()))

    def to_array(self, min_duration_s: float = 0.0) -> np.ndarray:
        end = max([pos + len(b) for pos, b in self._blocks], default=0)
        out = np.zeros(max(end, round(min_duration_s * self.sample_rate_hz)), np.float32)
        for position, block in self._blocks:
            out[position:position + len(block)] += block
        return out


@dataclass(frozen=True)
class DeviceFailure:
    """``device_name`` vanishes at ``at_s`` (virtual seconds)."""

    direction: Direction
    device_name: str
    at_s: float


@dataclass(eq=False)
class _SimStream:
    direction: Direction
    device_name: str
    sample_rate_hz: int
    channels: int
    latency_s: float
    callback: InputCallback | OutputCallback
    on_lost: LostCallback
    position: int  # next frame index on this stream's own timeline
    started: bool = False
    closed: bool = False
    dead: bool = False
    scratch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    def start(self) -> None:
        self.started = True

    def close(self) -> None:
        self.closed = True


class SimulatedBackend:
    """Implements :class:`app.audio.backend.AudioBackend` for a driver-stepped simulation."""

    def __init__(self, microphone: SimulatedMicrophone, output_rate_hz: int = 48000,
                 output_latency_ms: float = 10.0,
                 input_devices: tuple[str, ...] = ("Simulated microphone",),
                 output_devices: tuple[str, ...] = ("Simulated speaker",),
                 failures: tuple[DeviceFailure, ...] = (), record_output: bool = True,
                 echo: SimulatedEcho | None = None) -> None:
        self.microphone = microphone
        self.echo_path = EchoPath(echo, microphone.sample_rate_hz) if echo else None
        self.output_rate_hz = int(output_rate_hz)
        self.output_latency_s = output_latency_ms / 1000.0
        self.room = RoomRecording(self.output_rate_hz, keep_audio=record_output)
        self._inputs = list(input_devices)
        self._outputs = list(output_devices)
        self._failures = sorted(failures, key=lambda f: f.at_s)
        self._streams: list[_SimStream] = []
        self._now_s = 0.0

    # ---- AudioBackend ----------------------------------------------------------------------

    def list_devices(self) -> list[DeviceInfo]:
        mic = self.microphone
        devices = [DeviceInfo(name, "Simulated", mic.channels, 0, mic.sample_rate_hz,
                              is_default_input=i == 0, index=i)
                   for i, name in enumerate(self._inputs)]
        devices += [DeviceInfo(name, "Simulated", 0, 2, self.output_rate_hz,
                               is_default_output=i == 0, index=100 + i)
                    for i, name in enumerate(self._outputs)]
        return devices

    def open_input(self, device_name: str | None, sample_rate_hz: int | None, block_ms: float,
                   callback: InputCallback, on_lost: LostCallback) -> _SimStream:
        device = find_device(self.list_devices(), device_name, "input")
        rate = self.microphone.sample_rate_hz
        if sample_rate_hz not in (None, rate):
            raise DeviceUnavailableError(f"{device.name} records at {rate} Hz only")
        position = _frame_at(self._now_s, rate)
        return self._add(_SimStream("input", device.name, rate, self.microphone.channels, 0.0,
                                    callback, on_lost, position))

    def open_output(self, device_name: str | None, sample_rate_hz: int | None,
                    block_ms: float, callback: OutputCallback,
                    on_lost: LostCallback) -> _SimStream:
        device = find_device(self.list_devices(), device_name, "output")
        rate = self.output_rate_hz
        if sample_rate_hz not in (None, rate):
            raise DeviceUnavailableError(f"{device.name} plays at {rate} Hz only")
        position = _frame_at(self._now_s, rate)
        return self._add(_SimStream("output", device.name, rate, 1, self.output_latency_s,
                                    callback, on_lost, position))

    # ---- driver side -----------------------------------------------------------------------

    def deliver_input(self, now_s: float) -> None:
        """Apply due failures, then call input callbacks with everything captured by ``now_s``."""
        self._now_s = now_s
        self._apply_failures(now_s)
        for stream in self._live("input"):
            end = _frame_at(now_s, stream.sample_rate_hz)
            if end > stream.position:
                block = self.microphone.read(stream.position, end - stream.position)
                if self.echo_path is not None:
                    self.echo_path.add_to(block, stream.position)
                adc_s = stream.position / stream.sample_rate_hz
                stream.position = end
                stream.callback(block, adc_s)

    def render_output(self, now_s: float, block_s: float) -> None:
        """Call output callbacks for the block that starts playing one latency after ``now_s``."""
        self._now_s = now_s
        for stream in self._live("output"):
            # A stream never renders audio for a time already past (e.g. just opened).
            stream.position = max(stream.position, _frame_at(now_s, stream.sample_rate_hz))
            end = _frame_at(now_s + block_s, stream.sample_rate_hz)
            frames = end - stream.position
            if frames <= 0:
                continue
            if len(stream.scratch) < frames:
                stream.scratch = np.zeros(frames, np.float32)
            out = stream.scratch[:frames]
            dac_s = stream.position / stream.sample_rate_hz + stream.latency_s
            stream.position = end
            stream.callback(out, dac_s)
            self.room.write(out, dac_s, stream.sample_rate_hz)
            if self.echo_path is not None:
                self.echo_path.speaker(out, dac_s, stream.sample_rate_hz)

    def _add(self, stream: _SimStream) -> _SimStream:
        self._streams = [s for s in self._streams if not s.closed] + [stream]
        return stream

    def _live(self, direction: Direction) -> list[_SimStream]:
        return [s for s in self._streams
                if s.direction == direction and s.started and not s.closed and not s.dead]

    def _apply_failures(self, now_s: float) -> None:
        while self._failures and self._failures[0].at_s <= now_s:
            failure = self._failures.pop(0)
            names = self._inputs if failure.direction == "input" else self._outputs
            if failure.device_name in names:
                names.remove(failure.device_name)
            for stream in self._streams:
                if (stream.direction == failure.direction and not stream.closed
                        and stream.device_name == failure.device_name and not stream.dead):
                    stream.dead = True
                    stream.on_lost()
