"""Sound first (issue 14), the whole loop on simulated devices: the listener's sound gate hands
10 ms blocks to the turn controller with the VAD's frames. A word the VAD scores only weakly
stops a reply where no echo can be in the sound; rain alone never ducks one."""

from __future__ import annotations

import numpy as np
import pytest

from app.audio.simulated import SimulatedMicrophone
from app.cli.turn_corpus import load_corpus, looped
from app.conversation.simulation import SimulationOptions, SimulationResult, run_simulation
from app.engine.echo import EchoEngine
from app.events import FalseInterruptionDetected, ReplyFinished
from app.settings import Settings
from app.vad.energy import EnergyScorer

RATE = 16000
HEADSET = (Settings().with_value("vad.smart_endpoint", False)
           .with_value("engine.speculative_start", False).with_value("echo.mode", "headset"))


def tone(seconds: float, amplitude: float) -> np.ndarray:
    return (amplitude * np.sin(np.arange(int(seconds * RATE)) * 0.15)).astype(np.float32)


def converse(pcm: np.ndarray) -> SimulationResult:
    # Loud (-13 dBFS) scores 0.98; -28 dBFS scores 0.27: weakly voiced, never an onset.
    return run_simulation(HEADSET, EchoEngine(), SimulatedMicrophone(pcm, RATE),
                          SimulationOptions(charge_compute=False),
                          scorer=EnergyScorer(threshold_dbfs=-25.0))


def of(result: SimulationResult, kind: type) -> list:
    return [e for e in result.events if isinstance(e, kind)]


def test_a_word_the_vad_scores_weakly_stops_the_reply_in_headset_mode() -> None:
    """Corpus: short Arabic words silero scored 0.15-0.45 never stopped the reply."""
    pcm = np.zeros(4 * RATE, np.float32)
    pcm[int(0.3 * RATE):int(0.9 * RATE)] = tone(0.6, 0.3)  # the question
    reply_start = converse(pcm).records[0].first_audible_s
    assert reply_start is not None
    at = reply_start + 0.2
    pcm[int(at * RATE):int(at * RATE) + int(0.3 * RATE)] = tone(0.3, 0.056)  # a short word
    result = converse(pcm)
    first, second = result.records
    assert first.first_audible_s == pytest.approx(reply_start)
    assert first.barge_in is not None and first.barge_in.onset_s == pytest.approx(at, abs=0.011)
    assert first.barge_in.stop_latency_ms <= 150
    assert of(result, ReplyFinished)[0].interrupted
    assert second.user_onset_s == pytest.approx(at, abs=0.011)  # the word is the next turn
    assert not of(result, FalseInterruptionDetected)


def test_rain_alone_never_ducks_a_reply() -> None:
    """The gate's floor is the rain's own level: its drops are no sound (the VAD, here a
    level scorer, gives rain at -40 dBFS 0.007)."""
    rain = load_corpus()["noise_rain"].pcm
    pcm = looped(rain, 5 * RATE)
    pcm *= 10 ** (-40 / 20) / np.sqrt(np.mean(pcm.astype(np.float64) ** 2))
    pcm[int(0.3 * RATE):int(0.9 * RATE)] += tone(0.6, 0.3)
    result = converse(pcm)
    record = result.records[0]
    assert record.first_audible_s is not None and record.barge_in is None
    assert of(result, ReplyFinished) and not of(result, ReplyFinished)[0].interrupted
    assert not of(result, FalseInterruptionDetected)
    # (a duck given back is a counted false interruption: none means never ducked)
