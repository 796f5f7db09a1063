"""An end by silence the end-of-turn model was unsure of (issue 23, hesitations): the turn
ends at the endpoint silence as before, but speech that begins before its reply can be heard
(and within the long silence of the last word) goes on with the turn, so a thinking pause is
not split in two. Speech that begins once the reply is audible may be its echo or an answer to
it: a barge-in, as before. On the virtual clock."""

from __future__ import annotations

import pytest

from app.conversation import turns as t
from app.events import ConversationState as S
from app.vad.base import FRAME_S
from tests.conversation import turn_script
from tests.conversation.turn_script import QUIET, SPEECH, Script
from tests.conversation.turn_script import SMART as SMART_DEFAULTS

SMART = {**SMART_DEFAULTS, "smart_unfinished_threshold": 0.3}  # the setting's default


@pytest.fixture(autouse=True, params=[1, 4], ids=lambda n: f"{n}_frames_per_pump")
def frames_per_pump(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(turn_script, "FRAMES_PER_PUMP", request.param)
    return int(request.param)


def unsure_end(probability: float = 0.7, **overrides: object) -> Script:
    """Turn 1: 20 frames of speech, asked at 128 ms of silence, ended by silence at 512 ms."""
    s = Script(**{**SMART, **overrides}).frames(SPEECH, 20).frames(QUIET, 4)
    s.echo_free = False  # a reply's echo may be in what the VAD hears
    return s.call("endpoint_verdict", 1, 1, probability).frames(QUIET, 12)


def test_the_turn_ends_at_the_endpoint_silence_but_may_still_go_on() -> None:
    s = unsure_end()
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability == pytest.approx(0.7)
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(0.5, abs=FRAME_S)
    assert ended.resumable and not ended.final  # the pipeline keeps the turn's audio
    assert ended.waited_for_canceller is False  # no "finished" was held


def test_going_on_before_the_reply_is_heard_resumes_the_turn() -> None:
    """hesitation_0.5s: a half sentence scored 0.82, ended by silence at 508 ms, and the words
    after the pause came as a second turn, before the reply to the first half was heard."""
    s = unsure_end().frames(QUIET, 2).frames(SPEECH, 1)
    [resumed] = s.of(t.TurnResumed)
    assert resumed.turn_id == 1 and resumed.resumed_s == pytest.approx(38 * FRAME_S)
    assert not s.of(t.ReplyInterrupted) and not s.of(t.DuckSet)  # withdrawn by the pipeline
    assert s.controller.state == S.USER_SPEAKING and s.controller.user_turn_id == 1
    s.frames(SPEECH, 10).frames(QUIET, 4).call("endpoint_verdict", 1, 2, 0.95)
    first, second = s.of(t.TurnEnded)
    assert second.turn_id == 1 and second.onset_s == first.onset_s
    assert second.decided_by == "model" and second.user_end_s == pytest.approx(49 * FRAME_S)
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1]  # one turn, never split


def test_a_slow_reply_leaves_the_window_open_up_to_the_long_silence() -> None:
    s = unsure_end().frames(QUIET, 35).frames(SPEECH, 1)  # 1.6 s after the last word
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]
    s = unsure_end().frames(QUIET, 41).frames(SPEECH, 10)  # 1.8 s: a new turn
    assert not s.of(t.TurnResumed) and [a.turn_id for a in s.of(t.TurnStarted)] == [1, 2]


def test_once_the_reply_is_heard_speech_is_a_barge_in() -> None:
    s = unsure_end().frames(QUIET, 3).call("reply_audible", 1).frames(SPEECH, 10)
    assert not s.of(t.TurnResumed)
    assert [a.turn_id for a in s.of(t.ReplyInterrupted)] == [1]
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1, 2]


def test_capture_time_decides_not_when_the_frame_is_processed() -> None:
    """The frame began before the reply was heard, and came in a pump after it."""
    s = unsure_end().frames(QUIET, 3)
    s.log += [(s.frame, a) for a in s.controller.reply_audible(1, s.now + FRAME_S / 2)]
    s.frames(SPEECH, 1)
    assert [r.turn_id for r in s.of(t.TurnResumed)] == [1]
    s = unsure_end().frames(QUIET, 3)
    s.log += [(s.frame, a) for a in s.controller.reply_audible(1, s.now)]
    s.frames(SPEECH, 1)
    assert not s.of(t.TurnResumed)


def test_the_replys_echo_after_it_is_heard_takes_nothing_back() -> None:
    s = unsure_end().call("reply_audible", 1).frames(SPEECH, 2).frames(QUIET, 5)
    assert not s.of(t.TurnResumed) and s.controller.state == S.SPEAKING


@pytest.mark.parametrize("probability", [None, 0.1])
def test_other_ends_by_silence_are_final(probability: float | None) -> None:
    """No verdict (the model late), "surely not finished" (the long silence decides) and
    without barge-in (half duplex: nobody would hear the person going on over the reply)."""
    s = Script(**SMART).frames(SPEECH, 20).frames(QUIET, 4)
    if probability is not None:
        s.call("endpoint_verdict", 1, 1, probability)
    s.frames(QUIET, 60)
    [ended] = s.of(t.TurnEnded)
    assert ended.final and not ended.resumable
    half_duplex = unsure_end(barge_in=False)
    assert half_duplex.of(t.TurnEnded)[0].final


def test_without_the_model_silence_ends_the_turn_for_good() -> None:
    s = Script(**{**SMART, "smart_endpoint": False}).frames(SPEECH, 20).frames(QUIET, 17)
    [ended] = s.of(t.TurnEnded)
    assert ended.final and ended.model_probability is None
    s.frames(SPEECH, 1)
    assert not s.of(t.TurnResumed)
