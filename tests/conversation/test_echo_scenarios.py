"""The whole voice loop in a simulated room whose microphone hears the speaker: echo
cancellation, half-duplex, live mode switches, barge-ins over echo, the acoustic check."""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
from voice_helpers import duration, speech, track

from app.audio.aec import AecStage
from app.audio.simulated import SimulatedMicrophone
from app.audio.simulated_echo import SimulatedEcho
from app.conversation.pipeline_turns import PipelineTurns
from app.conversation.simulation import SimulationOptions, SimulationResult, run_simulation
from app.conversation.turn_actions import DuckSet
from app.engine.echo import EchoEngine
from app.events import (
    AcousticCheckFinished,
    ApplySettings,
    ErrorReported,
    FalseInterruptionDetected,
    ReplyFinished,
    ReplyStarted,
    RunAcousticCheck,
    UserSpeechStarted,
)
from app.paths import config_dir
from app.settings import Settings
from app.vad.energy import EnergyScorer

# End of turn by silence: these tests are about other things (the end-of-turn model has
# its own tests in test_smart_endpoint.py and below).
PLAIN = Settings().with_value("vad.smart_endpoint", False)

NAMES = ("question", "hello", "sea", "stop")


def talk(pcm: np.ndarray, echo: SimulatedEcho | None, mode: str = "automatic",
         **options: object) -> SimulationResult:
    settings = (PLAIN.with_value("echo.mode", mode)
                .with_value("engine.speculative_start", False))
    options.setdefault("charge_compute", False)
    return run_simulation(settings, EchoEngine(), SimulatedMicrophone(pcm, 16000),
                          SimulationOptions(echo=echo, **options))  # type: ignore[arg-type]


def replies(count: int) -> np.ndarray:
    """The person says ``count`` things, each time waiting until the reply is over."""
    parts, at = [], 0.5
    for index in range(count):
        name = NAMES[index % 4]
        parts.append((at, speech(name)))
        at += 2 * duration(name) + 0.6 + 1.2
    return track(parts, at + 1.0)


def of(result: SimulationResult, kind: type) -> list:
    return [e for e in result.events if isinstance(e, kind)]


def interrupted(result: SimulationResult) -> int:
    return sum(e.interrupted for e in of(result, ReplyFinished))


@pytest.mark.slow
@pytest.mark.parametrize(("delay_ms", "gain_db"), [(20, 0.0), (120, 0.0), (20, -10.0),
                                                   (120, -10.0)])
def test_twenty_replies_on_speakers_never_interrupt_or_answer_themselves(
        delay_ms: float, gain_db: float) -> None:
    result = talk(replies(20), SimulatedEcho(delay_ms, gain_db), record_output=False)
    assert len(of(result, UserSpeechStarted)) == 20  # no turn started by the echo
    assert len(of(result, ReplyFinished)) == 20 and interrupted(result) == 0
    assert result.echo["erle_db"] > 20


def test_without_the_canceller_the_same_room_interrupts_itself() -> None:
    result = talk(replies(3), SimulatedEcho(60, -6.0), mode="headset", record_output=False)
    assert interrupted(result) >= 3  # (the 26 dB duck now keeps it from answering itself too)


def test_with_the_canceller_a_short_run_in_a_loud_room_stays_clean() -> None:
    result = talk(replies(4), SimulatedEcho(60, 0.0), record_output=False)
    assert len(of(result, UserSpeechStarted)) == 4 and interrupted(result) == 0
    assert result.summary()["false_interruptions"] == result.false_interruptions


def barge_ins() -> tuple[np.ndarray, list[float]]:
    """Two plain turns, then three sentences each talked over 0.6 s into its reply."""
    parts, truth, at = [], [], 0.5
    for name in ("question", "hello"):
        parts.append((at, speech(name)))
        at += 2 * duration(name) + 0.6 + 1.2
    for name in ("question", "sea", "hello"):
        parts.append((at, speech(name)))
        over = at + duration(name) + 0.53 + 0.6
        parts.append((over, speech("stop")))
        truth.append(over)
        at = over + 2 * duration("stop") + 0.6 + 1.5
    return track(parts, at + 1.0), truth


def test_barge_ins_over_the_echo_still_stop_the_reply_quickly() -> None:
    pcm, truth = barge_ins()
    result = talk(pcm, SimulatedEcho(60, -6.0), record_output=False)
    records = [r.barge_in for r in result.records if r.barge_in is not None]
    assert len(records) == 3
    assert statistics.median(r.stop_latency_ms for r in records) <= 150
    from_truth = [(r.silent_s - t) * 1000 for r, t in zip(records, truth, strict=True)]
    assert statistics.median(from_truth) <= 250  # the canceller delays the onset a little
    assert len(of(result, UserSpeechStarted)) == 8 and result.false_interruptions == 0


def test_half_duplex_does_not_listen_while_it_speaks() -> None:
    over = 0.5 + duration("question") + 0.53 + 0.5
    after = over + duration("question") + 1.5
    pcm = track([(0.5, speech("question")), (over, speech("stop")), (after, speech("sea"))],
                after + duration("sea") + 3.0)
    result = talk(pcm, SimulatedEcho(60, 0.0), mode="half_duplex")
    starts = [e.t_s for e in of(result, UserSpeechStarted)]
    assert len(starts) == 2 and starts[1] == pytest.approx(after, abs=0.1)
    assert interrupted(result) == 0
    assert not result.echo["canceller"]


def test_the_echo_mode_switches_live() -> None:
    pcm = replies(6)
    fourth = 0.5 + sum(2 * duration(NAMES[i]) + 1.8 for i in range(3))
    switch_at = fourth - 0.8
    result = talk(pcm, SimulatedEcho(60, -6.0), mode="headset", record_output=False,
                  commands=((switch_at, ApplySettings(
                      PLAIN.with_value("engine.speculative_start", False))),))
    before = [e.turn_id for e in of(result, ReplyStarted) if e.t_s < switch_at]
    heard = {e.turn_id: e.heard_ms for e in of(result, ReplyFinished)}
    # the echo cut every early reply short (by a barge-in, or a burst of it the VAD was sure
    # of for 96 ms was a turn of its own, its reply as short)
    assert len(before) >= 6 and all(heard[turn] < 300 for turn in before)
    assert interrupted(result) >= 1
    late = [r for r in result.records if r.user_onset_s > switch_at + 0.5]
    assert len(late) == 3 and all(r.barge_in is None for r in late)
    assert all(heard[r.turn_id] > 1000 for r in late)  # played out once the canceller works
    assert result.echo["mode"] == "automatic" and result.echo["canceller"]


def test_the_acoustic_check_measures_stores_and_feeds_the_delay() -> None:
    quiet = np.random.default_rng(1).normal(0, 1e-3, 3 * 16000).astype(np.float32)
    result = talk(quiet, SimulatedEcho(150, -6.0), commands=((0.5, RunAcousticCheck()),))
    [check] = of(result, AcousticCheckFinished)
    assert check.ok and check.echo_detected and check.recommended_mode == "automatic"
    assert check.delay_ms == pytest.approx(150, abs=2)
    assert check.round_trip_ms == pytest.approx(150 + 10, abs=2)  # + the output latency
    assert check.echo_return_loss_db == pytest.approx(6, abs=2)
    assert (check.input_device, check.output_device) == ("Simulated microphone",
                                                         "Simulated speaker")
    stored = json.loads((config_dir() / "acoustic_checks.json").read_text())
    entry = stored["Simulated microphone → Simulated speaker"]
    assert entry["delay_ms"] == pytest.approx(150, abs=2)
    assert result.echo["measured_delay_ms"] == pytest.approx(150, abs=2)
    assert result.echo["coarse_delay_ms"] == pytest.approx(90, abs=2)  # 60 ms margin
    assert not of(result, UserSpeechStarted)  # the chirp was not taken for speech
    # The next session on the same devices starts with that delay, and it works.
    later = talk(replies(2), SimulatedEcho(150, -6.0), record_output=False)
    assert later.echo["coarse_delay_ms"] == pytest.approx(90, abs=2)
    assert interrupted(later) == 0 and len(of(later, UserSpeechStarted)) == 2


def test_the_check_stops_a_reply_first_and_finds_no_echo_on_a_headset() -> None:
    pcm = track([(0.3, speech("question"))], 0.3 + 2 * duration("question") + 4.0)
    check_at = 0.3 + duration("question") + 0.53 + 0.4  # while the reply plays
    result = talk(pcm, None, commands=((check_at, RunAcousticCheck()),))
    assert interrupted(result) == 1
    [check] = of(result, AcousticCheckFinished)
    assert check.ok and not check.echo_detected and check.recommended_mode == "headset"
    assert "did not hear" in check.message


def test_an_unavailable_canceller_is_reported_and_the_conversation_goes_on() -> None:
    def broken():
        raise OSError("libwebrtc: cannot open shared object file")

    result = run_simulation(PLAIN, EchoEngine(), SimulatedMicrophone(replies(1), 16000),
                            SimulationOptions(charge_compute=False),
                            echo_canceller=AecStage("headset", kernel_factory=broken))
    [error] = of(result, ErrorReported)
    assert "Echo cancellation is not available" in error.message and "headset" in error.action
    assert len(result.records) == 1 and result.records[0].first_audible_s is not None


def test_a_short_noise_during_a_reply_is_a_counted_false_interruption() -> None:
    rate = 16000
    pcm = np.zeros(int(4.0 * rate), np.float32)
    pcm[int(0.3 * rate):int(0.9 * rate)] = 0.3 * np.sin(np.arange(int(0.6 * rate)) * 0.15)
    pcm[int(1.8 * rate):int(1.82 * rate)] = 0.3  # a 20 ms knock (one VAD frame) over the reply
    result = run_simulation(
        PLAIN.with_value("engine.speculative_start", False)
        .with_value("echo.mode", "headset"), EchoEngine(), SimulatedMicrophone(pcm, rate),
        SimulationOptions(charge_compute=False), scorer=EnergyScorer())
    [false] = of(result, FalseInterruptionDetected)
    assert false.turn_id == 1 and not false.reply_stopped and false.session_count == 1
    assert interrupted(result) == 0 and result.summary()["false_interruptions"] == 1
    reply_start = of(result, ReplyStarted)[0].t_s
    assert reply_start < 1.8
    peaks = np.abs(result.output[76800:105600]).reshape(-1, 480).max(1)  # 1.6-2.2 s, 10 ms
    last = int(np.flatnonzero(peaks > 0.25)[-1])  # the reply's last full-volume block
    assert peaks[:10].min() > 0.25  # full volume before the knock ...
    assert peaks.min() == 0.0  # ... silenced at once (a headset: no echo to cancel) ...
    # ... for as long as it lasted and the 150 ms a dip inside speech may last ...
    assert np.count_nonzero(peaks[:last] < 0.1) <= 24
    assert np.count_nonzero(peaks[:last] == 0.0) >= 5
    # ... and back to full volume for the reply's last 40 ms, after 2.05 s (where the reply
    # ends moves with the turn's end, which may fall on a 10 ms sound block)
    assert last >= 45 and peaks[last - 3:last + 1].min() > 0.25


@pytest.mark.parametrize(("echo_power_bound", "silent"), [(0.0, True), (1e-6, False)])
def test_a_duck_is_silent_only_where_no_echo_can_reach_the_microphone(
        echo_power_bound: float, silent: bool) -> None:
    """Muted and brought back in full, a first reply's return made the cold canceller's
    residue stop it (RT60 0.8 s room, real-speech bench): over an echo the duck is 26 dB."""
    calls: list[tuple[bool, bool]] = []
    player = SimpleNamespace(set_ducked=lambda ducked, silent: calls.append((ducked, silent)))
    pipeline = SimpleNamespace(
        _io=SimpleNamespace(player=player),
        _listener=SimpleNamespace(echo_canceller=SimpleNamespace(
            echo_power_bound=echo_power_bound)))
    PipelineTurns._on_duck(pipeline, DuckSet(True))  # type: ignore[arg-type]
    PipelineTurns._on_duck(pipeline, DuckSet(False))  # type: ignore[arg-type]
    assert calls == [(True, silent), (False, silent)]


def test_no_check_while_someone_is_talking() -> None:
    pcm = track([(0.3, speech("question"))], 0.3 + 2 * duration("question") + 2.0)
    result = talk(pcm, SimulatedEcho(60, -6.0), commands=((1.0, RunAcousticCheck()),))
    [check] = of(result, AcousticCheckFinished)
    assert not check.ok and "quiet moment" in check.message
    assert len(result.records) == 1 and interrupted(result) == 0  # the turn went on
