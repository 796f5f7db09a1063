"""The sound gate (issue 14): 10 ms blocks of sound over the noise floor and over the echo."""

from __future__ import annotations

import numpy as np

from app.cli.turn_corpus import load_corpus, looped
from app.vad.sound import BLOCK_SAMPLES, SoundGate


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
