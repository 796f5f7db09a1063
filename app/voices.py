"""The official example voices of the MOSS-Speech repository, downloaded on request (no Qt).

MOSS-Speech speaks in the voice of a recording it is given (the voice prompt). The app ships no
voice of its own; its guided set-up offers to record your own, to choose a file, or to fetch the
two example voices that OpenMOSS publish with the model's code (Apache-2.0): the files the
official demo uses by default. They are fetched from GitHub at a pinned commit and checked
against their SHA-256 before they are kept, so a changed or damaged file is never used.

``MOSS_VOICE_VOICES_URL`` replaces the GitHub address (a mirror, or a test server).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.paths import voices_dir

log = logging.getLogger(__name__)

VOICES_URL_ENV = "MOSS_VOICE_VOICES_URL"
GITHUB_RAW = "https://raw.githubusercontent.com"
REPOSITORY = "OpenMOSS/MOSS-Speech"
COMMIT = "6b86ef6f21aecfec272a69b1563ca33f76d0339d"  # "Update README and assets", 2025-10-02
CHUNK_BYTES = 64 * 1024
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ExampleVoice:
    key: str
    title: str
    repo_path: str  # path inside the repository
    size_bytes: int
    sha256: str

    @property
    def file_name(self) -> str:
        return f"moss-speech-example-{self.key}.wav"


EXAMPLE_VOICES = (
    ExampleVoice("en", "English example voice (OpenMOSS, 36 s)", "assets/prompt_en.wav",
                 3_193_986, "5c1541599a64decdbb16962034e213ad89ca32be096404ee6d523b7752ee0790"),
    ExampleVoice("cn", "Chinese example voice (OpenMOSS, 21 s; the demo's default)",
                 "assets/prompt_cn.wav", 1_880_142,
                 "64b057f7ca8ba16744cf8754b08fb8a15a29d0db32fe20a547ae066fd671ad1e"),
)
LICENCE_NOTE = ("From github.com/OpenMOSS/MOSS-Speech (Apache-2.0), commit "
                f"{COMMIT[:7]}: the voices the official demo uses.")


class VoiceDownloadError(Exception):
    """The voice could not be fetched or is not the published file; the message says what to
    do."""


class VoiceDownloadCancelledError(VoiceDownloadError):
    def __init__(self) -> None:
        super().__init__("Download cancelled.")


@dataclass(frozen=True)
class VoiceDownloadProgress:
    key: str
    bytes_done: int
    bytes_total: int

    @property
    def fraction(self) -> float:
        return min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 0.0


def voice_url(voice: ExampleVoice, base_url: str | None = None) -> str:
    base = (base_url or os.environ.get(VOICES_URL_ENV, "").strip() or GITHUB_RAW).rstrip("/")
    return f"{base}/{REPOSITORY}/{COMMIT}/{voice.repo_path}"


def installed_path(voice: ExampleVoice, folder: Path | None = None) -> Path:
    return (folder or voices_dir()) / voice.file_name


def is_installed(voice: ExampleVoice, folder: Path | None = None) -> bool:
    """Present with the published size (its hash was checked when it was saved)."""
    path = installed_path(voice, folder)
    return path.is_file() and path.stat().st_size == voice.size_bytes


def download_voice(voice: ExampleVoice, on_progress: Callable[[VoiceDownloadProgress], None],
                   cancel: threading.Event, folder: Path | None = None,
                   base_url: str | None = None) -> Path:
    """Fetch one example voice into ``folder`` (default: the voices folder) and return its path.

    Written to a ``.part`` file first and renamed only after its size and SHA-256 match the
    published file. Raises VoiceDownloadCancelledError or VoiceDownloadError (with what to do)."""
    target = installed_path(voice, folder)
    if is_installed(voice, folder):
        on_progress(VoiceDownloadProgress(voice.key, voice.size_bytes, voice.size_bytes))
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(".wav.part")
    url = voice_url(voice, base_url)
    if not url.startswith(("https://", "http://")):
        raise VoiceDownloadError(f"{VOICES_URL_ENV} must be an http(s) address, not {url}.")
    try:
        done, digest = _fetch(url, part, voice, on_progress, cancel)
    except VoiceDownloadError:
        part.unlink(missing_ok=True)
        raise
    if done != voice.size_bytes or digest != voice.sha256:
        part.unlink(missing_ok=True)
        log.warning("example voice %s: got %d bytes with sha256 %s, expected %d and %s",
                    voice.key, done, digest, voice.size_bytes, voice.sha256)
        raise VoiceDownloadError("The downloaded voice is not the published file (its checksum "
                                 "differs), so it was not kept. Try again later, or choose a "
                                 "file or record your own voice.")
    part.replace(target)
    log.info("example voice %s saved to %s", voice.key, target)
    return target


def _fetch(url: str, part: Path, voice: ExampleVoice,
           on_progress: Callable[[VoiceDownloadProgress], None],
           cancel: threading.Event) -> tuple[int, str]:
    """Stream ``url`` into ``part``: (bytes written, their SHA-256). Raises VoiceDownloadError
    (cancelled, not found, unreachable, disk) with what to do."""
    digest = hashlib.sha256()
    done = 0
    try:
        with (urllib.request.urlopen(url, timeout=TIMEOUT_S) as response,  # nosec B310: http(s)
              part.open("wb") as out):
            while chunk := response.read(CHUNK_BYTES):
                if cancel.is_set():
                    raise VoiceDownloadCancelledError()
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                on_progress(VoiceDownloadProgress(voice.key, done, voice.size_bytes))
    except urllib.error.HTTPError as exc:
        raise VoiceDownloadError(f"The example voice is not at {url} (HTTP {exc.code}). Choose "
                                 "a file or record your own voice instead.") from exc
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise VoiceDownloadError(f"Cannot reach {url.split('/')[2]} ({reason}). Check the "
                                 "internet connection and try again, or choose a file or "
                                 "record your own voice.") from exc
    except OSError as exc:
        raise VoiceDownloadError(f"Could not save the voice in {part.parent}: {exc}.") from exc
    return done, digest.hexdigest()
