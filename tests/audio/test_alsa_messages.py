"""alsa-lib's diagnostics ("underrun occurred", "Unknown PCM") go to the log, not the terminal."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

import pytest

from app.audio.alsa_messages import format_message

SCRIPT = """
import ctypes, logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(name)s: %(message)s")
if sys.argv[1] == "routed":
    from app.audio.sounddevice_backend import load_sounddevice
    try:
        load_sounddevice()  # installs the handler before PortAudio loads (if PortAudio is here)
    except Exception:
        from app.audio.alsa_messages import route_alsa_messages
        route_alsa_messages()
library = ctypes.CDLL(ctypes.util.find_library("asound"))
library.snd_pcm_open(ctypes.byref(ctypes.c_void_p()), b"no_such_pcm_here", 0, 0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("asound")
                    is None, reason="alsa-lib is Linux's")
def test_alsa_messages_go_to_the_log_not_to_stderr() -> None:
    def run(mode: str) -> subprocess.CompletedProcess[str]:
        code = "import ctypes.util\n" + SCRIPT
        return subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                              text=True, timeout=60, check=True)

    plain = run("plain")
    assert "Unknown PCM no_such_pcm_here" in plain.stderr  # alsa-lib's own printer
    routed = run("routed")
    assert "ALSA lib" not in routed.stderr
    assert "alsa: ALSA lib pcm.c:" in routed.stdout
    assert "Unknown PCM no_such_pcm_here" in routed.stdout  # the %s filled in


def test_the_first_conversion_is_filled_in_only_when_known() -> None:
    text = ctypes.create_string_buffer(b"underrun")
    address = ctypes.addressof(text)
    assert format_message("%s occurred", address) == "underrun occurred"
    assert format_message("card %d not found", 3) == "card 3 not found"
    assert format_message("value %d", 2**32 - 1) == "value -1"
    assert format_message("%s occurred", None) == "%s occurred"
    assert format_message("no conversion", 5) == "no conversion"
    assert format_message("%f", 5) == "%f"  # a double is not where the pointer is: left alone
