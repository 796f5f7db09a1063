"""Real audio devices through PortAudio (sounddevice). The ONLY module that imports sounddevice.

- sounddevice is imported lazily: without PortAudio, importing it raises OSError, and the rest
  of the app (GUI, headless demo, tests) must still run. :class:`AudioUnavailableError` says why.
- Separate input and output streams (full-duplex streams failed through ALSA → PulseAudio).
- One entry per physical device: when Windows WASAPI has devices, the MME, DirectSound and
  WDM-KS duplicates of the same hardware are hidden; without WASAPI, DirectSound's full names
  stand in for MME's (truncated to 31 characters) and WDM-KS's (and OSS is hidden when ALSA is
  present). WASAPI
  shared-mode streams get ``auto_convert`` so any sample rate opens.
- Timestamps come from PortAudio's stream times inside the callbacks, moved onto
  ``time.monotonic()``: ``adc = now - (currentTime - inputBufferAdcTime)`` and likewise for the
  DAC time. Hosts that report 0 fall back to "now minus/plus one block".
- A stream that finishes without being asked to (device unplugged, driver error) calls
  ``on_lost`` once; so does a stream whose callbacks stop arriving (see ``stalled_for_s``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from app.audio.backend import (
    AudioUnavailableError,
    DeviceInfo,
    DeviceUnavailableError,
    Direction,
    InputCallback,
    LostCallback,
    OutputCallback,
    find_device,
)

log = logging.getLogger(__name__)

WASAPI = "Windows WASAPI"
# Host APIs hidden when the preferred one in the same row has devices (same hardware twice).
DIRECTSOUND = "Windows DirectSound"
DUPLICATE_APIS = {WASAPI: ("MME", DIRECTSOUND, "Windows WDM-KS"),
                  DIRECTSOUND: ("MME", "Windows WDM-KS"), "ALSA": ("OSS",)}
API_PREFERENCE = (WASAPI, DIRECTSOUND, "Core Audio", "ALSA", "JACK Audio Connection Kit")
MAX_PLAUSIBLE_DELAY_S = 2.0


def load_sounddevice() -> Any:
    """Import sounddevice, turning a missing PortAudio into an actionable error. ALSA's own
    chatter ("underrun occurred") goes to the log from here on, not to the terminal."""
    from app.audio.alsa_messages import route_alsa_messages

    route_alsa_messages()
    try:
        import sounddevice
    except OSError as exc:
        raise AudioUnavailableError("PortAudio library not found; install it (Debian/Ubuntu: sudo "
                               "apt-get install libportaudio2)") from exc
    except ImportError as exc:
        raise AudioUnavailableError(
            f"sounddevice is not installed ({exc}); run make setup") from exc
    return sounddevice


def _api_rank(name: str) -> int:
    return API_PREFERENCE.index(name) if name in API_PREFERENCE else len(API_PREFERENCE)


def list_physical_devices(sd: Any) -> list[DeviceInfo]:
    """One DeviceInfo per physical device, preferred host API first, defaults marked."""
    apis = list(sd.query_hostapis())
    devices = list(sd.query_devices())
    api_names = [api["name"] for api in apis]
    used = {api_names[d["hostapi"]] for d in devices}
    hidden = {dup for api, dups in DUPLICATE_APIS.items() if api in used for dup in dups}
    visible = [(i, d) for i, d in enumerate(devices) if api_names[d["hostapi"]] not in hidden]
    visible.sort(key=lambda item: (_api_rank(api_names[item[1]["hostapi"]]), item[0]))
    primary = visible[0][1]["hostapi"] if visible else -1
    default_in, default_out = _defaults(sd, apis, primary)
    result: list[DeviceInfo] = []
    seen: set[str] = set()
    for index, dev in visible:
        if dev["name"] in seen:
            continue
        seen.add(dev["name"])
        result.append(DeviceInfo(
            name=dev["name"], host_api=api_names[dev["hostapi"]],
            max_input_channels=int(dev["max_input_channels"]),
            max_output_channels=int(dev["max_output_channels"]),
            default_sample_rate_hz=float(dev["default_samplerate"]),
            is_default_input=index == default_in, is_default_output=index == default_out,
            index=index))
    return result


def _defaults(sd: Any, apis: list[dict[str, Any]], primary: int) -> tuple[int, int]:
    """Default input/output indices: the primary host API's own defaults, else PortAudio's."""
    try:
        global_in, global_out = (int(x) for x in sd.default.device)
    except (TypeError, ValueError):
        global_in = global_out = -1
    if primary < 0:
        return global_in, global_out
    api = apis[primary]
    api_in = int(api.get("default_input_device", -1))
    api_out = int(api.get("default_output_device", -1))
    return (api_in if api_in >= 0 else global_in), (api_out if api_out >= 0 else global_out)


class _SdStream:
    """Wraps one sounddevice stream; maps PortAudio times onto time.monotonic()."""

    def __init__(self, sd: Any, device: DeviceInfo, direction: Direction, rate: int,
                 block_ms: float, callback: InputCallback | OutputCallback,
                 on_lost: LostCallback) -> None:
        block_frames = max(1, round(rate * block_ms / 1000))
        self.device_name = device.name
        self.sample_rate_hz = rate
        self._callback = callback
        self._on_lost = on_lost
        self._closing = False
        self._lost_reported = False
        self._mono = np.zeros(max(block_frames, 1) * 4, dtype=np.float32)
        self.last_callback_monotonic = time.monotonic()
        limit = device.max_input_channels if direction == "input" else device.max_output_channels
        self.channels = max(1, min(2, limit))
        extra = sd.WasapiSettings(auto_convert=True) if device.host_api == WASAPI else None
        kind = sd.InputStream if direction == "input" else sd.OutputStream
        handler = self._on_input if direction == "input" else self._on_output
        self._stream = kind(device=device.index, samplerate=rate, blocksize=block_frames,
                            channels=self.channels, dtype="float32", latency="low",
                            callback=handler, finished_callback=self._on_finished,
                            extra_settings=extra)
        self.latency_s = float(self._stream.latency)

    def start(self) -> None:
        self._stream.start()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        try:
            self._stream.abort()
            self._stream.close()
        except Exception as exc:  # a vanished device may refuse even to close
            log.debug("closing %s: %s", self.device_name, exc)

    def stalled_for_s(self) -> float:
        """Seconds since the last callback (a hung driver stops calling without finishing)."""
        return time.monotonic() - self.last_callback_monotonic

    def report_lost(self) -> None:
        if not self._closing and not self._lost_reported:
            self._lost_reported = True
            self._on_lost()

    def _on_finished(self) -> None:
        self.report_lost()

    def _on_input(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        now = time.monotonic()
        self.last_callback_monotonic = now
        delay = time_info.currentTime - time_info.inputBufferAdcTime
        ok = time_info.inputBufferAdcTime > 0 and 0 <= delay < MAX_PLAUSIBLE_DELAY_S
        adc = now - delay if ok else now - frames / self.sample_rate_hz
        try:
            self._callback(indata, adc)
        except Exception:  # an exception would stop the stream: log it and keep capturing
            log.exception("input callback failed")

    def _on_output(self, outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        now = time.monotonic()
        self.last_callback_monotonic = now
        ahead = time_info.outputBufferDacTime - time_info.currentTime
        ok = time_info.outputBufferDacTime > 0 and 0 <= ahead < MAX_PLAUSIBLE_DELAY_S
        dac = now + ahead if ok else now + self.latency_s
        if len(self._mono) < frames:
            self._mono = np.zeros(frames, dtype=np.float32)
        mono = self._mono[:frames]
        try:
            self._callback(mono, dac)
        except Exception:
            log.exception("output callback failed")
            mono.fill(0.0)
        outdata[:] = mono[:, None]


class SounddeviceBackend:
    """:class:`app.audio.backend.AudioBackend` on PortAudio. ``sd`` is injectable for tests."""

    def __init__(self, sd: Any = None) -> None:
        self._sd = sd

    @property
    def sd(self) -> Any:
        if self._sd is None:
            self._sd = load_sounddevice()
        return self._sd

    def list_devices(self) -> list[DeviceInfo]:
        return list_physical_devices(self.sd)

    def host_apis(self) -> list[str]:
        return [api["name"] for api in self.sd.query_hostapis()]

    def open_input(self, device_name: str | None, sample_rate_hz: int | None, block_ms: float,
                   callback: InputCallback, on_lost: LostCallback) -> _SdStream:
        return self._open("input", device_name, sample_rate_hz, block_ms, callback, on_lost)

    def open_output(self, device_name: str | None, sample_rate_hz: int | None,
                    block_ms: float, callback: OutputCallback,
                    on_lost: LostCallback) -> _SdStream:
        return self._open("output", device_name, sample_rate_hz, block_ms, callback, on_lost)

    def _open(self, direction: Direction, device_name: str | None, sample_rate_hz: int | None,
              block_ms: float, callback: InputCallback | OutputCallback,
              on_lost: LostCallback) -> _SdStream:
        sd = self.sd
        device = find_device(list_physical_devices(sd), device_name, direction)
        rate = int(sample_rate_hz or device.default_sample_rate_hz)
        try:
            return _SdStream(sd, device, direction, rate, block_ms, callback, on_lost)
        except Exception as exc:  # PortAudioError, ValueError: both mean "cannot open"
            raise DeviceUnavailableError(f"could not open {direction} device '{device.name}' at "
                                    f"{rate} Hz: {exc}") from exc
