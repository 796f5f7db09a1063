"""SHA-256 checks of a model folder: every byte read again, or the records reused.

Writes ``--files`` random files (``--size-mib`` in all) into a temporary folder, builds their
manifest, then times what the app does: a check on demand (every byte read and hashed, as
``doctor --verify-hashes`` and after a download), a check whose records are reused (as at every
later start). The files were just written, so reads come from the page cache: the hash, not the
disk, is measured.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np

from app.folder_hashes import HashState, check_folder
from app.hub_manifest import HubFile, RevisionManifest

REVISION = "0" * 40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.cli.options import count

    parser.add_argument("--size-mib", type=count(1, 1_000_000, unit="MiB"), default=1024,
                        help="total size (default 1024)")
    parser.add_argument("--files", type=count(1, 10_000), default=4,
                        help="number of files (default 4)")


def write_files(folder: Path, size_mib: int, n_files: int) -> RevisionManifest:
    rng = np.random.default_rng(0)
    files = []
    per_file = max(1, size_mib // max(1, n_files)) << 20
    for index in range(n_files):
        path = folder / f"model-{index + 1:05d}-of-{n_files:05d}.safetensors"
        digest = hashlib.sha256()
        with path.open("wb") as stream:
            for start in range(0, per_file, 64 << 20):
                chunk = rng.bytes(min(64 << 20, per_file - start))
                digest.update(chunk)
                stream.write(chunk)
        files.append(HubFile(path.name, per_file, digest.hexdigest()))
    return RevisionManifest("bench/hashes", REVISION, tuple(files))


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="moss-voice-bench-hashes-") as tmp:
        folder = Path(tmp)
        manifest = write_files(folder, args.size_mib, args.files)
        total_mib = manifest.total_bytes / 2**20
        state = HashState(manifest.repo_id, manifest.revision)
        start = time.perf_counter()
        full = check_folder(folder, manifest, state, lambda _n: None, force=True)
        full_s = time.perf_counter() - start
        start = time.perf_counter()
        reused = check_folder(folder, manifest, state, lambda _n: None, force=False)
        reused_s = time.perf_counter() - start
        assert full.ok and reused.ok and reused.hashed_bytes == 0
    print(f"bench hashes: {args.files} files, {total_mib:.0f} MiB")
    print(f"  check on demand (read + SHA-256 all): {full_s:.2f} s = "
          f"{total_mib / full_s:.0f} MiB/s")
    print(f"  check with records reused (start-up): {reused_s * 1000:.1f} ms "
          f"({len(reused.reused)} files unchanged)")
    print(f"  17.1 GiB model + 7.5 GiB codec at this speed: "
          f"{(17.1 + 7.5) * 1024 / (total_mib / full_s):.0f} s")
    return 0
