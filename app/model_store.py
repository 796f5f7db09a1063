"""Download and verify the MOSS-Speech model and codec folders (no Qt).

``download()`` runs ``huggingface_hub.snapshot_download`` into a folder under
:func:`app.paths.models_dir` and reports bytes, speed and ETA through a callback; a
``threading.Event`` cancels it (raised inside the progress bar's ``update``, the only hook
snapshot_download offers). Before anything is fetched, a dry run sizes what is missing and the
free disk space is checked. Finished files survive a cancel or a failure, so Retry only fetches
the rest (huggingface_hub does not resume a half file across attempts; dependencies.md §6).
Verification is :mod:`app.engine.folders`. The installed app runs with Hugging Face's offline
flags set (:mod:`app.hub_offline`); each Hub call here lifts them for itself only.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from app.engine.folders import FolderCheck, verify_codec_folder, verify_model_folder
from app.hub_offline import hub_online
from app.paths import models_dir, private_dir

if TYPE_CHECKING:
    from tqdm.auto import tqdm

log = logging.getLogger(__name__)

FolderKind = Literal["model", "codec"]
DISK_RESERVE_BYTES = 1 << 30  # keep 1 GiB free after the download
SPEED_WINDOW_S = 5.0  # speed is averaged over the last few seconds


@dataclass(frozen=True)
class RepoSpec:
    kind: FolderKind
    repo_id: str
    folder_name: str
    title: str


REPOS: dict[FolderKind, RepoSpec] = {
    "model": RepoSpec("model", "OpenMOSS-Team/MOSS-Speech", "MOSS-Speech", "MOSS-Speech model"),
    "codec": RepoSpec("codec", "OpenMOSS-Team/MOSS-Speech-Codec", "MOSS-Speech-Codec",
                      "MOSS-Speech codec"),
}


class ModelStoreError(Exception):
    """A download cannot go on; the message says why and what to do."""


class DownloadCancelledError(ModelStoreError):
    def __init__(self) -> None:
        super().__init__("Download cancelled. Finished files are kept; Retry fetches the rest.")


class NotEnoughDiskSpaceError(ModelStoreError):
    pass


def default_destination(kind: FolderKind) -> Path:
    return models_dir() / REPOS[kind].folder_name


def verify(kind: FolderKind, folder: Path | str) -> FolderCheck:
    """File list, sizes, config keys and shapes (see app.engine.folders)."""
    return verify_model_folder(folder) if kind == "model" else verify_codec_folder(folder)


def hub_endpoint() -> str | None:
    """``HF_ENDPOINT`` read at call time (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT", "").strip() or None


# ---- planning: what is missing, and is there room for it -----------------------------------


@dataclass(frozen=True)
class PlannedFile:
    name: str
    size_bytes: int
    will_download: bool


@dataclass(frozen=True)
class DownloadPlan:
    repo_id: str
    destination: Path
    files: tuple[PlannedFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files if f.will_download)

    @property
    def missing_files(self) -> int:
        return sum(1 for f in self.files if f.will_download)


def plan_download(spec: RepoSpec, destination: Path, endpoint: str | None = None) -> DownloadPlan:
    """Ask the Hub (dry run) which files exist, how big they are and which are missing here."""
    from huggingface_hub import snapshot_download

    try:
        with hub_online():
            infos = snapshot_download(spec.repo_id, local_dir=destination, dry_run=True,
                                      endpoint=endpoint or hub_endpoint(),
                                      tqdm_class=silent_bar_class())
    except Exception as exc:
        raise ModelStoreError(describe_hub_error(spec, exc)) from exc
    files = tuple(PlannedFile(i.filename, int(i.file_size or 0), bool(i.will_download))
                  for i in infos)
    return DownloadPlan(spec.repo_id, Path(destination), files)


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (its nearest existing parent)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def disk_space_problem(plan: DownloadPlan, free_bytes: int,
                       reserve_bytes: int = DISK_RESERVE_BYTES) -> str | None:
    """None when the missing files fit with ``reserve_bytes`` to spare; else what to do."""
    needed = plan.missing_bytes + reserve_bytes
    if needed <= free_bytes:
        return None
    return (f"Not enough disk space for {plan.repo_id}: {format_bytes(plan.missing_bytes)} still "
            f"to download (plus {format_bytes(reserve_bytes)} to spare), but only "
            f"{format_bytes(free_bytes)} is free at {plan.destination}. Free some space or "
            "choose another folder.")


# ---- progress -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownloadProgress:
    repo_id: str
    bytes_done: int
    bytes_total: int
    speed_bytes_per_s: float
    eta_s: float | None  # None until a speed is known
    attempt: int

    @property
    def fraction(self) -> float:
        return min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 0.0


ProgressCallback = Callable[[DownloadProgress], None]


class ProgressTracker:
    """Sums bytes written to disk from all download threads; raises on cancel (thread-safe)."""

    def __init__(self, repo_id: str, bytes_total: int, on_progress: ProgressCallback,
                 cancel: threading.Event, clock: Callable[[], float] = time.monotonic,
                 min_interval_s: float = 0.1) -> None:
        self.repo_id = repo_id
        self.bytes_total = bytes_total
        self.bytes_done = 0
        self.attempt = 1
        self._on_progress = on_progress
        self._cancel = cancel
        self._clock = clock
        self._min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._samples: list[tuple[float, int]] = []  # (time, bytes_done) over SPEED_WINDOW_S
        self._last_report_s = -1e9

    def check_cancel(self) -> None:
        if self._cancel.is_set():
            raise DownloadCancelledError()

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
                                self.attempt)


def progress_bar_class(tracker: ProgressTracker) -> type[tqdm]:
    """A tqdm subclass for ``snapshot_download(tqdm_class=...)`` that feeds ``tracker``.

    snapshot_download makes three bars: "Downloading bytes" (network), "Reconstructing ..."
    (bytes written to disk; counted here) and "Fetching N files". Every update and refresh
    checks cancel.
    """

    class TrackerBar(silent_bar_class()):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._counts_bytes = str(kwargs.get("desc", "")).startswith("Reconstructing")

        def update(self, n: float | None = 1) -> bool | None:
            if self._counts_bytes and n:
                tracker.add_bytes(int(n))
            else:
                tracker.check_cancel()
            return super().update(n)

        def refresh(self, *args: Any, **kwargs: Any) -> None:
            # Called as each file's download starts (before its body is read): cancel there too,
            # so files queued behind a cancelled one are not fetched.
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
    """A progress bar that prints nothing (dry runs; the base of the download's bar).

    Made on first use: importing tqdm.auto pulls in asyncio, and the first-run screen imports
    this module only for the repository names."""
    from tqdm.auto import tqdm

    class SilentBar(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            kwargs["file"] = _NullFile()
            super().__init__(*args, **kwargs)

        def display(self, *args: Any, **kwargs: Any) -> None:
            return None

    return SilentBar


# ---- download -------------------------------------------------------------------------------


def download(kind: FolderKind, destination: Path | None, on_progress: ProgressCallback,
             cancel: threading.Event, *, endpoint: str | None = None, retries: int = 3,
             retry_wait_s: float = 3.0, max_workers: int = 4,
             clock: Callable[[], float] = time.monotonic,
             free_bytes: Callable[[Path], int] = free_disk_bytes) -> FolderCheck:
    """Download one repository into ``destination`` and verify it.

    Raises :class:`DownloadCancelledError`, :class:`NotEnoughDiskSpaceError` or
    :class:`ModelStoreError` (with what to do). Transient network failures are retried
    ``retries`` times, waiting ``retry_wait_s`` (interrupted by cancel); completed files are
    never fetched twice.
    """
    spec = REPOS[kind]
    destination = Path(destination) if destination else default_destination(kind)
    endpoint = endpoint or hub_endpoint()
    plan = plan_download(spec, destination, endpoint)
    problem = disk_space_problem(plan, free_bytes(destination))
    if problem:
        raise NotEnoughDiskSpaceError(problem)
    first_missing = plan.missing_bytes
    tracker = ProgressTracker(spec.repo_id, first_missing, on_progress, cancel, clock)
    tracker.report()
    for attempt in range(1, retries + 2):
        tracker.attempt = attempt
        # Files finished by earlier attempts count as done; a half file starts again.
        tracker.bytes_done = first_missing - plan.missing_bytes
        try:
            _snapshot(spec, destination, tracker, endpoint, max_workers)
            break
        except DownloadCancelledError:
            raise
        except Exception as exc:
            if not is_transient(exc) or attempt > retries:
                raise ModelStoreError(describe_hub_error(spec, exc)) from exc
            log.warning("download of %s failed (attempt %d): %s", spec.repo_id, attempt, exc)
            if cancel.wait(retry_wait_s):
                raise DownloadCancelledError() from exc
            plan = plan_download(spec, destination, endpoint)  # what is still missing
    tracker.bytes_done = tracker.bytes_total
    tracker.report()
    return verify(kind, destination)


def _snapshot(spec: RepoSpec, destination: Path, tracker: ProgressTracker,
              endpoint: str | None, max_workers: int) -> None:
    from huggingface_hub import snapshot_download

    private_dir(destination)  # 0700 like every folder of the app (POSIX)
    with hub_online():
        snapshot_download(spec.repo_id, local_dir=destination, endpoint=endpoint,
                          tqdm_class=progress_bar_class(tracker), max_workers=max_workers)


def is_transient(exc: BaseException) -> bool:
    """Network drops, timeouts and server errors are worth a retry; 4xx and disk errors are not."""
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return status is None or status >= 500 or status == 429
    name = type(exc).__name__
    transient_names = ("ConnectError", "TimeoutException", "ReadTimeout", "ConnectTimeout",
                       "RemoteProtocolError", "ReadError", "NetworkError", "WriteError")
    return name in transient_names or any(t in name for t in ("Timeout", "Connect"))


def describe_hub_error(spec: RepoSpec, exc: BaseException) -> str:
    """What went wrong, in words, with what to do next."""
    from huggingface_hub.errors import (
        DryRunError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, DryRunError) and cause is not None:
        exc = cause  # the dry run wraps the real reason (not found, no network, ...)
    detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if isinstance(exc, GatedRepoError):
        return (f"{spec.repo_id} needs a Hugging Face login with access to it. Log in with "
                f"`hf auth login`, then press Retry. ({detail})")
    if isinstance(exc, RepositoryNotFoundError):
        return (f"{spec.repo_id} was not found on the Hub (or needs a login). Check the network, "
                f"or choose a folder you already have. ({detail})")
    if isinstance(exc, (DryRunError, LocalEntryNotFoundError)) or is_transient(exc):
        return (f"Cannot reach Hugging Face to download {spec.repo_id}. Check the internet "
                f"connection and press Retry, or choose a folder you already have. ({detail})")
    if isinstance(exc, OSError):
        return (f"Writing {spec.repo_id} to disk failed: {detail}. Check the folder's "
                "permissions and free space, then press Retry.")
    return f"Downloading {spec.repo_id} failed: {detail}. Press Retry."


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
