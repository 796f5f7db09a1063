"""The turn controller alone: scripted VAD frames in, actions out, no audio, no threads."""

from __future__ import annotations

import pytest

from app import events as ev
from app.conversation import barge_in as b
from app.conversation import turns as t
from app.events import ConversationState as S
from app.settings import Settings
from app.vad.base import FRAME_S, VadFrame, VadParams, VadState
from app.vad.sound import SoundBlock
from tests.conversation import turn_script
from tests.conversation.turn_script import QUIET, SPEECH, SURE, Script


@pytest.fixture(autouse=True, params=[1, 3, 8], ids=lambda n: f"{n}_frames_per_pump")
def frames_per_pump(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test here runs with one and with several VAD frames per pump (issue 22)."""
    monkeypatch.setattr(turn_script, "FRAMES_PER_PUMP", request.param)
    return int(request.param)


def test_params_follow_the_settings() -> None:
    settings = Settings().with_value("echo.mode", "half_duplex")
    params = t.TurnParams.from_settings(settings)
    assert params.barge_in is False and params.pre_roll_ms == 300
    assert t.TurnParams.from_settings(Settings()).barge_in is True


def test_always_listening_turn_with_pre_roll_and_endpoint() -> None:
    s = Script(speculative_start=False).frames(QUIET, 5).frames(SPEECH, 20).frames(QUIET, 20)
    started = s.of(t.TurnStarted)[0]
    assert started.onset_s == pytest.approx(5 * FRAME_S)
    assert started.audio_from_s == pytest.approx(5 * FRAME_S - 0.3)
    ended = s.of(t.TurnEnded)[0]
    assert ended.user_end_s == pytest.approx(25 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(s.pumped_at(41))
    assert s.states() == [S.USER_SPEAKING, S.ENDPOINTING, S.RESPONDING]
    s.call("reply_audible", 1).call("reply_finished", 1)
    assert s.states()[-2:] == [S.SPEAKING, S.LISTENING]


@pytest.mark.parametrize("smart", [False, True])
def test_the_endpoint_silence_ends_the_turn_at_the_10_ms_block_not_the_next_frame(
        smart: bool) -> None:
    """Issue 14: turns ended 593-630 ms after the true end with a 500 ms endpoint; up to
    32 ms of that was waiting for the VAD frame the endpoint fell in."""
    s = Script(speculative_start=False, smart_endpoint=smart).frames(SPEECH, 20)
    s.frames(QUIET, 15)  # 480 ms of silence after the last voiced frame (0.64 s)
    assert not s.of(t.TurnEnded)
    s.blocks(False, 2)  # 1.12-1.14 s: 500 ms is reached at 1.14 s
    [ended] = s.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(20 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(1.14)  # not 1.152, the end of the next frame


def test_one_frame_of_speech_in_a_pause_does_not_count_the_silence_again() -> None:
    """Issue 14: rain at 5 dB SNR scored 0.56 for one frame 0.4 s into the pause after a
    sentence, and the turn ended 876 ms after the true end instead of 599."""
    s = Script(speculative_start=False).frames(SPEECH, 20).frames(QUIET, 9)
    s.frames(SPEECH, 1).frames(QUIET, 20)
    [ended] = s.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(20 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(s.pumped_at(36))  # 512 ms after the speech


def test_a_blip_in_a_pause_leaves_the_speculative_start_alone() -> None:
    """A real engine restarts its prefill for a cancelled speculation: a rain drop must not
    cost the reply that head start. Speech that goes on cancels it at its second frame."""
    s = Script(speculative_pause_ms=150).frames(SPEECH, 20).frames(QUIET, 9)
    s.frames(SPEECH, 1).frames(QUIET, 20)
    assert len(s.of(t.SpeculationStarted)) == 1 and not s.of(t.SpeculationCancelled)
    assert s.of(t.TurnEnded)[0].user_end_s == pytest.approx(20 * FRAME_S)
    s = Script(speculative_pause_ms=150).frames(SPEECH, 20).frames(QUIET, 9).frames(SPEECH, 1)
    assert not s.of(t.SpeculationCancelled)
    s.frames(SPEECH, 1)
    [cancelled] = s.of(t.SpeculationCancelled)
    assert cancelled.t_s == pytest.approx(s.pumped_at(31))


LOUD, FLOOR = 1e-3, 1e-7  # blocks' mean squares: words, and the room in a pause


@pytest.mark.parametrize("smart", [False, True])
def test_a_person_going_on_as_the_endpoint_silence_is_reached_keeps_the_turn(
        smart: bool) -> None:
    """Real speech, a 0.5 s thinking pause: the next word's first frame scored under the
    threshold just as the pause reached the endpoint silence, and the sentence was split
    there. While the latest block stands well over the pause's level the turn does not end;
    the VAD's next frames say whether it was speech."""
    s = Script(speculative_start=False, smart_endpoint=smart)
    s.power = LOUD
    s.frames(SPEECH, 20)
    s.power = FLOOR
    s.frames(QUIET, 15)  # 480 ms of silence
    s.power = LOUD  # the next word begins
    s.frames(0.3, 1)  # 512 ms: its first frame, weakly voiced
    assert not s.of(t.TurnEnded)
    s.frames(SPEECH, 5)
    s.power = FLOOR
    s.frames(QUIET, 20)
    [ended] = s.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(41 * FRAME_S, abs=0.01)  # one turn, to its end
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1]


@pytest.mark.parametrize("smart", [False, True])
def test_sound_coming_back_that_is_no_word_holds_the_end_for_a_block_only(smart: bool) -> None:
    s = Script(speculative_start=False, smart_endpoint=smart)
    s.power = LOUD
    s.frames(SPEECH, 20)
    s.power = FLOOR
    s.frames(QUIET, 15)
    s.power = LOUD
    s.blocks(False, 2)  # 500 ms reached at 1.14 s, on a loud block (the gate's floor aside)
    assert not s.of(t.TurnEnded)
    s.power = FLOOR
    s.blocks(False, 1)  # a door, not a word: the end goes ahead at the next quiet block
    [ended] = s.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(20 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(1.15)


def _first_reply_ended(guard: bool) -> Script:
    """A turn, its reply heard while the canceller warms up (or not), and the reply's end."""
    s = Script(speculative_start=False).frames(SPEECH, 20).frames(QUIET, 16)
    s.guard = guard
    s.call("reply_audible", 1).frames(QUIET, 10).call("reply_finished", 1)
    return s


def test_speech_in_a_first_replys_echo_tail_that_does_not_outlast_it_is_no_turn() -> None:
    """The cold canceller's residue of a first reply's last syllable scored 0.9 from just
    before the reply's end to 0.3 s after it and became a turn. Under the warm-up guard speech
    that begins before the echo can be over (``ECHO_TAIL_S`` after the last sample) must
    outlast it; what stops sooner was the reply, and the next speech has its own onset."""
    s = _first_reply_ended(guard=True)
    ended_s = s.now
    s.frames(SPEECH, 10).frames(QUIET, 8)  # 320 ms: over before the 350 ms tail is
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1]
    s.frames(SPEECH, 10)
    [_, started] = s.of(t.TurnStarted)
    assert started.onset_s == pytest.approx(ended_s + 18 * FRAME_S)


def test_a_person_who_answers_as_the_first_reply_ends_loses_no_word() -> None:
    """Speech that outlasts the echo tail is a turn from where it began."""
    s = _first_reply_ended(guard=True)
    ended_s = s.now
    s.frames(SPEECH, 10)
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1]  # 320 ms: the echo may go on
    s.frames(SPEECH, 2)
    [_, started] = s.of(t.TurnStarted)
    assert started.onset_s == pytest.approx(ended_s)
    assert s.log[-1][0] * FRAME_S > ended_s + b.ECHO_TAIL_S  # at the first frame past it


def test_once_the_canceller_is_trusted_speech_after_a_reply_is_a_turn_at_its_onset() -> None:
    s = _first_reply_ended(guard=False)
    ended_s = s.now
    s.frames(SPEECH, 8)
    [_, started] = s.of(t.TurnStarted)
    assert started.onset_s == pytest.approx(ended_s)


def test_sound_after_the_last_frame_leaves_the_endpoint_to_the_frame() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 20).frames(QUIET, 15)
    s.blocks(True, 1).blocks(False, 2)  # something to hear: the frame may be speech again
    assert not s.of(t.TurnEnded)
    s.frames(QUIET, 1)
    assert s.of(t.TurnEnded)[0].endpoint_s == pytest.approx(36 * FRAME_S)


def test_speculation_starts_at_a_short_pause_and_is_cancelled_when_speech_resumes() -> None:
    s = Script(speculative_pause_ms=150).frames(SPEECH, 12).frames(QUIET, 6)
    assert len(s.of(t.SpeculationStarted)) == 1
    s.frames(SPEECH, 3)
    assert len(s.of(t.SpeculationCancelled)) == 1 and not s.of(t.TurnEnded)
    s.frames(QUIET, 20)
    assert len(s.of(t.SpeculationStarted)) == 2 and len(s.of(t.TurnEnded)) == 1
    order = [type(a).__name__ for _, a in s.log if not isinstance(a, t.StateSet)]
    assert order[-2:] == ["SpeculationStarted", "TurnEnded"]


WEAK = 0.3  # under the VAD's threshold, over the weakly voiced level


def test_a_weakly_voiced_lead_in_moves_the_turns_audio_back() -> None:
    """A soft first word in rain at 5 dB scored 0.30-0.44 and the onset came on the second
    word, 434 ms late: the turn's audio now starts a pre-roll before the weakly voiced run
    that led to the onset (one frame's dip in it allowed)."""
    s = Script(speculative_start=False).frames(QUIET, 20).frames(WEAK, 6).frames(0.1, 1)
    s.frames(b.WEAK_PROBABILITY, 2).frames(SPEECH, 12)
    started = s.of(t.TurnStarted)[0]
    assert started.onset_s == pytest.approx(29 * FRAME_S)
    assert started.audio_from_s == pytest.approx(20 * FRAME_S - 0.3)


def test_a_lead_in_from_the_sessions_very_first_frame_counts() -> None:
    s = Script(speculative_start=False).frames(WEAK, 6).frames(SPEECH, 12)
    assert s.of(t.TurnStarted)[0].audio_from_s == pytest.approx(-0.3)


def test_a_lead_in_right_after_a_reply_ended_over_unconfirmed_speech_counts() -> None:
    """The VAD starts afresh there (the speech may have been the reply); the person's soft
    first word after it is a lead-in from its first frame, and outlasts the reply's echo."""
    s = Script(speculative_start=False).frames(SPEECH, 20).frames(QUIET, 16)
    s.guard = True
    s.call("reply_audible", 1).frames(SPEECH, 3).call("reply_finished", 1)  # ducked: restart
    ended_s = s.now
    s.guard = False
    s.frames(WEAK, 4).frames(SPEECH, 14)
    [_, started] = s.of(t.TurnStarted)
    assert started.onset_s == pytest.approx(ended_s + 4 * FRAME_S)
    assert started.audio_from_s == pytest.approx(ended_s - 0.3)


def test_two_quiet_frames_end_a_lead_in_and_it_reaches_back_at_most_half_a_second() -> None:
    s = Script(speculative_start=False).frames(QUIET, 5).frames(WEAK, 3).frames(0.1, 2)
    s.frames(WEAK, 2).frames(SPEECH, 12)
    assert s.of(t.TurnStarted)[0].audio_from_s == pytest.approx(10 * FRAME_S - 0.3)
    s = Script(speculative_start=False).frames(QUIET, 5).frames(WEAK, 30).frames(SPEECH, 12)
    started = s.of(t.TurnStarted)[0]
    assert started.onset_s == pytest.approx(35 * FRAME_S)
    assert started.audio_from_s == pytest.approx(35 * FRAME_S - b.LEAD_MAX_S - 0.3)


def test_a_lead_in_belongs_to_its_own_turn_and_none_is_taken_over_a_reply() -> None:
    """Over a reply the canceller's residue scores as weakly voiced too: a barge-in's audio
    starts a pre-roll before its onset, as before; the next turn does not inherit a lead."""
    s = Script(speculative_start=False).frames(QUIET, 5).frames(WEAK, 5)
    s.frames(SPEECH, 12).frames(QUIET, 17)
    assert s.of(t.TurnStarted)[0].audio_from_s == pytest.approx(5 * FRAME_S - 0.3)
    s.call("reply_audible", 1).frames(WEAK, 5).frames(SPEECH, 8)
    new = s.of(t.TurnStarted)[-1]
    assert new.turn_id == 2 and new.audio_from_s == pytest.approx(44 * FRAME_S - 0.3)
    s.frames(QUIET, 17).call("reply_audible", 2).call("reply_finished", 2)
    s.frames(QUIET, 3).frames(SPEECH, 8)
    third = s.of(t.TurnStarted)[-1]
    assert third.turn_id == 3
    assert third.audio_from_s == pytest.approx(third.onset_s - 0.3)


def test_barge_in_ducks_then_interrupts_then_starts_the_new_turn_with_its_onset() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)
    s.call("reply_audible", 1).frames(QUIET, 5)
    s.frames(SPEECH, 1)
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.ReplyInterrupted)
    s.frames(SPEECH, 1)  # 2 frames = 64 ms of speech
    interrupted = s.of(t.ReplyInterrupted)[0]
    assert interrupted.turn_id == 1 and interrupted.cause == "speech"
    assert interrupted.was_audible and interrupted.onset_s == pytest.approx(34 * FRAME_S)
    assert interrupted.detected_s == pytest.approx(s.pumped_at(36))
    assert s.of(t.DuckSet) == [t.DuckSet(True)]  # it fades out from the ducked level
    assert s.states()[-1] == S.INTERRUPTED
    s.frames(SPEECH, 6)  # onset confirmed at 250 ms
    new = s.of(t.TurnStarted)[-1]
    assert new.turn_id == 2 and new.onset_s == pytest.approx(34 * FRAME_S)
    assert new.audio_from_s == pytest.approx(34 * FRAME_S - 0.3)
    assert s.states()[-1] == S.USER_SPEAKING
    s.call("reply_finished", 1)  # the silenced reply reporting in late changes nothing
    assert s.states()[-1] == S.USER_SPEAKING


def test_a_short_sound_during_a_reply_only_ducks_it() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)
    s.call("reply_audible", 1).frames(SPEECH, 1).frames(QUIET, 5)
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]
    assert not s.of(t.ReplyInterrupted) and s.states()[-1] == S.SPEAKING


def test_speech_while_the_engine_is_still_thinking_cancels_it_too() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17).frames(SPEECH, 3)
    interrupted = s.of(t.ReplyInterrupted)[0]
    assert interrupted.was_audible is False and not s.of(t.DuckSet)


def test_without_barge_in_speech_during_the_reply_is_ignored_and_needs_a_fresh_onset() -> None:
    s = Script(barge_in=False, speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)
    s.call("reply_audible", 1).frames(SPEECH, 15)
    assert not s.of(t.ReplyInterrupted) and len(s.of(t.TurnStarted)) == 1
    s.call("reply_finished", 1)
    assert s.controller.vad_state == VadState.QUIET and len(s.of(t.TurnStarted)) == 1
    assert s.states()[-1] == S.LISTENING
    s.frames(SPEECH, 7)
    assert len(s.of(t.TurnStarted)) == 1  # 224 ms: not yet an onset of its own
    s.frames(SPEECH, 1)
    new = s.of(t.TurnStarted)[-1]
    assert new.turn_id == 2 and new.onset_s == pytest.approx((12 + 17 + 15) * FRAME_S)


def test_push_to_talk_runs_from_press_to_release() -> None:
    s = Script(mode="push_to_talk").frames(SPEECH, 10)
    assert not s.of(t.TurnStarted) and s.states() == []  # not pressed: nothing
    s.frames(QUIET, 10).call("press").frames(QUIET, 3).frames(SPEECH, 10).frames(QUIET, 2)
    started = s.of(t.TurnStarted)[0]
    assert started.audio_from_s == pytest.approx(20 * FRAME_S - 0.3)
    assert started.onset_s == pytest.approx(23 * FRAME_S)
    s.call("release")
    ended = s.of(t.TurnEnded)[0]
    assert ended.user_end_s == pytest.approx(33 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(35 * FRAME_S)
    assert s.states() == [S.USER_SPEAKING, S.RESPONDING]


def test_push_to_talk_without_any_speech_starts_nothing() -> None:
    s = Script(mode="push_to_talk").call("press").frames(QUIET, 20).call("release")
    assert not s.of(t.TurnStarted) and not s.of(t.TurnEnded)
    assert s.states() == [S.USER_SPEAKING, S.IDLE]


def test_a_press_during_a_reply_is_a_barge_in() -> None:
    s = Script(mode="push_to_talk").call("press").frames(SPEECH, 10).call("release")
    s.call("reply_audible", 1).frames(QUIET, 5).call("press")
    interrupted = s.of(t.ReplyInterrupted)[0]
    assert interrupted.cause == "push_to_talk" and interrupted.onset_s == pytest.approx(
        15 * FRAME_S)
    assert s.states()[-1] == S.USER_SPEAKING


def test_stop_mute_and_mode_changes() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)
    s.call("reply_audible", 1).call("stop_reply")
    assert s.of(t.ReplyInterrupted)[0].cause == "stop"
    assert s.states()[-1] == S.LISTENING
    s.frames(SPEECH, 10).call("set_muted", True)
    assert s.of(t.TurnAbandoned) == [t.TurnAbandoned(2)] and s.states()[-1] == S.IDLE
    s.frames(SPEECH, 20)
    assert len(s.of(t.TurnStarted)) == 2  # muted: speech is ignored
    s.call("set_muted", False).call("set_mode", "push_to_talk")
    assert s.controller.params.mode == "push_to_talk" and s.states()[-1] == S.IDLE


def test_an_overlong_turn_ends_at_the_cap_and_speech_that_goes_on_needs_a_fresh_onset() -> None:
    s = Script(speculative_start=False, max_user_turn_s=1.0).frames(SPEECH, 33)
    [ended] = s.of(t.TurnEnded)
    assert ended.onset_s == pytest.approx(0.0)
    assert ended.endpoint_s == pytest.approx(s.pumped_at(32))  # the first frame past 1.0 s
    assert s.controller.vad_state == VadState.STARTING  # frame 33: a fresh candidate
    assert s.states()[-1] == S.RESPONDING
    s.frames(SPEECH, 12)  # the same person goes on talking: a new utterance, a barge-in
    assert s.of(t.ReplyInterrupted)[0].turn_id == 1
    second = s.of(t.TurnStarted)[-1]
    assert second.turn_id == 2 and second.onset_s >= 32 * FRAME_S - 1e-9


def test_the_cap_ends_a_push_to_talk_turn_and_the_held_key_starts_nothing_more() -> None:
    s = Script(mode="push_to_talk", max_user_turn_s=1.0).call("press").frames(SPEECH, 40)
    assert len(s.of(t.TurnStarted)) == 1 and len(s.of(t.TurnEnded)) == 1
    assert s.of(t.TurnEnded)[0].endpoint_s == pytest.approx(s.pumped_at(32))
    s.call("release")
    assert len(s.of(t.TurnEnded)) == 1
    s.call("press").frames(SPEECH, 3)
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1, 2]


def test_the_turn_cap_is_a_validated_setting() -> None:
    assert t.TurnParams.from_settings(Settings()).max_user_turn_s == 60.0
    capped = Settings().with_value("turn.max_user_turn_s", 20)
    assert t.TurnParams.from_settings(capped).max_user_turn_s == 20.0
    for bad in (0, 4.9, 601):
        with pytest.raises(ValueError, match="max_user_turn_s"):
            Settings().with_value("turn.max_user_turn_s", bad)


def test_a_pause_by_the_app_keeps_the_persons_mute_switch() -> None:
    s = Script(speculative_start=False).call("set_muted", True).call("set_paused", True)
    s.call("set_paused", False).frames(SPEECH, 20)
    assert not s.of(t.TurnStarted) and s.states()[-1] == S.IDLE  # still muted by the person
    s.call("set_muted", False).call("set_paused", True).frames(SPEECH, 20)
    assert not s.of(t.TurnStarted)
    s.call("set_paused", False)
    assert s.states()[-1] == S.LISTENING and s.controller.vad_state == VadState.QUIET
    s.frames(SPEECH, 7)
    assert not s.of(t.TurnStarted)  # the speech heard while paused needs a fresh onset
    s.frames(SPEECH, 2)
    assert len(s.of(t.TurnStarted)) == 1


def test_a_fresh_controller_is_neither_muted_nor_paused() -> None:
    s = Script(speculative_start=False).call("set_muted", False).frames(SPEECH, 12)
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1]
    s = Script(speculative_start=False).call("set_paused", False).frames(SPEECH, 12)
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1]


@pytest.mark.parametrize("how", ["mute", "mode"])
def test_muting_a_speculating_turn_cancels_the_speculation_then_the_turn(how: str) -> None:
    s = Script(speculative_start=True, speculative_pause_ms=150.0).frames(SPEECH, 20)
    s.frames(QUIET, 6)  # 192 ms: speculating
    assert [a.turn_id for a in s.of(t.SpeculationStarted)] == [1]
    if how == "mute":
        s.call("set_muted", True)
    else:
        s.call("set_mode", "push_to_talk")
    assert [a for _, a in s.log[-3:]] == [t.SpeculationCancelled(1, s.now), t.TurnAbandoned(1),
                                          t.StateSet(S.IDLE, s.now)]


def test_the_cap_ends_the_turn_at_its_last_voiced_frame_counted_from_its_onset() -> None:
    s = Script(speculative_start=False, max_user_turn_s=1.0).frames(QUIET, 10)
    s.frames(SPEECH, 40)  # onset 0.32 s: capped at the frame ending 1.344 s, 1.024 s later
    [ended] = s.of(t.TurnEnded)
    assert (ended.turn_id, ended.decided_by, ended.model_probability) == (1, "cap", None)
    assert ended.onset_s == pytest.approx(10 * FRAME_S)
    assert ended.user_end_s == pytest.approx(42 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(s.pumped_at(42))


def test_sound_running_since_the_first_block_ducks_a_reply_from_its_start() -> None:
    """The gate's first run of sound has no earlier run to be a gap after."""
    s = Script(speculative_start=False)
    s.sound = True  # from the very first block on (a person near the microphone, say)
    s.replying().frames(QUIET, 12)
    assert s.of(t.DuckSet)[0] == t.DuckSet(True)
    assert [f.onset_s for f in s.of(t.FalseInterruption)] == [0.0]


# ---- the inputs: commands, settings, and how frames and blocks are taken ----------------------

def test_every_state_change_carries_the_time_it_was_processed() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)
    s.call("reply_audible", 1).call("reply_finished", 1).frames(SPEECH, 12)
    s.call("stop_reply").call("set_muted", True).call("set_muted", False)
    s.call("set_paused", True).call("set_paused", False).call("set_mode", "push_to_talk")
    s.call("press").frames(SPEECH, 5).call("release").call("reply_audible", 3)
    assert len(s.states()) >= 12
    for frame, action in s.log:
        if isinstance(action, t.StateSet):
            assert action.t_s == pytest.approx(frame * FRAME_S), action


def test_each_turn_command_reaches_its_input() -> None:
    s = Script(speculative_start=False).replying()
    s.call("on_command", ev.StopReply())
    assert s.of(t.ReplyInterrupted) == [t.ReplyInterrupted(1, s.now, s.now, "stop", True)]
    s.call("on_command", ev.SetMuted(True))
    assert s.controller.muted and s.states()[-1] == S.IDLE
    s.call("on_command", ev.SetMuted(False)).call("on_command", ev.SetListenMode("push_to_talk"))
    assert s.controller.params.mode == "push_to_talk" and not s.controller.muted
    s.call("on_command", ev.PressToTalk()).frames(SPEECH, 5)
    s.call("on_command", ev.ReleaseToTalk())
    ended = s.of(t.TurnEnded)[-1]
    assert (ended.turn_id, ended.decided_by) == (2, "release")
    assert ended.endpoint_s == pytest.approx(s.now)
    with pytest.raises(TypeError, match="not a turn-taking command: 'press'"):
        s.controller.on_command("press", s.now)
    for frame, action in s.log:
        if isinstance(action, t.StateSet):
            assert action.t_s == pytest.approx(frame * FRAME_S), action


def test_new_settings_apply_at_once_and_keep_the_vad_parameters_given_before() -> None:
    s = Script(speculative_start=False)
    c = s.controller
    assert c.update_params(t.TurnParams(speculative_start=False, barge_in=False), 0.0,
                           vad=VadParams(endpoint_silence_ms=300.0)) == []
    assert c.params.barge_in is False and c.vad_params.endpoint_silence_ms == 300.0
    smart = t.TurnParams(speculative_start=False, smart_endpoint=True,
                         smart_long_silence_ms=1500.0)
    c.update_params(smart, 0.0)  # the model's long silence is the VAD's endpoint now
    assert c.params == smart and c.vad_params.endpoint_silence_ms == 1500.0
    c.update_params(t.TurnParams(speculative_start=False), 0.0)
    assert c.vad_params.endpoint_silence_ms == 300.0  # the VAD's own, as given before
    ptt = t.TurnParams(mode="push_to_talk", barge_in=False, pre_roll_ms=200.0)
    assert c.update_params(ptt, 0.5) == [t.StateSet(S.IDLE, 0.5)]
    assert c.params == ptt
    s.call("press").frames(SPEECH, 12)
    assert s.of(t.TurnStarted)[0].audio_from_s == pytest.approx(-0.2)


@pytest.mark.parametrize("how", ["smart_off", "mute", "mode", "stop"])
def test_an_early_end_under_the_guard_stands_when_the_person_does_something_else(
        how: str) -> None:
    s = Script(smart_endpoint=True, speculative_start=False, smart_pause_ms=120.0)
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.call("reply_audible", 1)
    s.guard = True
    s.frames(SPEECH, 2)  # ducked: the echo, or the person going on
    if how == "smart_off":
        s.call("update_params", t.TurnParams(speculative_start=False))
    elif how == "mute":
        s.call("set_muted", True)
    elif how == "mode":
        s.call("set_mode", "push_to_talk")
    else:
        s.call("stop_reply")  # the reply is stopped: what was heard is no false interruption
    if how == "stop":
        assert not s.of(t.FalseInterruption) and s.of(t.ReplyInterrupted)
    else:
        [false] = s.of(t.FalseInterruption)
        assert (false.turn_id, false.t_s) == (1, pytest.approx(s.now))
    s.guard = False
    s.call("set_muted", False).frames(SPEECH, 1)
    assert not s.of(t.TurnResumed)


def test_a_reply_over_while_ducked_under_the_guard_still_lets_the_turn_resume() -> None:
    s = Script(smart_endpoint=True, speculative_start=False, smart_pause_ms=120.0)
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.call("reply_audible", 1)
    s.guard = True
    s.frames(SPEECH, 2).call("reply_finished", 1)
    s.guard = False
    s.frames(SPEECH, 1)
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1] and not s.of(t.FalseInterruption)


def test_push_to_talk_counts_speech_from_its_start_within_the_pre_roll() -> None:
    s = Script(mode="push_to_talk", pre_roll_ms=320.0).frames(SPEECH, 10)  # 0-0.32 s
    s.call("press").frames(SPEECH, 3)  # began exactly a pre-roll before the press
    [started] = s.of(t.TurnStarted)
    assert (started.onset_s, started.audio_from_s) == pytest.approx((0.0, 0.0))
    s = Script(mode="push_to_talk", pre_roll_ms=300.0).frames(SPEECH, 10)
    s.call("press").frames(SPEECH, 3)  # began 20 ms before the pre-roll: from the press on
    [started] = s.of(t.TurnStarted)
    assert started.onset_s == pytest.approx(10 * FRAME_S)


def test_sound_is_ignored_while_muted_and_in_push_to_talk() -> None:
    s = Script(speculative_start=False).replying().call("set_muted", True).blocks(True, 4)
    assert not s.of(t.DuckSet)
    s = Script(mode="push_to_talk").call("press").frames(SPEECH, 10).call("release")
    s.call("reply_audible", 1).blocks(True, 4)
    assert not s.of(t.DuckSet) and not s.of(t.ReplyInterrupted)


def test_a_press_in_always_listening_mode_does_nothing() -> None:
    s = Script(speculative_start=False).replying().call("press")
    assert not s.of(t.ReplyInterrupted) and s.states()[-1] == S.SPEAKING


def test_muting_twice_or_unmuting_when_listening_keeps_the_turn() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).call("set_muted", False)
    assert not s.of(t.TurnAbandoned)
    s.call("set_muted", True).call("set_muted", True)
    assert s.of(t.TurnAbandoned) == [t.TurnAbandoned(1)]


def test_changing_the_mode_abandons_the_turn_and_the_same_mode_keeps_it() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).call("set_mode", "always_listening")
    assert not s.of(t.TurnAbandoned)
    s.call("set_mode", "push_to_talk").frames(SPEECH, 5)
    assert s.of(t.TurnAbandoned) == [t.TurnAbandoned(1)] and len(s.of(t.TurnStarted)) == 1


@pytest.mark.parametrize(("pause_ms", "frames"), [(128.0, 4), (129.0, 5)])
def test_speculation_starts_at_the_first_frame_whose_silence_reaches_its_pause(
        pause_ms: float, frames: int) -> None:
    s = Script(speculative_start=True, speculative_pause_ms=pause_ms).frames(SPEECH, 20)
    s.frames(QUIET, frames - 1)
    assert not s.of(t.SpeculationStarted)
    s.frames(QUIET, 1)
    assert s.of(t.SpeculationStarted) == [t.SpeculationStarted(1, s.now)]
    s.frames(SPEECH, 2)  # speech going on: its second frame (one may be a blip)
    assert s.of(t.SpeculationCancelled) == [t.SpeculationCancelled(1, s.now)]


def test_muted_the_vad_still_follows_every_frame_of_a_batch() -> None:
    s = Script(frames_per_pump=8, speculative_start=False).call("set_muted", True)
    s.frames(SPEECH, 8)
    assert s.controller.vad_state == VadState.SPEAKING


def test_defaults_trust_the_canceller_and_take_every_block_of_a_pump() -> None:
    c = t.TurnController(t.TurnParams(speculative_start=False, smart_endpoint=True))
    frames = [VadFrame(i * FRAME_S, (i + 1) * FRAME_S, SPEECH if i < 20 else QUIET)
              for i in range(26)]
    c.on_frames(frames, 26 * FRAME_S)
    c.endpoint_verdict(1, 1, 0.99, 26 * FRAME_S)  # settled by default: ends early
    assert c.state == S.RESPONDING
    c = t.TurnController(t.TurnParams(speculative_start=False))
    frames = [VadFrame(i * FRAME_S, (i + 1) * FRAME_S, SPEECH if i < 12 else QUIET)
              for i in range(29)]
    c.on_frames(frames, 29 * FRAME_S)
    c.reply_audible(1, 29 * FRAME_S)
    blocks = [SoundBlock(0.93, 0.94, True), SoundBlock(0.94, 0.95, True)]
    assert c.on_frames([], 0.95, sound=blocks) == [t.DuckSet(True)]  # two blocks: a duck
    speech = [VadFrame(i * FRAME_S, (i + 1) * FRAME_S, SPEECH) for i in range(29, 33)]
    actions = c.on_frames(speech, 33 * FRAME_S)  # no guard by default: the reply stops
    assert any(isinstance(a, t.ReplyInterrupted) for a in actions)


def test_a_fresh_controller_hears_speech_from_its_first_frame() -> None:
    s = Script(speculative_start=False)
    assert s.controller.muted is False
    s.call("set_muted", False)
    assert s.controller.muted is False
    s.call("set_paused", False)
    assert s.controller.muted is False
    s.frames(SPEECH, 12)
    assert s.of(t.TurnStarted)[0].onset_s == 0.0


def test_a_press_during_a_reply_stops_it_when_pressed() -> None:
    s = Script(mode="push_to_talk").call("press").frames(SPEECH, 10).call("release")
    s.call("reply_audible", 1).frames(QUIET, 3).call("press")
    assert s.of(t.ReplyInterrupted) == [t.ReplyInterrupted(1, s.now, s.now, "push_to_talk",
                                                           True)]


def test_a_turn_exactly_as_long_as_the_cap_ends_at_that_frame() -> None:
    s = Script(speculative_start=False, max_user_turn_s=157 * FRAME_S).frames(SPEECH, 160)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "cap" and ended.endpoint_s == pytest.approx(s.pumped_at(157))


def test_a_block_ending_with_a_frame_is_taken_before_that_frame() -> None:
    """Sound in the block that ends with the frame is the frame's to judge: the blocks after it
    may end the turn at the endpoint silence."""
    s = Script(speculative_start=False).frames(SPEECH, 20)
    s.sound = True
    s.frames(QUIET, 15)  # the last block, 1.11-1.12 s, ends with the frame at 1.12 s
    s.blocks(False, 2)
    [ended] = s.of(t.TurnEnded)
    assert ended.endpoint_s == pytest.approx(1.14)


def test_speech_from_the_very_first_frame_is_a_turn_after_the_min_speech() -> None:
    """A fresh controller has no early end to take back: its first frame is the VAD's."""
    s = Script(speculative_start=False).frames(SPEECH, 7)  # 224 ms
    assert not s.of(t.TurnStarted)
    s.frames(SPEECH, 1)  # 256 ms from the first frame's start: the 250 ms of speech
    [started] = s.of(t.TurnStarted)
    assert started.onset_s == 0.0 and s.controller.state == S.USER_SPEAKING


def test_a_short_word_the_vad_is_sure_of_is_a_whole_turn() -> None:
    """Issue 14: a one-word answer ("two") held 150-250 ms over the threshold made no turn."""
    s = Script(speculative_start=False).frames(SURE, 2)
    assert not s.of(t.TurnStarted)
    s.frames(SURE, 1).frames(SPEECH, 2).frames(QUIET, 20)  # 160 ms of speech
    [started] = s.of(t.TurnStarted)
    [ended] = s.of(t.TurnEnded)
    assert started.onset_s == 0.0 and ended.user_end_s == pytest.approx(5 * FRAME_S)
    assert s.controller.state == S.RESPONDING


def test_blocks_after_a_frame_are_taken_after_it() -> None:
    """Blocks that end after the last complete frame (the next frame is not done yet) come
    after it: speech in that frame goes on before their silence is counted."""
    s = Script(speculative_start=False).frames(SPEECH, 20).frames(QUIET, 14)  # to 1.088 s
    blocks = [SoundBlock(1.08 + i * 0.01, 1.09 + i * 0.01, False, True) for i in range(6)]
    s.log += [(35, a) for a in s.controller.on_frames(
        [VadFrame(34 * FRAME_S, 35 * FRAME_S, SPEECH)], 1.14, sound=blocks)]
    assert not s.of(t.TurnEnded)  # 500 ms after the speech ending at 0.64 s is 1.14 s
    assert s.controller.state == S.USER_SPEAKING


@pytest.mark.parametrize("frames_per_pump", [1, 4])
def test_the_silence_counts_from_where_the_level_fell_not_from_the_vads_trailing_frames(
        frames_per_pump: int) -> None:
    """Issue 14 (turn end ≤ endpoint silence + 100 ms): the VAD scores speech for two frames
    after the words stopped (0.576 s); the level says so, and the turn ends 500 ms after the
    words, not after the frames."""
    s = Script(frames_per_pump, speculative_start=False)
    s.power = 1e-7
    s.frames(QUIET, 10)  # the room: -70 dBFS
    s.power = 1e-2
    s.frames(SPEECH, 8)  # words at -20 dBFS from 0.32 s to 0.576 s ...
    s.power = 1e-7
    s.frames(SPEECH, 2).frames(QUIET, 20)  # ... the VAD's frames trail them to 0.64 s
    [ended] = s.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(0.576)
    # at the block ending 1.08 s, in the frame to 1.088 s (without the level: 1.14 s, frame 36)
    assert ended.endpoint_s == pytest.approx(s.pumped_at(34))
    quiet_room = Script(frames_per_pump, speculative_start=False).frames(QUIET, 10).frames(
        SPEECH, 10).frames(QUIET, 20)  # no levels known: the VAD's end stands
    [ended] = quiet_room.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(0.64)
