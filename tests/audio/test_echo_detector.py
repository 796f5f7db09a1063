"""The echo detector's looks at a microphone that starts to rise over a reply (issue 14): a
person's onset keeps "sound that is no echo", an echo arriving never does."""

from __future__ import annotations

import numpy as np
import pytest

from app.audio import echo_detector
from app.audio.echo_detector import MAX_LAG, WINDOW, EchoDetector

RATE = 16000
FRAME = 160
LOOK_S = 0.9  # a regular look (every 0.1 s) falls here
RISE_START = int(LOOK_S * RATE) - 480  # 30 ms of new sound in the window at that look


def noise(seconds: float, dbfs: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 1, int(seconds * RATE)) * 10 ** (dbfs / 20)).astype(np.float32)


def delayed(x: np.ndarray, samples: int) -> np.ndarray:
    return np.concatenate([np.zeros(samples, np.float32), x[:-samples]])


def looks(near: np.ndarray, far: np.ndarray) -> list[tuple[bool, float]]:
    """(sound_without_echo, last_ncc) after every 10 ms up to the regular look at LOOK_S;
    urgent looks every 20 ms, as while the canceller warms up and the microphone is loud."""
    detector, out = EchoDetector(), []
    for at in range(0, int(LOOK_S * RATE), FRAME):
        detector.add(near[at:at + FRAME], far[at:at + FRAME], FRAME, urgent=True)
        out.append((detector.sound_without_echo, detector.last_ncc))
    return out


@pytest.mark.parametrize("echo_gain", [2.0, 4.0, 8.0])
def test_an_echo_arriving_is_never_kept_as_a_person(echo_gain: float) -> None:
    """The far end's copy starts 30 ms before a regular look: over the whole 0.25 s window
    it correlates at only 0.3-0.35 (undecided), over its own frames it is an echo."""
    far = noise(1.0, -22, 1)
    near = noise(1.0, -50, 2)  # the room: sound that is no echo until the echo arrives
    echo = delayed(far, 800) * echo_gain
    near[RISE_START:] += echo[RISE_START:]
    seen = looks(near, far)
    assert seen[-2][0]  # the room alone was no echo
    assert 0.25 <= seen[-1][1] < 0.5  # the regular look cannot tell from the whole window
    assert not seen[-1][0]


def test_a_person_rising_over_an_undecided_look_stays_a_person(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A person's onset whose whole-window correlation lands in the undecided band at a
    regular look (made so here by lowering the no-echo bound under it for that look) stays
    sound that is no echo: the rise matched over its own frames is no echo. Without a rise
    the same look drops it."""
    far = noise(1.0, -22, 3)
    rising = noise(1.0, -50, 4)
    rising[RISE_START:] += noise(1.0, -20, 5)[RISE_START:]
    steady = noise(1.0, -50, 4) + noise(1.0, -20, 5)  # the same sound all along

    def last_look(near: np.ndarray) -> tuple[bool, bool, float]:
        detector, last = EchoDetector(), int(LOOK_S * RATE) - FRAME
        for at in range(0, last, FRAME):
            detector.add(near[at:at + FRAME], far[at:at + FRAME], FRAME, urgent=True)
        before = detector.sound_without_echo
        with monkeypatch.context() as patch:
            patch.setattr(echo_detector, "NO_ECHO_NCC", 0.0)  # nothing is surely no echo
            detector.add(near[last:last + FRAME], far[last:last + FRAME], FRAME, urgent=True)
        return before, detector.sound_without_echo, detector.last_ncc

    before, after, ncc = last_look(rising)
    assert before and ncc < echo_detector.ECHO_NCC and after
    before, after, _ = last_look(steady)
    assert before and not after


def test_the_rise_is_matched_over_its_own_frames() -> None:
    far = noise(1.0, -22, 6).astype(np.float64)
    window_far = far[-(WINDOW + MAX_LAG):]
    quiet = noise(WINDOW / RATE, -50, 7).astype(np.float64)
    person, echo, steady = quiet.copy(), quiet.copy(), quiet.copy() * 10
    person[-640:] += noise(0.04, -20, 8)
    echo[-640:] += window_far[-640 - 800:-800] * 4  # the far end 50 ms before
    detector = EchoDetector()
    assert detector._rise_is_no_echo(person, window_far)
    assert not detector._rise_is_no_echo(echo, window_far)
    assert not detector._rise_is_no_echo(steady, window_far)  # no rise at all
