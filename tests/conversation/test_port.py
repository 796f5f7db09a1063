"""The pipeline as the UI sees it (ConversationPort), with its own voice-loop thread."""

from __future__ import annotations

import threading

import numpy as np
from voice_helpers import FakeSd, RecordingEngine, duration, speech, track

from app.audio.simulated import SimulatedBackend, SimulatedMicrophone
from app.audio.sounddevice_backend import SounddeviceBackend
from app.conversation import create_live_pipeline
from app.conversation.clock import WallClock
from app.conversation.pipeline import Pipeline
from app.engine.echo import EchoEngine
from app.events import (
    ApplySettings,
    AudioDevicesListed,
    ConversationPort,
    EngineStatusChanged,
    ErrorReported,
    ListAudioDevices,
    PipelineEvent,
    ReplyFinished,
    Shutdown,
    StopReply,
)
from app.settings import Settings


def wait_for(condition, timeout_s: float = 60.0) -> None:
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
    reply_waveform = port.reply_waveform  # the UI takes it before the devices are open
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
    reply = np.zeros(48000, np.float32)
    assert port.reply_waveform is reply_waveform and reply_waveform.sample_rate_hz == 48000
    assert reply_waveform.read_latest(reply) == 48000 and np.max(np.abs(reply)) > 0.05
    port.submit(Shutdown())  # the voice loop stops itself...
    assert port.close(5.0)  # ...and close() waits until that stop has released everything
    assert port.close(0.0)  # closing again is harmless
    names = {name for name, event in received if not isinstance(event, EngineStatusChanged)}
    assert names <= {"voice-loop", "MainThread"}
    assert "voice-loop" in names
    assert threading.active_count() == threads_before


class Collector:
    """A subscriber that lets the test wait (without sleeping) for an event of some kind."""

    def __init__(self) -> None:
        self.events: list[PipelineEvent] = []
        self._arrived = threading.Condition()

    def __call__(self, event: PipelineEvent) -> None:
        with self._arrived:
            self.events.append(event)
            self._arrived.notify_all()

    def wait_for(self, kind: type, count: int = 1, timeout_s: float = 60.0) -> list:
        with self._arrived:
            found = self._arrived.wait_for(lambda: len(self.of(kind)) >= count, timeout_s)
        # the ceiling only guards against a hang: building an engine (torch imports) on a
        # loaded 2-core machine took over 10 s
        assert found, f"{len(self.of(kind))} of {count} {kind.__name__} arrived in {timeout_s} s"
        return self.of(kind)

    def of(self, kind: type) -> list:
        return [e for e in list(self.events) if isinstance(e, kind)]

    def wait_until(self, condition, timeout_s: float = 60.0) -> None:
        with self._arrived:
            assert self._arrived.wait_for(condition, timeout_s), "the awaited event never came"


def test_no_audio_devices_and_a_failed_engine_switch_are_reported_not_raised() -> None:
    no_devices = SounddeviceBackend(FakeSd([{"name": "ALSA"}], []))
    pipeline = create_live_pipeline(Settings(), backend=no_devices)
    events = Collector()
    pipeline.subscribe(events)
    pipeline.start(threaded=True)
    pipeline.submit(ListAudioDevices())
    assert events.wait_for(AudioDevicesListed) == [AudioDevicesListed((), ())]
    pipeline.submit(ApplySettings(Settings().with_value("engine.kind", "moss_speech")))
    [failed] = events.wait_for(ErrorReported, 3)[2:]
    pipeline.submit(Shutdown())
    pipeline.stop()
    messages = [e.message for e in events.of(ErrorReported)]
    assert any("No microphone" in m for m in messages)
    assert any("No speaker" in m for m in messages)
    assert failed.category == "model_invalid"  # the same banner as the model-folder check
    assert "MOSS-Speech could not be loaded" in failed.message
    assert "no model and no codec folder is set" in failed.message
    assert "echo demo" in failed.action and "model manager" in failed.action
    statuses = events.of(EngineStatusChanged)
    loadings = [s.loading for s in statuses]  # ready, loading (by stage), ready again
    assert loadings[0] is False and loadings[-1] is False and all(loadings[1:-1])
    assert len(loadings) >= 3
    assert statuses[-1].info.name == "Echo demo" and "folder" in statuses[-1].message


def test_an_engine_that_cannot_be_built_at_start_leaves_the_echo_demo_answering() -> None:
    settings = Settings().with_value("engine.kind", "moss_speech")
    pipeline = create_live_pipeline(settings, backend=SounddeviceBackend(FakeSd([], [])))
    events = Collector()
    pipeline.subscribe(events)
    pipeline.start(threaded=True)
    [failed] = [e for e in events.wait_for(ErrorReported, 3)
                if e.category == "model_invalid"]
    pipeline.stop()
    assert failed.message.startswith("MOSS-Speech could not be loaded")
    statuses = events.of(EngineStatusChanged)
    loading, final = statuses[1], statuses[-1]
    assert all(s.loading for s in statuses[1:-1]) and "Loading MOSS-Speech" in loading.message
    assert "echo demo answers meanwhile" in loading.message
    assert final.info.is_demo and not final.loading


def test_a_bad_model_folder_is_reported_and_a_retry_can_load_the_engine() -> None:
    attempts: list[Settings] = []

    def factory(settings: Settings) -> EchoEngine:
        attempts.append(settings)
        if len(attempts) == 1:
            raise ValueError("/models/moss: config.json is missing")
        return RecordingEngine()

    pcm = np.zeros(16000, np.float32)
    pipeline = Pipeline(Settings(), EchoEngine(), SimulatedBackend(SimulatedMicrophone(pcm,
                        16000)), clock=WallClock(False), engine_factory=factory,
                        load_engine=True)
    events = Collector()
    pipeline.subscribe(events)
    pipeline.start(threaded=True)
    [failed] = events.wait_for(ErrorReported)
    assert "config.json is missing" in failed.message
    pipeline.submit(ApplySettings(Settings(), reload_engine=True))  # nothing changed: rebuild
    statuses = events.wait_for(EngineStatusChanged, 5)
    pipeline.stop()
    assert len(attempts) == 2 and statuses[-1].info.name == "Echo demo"
    assert statuses[-1].message == "" and not statuses[-1].loading


class VoiceAwareFactory:
    """Builds like the model engine does: refuses without a voice, reports its stages."""

    def __init__(self) -> None:
        self.built: list[Settings] = []
        self.engines: list[RecordingEngine] = []

    def __call__(self, settings: Settings) -> EchoEngine:
        from app.engine import build_progress
        from app.engine.factory import EngineUnavailableError

        self.built.append(settings)
        build_progress.report(0.5, "reading the model weights")
        if settings.engine.voice_prompt is None:
            raise EngineUnavailableError("no voice prompt is set", "voice_prompt")
        engine = VoiceRecordingEngine()
        self.engines.append(engine)
        return engine


class VoiceRecordingEngine(RecordingEngine):
    def __init__(self) -> None:
        super().__init__()
        self.applied: list[Settings] = []

    def apply_settings(self, settings: Settings) -> None:
        self.applied.append(settings)


def test_choosing_the_missing_voice_loads_the_engine_and_a_later_voice_applies_in_place(
        tmp_path) -> None:
    factory = VoiceAwareFactory()
    settings = Settings().with_value("engine.kind", "moss_speech")
    pipeline = Pipeline(settings, EchoEngine(), SimulatedBackend(SimulatedMicrophone(
        np.zeros(16000, np.float32), 16000)), clock=WallClock(False), engine_factory=factory,
        load_engine=True)
    events = Collector()
    pipeline.subscribe(events)
    pipeline.start(threaded=True)
    [failed] = events.wait_for(ErrorReported)
    assert failed.category == "voice_prompt" and len(factory.built) == 1
    staged = [s for s in events.of(EngineStatusChanged) if s.progress is not None]
    assert staged and staged[0].progress == 0.5 and "reading the model weights" in (
        staged[0].message)
    # Sampling cannot change whether the build succeeds: no retry for it...
    hotter = settings.with_value("sampling.temperature", 0.9)
    pipeline.submit(ApplySettings(hotter))
    # ...but the voice can: the model loads at once, without a reload request or a restart.
    voiced = hotter.with_value("engine.voice_prompt", tmp_path / "me.wav")
    pipeline.submit(ApplySettings(voiced))
    events.wait_until(lambda: bool(factory.engines) and not events.of(EngineStatusChanged)[-1]
                      .loading)
    assert len(factory.built) == 2 and factory.built[1].sampling.temperature == 0.9
    # With the model running, another voice is taken in place (no second load).
    other = voiced.with_value("engine.voice_prompt", tmp_path / "other.wav")
    pipeline.submit(ApplySettings(other))
    pipeline.submit(Shutdown())
    assert pipeline.close(5.0)
    assert len(factory.built) == 2
    assert [s.engine.voice_prompt for s in factory.engines[0].applied] == [tmp_path / "other.wav"]
