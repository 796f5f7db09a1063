"""Latency panel: the last turn's response latency with a stage bar, barge-in stop latency,
a per-turn history table, and CSV/JSON export of every kept record.

Only the stages the running engine reports are shown (the echo demo has no encode or prefill),
and every time is in milliseconds."""

from __future__ import annotations

import csv
import io
import json
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QRectF,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.engine.base import REMOTE_STAGES, STAGES
from app.events import TurnRecord

MAX_KEPT_RECORDS = 10_000  # a long session stays flat in memory
STAGE_TITLES = {"endpoint_wait": "Endpoint wait", "encode": "Encode", "prefill": "Prefill",
                "first_row": "First row", "first_chunk": "First chunk",
                "output_buffer": "Output buffer",
                # the remote engine's stages (REMOTE_STAGES)
                "upload": "Upload", "server_first_byte": "Server first byte",
                "first_audio": "First audio", "busy_wait": "Server busy"}
STAGE_SHORT = {"endpoint_wait": "Endpoint\nwait", "encode": "Encode", "prefill": "Prefill",
               "first_row": "First\nrow", "first_chunk": "First\nchunk",
               "output_buffer": "Output\nbuffer"}
STAGE_COLORS = {"endpoint_wait": "#8e9aaf", "encode": "#4c9be8", "prefill": "#8e6fd8",
                "first_row": "#e8a33d", "first_chunk": "#d9634c", "output_buffer": "#4caf7d",
                "upload": "#4c9be8", "server_first_byte": "#8e6fd8", "first_audio": "#d9634c",
                "busy_wait": "#b0a060"}
OTHER_COLOR = "#c8c8c8"
DEFINITION = ("Response latency = first audible reply sample − end of your speech, measured at "
              "the devices (microphone capture time and speaker output time).")


def ordered_stages(names: Iterable[str]) -> list[str]:
    """Pipeline order: the local engine's stages, the remote one's, any other (by name), then
    the output buffer (the last stage of every turn)."""
    present = set(names)
    known = [s for s in (*STAGES[:-1], *REMOTE_STAGES) if s in present]
    others = sorted(present - set(STAGES) - set(REMOTE_STAGES))
    return known + others + (["output_buffer"] if "output_buffer" in present else [])


def stage_title(stage: str) -> str:
    return STAGE_TITLES.get(stage, stage.replace("_", " ").capitalize())


def endpoint_text(record: TurnRecord) -> str:
    """The endpoint decision as its own stage: silence waited, the model's verdict."""
    decision = record.endpoint_decision
    if decision is None:
        return "End of turn: –"
    by = {"model": ": the end-of-turn model said finished", "cap": ": the turn was too long",
          "release": ": you released the key"}.get(decision.by, "")
    if decision.waited_for_canceller:
        by += ", held while the echo canceller learns the room"
    text = f"End of turn after {decision.silence_ms:.0f} ms of silence{by}"
    if decision.probability is not None:
        # by silence the model was not sure enough to end the turn: "not finished" (the long
        # silence waited) or in between (the endpoint silence); the thresholds are settings
        verdict = "finished" if decision.by == "model" else "not sure enough"
        text += f" (model: {verdict}, p = {decision.probability:.2f}"
        text += f", {decision.model_ms:.0f} ms)" if decision.model_ms is not None else ")"
    elif decision.by == "silence":  # the model is off (the default) or was not asked
        text += " (no end-of-turn model verdict)"
    if decision.resumed:
        times = "once" if decision.resumed == 1 else f"{decision.resumed} times"
        text += f"; an earlier end was taken back {times} because you went on"
    return text


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


# ---- export ----------------------------------------------------------------------------------


def stage_names(records: list[TurnRecord]) -> list[str]:
    """STAGES in pipeline order, then any extra stage an engine reported."""
    extra = sorted({s for r in records for s in r.stages_ms} - set(STAGES))
    return [*STAGES, *extra]


def records_to_rows(records: list[TurnRecord]) -> list[dict[str, Any]]:
    """One flat dict per turn; stages as ``stage_<name>_ms``, barge-in as ``barge_in_*``."""
    stages = stage_names(records)
    rows = []
    for record in records:
        row: dict[str, Any] = {
            "turn_id": record.turn_id, "user_onset_s": record.user_onset_s,
            "user_end_s": record.user_end_s, "endpoint_s": record.endpoint_s,
            "engine_first_audio_s": record.engine_first_audio_s,
            "first_audible_s": record.first_audible_s,
            "response_latency_ms": record.response_latency_ms,
        }
        row.update({f"stage_{s}_ms": record.stages_ms.get(s) for s in stages})
        row["heard_ms"] = record.heard_ms
        barge = record.barge_in
        row.update({"barge_in_onset_s": barge.onset_s if barge else None,
                    "barge_in_detected_s": barge.detected_s if barge else None,
                    "barge_in_silent_s": barge.silent_s if barge else None,
                    "barge_in_stop_latency_ms": barge.stop_latency_ms if barge else None})
        rows.append(row)
    return rows


def records_to_csv(records: list[TurnRecord]) -> str:
    rows = records_to_rows(records)
    if not rows:
        return ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def records_to_json(records: list[TurnRecord]) -> str:
    return json.dumps({"stages": list(STAGES), "turns": [asdict(r) for r in records]}, indent=2)


# ---- widgets ---------------------------------------------------------------------------------


class StageBar(QWidget):
    """A horizontal bar split into the stages of one turn, proportional to their duration."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.stages_ms: dict[str, float] = {}
        self.total_ms: float | None = None
        self.setMinimumHeight(22)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_stages(self, stages_ms: dict[str, float], total_ms: float | None) -> None:
        self.stages_ms = dict(stages_ms)
        self.total_ms = total_ms
        parts = [f"{stage_title(s)}: {_ms(v)} ms" for s, v in self.segments()]
        self.setToolTip("\n".join(parts))
        self.update()

    def segments(self) -> list[tuple[str, float]]:
        """(stage, ms) in pipeline order; time not covered by a stage is shown as 'other'."""
        parts = [(s, max(0.0, float(self.stages_ms[s]))) for s in ordered_stages(self.stages_ms)]
        covered = sum(ms for _, ms in parts)
        if self.total_ms is not None and self.total_ms > covered + 0.5:
            parts.append(("other", self.total_ms - covered))
        return parts

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        parts = self.segments()
        total = sum(ms for _, ms in parts)
        if total <= 0:
            painter.setPen(QColor(OTHER_COLOR))
            painter.drawRoundedRect(rect, 3, 3)
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, "no turn measured yet")
            return
        x = rect.left()
        for stage, ms in parts:
            width = rect.width() * ms / total
            segment = QRectF(x, rect.top(), width, rect.height())
            painter.fillRect(segment, QColor(STAGE_COLORS.get(stage, OTHER_COLOR)))
            label = f"{_ms(ms)}"
            if painter.fontMetrics().horizontalAdvance(label) + 6 < width:
                painter.setPen(QColor("white"))
                painter.drawText(segment, Qt.AlignmentFlag.AlignCenter, label)
            x += width
        painter.end()


class HistoryModel(QAbstractTableModel):
    """Per-turn history, newest first; a column for each stage some turn reported."""

    def __init__(self) -> None:
        super().__init__()
        self.records: deque[TurnRecord] = deque(maxlen=MAX_KEPT_RECORDS)
        self.stages: list[str] = []
        self._set_columns()

    def _set_columns(self) -> None:
        self.columns = ["Turn", "Response", *[STAGE_SHORT.get(s, stage_title(s))
                                              for s in self.stages],
                        "Heard", "Barge-in\nstop"]
        self.tooltips = ["Turn number", "Response latency (ms): first audible reply sample − "
                         "end of your speech",
                         *[f"{stage_title(s)} (ms)" for s in self.stages],
                         "How much of the reply was heard (ms)",
                         "Barge-in stop latency (ms): your speech onset → reply silent"]

    def add(self, record: TurnRecord) -> None:
        new_stages = set(record.stages_ms) - set(self.stages)
        if new_stages:  # a stage no turn had before: one more column
            self.beginResetModel()
            self.stages = ordered_stages(set(self.stages) | new_stages)
            self._set_columns()
            self.endResetModel()
        if len(self.records) == self.records.maxlen:  # the oldest (last row) leaves
            last = len(self.records) - 1
            self.beginRemoveRows(QModelIndex(), last, last)
            self.records.popleft()
            self.endRemoveRows()
        self.beginInsertRows(QModelIndex(), 0, 0)
        self.records.append(record)
        self.endInsertRows()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex | None = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self.records)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex | None = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.columns[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.tooltips[section]
        return None

    def cell(self, row: int, column: int) -> str:
        record = self.records[len(self.records) - 1 - row]
        if column == 0:
            return str(record.turn_id)
        if column == 1:
            return _ms(record.response_latency_ms)
        if column < 2 + len(self.stages):
            return _ms(record.stages_ms.get(self.stages[column - 2]))
        if column == 2 + len(self.stages):
            return _ms(record.heard_ms)
        return _ms(record.barge_in.stop_latency_ms) if record.barge_in else ""

    def data(self, index: QModelIndex | QPersistentModelIndex,
             role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.cell(index.row(), index.column())
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class LatencyPanel(QWidget):
    """Shows TurnMeasured records as they arrive."""

    export_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.response_label = QLabel("No turns yet.")
        self.response_label.setObjectName("responseLatency")
        self.response_label.setStyleSheet("font-size: 15px; font-weight: 600;")
        self.response_label.setToolTip(DEFINITION)
        self.detail_label = QLabel("all times in ms")  # shown on the section's title line
        self.detail_label.setToolTip(DEFINITION)
        self.detail_label.setStyleSheet("color: gray;")
        self.endpoint_label = QLabel("End of turn: –")
        self.endpoint_label.setObjectName("endpointDecision")
        self.endpoint_label.setWordWrap(True)  # the model's full verdict is wider than the panel
        self.endpoint_label.setToolTip("How the end of your turn was decided: the silence "
                                       "waited, and the end-of-turn model's verdict")
        self.barge_in_label = QLabel("Barge-in stop: –")
        self.barge_in_label.setToolTip("Talking over a reply: your speech onset → reply silent")
        self.stage_bar = StageBar()
        self.legend = QWidget()
        self.legend_grid = QGridLayout(self.legend)
        self.legend_grid.setContentsMargins(0, 0, 0, 0)
        self.legend_grid.setHorizontalSpacing(12)
        self.legend_grid.setVerticalSpacing(0)
        self.legend_labels: dict[str, QLabel] = {}
        self.history = HistoryModel()
        self.table = QTableView()
        self.table.setObjectName("latencyTable")
        self.table.setModel(self.history)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        header.setMinimumSectionSize(36)
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.setAlternatingRowColors(True)
        self.table.setMinimumHeight(90)  # a header and three rows, even in a small window
        self.csv_button = QPushButton("CSV…")
        self.csv_button.setToolTip("Export every measured turn as CSV")
        self.json_button = QPushButton("JSON…")
        self.json_button.setToolTip("Export every measured turn as JSON")
        self.csv_button.clicked.connect(lambda: self._ask_export(".csv"))
        self.json_button.clicked.connect(lambda: self._ask_export(".json"))
        buttons = QHBoxLayout()
        buttons.addWidget(self.barge_in_label, 1)
        buttons.addWidget(self.csv_button)
        buttons.addWidget(self.json_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(3)
        layout.addWidget(self.response_label)
        layout.addWidget(self.stage_bar)
        layout.addWidget(self.legend)
        layout.addWidget(self.endpoint_label)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 1)

    def _show_legend(self, stages_ms: dict[str, float]) -> None:
        """One entry per stage this turn reported, in pipeline order."""
        for label in self.legend_labels.values():
            self.legend_grid.removeWidget(label)
            label.deleteLater()
        self.legend_labels = {}
        for i, stage in enumerate(ordered_stages(list(stages_ms))):
            swatch = f"<span style='color:{STAGE_COLORS.get(stage, OTHER_COLOR)}'>■</span>"
            label = QLabel(f"{swatch} {stage_title(stage)} {_ms(stages_ms[stage])} ms")
            self.legend_labels[stage] = label
            self.legend_grid.addWidget(label, i // 3, i % 3)

    @property
    def records(self) -> list[TurnRecord]:
        return list(self.history.records)

    def add_record(self, record: TurnRecord) -> None:
        self.history.add(record)
        if record.response_latency_ms is not None:
            self.response_label.setText(f"Response latency: {record.response_latency_ms:.0f} ms"
                                        f"  (turn {record.turn_id})")
        else:
            self.response_label.setText(f"Turn {record.turn_id}: no reply was heard")
        self.stage_bar.set_stages(record.stages_ms, record.response_latency_ms)
        self._show_legend(record.stages_ms)
        self.endpoint_label.setText(endpoint_text(record))
        if record.barge_in is not None:
            self.barge_in_label.setText(f"Barge-in stop: {record.barge_in.stop_latency_ms:.0f} ms"
                                        f"  (turn {record.turn_id})")
    def export(self, path: Path) -> Path:
        """CSV or JSON by suffix."""
        path = Path(path)
        text = (records_to_json(self.records) if path.suffix.lower() == ".json"
                else records_to_csv(self.records))
        path.write_text(text, encoding="utf-8")
        return path

    def _ask_export(self, suffix: str) -> None:
        kind = "JSON (*.json)" if suffix == ".json" else "CSV (*.csv)"
        name, _ = QFileDialog.getSaveFileName(self, "Export latency history",
                                              f"latency{suffix}", kind)
        if not name:
            return
        path = Path(name) if Path(name).suffix else Path(name).with_suffix(suffix)
        try:
            self.export(path)
        except OSError as exc:
            self.export_failed.emit(f"Could not save the latency history to {path}: {exc}. "
                                    "Choose another folder.")
