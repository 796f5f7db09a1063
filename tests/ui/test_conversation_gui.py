"""A whole simulated conversation through the bridge, and ``--screenshot``."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot

from app.events import ConversationState
from app.settings import Settings
from app.ui.demo_port import DEMO_TURNS, DemoConversationPort
from app.ui.main_window import MainWindow
from tests.ui.conftest import no_gpu

MAX_GUI_STALL_MS = 50.0


def test_gui_thread_never_stalls_during_a_conversation(qtbot: QtBot,
                                                        screenshot_dir: Path) -> None:
    port = DemoConversationPort(speed=5.0)
    window = MainWindow(Settings().with_value("ui.first_run_done", True),
                        port_factory=lambda _s: port, gpu_query=no_gpu)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    window.start_conversation()
    beats: list[float] = []
    heartbeat = QTimer()
    heartbeat.setInterval(5)
    heartbeat.timeout.connect(lambda: beats.append(time.perf_counter()))
    heartbeat.start()
    frames_before = window.mic_wave.frames_drawn
    port.start()
    qtbot.waitUntil(port.finished.is_set, timeout=30_000)
    qtbot.wait(100)  # the last queued events and frames land
    heartbeat.stop()
    gaps_ms = [(b - a) * 1000 for a, b in itertools.pairwise(beats)]
    assert len(gaps_ms) > 100
    print(f"max GUI gap {max(gaps_ms):.1f} ms over {len(gaps_ms)} beats")
    assert max(gaps_ms) < MAX_GUI_STALL_MS, f"GUI thread stalled {max(gaps_ms):.1f} ms"
    # The conversation really went through the UI.
    assert len(window.latency.records) == 2
    assert len(window.transcript.model.entries) == 2 * len(DEMO_TURNS)
    assert window.state_label.state == ConversationState.SPEAKING
    seconds = (beats[-1] - beats[0])
    assert window.mic_wave.frames_drawn - frames_before >= 0.5 * 30 * seconds
    window.grab().save(str(screenshot_dir / "main_window_conversation.png"))


def run_app(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MOSS_VOICE_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_screenshot_flag_saves_the_window(tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    result = run_app("--screenshot", str(shot), home=tmp_path)
    assert result.returncode == 0, result.stderr
    image = QImage(str(shot))
    assert image.width() >= 1000 and image.height() >= 700
    bad = run_app("--demo", home=tmp_path)
    assert bad.returncode == 2 and "--screenshot" in bad.stderr


@pytest.mark.slow
def test_screenshot_with_demo_conversation(tmp_path: Path, screenshot_dir: Path) -> None:
    shot = screenshot_dir / "cli_demo.png"
    result = run_app("--screenshot", str(shot), "--demo", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"Saved {shot}" in result.stdout
    image = QImage(str(shot))
    assert image.width() >= 1000
    assert not (tmp_path / "config" / "settings.toml").exists()  # a screenshot changes nothing


def test_ui_frames_bench_runs(capsys: pytest.CaptureFixture[str], qtbot: QtBot) -> None:
    from app.cli import main

    assert main(["bench", "ui-frames", "--frames", "5", "--events", "500",
                 "--speed", "25"]) == 0
    out = capsys.readouterr().out
    assert "waveform frame" in out and "500 events" in out and "heartbeat gaps" in out
