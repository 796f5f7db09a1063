"""The whole voice loop on simulated devices with real (espeak-ng) speech and silero VAD."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from voice_helpers import RATE, RecordingEngine, duration, speech, track

from app.audio.resample import resample
from app.audio.simulated import DeviceFailure, SimulatedMicrophone
from app.conversation.simulation import SimulationOptions, SimulationResult, run_simulation
from app.engine.base import EngineEvent, ReplyText, UserTurn
from app.engine.echo import EchoEngine
from app.events import (
    ApplySettings,
    ConversationState,
    DeviceLost,
    ErrorReported,
    ReplyFinished,
    ReplyStarted,
    SetMuted,
    StateChanged,
    TranscriptUpdated,
    UserSpeechStarted,
    UserTurnEnded,
)
from app.settings import Settings
from app.vad.base import FRAME_S, FRAME_SAMPLES
from app.vad.sound import END_MAX_SHIFT_S

# End of turn by silence: these tests are about other things (the end-of-turn model has
# its own tests in test_smart_endpoint.py and below).
PLAIN = Settings().with_value("vad.smart_endpoint", False)

OUT_RATE = 48000


def converse(pcm: np.ndarray, settings: Settings | None = None, engine=None, rate: int = 16000,
             **options: object) -> SimulationResult:
    options.setdefault("charge_compute", False)
    return run_simulation(settings or PLAIN, engine or EchoEngine(),
                          SimulatedMicrophone(pcm, rate),
                          SimulationOptions(**options))  # type: ignore[arg-type]


def of(result: SimulationResult, kind: type) -> list:
    return [e for e in result.events if isinstance(e, kind)]


def similarity(played: np.ndarray, clip: np.ndarray) -> float:
    """Peak normalised cross-correlation over lags of up to 0.2 s (the echo keeps a margin)."""
    best = np.correlate(played, clip, mode="full").max() if len(played) else 0.0
    return float(best / (np.linalg.norm(clip) * np.linalg.norm(played) + 1e-12))


def loudness(pcm: np.ndarray, start_s: float, end_s: float) -> float:
    part = pcm[int(start_s * OUT_RATE):int(end_s * OUT_RATE)]
    return float(np.max(np.abs(part))) if len(part) else 0.0


def test_one_turn_is_answered_after_the_endpoint_and_the_hooks_are_called_in_order() -> None:
    clip = speech("question")
    engine = RecordingEngine()
    result = converse(track([(0.5, clip)], 0.5 + duration("question") + 3.0), engine=engine)
    [record] = result.records
    assert record.user_onset_s == pytest.approx(0.5, abs=0.08)
    assert record.user_end_s == pytest.approx(0.5 + duration("question"), abs=0.12)
    assert 0.5 <= record.endpoint_s - record.user_end_s <= 0.55
    assert record.first_audible_s is not None and record.first_audible_s > record.endpoint_s
    assert 500 <= record.response_latency_ms <= 560
    assert record.stages_ms["endpoint_wait"] >= 500 and "first_chunk" in record.stages_ms
    # the speaker played the user's words back, starting at the first audible sample
    heard = resample(result.output[int(record.first_audible_s * OUT_RATE):], OUT_RATE, 16000)
    assert similarity(heard[: len(clip) + 3200], clip) > 0.9
    assert loudness(result.output, 0, record.first_audible_s - 0.001) == 0.0
    # hooks: user audio fed in order (pre-roll first), then respond with exactly that audio
    kinds = [kind for kind, _ in engine.calls]
    assert kinds[0] == "feed" and kinds.count("respond") >= 1 and kinds[-1] == "heard"
    final = engine.turns[-1]
    np.testing.assert_array_equal(final.pcm_16k[: sum(len(p) for p in engine.fed[1][:3])],
                                  np.concatenate(engine.fed[1][:3]))
    assert len(final.pcm_16k) / 16000 >= record.user_end_s - record.user_onset_s + 0.3
    [(turn_id, samples, rate)] = engine.heard
    assert (turn_id, rate) == (1, 24000) and samples == pytest.approx(record.heard_ms * 24, 1)
    states = [e.state for e in of(result, StateChanged)]
    assert states[0] == ConversationState.LISTENING and states[-1] == ConversationState.LISTENING
    assert ConversationState.SPEAKING in states and len(of(result, UserSpeechStarted)) == 1


def test_talking_over_the_reply_stops_it_cancels_the_engine_and_starts_a_new_turn() -> None:
    hello, stop = speech("hello"), speech("stop")
    reply_start = 0.5 + duration("hello") + 0.53
    pcm = track([(0.5, hello), (reply_start + 0.6, stop)],
                reply_start + 0.6 + duration("stop") + 3.0)
    engine = RecordingEngine(chunk_delay_ms=25)  # 1 s to generate: still busy when cut off
    # No echo in this simulation: the headset case. (In "automatic" the first second of the
    # first reply is the echo canceller's warm-up: tests/conversation/test_echo_scenarios.py.)
    settings = (PLAIN.with_value("engine.speculative_start", False)
                .with_value("echo.mode", "headset"))
    result = converse(pcm, settings, engine=engine, charge_compute=True)
    first, second = result.records
    barge = first.barge_in
    assert barge is not None
    assert barge.onset_s == pytest.approx(reply_start + 0.6, abs=0.08)
    assert barge.onset_s < barge.detected_s < barge.silent_s
    assert barge.stop_latency_ms <= 150
    assert 1 in engine.cancelled_turns
    assert loudness(result.output, barge.silent_s + 0.002, second.first_audible_s - 0.001) == 0
    finished = of(result, ReplyFinished)
    assert finished[0].interrupted and not finished[1].interrupted
    assert first.heard_ms == pytest.approx((barge.silent_s - first.first_audible_s) * 1000, abs=2)
    assert second.user_onset_s == pytest.approx(barge.onset_s)
    second_turn = engine.turns[-1]
    assert second_turn.turn_id == 2
    assert len(second_turn.pcm_16k) / 16000 >= second.user_end_s - second.user_onset_s + 0.3


def test_push_to_talk_turn_ends_at_release_and_a_press_during_the_reply_interrupts() -> None:
    question = speech("question")
    end = 0.5 + duration("question")
    settings = PLAIN.with_value("turn.mode", "push_to_talk")
    pcm = track([(0.5, question)], end + 4.0)
    result = converse(pcm, settings, push_to_talk=((0.3, end + 0.3), (end + 0.8, end + 1.0)))
    first = result.records[0]
    assert first.endpoint_s == pytest.approx(end + 0.3, abs=0.011)
    assert first.first_audible_s - first.endpoint_s <= 0.03
    assert first.barge_in is not None
    assert first.barge_in.onset_s == pytest.approx(end + 0.8, abs=0.011)
    assert first.barge_in.stop_latency_ms <= 30
    assert len(result.records) == 1  # the second press had no speech: no turn
    assert of(result, StateChanged)[-1].state == ConversationState.IDLE


@pytest.mark.parametrize("kind", ["silence", "steady_noise"])
def test_silence_or_steady_noise_starts_no_turn(kind: str) -> None:
    rng = np.random.default_rng(5)
    t = np.arange(6 * 16000) / 16000
    pcm = (np.zeros(len(t)) if kind == "silence" else
           rng.normal(0, 0.03, len(t)) + 0.1 * np.sin(2 * np.pi * 120 * t)).astype(np.float32)
    engine = RecordingEngine()
    result = converse(pcm, engine=engine)
    assert result.records == [] and engine.calls == []
    assert not np.any(result.output) and not of(result, UserSpeechStarted)


def two_turns() -> tuple[np.ndarray, float]:
    second_at = 0.5 + duration("hello") + 3.2
    return track([(0.5, speech("hello")), (second_at, speech("sea"))],
                 second_at + duration("sea") + 3.0), second_at


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (44100, 2), (48000, 2)])
def test_any_input_rate_and_stereo_give_the_same_turns(rate: int, channels: int) -> None:
    pcm, _ = two_turns()
    reference = converse(pcm)
    converted = resample(pcm, 16000, rate)
    if channels == 2:
        converted = np.stack([converted, 0.7 * converted], axis=1)
    result = converse(converted, rate=rate)
    assert len(result.records) == len(reference.records) == 2
    for got, want in zip(result.records, reference.records, strict=True):
        assert got.user_onset_s == pytest.approx(want.user_onset_s, abs=0.07)
        assert got.response_latency_ms == pytest.approx(want.response_latency_ms, abs=40)


@pytest.mark.parametrize("direction", ["output", "input"])
def test_a_device_that_vanishes_mid_reply_is_replaced_and_the_app_keeps_going(
        direction: str) -> None:
    pcm, _ = two_turns()
    mid_reply = 0.5 + duration("hello") + 0.53 + 0.5
    names = ("Simulated speaker", "Simulated headset")
    settings = PLAIN.with_value(f"audio.{direction}_device", "Simulated headset")
    devices = {f"{direction}_devices": names}
    result = converse(pcm, settings, failures=(DeviceFailure(direction, "Simulated headset",
                                                             mid_reply),), **devices)
    [lost] = of(result, DeviceLost)
    assert (lost.direction, lost.device_name, lost.fallback_name) == (
        direction, "Simulated headset", "Simulated speaker")
    assert lost.t_s == pytest.approx(mid_reply, abs=0.011)
    assert not of(result, ErrorReported)
    assert len(result.records) == 2 and result.records[1].first_audible_s is not None
    if direction == "output":  # the interrupted reply went on through the fallback speaker
        assert loudness(result.output, mid_reply + 0.02, mid_reply + 0.3) > 0.05


def test_losing_the_only_speaker_reports_an_error_and_turns_still_reach_the_engine() -> None:
    pcm, _ = two_turns()
    engine = RecordingEngine()
    failure = DeviceFailure("output", "Simulated speaker", 0.5 + duration("hello") + 1.0)
    result = converse(pcm, engine=engine, failures=(failure,))
    assert of(result, DeviceLost)[0].fallback_name is None
    assert "No speaker" in of(result, ErrorReported)[0].message
    assert [turn.turn_id for turn in engine.turns][-1] == 2
    assert of(result, ReplyFinished)[-1].heard_ms == 0.0


class FailsOnce(EchoEngine):
    def __init__(self) -> None:
        super().__init__()
        self.replies = 0

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        self.replies += 1
        for index, event in enumerate(super().respond(turn, cancel)):
            if self.replies == 1 and index == 3:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            yield event


def test_an_engine_exception_mid_reply_is_reported_and_the_next_turn_works() -> None:
    pcm, _ = two_turns()
    settings = PLAIN.with_value("engine.speculative_start", False)
    result = converse(pcm, settings, engine=FailsOnce())
    [error] = of(result, ErrorReported)
    assert "illegal memory access" in error.message and error.action
    assert len(result.records) == 2
    assert result.records[0].heard_ms > 0  # what had arrived before the failure still played
    assert result.records[1].first_audible_s is not None


def test_a_speculative_reply_stays_silent_and_is_dropped_when_the_user_goes_on() -> None:
    """'Hello, ... can you hear me?' has a 0.16 s pause: long enough to speculate at 0.1 s."""
    settings = PLAIN.with_value("engine.speculative_pause_ms", 100)
    engine = RecordingEngine()
    result = converse(track([(0.5, speech("hello"))], 0.5 + duration("hello") + 3), settings,
                      engine=engine)
    [record] = result.records
    speculative = [turn for turn in engine.turns if turn.speculative]
    assert len(speculative) >= 2  # one dropped at the pause, one confirmed at the end
    assert all(not turn.speculative for turn in engine.turns) is False
    assert engine.turns[-1].speculative  # the confirmed speculation is the reply
    dropped_at = len(speculative[0].pcm_16k)
    assert len(engine.turns[-1].pcm_16k) > dropped_at
    assert [k for k, _ in engine.calls].count("respond") == len(engine.turns)
    after_first = engine.calls.index(("respond", 1))
    assert ("feed", 1) in engine.calls[after_first:]  # the turn went on after the drop
    assert record.engine_first_audio_s < record.endpoint_s  # speculation paid off
    assert loudness(result.output, 0, record.first_audible_s - 0.001) == 0.0
    assert record.first_audible_s > record.endpoint_s
    [started] = of(result, ReplyStarted)
    assert started.turn_id == 1


def test_engine_time_is_charged_so_a_slow_engine_looks_slow() -> None:
    settings = PLAIN.with_value("engine.speculative_start", False)
    pcm = track([(0.5, speech("stop"))], 0.5 + duration("stop") + 3)
    slow = converse(pcm, settings, engine=EchoEngine(first_chunk_delay_ms=150),
                    charge_compute=True).records[0]
    fast = converse(pcm, settings).records[0]
    assert slow.engine_first_audio_s - slow.endpoint_s >= 0.15
    assert slow.response_latency_ms >= fast.response_latency_ms + 140
    assert fast.engine_first_audio_s - fast.endpoint_s < 0.02


def test_runs_without_compute_charging_are_bit_for_bit_repeatable() -> None:
    pcm, _ = two_turns()
    first, second = converse(pcm), converse(pcm)
    np.testing.assert_array_equal(first.output, second.output)

    def timeline(result: SimulationResult) -> list:  # the engine's own wall-clock stage aside
        return [replace(r, stages_ms={k: v for k, v in r.stages_ms.items()
                                      if k != "first_chunk"}) for r in result.records]

    assert timeline(first) == timeline(second) and len(first.records) == 2


def test_commands_mute_and_settings_apply_mid_conversation() -> None:
    pcm, second_at = two_turns()
    longer = PLAIN.with_value("vad.endpoint_silence_ms", 900)
    result = converse(pcm, commands=((second_at - 0.5, ApplySettings(longer)),))
    first, second = result.records
    assert first.stages_ms["endpoint_wait"] < 600 <= 900 <= second.stages_ms["endpoint_wait"]
    muted = converse(pcm, commands=((second_at - 0.5, SetMuted(True)),))
    assert len(muted.records) == 1
    assert of(muted, StateChanged)[-1].state == ConversationState.IDLE
    assert len(of(muted, UserTurnEnded)) == 1


def test_the_reply_is_audible_as_soon_as_the_player_has_its_start_buffer() -> None:
    settings = (PLAIN.with_value("audio.playback_start_ms", 300)
                .with_value("engine.speculative_start", False))
    pcm = track([(0.5, speech("sea"))], 0.5 + duration("sea") + 3)
    slow_start = converse(pcm, settings, engine=EchoEngine(chunk_delay_ms=20),
                          charge_compute=True).records[0]
    # 300 ms at 40 ms chunks every 20 ms of engine time: ~7 chunks ≈ 140 ms of buffering
    assert 100 <= slow_start.stages_ms["output_buffer"] <= 250


class TranscribingEcho(RecordingEngine):
    """The echo engine with a transcript pass per answered turn, run as idle work."""

    def __init__(self) -> None:
        super().__init__()
        self.queued: list[int] = []
        self.applied: list[Settings] = []

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        self.queued.append(turn.turn_id)
        yield from super().respond(turn, cancel)

    def has_idle_work(self) -> bool:
        return bool(self.queued)

    def idle_work(self, cancel: threading.Event) -> Iterator[EngineEvent | None]:
        while self.queued and not cancel.is_set():
            yield None
            turn_id = self.queued.pop(0)
            yield ReplyText(turn_id, f"words of turn {turn_id}", "user", final=True)

    def apply_settings(self, settings: Settings) -> None:
        self.applied.append(settings)


def test_idle_transcripts_reach_the_transcript_and_settings_apply_without_a_rebuild() -> None:
    pcm, second_at = two_turns()
    engine = TranscribingEcho()
    warmer = PLAIN.with_value("sampling.temperature", 0.9)
    result = converse(pcm, engine=engine, commands=((second_at - 0.5, ApplySettings(warmer)),))
    updates = [e for e in of(result, TranscriptUpdated) if e.role == "user"]
    assert {u.turn_id: u.text for u in updates} == {1: "words of turn 1", 2: "words of turn 2"}
    assert all(u.final for u in updates)
    assert [s.sampling.temperature for s in engine.applied] == [0.9]


@pytest.mark.parametrize("block_ms", [64.0, 128.0])
def test_several_vad_frames_per_pump_give_the_same_turns_and_barge_in(block_ms: float) -> None:
    """Device blocks longer than a VAD frame hand the controller several frames per pump
    (issue 22): the turns, their onsets and the barge-in are the same as with 10 ms blocks."""
    hello, stop = speech("hello"), speech("stop")
    reply_start = 0.5 + duration("hello") + 0.53
    pcm = track([(0.5, hello), (reply_start + 0.6, stop)],
                reply_start + 0.6 + duration("stop") + 3.0)
    settings = (PLAIN.with_value("engine.speculative_start", False)
                .with_value("echo.mode", "headset"))
    engine = RecordingEngine(chunk_delay_ms=25)
    small = converse(pcm, settings, engine=RecordingEngine(chunk_delay_ms=25),
                     charge_compute=True)
    large = converse(pcm, settings, engine=engine, charge_compute=True, block_ms=block_ms)
    assert len(large.records) == len(small.records) == 2
    for got, want in zip(large.records, small.records, strict=True):
        assert got.user_onset_s == pytest.approx(want.user_onset_s, abs=1e-6)
        assert got.user_end_s == pytest.approx(want.user_end_s, abs=1e-6)
        assert got.user_end_s + 0.5 - 1e-6 <= got.endpoint_s <= want.endpoint_s + block_ms / 1000
    barge = large.records[0].barge_in
    assert barge is not None and 1 in engine.cancelled_turns
    assert barge.onset_s == pytest.approx(small.records[0].barge_in.onset_s, abs=1e-6)
    assert engine.turns[-1].turn_id == 2


@pytest.mark.parametrize("block_ms", [10.0, 128.0])
def test_a_turn_cut_at_the_cap_is_not_restarted_with_its_old_onset(block_ms: float) -> None:
    """Issue 22: 7 s of steady sound with a 5 s cap. With 128 ms blocks (4 VAD frames per pump)
    the capped turn came back at once, twice, with onset 0.0."""
    from app.vad.energy import EnergyScorer

    t = np.arange(8 * 16000) / 16000
    pcm = (0.1 * np.sin(2 * np.pi * 220 * t) * (t < 7.0)).astype(np.float32)
    settings = (PLAIN.with_value("turn.max_user_turn_s", 5)
                .with_value("echo.mode", "headset"))
    result = run_simulation(settings, EchoEngine(), SimulatedMicrophone(pcm, 16000),
                            SimulationOptions(block_ms=block_ms, charge_compute=False,
                                              record_output=False), scorer=EnergyScorer())
    starts = of(result, UserSpeechStarted)
    assert [s.t_s for s in starts] == [0.0, pytest.approx(5.024)]
    ends = of(result, UserTurnEnded)
    assert len(ends) == 2 and ends[0].duration_s == pytest.approx(5.024)


class BrokenModel:
    def probability(self, pcm_16k: np.ndarray) -> float:
        raise RuntimeError("onnxruntime: invalid graph")


# With the end-of-turn model, on a headset: early replies from the first turn on (on speakers
# a session's first turns wait the warm-up silence: test_smart_endpoint.py).
SMART_HEADSET = Settings().with_values({"vad.smart_endpoint": True, "echo.mode": "headset"})


def test_the_end_of_turn_model_answers_a_finished_sentence_and_waits_through_a_pause() -> None:
    """Issue 23, the real smart-turn model on real speech (switched on; it is off by default):
    a finished sentence is answered well before the 500 ms silence; a 1 s thinking pause in the
    middle of the next one stays inside the turn."""
    from app.cli.turn_corpus import load_corpus

    clip = load_corpus()["en_f_slt_a0009"]
    end = clip.speech[-1][1]
    paused = clip.with_pause_at(1.28, 1.0)  # "He turned sharply, and | (1 s) faced Gregson"
    second_at = 0.5 + end + 3.0
    pcm = track([(0.5, clip.pcm), (second_at, paused.pcm)], second_at + len(paused.pcm) / RATE
                + 4.0)
    result = converse(pcm, SMART_HEADSET)
    first, second = result.records
    assert first.endpoint_decision is not None and first.endpoint_decision.by == "model"
    assert first.endpoint_decision.probability >= 0.85
    assert not first.endpoint_decision.waited_for_canceller  # a headset: nothing to learn
    assert first.first_audible_s - (0.5 + end) < 0.4  # the true end of speech → reply heard
    assert second.user_onset_s < second_at + 0.5 and second.user_end_s > second_at + 3.3
    assert len(of(result, UserSpeechStarted)) == 2  # the pause did not end the turn


def test_on_speakers_the_sessions_first_answer_waits_the_warm_up_silence_and_says_so() -> None:
    """Echo cancellation on (the default): before the first reply the canceller has nothing
    learnt, so the model's "finished" is held to the warm-up silence; the report says so."""
    from app.cli.turn_corpus import load_corpus

    clip = load_corpus()["en_f_slt_a0009"]
    end = clip.speech[-1][1]
    pcm = track([(0.5, clip.pcm)], 0.5 + end + 3.0)
    settings = Settings().with_values({"vad.smart_endpoint": True, "echo.mode": "automatic"})
    [first] = converse(pcm, settings).records
    decision = first.endpoint_decision
    assert decision is not None and decision.by == "model" and decision.waited_for_canceller
    assert decision.silence_ms >= settings.vad.smart_warmup_silence_ms


def test_a_broken_end_of_turn_model_leaves_the_end_of_turn_to_silence() -> None:
    clip = speech("question")
    result = run_simulation(Settings(), EchoEngine(), SimulatedMicrophone(
        track([(0.5, clip)], 0.5 + duration("question") + 3.0), 16000),
        SimulationOptions(charge_compute=False), end_of_turn=BrokenModel())
    [record] = result.records
    assert record.endpoint_decision is not None and record.endpoint_decision.by == "silence"
    assert record.endpoint_decision.probability is None
    assert 0.5 <= record.endpoint_s - record.user_end_s <= 0.55


class AlwaysFinished:
    """An end-of-turn model that calls every pause the end (as smart-turn does at many clause
    pauses of read speech)."""

    def probability(self, pcm_16k: np.ndarray) -> float:
        return 0.97


def test_an_early_end_taken_back_withdraws_the_reply_and_keeps_the_sentence_whole() -> None:
    """Issue 23: "He turned sharply, | (400 ms) and faced Gregson across the table." The model
    ends the turn at the comma and the reply starts; the person goes on: the reply stops, the
    engine never hears it was played, and the whole sentence is one turn, answered once."""
    from app.cli.turn_corpus import load_corpus

    clip = load_corpus()["en_f_slt_a0009"].with_pauses(0.4, 1)
    pcm = track([(0.5, clip.pcm)], 0.5 + len(clip.pcm) / RATE + 3.0)
    engine = RecordingEngine()
    result = run_simulation(SMART_HEADSET, engine, SimulatedMicrophone(pcm, 16000),
                            SimulationOptions(charge_compute=False),
                            end_of_turn=AlwaysFinished())
    assert {e.turn_id for e in of(result, UserSpeechStarted)} == {1}  # one turn, resumed once
    assert len(of(result, UserSpeechStarted)) == 2 and result.replies_withdrawn == 1
    withdrawn, answered = of(result, ReplyFinished)
    assert withdrawn.interrupted and not answered.interrupted
    assert [turn for turn, _, _ in engine.heard] == [1]  # only the answer that played out
    [record] = result.records
    assert record.endpoint_decision is not None and record.endpoint_decision.resumed == 1
    assert record.user_end_s > 0.5 + clip.speech[-1][1] - 0.1  # the whole sentence
    last = engine.turns[-1]
    assert len(last.pcm_16k) / RATE > clip.speech[-1][1] - clip.speech[0][0]
    assert result.summary()["replies_withdrawn"] == 1


class ListeningModel:
    """An end-of-turn model that keeps what it was given (and says: not sure)."""

    def __init__(self) -> None:
        self.heard: list[np.ndarray] = []

    def probability(self, pcm_16k: np.ndarray) -> float:
        self.heard.append(pcm_16k)
        return 0.5


@pytest.mark.parametrize("tail_ms", [0, 100])
def test_the_end_of_turn_model_hears_the_turn_up_to_the_last_word_and_the_tail(
        tail_ms: int) -> None:
    """Issue 23: with the silence after a sentence the model calls a half sentence finished
    ("... and faced |": 0.05 with 60 ms of silence after it, 0.97 with 150 ms), so it hears the
    turn up to the end of its last voiced frame plus ``vad.smart_tail_ms``, not the whole
    pause it was asked at. (The turn's end, where the silence counts from, is where the level
    fell within those frames: up to ``END_MAX_SHIFT_S`` sooner.)"""
    clip = speech("question")
    model = ListeningModel()
    settings = SMART_HEADSET.with_value("vad.smart_tail_ms", tail_ms)
    result = run_simulation(settings, EchoEngine(), SimulatedMicrophone(
        track([(0.5, clip)], 0.5 + duration("question") + 3.0), 16000),
        SimulationOptions(charge_compute=False), end_of_turn=model)
    [record] = result.records
    [heard] = model.heard
    heard_until_s = record.user_audio_from_s + len(heard) / RATE
    last_frame_end_s = heard_until_s - tail_ms / 1000
    assert last_frame_end_s / FRAME_S == pytest.approx(round(last_frame_end_s / FRAME_S),
                                                       abs=1 / FRAME_SAMPLES)
    assert record.user_end_s <= last_frame_end_s + 1e-9
    assert last_frame_end_s - record.user_end_s <= END_MAX_SHIFT_S + 1e-9
