"""The turn controller alone: scripted VAD frames in, actions out, no audio, no threads."""

from __future__ import annotations

import pytest

from app.conversation import turns as t
from app.events import ConversationState as S
from app.settings import Settings
from app.vad.base import FRAME_S, VadState
from tests.conversation import turn_script
from tests.conversation.turn_script import QUIET, SPEECH, Script


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


def test_barge_in_ducks_then_interrupts_then_starts_the_new_turn_with_its_onset() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)
    s.call("reply_audible", 1).frames(QUIET, 5)
    s.frames(SPEECH, 1)
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.ReplyInterrupted)
    s.frames(SPEECH, 2)  # 3 frames = 96 ms of speech
    interrupted = s.of(t.ReplyInterrupted)[0]
    assert interrupted.turn_id == 1 and interrupted.cause == "speech"
    assert interrupted.was_audible and interrupted.onset_s == pytest.approx(34 * FRAME_S)
    assert interrupted.detected_s == pytest.approx(s.pumped_at(37))
    assert s.of(t.DuckSet) == [t.DuckSet(True)]  # it fades out from the ducked level
    assert s.states()[-1] == S.INTERRUPTED
    s.frames(SPEECH, 5)  # onset confirmed at 250 ms
    new = s.of(t.TurnStarted)[-1]
    assert new.turn_id == 2 and new.onset_s == pytest.approx(34 * FRAME_S)
    assert new.audio_from_s == pytest.approx(34 * FRAME_S - 0.3)
    assert s.states()[-1] == S.USER_SPEAKING
    s.call("reply_finished", 1)  # the silenced reply reporting in late changes nothing
    assert s.states()[-1] == S.USER_SPEAKING


def test_a_short_sound_during_a_reply_only_ducks_it() -> None:
    s = Script(speculative_start=False).frames(SPEECH, 12).frames(QUIET, 17)
    s.call("reply_audible", 1).frames(SPEECH, 2).frames(QUIET, 5)
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


def test_muting_a_speculating_turn_cancels_the_speculation_then_the_turn() -> None:
    s = Script(speculative_start=True, speculative_pause_ms=150.0).frames(SPEECH, 20)
    s.frames(QUIET, 6)  # 192 ms: speculating
    assert [a.turn_id for a in s.of(t.SpeculationStarted)] == [1]
    s.call("set_muted", True)
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
