"""From the first start to the first real conversation, as a person meets it (issue 20).

A fresh settings folder → the first-run screen → the guided set-up with the tiny model and codec
→ a voice recorded through the voice loop → "Use MOSS-Speech" loads the engine while the echo
demo answers, with no restart → a spoken turn gets a spoken reply and its transcript. The voice
loop is the real pipeline (silero VAD, turn controller, engine worker with the app's engine
factory, player) on simulated devices paced to the wall clock; the test speaks into the
simulated microphone when a person would. Every step asserts what the window shows.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot
from voice_helpers import speech

from app.audio.simulated import SimulatedMicrophone
from app.conversation.demo import SimulatedConversation
from app.conversation.simulation import SimulationOptions
from app.engine.factory import build_engine
from app.events import (
    EngineStatusChanged,
    ReplyFinished,
    ReplyStarted,
    TranscriptUpdated,
    TurnMeasured,
    UserSpeechStarted,
)
from app.settings import Settings
from app.ui.application import build_main_window
from app.ui.main_window import MainWindow
from app.ui.model_manager import ModelManagerDialog
from app.ui.settings_dialog import SettingsDialog
from tests.ui.conftest import EventLog, save_after_layout

LIVE_S = 3600.0  # the microphone never runs out; the window's close ends the conversation


class LiveMicrophone(SimulatedMicrophone):
    """A simulated microphone that hears silence until the test speaks into it."""

    def __init__(self, sample_rate_hz: int = 16000) -> None:
        super().__init__(np.zeros(1, np.float32), sample_rate_hz)
        self._lock = threading.Lock()
        self._said: list[tuple[int, np.ndarray]] = []  # (first frame, [frames] samples)
        self._pending: list[np.ndarray] = []
        self._position = 0  # the next frame the devices will read

    @property
    def duration_s(self) -> float:
        return LIVE_S

    def say(self, pcm: np.ndarray) -> None:
        """Speak ``pcm`` from the next block the microphone captures on."""
        with self._lock:
            self._pending.append(np.asarray(pcm, np.float32))

    def read(self, start_frame: int, frames: int) -> np.ndarray:
        out = np.zeros((frames, 1), np.float32)
        with self._lock:
            while self._pending:
                start = max(start_frame, self._said[-1][0] + len(self._said[-1][1])
                            if self._said else 0)
                self._said.append((start, self._pending.pop(0)))
            for first, pcm in self._said:
                lo, hi = max(first, start_frame), min(first + len(pcm), start_frame + frames)
                if lo < hi:
                    out[lo - start_frame:hi - start_frame, 0] = pcm[lo - first:hi - first]
        return out


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """The tiny model's kernels are too small to split; on a busy 2-core machine a second
    OpenMP thread only adds spin-waiting (see tests/engine/moss_speech/conftest.py)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_folders(tmp_path: Path) -> tuple[Path, Path]:
    from app.engine.moss_speech.testing import write_tiny_checkpoint, write_tiny_codec

    return write_tiny_checkpoint(tmp_path / "MOSS-Speech"), write_tiny_codec(
        tmp_path / "MOSS-Speech-Codec")


def wait_text(qtbot: QtBot, get_text, expected: str, timeout: int = 20_000) -> None:
    try:
        qtbot.waitUntil(lambda: expected in get_text(), timeout=timeout)
    except Exception as exc:
        raise AssertionError(f"waited for {expected!r}, the window shows {get_text()!r}") from exc


def test_first_start_to_first_spoken_reply_without_a_restart(
        qtbot: QtBot, tiny_folders: tuple[Path, Path], one_torch_thread: None,
        screenshot_dir: Path) -> None:
    model_dir, codec_dir = tiny_folders
    microphone = LiveMicrophone()
    ports: list[SimulatedConversation] = []

    def port_factory(settings: Settings) -> SimulatedConversation:
        port = SimulatedConversation(settings, microphone, engine_factory=build_engine,
                                     options=SimulationOptions(realtime=True))
        ports.append(port)
        return port

    # 1. A fresh settings folder: the app opens on the first-run screen, nothing running.
    window = build_main_window(port_factory)
    qtbot.addWidget(window)
    window.resize(1100, 760)
    window.show()
    qtbot.waitExposed(window)
    log = EventLog(window.bridge, EngineStatusChanged, UserSpeechStarted, ReplyStarted,
                   ReplyFinished, TranscriptUpdated, TurnMeasured)
    assert window.showing_first_run and ports == []
    welcome = " ".join(label.text() for label in window.first_run.findChildren(QLabel))
    assert "Nothing is set up yet" in welcome and "a voice" in welcome
    assert window.first_run.model_button.text() == "Set up the model and voice…"

    # 2. The guided set-up: model and codec folders (as the folder picker would set them).
    qtbot.mouseClick(window.first_run.model_button, Qt.MouseButton.LeftButton)
    manager = window.model_manager
    assert isinstance(manager, ModelManagerDialog) and manager.isVisible()
    for kind, folder in (("model", model_dir), ("codec", codec_dir)):
        manager.rows[kind].set_path(folder)
        manager.verify(kind)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: all(row.status.text().startswith("✓ Verified")
                                for row in manager.rows.values()), timeout=60_000)
    assert not manager.use_button.isEnabled()
    assert manager.missing_label.text() == "Still needed: a voice."
    manager.precision_combo.setCurrentText("fp32")  # what this CPU runs best

    # 3. The voice: recorded through the voice loop (started muted for the set-up).
    recorder = manager.voice_step.record()
    assert len(ports) == 1 and window.showing_first_run  # the loop runs; nothing answers yet
    qtbot.waitUntil(lambda: recorder.start_button.isEnabled(), timeout=60_000)
    assert any("Read the text below aloud" in label.text()
               for label in recorder.findChildren(QLabel))
    qtbot.mouseClick(recorder.start_button, Qt.MouseButton.LeftButton)
    reading = np.concatenate([speech("question"), speech("hello"), speech("sea"),
                              speech("question")])
    reading_s = len(reading) / 16000
    assert 5.5 < reading_s < 14.0
    microphone.say(reading)
    qtbot.waitUntil(lambda: float(recorder.elapsed.text().split()[0]) >= reading_s + 0.2,
                    timeout=30_000)  # all of it read (nothing left over to answer later)
    assert "dBFS" in recorder.level_text.text() or "silent" in recorder.level_text.text()
    qtbot.mouseClick(recorder.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: manager.voice_step.ready, timeout=60_000)
    assert manager.voice_step.status.text().startswith("✓ Replies will speak in this voice")
    recorder.close()
    assert manager.use_button.isEnabled() and manager.missing_label.text() == (
        "Everything is ready.")

    # 4. "Use MOSS-Speech": the engine loads on the worker while the demo answers — no restart.
    qtbot.mouseClick(manager.use_button, Qt.MouseButton.LeftButton)
    assert not window.showing_first_run and len(ports) == 1  # the same voice loop goes on
    qtbot.waitUntil(lambda: any(e.loading for e in log.of(EngineStatusChanged)), timeout=60_000)
    loading = [e for e in log.of(EngineStatusChanged) if e.loading]
    assert "Loading MOSS-Speech" in loading[0].message
    qtbot.waitUntil(lambda: window.engine_status.text() == "Engine: MOSS-Speech · fp32",
                    timeout=120_000)
    assert not window.demo_badge.isVisible()
    assert "engine-loading" not in window.banners.banners
    assert not any(key in window.banners.banners for key in (
        "error-model_invalid", "error-voice_prompt", "error-engine_unavailable"))
    saved = window.settings.engine
    assert (saved.kind, saved.model_dir, saved.codec_dir, saved.precision) == (
        "moss_speech", model_dir, codec_dir, "fp32")
    assert saved.voice_prompt is not None and saved.voice_prompt.is_file()
    wait_text(qtbot, window.state_label.text, "Listening")  # unmuted: the set-up is over
    assert window.mode_status.text() == "Always listening"

    # Short, reproducible replies for a tiny random model: a live change, no reload.
    window.open_settings("replies")
    dialog = window.settings_dialog
    assert isinstance(dialog, SettingsDialog)
    dialog.editors["sampling.max_new_rows"].set_value(24)
    dialog.editors["sampling.seed"].set_value("0")
    assert "reloads" not in dialog.status.text()
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible()

    # 5. A spoken turn gets a spoken reply with its transcript.
    microphone.say(speech("question"))
    qtbot.waitUntil(lambda: bool(log.of(UserSpeechStarted)), timeout=30_000)
    qtbot.waitUntil(lambda: bool(log.of(ReplyStarted)), timeout=120_000)
    qtbot.waitUntil(lambda: bool(log.of(ReplyFinished)), timeout=120_000)
    source = window.reply_wave._source  # what the speaker played, as the window draws it
    assert source is not None
    played = np.zeros(5 * source.sample_rate_hz, np.float32)
    source.read_latest(played)
    assert np.max(np.abs(played)) > 0  # the reply was heard (the tiny model's voice)
    qtbot.waitUntil(lambda: bool(log.of(TurnMeasured)), timeout=120_000)
    record = log.of(TurnMeasured)[0].record
    assert record.response_latency_ms is not None and record.heard_ms > 0
    assert {"encode", "prefill", "first_row"} <= set(record.stages_ms)  # the model's stages
    assert "Response latency" in window.latency.response_label.text()
    finals = lambda: {e.role for e in log.of(TranscriptUpdated) if e.final}  # noqa: E731
    qtbot.waitUntil(lambda: finals() == {"user", "assistant"}, timeout=120_000)
    entries = window.transcript.model.entries
    assert [(e.turn_id, e.role) for e in entries[:2]] == [(1, "user"), (1, "assistant")]
    assert entries[1].spoken  # a spoken reply, heard at the speaker
    for bubble in window.transcript._bubbles[:2]:
        assert "transcribing" not in bubble.body.text()  # every placeholder resolved
    save_after_layout(qtbot, window, screenshot_dir / "first_conversation.png",
                      (window.transcript, window.latency))
    window.close()
    port = ports[0]
    qtbot.waitUntil(port.finished.is_set, timeout=60_000)
    assert port.error is None
    assert isinstance(window, MainWindow)
