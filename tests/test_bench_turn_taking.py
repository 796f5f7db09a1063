"""The real-speech corpus, the turn-taking measurements and the bench's quick version."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from app.cli import bench_turn_taking as bench
from app.cli import turn_scenarios as scenarios
from app.cli.turn_corpus import CORPUS, RATE_HZ, load_corpus
from app.cli.turn_measures import reply_gain_times

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_turn_corpus.py"


def _builder():  # the labelling code lives with the script that built the corpus
    spec = importlib.util.spec_from_file_location("build_turn_corpus", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_corpus_is_small_has_its_sources_and_two_languages_or_more() -> None:
    size = sum(f.stat().st_size for f in CORPUS.iterdir())
    assert size <= 10 * 1024 * 1024
    truth = json.loads((CORPUS / "truth.json").read_text(encoding="utf-8"))
    assert {c["language"] for c in truth["clips"].values()} >= {"en", "de"}
    assert len({c["speaker"] for c in truth["clips"].values()}) >= 4
    sources = (CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    for name in list(truth["clips"]) + [f"noise_{n}" for n in truth["noises"]]:
        assert name in sources  # every file has its source and licence listed


def test_the_stored_truth_is_what_the_labelling_finds_in_the_stored_audio() -> None:
    builder, corpus = _builder(), load_corpus()
    for name, clip in corpus.items():
        if not clip.speech:
            continue
        found, _ = builder.label_speech(clip.pcm.astype(np.float64))
        assert len(found) == len(clip.speech), name
        for (a, b), (c, d) in zip(found, clip.speech, strict=True):
            assert abs(a - c) <= 0.010 and abs(b - d) <= 0.010, name


def test_a_breathy_onset_is_labelled_where_its_noise_starts() -> None:
    """He turned...: the /h/ rises over ~20 ms from the floor; the onset is its start, not
    where the vowel makes it loud (checked on a plot: 0.158–0.160 s)."""
    clip = load_corpus()["en_f_slt_a0009"]
    assert clip.speech[0][0] == pytest.approx(0.159, abs=0.003)
    level = _builder().envelope_db(clip.pcm.astype(np.float64))
    assert level[120:150].max() < level[175:185].min() - 6  # quiet before, /h/ after


def test_inserted_pauses_move_the_truth_with_the_audio() -> None:
    clip = load_corpus()["de_m_was_der_mensch"]
    paused = clip.with_pauses(0.4, 1)  # its longest gap (349 ms) becomes 400 ms of silence
    gaps = [b[0] - a[1] for a, b in zip(clip.speech, clip.speech[1:], strict=False)]
    longest = max(gaps)
    assert len(paused.pcm) == pytest.approx(len(clip.pcm) + (0.4 - longest) * RATE_HZ, abs=2)
    assert paused.speech[-1][1] == pytest.approx(clip.speech[-1][1] + 0.4 - longest, abs=1e-3)
    new_gaps = [b[0] - a[1] for a, b in zip(paused.speech, paused.speech[1:], strict=False)]
    assert max(new_gaps) == pytest.approx(0.4, abs=1e-3)
    start = round(paused.speech[gaps.index(longest)][1] * RATE_HZ) + 80
    assert not paused.pcm[start:start + int(0.4 * RATE_HZ) - 160].any()  # true silence
    assert len(paused.utterances()) == 1  # still one sentence


def test_gain_times_are_read_off_the_speaker_sample_exactly() -> None:
    rate = 48000
    rng = np.random.default_rng(1)
    reply = rng.normal(0, 0.1, 24000).astype(np.float32)  # 1 s at 24 kHz
    import soxr

    played = soxr.resample(reply, 24000, rate).astype(np.float32)
    output = np.zeros(3 * rate, np.float32)
    start = rate // 2
    gain = np.ones(len(played), np.float32)
    gain[int(0.2 * rate):int(0.24 * rate)] = 0.25  # ducked from 0.70 s
    gain[int(0.24 * rate):] = 0.05  # 26 dB down from 0.74 s ...
    gain[int(0.3 * rate):] = 0.0  # ... silent from 0.80 s
    output[start:start + len(played)] = played * gain
    down, silent = reply_gain_times(output, rate, reply, 0.5, 0.65)
    assert down == pytest.approx(0.74, abs=0.0025) and silent == pytest.approx(0.80, abs=1e-3)
    output[start:start + len(played)] = played
    assert reply_gain_times(output, rate, reply, 0.5, 0.65) is None  # played to its end


def test_the_quick_bench_runs_every_measure_on_real_speech() -> None:
    quick = scenarios.build_scenarios(quick=True)
    figures = bench.run_bench(quick, [])
    assert set(figures["scenarios"]) == {s.name for s in quick}
    overall = figures["overall"]
    assert overall["barge_ins"] == 4 and overall["turn_end_ms"]["median"] is not None
    # the endpoint silence counts from where the words were taken to end
    assert overall["turn_end_ms"]["median"] - overall["speech_end_ms"]["median"] == \
        pytest.approx(500, abs=32)
    pauses = figures["scenarios"]["pauses_400ms"]
    assert pauses["split"] == 0 and pauses["missed"] == 0  # a 400 ms pause is not a turn end
    lines: list[str] = []
    bench.print_figures(figures, lines.append)
    assert any(line.startswith("| clean_16k |") for line in lines)


def test_the_unattended_sessions_say_where_a_reply_interrupted_itself() -> None:
    quick = scenarios.build_scenarios(quick=True)[:1]
    selfs = scenarios.self_interruption_scenarios(1)[:2]
    figures = bench.run_bench(quick, selfs)
    unattended = figures["echo_rooms_unattended"]
    where = unattended["where"]
    assert sum(w["self_interruptions"] for w in where) == unattended["self_interruptions"]
    assert sum(w["false_turns"] for w in where) == unattended["false_turns"]
    assert {w["session"] for w in where} <= {s.name.removeprefix("self_") for s in selfs}
    figures["echo_rooms_unattended"] = unattended | {"where": [
        {"session": "RT60 0.8 s, 0.5 m, 0 dB, clipping_2", "self_interruptions": 1,
         "false_turns": 0}]}
    lines: list[str] = []
    bench.print_figures(figures, lines.append)
    assert "  unattended session RT60 0.8 s, 0.5 m, 0 dB, clipping_2: 1 self-interruption(s), " \
           "0 false turn(s)" in lines
    assert not any("where" in line for line in lines)


def test_a_talkers_room_noise_is_there_before_they_speak() -> None:
    """Clips used to start with their own background in digital silence: a noise onset 40-300
    ms before every first word that no room has (and that the sound gate would take for an
    onset). The background is looped before each clip and faded in; the truth is unchanged."""
    from app.cli.turn_corpus import BED_S, Room, compose

    clip = load_corpus()["en_f_slt_a0009"]
    scenario = compose("x", [(2.0, clip, "turn")], Room("none"))
    pcm = scenario.pcm[:, 0].astype(np.float64)
    level = [10 * np.log10(np.mean(pcm[i:i + 1600] ** 2) + 1e-20) for i in range(0, 32000, 1600)]
    assert max(level[:int((2.0 - BED_S) * 10)]) < -150  # nothing before the bed
    bed = level[int((2.0 - BED_S) * 10) + 2:20]
    assert max(bed) - min(bed) < 6 and -75 < np.median(bed) < -50  # steady room noise
    assert scenario.utterances[0].speech[0][0] == pytest.approx(2.0 + clip.speech[0][0])



def test_a_clip_cut_from_a_recording_has_that_recordings_background_before_it() -> None:
    """The Arabic numbers are cut from one noisy recording with a 50 ms margin each side.
    The bed before such a clip used to be that margin looped: the word's edge repeated every
    40 ms, a buzz at -31 dBFS that the cold canceller's output turned into 'speech' and that
    stopped replies with nobody talking (three unattended self-interruptions in 119 replies).
    The bed is the recording's own room noise: as loud as its lead before the first number,
    and steady."""
    from app.cli.turn_corpus import BED_S, Room, compose, level_dbfs

    recording = load_corpus()["ar_m_numbers"]
    clip = scenarios.corpus_clips()["ar_tail"]
    lead = recording.pcm[:int((recording.speech[0][0] - 0.01) * RATE_HZ)].astype(np.float64)
    scenario = compose("x", [(2.0, clip, "turn")], Room("none"))
    gain_db = -26.0 - level_dbfs(clip.pcm, clip.speech)
    pcm = scenario.pcm[:, 0].astype(np.float64)
    start = int((2.0 - BED_S + 0.2) * RATE_HZ)  # past the fade-in
    bed = pcm[start:int(2.0 * RATE_HZ)]
    levels = [10 * np.log10(np.mean(bed[i:i + 800] ** 2)) for i in range(0, len(bed), 800)]
    expected = 10 * np.log10(np.mean(lead ** 2)) + gain_db
    assert abs(np.median(levels) - expected) < 1.5
    assert max(levels) - min(levels) < 6

def test_the_bench_plays_speech_as_speech_and_the_noise_burst_as_no_speech() -> None:
    """ar_m_numbers holds six spoken numbers and, between two and three, a 1.9 s noise burst
    (broadband, no harmonics: the 'bc_noise' of auditok's file name) that the level labelling
    takes for sound like any other. Played as a person's turn it made three 'missed' turns
    and three barge-ins with no reply to stop. Checked with silero over each whole recording
    (in its own background): every span the bench plays as speech is speech, the burst is
    not."""
    from app.vad.silero import FRAME_SAMPLES, SileroScorer

    scorer, corpus = SileroScorer(), load_corpus()
    spoken = {u.clip for s in scenarios.build_scenarios() for u in s.utterances
              if u.kind != "ignored"}
    assert "noise_burst" not in spoken
    for name, clip in corpus.items():
        if not clip.speech:
            continue
        scorer.reset()
        frames = range(0, len(clip.pcm) - FRAME_SAMPLES, FRAME_SAMPLES)
        probability = np.array([scorer.score(clip.pcm[i:i + FRAME_SAMPLES]) for i in frames])
        for index, (start, end) in enumerate(clip.utterances()):
            a, b = int(start * RATE_HZ) // FRAME_SAMPLES, int(end * RATE_HZ) // FRAME_SAMPLES
            burst = name == "ar_m_numbers" and index == scenarios.AR_NOISE_BURST_SPAN
            assert (probability[a:b + 1].max() < 0.5) == burst, (name, index)


def test_a_target_met_to_the_float_noise_of_its_sums_is_met() -> None:
    """Rain at 5 dB: 20 dB down 80.00000000000185 ms after the onset, from sample counts, is
    the 80 ms target met; a hundredth of a millisecond over it is not."""
    def meets(**worst_ms: float) -> bool:
        figures = bench.Figures(to_20db_ms=[60.0], to_silence_ms=[90.0], audio_start_ms=[-200.0],
                                turn_end_ms=[550.0])
        for name, value in worst_ms.items():
            getattr(figures, name).append(value)
        return bench.meets_targets(figures, endpoint_silence_ms=500.0)

    assert meets()
    assert meets(to_20db_ms=80.00000000000185)
    assert not meets(to_20db_ms=80.01)
    assert meets(to_silence_ms=150.0 + 1e-12) and not meets(to_silence_ms=150.01)
    assert meets(audio_start_ms=30.0 + 1e-12) and not meets(audio_start_ms=30.01)
    assert meets(turn_end_ms=600.0 + 1e-12) and not meets(turn_end_ms=600.01)


def test_talk_after_the_reply_ended_is_no_missed_stop() -> None:
    """A barge-in of the script that comes when no reply is audible (the end-of-turn model
    answered sooner and the reply ended first) has nothing to stop: it is counted as such, not
    as a stop missed; a reply audible at the onset and played to its end is a stop missed,
    unless it ended within the silence target (150 ms): then it fell silent when it ended (the
    end-of-turn model's sooner reply to clean Arabic ended 6 ms after a barge-in's onset)."""
    from types import SimpleNamespace

    from app.cli.turn_corpus import Room, TurnScenario, Utterance
    from app.cli.turn_measures import Figures, _stops

    rate = 16000
    reply = np.random.default_rng(2).normal(0, 0.1, 24000).astype(np.float32)  # 1 s at 24 kHz
    import soxr

    output = np.zeros(6 * rate, np.float32)
    output[rate:2 * rate] = soxr.resample(reply, 24000, rate)[:rate]  # audible 1.0-2.0 s
    record = SimpleNamespace(turn_id=1, first_audible_s=1.0, heard_ms=1000.0, barge_in=None)
    result = SimpleNamespace(records=[record], output=output, output_rate_hz=rate)

    def figures_for(barge_in_s: float) -> Figures:
        utterances = [Utterance("a", "turn", ((0.2, 0.8),)),
                      Utterance("b", "barge_in", ((barge_in_s, barge_in_s + 0.4),))]
        scenario = TurnScenario("s", np.zeros((6 * rate, 1), np.float32), rate, utterances,
                                Room("none"))
        figures = Figures()
        _stops(scenario, result, {1: reply}, figures)  # type: ignore[arg-type]
        return figures

    after = figures_for(2.5)
    assert (after.barge_ins, after.barge_ins_unplayed, after.stops_missed) == (1, 1, 0)
    during = figures_for(1.3)
    assert (during.barge_ins, during.barge_ins_unplayed, during.stops_missed) == (1, 0, 1)
    at_its_end = figures_for(1.97)  # the reply ends 30 ms after the onset: silent by then
    assert (at_its_end.stops_missed, at_its_end.to_silence_ms) == (0, [pytest.approx(30.0)])
    assert at_its_end.to_20db_ms == [pytest.approx(30.0)]
    later = figures_for(1.84)  # 160 ms before its end: a stop missed
    assert later.stops_missed == 1 and later.to_silence_ms == []


def test_on_real_speech_a_turn_ends_the_endpoint_silence_after_the_words_not_the_vads_frames(
        ) -> None:
    """Issue 14 (turn end ≤ endpoint silence + 100 ms): silero's frames trail the words (here
    by 89 ms on "welcome", which ended its turn 609 ms after the labelled end); the silence
    counts from where the level fell, so every turn of the clean 44.1 kHz scenario ends within
    the target, and the app's end of the words is within two frames of the labelled one."""
    [scenario] = [s for s in scenarios.build_scenarios() if s.name == "clean_44k_en_m"]
    figures = bench.run_scenario(scenario)
    assert len(figures.turn_end_ms) == 4 and figures.missed == figures.split == 0
    assert max(figures.turn_end_ms) <= 500 + bench.TURN_END_MARGIN_MS
    assert all(-64 <= ms <= 64 for ms in figures.speech_end_ms)


def test_on_real_speech_every_one_word_answer_is_a_turn() -> None:
    """Issue 14: a person answering with one word ("two", "six"). Silero held two of theo's
    digits over the threshold for less than ``vad.min_speech_ms`` (250 ms) and they made no
    turn; a candidate the VAD is sure of for three frames is one now."""
    [scenario] = [s for s in scenarios.build_scenarios() if s.name == "words_theo"]
    figures = bench.run_scenario(scenario)
    assert len([u for u in scenario.utterances if u.kind == "turn"]) == 10
    assert figures.missed == figures.split == figures.false_turns == 0
    assert len(figures.turn_end_ms) == 10


def test_the_end_of_turn_table_counts_one_word_answers_apart_from_sentences() -> None:
    quick = scenarios.build_scenarios(quick=True)[:1]
    [words] = [s for s in scenarios.build_scenarios() if s.name == "words_theo"]
    figures = bench.run_bench([*quick, words], [])
    row = bench.endpointing_row(figures)
    alone = bench.endpointing_row(bench.run_bench([words], []))
    assert row["one_word_reply_ms_median"] == alone["reply_after_true_end_ms_median"]
    assert row["one_word_reply_ms_p90"] == alone["reply_after_true_end_ms_p90"]
    sentences = bench.endpointing_row(bench.run_bench(quick, []))
    assert row["sentences_reply_ms_median"] == sentences["reply_after_true_end_ms_median"]
    assert sentences["one_word_reply_ms_median"] is None


def test_the_one_word_clips_hold_the_ten_digits_each() -> None:
    corpus = load_corpus()
    for speaker in scenarios.DIGITS:
        clip = corpus[f"en_m_digits_{speaker}"]
        words = clip.utterances()
        assert len(words) == 10, speaker
        assert all(0.1 <= end - start <= 1.0 for start, end in words), speaker


def test_in_rain_with_no_echo_path_a_barge_ins_first_syllable_ducks_the_reply() -> None:
    """Issue 14 (20 dB down within 80 ms of the true onset): 0.1 s into the session's first
    reply, the echo level had been learnt from the microphone's first frames of the reply,
    before the correlation could tell: a rain drop over the far end read as an echo 6-12 dB
    under it, and the talker's first syllable (15 dB over the rain) did not clear that bound.
    The first barge-in of the rain at 10 dB SNR was 20 dB down 206 ms after its onset."""
    [scenario] = [s for s in scenarios.build_scenarios() if s.name == "rain_10dB"]
    figures = bench.run_scenario(scenario)
    assert len(figures.to_20db_ms) == 2 and figures.stops_missed == 0
    assert max(figures.to_20db_ms) <= bench.TARGETS["to_20db_ms"]


def test_a_withdrawal_is_timed_by_the_state_that_comes_with_it_not_the_turns_start() -> None:
    """A turn resumed after an early end is re-announced, and its USER_SPEAKING state comes
    just after. The resumption used to be timed by the state before it: the turn's own start,
    0.3 s before the person talked in one unattended session (a noise onset began the turn),
    and the person going on was counted as a reply withdrawn with nobody talking."""
    from types import SimpleNamespace

    from app.cli.turn_measures import withdrawals
    from app.events import ConversationState as S
    from app.events import ReplyFinished, StateChanged, UserSpeechStarted, UserTurnEnded

    events = [UserSpeechStarted(2, 4.10), StateChanged(S.USER_SPEAKING, 4.36),
              UserTurnEnded(2, 4.55, 0.25), StateChanged(S.SPEAKING, 4.56),
              UserSpeechStarted(2, 4.10), StateChanged(S.USER_SPEAKING, 4.65),
              ReplyFinished(2, True, 108.0)]
    assert withdrawals(SimpleNamespace(events=events)) == [(108.0, 4.65)]  # type: ignore[arg-type]


def test_rain_looped_under_a_scenario_has_no_quiet_the_recording_lacks() -> None:
    """The rain recording fades in over 60 ms and out over 200 ms; looped as recorded it
    dipped 16 dB under itself every second (-52 dBFS under rain at -36), a quiet no rain has:
    the quietest 30 ms of a room's last seconds, which the end of speech is measured against,
    were that dip. Its faded edges are left out of the loop (at most 0.3 s at either end)."""
    from app.cli.turn_corpus import looped, steady

    def levels(pcm: np.ndarray) -> np.ndarray:
        x = pcm[:len(pcm) // 480 * 480].astype(np.float64).reshape(-1, 480)
        return 10 * np.log10(np.mean(x ** 2, axis=1) + 1e-20)

    corpus = load_corpus()
    rain = corpus["noise_rain"].pcm
    as_recorded, loop = levels(looped(rain, 16000 * 10)), levels(looped(steady(rain), 16000 * 10))
    assert np.median(as_recorded) - as_recorded.min() > 12
    assert np.median(loop) - loop.min() < 4
    thunder = corpus["noise_thunder_rain"].pcm
    assert len(thunder) - len(steady(thunder)) <= 2 * int(0.3 * 16000)  # its rumble stays


def test_a_setting_changed_with_set_reaches_every_scenario_and_its_targets(tmp_path, capsys
                                                                          ) -> None:
    """``--set vad.endpoint_silence_ms=700``: the turns end 700 ms after the words, and a turn
    is judged against 700 + 100 ms, not the default's 600; the JSON says what was changed."""
    from app.cli import main

    out = tmp_path / "figures.json"
    assert main(["bench", "turn-taking", "--quick", "--endpointing", "silence",
                 "--only", "clean_16k", "--set", "vad.endpoint_silence_ms=700",
                 "--json", str(out)]) == 0
    assert "settings changed in every scenario: vad.endpoint_silence_ms=700" in (
        capsys.readouterr().out)
    figures = json.loads(out.read_text())
    row = figures["modes"]["silence"]["scenarios"]["clean_16k"]
    assert 700.0 < row["turn_end_ms"] <= 800.0
    assert row["meets_targets"] is True
    assert figures["settings_changed"] == {"vad.endpoint_silence_ms": 700}


@pytest.mark.parametrize(("change", "says"), [
    ("vad.smart_endpoint=true", "the end-of-turn mode is chosen with --endpointing"),
    ("vad.endpoint_silence_ms=-5", "vad.endpoint_silence_ms"),
])
def test_a_setting_the_bench_cannot_take_is_refused_before_any_work(change: str, says: str,
                                                                   capsys) -> None:
    from app.cli import main

    assert main(["bench", "turn-taking", "--quick", "--set", change]) == 2
    error = capsys.readouterr().err
    assert "--set" in error and says in error
