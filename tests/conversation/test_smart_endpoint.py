"""Semantic end of turn in the turn controller (issue 23), on the virtual clock: the model is
asked once per pause, its verdict ends the turn or makes it wait, silence decides when it is
late or missing, push-to-talk is unchanged."""

from __future__ import annotations

import pytest

from app.conversation import turns as t
from app.events import ConversationState as S
from app.vad.base import FRAME_S
from tests.conversation import turn_script
from tests.conversation.turn_script import QUIET, SPEECH, Script

SMART = {"smart_endpoint": True, "speculative_start": False, "smart_pause_ms": 120.0,
         "endpoint_silence_ms": 500.0, "smart_long_silence_ms": 1800.0,
         "smart_threshold": 0.85, "smart_unfinished_threshold": 0.2}


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
    s.frames(QUIET, 2)
    assert len(s.of(t.EndpointQuery)) == 1 and not s.of(t.TurnEnded)  # once per pause
    s.call("endpoint_verdict", 1, 1, 0.93)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "model" and ended.model_probability == pytest.approx(0.93)
    assert ended.user_end_s == pytest.approx(20 * FRAME_S)
    assert ended.endpoint_s == pytest.approx(26 * FRAME_S)  # 192 ms after the speech
    assert not ended.final  # speech that goes on may still take it back
    s.frames(QUIET, 10)  # 512 ms of silence: as long as silence alone would have waited
    s.frames(SPEECH, 9)  # the next speech is a new utterance (a barge-in), not turn 1 again
    assert not s.of(t.TurnResumed)
    assert s.of(t.TurnStarted)[-1].onset_s == pytest.approx(36 * FRAME_S)


def test_speech_going_on_before_the_endpoint_silence_takes_an_early_end_back() -> None:
    """Issue 23: the model says "finished" at clause pauses of read speech; being cut off
    mid-sentence is worse than a slow answer. An early end is only an early *reply*: speech
    that goes on where silence alone would still have waited is the same turn."""
    s = smart().frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.93)
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


@pytest.mark.parametrize("why", ["canceller_warming_up", "no_barge_in"])
def test_no_early_end_where_a_person_going_on_would_not_be_heard(why: str) -> None:
    """An early reply in an echo room, before the canceller has converged: AEC3 swallowed the
    person going on after a 400 ms pause, and the sentence was split. Without barge-in
    (half-duplex) nobody would hear them at all. There the end waits for the silence."""
    s = smart(barge_in=why != "no_barge_in")
    s.settled = why != "canceller_warming_up"
    s.frames(SPEECH, 20).frames(QUIET, 6).call("endpoint_verdict", 1, 1, 0.97)
    assert not s.of(t.TurnEnded)
    s.frames(QUIET, 10)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability == pytest.approx(0.97)
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(0.5, abs=FRAME_S)


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
