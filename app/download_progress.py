"""Progress of a download or of a SHA-256 check: bytes, speed and ETA, reported through a
callback from any thread; a ``threading.Event`` cancels (raised from the next update).

No Qt and no huggingface_hub at import (the first-run screen imports :mod:`app.model_store`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tqdm.auto import tqdm

SPEED_WINDOW_S = 5.0  # speed is averaged over the last few seconds
Phase = Literal["download", "verify"]


class ModelStoreError(Exception):
    """A download or a check cannot go on; the message says why and what to do."""


class DownloadCancelledError(ModelStoreError):
    def __init__(self) -> None:
        super().__init__("Download cancelled. Finished files are kept; Retry fetches the rest.")


class CheckCancelledError(DownloadCancelledError):
    def __init__(self) -> None:
        ModelStoreError.__init__(self, "SHA-256 check cancelled. The files checked so far are "
                                 "recorded; checking again goes on with the rest.")


@dataclass(frozen=True)
class DownloadProgress:
    repo_id: str
    bytes_done: int
    bytes_total: int
    speed_bytes_per_s: float
    eta_s: float | None  # None until a speed is known
    attempt: int
    phase: Phase = "download"  # "verify": reading files back to check their SHA-256

    @property
    def fraction(self) -> float:
        return min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 0.0


ProgressCallback = Callable[[DownloadProgress], None]


class ProgressTracker:
    """Sums bytes from all worker threads; raises on cancel (thread-safe)."""

    def __init__(self, repo_id: str, bytes_total: int, on_progress: ProgressCallback,
                 cancel: threading.Event, clock: Callable[[], float] = time.monotonic,
                 min_interval_s: float = 0.1, phase: Phase = "download",
                 cancel_error: Callable[[], Exception] = DownloadCancelledError) -> None:
        self.repo_id = repo_id
        self.bytes_total = bytes_total
        self.bytes_done = 0
        self.attempt = 1
        self.phase: Phase = phase
        self._on_progress = on_progress
        self._cancel = cancel
        self._cancel_error = cancel_error
        self._clock = clock
        self._min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._samples: list[tuple[float, int]] = []  # (time, bytes_done) over SPEED_WINDOW_S
        self._last_report_s = -1e9

    def check_cancel(self) -> None:
        if self._cancel.is_set():
            raise self._cancel_error()

    def add_bytes(self, n_bytes: int) -> None:
        self.check_cancel()
        with self._lock:
            self.bytes_done += int(n_bytes)
            now = self._clock()
            self._samples.append((now, self.bytes_done))
            while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
                self._samples.pop(0)
            if now - self._last_report_s < self._min_interval_s:
                return
            self._last_report_s = now
            progress = self.snapshot_locked(now)
        self._on_progress(progress)

    def report(self) -> None:
        """Send the current state now (at start, on retries and at the end)."""
        with self._lock:
            progress = self.snapshot_locked(self._clock())
        self._on_progress(progress)

    def snapshot_locked(self, now: float) -> DownloadProgress:
        speed = 0.0
        if len(self._samples) >= 2:
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
            speed = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
        remaining = max(0, self.bytes_total - self.bytes_done)
        eta = remaining / speed if speed > 0 else (0.0 if remaining == 0 else None)
        return DownloadProgress(self.repo_id, self.bytes_done, self.bytes_total, speed, eta,
                                self.attempt, self.phase)


def progress_bar_class(tracker: ProgressTracker) -> type[tqdm]:
    """A tqdm subclass for ``hf_hub_download(tqdm_class=...)`` that feeds ``tracker``.

    Plain HTTP makes one bar per file (bytes written); a Xet download makes two, "…:
    reconstructing file" (written; counted here) and "…: downloading bytes" (network; not
    counted, or bytes would count twice). Every update and refresh checks cancel.
    """

    class TrackerBar(silent_bar_class()):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            tracker.check_cancel()  # a file queued behind a cancel is not started
            super().__init__(*args, **kwargs)
            desc = str(kwargs.get("desc", ""))
            self._counts_bytes = not desc.endswith("downloading bytes")

        def update(self, n: float | None = 1) -> bool | None:
            if self._counts_bytes and n:
                tracker.add_bytes(int(n))
            else:
                tracker.check_cancel()
            return super().update(n)

        def refresh(self, *args: Any, **kwargs: Any) -> None:
            tracker.check_cancel()
            super().refresh(*args, **kwargs)

    return TrackerBar


class _NullFile:
    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        return None


@functools.cache
def silent_bar_class() -> type[tqdm]:
    """A progress bar that prints nothing (the base of the download's bar).

    Made on first use: importing tqdm.auto pulls in asyncio, and the first-run screen imports
    :mod:`app.model_store` only for the repository names."""
    from tqdm.auto import tqdm

    class SilentBar(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            kwargs["file"] = _NullFile()
            super().__init__(*args, **kwargs)

        def display(self, *args: Any, **kwargs: Any) -> None:
            return None

    return SilentBar


def format_bytes(n_bytes: float) -> str:
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"
