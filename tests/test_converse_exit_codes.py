"""``converse`` exit status (0 every turn answered, 1 failures during the run, 2 bad input) and
what it says about bad audio: NaN in the input, silence, noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from voice_helpers import duration, speech, track

from app.audio.simulated import SimulatedMicrophone, read_wav, write_wav
from app.cli import main
from app.conversation.report import build_report
from app.conversation.simulation import run_simulation
from app.engine.echo import EchoEngine
from app.events import ErrorReported
from app.settings import Settings

RATE = 16000


def two_turns() -> np.ndarray:
    second = 0.5 + duration("hello") + 2.0
    return track([(0.5, speech("hello")), (second, speech("stop"))],
                 second + duration("stop") + 1.5)


def test_all_turns_answered_exits_0(tmp_path: Path) -> None:
    wav, report = tmp_path / "in.wav", tmp_path / "r.json"
    write_wav(wav, two_turns(), RATE)
    assert main(["converse", "--input", str(wav), "--report", str(report), "--quiet"]) == 0
    summary = json.loads(report.read_text())["summary"]
    assert summary["turns"] == 2 and summary["failures"] == [] and summary["failed_turns"] == []


@pytest.mark.slow
def test_turns_the_engine_failed_exit_1_and_the_report_says_which(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from app.engine.moss_speech.testing import tiny_engine_settings

    engine = tiny_engine_settings(tmp_path / "tiny").engine
    wav, report = tmp_path / "in.wav", tmp_path / "r.json"
    write_wav(wav, two_turns(), RATE)
    # 240 reply rows in a 256-row context: no spoken turn fits, the engine refuses each one
    code = main(["converse", "--engine", "moss_speech", "--model-dir", str(engine.model_dir),
                 "--codec-dir", str(engine.codec_dir), "--voice", str(engine.voice_prompt),
                 "--set", 'engine.device="cpu"', "--set", 'engine.precision="fp32"',
                 "--set", "sampling.max_new_rows=240", "--set", "engine.context_max_rows=256",
                 "--input", str(wav), "--report", str(report), "--quiet"])
    assert code == 1
    summary = json.loads(report.read_text())["summary"]
    assert summary["turns"] == 2 and summary["failed_turns"] == [1, 2]
    assert [f["category"] for f in summary["failures"]] == ["input", "input"]
    assert all("rows of model context" in f["message"] for f in summary["failures"])
    captured = capsys.readouterr()
    assert "2 failure(s) during the run (turns 1, 2); exit status 1" in captured.err
    assert "error: This turn needs" in captured.out  # --quiet still prints a failed run


def test_nan_in_the_input_file_is_silence_with_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pcm = two_turns()
    start = int((0.5 + duration("hello") / 2) * RATE)
    pcm[start:start + 2970] = np.nan  # inside the first utterance
    pcm[start + 5000] = np.inf
    wav, out, report = tmp_path / "in.wav", tmp_path / "out.wav", tmp_path / "r.json"
    sf.write(wav, pcm, RATE, subtype="FLOAT")
    assert main(["converse", "--input", str(wav), "--output", str(out), "--report",
                 str(report), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("NaN") == 1 and "2,971 samples" in err  # one warning, no log echo
    played, _ = read_wav(out)
    assert np.all(np.isfinite(played)) and np.max(np.abs(played)) < 0.99
    summary = json.loads(report.read_text())["summary"]
    assert summary["turns"] == 2 and any("not numbers" in w for w in summary["warnings"])


def test_nan_from_the_microphone_device_is_silence_with_one_warning() -> None:
    pcm = two_turns()
    pcm[8000:10970] = np.nan  # the device, not a file: nothing cleaned it before capture
    pcm[40000:40100] = -np.inf
    result = run_simulation(Settings(), EchoEngine(), SimulatedMicrophone(pcm, RATE))
    warnings = [e for e in result.events if isinstance(e, ErrorReported)
                and e.category == "bad_audio"]
    assert len(warnings) == 1 and "not numbers" in warnings[0].message
    assert np.all(np.isfinite(result.output)) and np.max(np.abs(result.output)) < 0.99
    assert len(result.records) == 2
    summary = build_report(result, realtime=False)["summary"]
    assert summary["errors"] == [] and len(summary["warnings"]) == 1


@pytest.mark.parametrize(("pcm", "says"), [
    (np.zeros(2 * RATE, np.float32), "no speech detected (the input is digital silence"),
    (np.random.default_rng(3).normal(0, 0.05, 2 * RATE).astype(np.float32),
     "no speech detected (input peak -14 dBFS)"),
    (np.full(2 * RATE, 1e-4, np.float32), "no speech detected (input peak -80 dBFS); the "
                                           "recording is very quiet"),
])
def test_no_speech_says_so_with_the_input_level(tmp_path: Path, pcm: np.ndarray, says: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    wav, report = tmp_path / "in.wav", tmp_path / "r.json"
    sf.write(wav, pcm, RATE, subtype="FLOAT")
    assert main(["converse", "--input", str(wav), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "0 turn(s)" in out and says in out, out
    summary = json.loads(report.read_text())["summary"]
    assert summary["no_speech_detected"] is True
