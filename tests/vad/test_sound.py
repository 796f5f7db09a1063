"""The sound gate (issue 14): 10 ms blocks of sound over the noise floor and over the echo."""

from __future__ import annotations

import numpy as np
import pytest

from app.cli.turn_corpus import load_corpus, looped
from app.vad.sound import (
    BLOCK_SAMPLES,
    ECHO_MARGIN_DB,
    FLOOR_MARGIN_DB,
    MIN_FLOOR_POWER,
    SoundGate,
)


def gate(pcm: np.ndarray, echo_power: float = 0.0) -> np.ndarray:
    g = SoundGate()
    blocks = pcm[:len(pcm) // BLOCK_SAMPLES * BLOCK_SAMPLES].reshape(-1, BLOCK_SAMPLES)
    return np.array([g.block(float(np.mean(b.astype(np.float64) ** 2)), echo_power)
                     for b in blocks])


def test_rain_however_loud_is_no_sound_and_a_voice_over_it_is() -> None:
    corpus = load_corpus()
    rain = looped(corpus["noise_rain"].pcm, 16000 * 8) * 0.3
    sound = gate(rain)[50:]
    assert not np.any(sound[1:] & sound[:-1])  # never two blocks running
    clip = corpus["en_m_a0001"]  # a hard vowel onset
    start, onset = 16000 * 3, int(clip.speech[0][0] * 16000)
    mixed = rain.copy()
    mixed[start:start + len(clip.pcm)] += clip.pcm
    found = gate(mixed)
    first = next(i for i in range(len(found) - 1) if found[i] and found[i + 1] and i > 250)
    assert (first * BLOCK_SAMPLES - (start + onset)) / 16 <= 30  # ms after the onset


def test_a_voice_under_the_echo_it_may_hide_in_is_no_sound() -> None:
    rng = np.random.default_rng(1)
    pcm = (rng.normal(0, 1, 16000) * 1e-4).astype(np.float32)
    pcm[8000:] += (rng.normal(0, 1, 8000) * 0.05).astype(np.float32)  # -26 dBFS
    assert gate(pcm)[50] and gate(pcm)[51]  # the onset (a steady sound is soon the floor)
    assert not np.any(gate(pcm, echo_power=0.05**2)[50:])  # an echo as loud may be in it


def test_the_floor_is_the_median_of_the_30_ms_smoothed_power_over_the_last_half_second() -> None:
    rng = np.random.default_rng(7)
    powers = rng.lognormal(-9.0, 2.0, 200)
    g = SoundGate()
    for i, power in enumerate(powers):
        smoothed = [np.mean(powers[max(0, j - 2):j + 1]) for j in range(i)]  # 3 blocks
        expected = np.median(smoothed[-50:]) if smoothed else MIN_FLOOR_POWER  # 50 blocks
        assert g.floor_power == pytest.approx(max(expected, MIN_FLOOR_POWER), rel=1e-12), i
        g.block(float(power))


def steady(power: float, blocks: int = 60) -> SoundGate:
    """A gate whose floor is ``power`` (a power of two: its mean of three is exact)."""
    g = SoundGate()
    for _ in range(blocks):
        g.block(power)
    assert g.floor_power == power
    return g


def test_sound_is_more_than_12_db_over_the_floor() -> None:
    floor = 2.0 ** -12
    at_margin = floor * 10 ** (FLOOR_MARGIN_DB / 10)
    assert steady(floor).block(at_margin * 1.01)
    assert not steady(floor).block(at_margin * 0.99)
    assert not steady(floor).block(at_margin)  # over the margin, not at it


def test_sound_is_more_than_6_db_over_the_echo_it_may_hold() -> None:
    echo = 2.0 ** -10  # a fresh gate's floor is -90 dBFS: only the echo decides
    at_margin = echo * 10 ** (ECHO_MARGIN_DB / 10)
    assert SoundGate().block(at_margin * 1.01, echo_power=echo)
    assert not SoundGate().block(at_margin * 0.99, echo_power=echo)
    assert not SoundGate().block(at_margin, echo_power=echo)


def test_without_an_echo_bound_any_sound_over_the_floor_counts() -> None:
    assert SoundGate().block(1e-3)  # -30 dBFS, no echo_power given
