"""Reading a sound file the way a person expects: clear errors and finite samples.

libsndfile's own messages mislead for the commonest mistakes (a 0-byte file or a folder give
"Format not recognised", a missing file "System error", random bytes named .mp3 "File does not
exist ... (possibly a pipe?)") and its MP3 decoder prints warnings straight to the terminal. So
the file is checked first (exists, is a file, can be read, is not empty), the decoder's terminal
output is kept off the terminal (logged at debug level), and a file that still cannot be
decoded is named as such. Samples that are NaN or infinite are replaced by silence and counted,
so a caller can warn once.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
FORMATS = "WAV, FLAC, OGG or MP3"


class AudioFileError(ValueError):
    """The file cannot be used as audio; the message names the file and says why."""


@dataclass(frozen=True)
class AudioFile:
    pcm: np.ndarray = field(repr=False)  # [frames, channels] float32, every sample finite
    sample_rate_hz: int
    non_finite_samples: int = 0  # NaN/Inf samples replaced by 0.0

    @property
    def peak_dbfs(self) -> float:
        """The highest absolute sample in dBFS (-inf for digital silence)."""
        peak = float(np.max(np.abs(self.pcm))) if self.pcm.size else 0.0
        return 20 * float(np.log10(peak)) if peak > 0 else float("-inf")

    def non_finite_warning(self, name: str) -> str:
        """One line for the warning; empty when every sample was a number."""
        if not self.non_finite_samples:
            return ""
        return (f"{name}: {self.non_finite_samples:,} samples are not numbers (NaN or "
                "infinite); they are played as silence")


@contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Keep what native code writes to file descriptor 2 off the terminal (logged at debug).

    Only for short calls on the command line's thread: descriptor 2 is the whole process's.
    """
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 (a windowed app): nothing to hide
        yield
        return
    if sys.stderr is not None:  # None in a build without a console
        sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            noise = sink.read().decode("utf-8", "replace").strip()
            if noise:
                log.debug("decoder output: %s", noise)


def file_problem(path: Path, what: str = "sound file") -> str | None:
    """Why ``path`` is not a file that can be read (None: it is one)."""
    if not str(path).strip():
        return "is an empty path"
    if not path.exists():
        return "does not exist"
    if path.is_dir():
        return f"is a folder, not a {what}"
    if not path.is_file():
        return "is not a regular file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    if path.stat().st_size == 0:
        return "is empty (0 bytes)"
    return None


def audio_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be used as audio (None: its header decodes and it holds samples);
    reads only the header."""
    problem = file_problem(path)
    if problem:
        return problem
    import soundfile as sf

    try:
        with quiet_native_stderr():
            info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, TypeError, OSError) as exc:
        log.debug("%s: libsndfile: %s", path, exc)
        return "is not a sound file this app can decode"
    if info.frames == 0 or info.samplerate <= 0:
        return "holds no audio (0 samples)"
    return None


def read_audio_file(path: Path | str) -> AudioFile:
    """The whole file as float32 [frames, channels]; raises AudioFileError with a clear reason."""
    path = Path(path)
    problem = audio_file_problem(path)
    if problem:
        raise AudioFileError(f"{path} {problem} (expected {FORMATS})")
    import soundfile as sf

    try:
        with quiet_native_stderr():
            pcm, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        log.debug("%s: libsndfile: %s", path, exc)
        raise AudioFileError(f"{path} could not be decoded to the end ({FORMATS} expected)") \
            from exc
    pcm, bad = finite_or_silence(pcm)
    if bad:  # the caller warns once, in its own words (AudioFile.non_finite_warning)
        log.debug("%s: %d NaN/infinite samples replaced by silence", path, bad)
    return AudioFile(pcm, int(rate), bad)


def finite_or_silence(pcm: np.ndarray) -> tuple[np.ndarray, int]:
    """``pcm`` with NaN/Inf samples set to 0.0 (a copy only when there were any), and how many."""
    finite = np.isfinite(pcm)
    if finite.all():
        return pcm, 0
    bad = int(finite.size - np.count_nonzero(finite))
    return np.where(finite, pcm, np.float32(0.0)).astype(np.float32, copy=False), bad
