"""Audio input and output behind one interface; never imports Qt.

sounddevice is imported only by :mod:`app.audio.sounddevice_backend`, and only when a real
device is used.
"""

from app.audio.backend import (
    AudioBackend,
    AudioUnavailableError,
    DeviceInfo,
    DeviceUnavailableError,
    StreamHandle,
    find_device,
)

__all__ = ["AudioBackend", "AudioUnavailableError", "DeviceInfo", "DeviceUnavailableError",
           "StreamHandle", "find_device"]
