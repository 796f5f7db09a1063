"""What is known about a folder's revision and hashes (from records: no reading, no network),
and the SHA-256 check on demand (every file read again).

For ``doctor`` and the model manager: the revision this app is validated with, the one the folder
was made for (:func:`app.folder_hashes.recognise_revision`), and what the last SHA-256 check
recorded, with the files changed since. Cheap: a few ``stat`` calls and two small JSON files.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.download_progress import (
    CheckCancelledError,
    ModelStoreError,
    ProgressCallback,
    ProgressTracker,
)
from app.folder_hashes import (
    NO_FILES,
    HashReport,
    RevisionFinding,
    check_folder,
    load_state,
    plan_folder,
    recognise_revision,
    state_for,
)
from app.hub_manifest import load_cached, short
from app.model_store import REPOS, FolderKind, manifest


@dataclass(frozen=True)
class IntegritySummary:
    kind: FolderKind
    finding: RevisionFinding
    checked_revision: str | None  # the revision the recorded hashes were compared with
    matching: tuple[str, ...] = ()  # recorded as matching, unchanged since
    mismatched: tuple[str, ...] = ()  # recorded as not matching, unchanged since
    changed: tuple[str, ...] = ()  # changed (or gone) since their check
    unchecked: tuple[str, ...] = ()  # listed by the revision, never checked

    @property
    def verified(self) -> bool:
        return bool(self.matching) and not (self.mismatched or self.changed or self.unchecked)

    def hashes_text(self) -> str:
        if self.finding.source == NO_FILES:
            return "SHA-256: nothing to check yet."
        if self.checked_revision is None:
            return ("SHA-256: not checked yet (checked after each download, or on demand with "
                    "Verify SHA-256 / doctor --verify-hashes).")
        if self.mismatched:
            return (f"SHA-256: {_names(self.mismatched)} did not match revision "
                    f"{short(self.checked_revision)} at the last check.")
        if self.changed or self.unchecked:
            pending = self.changed + self.unchecked
            return (f"SHA-256: {_names(pending)} changed or not checked since the last check; "
                    "verify again.")
        return (f"SHA-256: {len(self.matching)} files verified against revision "
                f"{short(self.checked_revision)}, unchanged since.")

    def as_dict(self) -> dict[str, Any]:
        f = self.finding
        return {
            "revision": {"validated": f.validated, "found": f.found, "source": f.source,
                         "matches": f.matches, "accepted": f.accepted,
                         "differing": list(f.differing), "message": f.message()},
            "hashes": {"checked_revision": self.checked_revision, "verified": self.verified,
                       "matching": len(self.matching), "mismatched": list(self.mismatched),
                       "changed": list(self.changed), "unchecked": list(self.unchecked),
                       "message": self.hashes_text()},
        }


def _names(names: tuple[str, ...], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown
                                       else "")


def integrity_summary(kind: FolderKind, folder: Path | str) -> IntegritySummary:
    """Revision and SHA-256 state of ``folder`` from its records (no hashing, no network)."""
    spec = REPOS[kind]
    folder = Path(folder)
    finding = recognise_revision(folder, spec.repo_id, spec.revision,
                                 load_cached(spec.repo_id, spec.revision))
    state = load_state(folder)
    if state is None or state.repo_id != spec.repo_id or not state.files:
        return IntegritySummary(kind, finding, None)
    matching: list[str] = []
    mismatched: list[str] = []
    changed: list[str] = []
    for name, record in sorted(state.files.items()):
        try:
            stat = (folder / name).stat()
            unchanged = (stat.st_size, stat.st_mtime_ns) == (record.size_bytes, record.mtime_ns)
        except OSError:
            unchanged = False
        if not unchanged:
            changed.append(name)
        else:
            (matching if record.ok else mismatched).append(name)
    manifest = load_cached(spec.repo_id, state.revision)
    unchecked = [n for n in manifest.names if n not in state.files] if manifest else []
    return IntegritySummary(kind, finding, state.revision, tuple(matching), tuple(mismatched),
                            tuple(changed), tuple(unchecked))


# ---- checking on demand ------------------------------------------------------------------


def verify_hashes(kind: FolderKind, folder: Path | str, on_progress: ProgressCallback,
                  cancel: threading.Event, *, endpoint: str | None = None,
                  use_token: bool = False, online: bool = True, force: bool = True,
                  clock: Callable[[], float] = time.monotonic) -> HashReport:
    """Check every file of ``folder`` against the Hub's hashes for its revision (the validated
    one, or the one it was made for when the person chose to use that), reading all of them
    again (``force``) or only those changed since their last check.

    Needs the manifest: cached (after any download or check), else asked of the Hub when
    ``online``. Raises :class:`ModelStoreError` when there is none, and
    :class:`CheckCancelledError` on cancel (files checked so far keep their record)."""
    spec = REPOS[kind]
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelStoreError(f"{folder} is not a folder; choose the {spec.title} folder.")
    finding = recognise_revision(folder, spec.repo_id, spec.revision,
                                 load_cached(spec.repo_id, spec.revision))
    revision = finding.found if finding.accepted and finding.found else spec.revision
    files = manifest(spec, endpoint, use_token=use_token, revision=revision, online=online)
    if files is None:
        raise ModelStoreError(
            f"The SHA-256 list of {spec.repo_id} at revision {short(revision)} is not on this "
            "computer yet and the check is offline. Check again when online (it is kept "
            "afterwards); the folder's structure was checked.")
    tracker = ProgressTracker(spec.repo_id, 0, on_progress, cancel, clock, phase="verify",
                              cancel_error=CheckCancelledError)
    state = state_for(folder, files)
    tracker.bytes_total = plan_folder(folder, files, state, force).hash_bytes
    tracker.report()
    report = check_folder(folder, files, state, tracker.add_bytes, force)
    tracker.report()
    return report
