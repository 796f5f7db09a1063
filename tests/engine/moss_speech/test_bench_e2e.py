"""``python -m app bench engine-e2e`` on the tiny model."""

from __future__ import annotations

import json

import pytest

from app.cli import main


def test_bench_engine_e2e_tiny_reports_ttfa_rtf_and_cancel_latency(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "engine-e2e", "--random-weights", "--turns", "3", "--max-new-rows",
                 "30", "--question-s", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    turns = result["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert all(t["ttfa_ms"] > 0 and set(t["stages_ms"]) == {
        "encode", "prefill", "first_row", "first_chunk"} for t in turns)
    assert turns[0]["rtf"] > 0 and turns[0]["reply_audio_s"] == pytest.approx(29 * 0.08)
    assert turns[1]["cancel_ms"] is not None and turns[1]["rtf"] is None  # barged in on
    assert turns[1]["reply_audio_s"] < turns[0]["reply_audio_s"]
    assert turns[2]["prefill_reused_rows"] > turns[1]["prefill_reused_rows"]  # history grows
    summary = result["summary"]
    assert summary["ttfa_ms_median"] > 0 and summary["cancel_ms_max"] >= 0
    assert result["transcript_pass_ms"] > 0 and result["decode_path"] == "eager"
    assert result["decode_notes"][0].startswith("compile skipped: opt-in on the CPU")
    assert result["flow_cache_budget_mib"] == 1024  # the settings' default
    assert turns[0]["flow_cache_mib"] > 0 and turns[0]["flow_used_mib_per_s"] > 0
    assert turns[0]["flow_bounded_from_code"] is None  # a tiny flow fits the budget
    assert summary["flow_cache_mib_max"] >= turns[0]["flow_cache_mib"]


def test_bench_engine_e2e_needs_random_weights(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "engine-e2e"]) == 2
    assert "--random-weights" in capsys.readouterr().err
