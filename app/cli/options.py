"""Command-line values, checked before any work starts: one mechanism for every command.

Every option that takes a value has argparse ``choices`` or a ``type=`` from this module (for
settings, :mod:`app.cli.setting_options`, on the same ``Validator``): the
value is parsed and checked while the command line is read, so a bad value stops the program at
once with exit status 2 and one line naming the option, the value and what is allowed
(:class:`OneLineParser`). Checks that need the machine or several options together (a CUDA
device that must exist, a precision the device can run: :mod:`app.cli.machine_checks`) live in
each command's ``check(args)``; they also run before any work and raise :class:`InputError`.

tests/test_cli_validation.py walks every option of every command and fails for an option that
takes a value without being checked here.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and still exits with 2."""

    def error(self, message: str) -> NoReturn:
        one_line = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {one_line} (see {self.prog} --help)\n")


class InputError(ValueError):
    """A value (or a combination) that cannot run, found before any work started."""

    def __init__(self, option: str, value: object, allowed: str) -> None:
        self.option, self.value, self.allowed = option, value, allowed
        shown = "" if value is MISSING else f"{quoted(value)} is not allowed: "
        super().__init__(f"argument {option}: {shown}{allowed}")


MISSING = object()  # InputError's value for an option that is needed but was not given


def quoted(value: object) -> str:
    return repr(str(value)) if not isinstance(value, str) else repr(value)


class Validator:
    """An argparse ``type=``: text → value, or ArgumentTypeError saying what is allowed."""

    allowed = ""

    def __call__(self, text: str) -> Any:
        raise NotImplementedError

    def refuse(self, text: str, problem: str = "is not allowed") -> argparse.ArgumentTypeError:
        return argparse.ArgumentTypeError(f"{quoted(text)} {problem}: {self.allowed}")

    def bad_examples(self) -> list[str]:
        """Values this validator must refuse (the CLI validation test feeds each one)."""
        return [""]

    def __repr__(self) -> str:  # argparse names the type in some messages
        return type(self).__name__


class Number(Validator):
    """An int or a finite float in a range; ``low_open`` excludes ``low`` itself."""

    def __init__(self, kind: type[int] | type[float], low: float | None = None,
                 high: float | None = None, *, low_open: bool = False, unit: str = "") -> None:
        self.kind, self.low, self.high, self.low_open = kind, low, high, low_open
        noun = "a whole number" if kind is int else "a number"
        if low is not None and high is not None and not low_open:
            bounds = f"from {low:g} to {high:g}"
        else:
            parts = [f"greater than {low:g}" if low_open else f"at least {low:g}"] \
                if low is not None else []
            parts += [f"at most {high:g}"] if high is not None else []
            bounds = " and ".join(parts)
        self.allowed = f"{noun} {bounds}".strip() + (f" ({unit})" if unit else "")

    def __call__(self, text: str) -> int | float:
        try:
            value: int | float = int(text, 10) if self.kind is int else float(text)
        except ValueError:
            raise self.refuse(text, "is not a number" if self.kind is float
                              else "is not a whole number") from None
        if not math.isfinite(value):
            raise self.refuse(text, "is not a finite number")
        too_low = self.low is not None and (value <= self.low if self.low_open
                                            else value < self.low)
        if too_low or (self.high is not None and value > self.high):
            raise self.refuse(text, "is out of range")
        return value

    def bad_examples(self) -> list[str]:
        bad = ["abc", "nan", "inf", "-inf", ""]
        if self.low is not None:
            bad.append(f"{self.low:g}" if self.low_open else f"{self.low - 1:g}")
        if self.high is not None:
            bad.append(f"{self.high * 2 + 1:g}")
        if self.kind is int:
            bad.append("1.5")
        return bad


def count(low: int = 1, high: int = 1_000_000, unit: str = "") -> Number:
    return Number(int, low, high, unit=unit)


def seconds(low: float = 0.0, high: float = 3600.0, *, low_open: bool = True) -> Number:
    return Number(float, low, high, low_open=low_open, unit="seconds")


def milliseconds(low: float = 0.0, high: float = 60_000.0, *, low_open: bool = False) -> Number:
    return Number(float, low, high, low_open=low_open, unit="ms")


THREADS = count(0, 1024, unit="CPU threads, 0 = torch's default")


def _first_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


class OutputFile(Validator):
    """A file this command will write: not a folder, with an allowed name ending, in a folder
    that exists and can be written or can be created. Nothing is created while checking."""

    def __init__(self, suffixes: Sequence[str] = (), what: str = "file") -> None:
        self.suffixes = tuple(s.lower() for s in suffixes)
        ending = f" ending in {' or '.join(self.suffixes)}" if self.suffixes else ""
        self.allowed = f"the name of a {what} to write{ending}"

    def __call__(self, text: str) -> Path:
        problem = output_path_problem(Path(text), text, self.suffixes)
        if problem:
            raise self.refuse(text, problem)
        return Path(text)

    def bad_examples(self) -> list[str]:
        bad = ["", os.sep, str(Path(__file__)) + os.sep + "x.txt"]  # a folder; under a file
        if self.suffixes:
            bad.append("out.unknown-ending")
        return bad


def output_path_problem(path: Path, text: str = "", suffixes: Sequence[str] = ()) -> str | None:
    """Why ``path`` cannot be written (None: it can)."""
    if not text.strip() and not str(path).strip():
        return "is empty"
    if path.is_dir() or (text or str(path)).endswith(("/", os.sep)):
        return "is a folder, not a file"
    if suffixes and path.suffix.lower() not in suffixes:
        return "has the wrong file name ending"
    if path.exists() and not os.access(path, os.W_OK):
        return "cannot be written (permission denied)"
    existing = _first_existing(path.parent if str(path.parent) else Path("."))
    if not existing.is_dir():
        return f"cannot be written ({existing} is a file, not a folder)"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be written (the folder {existing} is not writable)"
    return None


class OutputFolder(Validator):
    """A folder this command will write into: an existing folder that can be written, or one
    that can be created (not a file). Nothing is created while checking."""

    def __init__(self, what: str = "folder") -> None:
        self.allowed = f"a {what} to write into (it is created if missing)"

    def __call__(self, text: str) -> Path:
        path = Path(text)
        if not text.strip():
            raise self.refuse(text, "is empty")
        if path.exists() and not path.is_dir():
            raise self.refuse(text, "is a file, not a folder")
        existing = _first_existing(path)
        if not existing.is_dir():
            raise self.refuse(text, f"cannot be created ({existing} is a file)")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise self.refuse(text, f"cannot be written (the folder {existing} is not writable)")
        return path

    def bad_examples(self) -> list[str]:
        return ["", str(Path(__file__)), str(Path(__file__)) + os.sep + "sub"]


class InputFile(Validator):
    """An existing, readable, non-empty file."""

    def __init__(self, what: str = "file") -> None:
        self.what = what
        self.allowed = f"expected {what}"

    def __call__(self, text: str) -> Path:
        problem = input_file_problem(Path(text))
        if problem:
            raise self.refuse(text, problem)
        return Path(text)

    def bad_examples(self) -> list[str]:
        return ["", "/nonexistent/file.wav", os.sep]


def input_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file (None: it can)."""
    from app.audio.audio_file import file_problem

    return file_problem(path, "file")


class AudioInput(InputFile):
    """An existing audio file whose header can be decoded (the samples are read later)."""

    def __init__(self, what: str = "") -> None:
        from app.audio.audio_file import FORMATS

        super().__init__(what or f"a sound file ({FORMATS})")

    def __call__(self, text: str) -> Path:
        from app.audio.audio_file import audio_file_problem

        problem = audio_file_problem(Path(text))
        if problem:
            raise self.refuse(text, problem)
        return Path(text)


class InputFolder(Validator):
    """An existing folder."""

    def __init__(self, what: str = "folder") -> None:
        self.allowed = f"expected an existing {what}"

    def __call__(self, text: str) -> Path:
        path = Path(text)
        if not text.strip() or not path.exists():
            raise self.refuse(text, "does not exist")
        if not path.is_dir():
            raise self.refuse(text, "is not a folder")
        return path

    def bad_examples(self) -> list[str]:
        return ["", "/nonexistent/folder", str(Path(__file__))]


class ScreenshotState(Validator):
    """A window state ``--screenshot`` can show (app.ui.screenshot_states.STATES, read only when
    the option is given: that module imports Qt)."""

    allowed = "a window state: see --help"

    def __call__(self, text: str) -> str:
        from app.ui.screenshot_states import STATES

        if text not in STATES:
            self.allowed = f"one of {', '.join(STATES)}"
            raise self.refuse(text)
        return text

    def bad_examples(self) -> list[str]:
        return ["", "nonsense", "settings:nope"]


class Name(Validator):
    """A name the command looks up itself (in ``check``): one line of text, not empty."""

    allowed = "a name on one line, at most 200 characters"

    def __call__(self, text: str) -> str:
        if not text.strip() or len(text) > 200 or not text.isprintable():
            raise self.refuse(text)
        return text

    def bad_examples(self) -> list[str]:
        return ["", "   ", "a\nb", "x" * 201]


class DeviceName(Validator):
    """``cpu``, ``cuda`` or ``cuda:N`` (whether it exists here is checked by check_device)."""

    allowed = "cpu, cuda or cuda:N"

    def __call__(self, text: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:\d{1,3})?", text):
            raise self.refuse(text)
        return text

    def bad_examples(self) -> list[str]:
        return ["", "gpu", "cuda:", "cuda:-1", "CPU0"]


class PushToTalk(Validator):
    """``START-END[,START-END...]`` in seconds: 0 ≤ start < end, presses in order."""

    allowed = "START-END[,START-END...] in seconds, each press after the last, e.g. 0.2-2.5,4-6"

    def __call__(self, text: str) -> tuple[tuple[float, float], ...]:
        pairs: list[tuple[float, float]] = []
        for part in text.split(","):
            start_text, sep, end_text = part.strip().partition("-")
            try:
                start, end = float(start_text), float(end_text)
            except ValueError:
                raise self.refuse(text) from None
            if not sep or not (math.isfinite(start) and math.isfinite(end)):
                raise self.refuse(text)
            if not 0 <= start < end or (pairs and start < pairs[-1][1]):
                raise self.refuse(text)
            pairs.append((start, end))
        return tuple(pairs)

    def bad_examples(self) -> list[str]:
        return ["", "3", "5-2", "1-1", "a-b", "0-nan", "0-2,1-3", "0-1,"]


class EchoRoom(Validator):
    """``DELAY_MS:GAIN_DB`` for the simulated room."""

    allowed = "DELAY_MS:GAIN_DB with a delay from 0 to 2000 ms and a gain from -60 to 20 dB, " \
              "e.g. 60:-6"

    def __call__(self, text: str) -> Any:
        from app.audio.simulated_echo import SimulatedEcho

        delay_text, sep, gain_text = text.partition(":")
        try:
            delay, gain = float(delay_text), float(gain_text)
        except ValueError:
            raise self.refuse(text) from None
        if not sep or not (0 <= delay <= 2000 and -60 <= gain <= 20):  # NaN fails both
            raise self.refuse(text)
        return SimulatedEcho(delay, gain)

    def bad_examples(self) -> list[str]:
        return ["", "60", "x:y", "-5:-6", "60:nan", "inf:0", "60:-100"]
