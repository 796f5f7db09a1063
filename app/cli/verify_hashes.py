"""``doctor --verify-hashes``: read the configured model and codec folders again and compare
every file with the Hub's hashes for its revision, on a worker thread; Ctrl-C cancels."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from app.download_progress import DownloadProgress, format_bytes, format_duration
from app.folder_integrity import verify_hashes
from app.model_store import FolderKind, ModelStoreError


def print_progress(progress: DownloadProgress) -> None:
    # print() (not sys.stderr.write) also works in a build without a console (stderr None)
    print(f"\r  {progress.repo_id}: {format_bytes(progress.bytes_done)} of "
          f"{format_bytes(progress.bytes_total)} read, {format_duration(progress.eta_s)} left   ",
          end="", file=sys.stderr, flush=True)


def check_in_worker(kind: FolderKind, folder: Path, use_token: bool,
                    progress: bool) -> dict[str, object]:
    """One folder's check on a worker thread; the main thread waits and turns Ctrl-C into
    cancel."""
    cancel = threading.Event()
    outcome: dict[str, object] = {"kind": kind, "path": str(folder)}

    def work() -> None:
        try:
            report = verify_hashes(kind, folder, print_progress if progress else _silent, cancel,
                                   use_token=use_token)
            outcome.update(ok=report.ok, message=report.describe(),
                           mismatched=list(report.mismatched), missing=list(report.missing),
                           hashed_bytes=report.hashed_bytes)
        except ModelStoreError as exc:
            outcome.update(ok=False, message=str(exc))
        except Exception as exc:  # reported, never a traceback in a report
            outcome.update(ok=False, message=f"the check failed: {type(exc).__name__}: {exc}")

    worker = threading.Thread(target=work, name=f"verify-hashes-{kind}", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        cancel.set()
        worker.join()
    if progress:
        print(file=sys.stderr)
    return outcome


def _silent(_progress: DownloadProgress) -> None:
    return None


def verify_configured_folders(progress: bool = True) -> tuple[list[dict[str, object]], int]:
    """Check each configured folder; (results, exit code: 1 if any did not pass)."""
    from app.settings_store import load_settings

    settings = load_settings().settings
    folders: dict[FolderKind, Path | None] = {"model": settings.engine.model_dir,
                                              "codec": settings.engine.codec_dir}
    results: list[dict[str, object]] = []
    for kind, folder in folders.items():
        if folder is None:
            results.append({"kind": kind, "path": None, "ok": False,
                            "message": "not configured; nothing to check"})
            continue
        results.append(check_in_worker(kind, Path(folder), settings.downloads.send_hf_token,
                                       progress))
    return results, 0 if all(r["ok"] for r in results) else 1
