"""``converse --simulate-echo`` and ``bench aec`` as a tester runs them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from voice_helpers import duration, speech, track

from app.audio.simulated import write_wav
from app.cli import main


@pytest.fixture
def three_turns(tmp_path: Path) -> Path:
    parts, at = [], 0.5
    for name in ("question", "hello", "sea"):
        parts.append((at, speech(name)))
        at += 2 * duration(name) + 1.8
    path = tmp_path / "in.wav"
    write_wav(path, track(parts, at + 0.5), 16000)
    return path


@pytest.mark.parametrize(("mode", "clean"), [("automatic", True), ("headset", False)])
def test_simulated_echo_with_and_without_the_canceller(
        three_turns: Path, tmp_path: Path, mode: str, clean: bool,
        capsys: pytest.CaptureFixture[str]) -> None:
    report_path = tmp_path / "r.json"
    assert main(["converse", "--input", str(three_turns), "--simulate-echo", "60:-3",
                 "--set", f"echo.mode={mode}", "--report", str(report_path)]) == 0
    summary = json.loads(report_path.read_text())["summary"]
    assert summary["echo"]["mode"] == mode and "false_interruptions" in summary
    if clean:
        assert summary["turns"] == 3 and summary["replies_interrupted"] == 0
        assert summary["echo"]["canceller"] == "pywebrtc-audio"
        assert summary["echo"]["erle_db"] > 20
    else:  # the app hears itself: its replies are cut short (what it heard of itself may
        # start a turn of its own, or run into the person's next turn)
        assert summary["replies_interrupted"] >= 3 and summary["turns"] >= 3
    printed = capsys.readouterr().out
    assert f"echo: {mode}" in printed and "false interruptions" in printed


def test_a_bad_echo_value_is_refused(three_turns: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["converse", "--input", str(three_turns), "--simulate-echo", "loud"]) == 2
    assert "DELAY_MS:GAIN_DB" in capsys.readouterr().err


def test_bench_aec_measures_the_libraries(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "aec.json"
    assert main(["bench", "aec", "--library", "pywebrtc-audio", "--no-pipeline",
                 "--speech-dir", str(tmp_path), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    summary = figures["libraries"]["pywebrtc-audio"]["mean"]
    assert summary["erle_db"] > 25 and 0 < summary["cpu_ms_per_s"] < 300
    assert summary["near_corr"] > 0.8
    assert figures["warmup"]["pywebrtc-audio"]["first_replies"] == 2 * 9
    assert "pywebrtc-audio: summary" in capsys.readouterr().out
    assert np.isfinite(summary["dt_level_db"])
