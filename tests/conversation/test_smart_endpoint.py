"""Semantic end of turn in the turn controller (issue 23), on the virtual clock: the model is
asked once per pause, its verdict ends the turn or makes it wait, silence decides when it is
late or missing, push-to-talk is unchanged."""

from __future__ import annotations

import pytest

from app.conversation import turns as t
from app.events import ConversationState as S
from app.vad.base import FRAME_S
from tests.conversation import turn_script
from tests.conversation.turn_script import QUIET, SMART, SPEECH, Script


@pytest.fixture(autouse=True, params=[1, 4], ids=lambda n: f"{n}_frames_per_pump")
def frames_per_pump(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(turn_script, "FRAMES_PER_PUMP", request.param)
    return int(request.param)


def smart(**overrides: object) -> Script:
    return Script(**{**SMART, **overrides})


def test_the_model_is_asked_once_per_pause_and_a_finished_turn_ends_at_its_verdict() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 4)  # 128 ms of silence
    [query] = s.of(t.EndpointQuery)
    assert query.turn_id == 1 and query.pause == 1
    assert query.speech_end_s == pytest.approx(20 * FRAME_S)  # what the model is to hear
    assert query.heard_from_s == pytest.approx(-0.3)  # ... from the onset's pre-roll on
    s.frames(QUIET, 2)
    assert len(s.of(t.EndpointQuery)) == 1 and not s.of(t.TurnEnded)  # once per pause
    s.call("endpoint_verdict", 1, 1, 0.93)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and ended.model_probability == pytest.approx(0.93)
    assert ended.waited_for_canceller is False  # settled: at the verdict
    assert ended.user_end_s == pytest.approx(20 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(26 * FRAME_S)  # 192 ms after the speech
    assert not ended.final  # speech that goes on may still take it back
    s.frames(QUIET, 10)  # 512 ms of silence: as long as silence alone would have waited
    s.frames(SPEECH, 9)  # the next speech is a new utterance (a barge-in), not turn 1 again
    assert not s.of(t.TurnResumed)
    assert s.of(t.TurnStarted)[-1].onset_s == pytest.approx(36 * FRAME_S)


def test_the_model_hears_the_turn_from_its_onsets_pre_roll_not_from_a_lead_in() -> None:
    """Its scores were measured on that audio: more rain before a German sentence moved it
    from unsure (0.37) to "not finished", and a barge-in 0.8 s later merged into the turn."""
    s = smart().frames(QUIET, 20).frames(0.3, 6).frames(SPEECH, 20).frames(QUIET, 4)
    [started] = s.of(t.TurnStarted)
    assert started.audio_from_s == pytest.approx(20 * FRAME_S - 0.3)  # the engine's audio
    [query] = s.of(t.EndpointQuery)
    assert query.heard_from_s == pytest.approx(26 * FRAME_S - 0.3)


def test_speech_going_on_before_the_endpoint_silence_takes_an_early_end_back() -> None:
    """Issue 23: the model says "finished" at clause pauses of read speech; being cut off
    mid-sentence is worse than a slow answer. An early end is only an early *reply*: speech
    that goes on where silence alone would still have waited is the same turn."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.echo_free = False  # (with no echo it takes two frames: the blip test below)
    s.call("reply_audible", 1).frames(QUIET, 5)  # the answer plays: 352 ms of pause so far
    s.frames(SPEECH, 1)
    [resumed] = s.of(t.TurnResumed)
    assert resumed.turn_id == 1 and resumed.resumed_s == pytest.approx(31 * FRAME_S)
    assert s.controller.state == S.USER_SPEAKING and s.controller.user_turn_id == 1
    assert not s.of(t.ReplyInterrupted) and not s.of(t.DuckSet)  # withdrawn by the pipeline
    s.frames(SPEECH, 10).frames(QUIET, 6)
    assert [q.pause for q in s.of(t.EndpointQuery)] == [1, 2]
    s.call("endpoint_verdict", 1, 2, 0.97)
    first, second = s.of(t.TurnEnded)
    assert second.turn_id == 1 and second.onset_s == first.onset_s == 0.0
    assert second.user_end_s == pytest.approx(42 * FRAME_S)
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1]  # one turn, never split


def test_over_an_early_reply_one_frame_of_speech_takes_the_end_back() -> None:
    """While the reply plays the canceller may swallow the person after their first frame
    (RT60 0.2 s room: 0.80, then 0.06): that frame resumes the turn, which stays resumed."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.echo_free = False  # the sound gate's blocks may hold the reply's echo
    s.call("reply_audible", 1).frames(QUIET, 5).frames(SPEECH, 1).frames(QUIET, 6)
    [resumed] = s.of(t.TurnResumed)
    assert resumed.resumed_s == pytest.approx(31 * FRAME_S)
    _, second = s.of(t.EndpointQuery)
    assert second.pause == 2 and second.speech_end_s == pytest.approx(32 * FRAME_S)


@pytest.mark.parametrize("sound", [False, True])
def test_over_an_early_reply_with_its_echo_one_unsure_frame_is_echo_unless_sound_says_not(
        sound: bool) -> None:
    """The settled canceller's residue of a reply scored 0.54 for one frame and withdrew it
    with nobody talking: over an echo a frame takes the end back only on what stops a reply
    in a barge-in, the VAD sure of it (0.7) or sound over the echo bound."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.echo_free = False
    s.call("reply_audible", 1).frames(QUIET, 5)
    s.sound = sound
    s.frames(0.69, 1)
    s.sound = False
    s.frames(0.4, 1).frames(QUIET, 2)
    assert bool(s.of(t.TurnResumed)) is sound
    if not sound:
        s.frames(0.7, 1)  # the person, as sure as a barge-in needs
        [resumed] = s.of(t.TurnResumed)
        assert resumed.resumed_s == pytest.approx(35 * FRAME_S)


def test_before_the_early_reply_is_heard_one_frame_at_the_threshold_takes_the_end_back() -> None:
    """Nothing of the reply is in the microphone yet: nothing to take for its echo."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.echo_free = False
    s.frames(0.5, 1)
    [resumed] = s.of(t.TurnResumed)
    assert resumed.resumed_s == pytest.approx(26 * FRAME_S)


def test_sound_over_the_echo_bound_up_to_the_frame_makes_its_unsure_speech_convincing() -> None:
    """As for a barge-in, sound may end up to a run's gap before the speech the VAD hears."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.echo_free = False
    s.call("reply_audible", 1).frames(QUIET, 8)  # 34 frames: 1.088 s
    s.blocks(True, 2).blocks(False, 2)  # sound up to 1.10 s, 20 ms before the next frame
    s.frames(QUIET, 1).frames(0.6, 1)  # the unsure frame starts at 1.12 s
    [resumed] = s.of(t.TurnResumed)
    assert resumed.resumed_s == pytest.approx(35 * FRAME_S)


def test_while_the_canceller_warms_up_an_unsure_frame_over_the_early_reply_ducks_it() -> None:
    """Under the warm-up nothing over the reply is trusted, convincing or not: it ducks the
    reply and must last as long as a barge-in to take the end back."""
    s = smart(smart_warmup_silence_ms=300.0)
    s.settled = False
    s.echo_free = False
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97).frames(QUIET, 4)
    assert s.of(t.TurnEnded)[0].waited_for_canceller
    s.call("reply_audible", 1).frames(0.6, 1)
    assert s.of(t.DuckSet)[-1] == t.DuckSet(True) and not s.of(t.TurnResumed)


def test_over_an_early_reply_with_no_echo_one_frame_is_a_blip() -> None:
    """No echo in what the VAD hears (none heard, or a headset): nothing swallows a person
    going on, so one frame is rain, not the turn going on (rain at 10 dB: a drop scored 0.51
    over the early reply, which was withdrawn, and the turn ended 0.6 s late). It ducks the
    reply for its frame, as a barge-in's first frame does; two frames resume the turn."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.call("reply_audible", 1).frames(QUIET, 5).frames(SPEECH, 1).frames(QUIET, 2)
    assert not s.of(t.TurnResumed) and len(s.of(t.TurnEnded)) == 1
    assert s.controller.state == S.SPEAKING and s.of(t.DuckSet)[-1] == t.DuckSet(False)
    assert [f.turn_id for f in s.of(t.FalseInterruption)] == [1]
    s.frames(SPEECH, 2)  # 1.088 s: within the 500 ms after the turn's last word (0.64 s)
    [resumed] = s.of(t.TurnResumed)
    assert resumed.resumed_s == pytest.approx(34 * FRAME_S)


def test_while_the_canceller_warms_up_going_on_only_ducks_until_it_is_trusted() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.call("reply_audible", 1)
    s.guard = True
    s.frames(SPEECH, 3)  # the reply's echo, or the person: duck, decide later
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.TurnResumed)
    s.frames(QUIET, 5)  # it stopped: echo; the reply comes back and carries on
    assert s.of(t.DuckSet)[-1] == t.DuckSet(False) and len(s.of(t.FalseInterruption)) == 1
    assert not s.of(t.TurnResumed) and s.controller.state == S.SPEAKING
    s.frames(SPEECH, 2)
    s.guard = False
    s.frames(SPEECH, 1)  # still talking once the canceller is trusted: the turn goes on
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]


def test_a_reply_over_before_the_person_goes_on_still_lets_the_turn_resume() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.call("reply_audible", 1).call("reply_finished", 1).frames(QUIET, 3).frames(SPEECH, 1)
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]


def test_not_finished_waits_for_the_long_silence_only_when_the_model_is_sure() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 4).call("endpoint_verdict", 1, 1, 0.1)
    s.frames(QUIET, 30)  # ~1.1 s of thinking: still the same turn
    assert not s.of(t.TurnEnded)
    s.frames(SPEECH, 10).frames(QUIET, 4)  # ... and then the rest of the sentence
    assert [q.pause for q in s.of(t.EndpointQuery)] == [1, 2]
    s.call("endpoint_verdict", 1, 1, 0.99)  # a late answer about the first pause: ignored
    assert not s.of(t.TurnEnded)
    s.call("endpoint_verdict", 1, 2, 0.1).frames(QUIET, 60)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability == pytest.approx(0.1)
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(1.8, abs=FRAME_S * 4)


def test_an_unsure_model_leaves_the_end_to_the_endpoint_silence() -> None:
    """A finished German sentence scored 0.70 and waited the 1.8 s long silence."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 4).call("endpoint_verdict", 1, 1, 0.7)
    s.frames(QUIET, 12)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability == pytest.approx(0.7)
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(0.5, abs=FRAME_S)


def test_without_barge_in_a_finished_turn_waits_for_the_silence() -> None:
    """Half-duplex: nobody would hear a person going on over an early reply."""
    s = smart(barge_in=False).frames(SPEECH, 20).frames(QUIET, 6)
    s.call("endpoint_verdict", 1, 1, 0.97).frames(QUIET, 6)
    assert not s.of(t.TurnEnded)  # 384 ms of silence
    s.frames(QUIET, 4)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability == pytest.approx(0.97)
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(0.5, abs=FRAME_S)
    assert not ended.waited_for_canceller


def test_while_the_canceller_warms_up_a_finished_turn_ends_at_the_warm_up_silence() -> None:
    """An early reply in an echo room, before the canceller has converged: AEC3 swallowed the
    person going on after a 400 ms pause at 190 ms, and the sentence was split. Waiting for the
    whole endpoint silence made every session's first answer 200 ms slower than the rest: the
    turn ends at the warm-up silence instead, past most pauses inside a sentence."""
    s = smart(smart_warmup_silence_ms=300.0)
    s.settled = False
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97)
    assert not s.of(t.TurnEnded)
    s.frames(QUIET, 3)
    assert not s.of(t.TurnEnded)  # 288 ms
    s.frames(QUIET, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and ended.model_probability == pytest.approx(0.97)
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(0.3, abs=FRAME_S)
    assert not ended.final and ended.waited_for_canceller
    s.guard = True  # the person goes on at 416 ms: under the guard the reply is ducked ...
    s.call("reply_audible", 1).frames(SPEECH, 4)
    assert s.of(t.DuckSet) and not s.of(t.TurnResumed)
    s.guard = False  # ... and once the person is trusted, the turn goes on whole
    s.frames(SPEECH, 1)
    [resumed] = s.of(t.TurnResumed)
    assert resumed.turn_id == 1 and s.controller.user_turn_id == 1


def test_the_warm_up_silence_is_kept_to_the_sound_block_between_frames() -> None:
    s = smart(smart_warmup_silence_ms=300.0)
    s.settled = False
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97)
    s.blocks(False, 10)  # 290 ms after the last voiced frame
    assert not s.of(t.TurnEnded)
    s.blocks(False, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model"
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(0.3)


def test_while_the_canceller_warms_up_speech_over_an_early_reply_must_last_to_resume() -> None:
    """The first reply's echo through the cold canceller scored one frame at 0.58 and took
    the turn back (the reply withdrawn, the barge-in after it missed). Outside the guard it
    now ducks the reply and resumes the turn once it has lasted as long as a barge-in must."""
    s = smart(smart_warmup_silence_ms=300.0)
    s.settled = False
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97)
    s.frames(QUIET, 4).call("reply_audible", 1)
    s.frames(SPEECH, 1).frames(QUIET, 5)  # a burst: ducked, then given back after the dip
    assert not s.of(t.TurnResumed)
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]
    [false] = s.of(t.FalseInterruption)
    assert false.onset_s == pytest.approx(30 * FRAME_S)
    s = smart(smart_warmup_silence_ms=300.0)
    s.settled = False
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97)
    s.frames(QUIET, 4).call("reply_audible", 1).frames(SPEECH, 1)
    assert not s.of(t.TurnResumed)  # 32 ms
    s.frames(SPEECH, 1)
    [resumed] = s.of(t.TurnResumed)  # 64 ms (a barge-in's confirmation): the person goes on
    assert resumed.resumed_s == pytest.approx(30 * FRAME_S)


LOUD, FLOOR = 1e-3, 1e-7  # blocks' mean squares: words, and the room in a pause


def test_while_the_canceller_warms_up_an_early_end_waits_for_sound_coming_back_to_go() -> None:
    """A sentence going on after a 400 ms pause, in an echo room: the turn ended at the
    warm-up silence on the first 10 ms of the next word, the reply started over it, the cold
    canceller swallowed the word and the sentence was split. A block well over the pause's
    level holds the end off until the VAD says speech (the turn goes on) or a quiet block."""
    s = smart(smart_warmup_silence_ms=300.0)
    s.settled = False
    s.power = LOUD
    s.frames(SPEECH, 20)
    s.power = FLOOR
    s.frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97).blocks(False, 10)  # 290 ms
    s.power = LOUD
    s.blocks(False, 2)  # 300 and 310 ms: the next word's first blocks
    assert not s.of(t.TurnEnded) and s.controller.user_turn_id == 1
    s.power = FLOOR  # a sound that was no word: the end goes ahead at the next quiet block
    s.blocks(False, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and ended.waited_for_canceller


def test_a_verdict_that_comes_as_sound_comes_back_waits_for_a_quiet_block() -> None:
    s = smart()
    s.power = LOUD
    s.frames(SPEECH, 20)
    s.power = FLOOR
    s.frames(QUIET, 6)
    s.power = LOUD
    s.blocks(False, 1).call("endpoint_verdict", 1, 1, 0.97)
    assert not s.of(t.TurnEnded)
    s.power = FLOOR
    s.blocks(False, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and not ended.waited_for_canceller
    assert ended.endpoint_s == pytest.approx(0.85)  # the second block after the 26th frame


def test_echo_heard_after_an_early_end_does_not_keep_the_turn_open() -> None:
    """In a reverberant room the reply's echo, ducked and given back, kept the pause short in
    the VAD's eyes, and a barge-in 0.9 s after the turn's last word resumed the turn. Speech
    resumes a turn only if it begins where silence alone would still have waited."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.call("reply_audible", 1)
    s.guard = True
    s.frames(SPEECH, 1).frames(QUIET, 3)  # echo at 26 frames, 192 ms after the last word
    s.guard = False
    s.frames(QUIET, 6).frames(SPEECH, 12)  # speech at frame 36: 288 ms after the echo,
    assert not s.of(t.TurnResumed)  # 512 ms after the last word: past the 500 ms silence
    assert s.of(t.TurnStarted)[-1].turn_id == 2


def test_noise_the_vad_calls_no_speech_does_not_hold_off_the_warm_up_end() -> None:
    """The sound gate hears rain between the frames: the 10 ms end waits for a quiet block,
    the frame that reaches the warm-up silence ends the turn."""
    s = smart(smart_warmup_silence_ms=300.0, speculative_start=True)
    s.settled = False
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97)
    s.sound = True
    s.frames(QUIET, 3)
    assert not s.of(t.TurnEnded)
    s.frames(QUIET, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and ended.endpoint_s == pytest.approx(s.now)
    s.frames(QUIET, 1)
    assert len(s.of(t.TurnEnded)) == 1
    assert [a.turn_id for a in s.of(t.SpeculationStarted)] == [1]  # once, before the end


def test_the_speculative_start_is_not_held_back_by_asking_the_model() -> None:
    s = smart(speculative_start=True, speculative_pause_ms=120.0)
    s.frames(SPEECH, 20).frames(QUIET, 4)
    asked = [frame for frame, a in s.log if isinstance(a, t.EndpointQuery)]
    started = [frame for frame, a in s.log if isinstance(a, t.SpeculationStarted)]
    assert asked == started == [24]


def test_a_verdict_after_the_warm_up_silence_ends_the_turn_at_the_next_frame() -> None:
    s = smart(smart_warmup_silence_ms=200.0)
    s.settled = False
    s.frames(SPEECH, 20).frames(QUIET, 8)  # 256 ms: asked at 128, not answered yet
    s.call("endpoint_verdict", 1, 1, 0.9)
    assert not s.of(t.TurnEnded)  # not ended from the verdict: the canceller is warming up
    s.frames(QUIET, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and ended.endpoint_s == pytest.approx(29 * FRAME_S)


@pytest.mark.parametrize("probability", [0.84, 0.5])
def test_while_the_canceller_warms_up_an_unsure_verdict_leaves_it_to_silence(
        probability: float) -> None:
    s = smart(smart_warmup_silence_ms=300.0)
    s.settled = False
    s.frames(SPEECH, 20).frames(QUIET, 4).call("endpoint_verdict", 1, 1, probability)
    s.frames(QUIET, 11)
    assert not s.of(t.TurnEnded)  # 480 ms
    s.frames(QUIET, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence"


def test_a_model_that_has_not_answered_by_the_short_silence_leaves_it_to_silence() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 16)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability is None
    assert ended.endpoint_s - ended.user_end_s >= 0.5 - 1e-9
    s.call("endpoint_verdict", 1, 1, 0.99)  # too late: nothing happens
    assert len(s.of(t.TurnEnded)) == 1


def test_without_the_model_or_in_push_to_talk_nothing_is_asked() -> None:
    plain = smart(smart_endpoint=False).frames(SPEECH, 20).frames(QUIET, 20)
    assert not plain.of(t.EndpointQuery) and plain.of(t.TurnEnded)[0].decided_by == "silence"
    ptt = smart(mode="push_to_talk").call("press").frames(SPEECH, 20).frames(QUIET, 20)
    assert not ptt.of(t.EndpointQuery) and not ptt.of(t.TurnEnded)
    ptt.call("release")
    assert ptt.of(t.TurnEnded)[0].decided_by == "release"


@pytest.mark.parametrize(("pause_ms", "frames"), [(128.0, 4), (97.0, 4), (96.0, 3)])
def test_the_model_is_asked_at_the_first_frame_whose_silence_reaches_the_pause(
        pause_ms: float, frames: int) -> None:
    s = smart(smart_pause_ms=pause_ms).frames(SPEECH, 20).frames(QUIET, frames - 1)
    assert not s.of(t.EndpointQuery)
    s.frames(QUIET, 1)  # silence: 32 ms a frame
    [query] = s.of(t.EndpointQuery)
    assert query.t_s == pytest.approx(s.now)


def test_a_verdict_at_the_threshold_ends_the_turn_when_it_comes() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 4).call("endpoint_verdict", 1, 1, 0.85)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and ended.endpoint_s == pytest.approx(s.now)
    assert s.of(t.StateSet)[-1] == t.StateSet(S.RESPONDING, s.now)


def test_a_verdict_at_the_unfinished_threshold_is_unsure_and_leaves_it_to_silence() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 4).call("endpoint_verdict", 1, 1, 0.2)
    s.frames(QUIET, 12)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability == pytest.approx(0.2)


def test_silence_ends_the_turn_at_the_frame_that_reaches_the_endpoint() -> None:
    s = smart(endpoint_silence_ms=512.0).frames(SPEECH, 20).frames(QUIET, 15)
    assert not s.of(t.TurnEnded)
    s.frames(QUIET, 1)  # 512 ms after the last voiced frame; the blocks said 510 ms
    [ended] = s.of(t.TurnEnded)
    assert (ended.turn_id, ended.onset_s, ended.decided_by) == (1, 0.0, "silence")
    assert ended.user_end_s == pytest.approx(20 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(s.now)
    s.frames(SPEECH, 9)  # the VAD restarted: the next speech is a turn of its own
    assert [a.onset_s for a in s.of(t.TurnStarted)] == pytest.approx([0.0, 36 * FRAME_S])


def test_with_the_model_a_speculative_reply_still_starts_once_at_its_pause() -> None:
    s = smart(speculative_start=True, speculative_pause_ms=150.0).frames(SPEECH, 20)
    s.frames(QUIET, 20)
    assert [a.turn_id for a in s.of(t.SpeculationStarted)] == [1]
    assert s.of(t.SpeculationStarted)[0].t_s == pytest.approx(s.pumped_at(25))  # 160 ms
    assert len(s.of(t.TurnEnded)) == 1


@pytest.mark.parametrize(("endpoint_ms", "frames", "end_s"),
                         [(501.0, 15, 1.15), (1001.0, 31, 1.65)])
def test_the_sound_blocks_end_the_turn_at_the_first_one_that_reaches_the_endpoint(
        endpoint_ms: float, frames: int, end_s: float) -> None:
    """Silence counts from the last voiced frame (0.64 s) in 10 ms blocks between frames."""
    s = smart(endpoint_silence_ms=endpoint_ms).frames(SPEECH, 20).frames(QUIET, frames)
    s.blocks(False, round(end_s / 0.01) - 1 - int(s.now / 0.01 + 1e-9))
    assert not s.of(t.TurnEnded)
    s.blocks(False, 1)
    [ended] = s.of(t.TurnEnded)
    assert ended.endpoint_s == pytest.approx(end_s)


def early_end(**overrides: object) -> Script:
    """Turn 1 ended by the model at 192 ms of silence, its reply audible; its echo may be in
    what the VAD hears (so one frame of going on resumes the turn, see
    ``test_over_an_early_reply_with_no_echo_one_frame_is_a_blip``)."""
    s = smart(**overrides).frames(SPEECH, 20).frames(QUIET, 6)
    s.echo_free = False
    return s.call("endpoint_verdict", 1, 1, 0.93).call("reply_audible", 1)


def test_a_resumed_turn_is_spoken_again_and_its_reply_is_gone() -> None:
    s = early_end().frames(QUIET, 2).frames(SPEECH, 1)
    [resumed] = s.of(t.TurnResumed)
    assert resumed.t_s == pytest.approx(s.now)
    assert s.controller.state == S.USER_SPEAKING and not s.of(t.SpeculationCancelled)
    s.call("reply_finished", 1)  # the withdrawn reply: nothing to duck or finish any more
    s.sound = True
    s.frames(SPEECH, 5)
    assert not s.of(t.DuckSet) and s.states()[-1] == S.USER_SPEAKING
    s.sound = False
    s.frames(QUIET, 16)
    [_, ended] = s.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(34 * FRAME_S)


def test_a_turn_resumed_after_the_guard_pauses_and_ends_as_any_turn() -> None:
    s = early_end()
    s.guard = True
    s.frames(SPEECH, 2)  # ducked: maybe the echo
    s.guard = False
    s.frames(SPEECH, 1)  # still talking: the turn goes on
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]
    assert s.controller.state == S.USER_SPEAKING and not s.of(t.SpeculationCancelled)
    s.frames(QUIET, 16)  # no verdict this time: silence decides
    [_, ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability is None
    assert ended.user_end_s == pytest.approx(29 * FRAME_S)


def test_under_the_guard_a_dip_shorter_than_the_tolerance_keeps_the_duck() -> None:
    s = early_end()
    s.guard = True
    s.frames(SPEECH, 3).frames(QUIET, 4).frames(SPEECH, 2)  # a 128 ms dip
    assert s.of(t.DuckSet) == [t.DuckSet(True)] and not s.of(t.FalseInterruption)
    s.frames(QUIET, 5)  # 160 ms: it stopped, it was the echo
    [false] = s.of(t.FalseInterruption)
    assert false == t.FalseInterruption(1, 26 * FRAME_S, s.pumped_at(40), False)
    assert s.of(t.DuckSet)[-1] == t.DuckSet(False)


def test_an_early_end_stands_once_the_pause_reaches_the_endpoint_silence() -> None:
    s = early_end(endpoint_silence_ms=512.0).frames(QUIET, 10)  # 16 frames: 512 ms
    s.frames(SPEECH, 1)
    assert not s.of(t.TurnResumed)
    s = early_end(endpoint_silence_ms=513.0).frames(QUIET, 10)
    s.frames(SPEECH, 1)
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]


def test_an_endpoint_under_the_dip_tolerance_ends_a_guarded_resume_as_echo() -> None:
    s = smart(smart_pause_ms=64.0, endpoint_silence_ms=128.0).frames(SPEECH, 20)
    s.frames(QUIET, 2).call("endpoint_verdict", 1, 1, 0.93).call("reply_audible", 1)
    s.guard = True
    s.frames(SPEECH, 2).frames(QUIET, 4)  # 128 ms: the endpoint, before a dip is over
    [false] = s.of(t.FalseInterruption)
    assert false == t.FalseInterruption(1, 22 * FRAME_S, s.pumped_at(28), False)
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(False)]


def test_a_turn_resumed_past_the_cap_ends_at_once() -> None:
    s = smart(max_user_turn_s=5.0).frames(SPEECH, 150).frames(QUIET, 6)
    s.call("endpoint_verdict", 1, 1, 0.93)
    s.frames(SPEECH, 1)  # resumes at 4.992 s, its frame ends past the 5 s cap
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]
    assert [e.decided_by for e in s.of(t.TurnEnded)] == ["model", "cap"]


def test_each_echo_burst_under_the_guard_is_its_own_false_interruption() -> None:
    s = early_end()
    s.guard = True
    s.frames(SPEECH, 2).frames(QUIET, 5).frames(SPEECH, 2).frames(QUIET, 5)
    bursts = [x for f in s.of(t.FalseInterruption) for x in (f.onset_s, f.t_s)]
    assert bursts == pytest.approx([26 * FRAME_S, s.pumped_at(33), 33 * FRAME_S, s.pumped_at(40)])


def test_going_on_under_the_guard_before_the_reply_is_audible_ducks_nothing() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
    s.guard = True
    s.frames(SPEECH, 2).frames(QUIET, 5)  # stopped again: nothing was ducked, nothing lost
    assert not s.of(t.DuckSet) and not s.of(t.FalseInterruption)


def test_a_resumed_turn_has_no_reply_to_stop_or_duck_any_more() -> None:
    s = early_end().frames(SPEECH, 1).call("stop_reply")  # the reply was withdrawn
    assert s.of(t.TurnResumed) and not s.of(t.ReplyInterrupted)
    s.frames(QUIET, 16).frames(SPEECH, 2)  # ended; speech while the engine thinks
    assert [e.decided_by for e in s.of(t.TurnEnded)] == ["model", "silence"]
    assert not s.of(t.DuckSet)  # nothing audible: nothing to duck or give back


def test_silence_ending_a_turn_at_a_frame_starts_no_speculation_after_it() -> None:
    s = smart(speculative_start=True, speculative_pause_ms=150.0, endpoint_silence_ms=512.0)
    s.frames(SPEECH, 20).frames(QUIET, 20)
    assert [a.turn_id for a in s.of(t.SpeculationStarted)] == [1]
    [ended] = s.of(t.TurnEnded)
    assert ended.endpoint_s == pytest.approx(s.pumped_at(36))


def test_a_verdict_on_an_earlier_pause_is_not_the_verdict_of_a_cap_during_speech() -> None:
    s = smart(max_user_turn_s=5.0).frames(SPEECH, 20).frames(QUIET, 4)
    s.call("endpoint_verdict", 1, 1, 0.1)  # not finished: the person goes on
    s.frames(SPEECH, 140)  # talking past the 5 s cap
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "cap" and ended.model_probability is None


def test_a_turn_resumed_after_the_guard_carries_no_old_verdict_into_a_cap() -> None:
    s = early_end(max_user_turn_s=5.0)
    s.guard = True
    s.frames(SPEECH, 2)
    s.guard = False
    s.frames(SPEECH, 150)  # resumed, then talking past the 5 s cap
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]
    ended = s.of(t.TurnEnded)[-1]
    assert ended.decided_by == "cap" and ended.model_probability is None


def test_a_guarded_resume_leaves_sound_free_to_duck_the_next_reply() -> None:
    """Speech under the guard is the early-ended turn's or echo, never new speech: once the
    resumed turn has ended (here at the VAD's long silence, the model unsure), sound ducks
    its reply as usual, even before the next frame (a reply ready at once, speculated)."""
    s = early_end()
    s.guard = True
    s.frames(SPEECH, 2)  # ducked: maybe the echo
    s.guard = False
    s.frames(SPEECH, 6).frames(QUIET, 4)
    s.call("endpoint_verdict", 1, s.of(t.EndpointQuery)[-1].pause, 0.1)  # not finished
    s.frames(QUIET, 53)  # 1.824 s of silence: the VAD's endpoint, at this last frame
    [_, ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.turn_id == 1
    assert ended.endpoint_s == pytest.approx(s.now)
    s.call("reply_audible", 1).blocks(True, 2)
    assert s.of(t.DuckSet) == [t.DuckSet(True), t.DuckSet(True)]


def test_the_model_is_asked_sooner_where_the_level_fell_and_hears_up_to_the_vads_frame() -> None:
    """The silence counts from where the words' level fell (two frames before the VAD's end):
    the model is asked 64 ms sooner, and hears the words up to the VAD's last voiced frame
    (its verdicts were measured on that)."""
    s = smart()
    s.power = 1e-7
    s.frames(QUIET, 10)
    s.power = 1e-2
    s.frames(SPEECH, 10)
    s.power = 1e-7
    s.frames(SPEECH, 2).frames(QUIET, 2)  # 128 ms after the level fell, 64 after the frames
    [query] = s.of(t.EndpointQuery)
    assert query.speech_end_s == pytest.approx(22 * FRAME_S)
    s.call("endpoint_verdict", 1, 1, 0.93)
    [ended] = s.of(t.TurnEnded)
    assert ended.user_end_s == pytest.approx(20 * FRAME_S)
