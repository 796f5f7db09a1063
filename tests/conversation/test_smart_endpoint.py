"""Semantic end of turn in the turn controller (issue 23), on the virtual clock: the model is
asked once per pause, its verdict ends the turn or makes it wait, silence decides when it is
late or missing, push-to-talk is unchanged."""

from __future__ import annotations

import pytest

from app.conversation import turns as t
from app.vad.base import FRAME_S
from tests.conversation import turn_script
from tests.conversation.turn_script import QUIET, SPEECH, Script

SMART = {"smart_endpoint": True, "speculative_start": False, "smart_pause_ms": 120.0,
         "endpoint_silence_ms": 500.0, "smart_long_silence_ms": 1800.0,
         "smart_threshold": 0.85}


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
    s.frames(SPEECH, 9)  # the next speech is a new utterance (a barge-in), not turn 1 again
    assert s.of(t.TurnStarted)[-1].onset_s == pytest.approx(26 * FRAME_S)


def test_not_finished_waits_for_the_long_silence_or_the_next_words() -> None:
    s = smart().frames(SPEECH, 20).frames(QUIET, 4).call("endpoint_verdict", 1, 1, 0.2)
    s.frames(QUIET, 30)  # ~1.1 s of thinking: still the same turn
    assert not s.of(t.TurnEnded)
    s.frames(SPEECH, 10).frames(QUIET, 4)  # ... and then the rest of the sentence
    assert [q.pause for q in s.of(t.EndpointQuery)] == [1, 2]
    s.call("endpoint_verdict", 1, 1, 0.99)  # a late answer about the first pause: ignored
    assert not s.of(t.TurnEnded)
    s.call("endpoint_verdict", 1, 2, 0.2).frames(QUIET, 60)
    [ended] = s.of(t.TurnEnded)
    assert ended.decided_by == "silence" and ended.model_probability == pytest.approx(0.2)
    assert ended.endpoint_s - ended.user_end_s == pytest.approx(1.8, abs=FRAME_S * 4)


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
