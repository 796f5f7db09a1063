"""A quick look at the audio devices for the doctor, importing sounddevice lazily.

A machine without PortAudio or without a sound card is a normal state: it is reported, not
raised.
"""

from __future__ import annotations

from typing import Any


def probe_audio() -> dict[str, Any]:
    """Host APIs and devices, or ``available: False`` with the reason and what to do."""
    try:
        import sounddevice as sd
    except OSError:
        return {"available": False, "inputs": [], "outputs": [],
                "reason": "PortAudio library not found; install it (Debian/Ubuntu: "
                          "sudo apt-get install libportaudio2)"}
    except ImportError as exc:
        return {"available": False, "inputs": [], "outputs": [],
                "reason": f"sounddevice is not installed ({exc}); run make setup"}
    try:
        devices = list(sd.query_devices())
        host_apis = [api["name"] for api in sd.query_hostapis()]
    except Exception as exc:  # PortAudio reports driver trouble as assorted errors
        return {"available": False, "inputs": [], "outputs": [],
                "reason": f"PortAudio could not list devices: {exc}"}

    def entry(dev: dict[str, Any]) -> dict[str, Any]:
        return {"name": dev["name"], "host_api": host_apis[dev["hostapi"]],
                "default_sample_rate_hz": dev["default_samplerate"]}

    inputs = [entry(d) for d in devices if d["max_input_channels"] > 0]
    outputs = [entry(d) for d in devices if d["max_output_channels"] > 0]
    reason = "" if inputs and outputs else (
        "no microphone" if outputs else "no speaker" if inputs else
        "no audio devices found (no sound card?); the headless demo still works")
    return {"available": bool(inputs and outputs), "reason": reason, "host_apis": host_apis,
            "inputs": inputs, "outputs": outputs}
