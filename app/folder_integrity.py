"""What is known about a folder's revision and hashes without reading it or going online.

For ``doctor`` and the model manager: the revision this app is validated with, the one the folder
was made for (:func:`app.folder_hashes.recognise_revision`), and what the last SHA-256 check
recorded, with the files changed since. Cheap: a few ``stat`` calls and two small JSON files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.folder_hashes import NO_FILES, RevisionFinding, load_state, recognise_revision
from app.hub_manifest import load_cached, short
from app.model_store import REPOS, FolderKind


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
