from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.engine.base import STAGES
from app.events import BargeInRecord, TurnRecord
from app.ui import latency_panel
from app.ui.latency_panel import LatencyPanel, records_to_csv, records_to_json

STAGES_MS = dict(zip(STAGES, (500.0, 40.0, 90.0, 25.0, 60.0, 80.0), strict=True))


def record(turn_id: int, latency_ms: float | None = 800.0,
           barge: BargeInRecord | None = None) -> TurnRecord:
    return TurnRecord(turn_id, 1.0, 2.0, 2.5, 2.7, 2.8, latency_ms, dict(STAGES_MS), 1500.0,
                      barge)


def test_last_turn_stage_bar_and_history(qtbot: QtBot) -> None:
    panel = LatencyPanel()
    qtbot.addWidget(panel)
    panel.add_record(record(1))
    panel.add_record(record(2, 850.0, BargeInRecord(3.0, 3.1, 3.2, 200.0)))
    assert "850 ms" in panel.response_label.text() and "turn 2" in panel.response_label.text()
    assert "200 ms" in panel.barge_in_label.text()
    segments = panel.stage_bar.segments()
    assert [s for s, _ in segments] == [*STAGES, "other"]  # 850 > sum of stages (795)
    assert segments[-1][1] == pytest.approx(55.0)
    assert "Prefill 90 ms" in panel.legend_labels["prefill"].text()
    assert panel.history.rowCount() == 2
    assert panel.history.cell(0, 0) == "2"  # newest first
    assert panel.history.cell(0, panel.history.columnCount() - 1) == "200"
    assert panel.history.cell(1, panel.history.columnCount() - 1) == ""
    panel.add_record(record(3, None))
    assert "no reply was heard" in panel.response_label.text()


def test_csv_and_json_exports_hold_every_field(qtbot: QtBot, tmp_path: Path) -> None:
    records = [record(1), record(2, 850.0, BargeInRecord(3.0, 3.1, 3.2, 200.0))]
    rows = list(csv.DictReader(io.StringIO(records_to_csv(records))))
    assert [r["turn_id"] for r in rows] == ["1", "2"]
    assert rows[1]["response_latency_ms"] == "850.0"
    assert rows[0]["stage_prefill_ms"] == "90.0"
    assert rows[0]["barge_in_stop_latency_ms"] == ""
    assert rows[1]["barge_in_stop_latency_ms"] == "200.0"
    data = json.loads(records_to_json(records))
    assert data["stages"] == list(STAGES)
    assert data["turns"][1]["barge_in"]["stop_latency_ms"] == 200.0
    panel = LatencyPanel()
    qtbot.addWidget(panel)
    for r in records:
        panel.add_record(r)
    assert panel.export(tmp_path / "l.csv").read_text().count("\n") == 3
    assert len(json.loads(panel.export(tmp_path / "l.json").read_text())["turns"]) == 2


def test_history_is_bounded(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(latency_panel, "MAX_KEPT_RECORDS", 5)
    panel = LatencyPanel()
    qtbot.addWidget(panel)
    for turn in range(1, 13):
        panel.add_record(record(turn))
    assert panel.history.rowCount() == 5
    assert [r.turn_id for r in panel.records] == [8, 9, 10, 11, 12]
    assert panel.history.cell(0, 0) == "12"


def test_only_the_stages_the_engine_reports_are_shown_all_in_ms(qtbot: QtBot) -> None:
    panel = LatencyPanel()
    qtbot.addWidget(panel)
    assert panel.legend_labels == {}  # nothing claimed before a turn was measured
    echo = TurnRecord(1, 1.0, 2.0, 2.5, 2.6, 2.7, 700.0,
                      {"endpoint_wait": 500.0, "first_chunk": 3.0, "output_buffer": 90.0}, 1500.0)
    panel.add_record(echo)
    assert list(panel.legend_labels) == ["endpoint_wait", "first_chunk", "output_buffer"]
    assert all(" ms" in label.text() for label in panel.legend_labels.values())
    headers = [panel.history.headerData(c, Qt.Orientation.Horizontal)
               for c in range(panel.history.columnCount())]
    assert "Encode" not in headers and "Prefill" not in headers
    assert panel.history.cell(0, headers.index("Heard")) == "1500"  # ms, like every column
    assert "ms" in panel.detail_label.text()
    panel.add_record(record(2))  # an engine with every stage: the columns grow
    assert panel.history.columnCount() == 2 + len(STAGES) + 2


def test_the_endpoint_decision_is_its_own_stage(qtbot: QtBot) -> None:
    """Issue 23: silence waited, the model's verdict and probability, so testers can tune."""
    from dataclasses import replace

    from app.events import EndpointDecision

    panel = LatencyPanel()
    qtbot.addWidget(panel)
    by_model = EndpointDecision("model", 182.0, 0.93, 41.0)
    panel.add_record(replace(record(1), endpoint_decision=by_model))
    text = panel.endpoint_label.text()
    assert "182 ms of silence" in text and "finished" in text and "0.93" in text
    held = EndpointDecision("model", 412.0, 0.97, 30.0, waited_for_canceller=True)
    panel.add_record(replace(record(4), endpoint_decision=held))
    assert panel.endpoint_label.text() == (
        "End of turn after 412 ms of silence: the end-of-turn model said finished, held while "
        "the echo canceller learns the room (model: finished, p = 0.97, 30 ms)")
    label = panel.endpoint_label  # wraps: the whole verdict must not widen the window
    assert label.minimumSizeHint().width() < label.fontMetrics().horizontalAdvance(
        label.text()) / 2
    late = EndpointDecision("silence", 1830.0, 0.12, 39.0)
    panel.add_record(replace(record(2), endpoint_decision=late))
    assert "not sure enough, p = 0.12" in panel.endpoint_label.text()
    went_on = EndpointDecision("model", 190.0, 0.97, 30.0, resumed=1)
    panel.add_record(replace(record(5), endpoint_decision=went_on))
    assert panel.endpoint_label.text().endswith(
        "(model: finished, p = 0.97, 30 ms); an earlier end was taken back once because you "
        "went on")
    panel.add_record(replace(record(3), endpoint_decision=EndpointDecision("silence", 512.0)))
    assert panel.endpoint_label.text() == ("End of turn after 512 ms of silence"
                                           " (no end-of-turn model verdict)")
