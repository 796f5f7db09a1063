"""``converse --engine remote --remote-url URL`` and ``doctor`` against the stand-in server."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from voice_helpers import duration, speech, track

from app.audio.simulated import write_wav
from app.cli import main
from app.doctor import collect_report, format_report
from app.engine.remote.standin import StandInServer
from app.settings_store import LoadedSettings
from tests.engine.remote.remote_helpers import remote_settings


@pytest.fixture
def question_wav(tmp_path: Path) -> Path:
    path = tmp_path / "in.wav"
    write_wav(path, track([(0.5, speech("question"))], 0.5 + duration("question") + 3.0),
              16000)
    return path


def test_converse_talks_to_the_server(server: StandInServer, question_wav: Path,
                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report_path = tmp_path / "report.json"
    assert main(["converse", "--engine", "remote", "--remote-url", server.url, "--input",
                 str(question_wav), "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    [turn] = report["turns"]
    assert turn["response_latency_ms"] is not None and report["summary"]["turns"] == 1
    assert report["summary"]["engine_is_demo"] is False
    assert {"upload", "server_first_byte", "first_audio"} <= set(turn["stages_ms"])
    assert len(server.records) == 1 and server.records[0].completed.is_set()
    assert "MOSS-Speech server" in capsys.readouterr().out


def test_converse_says_when_the_server_cannot_be_reached(
        question_wav: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    assert main(["converse", "--remote-url", url, "--input", str(question_wav)]) == 2
    err = capsys.readouterr().err
    assert "connection refused" in err and "docs/remote-engine.md" in err


def test_doctor_checks_the_servers_health(server: StandInServer, tmp_path: Path) -> None:
    loaded = LoadedSettings(remote_settings(server.url), tmp_path / "settings.toml")
    report = collect_report(loaded)
    assert report["remote"] == {"url": server.url, "ok": True, "status": "healthy"}
    assert f"ok server {server.url}: ready (healthy)" in format_report(report)
    server.faults.health_status = 503
    report = collect_report(loaded)
    assert report["remote"]["ok"] is False
    assert f"-- server {server.url}: The server at {server.url} is not ready yet" in (
        format_report(report))
    assert collect_report(LoadedSettings(remote_settings("").with_value(
        "engine.kind", "echo"), tmp_path / "s.toml"))["remote"] is None


def test_bench_remote_measures_both_engines(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "remote", "--turns", "2", "--barge-ins", "2", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for regime in ("single_turn", "conversation"):
        runs = figures["first_audio"][regime]
        assert runs["remote_ms"]["n"] == 2 and runs["echo_ms"]["median"] is not None
        assert set(runs["stages_ms"]) == {"upload", "server_first_byte", "first_audio"}
    assert figures["barge_in_stop_ms"]["remote"]["n"] == 2
    assert figures["server_abort_ms"]["n"] == 2
    printed = capsys.readouterr().out
    assert "first audio, single turn (ms)" in printed and "barge-in stop (ms)" in printed
