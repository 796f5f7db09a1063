"""A recorded conversation as a live ConversationPort: the real pipeline (silero VAD, turn
controller, echo engine, player, metrics) on simulated devices, driven on its own thread.

``python -m app --screenshot PNG --demo``, the GUI-stall test and the ui-frames bench use it,
so the transcript, latency figures, waveforms and barge-in the window shows are measured on
the bundled sample, not scripted. The echo engine has no speech recognition: the transcript
shows the turns with their durations and what the echo replays.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app import events as ev
from app.audio.simulated import SimulatedMicrophone
from app.conversation.simulation import Simulation, SimulationOptions, SimulationResult
from app.engine.base import Engine
from app.settings import Settings

log = logging.getLogger(__name__)
DEMO_SAMPLE = ("samples", "demo_conversation_16k.wav")  # a sentence, then one over its echo


def demo_sample() -> Path:
    from app import paths

    return paths.resource(*DEMO_SAMPLE)


def demo_settings(settings: Settings | None = None) -> Settings:
    """``settings`` (default: the defaults) with what the demo needs: the echo engine, always
    listening, the simulated devices."""
    data = (settings or Settings()).model_dump()
    data["engine"]["kind"] = "echo"
    data["turn"]["mode"] = "always_listening"
    data["audio"]["input_device"] = data["audio"]["output_device"] = None
    return Settings.model_validate(data)


class SimulatedConversation:
    """Implements :class:`app.events.ConversationPort`; ``start()`` runs the conversation on
    a thread of its own and returns at once; ``finished`` is set when it is over (its
    ``result`` then holds the measured turns, or ``error`` what went wrong). With
    ``engine_factory`` the engine the settings name is built (and rebuilt) as in the app."""

    def __init__(self, settings: Settings, microphone: SimulatedMicrophone, *,
                 engine: Engine | None = None, speed: float | None = None,
                 options: SimulationOptions | None = None,
                 engine_factory: Callable[[Settings], Engine] | None = None) -> None:
        from app.engine.echo import EchoEngine

        options = options or SimulationOptions()
        if speed is not None:
            options = replace(options, speed=speed)
        self._simulation = Simulation(settings, engine or EchoEngine(), microphone, options,
                                      engine_factory=engine_factory,
                                      load_engine=engine_factory is not None
                                      and settings.engine.kind != "echo")
        self.pipeline = self._simulation.pipeline
        self.finished = threading.Event()
        self.result: SimulationResult | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def mic_waveform(self) -> ev.WaveformSource:
        return self.pipeline.mic_waveform

    @property
    def reply_waveform(self) -> ev.WaveformSource:
        return self.pipeline.reply_waveform

    def submit(self, command: ev.Command) -> None:
        self.pipeline.submit(command)

    def subscribe(self, sink: Callable[[ev.PipelineEvent], None]) -> None:
        self.pipeline.subscribe(sink)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="simulated-conversation",
                                            daemon=True)
            self._thread.start()

    def close(self, timeout_s: float = 5.0) -> bool:
        """Stop the conversation (a Shutdown ends the simulation loop) and wait for the release."""
        self.pipeline.submit(ev.Shutdown())
        if self._thread is not None and not self.finished.wait(timeout_s):
            return False
        return self.pipeline.close(timeout_s)

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            self.result = self._simulation.run()
        except BaseException as exc:  # reported to whoever waits on ``finished``
            log.exception("the simulated conversation failed")
            self.error = exc
        finally:
            self.finished.set()


def demo_conversation(settings: Settings | None = None, speed: float | None = 4.0,
                      sample: Path | None = None) -> SimulatedConversation:
    """The bundled demo conversation with the echo engine, ``speed`` × real time."""
    microphone = SimulatedMicrophone.from_wav(sample or demo_sample())
    return SimulatedConversation(demo_settings(settings), microphone, speed=speed)
