"""SHA-256 checks of a model folder against the Hub's manifest, recorded in the folder.

Each file's result is kept in ``<folder>/.cache/moss-voice/hashes.json`` (or, for a folder this
app cannot write to, under the app's cache) with the file's size and modification time: while
those are unchanged the result is reused, so 17 GiB are not read again at every start. A check on
demand (``force``) reads everything again, which is what finds a bit flipped on disk.

Which revision a folder was made for is read from what its download recorded (this app's record,
huggingface_hub's ``.cache/huggingface/download/*.metadata``, or a Hub cache folder's name), or,
failing that, from its file list and sizes compared with the manifest.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app import paths
from app.hub_manifest import (
    COMMIT_RE,
    UNREADABLE,
    HubFile,
    RevisionManifest,
    read_small_json,
    short,
    write_json_atomically,
)

log = logging.getLogger(__name__)

STATE_FILE = Path(".cache") / "moss-voice" / "hashes.json"
HF_METADATA_DIR = Path(".cache") / "huggingface" / "download"
STATE_FORMAT = 1
CHUNK_BYTES = 4 << 20
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".bin", ".onnx", ".pth")
NO_FILES = "no files yet"


@dataclass
class FileRecord:
    size_bytes: int
    mtime_ns: int
    digest: str  # what the bytes hashed to
    expected: str  # what the manifest says

    @property
    def ok(self) -> bool:
        return self.digest == self.expected


@dataclass
class HashState:
    repo_id: str
    revision: str  # the revision the records were checked against
    files: dict[str, FileRecord] = field(default_factory=dict)
    accepted_revision: str | None = None  # "use it anyway" for a folder of another revision

    def current(self, folder: Path, hub_file: HubFile) -> FileRecord | None:
        """The record, if the file is unchanged since it was hashed against this expectation."""
        record = self.files.get(hub_file.name)
        if record is None or record.expected != hub_file.expected_digest:
            return None
        try:
            stat = (folder / hub_file.name).stat()
        except OSError:
            return None
        if stat.st_size != record.size_bytes or stat.st_mtime_ns != record.mtime_ns:
            return None
        return record

    def to_json(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "repo_id": self.repo_id, "revision": self.revision,
                "accepted_revision": self.accepted_revision,
                "files": {name: asdict(r) for name, r in sorted(self.files.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HashState:
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"unknown format {data.get('format')!r}")
        files = {str(name): FileRecord(int(r["size_bytes"]), int(r["mtime_ns"]), str(r["digest"]),
                                       str(r["expected"])) for name, r in data["files"].items()}
        return cls(str(data["repo_id"]), str(data["revision"]), files,
                   data.get("accepted_revision"))


def fallback_state_path(folder: Path) -> Path:
    key = hashlib.sha256(str(Path(folder).absolute()).encode()).hexdigest()[:24]
    return paths.cache_dir() / "folder-hashes" / f"{key}.json"


def in_hub_cache(folder: Path) -> bool:
    """A snapshot folder inside huggingface_hub's cache (``models--org--name/snapshots/<sha>``)."""
    parts = Path(folder).absolute().parts
    return (len(parts) >= 3 and parts[-2] == "snapshots" and COMMIT_RE.fullmatch(parts[-1])
            is not None and parts[-3].startswith("models--"))


def load_state(folder: Path | str) -> HashState | None:
    """This app's record for ``folder`` (in the folder, else in the app's cache), if any."""
    folder = Path(folder)
    for path in (folder / STATE_FILE, fallback_state_path(folder)):
        try:
            return HashState.from_json(read_small_json(path))
        except FileNotFoundError:
            continue
        except UNREADABLE as exc:
            log.warning("ignoring unreadable hash record %s: %s", path, exc)
    return None


def save_state(folder: Path | str, state: HashState) -> Path:
    """Write the record into the folder, or into the app's cache if the folder is read-only."""
    folder = Path(folder)
    data = state.to_json()
    places = [fallback_state_path(folder)]
    if not in_hub_cache(folder):  # huggingface_hub's own cache is left as it made it
        places.insert(0, folder / STATE_FILE)
    for path in places:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomically(path, data)
            return path
        except OSError as exc:
            log.info("could not write the hash record to %s: %s", path, exc)
    raise OSError(f"could not record the SHA-256 results for {folder} anywhere")


def file_digest(path: Path, hub_file: HubFile, on_bytes: Callable[[int], None]) -> str:
    """SHA-256 of the bytes (LFS files) or git's blob id (others), read in chunks.

    ``on_bytes`` is called after each chunk (progress; it raises to cancel)."""
    if hub_file.sha256:
        digest = hashlib.sha256()
    else:
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            digest.update(chunk)
            on_bytes(len(chunk))
    return digest.hexdigest()


def hash_and_record(folder: Path, hub_file: HubFile, state: HashState,
                    on_bytes: Callable[[int], None]) -> FileRecord:
    """Hash one file, keep the result in ``state`` and on disk (so a cancel keeps it)."""
    path = folder / hub_file.name
    before = path.stat()
    digest = file_digest(path, hub_file, on_bytes)
    record = FileRecord(before.st_size, before.st_mtime_ns, digest, hub_file.expected_digest or "")
    state.files[hub_file.name] = record
    try:
        save_state(folder, state)
    except OSError as exc:
        log.warning("%s", exc)
    return record


@dataclass(frozen=True)
class FolderPlan:
    """Each file of the manifest sorted by what it needs."""

    verified: tuple[HubFile, ...]  # hashed before, unchanged since, matched
    to_hash: tuple[HubFile, ...]  # present with the right size, not (or no longer) hashed
    to_fetch: tuple[HubFile, ...]  # missing, wrong size, or hashed and found different

    @property
    def fetch_bytes(self) -> int:
        return sum(f.size_bytes for f in self.to_fetch)

    @property
    def hash_bytes(self) -> int:
        return sum(f.size_bytes for f in self.to_hash)


def plan_folder(folder: Path, manifest: RevisionManifest, state: HashState | None,
                force: bool = False) -> FolderPlan:
    """What each file needs; ``force`` hashes every present file again."""
    verified: list[HubFile] = []
    to_hash: list[HubFile] = []
    to_fetch: list[HubFile] = []
    for hub_file in manifest.files:
        path = folder / hub_file.name
        record = None if state is None or force else state.current(folder, hub_file)
        if record is not None:
            (verified if record.ok else to_fetch).append(hub_file)
        elif path.is_file() and path.stat().st_size == hub_file.size_bytes:
            to_hash.append(hub_file)
        else:
            to_fetch.append(hub_file)
    return FolderPlan(tuple(verified), tuple(to_hash), tuple(to_fetch))


def state_for(folder: Path, manifest: RevisionManifest) -> HashState:
    """The folder's record for this manifest (a record for another revision starts afresh)."""
    state = load_state(folder)
    if state is None or state.repo_id != manifest.repo_id or state.revision != manifest.revision:
        accepted = state.accepted_revision if state else None
        state = HashState(manifest.repo_id, manifest.revision, accepted_revision=accepted)
    return state


# ---- which revision a folder was made for ---------------------------------------------------


@dataclass(frozen=True)
class RevisionFinding:
    repo_id: str
    validated: str  # the revision this app is validated with
    found: str | None  # the folder's revision, when it is known
    source: str  # how it was found (for the message)
    differing: tuple[str, ...] = ()  # found by sizes: the files that do not fit `validated`
    accepted: bool = False  # the person chose to use it anyway

    @property
    def matches(self) -> bool | None:
        """True/False when known; None when nothing says (offline, nothing recorded)."""
        if self.found is not None:
            return self.found == self.validated
        return False if self.differing else None

    def message(self) -> str:
        if self.source == NO_FILES:
            return (f"No files here yet; a download fetches revision {short(self.validated)}, "
                    "the one this app is validated with.")
        if self.matches:
            return f"Revision {short(self.validated)} (the one this app is validated with)."
        if self.matches is None:
            return (f"Revision unknown (nothing recorded); this app is validated with "
                    f"{short(self.validated)}.")
        made_for = (f"made for revision {short(self.found)}" if self.found else
                    "made for another revision (" + ", ".join(self.differing[:3]) +
                    (" …" if len(self.differing) > 3 else "") + " differ)")
        chosen = " You chose to use it anyway." if self.accepted else ""
        return (f"This folder was {made_for} ({self.source}); this app is validated with "
                f"{short(self.validated)}.{chosen}")


def hf_recorded_revision(folder: Path) -> str | None:
    """The commit huggingface_hub's local-folder download recorded for most files."""
    root = folder / HF_METADATA_DIR
    if not root.is_dir():
        return None
    commits: Counter[str] = Counter()
    for meta in itertools.islice(root.rglob("*.metadata"), 1000):  # the repos have ~20 files
        try:
            with meta.open(encoding="utf-8") as stream:
                commit = stream.readline(100).strip()  # a commit hash: 40 characters
        except (OSError, UnicodeDecodeError):
            continue
        if COMMIT_RE.fullmatch(commit):
            commits[commit] += 1
    return commits.most_common(1)[0][0] if commits else None


def size_differences(folder: Path, manifest: RevisionManifest) -> list[str]:
    """Files whose size differs from the manifest's, and weight files it does not list."""
    listed = {f.name for f in manifest.files}
    differing = []
    for hub_file in manifest.files:
        path = folder / hub_file.name
        if path.is_file() and path.stat().st_size != hub_file.size_bytes:
            differing.append(hub_file.name)
    for path in sorted(_weight_files(folder)):
        name = path.relative_to(folder).as_posix()
        if name not in listed:
            differing.append(name)
    return differing


def _weight_files(folder: Path) -> Iterable[Path]:
    """Weight files at the top and one folder down (the repositories' depth): a wrongly chosen
    big folder is not walked."""
    for pattern in ("*", "*/*"):
        for path in folder.glob(pattern):
            if path.suffix in WEIGHT_SUFFIXES and not path.relative_to(folder).parts[0] \
                    .startswith(".") and path.is_file():
                yield path


def recognise_revision(folder: Path | str, repo_id: str, validated: str,
                       manifest: RevisionManifest | None = None) -> RevisionFinding:
    """Which revision ``folder`` holds: recorded, else judged by file list and sizes against
    ``manifest`` (the validated revision's, when known)."""
    folder = Path(folder)
    if not folder.is_dir() or not any(p.name != ".cache" for p in folder.iterdir()):
        return RevisionFinding(repo_id, validated, None, NO_FILES)
    state = load_state(folder)
    accepted = bool(state and state.repo_id == repo_id and state.accepted_revision)
    if (state is not None and state.repo_id == repo_id and COMMIT_RE.fullmatch(state.revision)
            and state.files and all(record.ok for record in state.files.values())):
        # Records say what the files were checked against; only a match says what they are.
        return RevisionFinding(repo_id, validated, state.revision, "verified by this app",
                               accepted=accepted)
    recorded = hf_recorded_revision(folder)
    if recorded:
        return RevisionFinding(repo_id, validated, recorded, "recorded by its download",
                               accepted=accepted)
    parts = folder.absolute().parts
    if len(parts) >= 2 and parts[-2] == "snapshots" and COMMIT_RE.fullmatch(parts[-1]):
        return RevisionFinding(repo_id, validated, parts[-1], "its Hub cache folder's name",
                               accepted=accepted)
    if manifest is not None and manifest.revision == validated and folder.is_dir():
        differing = size_differences(folder, manifest)
        return RevisionFinding(repo_id, validated, None if differing else validated,
                               "judged by its file list and sizes", tuple(differing), accepted)
    return RevisionFinding(repo_id, validated, None, "nothing recorded", accepted=accepted)


def accept_revision(folder: Path | str, repo_id: str, finding: RevisionFinding) -> None:
    """Remember "use it anyway" for this folder (shown, never asked again)."""
    folder = Path(folder)
    state = load_state(folder)
    if state is None or state.repo_id != repo_id:
        state = HashState(repo_id, finding.found or "unknown")
    state.accepted_revision = finding.found or "unknown"
    save_state(folder, state)


# ---- checking files --------------------------------------------------------------------------


@dataclass(frozen=True)
class HashReport:
    """The outcome of checking a folder against a revision's manifest."""

    repo_id: str
    revision: str
    matched: tuple[str, ...] = ()  # hashed now, or unchanged since a matching record
    reused: tuple[str, ...] = ()  # of those, how many came from the record (not read again)
    mismatched: tuple[str, ...] = ()  # the bytes differ from what the Hub publishes
    missing: tuple[str, ...] = ()  # absent, or of another size
    hashed_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatched and not self.missing

    def describe(self, what_to_do: str = "Fetch again (or Download) in the model manager "
                 "downloads just these files again.") -> str:
        if self.ok:
            return (f"SHA-256 verified: {len(self.matched)} files match revision "
                    f"{short(self.revision)} ({len(self.reused)} unchanged since their last "
                    "check).")
        parts = []
        if self.mismatched:
            parts.append(f"{', '.join(self.mismatched)}: the bytes differ from the SHA-256 the "
                         f"Hub publishes for revision {short(self.revision)}")
        if self.missing:
            parts.append(f"missing or of another size: {', '.join(self.missing)}")
        return "; ".join(parts) + ". " + what_to_do


def _record_wrong_size(folder: Path, hub_file: HubFile, state: HashState) -> None:
    """A file of another size is recorded as not matching (never read: it cannot match)."""
    try:
        stat = (folder / hub_file.name).stat()
    except OSError:
        state.files.pop(hub_file.name, None)
        return
    state.files[hub_file.name] = FileRecord(stat.st_size, stat.st_mtime_ns,
                                            f"size {stat.st_size}", hub_file.expected_digest or "")
    try:
        save_state(folder, state)
    except OSError as exc:
        log.warning("%s", exc)


def check_folder(folder: Path, manifest: RevisionManifest, state: HashState,
                 on_bytes: Callable[[int], None], force: bool = False) -> HashReport:
    """Hash what has no current record (everything with ``force``); records as it goes."""
    plan = plan_folder(folder, manifest, state, force)
    hashed = 0
    matched = [f.name for f in plan.verified]
    mismatched: list[str] = []
    missing: list[str] = []
    for hub_file in plan.to_fetch:
        if not force and state.current(folder, hub_file) is not None:
            mismatched.append(hub_file.name)  # recorded as different, unchanged since
            continue
        missing.append(hub_file.name)
        _record_wrong_size(folder, hub_file, state)
    for hub_file in plan.to_hash:
        record = hash_and_record(folder, hub_file, state, on_bytes)
        hashed += record.size_bytes
        (matched if record.ok else mismatched).append(hub_file.name)
    return HashReport(manifest.repo_id, manifest.revision, tuple(matched),
                      tuple(f.name for f in plan.verified), tuple(mismatched), tuple(missing),
                      hashed)
