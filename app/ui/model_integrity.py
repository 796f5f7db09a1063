"""The model manager's "Revision and SHA-256" box: per folder, the revision it was made for
against the one this app is validated with, what the last SHA-256 check found, and buttons to
check again (on a worker, cancellable), fetch a damaged file again, re-download the validated
revision, or use another revision anyway."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app import folder_integrity, model_store
from app.download_progress import (
    DownloadCancelledError,
    DownloadProgress,
    ModelStoreError,
    format_bytes,
    format_duration,
)
from app.folder_hashes import NO_FILES, HashReport, accept_revision
from app.folder_integrity import IntegritySummary, integrity_summary
from app.hub_manifest import short
from app.model_store import FolderKind
from app.ui.bridge import UiBridge

OK_STYLE, WARN_STYLE, BAD_STYLE = "color: #2e7d32;", "color: #b26a00;", "color: #c0392b;"


@dataclass(frozen=True)
class HashCheckProgress:
    """A SHA-256 check's progress, kept apart from the download's on the bridge."""

    progress: DownloadProgress


def one_line(kind: FolderKind, summary: IntegritySummary) -> str:
    """The row's text, short enough for one line beside its buttons (the tooltip says more)."""
    spec = model_store.REPOS[kind]
    name = f"<b>{'Model' if kind == 'model' else 'Codec'}</b>: "
    finding = summary.finding
    if finding.source == NO_FILES:
        return f"{name}no files yet · a download fetches revision {spec.short_revision}"
    if summary.mismatched:
        files = summary.mismatched[0] if len(summary.mismatched) == 1 else \
            f"{len(summary.mismatched)} files"
        return (f"{name}SHA-256 of {files} does not match revision "
                f"{short(summary.checked_revision)}")
    if finding.matches is False:
        made_for = f"revision {short(finding.found)}" if finding.found else "another revision"
        chosen = " (your choice)" if finding.accepted else ""
        return f"{name}made for {made_for}, this app is validated with " \
               f"{spec.short_revision}{chosen}"
    revision = f"revision {spec.short_revision} (validated)" if finding.matches else \
        f"revision unknown (validated: {spec.short_revision})"
    if summary.verified:
        hashes = f"SHA-256 verified ({len(summary.matching)} files)"
    elif summary.changed or summary.unchecked:
        hashes = "SHA-256: files changed since the last check"
    else:
        hashes = "SHA-256 not checked yet"
    return f"{name}{revision} · {hashes}"


class IntegrityRow:
    def __init__(self, kind: FolderKind, grid: QGridLayout, row: int) -> None:
        self.kind = kind
        self.summary: IntegritySummary | None = None
        self.folder: Path | None = None
        self.has_files = False
        self.pending = 0
        self.label = QLabel(f"<b>{kind.capitalize()}</b>: checking…")
        # One line; a long text is cut at the window's edge rather than widening the window.
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.verify_button = QPushButton("Verify SHA-256")
        self.verify_button.setToolTip("Read every file again and compare it with the SHA-256 "
                                      "the Hub publishes for its revision (on demand; after a "
                                      "download this was done already).")
        self.fetch_button = QPushButton("Fetch again")
        self.accept_button = QPushButton("Use it anyway")
        for button in (self.fetch_button, self.accept_button):
            button.hide()
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.fetch_button, self.accept_button, self.verify_button):
            buttons.addWidget(button)
        grid.addWidget(self.label, row, 0)
        grid.addLayout(buttons, row, 1)

    def show_summary(self, summary: IntegritySummary) -> None:
        self.summary = summary
        finding = summary.finding
        other_revision = finding.matches is False
        damaged = bool(summary.mismatched)
        style = BAD_STYLE if damaged else WARN_STYLE if other_revision and not finding.accepted \
            else OK_STYLE if summary.verified else ""
        self.label.setStyleSheet(style)
        self.label.setText(one_line(self.kind, summary))
        self.label.setToolTip(f"{finding.message()}\n{summary.hashes_text()}")
        spec = model_store.REPOS[self.kind]
        self.fetch_button.setText("Re-download" if other_revision else "Fetch again")
        self.fetch_button.setToolTip(
            f"Download revision {spec.short_revision}, the one this app is validated with, into "
            "this folder (files that already match are kept)." if other_revision else
            "Download just the files whose SHA-256 does not match, again.")
        self.accept_button.setToolTip("Keep this revision: it is shown as your choice, and its "
                                      "files are checked against the Hub's hashes for it.")
        self.fetch_button.setVisible(damaged or other_revision)
        self.accept_button.setVisible(other_revision and not finding.accepted)
        self.has_files = finding.source != NO_FILES


class IntegrityBox(QGroupBox):
    """Emits ``download_requested(kind)`` (fetch again / re-download) and ``busy(bool)``."""

    download_requested = Signal(str)
    busy = Signal(bool)

    def __init__(self, bridge: UiBridge, use_token: Callable[[], bool],
                 verify_hashes: Callable[..., HashReport] = folder_integrity.verify_hashes,
                 parent: QWidget | None = None) -> None:
        super().__init__("Revision and SHA-256", parent)
        self.bridge = bridge
        self._use_token = use_token
        self._verify_hashes = verify_hashes
        self.checking: FolderKind | None = None
        self._enabled = True
        self.cancel_event = threading.Event()
        rows = QGridLayout()
        rows.setColumnStretch(0, 1)
        kinds: tuple[FolderKind, ...] = ("model", "codec")
        self.rows = {kind: IntegrityRow(kind, rows, i) for i, kind in enumerate(kinds)}
        for kind, row in self.rows.items():
            row.verify_button.clicked.connect(lambda _c=False, k=kind: self.start_check(k))
            row.fetch_button.clicked.connect(
                lambda _c=False, k=kind: self.download_requested.emit(k))
            row.accept_button.clicked.connect(lambda _c=False, k=kind: self.accept(k))
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.detail = QLabel("")
        self.detail.setWordWrap(True)
        self.detail.hide()  # shown with a check's progress and outcome
        self.cancel_button = QPushButton("Cancel check")
        self.cancel_button.hide()
        self.cancel_button.clicked.connect(self.cancel_check)
        footer = QHBoxLayout()
        footer.addWidget(self.detail, 1)
        footer.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addLayout(rows)
        layout.addWidget(self.progress)
        layout.addLayout(footer)
        bridge.on(HashCheckProgress, self._on_progress)

    # ---- what is known (cheap: records and stat, no hashing) ----------------------------

    def refresh(self, kind: FolderKind, folder: Path) -> None:
        row = self.rows[kind]
        row.folder = folder
        row.pending += 1
        token = row.pending
        self.bridge.run_in_background(lambda: integrity_summary(kind, folder),
                                      lambda summary: self._on_summary(kind, token, summary),
                                      lambda exc: row.label.setText(f"Could not read the "
                                                                    f"records: {exc}"),
                                      name=f"integrity-{kind}")

    def _on_summary(self, kind: FolderKind, token: int, summary: IntegritySummary) -> None:
        if token == self.rows[kind].pending:
            self.rows[kind].show_summary(summary)
            self.set_enabled(self._enabled)

    def accept(self, kind: FolderKind) -> None:
        row = self.rows[kind]
        if row.summary is None or row.folder is None:
            return
        folder, finding = row.folder, row.summary.finding
        self.bridge.run_in_background(
            lambda: accept_revision(folder, finding.repo_id, finding),
            lambda _none: self.refresh(kind, folder),
            lambda exc: self.say(f"Could not record the choice: {exc}", BAD_STYLE),
            name=f"accept-{kind}")

    # ---- checking on demand ----------------------------------------------------------------

    def set_enabled(self, enabled: bool) -> None:
        """Off while a download runs (the files are being written)."""
        self._enabled = enabled
        idle = enabled and self.checking is None
        for row in self.rows.values():
            row.verify_button.setEnabled(idle and row.has_files)
            row.fetch_button.setEnabled(idle)
            row.accept_button.setEnabled(idle)

    def start_check(self, kind: FolderKind) -> None:
        row = self.rows[kind]
        if self.checking is not None or row.folder is None:
            return
        folder, use_token = row.folder, self._use_token()
        self.checking = kind
        self.cancel_event = threading.Event()
        cancel = self.cancel_event
        self._show_running(True)
        self.say(f"Checking {folder}…")
        self.bridge.run_in_background(
            lambda: self._verify_hashes(kind, folder,
                                        lambda p: self.bridge.post(HashCheckProgress(p)),
                                        cancel, use_token=use_token),
            lambda report: self._on_checked(kind, report),
            lambda exc: self._on_check_failed(kind, exc), name=f"verify-hashes-{kind}")

    def _show_running(self, running: bool) -> None:
        self.progress.setVisible(running)
        self.progress.setValue(0)
        self.cancel_button.setVisible(running)
        self.set_enabled(not running)
        self.busy.emit(running)

    def _on_progress(self, event: HashCheckProgress) -> None:
        p = event.progress
        self.progress.setValue(int(1000 * p.fraction))
        speed = f"{format_bytes(p.speed_bytes_per_s)}/s" if p.speed_bytes_per_s else "–"
        self.say(f"Reading {format_bytes(p.bytes_done)} of {format_bytes(p.bytes_total)} · "
                 f"{speed} · {format_duration(p.eta_s)} left")

    def _finish(self, kind: FolderKind) -> None:
        self.checking = None
        self._show_running(False)
        folder = self.rows[kind].folder
        if folder is not None:
            self.refresh(kind, folder)

    def _on_checked(self, kind: FolderKind, report: HashReport) -> None:
        self._finish(kind)
        self.say(("✓ " if report.ok else "✗ ") +
                 report.describe("Fetch again downloads just these files again."),
                 OK_STYLE if report.ok else BAD_STYLE)

    def _on_check_failed(self, kind: FolderKind, exc: BaseException) -> None:
        self._finish(kind)
        known = isinstance(exc, ModelStoreError)
        self.say(str(exc) if known else
                 f"The check stopped unexpectedly ({type(exc).__name__}: {exc}).",
                 "" if isinstance(exc, DownloadCancelledError) else BAD_STYLE)

    def say(self, text: str, style: str = "") -> None:
        self.detail.setStyleSheet(style)
        self.detail.setText(text)
        self.detail.show()

    def cancel_check(self) -> None:
        self.cancel_event.set()
        self.say("Cancelling…")

    def close_down(self) -> None:
        self.cancel_event.set()
        self.bridge.off(HashCheckProgress, self._on_progress)
