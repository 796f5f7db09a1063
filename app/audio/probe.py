"""A quick look at the audio devices for the doctor, through the same device listing the app
uses (:func:`app.audio.sounddevice_backend.list_physical_devices`), so both agree.

A machine without PortAudio or without a sound card is a normal state: it is reported, not
raised.
"""

from __future__ import annotations

from typing import Any

from app.audio.backend import AudioUnavailableError


def probe_audio(backend: Any = None) -> dict[str, Any]:
    """Host APIs and devices, or ``available: False`` with the reason and what to do."""
    from app.audio.sounddevice_backend import SounddeviceBackend

    backend = backend or SounddeviceBackend()
    empty: dict[str, Any] = {"available": False, "inputs": [], "outputs": [], "host_apis": []}
    try:
        devices = backend.list_devices()
        host_apis = backend.host_apis()
    except AudioUnavailableError as exc:
        return {**empty, "reason": str(exc)}
    except Exception as exc:  # PortAudio reports driver trouble as assorted errors
        return {**empty, "reason": f"PortAudio could not list devices: {exc}"}

    def entry(device: Any, default: bool) -> dict[str, Any]:
        return {"name": device.name, "host_api": device.host_api,
                "default_sample_rate_hz": device.default_sample_rate_hz, "default": default}

    inputs = [entry(d, d.is_default_input) for d in devices if d.max_input_channels > 0]
    outputs = [entry(d, d.is_default_output) for d in devices if d.max_output_channels > 0]
    reason = "" if inputs and outputs else (
        "no microphone" if outputs else "no speaker" if inputs else
        "no audio devices found (no sound card?); the headless demo still works")
    return {"available": bool(inputs and outputs), "reason": reason, "host_apis": host_apis,
            "inputs": inputs, "outputs": outputs}
