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


def test_before_a_late_echo_could_have_shown_only_a_voice_over_the_far_end_counts() -> None:
    """Issue 14: the decision needed 0.4 s of far end first, and barge-ins 0.3 s into the
    session's first reply waited for it. Until the echo path is known, the echo may be as
    loud as the far end itself (a conservative default): a voice 10 dB over that is a
    person; one under it waits for the echo path to be learnt."""
    far = noise(1.0, -22, 4)
    near = noise(1.0, -70, 5)
    near[int(0.2 * RATE):int(0.3 * RATE)] += noise(0.1, -30, 6)  # under the far end
    near[int(0.3 * RATE):] += noise(0.7, -8, 6)  # then loud, 14 dB over it
    verdicts = feed(NearEndDetector(), near, far)
    assert not any(verdicts[:30])  # the first 0.3 s: not over everything the far end plays
    assert verdicts[31] and all(verdicts[31:39])  # within 20 ms, long before 0.4 s


def test_the_echo_bound_is_conservative_until_learnt_then_follows_what_came_back() -> None:
    far = noise(1.5, -22, 10)
    delay = int(0.05 * RATE)
    echo = np.concatenate([np.zeros(delay, np.float32), far[:-delay]]) * 10 ** (-20 / 20)
    detector = NearEndDetector()
    half = int(0.2 * RATE)
    detector.update(echo[:half], far[:half], out=echo[:half] * 0.1)
    bound_db = 10 * np.log10(np.mean(far[:half].astype(np.float64) ** 2))
    assert 10 * np.log10(detector.echo_bound(raw=True)) > bound_db - 1  # as loud as played
    detector.update(echo[half:], far[half:], out=echo[half:] * 0.1)  # 20 dB cancelled
    raw, residual = (10 * np.log10(detector.echo_bound(raw=r)) for r in (True, False))
    assert bound_db - 22 < raw < bound_db - 12 and residual < raw - 15


def test_with_no_echo_at_all_a_quiet_person_is_heard() -> None:
    far = noise(1.5, -22, 7)
    near = noise(1.5, -70, 8)
    near[int(0.6 * RATE):] += noise(0.9, -40, 9)  # a quiet talker, no echo path
    verdicts = feed(NearEndDetector(), near, far)
    assert verdicts[62] and not any(verdicts[:59])


def test_while_warming_up_a_loud_microphone_is_looked_at_every_20_ms() -> None:
    """Issue 14: a person talking over the session's first reply, in a room with no echo,
    was told from the echo only at the correlation's next look (every 0.1 s)."""
    from app.audio.echo_detector import EchoDetector

    far = noise(1.0, -22, 11)
    near = noise(1.0, -70, 12)
    start = int(0.33 * RATE)
    near[start:] += noise(1.0, -30, 13)[:len(near) - start]  # the person, not the far end

    def first_seen(urgent: bool) -> float:
        detector = EchoDetector()
        for at in range(0, len(far), FRAME):
            loud = at >= start
            detector.add(near[at:at + FRAME], far[at:at + FRAME], FRAME, urgent and loud)
            if detector.sound_without_echo:
                return (at + FRAME - start) / RATE
        return float("inf")

    assert first_seen(urgent=True) <= 0.03 < first_seen(urgent=False)


def test_in_steady_noise_with_no_echo_only_a_voice_over_the_noise_is_a_person() -> None:
    """The room's noise is in the learnt echo level (it is learnt from the microphone): noise
    alone never stands 10 dB over it; a voice 12 dB over the noise does."""
    far = noise(2.0, -22, 25)
    near = noise(2.0, -45, 26)  # rain, no echo path
    near[int(1.2 * RATE):] += noise(0.8, -33, 27)
    verdicts = feed(NearEndDetector(), near, far)
    assert not any(verdicts[:120]) and verdicts[122] and all(verdicts[122:])
