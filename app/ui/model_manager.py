"""Model manager — the guided set-up: the model, its codec and the voice in one flow.

Choose or download the model and codec folders (verified, and said in words: an empty folder,
a folder that is not MOSS-Speech's), get a voice (app.ui.voice_step), and see which precision
fits the GPU. "Use MOSS-Speech" is enabled when everything the engine needs is there and says
what is still missing otherwise. Downloads, checks and the GPU query run on worker threads;
their results come back through the bridge, so the window never freezes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import model_store
from app.engine.folders import FolderCheck
from app.engine.preflight import (
    PRECISIONS,
    GpuQuery,
    query_gpu_memory,
)
from app.model_store import DownloadCancelledError, DownloadProgress, FolderKind, format_bytes
from app.settings import Settings
from app.ui.bridge import UiBridge
from app.ui.elided import ElidedPathEdit
from app.ui.folder_words import folder_details, folder_lines
from app.ui.model_integrity import IntegrityBox
from app.ui.preflight_box import PreflightBox
from app.ui.settings_form import default_folder, nearest_existing
from app.ui.voice_step import VoiceStep

OK_STYLE, BAD_STYLE = "color: #2e7d32;", "color: #c0392b;"


class FolderRow:
    """Path (elided in the middle, whole on hover), Choose…, Download and the verdict in
    words."""

    def __init__(self, kind: FolderKind, grid: QGridLayout, row: int, path: Path | None) -> None:
        self.kind = kind
        self.check: FolderCheck | None = None
        self.pending = 0  # id of the newest verification, so stale answers are dropped
        spec = model_store.REPOS[kind]
        title = QLabel(f"<b>{spec.title}</b><br><span style='color: gray'>{spec.repo_id} @ "
                       f"{spec.short_revision}</span>")
        title.setToolTip(f"Downloads are pinned to revision {spec.revision}, the one this app "
                         "is validated with.")
        self.path_edit = ElidedPathEdit(str(path) if path else "")
        self.path_edit.setPlaceholderText(str(model_store.default_destination(kind)))
        self.choose_button = QPushButton("Choose folder…")
        self.download_button = QPushButton("Download")
        self.status = QLabel("Not checked yet.")
        self.status.setWordWrap(True)
        grid.addWidget(title, row, 0)
        grid.addWidget(self.path_edit, row, 1)
        grid.addWidget(self.choose_button, row, 2)
        grid.addWidget(self.download_button, row, 3)
        grid.addWidget(self.status, row + 1, 1, 1, 3)

    def path(self) -> Path:
        text = self.path_edit.path_text().strip()
        return Path(text).expanduser() if text else model_store.default_destination(self.kind)

    def set_path(self, path: Path | str) -> None:
        self.path_edit.set_path(str(path))

    def show_check(self, check: FolderCheck) -> None:
        self.check = check
        self.status.setToolTip(folder_details(check))
        if check.ok:
            self.status.setStyleSheet(OK_STYLE)
            self.status.setText(f"✓ Verified: {format_bytes(check.total_bytes)} of weights, "
                                "every file and shape as expected.")
        else:
            self.status.setStyleSheet(BAD_STYLE)
            self.status.setText("✗ " + "\n".join(folder_lines(self.kind, check)))


class ModelManagerDialog(QDialog):
    """The guided set-up. "Use MOSS-Speech" emits ``setup_chosen({settings key: value})`` with
    the folders, the precision and the voice, and ``folders_chosen(model_dir, codec_dir,
    precision)``; ``demo_requested`` when the person picks the echo demo instead."""

    folders_chosen = Signal(Path, Path, str)
    setup_chosen = Signal(dict)
    demo_requested = Signal()

    def __init__(self, settings: Settings, bridge: UiBridge, parent: QWidget | None = None,
                 gpu_query: Callable[[], GpuQuery] = query_gpu_memory,
                 download: Callable[..., FolderCheck] = model_store.download,
                 start_voice_loop: Callable[[], bool] | None = None,
                 voice_step: Callable[..., VoiceStep] = VoiceStep) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model manager: set up MOSS-Speech")
        self.resize(880, 720)
        self.settings = settings
        self.bridge = bridge
        self.gpu: GpuQuery | None = None
        self._download = download
        self.download_kind: FolderKind | None = None
        self.cancel_event = threading.Event()
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        self.rows: dict[FolderKind, FolderRow] = {
            "model": FolderRow("model", grid, 0, settings.engine.model_dir),
            "codec": FolderRow("codec", grid, 2, settings.engine.codec_dir)}
        for kind, row in self.rows.items():
            row.choose_button.clicked.connect(lambda _c=False, k=kind: self.choose_folder(k))
            row.download_button.clicked.connect(lambda _c=False, k=kind: self.start_download(k))
            row.path_edit.editingFinished.connect(lambda k=kind: self.verify(k))
        folders = QGroupBox("1. Model and codec")
        folders.setLayout(grid)
        self.voice_needed = settings.engine.output_modality == "audio"
        self.voice_step = voice_step(bridge, settings.engine.voice_prompt,
                                     start_voice_loop=start_voice_loop)
        self.voice_step.changed.connect(lambda _path: self.update_use_button())
        intro = QLabel("MOSS-Speech needs three things: the model, its codec and a voice to "
                       "speak in. ✓ marks what is ready; when all three are, press "
                       "<b>Use MOSS-Speech</b>. It loads while the echo demo answers — no "
                       "restart.")
        intro.setWordWrap(True)
        body = QWidget()
        column = QVBoxLayout(body)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(intro)
        column.addWidget(folders)
        buttons = self._build_buttons()
        column.addWidget(self._build_download_box())
        self.integrity = IntegrityBox(bridge, lambda: self.settings.downloads.send_hf_token)
        self.integrity.download_requested.connect(lambda kind: self.start_download(kind))
        self.integrity.busy.connect(lambda busy: self._set_downloading(busy, checking=True))
        column.addWidget(self.integrity)
        column.addWidget(self.voice_step)
        column.addWidget(self._build_preflight_box(), 1)
        scroll = QScrollArea()  # all three steps stay reachable in a small window
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(body)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addLayout(buttons)
        bridge.on(DownloadProgress, self._on_progress)
        for kind in self.rows:
            self.verify(kind)
        bridge.run_in_background(gpu_query, self._on_gpu, lambda _exc: None, name="gpu-query")

    # ---- layout ------------------------------------------------------------------------------

    def _build_download_box(self) -> QGroupBox:
        box = QGroupBox("Download from Hugging Face")
        self.download_title = QLabel("Nothing is downloading. Closing this window cancels a "
                                     "download; finished files are kept.")
        self.download_title.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.download_detail = QLabel("")
        self.download_detail.setWordWrap(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_download)
        self.retry_button = QPushButton("Retry")
        self.retry_button.setEnabled(False)
        self.retry_button.clicked.connect(self.retry_download)
        buttons = QHBoxLayout()
        buttons.addWidget(self.download_detail, 1)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.retry_button)
        layout = QVBoxLayout(box)
        layout.addWidget(self.download_title)
        layout.addWidget(self.progress)
        layout.addLayout(buttons)
        self.failed_kind: FolderKind | None = None
        return box

    def _build_preflight_box(self) -> PreflightBox:
        self.preflight = PreflightBox(self.settings)
        self.preflight.demo_requested.connect(self._choose_demo)
        self.preflight.precision_advised.connect(self.precision_combo.setCurrentText)
        self.vram_table = self.preflight.vram_table
        self.recommendation = self.preflight.recommendation
        self.gpu_label = self.preflight.gpu_label
        return self.preflight

    def _choose_demo(self) -> None:
        self.demo_requested.emit()
        self.accept()

    def _build_buttons(self) -> QHBoxLayout:
        self.precision_combo = QComboBox()
        self.precision_combo.addItems(list(PRECISIONS))
        self.precision_combo.setCurrentText(self.settings.engine.precision)
        self.use_button = QPushButton("Use MOSS-Speech")
        self.use_button.setObjectName("useButton")
        self.use_button.setDefault(True)
        self.use_button.setEnabled(False)
        self.use_button.clicked.connect(self.use_folders)
        self.missing_label = QLabel()
        self.missing_label.setObjectName("missingLabel")
        self.missing_label.setWordWrap(True)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(QLabel("Precision:"))
        row.addWidget(self.precision_combo)
        row.addWidget(self.missing_label, 1)
        row.addWidget(self.use_button)
        row.addWidget(close)
        return row

    def missing(self) -> list[str]:
        """What the engine still needs, in words (empty when everything is there)."""
        needed = []
        for kind, row in self.rows.items():
            if row.check is None:
                needed.append(f"the {kind} (being checked)")
            elif not row.check.ok:
                needed.append(f"the {kind}")
        if self.voice_needed and not self.voice_step.ready:
            needed.append("a voice")
        return needed

    def update_use_button(self) -> None:
        needed = self.missing()
        self.use_button.setEnabled(not needed)
        self.missing_label.setStyleSheet("" if not needed else "color: #7a5200;")
        self.missing_label.setText("Everything is ready." if not needed else
                                   "Still needed: " + ", ".join(needed) + ".")
        self.use_button.setToolTip(self.missing_label.text())

    # ---- folders -------------------------------------------------------------------------------

    def choose_folder(self, kind: FolderKind) -> None:
        row = self.rows[kind]
        chosen = QFileDialog.getExistingDirectory(self, f"Choose the {row.kind} folder",
                                                  str(self.start_folder(kind)))
        if chosen:
            row.set_path(chosen)
            self.verify(kind)

    def start_folder(self, kind: FolderKind) -> Path:
        """Where the folder picker opens: the chosen folder, else the models folder."""
        path = self.rows[kind].path()
        if path.exists():
            return path
        return nearest_existing(default_folder("engine.model_dir"))

    def verify(self, kind: FolderKind) -> None:
        """Check the folder on a worker thread (reading safetensors headers can take a while)."""
        row = self.rows[kind]
        row.pending += 1
        token, path = row.pending, row.path()
        row.status.setStyleSheet("")
        row.status.setText("Checking…")
        row.check = None
        self.update_use_button()
        self.integrity.refresh(kind, path)
        self.bridge.run_in_background(lambda: model_store.verify(kind, path),
                                      lambda check: self._on_verified(kind, token, check),
                                      lambda exc: self._on_verify_failed(kind, exc),
                                      name=f"verify-{kind}")

    def _on_verified(self, kind: FolderKind, token: int, check: FolderCheck) -> None:
        row = self.rows[kind]
        if token != row.pending:
            return
        row.show_check(check)
        if kind == "model":
            self.fill_preflight()
        self.update_use_button()

    def _on_verify_failed(self, kind: FolderKind, exc: BaseException) -> None:
        self.rows[kind].status.setText(f"✗ Could not check the folder: {exc}")

    def use_folders(self) -> None:
        if self.missing():
            return
        model_dir, codec_dir = self.rows["model"].path(), self.rows["codec"].path()
        precision = self.precision_combo.currentText()
        values: dict[str, object] = {"engine.model_dir": model_dir,
                                     "engine.codec_dir": codec_dir,
                                     "engine.precision": precision}
        if self.voice_step.voice is not None and self.voice_step.ready:
            values["engine.voice_prompt"] = self.voice_step.voice
        self.setup_chosen.emit(values)
        self.folders_chosen.emit(model_dir, codec_dir, precision)
        self.accept()

    # ---- VRAM preflight ----------------------------------------------------------------------

    def _on_gpu(self, gpu: GpuQuery) -> None:
        self.gpu = gpu
        self.preflight.set_gpu(gpu)

    def fill_preflight(self) -> None:
        model = self.rows["model"]
        self.preflight.set_model_dir(model.path() if model.check and model.check.ok else None)

    # ---- download ----------------------------------------------------------------------------

    def start_download(self, kind: FolderKind) -> None:
        if self.download_kind is not None or self.integrity.checking is not None:
            return
        row = self.rows[kind]
        destination = row.path()
        row.set_path(destination)
        self.download_kind = kind
        self.failed_kind = None
        self.cancel_event = threading.Event()
        cancel = self.cancel_event
        self._set_downloading(True)
        self.download_title.setText(f"Downloading {model_store.REPOS[kind].repo_id} into "
                                    f"{destination}…")
        self.download_detail.setText("Checking what is missing and the free disk space…")
        use_token = self.settings.downloads.send_hf_token
        self.bridge.run_in_background(
            lambda: self._download(kind, destination, self.bridge.post, cancel,
                                   use_token=use_token),
            lambda check: self._on_download_done(kind, check),
            lambda exc: self._on_download_failed(kind, exc), name=f"download-{kind}")

    def _set_downloading(self, active: bool, checking: bool = False) -> None:
        if not checking:
            self.cancel_button.setEnabled(active)
            self.integrity.set_enabled(not active)
        self.retry_button.setEnabled(not active and self.failed_kind is not None)
        for row in self.rows.values():
            row.download_button.setEnabled(not active)

    def _on_progress(self, progress: DownloadProgress) -> None:
        self.progress.setValue(int(1000 * progress.fraction))
        speed = f"{format_bytes(progress.speed_bytes_per_s)}/s" if progress.speed_bytes_per_s \
            else "–"
        attempt = f" · attempt {progress.attempt}" if progress.attempt > 1 else ""
        doing = "Checking SHA-256: " if progress.phase == "verify" else ""
        self.download_detail.setText(
            f"{doing}{format_bytes(progress.bytes_done)} of "
            f"{format_bytes(progress.bytes_total)} · {speed} · "
            f"{model_store.format_duration(progress.eta_s)} left{attempt}")

    def _on_download_done(self, kind: FolderKind, check: FolderCheck) -> None:
        self.download_kind = None
        self._set_downloading(False)
        self.progress.setValue(1000)
        spec = model_store.REPOS[kind]
        self.download_title.setText(f"{spec.repo_id} downloaded (revision "
                                    f"{spec.short_revision}, every file's SHA-256 checked).")
        self.rows[kind].pending += 1
        self._on_verified(kind, self.rows[kind].pending, check)
        self.integrity.refresh(kind, self.rows[kind].path())

    def _on_download_failed(self, kind: FolderKind, exc: BaseException) -> None:
        self.download_kind = None
        self.failed_kind = kind
        self._set_downloading(False)
        if isinstance(exc, DownloadCancelledError | model_store.ModelStoreError):
            self.download_title.setText(str(exc))
        else:
            self.download_title.setText(f"The download stopped unexpectedly ({type(exc).__name__}"
                                        f": {exc}). Press Retry.")
        cancelled = isinstance(exc, DownloadCancelledError)
        self.download_title.setStyleSheet("" if cancelled else BAD_STYLE)

    def cancel_download(self) -> None:
        self.cancel_event.set()
        self.download_detail.setText("Cancelling…")

    def retry_download(self) -> None:
        if self.failed_kind is not None:
            self.download_title.setStyleSheet("")
            self.start_download(self.failed_kind)

    def done(self, result: int) -> None:
        self.cancel_event.set()  # a running download stops at its next progress update
        self.integrity.close_down()
        self.bridge.off(DownloadProgress, self._on_progress)
        self.voice_step.close_step()
        super().done(result)

    def row_status(self, kind: FolderKind) -> str:
        return self.rows[kind].status.text()
