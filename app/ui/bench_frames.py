"""ui-frames: waveform frame cost, bridge event throughput and GUI-thread stalls (offscreen)."""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import threading
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.cli.options import Number, count

    parser.add_argument("--frames", type=count(1, 1_000_000), default=300,
                        help="waveform frames to time")
    parser.add_argument("--width", type=count(100, 10_000, unit="pixels"), default=1080,
                        help="waveform width in pixels")
    parser.add_argument("--events", type=count(1, 100_000_000), default=20_000,
                        help="events through the bridge")
    parser.add_argument("--speed", type=Number(float, 0, 1000, low_open=True), default=4.0,
                        help="speed of the demo conversation for the stall measurement")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(name: str, values_ms: list[float]) -> str:
    return (f"{name}: mean {statistics.fmean(values_ms):.2f} ms, p95 "
            f"{_percentile(values_ms, 0.95):.2f} ms, max {max(values_ms):.2f} ms "
            f"(n={len(values_ms)})")


def bench_waveforms(frames: int, width: int) -> str:
    import numpy as np
    from PySide6.QtGui import QColor

    from app.audio.ringbuffer import RingBuffer
    from app.ui.waveform import WaveformWidget

    widgets, rings = [], []
    for title, rate in (("Microphone", 16000), ("Reply", 24000)):
        widget = WaveformWidget(title, QColor("#1f78d1"), window_s=4.0)
        widget.resize(width, 90)
        widget.show()
        ring = RingBuffer(rate * 8, rate)
        widget.set_source(ring)
        widgets.append(widget)
        rings.append(ring)
    rng = np.random.default_rng(0)
    chunks = [rng.uniform(-0.5, 0.5, r.sample_rate_hz // 30).astype(np.float32) for r in rings]
    times_ms = []
    for _ in range(frames):
        for ring, chunk in zip(rings, chunks, strict=True):
            ring.write(chunk)
        start = time.perf_counter()
        for widget in widgets:
            widget.refresh()
            widget.repaint()  # synchronous paint: the whole cost of a frame
        times_ms.append((time.perf_counter() - start) * 1000)
    return _summary(f"waveform frame (2 widgets, {width}x90 px, 4 s windows)", times_ms)


def bench_bridge(n_events: int) -> str:
    from PySide6.QtCore import QCoreApplication

    from app.events import ConversationState, StateChanged
    from app.ui.bridge import UiBridge

    bridge = UiBridge()
    received = [0]
    bridge.on(StateChanged, lambda _e: received.__setitem__(0, received[0] + 1))
    event = StateChanged(ConversationState.LISTENING, 0.0)
    start = time.perf_counter()
    def post_all() -> None:
        for _ in range(n_events):
            bridge.post(event)

    worker = threading.Thread(target=post_all)
    worker.start()
    while received[0] < n_events:
        QCoreApplication.processEvents()
    elapsed = time.perf_counter() - start
    worker.join()
    return (f"bridge: {n_events} events from a worker thread delivered in {elapsed * 1000:.0f} ms "
            f"({n_events / elapsed:,.0f} events/s)")


def bench_conversation_stalls(speed: float) -> str:
    from PySide6.QtCore import QCoreApplication, QTimer

    from app.conversation.demo import demo_conversation, demo_settings
    from app.events import StateChanged
    from app.settings import Settings
    from app.ui.main_window import MainWindow

    port = demo_conversation(speed=speed)
    window = MainWindow(demo_settings(Settings().with_value("ui.first_run_done", True)),
                        port_factory=lambda _s: port, persist_settings=False)
    window.show()
    beats: list[float] = []
    heartbeat = QTimer()
    heartbeat.setInterval(5)
    heartbeat.timeout.connect(lambda: beats.append(time.perf_counter()))
    heartbeat.start()
    running: list[float] = []  # the first event of the started pipeline arrived

    def note_running(_event: StateChanged) -> None:
        if not running:
            running.append(time.perf_counter())

    window.bridge.on(StateChanged, note_running)
    window.start_conversation()  # starts the pipeline (VAD model, devices) on a thread
    while not port.finished.is_set():
        QCoreApplication.processEvents()
    heartbeat.stop()
    pairs = list(itertools.pairwise(beats))
    start_ms = [(b - a) * 1000 for a, b in pairs if running and a < running[0]]
    gaps = [(b - a) * 1000 for a, b in pairs if running and a >= running[0]]
    window.close()
    turns = len(port.result.records) if port.result is not None else 0
    return (f"GUI heartbeat while the pipeline starts (VAD model load): max "
            f"{max(start_ms, default=0.0):.2f} ms\n"
            + _summary(f"GUI heartbeat gaps (5 ms timer) during the demo conversation (real "
                       f"pipeline, echo engine, simulated devices, {turns} turns) at "
                       f"{speed:g}x", gaps))


def run(args: argparse.Namespace) -> int:
    from app.display import display_status

    if "QT_QPA_PLATFORM" not in os.environ and not display_status().available:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from app.ui.application import create_application

    app = create_application()
    print(f"Qt platform: {app.platformName()}")
    print(bench_waveforms(args.frames, args.width))
    print(bench_bridge(args.events))
    print(bench_conversation_stalls(args.speed))
    return 0
