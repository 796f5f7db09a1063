"""The segmenter's rules at their exact boundaries, and what each update reports.

test_segmenter.py shows the rules on typical speech; here every threshold is met exactly, or
missed by a fraction of a millisecond, and the fields of ``VadUpdate`` are checked frame by frame
(the turn controller reads them: onset and last voiced times, voiced and silence durations).
"""

from __future__ import annotations

import pytest
from voice_helpers import vad_updates

from app.settings import VadSettings
from app.vad.base import (
    BLIP_WEAK_FRAMES,
    FRAME_S,
    HYSTERESIS,
    SURE_FRAMES,
    SURE_PROBABILITY,
    Segmenter,
    VadFrame,
    VadParams,
    VadState,
)

FRAME_MS = FRAME_S * 1000  # 32 ms


def first_frame_with(event: str, probabilities: list[float], params: VadParams,
                     offset: int = 0) -> int | None:
    """Index (in frames after ``offset`` quiet frames) of the first update with ``event``."""
    updates = vad_updates([0.0] * offset + probabilities, params)
    for i, update in enumerate(updates[offset:]):
        if update.event == event:
            return i
    return None


def test_every_setting_reaches_the_params() -> None:
    vad = VadSettings(threshold=0.7, min_speech_ms=120, endpoint_silence_ms=640, pre_roll_ms=90)
    assert VadParams.from_settings(vad) == VadParams(threshold=0.7, min_speech_ms=120,
                                                     endpoint_silence_ms=640, pre_roll_ms=90)


def test_the_lower_threshold_never_goes_below_one_percent() -> None:
    assert VadParams(threshold=0.1).negative_threshold == 0.01
    assert VadParams(threshold=0.6).negative_threshold == pytest.approx(0.6 - HYSTERESIS)


def test_a_frame_exactly_at_the_threshold_is_speech_and_exactly_at_the_lower_one_keeps_it() -> None:
    params = VadParams()
    low = params.negative_threshold
    assert vad_updates([params.threshold], params)[0].event == "candidate"
    assert vad_updates([params.threshold - 0.001], params)[0].event is None
    # the lower threshold keeps a candidate going and, after the onset, keeps speaking
    updates = vad_updates([0.9] + [low] * 10, params)
    assert [u.event for u in updates if u.event] == ["candidate", "onset"]
    assert updates[-1].state == VadState.SPEAKING
    dipped = vad_updates([0.9, low - 0.001, low, low - 0.001, low - 0.001], params)
    assert [u.event for u in dipped] == ["candidate", None, None, None, "dropped"]


def test_resuming_a_pause_needs_the_full_threshold_exactly() -> None:
    params = VadParams(min_speech_ms=0)
    at = vad_updates([0.9, 0.0, params.threshold], params)
    assert [u.event for u in at] == ["onset", "paused", "resumed"]
    below = vad_updates([0.9, 0.0, params.threshold - 0.001], params)
    assert [u.event for u in below] == ["onset", "paused", None]


@pytest.mark.parametrize("offset", range(40))  # start times whose float sums land either side
def test_speech_lasting_exactly_min_speech_is_an_onset(offset: int) -> None:
    params = VadParams(min_speech_ms=8 * FRAME_MS)
    assert first_frame_with("onset", [0.8] * 12, params, offset) == 7  # the 8th frame


def test_speech_a_fraction_of_a_millisecond_short_of_min_speech_is_not_yet_an_onset() -> None:
    params = VadParams(min_speech_ms=8 * FRAME_MS + 0.1)
    assert first_frame_with("onset", [0.8] * 12, params) == 8  # the 9th frame, not the 8th


def test_a_candidate_the_model_is_sure_of_for_sure_frames_is_an_onset_before_min_speech() -> None:
    """One-word answers: "six" held 150-250 ms over the threshold and made no turn."""
    params = VadParams(min_speech_ms=8 * FRAME_MS)
    sure = [SURE_PROBABILITY] * SURE_FRAMES
    assert first_frame_with("onset", sure + [0.8] * 10, params) == SURE_FRAMES - 1
    # a frame a hair under the sure probability does not count: min speech decides
    almost = [SURE_PROBABILITY] * (SURE_FRAMES - 1) + [SURE_PROBABILITY - 0.001]
    assert first_frame_with("onset", almost + [0.8] * 10, params) == 7
    # sure frames need not run: other speech and a dip may come between them
    spread = [SURE_PROBABILITY, 0.6, SURE_PROBABILITY, 0.2] + [SURE_PROBABILITY] * 3
    assert first_frame_with("onset", spread, params) == 4 + SURE_FRAMES - 3


def test_a_short_sure_word_makes_an_utterance_with_its_own_times() -> None:
    params = VadParams(min_speech_ms=8 * FRAME_MS, endpoint_silence_ms=5 * FRAME_MS)
    word = [0.6] + [0.95] * 4 + [0.5]  # 192 ms over the threshold, under min speech
    updates = vad_updates([0.0] * 3 + word + [0.0] * 8, params)
    assert [u.event for u in updates if u.event] == ["candidate", "onset", "paused",
                                                     "endpoint"]
    onset = next(u for u in updates if u.event == "onset")
    assert onset.onset_s == pytest.approx(3 * FRAME_S)
    assert onset.end_s == pytest.approx((3 + 1 + SURE_FRAMES) * FRAME_S)


def test_a_dropped_candidate_takes_no_sure_frames_into_the_next() -> None:
    params = VadParams(min_speech_ms=8 * FRAME_MS)
    sure = SURE_PROBABILITY
    probs = [sure] * (SURE_FRAMES - 1) + [0.0, 0.0] + [sure] * (SURE_FRAMES - 1) + [0.8] * 10
    updates = vad_updates(probs, params)
    events = [(i, u.event) for i, u in enumerate(updates) if u.event]
    second = SURE_FRAMES + 1  # the second candidate's first frame
    assert events == [(0, "candidate"), (SURE_FRAMES, "dropped"), (second, "candidate"),
                      (second + 7, "onset")]


@pytest.mark.parametrize("offset", range(40))
def test_silence_lasting_exactly_the_endpoint_silence_is_the_endpoint(offset: int) -> None:
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=5 * FRAME_MS)
    assert first_frame_with("endpoint", [0.9] + [0.0] * 8, params, offset) == 5


def test_silence_a_fraction_of_a_millisecond_short_is_not_yet_the_endpoint() -> None:
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=5 * FRAME_MS + 0.1)
    assert first_frame_with("endpoint", [0.9] + [0.0] * 8, params) == 6


def test_updates_report_times_and_durations_frame_by_frame() -> None:
    params = VadParams(min_speech_ms=3 * FRAME_MS, endpoint_silence_ms=3 * FRAME_MS)
    probabilities = [0.0, 0.8, 0.7, 0.6, 0.9, 0.1, 0.1, 0.1]
    updates = vad_updates(probabilities, params)
    assert [(u.start_s, u.end_s, u.probability) for u in updates] == [
        (pytest.approx(i * FRAME_S), pytest.approx((i + 1) * FRAME_S), p)
        for i, p in enumerate(probabilities)]
    expected = [  # state, event, onset (frames), last voiced (frames), voiced ms, silence ms
        (VadState.QUIET, None, None, None, 0.0, 0.0),
        (VadState.STARTING, "candidate", 1, 2, 1 * FRAME_MS, 0.0),
        (VadState.STARTING, None, 1, 3, 2 * FRAME_MS, 0.0),
        (VadState.SPEAKING, "onset", 1, 4, 3 * FRAME_MS, 0.0),
        (VadState.SPEAKING, None, 1, 5, 4 * FRAME_MS, 0.0),
        (VadState.STOPPING, "paused", 1, 5, 4 * FRAME_MS, 1 * FRAME_MS),
        (VadState.STOPPING, None, 1, 5, 4 * FRAME_MS, 2 * FRAME_MS),
        (VadState.QUIET, "endpoint", 1, 5, 4 * FRAME_MS, 3 * FRAME_MS),
    ]
    for update, (state, event, onset, last, voiced_ms, silence_ms) in zip(updates, expected,
                                                                          strict=True):
        assert (update.state, update.event) == (state, event)
        assert update.onset_s == (None if onset is None else pytest.approx(onset * FRAME_S))
        assert update.last_voiced_s == (None if last is None else pytest.approx(last * FRAME_S))
        assert update.voiced_ms == pytest.approx(voiced_ms)
        assert update.silence_ms == pytest.approx(silence_ms)


def test_a_dropped_candidate_reports_no_silence_and_leaves_no_onset_behind() -> None:
    updates = vad_updates([0.9, 0.9, 0.0, 0.0, 0.0], VadParams())
    dip, dropped = updates[2:4]
    assert (dip.event, dip.state, dip.silence_ms) == (None, VadState.STARTING, 0.0)
    assert dip.voiced_ms == pytest.approx(2 * FRAME_MS)  # the dip is not voiced
    assert (dropped.event, dropped.state) == ("dropped", VadState.QUIET)
    assert dropped.silence_ms == 0.0 and dropped.voiced_ms == pytest.approx(2 * FRAME_MS)
    assert (updates[4].onset_s, updates[4].last_voiced_s, updates[4].voiced_ms) == (None, None,
                                                                                   0.0)


def test_a_resumed_utterance_measures_its_next_pause_from_the_resuming_frames() -> None:
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=3 * FRAME_MS)
    updates = vad_updates([0.9, 0.0, 0.0, 0.9, 0.9, 0.0, 0.0, 0.0], params)
    assert [u.event for u in updates] == ["onset", "paused", None, "resumed", None, "paused",
                                          None, "endpoint"]
    assert updates[3].last_voiced_s == pytest.approx(4 * FRAME_S)
    assert updates[3].voiced_ms == pytest.approx(4 * FRAME_MS)
    assert updates[-1].silence_ms == pytest.approx(3 * FRAME_MS)


def test_one_frame_of_speech_in_a_pause_while_nothing_plays_is_a_blip() -> None:
    """Issue 14: a rain drop scored 0.56 for one frame 0.4 s into a pause, and the silence
    counted again from it ended the turn 0.3 s late. The pause goes on from where it was."""
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=5 * FRAME_MS)
    updates = vad_updates([0.9, 0.0, 0.0, 0.9, 0.0, 0.0], params)
    assert [u.event for u in updates] == ["onset", "paused", None, "resumed", "paused",
                                          "endpoint"]
    assert updates[4].last_voiced_s == pytest.approx(1 * FRAME_S)  # not the blip's end
    assert updates[4].silence_ms == pytest.approx(4 * FRAME_MS)
    assert updates[-1].silence_ms == pytest.approx(5 * FRAME_MS)


@pytest.mark.parametrize("swallowed", [False, True])
def test_a_one_frame_resumption_says_it_may_be_a_blip(swallowed: bool) -> None:
    """The turn controller keeps a speculative start over a possible blip."""
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=5 * FRAME_MS)
    updates = vad_updates([0.9, 0.0, 0.9, 0.9, 0.0, 0.9, 0.0], params, swallowed)
    assert [u.event for u in updates] == ["onset", "paused", "resumed", None, "paused",
                                          "resumed", "paused"]
    assert [u.may_be_blip for u in updates] == [False, False, not swallowed, False, False,
                                                 not swallowed, False]


@pytest.mark.parametrize(("after", "last_frames"),
                         [([0.9], 5), ([0.5], 5),
                          ([0.5 - HYSTERESIS] * BLIP_WEAK_FRAMES + [0.5], 4 + 1
                                       + BLIP_WEAK_FRAMES),
                          ([0.5 - HYSTERESIS] * (BLIP_WEAK_FRAMES + 1), 4)])
def test_speech_that_goes_on_after_its_first_frame_resumes_the_utterance(
        after: list[float], last_frames: int) -> None:
    """A second frame at the threshold, or more weak frames than a blip's, is speech."""
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=10 * FRAME_MS)
    updates = vad_updates([0.9, 0.0, 0.0, 0.9, *after, 0.0], params)
    assert [u.event for u in updates] == ["onset", "paused", None, "resumed",
                                          *[None] * len(after), "paused"]
    assert updates[-1].last_voiced_s == pytest.approx(last_frames * FRAME_S)  # (hangover rule)
    assert [u.may_be_blip for u in updates[3:-1]] == [True] + [
        i < BLIP_WEAK_FRAMES and p < 0.5 for i, p in enumerate(after)]


@pytest.mark.parametrize("weak_frames", range(BLIP_WEAK_FRAMES + 1))
def test_one_frame_at_the_threshold_trailed_by_weak_ones_is_a_blip(weak_frames: int) -> None:
    """A thunderclap 0.34 s into a pause scored 0.78, then 0.49: the pause goes on from the
    words' end (the turn had ended 991 ms after them)."""
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=10 * FRAME_MS)
    updates = vad_updates([0.9, 0.0, 0.0, 0.78, *[0.49] * weak_frames, 0.0], params)
    assert [u.event for u in updates] == ["onset", "paused", None, "resumed",
                                          *[None] * weak_frames, "paused"]
    assert updates[-1].last_voiced_s == pytest.approx(FRAME_S)
    assert all(u.may_be_blip for u in updates[3:-1])


def test_where_speech_may_be_swallowed_one_frame_resumes_the_utterance() -> None:
    """The echo canceller may swallow a person going on after the first frame (RT60 0.2 s
    room: 0.80, then 0.06 as the early reply began): there one frame is enough."""
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=5 * FRAME_MS)
    updates = vad_updates([0.9, 0.0, 0.0, 0.9, 0.0, 0.0], params, may_be_swallowed=True)
    assert [u.event for u in updates] == ["onset", "paused", None, "resumed", "paused", None]
    assert updates[-1].last_voiced_s == pytest.approx(4 * FRAME_S)


def test_a_fresh_segmenter_reports_nothing_before_speech() -> None:
    update = Segmenter().update(0.0, 0.0, FRAME_S)
    assert (update.onset_s, update.last_voiced_s) == (None, None)
    assert (update.voiced_ms, update.silence_ms, update.event) == (0.0, 0.0, None)


@pytest.mark.parametrize(("probabilities", "last_voiced_frames"), [
    ([0.9] * 5, 5),  # no weak frames
    ([0.9] * 5 + [0.4], 5),  # one weak frame at the end: the probability trailing off
    ([0.9] * 5 + [0.4] * 2, 5),  # two: still trailing off (HANGOVER_FRAMES)
    ([0.9] * 5 + [0.4] * 3, 8),  # three: quiet speech, it counts
    ([0.9] + [0.4] * 2, 1),  # trailing off right after the onset frame
    ([0.9, 0.5, 0.4, 0.4], 2),  # a frame exactly at the threshold is strong
])
def test_a_hangover_of_up_to_two_weak_frames_does_not_count_as_speech(
        probabilities: list[float], last_voiced_frames: int) -> None:
    """The pause (and so the endpoint) is measured from the last frame at the threshold when
    at most two frames between the two thresholds follow it."""
    params = VadParams(min_speech_ms=0)
    updates = vad_updates([*probabilities, 0.0], params)
    assert updates[-1].event == "paused"
    assert updates[-1].last_voiced_s == pytest.approx(last_voiced_frames * FRAME_S)


@pytest.mark.parametrize("swallowed", [False, True, None])
def test_step_reads_a_scored_frame_as_update_does(swallowed: bool | None) -> None:
    """``None``: step's default, which is update's (a one-frame resumption is a blip)."""
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=5 * FRAME_MS)
    stepped, updated = Segmenter(params), Segmenter(params)
    quiet = {} if swallowed is None else {"may_be_swallowed": swallowed}
    events = []
    for i, p in enumerate([0.0, 0.9, 0.9, 0.4, 0.0, 0.0, 0.9, 0.0, 0.0, 0.0, 0.0]):
        start_s, end_s = i * FRAME_S, (i + 1) * FRAME_S
        update = stepped.step(VadFrame(start_s, end_s, p), **quiet)
        assert update == updated.update(p, start_s, end_s, **quiet)
        events.append(update.event)
    assert ("endpoint" in events) is (swallowed is not True)  # the 0.9 was a blip


@pytest.mark.parametrize("restart", ["reset", "begin"])
def test_a_restart_forgets_a_resumption_that_may_have_been_a_blip(restart: str) -> None:
    params = VadParams(min_speech_ms=0, endpoint_silence_ms=10 * FRAME_MS)
    segmenter = Segmenter(params)
    for i, p in enumerate([0.9, 0.0, 0.9]):  # resumed on one frame so far
        segmenter.update(p, i * FRAME_S, (i + 1) * FRAME_S)
    if restart == "reset":
        segmenter.reset()
        segmenter.update(0.9, 3 * FRAME_S, 4 * FRAME_S)  # a fresh onset
    else:
        segmenter.begin(3 * FRAME_S, 4 * FRAME_S)
    paused = segmenter.update(0.0, 4 * FRAME_S, 5 * FRAME_S)
    assert paused.event == "paused" and paused.last_voiced_s == pytest.approx(4 * FRAME_S)


def test_the_endpoint_waits_a_frame_while_sound_comes_back_in_the_pause() -> None:
    """``sound_returns`` is asked where the pause's silence counts from; while it says sound
    is coming back the endpoint waits, and comes at the next frame that is quiet again."""
    asked: list[float] = []
    holding = [True]

    def sound_returns(pause_from_s: float) -> bool:
        asked.append(pause_from_s)
        return holding[0]

    params = VadParams(min_speech_ms=0, endpoint_silence_ms=320)
    segmenter = Segmenter(params, sound_returns=sound_returns)
    frames = [0.9] * 3 + [0.0] * 10  # 320 ms of silence at the 13th frame
    events = [segmenter.update(p, i * FRAME_S, (i + 1) * FRAME_S).event
              for i, p in enumerate(frames)]
    assert "endpoint" not in events and segmenter.state == VadState.STOPPING
    assert asked == [pytest.approx(3 * FRAME_S)]  # asked only once the silence was due
    holding[0] = False
    assert segmenter.update(0.0, 13 * FRAME_S, 14 * FRAME_S).event == "endpoint"
