"""What the Hub publishes for one revision of a repository: every file's name, size and hash.

Large files (Git LFS) carry the SHA-256 of their bytes; the others carry git's blob id (SHA-1 of
``b"blob <size>\\0" + bytes``). Both come from one call, ``HfApi.model_info(revision=...,
files_metadata=True)`` (``siblings[i].lfs.sha256`` and ``siblings[i].blob_id``), made at the
pinned commit, so the answer never changes: it is kept in the app's cache and a later check of
any folder needs no network.

No huggingface_hub import at module level (the first-run screen imports app.model_store).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import paths
from app.hub_offline import hub_online

log = logging.getLogger(__name__)

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
MANIFEST_FORMAT = 1
MAX_RECORD_BYTES = 1 << 20  # our JSON records are a few KiB; a bigger file is not ours
UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError)


def read_small_json(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """JSON from a file this app wrote, refused when too big (a folder may be hostile)."""
    with path.open("rb") as stream:
        data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    return json.loads(data.decode("utf-8"))


@dataclass(frozen=True)
class HubFile:
    name: str
    size_bytes: int
    sha256: str | None = None  # Git LFS files: the SHA-256 of the bytes, as the Hub publishes it
    git_oid: str | None = None  # other files: git's blob id

    @property
    def large(self) -> bool:
        return self.sha256 is not None

    @property
    def expected_digest(self) -> str | None:
        return self.sha256 or self.git_oid

    @property
    def digest_kind(self) -> str:
        return "sha256" if self.sha256 else "git-sha1"


@dataclass(frozen=True)
class RevisionManifest:
    repo_id: str
    revision: str
    files: tuple[HubFile, ...]

    def file(self, name: str) -> HubFile | None:
        return next((f for f in self.files if f.name == name), None)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {"format": MANIFEST_FORMAT, "repo_id": self.repo_id, "revision": self.revision,
                "files": [{"name": f.name, "size": f.size_bytes, "sha256": f.sha256,
                           "git_oid": f.git_oid} for f in self.files]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RevisionManifest:
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {data.get('format')!r}")
        files = tuple(HubFile(str(f["name"]), int(f["size"]), f.get("sha256"), f.get("git_oid"))
                      for f in data["files"])
        return cls(str(data["repo_id"]), str(data["revision"]), files)


class ManifestError(Exception):
    """The Hub's answer cannot be used to check files (the message says why)."""


def short(revision: str | None) -> str:
    return (revision or "?")[:7]


def fetch_manifest(repo_id: str, revision: str, *, endpoint: str | None,
                   token: str | bool | None) -> RevisionManifest:
    """Ask the Hub (or the mirror at ``endpoint``) for the files of ``revision``.

    ``token=False`` sends no credentials (the repositories are public). Hub errors propagate
    (RepositoryNotFoundError, RevisionNotFoundError, connection errors)."""
    from huggingface_hub import HfApi

    with hub_online():
        info = HfApi(endpoint=endpoint, token=token).model_info(
            repo_id, revision=revision, files_metadata=True, token=token)
    if COMMIT_RE.fullmatch(revision) and info.sha and info.sha != revision:
        raise ManifestError(f"{endpoint or 'the Hub'} answered revision {short(info.sha)} when "
                            f"asked for {short(revision)} of {repo_id}.")
    files = []
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        size = sibling.size if sibling.size is not None else (lfs.size if lfs else None)
        if size is None:
            raise ManifestError(f"{endpoint or 'the Hub'} gave no size for {sibling.rfilename} "
                                f"in {repo_id}; its file metadata cannot be used.")
        files.append(HubFile(sibling.rfilename, int(size), lfs.sha256 if lfs else None,
                             None if lfs else sibling.blob_id))
    if not files:
        raise ManifestError(f"{endpoint or 'the Hub'} listed no files for {repo_id} at "
                            f"revision {short(revision)}.")
    return RevisionManifest(repo_id, revision, tuple(files))


def cache_path(repo_id: str, revision: str) -> Path:
    return paths.cache_dir() / "hub-manifests" / f"{repo_id.replace('/', '--')}@{revision}.json"


def load_cached(repo_id: str, revision: str) -> RevisionManifest | None:
    """The manifest kept from an earlier answer (a commit's files never change)."""
    path = cache_path(repo_id, revision)
    try:
        manifest = RevisionManifest.from_json(read_small_json(path))
    except FileNotFoundError:
        return None
    except UNREADABLE as exc:
        log.warning("ignoring unreadable manifest %s: %s", path, exc)
        return None
    if manifest.repo_id != repo_id or manifest.revision != revision:
        return None
    return manifest


def save_cached(manifest: RevisionManifest) -> None:
    if not COMMIT_RE.fullmatch(manifest.revision):
        return  # a branch moves; only commits are kept
    path = cache_path(manifest.repo_id, manifest.revision)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomically(path, manifest.to_json())
    except OSError as exc:
        log.warning("could not keep the manifest in %s: %s", path, exc)


def manifest_for(repo_id: str, revision: str, *, endpoint: str | None,
                 token: str | bool | None, online: bool = True) -> RevisionManifest | None:
    """The cached manifest, else (``online``) the Hub's answer, kept for next time."""
    cached = load_cached(repo_id, revision)
    if cached is not None or not online:
        return cached
    manifest = fetch_manifest(repo_id, revision, endpoint=endpoint, token=token)
    save_cached(manifest)
    return manifest


def write_json_atomically(path: Path, data: object) -> None:
    """Write next to ``path`` and rename over it: a crash leaves the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
