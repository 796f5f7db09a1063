"""The pipeline as the UI sees it (ConversationPort), with its own voice-loop thread."""

from __future__ import annotations

import threading

import numpy as np
from voice_helpers import FakeSd, duration, speech, track

from app.audio.simulated import SimulatedBackend, SimulatedMicrophone
from app.audio.sounddevice_backend import SounddeviceBackend
from app.conversation import create_live_pipeline
from app.conversation.clock import WallClock
from app.conversation.pipeline import Pipeline
from app.engine.echo import EchoEngine
from app.events import (
    ApplySettings,
    ConversationPort,
    EngineStatusChanged,
    ErrorReported,
    PipelineEvent,
    ReplyFinished,
    Shutdown,
    StopReply,
)
from app.settings import Settings


def wait_for(condition, timeout_s: float = 10.0) -> None:
    """Poll until the other thread has made progress (fails only if it hangs)."""
    deadline = threading.Event()
    for _ in range(int(timeout_s * 1000)):
        if condition():
            return
        deadline.wait(0.001)
    raise AssertionError("the voice loop made no progress")


def test_the_threaded_pipeline_serves_the_ui_port_and_stops_cleanly() -> None:
    threads_before = threading.active_count()
    pcm = track([(0.3, speech("sea"))], 0.3 + duration("sea") + 2.0)
    backend = SimulatedBackend(SimulatedMicrophone(pcm, 16000))
    pipeline = Pipeline(Settings().with_value("engine.speculative_start", False), EchoEngine(),
                        backend, clock=WallClock(device_times_are_monotonic=False))
    port: ConversationPort = pipeline
    received: list[tuple[str, PipelineEvent]] = []
    finished = threading.Event()

    def sink(event: PipelineEvent) -> None:
        received.append((threading.current_thread().name, event))
        if isinstance(event, ReplyFinished):
            finished.set()

    port.subscribe(sink)
    pipeline.start(threaded=True)
    # This thread plays the part of the device callbacks. It lets the voice loop catch up
    # before each next block, so nothing depends on how fast either thread runs.
    step = 0
    while not finished.is_set():
        step += 1
        assert step < 3000, "the reply never finished"
        backend.deliver_input(step * 0.01)
        # (the resampler holds back 32 samples; the echo canceller, while the reply plays,
        # another 128 and up to a frame of 160)
        wait_for(lambda n=step: port.mic_waveform.total_written >= n * 160 - 320)
        backend.render_output(step * 0.01, 0.01)
    port.submit(StopReply())  # never blocks, also with nothing to stop
    mic = np.zeros(5 * 16000, np.float32)
    assert port.mic_waveform.read_latest(mic) > 16000 and np.any(mic)
    reply = np.zeros(4800, np.float32)
    assert port.reply_waveform.sample_rate_hz == 48000
    assert port.reply_waveform.read_latest(reply) == 4800
    port.submit(Shutdown())
    pipeline.stop()
    names = {name for name, event in received if not isinstance(event, EngineStatusChanged)}
    assert names <= {"voice-loop", "MainThread"}
    assert "voice-loop" in names
    assert threading.active_count() == threads_before


def test_no_audio_devices_and_a_failed_engine_switch_are_reported_not_raised() -> None:
    no_devices = SounddeviceBackend(FakeSd([{"name": "ALSA"}], []))
    pipeline = create_live_pipeline(Settings(), backend=no_devices)
    events: list[PipelineEvent] = []
    reported = threading.Semaphore(0)

    def sink(event: PipelineEvent) -> None:
        events.append(event)
        if isinstance(event, ErrorReported):
            reported.release()

    pipeline.subscribe(sink)
    pipeline.start(threaded=True)
    assert pipeline.list_devices() == []
    pipeline.submit(ApplySettings(Settings().with_value("engine.kind", "moss_speech")))
    for _ in range(3):
        assert reported.acquire(timeout=10)
    pipeline.submit(Shutdown())
    pipeline.stop()
    messages = [e.message for e in events if isinstance(e, ErrorReported)]
    assert any("No microphone" in m for m in messages)
    assert any("No speaker" in m for m in messages)
    assert any("Could not switch engine" in m and "moss_speech" in m for m in messages)
    statuses = [e for e in events if isinstance(e, EngineStatusChanged)]
    assert statuses[-1].info.name == "Echo demo" and "moss_speech" in statuses[-1].message
