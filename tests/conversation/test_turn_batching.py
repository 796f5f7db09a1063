"""Any batching of the same VAD frames gives the same turns (issue 22).

The pipeline hands the turn controller every frame scored since its last pump; how many that is
depends on the device block and on how busy the machine is. Here the same scripted frames (with
replies starting and ending, presses, stops, mutes and the turn cap in between) go in once a
frame at a time and once in random batches processed a little late. The decisions must be the
same; only the times that say *when* a decision was processed may differ, and never by more
than the batch's delay.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.conversation import turns as t
from app.vad.base import FRAME_S, VadFrame
from tests.conversation.turn_script import QUIET, SPEECH, Script

# Fields stamped with the processing time (``now_s``) rather than decided from frame times.
PROCESSING_TIMES = {t.TurnEnded: "endpoint_s", t.ReplyInterrupted: "detected_s",
                    t.SpeculationStarted: "t_s", t.SpeculationCancelled: "t_s",
                    t.FalseInterruption: "t_s", t.EndpointQuery: "t_s", t.TurnResumed: "t_s"}
CALLS = ("reply_audible", "reply_finished", "press", "release", "stop_reply", "mute", "unmute",
         "finished", "unsure", "not_finished")  # the last three: end-of-turn model verdicts
VERDICTS = {"finished": 0.95, "unsure": 0.6, "not_finished": 0.05}

probabilities = st.sampled_from([0.0, 0.2, 0.4, 0.45, 0.55, 0.9, 1.0])
runs = st.lists(st.tuples(probabilities, st.integers(1, 25)), min_size=1, max_size=4).map(
    lambda pairs: [p for p, count in pairs for _ in range(count)])  # speech comes in runs
frames_step = st.tuples(st.just("frames"), runs, st.booleans())
call_step = st.tuples(st.just("call"), st.sampled_from(CALLS), st.booleans())
scripts = st.lists(st.one_of(frames_step, frames_step, call_step), min_size=1, max_size=25)
params = st.builds(t.TurnParams, mode=st.sampled_from(["always_listening", "push_to_talk"]),
                   barge_in=st.booleans(), speculative_start=st.booleans(),
                   barge_in_min_speech_ms=st.sampled_from([32.0, 96.0]),
                   max_user_turn_s=st.sampled_from([0.5, 1.0, 60.0]),
                   smart_endpoint=st.booleans())


class Run:
    """One pass over a script; ``cuts`` splits each frames step into pumps (None: one frame
    per pump, processed at the frame's end)."""

    def __init__(self, params: t.TurnParams, cuts: Any = None, delay_s: float = 0.0) -> None:
        self.controller = t.TurnController(params)
        self.cuts, self.delay_s = cuts, delay_s
        self.frame = 0
        self.actions: list[t.Action] = []

    def play(self, script: list[tuple[Any, ...]]) -> Run:
        for step in script:
            if step[0] == "frames":
                self._frames(step[1], step[2])
            else:
                self._call(step[1])
        return self

    def _frames(self, probabilities: list[float], guard: bool) -> None:
        frames = [VadFrame((self.frame + i) * FRAME_S, (self.frame + i + 1) * FRAME_S, p)
                  for i, p in enumerate(probabilities)]
        self.frame += len(frames)
        if self.cuts is None:
            batches = [[frame] for frame in frames]
            delay = 0.0
        else:
            points = sorted({c % len(frames) for c in self.cuts.draw_cuts()} | {0, len(frames)})
            batches = [frames[a:b] for a, b in itertools.pairwise(points) if b > a]
            delay = self.delay_s
        for batch in batches:
            self.actions += self.controller.on_frames(batch, batch[-1].end_s + delay, guard)

    def _call(self, name: str) -> None:
        now, c = self.frame * FRAME_S, self.controller
        replied = [a.turn_id for a in self.actions if isinstance(a, t.TurnEnded)]
        turn = replied[-1] if replied else 0
        if name == "reply_audible":
            self.actions += c.reply_audible(turn, now)
        elif name == "reply_finished":
            self.actions += c.reply_finished(turn, now)
        elif name in ("mute", "unmute"):
            self.actions += c.set_muted(name == "mute", now)
        elif name in VERDICTS:  # an answer to the latest question, as the pipeline hands it
            asked = [a for a in self.actions if isinstance(a, t.EndpointQuery)]
            if asked:
                self.actions += c.endpoint_verdict(asked[-1].turn_id, asked[-1].pause,
                                                   VERDICTS[name], now)
        else:
            self.actions += getattr(c, name)(now)

    def decisions(self) -> list[t.Action]:
        """The actions with processing times blanked (states are compared at the end only: a
        state that lasted less than a pump is never shown)."""
        out = []
        for action in self.actions:
            if isinstance(action, t.StateSet):
                continue
            field = PROCESSING_TIMES.get(type(action))
            out.append(dataclasses.replace(action, **{field: 0.0}) if field else action)
        return out

    def processing_times(self) -> list[float]:
        return [getattr(a, field) for a in self.actions
                if (field := PROCESSING_TIMES.get(type(a)))]


class Cuts:
    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def draw_cuts(self) -> list[int]:
        return self.data.draw(st.lists(st.integers(0, 100), max_size=12))


@settings(max_examples=300, deadline=None)
@given(params=params, script=scripts, data=st.data(),
       delay_s=st.sampled_from([0.0, 0.004, 0.01]))
def test_any_batching_of_the_same_frames_gives_the_same_turns(
        params: t.TurnParams, script: list[tuple[Any, ...]], data: st.DataObject,
        delay_s: float) -> None:
    one_by_one = Run(params).play(script)
    batched = Run(params, Cuts(data), delay_s).play(script)
    assert batched.decisions() == one_by_one.decisions()
    assert batched.controller.state == one_by_one.controller.state
    for late, prompt in zip(batched.processing_times(), one_by_one.processing_times(),
                            strict=True):  # processed with the batch, never before the frame
        assert prompt - 1e-9 <= late <= prompt + 100 * FRAME_S + delay_s + 1e-9


@pytest.mark.parametrize("frames_per_pump", [1, 2, 4, 7])
def test_a_turn_cut_at_the_cap_never_restarts_with_its_old_onset(frames_per_pump: int) -> None:
    """Issue 22: with a 4-frame batch the capped reply was interrupted at once and a new turn
    began with onset 0.0 (audio from -0.3 s), then was capped again."""
    s = Script(frames_per_pump, speculative_start=False, max_user_turn_s=1.0)
    s.frames(SPEECH, 60).frames(QUIET, 20)
    first, *later = s.of(t.TurnStarted)
    [capped, *_] = s.of(t.TurnEnded)
    assert first.onset_s == 0.0 and capped.user_end_s == pytest.approx(32 * FRAME_S)
    assert [a.onset_s for a in later] == [pytest.approx(32 * FRAME_S)]  # a fresh onset
    assert later[0].audio_from_s == pytest.approx(32 * FRAME_S - 0.3)
    [interrupted] = s.of(t.ReplyInterrupted)
    assert interrupted.onset_s == pytest.approx(32 * FRAME_S)
    assert len(s.of(t.TurnEnded)) == 2  # the going-on speech was capped no second time


def test_push_to_talk_capped_in_a_batch_starts_no_turn_until_the_next_press() -> None:
    s = Script(5, mode="push_to_talk", max_user_turn_s=1.0).call("press").frames(SPEECH, 50)
    assert len(s.of(t.TurnStarted)) == 1 and len(s.of(t.TurnEnded)) == 1
    s.call("release").frames(QUIET, 3).call("press").frames(SPEECH, 6)
    assert [a.turn_id for a in s.of(t.TurnStarted)] == [1, 2]
    assert s.of(t.TurnStarted)[1].onset_s >= 53 * FRAME_S - 1e-9
