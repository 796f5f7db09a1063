"""Model manager: choose or download the model and codec folders, verify them, and see which
precision fits the GPU. Downloads, checks and the GPU query run on worker threads; their results
come back through the bridge, so the window never freezes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import model_store
from app.engine.folders import FolderCheck
from app.engine.preflight import (
    PRECISIONS,
    GpuQuery,
    dims_from_folder,
    estimate_all,
    flow_cache_bytes_for,
    gib,
    query_gpu_memory,
    recommend,
)
from app.model_store import DownloadCancelledError, DownloadProgress, FolderKind, format_bytes
from app.settings import Settings
from app.ui.bridge import UiBridge
from app.ui.model_integrity import IntegrityBox

OK_STYLE, BAD_STYLE = "color: #2e7d32;", "color: #c0392b;"


class FolderRow:
    """Path, Choose…, Download and the verification verdict for one folder."""

    def __init__(self, kind: FolderKind, grid: QGridLayout, row: int, path: Path | None) -> None:
        self.kind = kind
        self.check: FolderCheck | None = None
        self.pending = 0  # id of the newest verification, so stale answers are dropped
        spec = model_store.REPOS[kind]
        title = QLabel(f"<b>{spec.title}</b><br><span style='color: gray'>{spec.repo_id} @ "
                       f"{spec.short_revision}</span>")
        title.setToolTip(f"Downloads are pinned to revision {spec.revision}, the one this app "
                         "is validated with.")
        self.path_edit = QLineEdit(str(path) if path else "")
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
        text = self.path_edit.text().strip()
        return Path(text).expanduser() if text else model_store.default_destination(self.kind)

    def show_check(self, check: FolderCheck) -> None:
        self.check = check
        if check.ok:
            self.status.setStyleSheet(OK_STYLE)
            self.status.setText(f"✓ Verified: {format_bytes(check.total_bytes)} of weights, "
                                "every file and shape as expected.")
        else:
            self.status.setStyleSheet(BAD_STYLE)
            shown = check.problems[:4] + (["…"] if len(check.problems) > 4 else [])
            self.status.setText("✗ " + "\n".join(shown))


class ModelManagerDialog(QDialog):
    """Emits ``folders_chosen(model_dir, codec_dir, precision)`` when both folders verify."""

    folders_chosen = Signal(Path, Path, str)

    def __init__(self, settings: Settings, bridge: UiBridge, parent: QWidget | None = None,
                 gpu_query: Callable[[], GpuQuery] = query_gpu_memory,
                 download: Callable[..., FolderCheck] = model_store.download) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model manager")
        self.resize(860, 640)
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
        folders = QGroupBox("Folders")
        folders.setLayout(grid)
        layout = QVBoxLayout(self)
        layout.addWidget(folders)
        layout.addWidget(self._build_download_box())
        self.integrity = IntegrityBox(bridge, lambda: self.settings.downloads.send_hf_token)
        self.integrity.download_requested.connect(lambda kind: self.start_download(kind))
        self.integrity.busy.connect(lambda busy: self._set_downloading(busy, checking=True))
        layout.addWidget(self.integrity)
        layout.addWidget(self._build_preflight_box(), 1)
        layout.addLayout(self._build_buttons())
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

    def _build_preflight_box(self) -> QGroupBox:
        box = QGroupBox("GPU memory check (VRAM preflight)")
        self.gpu_label = QLabel("Checking the GPU…")
        self.gpu_label.setWordWrap(True)
        self.vram_table = QTableWidget(len(PRECISIONS), 3)
        self.vram_table.setHorizontalHeaderLabels(["Precision", "Needs about", "On this GPU"])
        self.vram_table.verticalHeader().hide()
        self.vram_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.recommendation = QLabel()
        self.recommendation.setWordWrap(True)
        layout = QVBoxLayout(box)
        layout.addWidget(self.gpu_label)
        layout.addWidget(self.vram_table, 1)
        layout.addWidget(self.recommendation)
        self.fill_preflight()
        return box

    def _build_buttons(self) -> QHBoxLayout:
        self.precision_combo = QComboBox()
        self.precision_combo.addItems(list(PRECISIONS))
        self.precision_combo.setCurrentText(self.settings.engine.precision)
        self.use_button = QPushButton("Use these folders")
        self.use_button.setDefault(True)
        self.use_button.setEnabled(False)
        self.use_button.clicked.connect(self.use_folders)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(QLabel("Precision:"))
        row.addWidget(self.precision_combo)
        row.addStretch(1)
        row.addWidget(self.use_button)
        row.addWidget(close)
        return row

    # ---- folders -------------------------------------------------------------------------------

    def choose_folder(self, kind: FolderKind) -> None:
        row = self.rows[kind]
        chosen = QFileDialog.getExistingDirectory(self, f"Choose the {row.kind} folder",
                                                  str(row.path()))
        if chosen:
            row.path_edit.setText(chosen)
            self.verify(kind)

    def verify(self, kind: FolderKind) -> None:
        """Check the folder on a worker thread (reading safetensors headers can take a while)."""
        row = self.rows[kind]
        row.pending += 1
        token, path = row.pending, row.path()
        row.status.setStyleSheet("")
        row.status.setText("Checking…")
        self.use_button.setEnabled(False)
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
        self.use_button.setEnabled(all(r.check is not None and r.check.ok
                                       for r in self.rows.values()))

    def _on_verify_failed(self, kind: FolderKind, exc: BaseException) -> None:
        self.rows[kind].status.setText(f"✗ Could not check the folder: {exc}")

    def use_folders(self) -> None:
        self.folders_chosen.emit(self.rows["model"].path(), self.rows["codec"].path(),
                                 self.precision_combo.currentText())
        self.accept()

    # ---- VRAM preflight ----------------------------------------------------------------------

    def _on_gpu(self, gpu: GpuQuery) -> None:
        self.gpu = gpu
        self.fill_preflight()

    def fill_preflight(self) -> None:
        rows = self.settings.engine.context_max_rows
        flow_bytes = flow_cache_bytes_for(self.settings)
        model = self.rows["model"]
        dims = dims_from_folder(model.path() if model.check and model.check.ok else None)
        best = self.gpu.best if self.gpu else None
        for i, (precision, need) in enumerate(estimate_all(rows, dims, flow_bytes).items()):
            verdict = "–" if best is None else ("fits" if need.fits(best.free_bytes) else
                                                "does not fit")
            for column, text in enumerate((precision, gib(need.total_bytes), verdict)):
                item = QTableWidgetItem(text)
                item.setToolTip(need.breakdown())
                self.vram_table.setItem(i, column, item)
        if self.gpu is None:
            return
        if best is None:
            self.gpu_label.setText(f"No CUDA GPU found: {self.gpu.note}. The model would run on "
                                   "the CPU, far slower than real time.")
            self.recommendation.setText("")
            return
        self.gpu_label.setText(f"{best.name}: {gib(best.free_bytes)} free of "
                               f"{gib(best.total_bytes)} (context: {rows} rows).")
        advice = recommend(best.free_bytes, rows, dims, flow_bytes)
        self.recommendation.setText(f"<b>Recommendation:</b> {advice.message}")
        if advice.precision:
            self.precision_combo.setCurrentText(advice.precision)

    # ---- download ----------------------------------------------------------------------------

    def start_download(self, kind: FolderKind) -> None:
        if self.download_kind is not None or self.integrity.checking is not None:
            return
        row = self.rows[kind]
        destination = row.path()
        row.path_edit.setText(str(destination))
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
        super().done(result)

    def row_status(self, kind: FolderKind) -> str:
        return self.rows[kind].status.text()
