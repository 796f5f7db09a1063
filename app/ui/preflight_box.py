"""The set-up's memory check: what each precision needs, what the GPU has, a recommendation.

With no GPU it says what that means and recommends the echo demo (``demo_requested``); the
remote engine (a MOSS-Speech server on another machine) adds its own button to
``no_gpu_actions``. For a tiny test model it says so, since its figures are nearly all fixed
working memory and look the same for every precision.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.engine.preflight import (
    PRECISIONS,
    GpuQuery,
    dims_from_folder,
    estimate_all,
    flow_cache_bytes_for,
    gib,
    recommend,
)
from app.settings import Settings
from app.ui.folder_words import tiny_model_note


class PreflightBox(QGroupBox):
    """Emits ``precision_advised(precision)`` when the GPU is known and one fits."""

    precision_advised = Signal(str)
    demo_requested = Signal()

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__("3. Does it fit your GPU? (memory check)", parent)
        self.settings = settings
        self.gpu: GpuQuery | None = None
        self.model_dir: Path | None = None
        self.gpu_label = QLabel("Checking the GPU…")
        self.gpu_label.setWordWrap(True)
        self.tiny_note = QLabel()
        self.tiny_note.setObjectName("tinyModelNote")
        self.tiny_note.setWordWrap(True)
        self.tiny_note.hide()
        self.vram_table = QTableWidget(len(PRECISIONS), 3)
        self.vram_table.setHorizontalHeaderLabels(["Precision", "Needs about", "On this GPU"])
        self.vram_table.verticalHeader().hide()
        self.vram_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.vram_table.setMinimumHeight(140)
        self.recommendation = QLabel()
        self.recommendation.setObjectName("recommendation")
        self.recommendation.setWordWrap(True)
        self.no_gpu_actions = QHBoxLayout()  # the remote engine's entry goes here too
        self.demo_button = QPushButton("Try the echo demo")
        self.demo_button.setToolTip("Runs the whole voice loop with your microphone and "
                                    "speakers, without a model: it plays your words back.")
        self.demo_button.clicked.connect(self.demo_requested)
        self.demo_button.hide()
        self.no_gpu_actions.addWidget(self.demo_button)
        self.no_gpu_actions.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.gpu_label)
        layout.addWidget(self.tiny_note)
        layout.addWidget(self.vram_table, 1)
        layout.addWidget(self.recommendation)
        layout.addLayout(self.no_gpu_actions)
        self.fill()

    def set_gpu(self, gpu: GpuQuery) -> None:
        self.gpu = gpu
        self.fill()

    def set_model_dir(self, model_dir: Path | None) -> None:
        """A verified model folder (its config sets the sizes), or None for the published."""
        self.model_dir = model_dir
        self.fill()

    def fill(self) -> None:
        rows = self.settings.engine.context_max_rows
        flow_bytes = flow_cache_bytes_for(self.settings)
        dims = dims_from_folder(self.model_dir)
        note = tiny_model_note(dims.param_count())
        self.tiny_note.setText(note)
        self.tiny_note.setVisible(bool(note))
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
        self.demo_button.setVisible(best is None)
        if best is None:
            self.gpu_label.setText(f"No NVIDIA GPU found ({self.gpu.note}). MOSS-Speech would "
                                   "run on the CPU, far slower than real time: a reply would "
                                   "take many times longer than it lasts.")
            self.recommendation.setText(
                "<b>Recommendation:</b> try the echo demo to check your microphone, speakers "
                "and interrupting, and run the model on a PC with an NVIDIA GPU (12–24 GB). "
                "You can still set it up here and try it on the CPU.")
            return
        self.gpu_label.setText(f"{best.name}: {gib(best.free_bytes)} free of "
                               f"{gib(best.total_bytes)} (context: {rows} rows).")
        advice = recommend(best.free_bytes, rows, dims, flow_bytes)
        self.recommendation.setText(f"<b>Recommendation:</b> {advice.message}")
        if advice.precision:
            self.precision_advised.emit(advice.precision)
