"""1,000 turns with barge-ins on the simulated clock: memory and threads stay flat."""

from __future__ import annotations

import gc
import threading

import numpy as np
import psutil
import pytest

from app.audio.simulated import SimulatedMicrophone
from app.conversation.simulation import SimulationOptions, run_simulation
from app.engine.echo import EchoEngine
from app.events import PipelineEvent, TurnMeasured
from app.settings import Settings
from app.vad.energy import EnergyScorer

RATE = 16000


def burst(seconds: float, hz: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def one_cycle() -> np.ndarray:
    """A turn, then a second utterance that talks over its reply, then that reply plays out."""
    cycle = np.zeros(int(1.5 * RATE), np.float32)
    cycle[: int(0.3 * RATE)] = burst(0.3, 220)
    start_b = int(0.55 * RATE)  # the first reply starts at about 0.42 s
    cycle[start_b:start_b + int(0.3 * RATE)] = burst(0.3, 330)
    return cycle


@pytest.mark.slow
def test_a_thousand_turns_with_barge_ins_keep_memory_and_threads_flat() -> None:
    settings = (Settings().with_value("vad.endpoint_silence_ms", 100)
                .with_value("vad.pre_roll_ms", 100)
                .with_value("engine.speculative_start", False))
    process = psutil.Process()
    threads_before = threading.active_count()
    samples: dict[int, tuple[int, int]] = {}
    counts = {"turns": 0, "barge_ins": 0}

    def watch(event: PipelineEvent) -> None:
        if not isinstance(event, TurnMeasured):
            return
        counts["turns"] += 1
        counts["barge_ins"] += event.record.barge_in is not None
        if counts["turns"] in (200, 1000):
            gc.collect()
            samples[counts["turns"]] = (process.memory_info().rss, threading.active_count())

    # 1,006 turns are spoken: the barge-ins of the first few cycles fall in the echo
    # canceller's warm-up (0.3 s replies do not yet tell whether the mic hears the speaker),
    # so they only duck the reply.
    microphone = SimulatedMicrophone(one_cycle(), RATE, repeat=503)
    result = run_simulation(settings, EchoEngine(), microphone,
                            SimulationOptions(block_ms=32.0, charge_compute=False,
                                              record_output=False),
                            scorer=EnergyScorer(), on_event=watch, keep_events=False)
    assert counts["turns"] >= 1000 and counts["barge_ins"] >= 450
    rss_200, threads_200 = samples[200]
    rss_1000, threads_1000 = samples[1000]
    assert threads_1000 == threads_200 == threads_before + 1  # just the engine worker
    assert rss_1000 - rss_200 < 8 * 2**20, f"grew {(rss_1000 - rss_200) / 2**20:.1f} MiB"
    assert threading.active_count() == threads_before  # the worker was joined
    assert result.underruns == 0
