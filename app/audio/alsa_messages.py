"""ALSA's own messages go to the log, not to the terminal.

On Linux, PortAudio talks to ALSA, and alsa-lib prints its diagnostics straight to stderr ("ALSA
lib pcm.c:8740:(snd_pcm_recover) underrun occurred", a dozen "Unknown PCM" lines at start-up).
They are not errors a person can act on, and the app reports what matters itself (a lost device,
no microphone). alsa-lib lets a program replace that printer (``snd_lib_error_set_handler``);
this module installs one that writes to the ``alsa`` logger (the log file; DEBUG, so the
console stays quiet) before PortAudio is loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import platform
import re
import sys

log = logging.getLogger("alsa")

# void handler(const char *file, int line, const char *function, int err, const char *fmt, ...)
# The first variadic argument is read as a sixth register-sized argument: on x86-64 and aarch64
# Linux a variadic callee finds it where a sixth integer argument would be. It is used only when
# the format's first conversion is %s or an integer one (never a double, passed elsewhere).
_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                 ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_FIRST_ARG_MACHINES = ("x86_64", "aarch64", "amd64", "arm64")
_installed: list[object] = []  # the handler and the library, kept alive for the process


def format_message(fmt: str, first_arg: int | None) -> str:
    """``fmt`` with its first conversion filled in when it is safe to read (else as it is)."""
    match = re.search(r"%[-+ #0]*\d*(?:\.\d+)?(l{0,2}|z|h{0,2})([sdiuxc])", fmt)
    if match is None or first_arg is None:
        return fmt
    kind = match.group(2)
    if kind == "s":
        text = ctypes.string_at(first_arg).decode("utf-8", "replace") if first_arg else "(null)"
    elif kind == "c":
        text = chr(first_arg & 0xFF)
    else:
        value = first_arg & 0xFFFFFFFF if not match.group(1) else first_arg
        if kind in "di" and not match.group(1) and value >= 2**31:
            value -= 2**32
        text = format(value, "x") if kind == "x" else str(value)
    return fmt[:match.start()] + text + fmt[match.end():]


def _handle(file: bytes | None, line: int, function: bytes | None, err: int,
            fmt: bytes | None, first_arg: int | None) -> None:
    with contextlib.suppress(Exception):  # a C callback must never raise
        readable = platform.machine().lower() in _FIRST_ARG_MACHINES
        message = format_message((fmt or b"").decode("utf-8", "replace"),
                                 first_arg if readable else None)
        where = f"{(file or b'?').decode()}:{line}:({(function or b'?').decode()})"
        suffix = f" (error {err})" if err else ""
        log.debug("ALSA lib %s %s%s", where, message, suffix)


def route_alsa_messages() -> bool:
    """Send alsa-lib's messages to the log from now on; False where there is no alsa-lib
    (not Linux, or not installed). Safe to call more than once."""
    if _installed:
        return True
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("asound")
    if name is None:
        return False
    try:
        library = ctypes.CDLL(name)
        set_handler = library.snd_lib_error_set_handler
    except (OSError, AttributeError):
        return False
    handler = _HANDLER_TYPE(_handle)
    set_handler.argtypes = [_HANDLER_TYPE]
    set_handler.restype = ctypes.c_int
    if set_handler(handler) != 0:
        return False
    _installed.extend((library, handler))
    return True
