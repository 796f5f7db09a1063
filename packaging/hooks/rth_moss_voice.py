"""PyInstaller runtime hook: runs in the bundle before the app's own code.

1. Hugging Face libraries start offline, so nothing reaches the network by accident; the model
   manager lifts this for its own downloads only (app.hub_offline.hub_online, used by
   app.model_store). A flag the person set themselves is kept.
2. Linux: sounddevice finds PortAudio with ctypes.util.find_library, which searches only the
   system (ldconfig), so on a machine without libportaudio2 the copy the bundle carries would
   never be found. Point that one lookup at the bundled copy.
"""

import os
import sys

from app.hub_offline import apply_offline_defaults

BUNDLED_PORTAUDIO = "libportaudio.so.2"  # where PyInstaller's sounddevice hook puts it

apply_offline_defaults()


def use_bundled_portaudio(bundle_root: str) -> None:
    import ctypes.util

    bundled = os.path.join(bundle_root, BUNDLED_PORTAUDIO)
    if not os.path.isfile(bundled):
        return
    system_find_library = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return bundled if name == "portaudio" else system_find_library(name)

    ctypes.util.find_library = find_library


if sys.platform.startswith("linux") and getattr(sys, "_MEIPASS", None):
    use_bundled_portaudio(sys._MEIPASS)
