"""UI test helpers: a fake ConversationPort, fake GPU answers, the screenshot folder, the main
window opened as the app opens it, a recorder of the events the window received, and screenshots
taken after layout."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QScrollArea, QWidget
from pytestqt.qtbot import QtBot

from app.audio.ringbuffer import RingBuffer
from app.engine.preflight import GIB, GpuMemory, GpuQuery
from app.events import Command, PipelineEvent
from app.settings import Settings
from app.ui.bridge import UiBridge
from app.ui.main_window import MainWindow

SCREENSHOT_ENV = "MOSS_VOICE_SCREENSHOT_DIR"


class FakePort:
    """A stand-in for the voice loop: records commands, lets the test emit events."""

    def __init__(self) -> None:
        self.mic_waveform = RingBuffer(16000 * 8, 16000)
        self.reply_waveform = RingBuffer(24000 * 8, 24000)
        self.commands: list[Command] = []
        self.sinks: list[Callable[[PipelineEvent], None]] = []
        self.closed_with: list[float] = []

    def close(self, timeout_s: float = 5.0) -> bool:
        self.closed_with.append(timeout_s)
        return True

    def submit(self, command: Command) -> None:
        self.commands.append(command)

    def subscribe(self, sink: Callable[[PipelineEvent], None]) -> None:
        self.sinks.append(sink)

    def emit(self, event: object) -> None:
        for sink in self.sinks:
            sink(event)  # type: ignore[arg-type]

    def commands_of(self, kind: type) -> list:
        return [c for c in self.commands if isinstance(c, kind)]


class EventLog:
    """Every event of ``kinds`` the bridge delivered, in order.

    Subscribe before the events can happen (before the conversation starts) and wait for the
    event you mean: the window's own handlers were registered first, so when an event is in
    this log the window has already shown it."""

    def __init__(self, bridge: UiBridge, *kinds: type) -> None:
        self.events: list[object] = []
        for kind in kinds:
            bridge.on(kind, self.events.append)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


class _Drained:
    """A marker posted behind everything else (the bridge delivers in posting order)."""


def drain_bridge(qtbot: QtBot, bridge: UiBridge) -> None:
    """Wait until every event posted to ``bridge`` before this call has been handled."""
    seen: list[_Drained] = []
    bridge.on(_Drained, seen.append)
    bridge.post(_Drained())
    qtbot.waitUntil(lambda: bool(seen))
    bridge.off(_Drained, seen.append)


def save_after_layout(qtbot: QtBot, widget: QWidget, path: Path,
                      showing: tuple[QWidget, ...] = ()) -> None:
    """Save a screenshot of ``widget`` once the widgets in ``showing`` are laid out on screen.

    A widget added a moment ago has no geometry until the posted layout requests ran; a grab
    before that shows an empty area where the banner or the dialog page should be. A widget
    inside a scroll area is scrolled into view first."""
    def laid_out() -> bool:
        QApplication.sendPostedEvents()
        for w in showing:
            area = _scroll_area_of(w)
            if area is not None:
                area.ensureWidgetVisible(w, 0, 0)
        return all(w.isVisible() and not w.geometry().isEmpty()
                   and not w.visibleRegion().isEmpty()
                   and w.mapTo(widget, w.rect().topLeft()).y() < widget.height()
                   for w in showing)

    qtbot.waitUntil(laid_out)
    widget.grab().save(str(path))


def _scroll_area_of(w: QWidget) -> QScrollArea | None:
    parent = w.parentWidget()
    while parent is not None and not isinstance(parent, QScrollArea):
        parent = parent.parentWidget()
    return parent


def fake_gpu(free_gib: float, total_gib: float = 24.0) -> Callable[[], GpuQuery]:
    gpu = GpuMemory(0, "Test GPU 24 GB", int(free_gib * GIB), int(total_gib * GIB))
    return lambda: GpuQuery((gpu,), "")


def no_gpu() -> GpuQuery:
    return GpuQuery((), "no CUDA GPU (test)")


def open_window(qtbot: QtBot, settings: Settings | None = None, port: FakePort | None = None,
                start: bool = True, gpu_query: Callable[[], GpuQuery] | None = None,
                persist_settings: bool = True) -> MainWindow:
    """The main window shown (and its conversation started when there is a port)."""
    window = MainWindow(settings or Settings(), port_factory=(lambda _s: port) if port else None,
                        persist_settings=persist_settings,
                        gpu_query=gpu_query or fake_gpu(23.0))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    if start and port is not None:
        window.start_conversation()
    return window


def wav_bytes(seconds: float, rate_hz: int = 16000) -> bytes:
    """A short speech-like WAV file's bytes (a usable voice prompt)."""
    import io

    import numpy as np
    import soundfile

    t = np.arange(int(seconds * rate_hz)) / rate_hz
    pcm = (0.3 * np.sin(2 * np.pi * 180 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)))
    buffer = io.BytesIO()
    soundfile.write(buffer, pcm.astype(np.float32), rate_hz, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def done_first_run() -> Settings:
    return Settings().with_value("ui.first_run_done", True)


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where UI tests save their screenshots: $MOSS_VOICE_SCREENSHOT_DIR, else a temp folder."""
    chosen = os.environ.get(SCREENSHOT_ENV, "").strip()
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def port() -> FakePort:
    return FakePort()
