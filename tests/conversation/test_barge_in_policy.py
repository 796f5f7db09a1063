"""Barge-in on speakers (turn controller alone): duck at once, stop when confirmed, restore and
count a false interruption when not, and the echo canceller's warm-up guard."""

from __future__ import annotations

import dataclasses

import pytest

from app.conversation import turns as t
from app.events import ConversationState as S
from app.vad.base import FRAME_S, VadState
from tests.conversation import turn_script
from tests.conversation.turn_script import QUIET, SPEECH, Script


@pytest.fixture(autouse=True, params=[1, 3, 8], ids=lambda n: f"{n}_frames_per_pump")
def frames_per_pump(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test here runs with one and with several VAD frames per pump (issue 22)."""
    monkeypatch.setattr(turn_script, "FRAMES_PER_PUMP", request.param)
    return int(request.param)


def replying() -> Script:
    return Script(speculative_start=False).replying()


def test_a_cough_ducks_the_reply_then_restores_it_and_counts_a_false_interruption() -> None:
    s = replying().frames(SPEECH, 1)  # shorter than the barge-in's confirmation (64 ms)
    assert s.of(t.DuckSet) == [t.DuckSet(True)]  # at the first voiced frame
    s.frames(QUIET, 4)  # 128 ms: maybe a dip inside speech, still ducked
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.FalseInterruption)
    s.frames(QUIET, 1)  # 160 ms of quiet: it was not speech
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]
    [false] = s.of(t.FalseInterruption)
    assert false.turn_id == 1 and not false.reply_stopped
    assert false.onset_s == pytest.approx(34 * FRAME_S)
    assert not s.of(t.ReplyInterrupted) and s.controller.state == S.SPEAKING


def test_confirmed_speech_stops_the_reply_and_is_no_false_interruption() -> None:
    s = replying().frames(SPEECH, 3)
    assert s.of(t.ReplyInterrupted) and s.of(t.DuckSet) == [t.DuckSet(True)]
    s.frames(SPEECH, 10).frames(QUIET, 20)
    assert not s.of(t.FalseInterruption) and len(s.of(t.TurnStarted)) == 2


def test_a_stopped_reply_with_no_turn_after_it_is_a_false_interruption_too() -> None:
    """Once the reply is stopped the speech may pause as long as a turn may (the endpoint
    silence, 500 ms) before it counts as no turn."""
    s = replying().frames(SPEECH, 4).frames(QUIET, 15)  # 128 ms: stopped, no onset
    assert s.of(t.ReplyInterrupted) and not s.of(t.FalseInterruption)
    assert s.controller.state == S.INTERRUPTED
    s.frames(QUIET, 1)  # 512 ms of quiet after the last voiced frame
    [false] = s.of(t.FalseInterruption)
    assert false.reply_stopped and false.turn_id == 1
    assert len(s.of(t.TurnStarted)) == 1 and s.controller.state == S.LISTENING


@pytest.mark.parametrize(("endpoint_ms", "quiet_frames"), [(16 * FRAME_S * 1000, 16),
                                                           (16 * FRAME_S * 1000 + 0.4, 17)])
def test_a_stopped_reply_counts_no_turn_once_the_endpoint_silence_has_passed(
        endpoint_ms: float, quiet_frames: int) -> None:
    """To the frame: with a 512 ms endpoint silence the 16th quiet frame after the speech
    ends it, with 512.4 ms the 17th."""
    s = Script(speculative_start=False, endpoint_silence_ms=endpoint_ms).replying()
    s.frames(SPEECH, 4).frames(QUIET, quiet_frames - 1)
    assert s.of(t.ReplyInterrupted) and not s.of(t.FalseInterruption)
    s.frames(QUIET, 1)
    [false] = s.of(t.FalseInterruption)
    assert false.reply_stopped


def test_speech_that_stopped_a_reply_pauses_and_goes_on_as_one_turn_from_its_start() -> None:
    """The canceller, still suppressing the stopped reply's echo, swallowed 190 ms of a person
    talking over it (a 0 dB room): their turn starts at their first frames, its audio from
    that onset's pre-roll, not at a fresh onset after the gap (249 ms of their words lost)."""
    s = replying().frames(SPEECH, 4).frames(QUIET, 8)  # stopped, then 256 ms swallowed
    assert s.of(t.ReplyInterrupted)
    s.frames(SPEECH, 10).frames(QUIET, 20)
    _, turn = s.of(t.TurnStarted)
    assert turn.onset_s == pytest.approx(34 * FRAME_S)
    assert turn.audio_from_s == pytest.approx(34 * FRAME_S - 0.3)
    assert not s.of(t.FalseInterruption)


def test_while_the_canceller_warms_up_speech_only_ducks_and_is_confirmed_after() -> None:
    s = replying()
    s.guard = True
    s.frames(SPEECH, 20)  # 640 ms of "speech": maybe leaked echo, maybe the person
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.ReplyInterrupted)
    s.guard = False
    s.frames(SPEECH, 1)  # still talking once the canceller is trusted: a barge-in
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.onset_s == pytest.approx(34 * FRAME_S)
    s.frames(SPEECH, 2).frames(QUIET, 20)
    assert len(s.of(t.TurnStarted)) == 2 and not s.of(t.FalseInterruption)


def test_leaked_echo_during_the_warm_up_is_restored_and_forgotten() -> None:
    s = replying()
    s.guard = True
    s.frames(SPEECH, 12).frames(QUIET, 5)  # 384 ms of leak, then it stops
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]
    [false] = s.of(t.FalseInterruption)
    assert not false.reply_stopped and s.controller.vad_state == VadState.QUIET
    s.guard = False
    s.frames(QUIET, 30)
    assert len(s.of(t.TurnStarted)) == 1 and not s.of(t.ReplyInterrupted)
    s.frames(SPEECH, 3)  # the person, later: a fresh onset, a normal barge-in
    assert s.of(t.ReplyInterrupted)


def test_a_reply_ending_during_unconfirmed_speech_makes_it_start_afresh() -> None:
    s = replying()
    s.guard = True
    s.frames(SPEECH, 10)
    s.call("reply_finished", 1)
    ended_s = s.now
    assert s.controller.vad_state == VadState.QUIET and s.of(t.DuckSet)[-1] == t.DuckSet(False)
    s.guard = False
    s.frames(SPEECH, 8)  # 256 ms: under the guard the reply's echo may still be coming back
    assert len(s.of(t.TurnStarted)) == 1
    s.frames(SPEECH, 3)  # still talking past it: a turn of its own (its pre-roll covers the start)
    assert len(s.of(t.TurnStarted)) == 2 and s.of(t.TurnStarted)[-1].onset_s == pytest.approx(
        ended_s)


def test_a_dip_while_ducked_keeps_the_speech_and_its_onset() -> None:
    """Issue 14: one quiet frame inside a sentence while the reply was ducked restarted the VAD,
    and the sentence became a turn 336 ms after its true start (its first word lost)."""
    s = replying()
    s.guard = True  # the canceller warming up: speech only ducks the reply for now
    s.frames(SPEECH, 3).frames(QUIET, 2).frames(SPEECH, 4)
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.FalseInterruption)
    s.guard = False
    s.frames(SPEECH, 6)
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.onset_s == pytest.approx(34 * FRAME_S)  # the first word's onset
    new = s.of(t.TurnStarted)[-1]
    assert new.turn_id == 2 and new.onset_s == pytest.approx(34 * FRAME_S)
    assert new.audio_from_s == pytest.approx(34 * FRAME_S - 0.3)


def test_speech_after_a_longer_quiet_is_new_speech() -> None:
    s = replying().frames(SPEECH, 1).frames(QUIET, 5).frames(SPEECH, 3)
    assert len(s.of(t.FalseInterruption)) == 1
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.onset_s == pytest.approx((34 + 6) * FRAME_S)


# ---- sound first (issue 14): the sound gate's 10 ms blocks before the VAD's frames ----------

def test_sound_over_noise_and_echo_ducks_the_reply_before_the_vad_frame_is_complete() -> None:
    s = replying().blocks(True, 1)
    assert not s.of(t.DuckSet)  # one block could be a click
    s.blocks(True, 1)
    [duck] = s.of(t.DuckSet)
    assert duck.ducked and s.now < 35 * FRAME_S  # the frame the sound is in is not done yet
    s.frames(SPEECH, 3)  # the VAD confirms: speech counts from the sound's start
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.onset_s == pytest.approx(1.08)  # the first sound block
    assert not s.of(t.FalseInterruption)


def test_sound_the_vad_never_calls_speech_gives_the_reply_back() -> None:
    s = replying().blocks(True, 3).frames(QUIET, 4)  # a door: loud, but no voice
    assert s.of(t.DuckSet) == [t.DuckSet(True)]
    s.sound = False
    s.frames(QUIET, 4)  # no sound for 128 ms: maybe the voiced part of a word is coming
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.FalseInterruption)
    s.frames(QUIET, 1)  # the sound is over for 150 ms: the reply comes back
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]
    [false] = s.of(t.FalseInterruption)
    assert not false.reply_stopped and false.onset_s == pytest.approx(1.08)
    assert not s.of(t.ReplyInterrupted) and s.controller.state == S.SPEAKING


def test_sound_that_goes_on_with_no_voice_is_given_back_after_the_wait() -> None:
    s = replying().blocks(True, 2)
    s.sound = True
    s.frames(QUIET, 10)  # 320 ms of loud sound the VAD scores as no speech (a vacuum cleaner)
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]
    assert len(s.of(t.FalseInterruption)) == 1 and not s.of(t.ReplyInterrupted)


def test_a_word_the_vad_scores_weakly_within_sound_stops_the_reply_and_is_a_turn() -> None:
    """Issue 14: short Arabic words the VAD scored at most 0.41 never stopped the reply."""
    s = replying().blocks(True, 2)
    s.sound = True
    s.frames(0.25, 2)
    assert not s.of(t.ReplyInterrupted)
    s.frames(0.25, 1)  # three weakly voiced frames within sound, 96 ms and more
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.onset_s == pytest.approx(1.08)
    started = s.of(t.TurnStarted)[-1]
    assert started.turn_id == 2 and started.onset_s == pytest.approx(1.08)
    s.sound = False
    s.frames(QUIET, 20)
    assert s.of(t.TurnEnded)[-1].turn_id == 2  # the VAD's silence ends the turn as usual


@pytest.mark.parametrize("why", ["guard", "no_sound", "too_weak", "echo"])
def test_weak_voice_alone_stops_nothing(why: str) -> None:
    """Over an echo (``echo``: the gate's blocks may hold the speaker's echo) the canceller's
    residue is weakly voiced to the VAD too: only the VAD's own onset may confirm there."""
    s = replying()
    s.echo_free = why != "echo"
    if why != "no_sound":
        s.blocks(True, 2)
        s.sound = True
    s.guard = why == "guard"
    s.frames(0.1 if why == "too_weak" else 0.25, 6)
    assert not s.of(t.ReplyInterrupted) and len(s.of(t.TurnStarted)) == 1


def test_a_words_voiced_part_within_a_dip_of_its_first_sound_keeps_the_duck() -> None:
    """Corpus (rain 10 dB): an Arabic word's first 30 ms of sound ducked, its voiced part came
    138 ms later, and the duck was given back (a counted false interruption) 10 ms before the
    VAD frame that called it speech was complete."""
    s = replying().blocks(True, 3)  # 1.08-1.11 s
    s.sound = False
    s.frames(QUIET, 5)  # the frame ending 1.248 s: 138 ms without sound
    assert s.of(t.DuckSet) == [t.DuckSet(True)]
    s.frames(SPEECH, 3)  # the frame from 1.248 s is speech (the gate, wary of the reply's
    # echo, may not call it sound: the VAD still can)
    assert s.of(t.ReplyInterrupted) and s.of(t.DuckSet) == [t.DuckSet(True)]
    assert not s.of(t.FalseInterruption)


def rows(actions: list) -> list[tuple]:
    """Each action as a tuple, its times rounded to the microsecond (see ``expect``)."""
    return expect([(type(a).__name__, *dataclasses.astuple(a)) for a in actions])


def expect(rows: list[tuple]) -> list[tuple]:
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows]


def test_a_weak_word_stops_the_reply_at_the_frame_that_confirms_it_with_its_pre_roll() -> None:
    s = replying()
    before = len(s.log)
    s.blocks(True, 2)
    s.sound = True
    s.frames(0.25, 3)
    s.sound = False
    s.frames(QUIET, 16)
    assert rows([a for _, a in s.log[before:]]) == expect([
        ("DuckSet", True),
        ("ReplyInterrupted", 1, 1.08, s.pumped_at(37), "speech", True),
        ("TurnStarted", 2, 1.08, 1.08 - 0.3),
        ("StateSet", S.USER_SPEAKING, s.pumped_at(37)),
        ("StateSet", S.ENDPOINTING, s.pumped_at(38)),
        ("TurnEnded", 2, 1.08, 37 * FRAME_S, s.pumped_at(53), "silence", None, False,
         False),
        ("StateSet", S.RESPONDING, s.pumped_at(53))])


@pytest.mark.parametrize("quiet_first", [False, True])
def test_a_weak_word_needs_three_weakly_voiced_frames_running(quiet_first: bool) -> None:
    s = Script(speculative_start=False, barge_in_min_speech_ms=0.0).replying().blocks(True, 2)
    s.sound = True
    if quiet_first:
        s.frames(QUIET, 1)  # within the sound but no voice: the count starts again
    s.frames(0.15, 2)  # weakly voiced from 0.15 on
    assert not s.of(t.ReplyInterrupted)
    s.frames(0.15, 1)
    assert s.of(t.ReplyInterrupted)


@pytest.mark.parametrize(("min_speech_ms", "frames"), [(200.0, 6), (201.0, 7)])
def test_a_weak_word_must_last_the_barge_in_speech_from_its_sound(
        min_speech_ms: float, frames: int) -> None:
    """Spoken from the first sound block (1.08 s) to the end of the frame: 40 + 32 k ms."""
    s = Script(speculative_start=False, barge_in_min_speech_ms=min_speech_ms).replying()
    s.blocks(True, 2)
    s.sound = True
    s.frames(0.25, frames - 1)
    assert not s.of(t.ReplyInterrupted)
    s.frames(0.25, 1)
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.detected_s == pytest.approx(s.now)


def test_weak_voice_under_the_guard_gives_the_duck_back_after_the_wait() -> None:
    s = replying().blocks(True, 2)
    s.sound, s.guard = True, True
    s.frames(0.25, 8)  # 1.088-1.344 s: under the 300 ms the VAD has to call it speech
    assert s.of(t.DuckSet) == [t.DuckSet(True)]
    s.frames(0.25, 1)  # the frame ending 1.376 s: 296 ms after the sound's start ...
    s.frames(0.25, 1)  # ... 328 ms: given back
    assert rows(s.of(t.FalseInterruption)) == expect(
        [("FalseInterruption", 1, 1.08, s.pumped_at(44), False)])
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]


@pytest.mark.parametrize(("min_speech_ms", "frames"), [(96.0, 3), (97.0, 4)])
def test_speech_stops_the_reply_once_it_has_lasted_the_barge_in_speech(
        min_speech_ms: float, frames: int) -> None:
    s = Script(speculative_start=False, barge_in_min_speech_ms=min_speech_ms).replying()
    s.frames(SPEECH, frames - 1)
    assert not s.of(t.ReplyInterrupted)
    s.frames(SPEECH, 1)
    assert s.of(t.ReplyInterrupted)


def test_a_cough_and_a_stopped_reply_are_false_interruptions_with_their_times() -> None:
    s = replying().frames(SPEECH, 1).frames(QUIET, 5)  # a cough: ducked, given back
    assert rows(s.of(t.FalseInterruption)) == expect(
        [("FalseInterruption", 1, 34 * FRAME_S, s.pumped_at(40), False)])
    s = replying().frames(SPEECH, 4).frames(QUIET, 16)  # stopped, then no turn
    assert rows(s.of(t.FalseInterruption)) == expect(  # after the endpoint silence
        [("FalseInterruption", 1, 34 * FRAME_S, s.pumped_at(54), True)])
    assert s.states()[-2:] == [S.INTERRUPTED, S.LISTENING]
    assert s.of(t.DuckSet) == [t.DuckSet(True)]  # the stopped reply fades out: no swell back


def test_a_door_that_ducked_is_given_back_with_its_times() -> None:
    s = replying().blocks(True, 3).frames(QUIET, 4)
    s.sound = False
    s.frames(QUIET, 5)
    assert rows(s.of(t.FalseInterruption)) == expect(
        [("FalseInterruption", 1, 1.08, s.pumped_at(43), False)])
    s.frames(SPEECH, 9)  # then speech: a barge-in of its own, from its own onset
    assert s.of(t.ReplyInterrupted)[0].onset_s == pytest.approx(43 * FRAME_S)


def test_sound_ducks_only_an_audible_reply() -> None:
    s = Script(speculative_start=False).blocks(True, 4)  # listening: nothing to duck
    s.frames(SPEECH, 12).frames(QUIET, 17)
    s.blocks(True, 4)  # the engine is thinking: nothing audible yet
    assert not s.of(t.DuckSet)
    s.call("reply_audible", 1).blocks(False, 3).blocks(True, 2)
    assert s.of(t.DuckSet) == [t.DuckSet(True)]


def test_after_a_cough_was_given_back_sound_ducks_the_reply_again() -> None:
    s = replying().frames(SPEECH, 1).frames(QUIET, 5)
    assert len(s.of(t.FalseInterruption)) == 1
    s.blocks(True, 2)
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False), t.DuckSet(True)]


@pytest.mark.parametrize(("gap_blocks", "ducked"), [(2, True), (3, False)])
def test_a_run_of_sound_may_miss_20_ms(gap_blocks: int, ducked: bool) -> None:
    s = replying().blocks(True, 1).blocks(False, gap_blocks).blocks(True, 1)
    assert bool(s.of(t.DuckSet)) == ducked


def test_a_sound_duck_is_given_back_a_dip_after_the_sound_ends() -> None:
    s = replying().frames(QUIET, 10).blocks(False, 2).blocks(True, 3)  # sound 1.42-1.45 s
    s.sound = False
    s.frames(QUIET, 5)  # the frame ending 1.568 s: 118 ms after the sound
    assert s.of(t.DuckSet) == [t.DuckSet(True)]
    s.frames(QUIET, 1)  # 1.6 s: 150 ms
    assert s.of(t.DuckSet)[-1] == t.DuckSet(False)


def test_a_sound_duck_is_given_back_when_the_vad_had_the_wait_to_call_it_speech() -> None:
    s = replying().frames(QUIET, 6).blocks(False, 2).blocks(True, 2)  # sound from 1.30 s on
    s.sound = True
    s.frames(QUIET, 9)  # the frame ending 1.568 s: 268 ms of sound, no voice
    assert s.of(t.DuckSet) == [t.DuckSet(True)]
    s.frames(QUIET, 1)  # 1.6 s: 300 ms
    assert s.of(t.DuckSet)[-1] == t.DuckSet(False)


# ---- issue 22: the barge-in mutants that survived the controller's tests --------------------

def test_a_cough_while_the_engine_thinks_leaves_sound_free_to_duck_the_reply() -> None:
    """A cough the VAD scored as speech while nothing was audible yet ducked nothing, but its
    episode stayed open, and sound never ducked the reply that followed (``_may_duck``)."""
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)  # responding
    s.frames(SPEECH, 1).frames(QUIET, 10)  # a 32 ms cough, then quiet
    assert not s.of(t.DuckSet) and not s.of(t.FalseInterruption)
    s.call("reply_audible", 1).blocks(True, 2)
    assert s.of(t.DuckSet) == [t.DuckSet(True)]


def test_a_sound_duck_never_moves_speechs_onset_later_than_the_vads() -> None:
    """Speech the VAD heard begin during a mute and still going on when unmuted counts from
    the VAD's onset, with sound (that ducks from its own, later start) as without it."""
    for sound in (False, True):
        s = replying().call("set_muted", True).frames(SPEECH, 2)  # the VAD: onset at 1.088 s
        s.call("set_muted", False)
        s.sound = sound
        s.frames(SPEECH, 1)  # sound from 1.152 s on ducks before this frame is judged
        [interrupted] = s.of(t.ReplyInterrupted)  # 96 ms of speech from the VAD's onset
        assert interrupted.onset_s == pytest.approx(34 * FRAME_S)


def test_speech_after_a_mute_is_not_joined_to_a_cough_before_it() -> None:
    """Only a dip (under ``DIP_TOLERANCE_S``) joins speech to the speech before it."""
    s = Script(speculative_start=False).frames(SPEECH, 2).call("set_muted", True)
    s.frames(QUIET, 8).call("set_muted", False).frames(SPEECH, 10)  # 256 ms later
    [started] = s.of(t.TurnStarted)
    assert started.onset_s == pytest.approx(10 * FRAME_S)


def test_a_weak_word_confirms_at_a_frame_that_starts_exactly_where_its_sound_ends() -> None:
    """The sound 1.18-1.28 s, weakly voiced frames 1.184-1.312 s: the fourth frame (from
    1.28 s, when 120 ms have been spoken from the sound's start) is still within the word."""
    s = Script(speculative_start=False, barge_in_min_speech_ms=120.0).replying()
    s.frames(QUIET, 3)  # to 1.184 s
    s.sound = True
    s.frames(0.25, 3)  # sound blocks to 1.28 s; three weak frames, 100 ms spoken
    assert not s.of(t.ReplyInterrupted)
    s.sound = False
    s.frames(0.25, 1)  # 1.28-1.312 s: the sound ended exactly at its start
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.onset_s == pytest.approx(1.18)


def test_a_weak_words_onset_stays_the_utterances_for_a_press_within_its_pre_roll() -> None:
    """The VAD takes a weak word over from its sound's start (``Segmenter.begin``): pressed
    to talk while still talking, the turn counts from there, as for any speech the press
    found going on."""
    s = replying().blocks(True, 2)
    s.sound = True
    s.frames(0.25, 3)  # a weak word from 1.08 s stops the reply at 1.184 s: turn 2
    assert s.of(t.TurnStarted)[-1].onset_s == pytest.approx(1.08)
    s.call("set_mode", "push_to_talk").call("press").frames(SPEECH, 2)
    started = s.of(t.TurnStarted)[-1]
    assert started.turn_id == 3 and started.onset_s == pytest.approx(1.08)
    assert started.audio_from_s == pytest.approx(37 * FRAME_S - 0.3)


def test_a_duck_left_over_an_app_pause_is_given_back_from_the_first_frame_after_it() -> None:
    """An app pause (``set_paused``) makes the VAD forget what it heard, the speech that ducked
    the reply included: the first quiet frame after it gives the reply back, counted from that
    frame (the speech's own onset is gone)."""
    s = replying().frames(SPEECH, 1)  # ducked
    s.call("set_paused", True).call("set_paused", False)
    s.frames(QUIET, 1)
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]
    assert rows(s.of(t.FalseInterruption)) == expect(
        [("FalseInterruption", 1, 35 * FRAME_S, s.pumped_at(36), False)])


def test_residue_the_vad_is_unsure_of_only_ducks_the_reply() -> None:
    """The canceller's residue of a reply's syllable scored 0.52, 0.49, 0.55 and stopped its
    own reply (an unattended echo room): with no sound over the echo bound, stopping the reply
    takes a frame the VAD is sure of."""
    s = replying().frames(0.52, 1).frames(0.49, 1).frames(0.55, 2)  # 128 ms
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.ReplyInterrupted)
    s.frames(QUIET, 5)
    [false] = s.of(t.FalseInterruption)
    assert not false.reply_stopped and s.of(t.DuckSet)[-1] == t.DuckSet(False)
    assert s.controller.state == S.SPEAKING and len(s.of(t.TurnStarted)) == 1


@pytest.mark.parametrize("peak", [0.69, 0.7])
def test_one_frame_the_vad_is_sure_of_stops_it(peak: float) -> None:
    s = replying().frames(0.55, 1).frames(peak, 1).frames(0.55, 1)
    assert bool(s.of(t.ReplyInterrupted)) == (peak >= 0.7)
    s.frames(0.55, 1)
    assert bool(s.of(t.ReplyInterrupted)) == (peak >= 0.7)  # the peak is the episode's


def test_a_dip_keeps_the_episodes_peak_and_new_speech_starts_afresh() -> None:
    s = replying().frames(0.9, 1).frames(QUIET, 3).frames(0.55, 3)  # a 96 ms dip: one episode
    assert s.of(t.ReplyInterrupted)
    s = replying().frames(0.9, 1).frames(QUIET, 6).frames(0.55, 4)  # 192 ms: new speech
    assert not s.of(t.ReplyInterrupted)


def test_sound_over_the_echo_bound_lets_an_unsure_vad_stop_the_reply() -> None:
    s = replying().blocks(True, 2)
    s.sound = True
    s.frames(0.55, 3)
    assert s.of(t.ReplyInterrupted)


@pytest.mark.parametrize(("sound_blocks", "stops"), [(2, True), (1, False)])
def test_sound_counts_up_to_a_runs_gap_before_the_vads_onset(sound_blocks: int,
                                                               stops: bool) -> None:
    """Sound that may hold echo (not echo-free), ending 20 ms (or 30 ms) before the frame
    where the VAD's speech begins (1.12 s), with the VAD unsure of every frame."""
    s = replying()
    s.echo_free = False
    s.blocks(True, sound_blocks).blocks(False, 2 - sound_blocks)  # sound until 1.10 or 1.09 s
    s.sound = False
    s.frames(QUIET, 1).frames(0.55, 3)
    assert bool(s.of(t.ReplyInterrupted)) == stops
