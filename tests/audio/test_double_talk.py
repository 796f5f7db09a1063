"""Double talk from the far-end reference (issue 14): a person over the reply is told from the
echo by level, before the canceller has converged."""

from __future__ import annotations

import numpy as np

from app.audio.double_talk import FRAME, NearEndDetector

RATE = 16000


def noise(seconds: float, dbfs: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 1, int(seconds * RATE)) * 10 ** (dbfs / 20)).astype(np.float32)


def feed(detector: NearEndDetector, near: np.ndarray, far: np.ndarray) -> list[bool]:
    verdicts = []
    for start in range(0, len(near) - FRAME + 1, FRAME):
        detector.update(near[start:start + FRAME], far[start:start + FRAME])
        verdicts.append(detector.near_end)
    return verdicts


def test_an_echo_alone_is_never_a_person_and_a_louder_voice_is() -> None:
    far = noise(2.0, -22, 1)
    delay = int(0.12 * RATE)
    echo = np.concatenate([np.zeros(delay, np.float32), far[:-delay]]) * 10 ** (-10 / 20)
    near = echo + noise(2.0, -70, 2)
    detector = NearEndDetector()
    assert not any(feed(detector, near[:int(1.2 * RATE)], far[:int(1.2 * RATE)]))
    person = near[int(1.2 * RATE):] + noise(0.8, -14, 3)  # 18 dB over the echo
    verdicts = feed(detector, person, far[int(1.2 * RATE):])
    assert verdicts[2] and all(verdicts[2:])


def test_nothing_is_decided_before_a_late_echo_could_have_shown() -> None:
    far = noise(1.0, -22, 4)
    near = noise(1.0, -70, 5)
    near[int(0.2 * RATE):] += noise(0.8, -30, 6)  # someone talks 0.2 s into the reply
    verdicts = feed(NearEndDetector(), near, far)
    assert not any(verdicts[:39])  # the first 0.4 s: the echo path is unknown


def test_with_no_echo_at_all_a_quiet_person_is_heard() -> None:
    far = noise(1.5, -22, 7)
    near = noise(1.5, -70, 8)
    near[int(0.6 * RATE):] += noise(0.9, -40, 9)  # a quiet talker, no echo path
    verdicts = feed(NearEndDetector(), near, far)
    assert verdicts[62] and not any(verdicts[:59])
