"""``python -m app converse`` and ``bench voice-loop`` as a tester runs them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from voice_helpers import duration, speech, track

from app.audio.simulated import read_wav, write_wav
from app.cli import main

TURN_KEYS = {"turn_id", "user_onset_s", "user_end_s", "endpoint_s", "engine_first_audio_s",
             "first_audible_s", "response_latency_ms", "stages_ms", "heard_ms", "barge_in",
             "user_audio_from_s", "endpoint_decision"}
BARGE_KEYS = {"onset_s", "detected_s", "silent_s", "stop_latency_ms"}
SUMMARY_KEYS = {"turns", "response_latency_ms_median", "app_overhead_ms_median",
                "barge_in_stop_ms_median"}


@pytest.fixture
def conversation_wav(tmp_path: Path) -> Path:
    """'hello', then 'stop' while the echo of 'hello' plays (a barge-in), at 44.1 kHz stereo."""
    reply_start = 0.5 + duration("hello") + 0.53
    pcm = track([(0.5, speech("hello")), (reply_start + 0.5, speech("stop"))],
                reply_start + 0.5 + duration("stop") + 1.0)
    from app.audio.resample import resample

    stereo = resample(pcm, 16000, 44100)
    path = tmp_path / "in.wav"
    write_wav(path, np.stack([stereo, stereo], axis=1), 44100)
    return path


def test_converse_writes_the_report_schema_and_the_speaker_wav(
        conversation_wav: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, report_path, lines = tmp_path / "out.wav", tmp_path / "r.json", tmp_path / "t.jsonl"
    assert main(["converse", "--engine", "echo", "--input", str(conversation_wav), "--output",
                 str(out), "--report", str(report_path), "--metrics-jsonl", str(lines),
                 "--set", "vad.smart_endpoint=false"]) == 0  # (two turns by silence)
    report = json.loads(report_path.read_text())
    assert set(report) == {"turns", "summary"}
    turns = report["turns"]
    assert len(turns) == 2 and all(set(turn) == TURN_KEYS for turn in turns)
    assert set(turns[0]["barge_in"]) == BARGE_KEYS and turns[1]["barge_in"] is None
    summary = report["summary"]
    assert set(summary) >= SUMMARY_KEYS and summary["turns"] == 2
    latencies = [turn["response_latency_ms"] for turn in turns]
    assert summary["response_latency_ms_median"] == pytest.approx(np.median(latencies))
    assert summary["app_overhead_ms_median"] == pytest.approx(np.median(latencies) - 500)
    assert summary["barge_in_stop_ms_median"] == turns[0]["barge_in"]["stop_latency_ms"]
    assert summary["engine_is_demo"] is True
    played, rate = read_wav(out)
    assert rate == 48000 and played.shape[1] == 1
    assert len(played) / rate == pytest.approx(summary["simulated_s"], abs=0.02)
    assert [json.loads(line)["turn_id"] for line in lines.read_text().splitlines()] == [1, 2]
    printed = capsys.readouterr().out
    assert "Echo demo (no model loaded): 2 turn(s)" in printed and "you cut in" in printed


def test_settings_overrides_and_push_to_talk(conversation_wav: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    assert main(["converse", "--input", str(conversation_wav), "--report", str(report_path),
                 "--set", "vad.endpoint_silence_ms=800", "--set", "turn.barge_in=false",
                 "--set", "vad.smart_endpoint=false", "--quiet"]) == 0
    turns = json.loads(report_path.read_text())["turns"]
    assert turns[0]["stages_ms"]["endpoint_wait"] >= 800 and turns[0]["barge_in"] is None
    assert main(["converse", "--input", str(conversation_wav), "--report", str(report_path),
                 "--ptt", "0.3-2.2", "--quiet"]) == 0
    [turn] = json.loads(report_path.read_text())["turns"]
    assert turn["endpoint_s"] == pytest.approx(2.2, abs=0.011)


def test_an_unplugged_speaker_shows_in_the_report(conversation_wav: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    assert main(["converse", "--input", str(conversation_wav), "--report", str(report_path),
                 "--fail-output-at", "2.6", "--quiet"]) == 0
    summary = json.loads(report_path.read_text())["summary"]
    assert summary["device_events"] == [{"direction": "output", "lost": "Simulated headset",
                                         "now_using": "Simulated speaker", "t_s": 2.6}]


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "moss_speech"], "no model and no codec folder is set"),
    (["--set", "vad.endpoint_silence_ms=5"], "endpoint_silence_ms"),
    (["--set", "nonsense"], "GROUP.KEY=VALUE"),
    (["--ptt", "3"], "START-END"),
])
def test_bad_arguments_exit_2_with_a_message(conversation_wav: Path, args: list[str],
                                             message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["converse", "--input", str(conversation_wav), *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("name", "content", "says"), [
    ("broken.wav", b"RIFF....WAVEfmt ", "is not a sound file this app can decode"),
    ("empty.wav", b"", "is empty (0 bytes)"),
    ("random.mp3", bytes(np.random.default_rng(0).integers(0, 256, 20000, np.uint8)),
     "is not a sound file this app can decode"),
    ("missing.wav", None, "does not exist"),
    ("folder.wav", "dir", "is a folder, not a sound file"),
])
def test_a_missing_or_broken_input_file_is_reported(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str,
        content: bytes | str | None, says: str) -> None:
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    assert main(["converse", "--input", str(path)]) == 2
    out, err = capfd.readouterr()  # file descriptors: the MP3 decoder writes to fd 2 itself
    assert err.count("\n") == 1 and says in err and "WAV, FLAC, OGG or MP3" in err, err
    for misleading in ("Format not recognised", "possibly a pipe", "System error", "MPEG",
                       "Traceback"):
        assert misleading not in err + out


def test_realtime_paces_to_the_wall_clock(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.wav"
    write_wav(quiet, np.zeros(int(0.2 * 16000), np.float32), 16000)
    report_path = tmp_path / "r.json"
    assert main(["converse", "--input", str(quiet), "--report", str(report_path), "--realtime",
                 "--quiet"]) == 0
    summary = json.loads(report_path.read_text())["summary"]
    assert summary["realtime"] is True and summary["turns"] == 0
    assert summary["wall_s"] >= 0.9 * summary["simulated_s"]


def test_headless_demo_runs_the_bundled_sample(capsys: pytest.CaptureFixture[str]) -> None:
    from app import paths
    from app.cli.default import run_headless_demo

    assert run_headless_demo() == 0
    printed = capsys.readouterr().out
    assert "2 turn(s)" in printed and "you cut in" in printed
    report = json.loads((paths.cache_dir() / "demo" / "report.json").read_text())
    assert report["summary"]["barge_in_stop_ms_median"] is not None
    assert (paths.cache_dir() / "demo" / "speaker.wav").is_file()


def test_bench_voice_loop_prints_and_writes_its_figures(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "voice-loop", "--repeat", "1", "--only", "barge_in", "--idle-s", "2",
                 "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures["scenarios"]) == {"barge_in"}
    assert figures["overall"]["barge_in_stop_ms_median"] > 0
    assert figures["vad"]["silero_ms_mean"] > 0 and figures["loop"]["loop_pct_of_core"] > 0
    assert "| barge_in |" in capsys.readouterr().out
