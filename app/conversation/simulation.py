"""Run the real pipeline on simulated devices: a WAV in, a WAV out, one clock.

Used by the ``converse`` command, the voice-loop benchmark and the tests. Each step of
``block_ms``: advance the clock (virtual) or wait for it (``realtime``), deliver due push-to-talk
presses, deliver the captured block, let the voice loop and the engine worker act on it, then
render the next output block. The run ends once the input is over and nobody has had the floor
for ``settle_s`` (or after ``max_tail_s``). See :mod:`app.conversation.clock` for how engine
compute is charged to the virtual clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.audio.echo_canceller import EchoCanceller
from app.audio.simulated import DeviceFailure, SimulatedBackend, SimulatedMicrophone
from app.audio.simulated_echo import SimulatedEcho
from app.conversation.clock import VirtualClock, WallClock
from app.conversation.endpointing import TurnCompleteness
from app.conversation.metrics import summarize
from app.conversation.pipeline import Pipeline
from app.engine.base import Engine, EngineInfo
from app.events import (
    Command,
    PipelineEvent,
    PressToTalk,
    ReleaseToTalk,
    TurnMeasured,
    TurnRecord,
)
from app.settings import Settings
from app.vad.base import SpeechScorer


@dataclass(frozen=True)
class SimulationOptions:
    block_ms: float = 10.0  # device callback period (input and output)
    output_rate_hz: int = 48000
    output_latency_ms: float = 10.0  # output callback → DAC
    realtime: bool = False  # pace to the wall clock instead of running ahead
    charge_compute: bool = True  # engine wall time costs virtual time (see clock.py)
    push_to_talk: tuple[tuple[float, float], ...] = ()  # (press_s, release_s) pairs
    commands: tuple[tuple[float, Command], ...] = ()  # UI commands submitted at given times
    failures: tuple[DeviceFailure, ...] = ()
    input_devices: tuple[str, ...] = ("Simulated microphone",)
    output_devices: tuple[str, ...] = ("Simulated speaker",)
    settle_s: float = 0.5
    max_tail_s: float = 60.0
    record_output: bool = True
    # On the virtual clock: None runs as fast as it can; a number paces the run to that many
    # times real time (the GUI demo, so waveforms and events arrive at a watchable pace).
    speed: float | None = None
    echo: SimulatedEcho | None = None  # the speaker comes back into the microphone


@dataclass
class SimulationResult:
    records: list[TurnRecord]
    events: list[PipelineEvent]
    output: np.ndarray = field(repr=False)  # the speaker recording on the input's timeline
    output_rate_hz: int
    input_duration_s: float
    simulated_s: float
    wall_s: float
    underruns: int
    engine_info: EngineInfo
    endpoint_silence_ms: float
    charged_compute_s: float = 0.0
    false_interruptions: int = 0
    replies_withdrawn: int = 0  # early ends by the model taken back (the person went on)
    echo: dict[str, Any] = field(default_factory=dict)  # echo mode, canceller, delay, ERLE

    def summary(self) -> dict[str, Any]:
        return summarize(self.records, self.endpoint_silence_ms, self.false_interruptions,
                         self.replies_withdrawn)


def _ptt_commands(pairs: tuple[tuple[float, float], ...]) -> list[tuple[float, Command]]:
    commands: list[tuple[float, Command]] = []
    for press_s, release_s in pairs:
        if release_s <= press_s:
            raise ValueError(f"push-to-talk {press_s}-{release_s}: release must follow press")
        commands += [(press_s, PressToTalk()), (release_s, ReleaseToTalk())]
    return commands  # the caller sorts them with the other commands


class Simulation:
    """One conversation through the real pipeline on simulated devices.

    The pipeline exists from the start, so a caller can subscribe to it (or hand it to the UI
    as a ConversationPort) before :meth:`run` drives it, on whichever thread calls ``run``.
    With ``engine_factory`` settings changes rebuild the engine as in the app (and with
    ``load_engine`` the engine the settings name is built at start).
    """

    def __init__(self, settings: Settings, engine: Engine, microphone: SimulatedMicrophone,
                 options: SimulationOptions | None = None, *,
                 scorer: SpeechScorer | None = None, metrics_jsonl: Path | None = None,
                 echo_canceller: EchoCanceller | None = None,
                 engine_factory: Callable[[Settings], Engine] | None = None,
                 load_engine: bool = False,
                 end_of_turn: TurnCompleteness | None = None) -> None:
        self.settings = settings
        self.options = options = options or SimulationOptions()
        self.microphone = microphone
        self.clock = (WallClock(device_times_are_monotonic=False) if options.realtime
                      else VirtualClock(options.charge_compute))
        self.backend = SimulatedBackend(microphone, options.output_rate_hz,
                                        options.output_latency_ms, options.input_devices,
                                        options.output_devices, options.failures,
                                        record_output=options.record_output, echo=options.echo)
        self.pipeline = Pipeline(settings, engine, self.backend, clock=self.clock,
                                 scorer=scorer, block_ms=options.block_ms,
                                 metrics_jsonl=metrics_jsonl, echo_canceller=echo_canceller,
                                 engine_factory=engine_factory, load_engine=load_engine,
                                 end_of_turn=end_of_turn)

    def run(self, on_event: Callable[[PipelineEvent], None] | None = None,
            keep_events: bool = True) -> SimulationResult:
        """Drive the conversation to its end (or a Shutdown); the engine is closed afterwards."""
        options, pipeline = self.options, self.pipeline
        records: list[TurnRecord] = []
        events: list[PipelineEvent] = []

        def collect(event: PipelineEvent) -> None:
            if keep_events:
                events.append(event)
                if isinstance(event, TurnMeasured):
                    records.append(event.record)
            if on_event is not None:
                on_event(event)

        pipeline.subscribe(collect)
        commands = sorted(_ptt_commands(options.push_to_talk) + list(options.commands),
                          key=lambda item: item[0])
        pipeline.start(threaded=False)
        if isinstance(self.clock, WallClock):
            self.clock.restart()  # setup time must not eat into the paced timeline
        started = time.perf_counter()
        now = 0.0
        try:
            now = _drive(pipeline, self.backend, self.clock, commands,
                         self.microphone.duration_s, options)
        finally:
            pipeline.stop()
        return SimulationResult(
            records=records, events=events, output=self.backend.room.to_array(now),
            output_rate_hz=options.output_rate_hz, input_duration_s=self.microphone.duration_s,
            simulated_s=now, wall_s=time.perf_counter() - started, underruns=pipeline.underruns,
            engine_info=pipeline.engine_info,
            endpoint_silence_ms=self.settings.vad.endpoint_silence_ms,
            charged_compute_s=getattr(self.clock, "charged_s", 0.0),
            false_interruptions=pipeline.metrics.false_interruptions,
            replies_withdrawn=pipeline.metrics.replies_withdrawn,
            echo=pipeline.echo.status())


def run_simulation(settings: Settings, engine: Engine, microphone: SimulatedMicrophone,
                   options: SimulationOptions | None = None, *,
                   scorer: SpeechScorer | None = None,
                   on_event: Callable[[PipelineEvent], None] | None = None,
                   keep_events: bool = True, metrics_jsonl: Path | None = None,
                   echo_canceller: EchoCanceller | None = None,
                   end_of_turn: TurnCompleteness | None = None) -> SimulationResult:
    """Run one conversation; the engine is closed afterwards."""
    simulation = Simulation(settings, engine, microphone, options, scorer=scorer,
                            metrics_jsonl=metrics_jsonl, echo_canceller=echo_canceller,
                            end_of_turn=end_of_turn)
    return simulation.run(on_event, keep_events)


def _drive(pipeline: Pipeline, backend: SimulatedBackend, clock: VirtualClock | WallClock,
           commands: list[tuple[float, Command]], duration_s: float,
           options: SimulationOptions) -> float:
    """The step loop; returns the simulated time reached."""
    virtual = isinstance(clock, VirtualClock)
    block_s = options.block_ms / 1000.0
    pace = WallClock(device_times_are_monotonic=False) if options.speed else None
    step, now = 0, 0.0
    quiet_since: float | None = None
    while not pipeline.stopped:
        step += 1
        now = step * block_s
        if isinstance(clock, VirtualClock):
            if pace is not None and options.speed:
                pace.sleep_until(now / options.speed)
            clock.advance_to(now)
            clock.settle()
        else:
            clock.sleep_until(now)
        while commands and commands[0][0] <= now:
            pipeline.submit(commands.pop(0)[1])
        backend.deliver_input(now)
        pipeline.pump()
        if virtual:
            clock.settle()  # type: ignore[union-attr]
        pipeline.pump()
        backend.render_output(now, block_s)
        if now < duration_s or commands:
            continue
        if now >= duration_s + options.max_tail_s:
            return now
        if pipeline.is_quiet():
            quiet_since = now if quiet_since is None else quiet_since
            if now - quiet_since >= options.settle_s:
                return now
        else:
            quiet_since = None
    return now
