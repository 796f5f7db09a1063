from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from voice_helpers import vad_updates

from app.settings import VadSettings
from app.vad.base import FRAME_S, Segmenter, VadParams, VadState
from app.vad.energy import EnergyScorer

# default params: threshold 0.5 (hysteresis down to 0.35), 250 ms min speech (8 frames of
# 32 ms), 500 ms endpoint silence (16 frames). Speech scores 0.8 where a test times the
# onset by min speech: frames at SURE_PROBABILITY (0.9) confirm a candidate sooner.


def events(probabilities: list[float], params: VadParams | None = None) -> list[tuple]:
    return [(round(u.end_s / FRAME_S), u.event) for u in vad_updates(probabilities, params)
            if u.event]


def test_onset_after_min_speech_then_endpoint_after_the_silence() -> None:
    probs = [0.0] * 3 + [0.8] * 20 + [0.0] * 20
    assert events(probs) == [(4, "candidate"), (11, "onset"), (24, "paused"), (39, "endpoint")]
    update = vad_updates(probs)[38]
    assert update.onset_s == pytest.approx(3 * FRAME_S)
    assert update.last_voiced_s == pytest.approx(23 * FRAME_S)
    assert update.silence_ms == pytest.approx(16 * FRAME_S * 1000)
    assert update.voiced_ms == pytest.approx(20 * FRAME_S * 1000)


def test_a_burst_shorter_than_min_speech_is_dropped() -> None:
    probs = [0.8] * 5 + [0.1] * 30
    assert events(probs) == [(1, "candidate"), (7, "dropped")]  # at its second quiet frame


def test_a_candidate_goes_on_over_a_one_frame_dip() -> None:
    """Issue 14: a distant talker in the RT60 0.8 s room scored 0.59-0.81 for six frames,
    0.32 for one, then 0.34-0.38: the candidate was dropped at the dip and the turn's audio
    began 970 ms after its true onset."""
    probs = [0.8] * 6 + [0.2] + [0.4] * 2 + [0.2, 0.2]
    assert events(probs) == [(1, "candidate"), (8, "onset"), (10, "paused")]  # 256 ms
    assert events([0.8] * 6 + [0.2, 0.2] + [0.8] * 5) == [(1, "candidate"), (8, "dropped"),
                                                         (9, "candidate")]


def test_hysteresis_keeps_speech_going_between_the_two_thresholds() -> None:
    probs = [0.9] * 10 + [0.4] * 30 + [0.0] * 20
    found = events(probs)
    assert ("paused" in [e for _, e in found]) and found[2] == (41, "paused")


def test_a_pause_shorter_than_the_endpoint_resumes_the_same_utterance() -> None:
    probs = [0.9] * 10 + [0.0] * 10 + [0.9] * 5 + [0.0] * 20
    assert [e for _, e in events(probs)] == ["candidate", "onset", "paused", "resumed",
                                               "paused", "endpoint"]
    # resuming needs the full threshold, not just the lower one
    probs = [0.9] * 10 + [0.0] * 10 + [0.45] * 5 + [0.0] * 20
    assert [e for _, e in events(probs)] == ["candidate", "onset", "paused", "endpoint"]


def test_params_come_from_the_settings_and_can_be_tight() -> None:
    params = VadParams.from_settings(VadSettings(threshold=0.7, min_speech_ms=0,
                                                 endpoint_silence_ms=100, pre_roll_ms=0))
    assert params.negative_threshold == pytest.approx(0.55)
    assert events([0.8, 0.8, 0.0, 0.0, 0.0, 0.0], params) == [
        (1, "onset"), (3, "paused"), (6, "endpoint")]


def test_reset_forgets_an_utterance_in_progress() -> None:
    segmenter = Segmenter()
    for i in range(12):
        segmenter.update(0.9, i * FRAME_S, (i + 1) * FRAME_S)
    assert segmenter.state == VadState.SPEAKING
    segmenter.reset()
    assert segmenter.update(0.0, 1.0, 1.032).state == VadState.QUIET


def test_energy_scorer_follows_loudness() -> None:
    scorer = EnergyScorer(threshold_dbfs=-40)
    quiet = np.full(512, 10 ** (-60 / 20), np.float32)
    loud = np.full(512, 10 ** (-20 / 20), np.float32)
    assert scorer.score(quiet) < 0.01 < 0.99 < scorer.score(loud)
    assert scorer.score(np.full(512, 10 ** (-40 / 20), np.float32)) == pytest.approx(0.5)


def test_the_probability_trailing_off_does_not_add_to_the_endpoint_silence() -> None:
    """Two frames between the thresholds after speech are the model's hangover: the silence
    counts from the last frame at the threshold. Longer runs are quiet speech and count."""
    trailing = [0.9] * 20 + [0.4] * 2 + [0.0] * 20
    assert events(trailing)[-1] == (36, "endpoint")  # 16 frames after frame 20, not frame 22
    assert vad_updates(trailing)[35].last_voiced_s == pytest.approx(20 * FRAME_S)
    quiet_speech = [0.9] * 20 + [0.4] * 3 + [0.0] * 20
    assert events(quiet_speech)[-1] == (39, "endpoint")  # the three frames were speech


def pause_with(end_of_speech: Callable[[float], float]) -> tuple[Segmenter, list]:
    """20 frames of speech, then quiet until the endpoint."""
    segmenter = Segmenter(end_of_speech=end_of_speech)
    return segmenter, [segmenter.update(p, i * FRAME_S, (i + 1) * FRAME_S)
                       for i, p in enumerate([0.9] * 20 + [0.0] * 20)]


def test_the_silence_counts_from_where_the_speech_itself_stopped() -> None:
    """``end_of_speech`` (where the level fell) is asked once per pause with the last voiced
    frame's end, which stays what the VAD heard (``heard_end_s``); the silence counts from its
    answer, never later than that frame and never before the onset."""
    assert Segmenter().heard_end_s is None
    asked: list[float] = []

    def level_end(last_voiced_s: float) -> float:
        asked.append(last_voiced_s)
        return 19 * FRAME_S

    segmenter, updates = pause_with(level_end)
    assert asked == [pytest.approx(20 * FRAME_S)]
    paused = updates[20]
    assert paused.event == "paused" and paused.last_voiced_s == pytest.approx(19 * FRAME_S)
    assert paused.silence_ms == pytest.approx(2 * FRAME_S * 1000)
    assert segmenter.heard_end_s == pytest.approx(20 * FRAME_S)
    [endpoint] = [u for u in updates if u.event == "endpoint"]
    assert endpoint.end_s == pytest.approx(35 * FRAME_S)  # 16 frames after frame 19's end
    assert pause_with(lambda s: s + 1.0)[1][20].last_voiced_s == pytest.approx(20 * FRAME_S)
    assert pause_with(lambda s: -1.0)[1][20].last_voiced_s == pytest.approx(0.0)  # the onset
    segmenter.reset()
    assert segmenter.heard_end_s is None


def test_begin_takes_speech_found_by_other_evidence_as_an_utterance() -> None:
    """``begin`` (a weak word within sound that stopped a reply): speaking from ``onset_s``,
    last voiced at ``last_voiced_s``; a quiet frame then is a pause of that utterance, and
    two frames under the threshold after it are the hangover."""
    segmenter = Segmenter()
    segmenter.begin(0.1, 0.3)
    assert segmenter.state == VadState.SPEAKING
    first = segmenter.update(0.4, 0.3, 0.332)  # trailing off: under the threshold
    assert first.onset_s == 0.1 and first.last_voiced_s == pytest.approx(0.332)
    segmenter.update(0.4, 0.332, 0.364)
    paused = segmenter.update(0.0, 0.364, 0.396)
    assert paused.event == "paused" and paused.last_voiced_s == pytest.approx(0.3)
