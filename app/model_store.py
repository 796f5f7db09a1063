"""Download and verify the MOSS-Speech model and codec folders (no Qt).

Every download is pinned to the revision this app is validated with (:data:`REPOS`, the one
place that names them). The Hub's manifest for that revision (:mod:`app.hub_manifest`) says
which files exist, their sizes and hashes; each file is then fetched with
``huggingface_hub.hf_hub_download`` at that commit, and checked by SHA-256 (git's SHA-1 for the
small non-LFS files) against the manifest, the result recorded in the folder
(:mod:`app.folder_hashes`). A file that does not match is fetched once more, then reported by
name.

A cancelled or failed download continues from the files already there: files recorded as
verified are skipped, files of the right size are hashed rather than fetched, and the rest is
fetched (a half file starts again: huggingface_hub removes its partial file; it resumes with a
Range request only within one attempt). Free disk space is checked before each attempt.

No credentials are sent unless the person asks (``use_token``; the repositories are public), and
no Hub request is made outside :func:`app.hub_offline.hub_online` (which refuses when the person
set ``HF_HUB_OFFLINE`` themselves). ``HF_ENDPOINT`` (a mirror) is read at call time and gets the
same pinning and checks.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.download_progress import (  # noqa: F401  (re-exported: the model manager's names)
    CheckCancelledError,
    DownloadCancelledError,
    DownloadProgress,
    ModelStoreError,
    ProgressCallback,
    ProgressTracker,
    format_bytes,
    format_duration,
    progress_bar_class,
    silent_bar_class,
)
from app.engine.folders import FolderCheck, verify_codec_folder, verify_model_folder
from app.folder_hashes import (
    FolderPlan,
    HashState,
    hash_and_record,
    plan_folder,
    save_state,
    state_for,
)
from app.hub_errors import describe_hub_error, is_transient
from app.hub_manifest import HubFile, RevisionManifest, manifest_for, short
from app.hub_offline import hub_online
from app.paths import models_dir, private_dir

log = logging.getLogger(__name__)

FolderKind = Literal["model", "codec"]
DISK_RESERVE_BYTES = 1 << 30  # keep 1 GiB free after the download
FETCHES_PER_FILE = 2  # a file whose hash is wrong is fetched once more, then reported


@dataclass(frozen=True)
class RepoSpec:
    kind: FolderKind
    repo_id: str
    folder_name: str
    title: str
    revision: str  # the commit this app is validated with (moss_speech_contract.md §0)

    @property
    def short_revision(self) -> str:
        return short(self.revision)


REPOS: dict[FolderKind, RepoSpec] = {
    "model": RepoSpec("model", "OpenMOSS-Team/MOSS-Speech", "MOSS-Speech", "MOSS-Speech model",
                      "cff025bb41d8459d59abac0b5e44aba7f659ec9e"),
    "codec": RepoSpec("codec", "OpenMOSS-Team/MOSS-Speech-Codec", "MOSS-Speech-Codec",
                      "MOSS-Speech codec", "eeec733e4e1dea7da444d332d8e1621ef257414c"),
}


class NotEnoughDiskSpaceError(ModelStoreError):
    pass


class HashMismatchError(ModelStoreError):
    """Files whose bytes differ from what the Hub publishes, even after fetching them again."""

    def __init__(self, message: str, files: Sequence[str]) -> None:
        super().__init__(message)
        self.files = tuple(files)


def default_destination(kind: FolderKind) -> Path:
    return models_dir() / REPOS[kind].folder_name


def verify(kind: FolderKind, folder: Path | str) -> FolderCheck:
    """File list, sizes, config keys and shapes (see app.engine.folders)."""
    return verify_model_folder(folder) if kind == "model" else verify_codec_folder(folder)


def hub_endpoint() -> str | None:
    """``HF_ENDPOINT`` read at call time (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT", "").strip() or None


def hub_token(use_token: bool) -> bool | None:
    """``False`` sends no credentials; ``None`` lets huggingface_hub send the logged-in token."""
    return None if use_token else False


def manifest(spec: RepoSpec, endpoint: str | None = None, *, use_token: bool = False,
             revision: str | None = None, online: bool = True) -> RevisionManifest | None:
    """The files of ``revision`` (the validated one by default): cached, else asked of the Hub."""
    try:
        return manifest_for(spec.repo_id, revision or spec.revision,
                            endpoint=endpoint or hub_endpoint(), token=hub_token(use_token),
                            online=online)
    except Exception as exc:
        raise ModelStoreError(describe_hub_error(spec, exc, revision)) from exc


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
    revision: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files if f.will_download)

    @property
    def missing_files(self) -> int:
        return sum(1 for f in self.files if f.will_download)


def plan_download(spec: RepoSpec, destination: Path, endpoint: str | None = None, *,
                  use_token: bool = False) -> DownloadPlan:
    """Which files the validated revision has, how big they are and which must be fetched
    (missing, another size, or recorded as not matching)."""
    files = manifest(spec, endpoint, use_token=use_token)
    assert files is not None  # online: fetched or raised
    return _as_download_plan(spec, Path(destination), files,
                             plan_folder(Path(destination), files, state_for(destination, files)))


def _as_download_plan(spec: RepoSpec, destination: Path, files: RevisionManifest,
                      plan: FolderPlan) -> DownloadPlan:
    fetch = {f.name for f in plan.to_fetch}
    return DownloadPlan(spec.repo_id, destination,
                        tuple(PlannedFile(f.name, f.size_bytes, f.name in fetch)
                              for f in files.files), files.revision)


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


# ---- download -------------------------------------------------------------------------------


@dataclass
class _Job:
    """One download call: where, from where, and what it has done so far."""

    spec: RepoSpec
    destination: Path
    files: RevisionManifest
    state: HashState
    endpoint: str | None
    token: bool | None
    on_progress: ProgressCallback
    cancel: threading.Event
    clock: Callable[[], float]
    max_workers: int
    attempt: int = 0

    def tracker(self, total: int, phase: Literal["download", "verify"]) -> ProgressTracker:
        tracker = ProgressTracker(self.spec.repo_id, total, self.on_progress, self.cancel,
                                  self.clock, phase=phase)
        tracker.attempt = max(1, self.attempt)
        return tracker


def download(kind: FolderKind, destination: Path | None, on_progress: ProgressCallback,
             cancel: threading.Event, *, endpoint: str | None = None, retries: int = 3,
             retry_wait_s: float = 3.0, max_workers: int = 4,
             clock: Callable[[], float] = time.monotonic,
             free_bytes: Callable[[Path], int] = free_disk_bytes,
             use_token: bool = False) -> FolderCheck:
    """Download the validated revision of one repository into ``destination``, check every
    file's hash, and verify the folder's structure.

    Raises :class:`DownloadCancelledError`, :class:`NotEnoughDiskSpaceError`,
    :class:`HashMismatchError` or :class:`ModelStoreError` (with what to do). Transient
    network failures are retried ``retries`` times, waiting ``retry_wait_s`` (interrupted by
    cancel); verified files are never fetched twice.
    """
    spec = REPOS[kind]
    destination = Path(destination) if destination else default_destination(kind)
    endpoint = endpoint or hub_endpoint()
    files = manifest(spec, endpoint, use_token=use_token)
    assert files is not None
    job = _Job(spec, destination, files, state_for(destination, files), endpoint,
               hub_token(use_token), on_progress, cancel, clock, max_workers)
    fetched: Counter[str] = Counter()
    hashed: Counter[str] = Counter()
    while True:
        plan = plan_folder(destination, files, job.state)
        if plan.to_hash:  # present but not (or no longer) verified: hashing beats fetching
            _refuse_rehashing(job, plan, hashed)
            _hash_files(job, plan.to_hash)
            hashed.update(f.name for f in plan.to_hash)
            continue
        if not plan.to_fetch:
            break
        _refuse_refetching(job, plan, fetched)
        problem = disk_space_problem(_as_download_plan(spec, destination, files, plan),
                                     free_bytes(destination))
        if problem:
            raise NotEnoughDiskSpaceError(problem)
        job.attempt += 1
        try:
            fetched.update(_fetch_files(job, plan.to_fetch))
        except DownloadCancelledError:
            raise
        except Exception as exc:
            if not is_transient(exc) or job.attempt > retries:
                raise ModelStoreError(describe_hub_error(spec, exc)) from exc
            log.warning("download of %s failed (attempt %d): %s", spec.repo_id, job.attempt, exc)
            if cancel.wait(retry_wait_s):
                raise DownloadCancelledError() from exc
    job.state.accepted_revision = None  # it is the validated revision now
    _save(job)
    return verify(kind, destination)


def _refuse_refetching(job: _Job, plan: FolderPlan, fetched: Counter[str]) -> None:
    spent = [f.name for f in plan.to_fetch if fetched[f.name] >= FETCHES_PER_FILE]
    if spent:
        where = job.endpoint or "the Hub"
        raise HashMismatchError(
            f"{', '.join(spent)} of {job.spec.repo_id} did not match the SHA-256 that {where} "
            f"publishes for revision {job.spec.short_revision}, even after fetching it again. "
            "The download or the disk is damaging data (or a mirror serves other files); press "
            "Retry to fetch it once more, or check the disk and the network.", spent)


def _refuse_rehashing(job: _Job, plan: FolderPlan, hashed: Counter[str]) -> None:
    """A file hashed twice in one download and still not settled is being changed meanwhile."""
    busy = [f.name for f in plan.to_hash if hashed[f.name] >= 2]
    if busy:
        raise ModelStoreError(f"{', '.join(busy)} in {job.destination} keeps changing while it "
                              "is checked; is another program writing to this folder? Close it "
                              "and press Retry.")


def _hash_files(job: _Job, files: Sequence[HubFile]) -> None:
    tracker = job.tracker(sum(f.size_bytes for f in files), "verify")
    tracker.report()
    for hub_file in files:
        tracker.check_cancel()
        record = hash_and_record(job.destination, hub_file, job.state, tracker.add_bytes)
        if not record.ok:
            log.warning("%s of %s does not match the Hub's hash (%s); fetching it again",
                        hub_file.name, job.spec.repo_id, hub_file.digest_kind)
    tracker.report()


def _fetch_files(job: _Job, files: Sequence[HubFile]) -> list[str]:
    """Fetch ``files`` at the pinned commit, ``max_workers`` at a time; returns those that came.

    Each worker thread goes online for itself only. On the first failure no further file is
    started; files already being fetched finish (or stop at cancel)."""
    from huggingface_hub import hf_hub_download

    tracker = job.tracker(sum(f.size_bytes for f in files), "download")
    tracker.report()
    bar = progress_bar_class(tracker)
    stop = threading.Event()
    private_dir(job.destination)  # 0700 like every folder of the app (POSIX)
    remove_stale_partials(job.destination)

    def fetch(hub_file: HubFile) -> str:
        if stop.is_set():
            raise DownloadCancelledError()
        tracker.check_cancel()
        present = (job.destination / hub_file.name).exists()
        with hub_online():
            hf_hub_download(job.spec.repo_id, hub_file.name, revision=job.spec.revision,
                            local_dir=job.destination, endpoint=job.endpoint, token=job.token,
                            tqdm_class=bar, force_download=present)
        return hub_file.name

    done: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, job.max_workers),
                            thread_name_prefix=f"fetch-{job.spec.kind}") as pool:
        futures = [pool.submit(fetch, f) for f in files]
        errors: list[BaseException] = []
        for future in futures:
            error = future.exception()
            if error is None:
                done.append(future.result())
            elif not isinstance(error, DownloadCancelledError) or not errors:
                errors.append(error)
                stop.set()
    if errors:
        tracker.check_cancel()  # a cancel wins over the errors it caused
        raise next((e for e in errors if not isinstance(e, DownloadCancelledError)), errors[0])
    tracker.report()
    return done


def remove_stale_partials(folder: Path, idle_s: float = 600.0) -> int:
    """Delete huggingface_hub's partial files left by a killed process (it never reuses them:
    their names are unique to a download) once untouched for ``idle_s``; returns bytes freed."""
    freed = 0
    for partial in (folder / ".cache" / "huggingface" / "download").rglob("*.incomplete"):
        try:
            stat = partial.stat()
            if time.time() - stat.st_mtime >= idle_s:
                partial.unlink()
                freed += stat.st_size
        except OSError:
            continue
    if freed:
        log.info("removed %s of partial downloads left in %s", format_bytes(freed), folder)
    return freed


def _save(job: _Job) -> None:
    try:
        save_state(job.destination, job.state)
    except OSError as exc:
        log.warning("%s", exc)
