"""The audio device interface: device list, input and output streams, device-clock timestamps.

Two implementations: :mod:`app.audio.sounddevice_backend` (real devices through PortAudio) and
:mod:`app.audio.simulated` (a WAV file as the microphone, a recorded virtual speaker, one
virtual clock). Callbacks run on the device's thread: they must not block.

Timestamps are taken inside the callbacks, on the app's monotonic clock (seconds):
- input: ``adc_time_s`` is when the first sample of the block was captured;
- output: ``dac_time_s`` is when the first sample of the block will reach the speaker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

Direction = Literal["input", "output"]

# callback(block [frames, channels] float32, adc_time_s)
InputCallback = Callable[[np.ndarray, float], None]
# callback(out [frames] float32 mono, to fill in place, dac_time_s)
OutputCallback = Callable[[np.ndarray, float], None]
# called once, from any thread, when the device vanished or its stream died
LostCallback = Callable[[], None]


class AudioUnavailableError(RuntimeError):
    """No audio system at all (e.g. PortAudio missing); the message says what to do."""


class DeviceUnavailableError(RuntimeError):
    """A device could not be found or opened; the message names it and says what to do."""


@dataclass(frozen=True)
class DeviceInfo:
    """One physical device as the person sees it (duplicates per host API are hidden)."""

    name: str
    host_api: str
    max_input_channels: int
    max_output_channels: int
    default_sample_rate_hz: float
    is_default_input: bool = False
    is_default_output: bool = False
    index: int = -1  # backend-specific handle

    def supports(self, direction: Direction) -> bool:
        channels = self.max_input_channels if direction == "input" else self.max_output_channels
        return channels > 0


class StreamHandle(Protocol):
    """An open stream; created stopped. ``close`` is idempotent."""

    device_name: str
    sample_rate_hz: int
    channels: int
    latency_s: float  # reported device latency (input: capture → callback; output: callback → DAC)

    def start(self) -> None: ...

    def close(self) -> None: ...


class AudioBackend(Protocol):
    """Lists devices and opens separate input and output streams."""

    def list_devices(self) -> list[DeviceInfo]: ...

    def open_input(self, device_name: str | None, sample_rate_hz: int | None, block_ms: float,
                   callback: InputCallback, on_lost: LostCallback) -> StreamHandle:
        """Open a capture stream (``None`` = default device / its native rate)."""
        ...

    def open_output(self, device_name: str | None, sample_rate_hz: int | None,
                    block_ms: float, callback: OutputCallback,
                    on_lost: LostCallback) -> StreamHandle:
        """Open a playback stream (``None`` = default device / its native rate)."""
        ...


def find_device(devices: Sequence[DeviceInfo], name: str | None,
                direction: Direction) -> DeviceInfo:
    """The device a saved name refers to, or the default one when ``name`` is None.

    Matching is exact first, then case-insensitive, then by prefix (Windows MME truncates names
    to 31 characters, so a name saved from an old list can be a prefix of the full name).
    """
    candidates = [d for d in devices if d.supports(direction)]
    if not candidates:
        kind = "microphone" if direction == "input" else "speaker"
        raise DeviceUnavailableError(f"no {kind} found; connect one or check the system sound "
                                "settings")
    if name is None:
        for device in candidates:
            if device.is_default_input if direction == "input" else device.is_default_output:
                return device
        return candidates[0]
    lowered = name.strip().lower()
    for match in (lambda d: d.name == name, lambda d: d.name.lower() == lowered,
                  lambda d: d.name.lower().startswith(lowered)):
        found = [d for d in candidates if match(d)]
        if found:
            return found[0]
    raise DeviceUnavailableError(f"the {direction} device '{name}' is not connected")
