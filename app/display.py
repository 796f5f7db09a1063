"""Whether a GUI can be shown here, and if not, why (checked before Qt is loaded).

Qt aborts the whole process when its platform plugin cannot load, so on Linux we look for a
display and for the xcb libraries first and fall back to the headless demo with a clear reason.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from dataclasses import asdict, dataclass

# Libraries Qt's xcb plugin needs that minimal Linux installs often lack (dependencies.md §3).
_XCB_LIBRARIES = {
    "xcb-icccm": "libxcb-icccm4",
    "xcb-keysyms": "libxcb-keysyms1",
    "xcb-cursor": "libxcb-cursor0",
    "xkbcommon-x11": "libxkbcommon-x11-0",
}


@dataclass(frozen=True)
class DisplayStatus:
    available: bool
    reason: str
    platform: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def display_status() -> DisplayStatus:
    """Can a window be shown? ``QT_QPA_PLATFORM=offscreen`` counts as no display."""
    platform = sys.platform
    qpa = os.environ.get("QT_QPA_PLATFORM", "").strip().lower()
    if qpa.startswith(("offscreen", "minimal")):
        return DisplayStatus(False, f"QT_QPA_PLATFORM={qpa} (no visible window)", platform)
    if platform in ("win32", "darwin"):
        return DisplayStatus(True, "desktop session", platform)
    if os.environ.get("WAYLAND_DISPLAY"):
        return DisplayStatus(True, f"Wayland display {os.environ['WAYLAND_DISPLAY']}", platform)
    display = os.environ.get("DISPLAY")
    if not display:
        return DisplayStatus(False, "DISPLAY and WAYLAND_DISPLAY are not set", platform)
    missing = [pkg for lib, pkg in _XCB_LIBRARIES.items() if ctypes.util.find_library(lib) is None]
    if missing:
        return DisplayStatus(
            False, f"X display {display} is set but Qt's xcb plugin needs: {' '.join(missing)} "
            f"(sudo apt-get install {' '.join(missing)})", platform)
    return DisplayStatus(True, f"X display {display}", platform)
