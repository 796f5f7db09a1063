"""The sound gate (issue 14): 10 ms blocks of sound over the noise floor and over the echo."""

from __future__ import annotations

import numpy as np
import pytest

from app.cli.turn_corpus import load_corpus, looped
from app.vad.sound import (
    BLOCK_SAMPLES,
    ECHO_MARGIN_DB,
    END_FLOOR_MARGIN_DB,
    END_MAX_SHIFT_S,
    END_RANGE_DB,
    FLOOR_MARGIN_DB,
    MIN_FLOOR_POWER,
    SoundBlock,
    SoundGate,
    SpeechEnd,
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


# ---- where the words stopped (SpeechEnd) ---------------------------------------------------

def speech_end_of(powers: list[float]) -> SpeechEnd:
    """10 ms blocks with these mean squares, from time 0."""
    finder = SpeechEnd()
    for i, power in enumerate(powers):
        finder.add(SoundBlock(i * 0.01, (i + 1) * 0.01, False, True, power))
    return finder


def test_the_end_is_the_last_block_within_range_of_the_loudest() -> None:
    floor, loud = 1e-7, 1e-2  # -70 and -20 dBFS
    tail = loud * 10 ** (-(END_RANGE_DB - 5) / 10)  # 5 dB inside the range
    finder = speech_end_of([floor] * 50 + [loud] * 50 + [tail] * 2 + [floor] * 6)
    # the VAD's last voiced frame ends at 1.08 s; the words stop at 1.02 s
    assert finder.end(1.08) == pytest.approx(1.02)
    under = loud * 10 ** (-(END_RANGE_DB + 5) / 10)  # out of range: the words ended before it
    finder = speech_end_of([floor] * 50 + [loud] * 50 + [under] * 2 + [floor] * 6)
    assert finder.end(1.04) == pytest.approx(1.0)


def test_the_end_moves_back_at_most_two_frames() -> None:
    finder = speech_end_of([1e-7] * 50 + [1e-2] * 20 + [1e-7] * 30)
    assert finder.end(1.0) == pytest.approx(1.0 - END_MAX_SHIFT_S)
    assert finder.end(0.75) == pytest.approx(0.7)  # never later than the VAD's end either
    assert finder.end(0.65) == pytest.approx(0.65)


def test_over_noise_the_end_needs_blocks_clear_of_the_floor() -> None:
    noise = 1e-3
    # words 6 dB over the noise: nothing stands END_FLOOR_MARGIN_DB clear, the level cannot say
    finder = speech_end_of([noise] * 100 + [noise * 4] * 50 + [noise] * 10)
    assert finder.end(1.6) == pytest.approx(1.6)
    # words 20 dB over it: where they fall to 10 dB over the floor
    clear = noise * 10 ** ((END_FLOOR_MARGIN_DB + 2) / 10)
    finder = speech_end_of([noise] * 100 + [noise * 100] * 50 + [clear] * 3 + [noise] * 7)
    assert finder.end(1.56) == pytest.approx(1.53)


def test_sound_that_has_not_fallen_away_after_the_vads_frame_keeps_its_end() -> None:
    """Rain at 5 dB: a weak syllable the VAD scored under its threshold stood over the range
    after its last voiced frame; the level had not fallen, yet it moved the end back, and a
    sentence going on after a 339 ms pause was cut in two. Two blocks running over the range
    after the frame keep the end at the frame; one (a rain drop) does not."""
    noise, words = 1e-5, 1e-2
    over = noise * 10 ** ((END_FLOOR_MARGIN_DB + 3) / 10)  # in range of the words, clear of rain
    under = noise * 10 ** ((END_FLOOR_MARGIN_DB - 3) / 10)
    at = noise * 10 ** (END_FLOOR_MARGIN_DB / 10)  # exactly at the range: over it
    before = [noise] * 100 + [words] * 50 + [under] * 6  # the VAD's frame ends at 1.56 s
    assert speech_end_of(before + [over] * 2).end(1.56) == pytest.approx(1.56)  # from 1.56 s
    assert speech_end_of([*before, under, at, at]).end(1.56) == pytest.approx(1.56)
    assert speech_end_of(before + [under] * 3).end(1.56) == pytest.approx(1.5)  # it fell
    assert speech_end_of([*before, over, under, over]).end(1.56) == pytest.approx(1.5)  # drops
    # a block the frame's end falls inside is not after it: its level is the frame's
    fell = speech_end_of([*before, over, over, under]).end(1.565)
    assert fell == pytest.approx(1.565 - END_MAX_SHIFT_S)
    # on the block grid: the end is the last block the frame covers whole
    assert speech_end_of([*before, under, over, over]).end(1.565) == pytest.approx(1.56)


def test_without_levels_the_vads_end_stands() -> None:
    assert SpeechEnd().end(1.0) == 1.0
    assert speech_end_of([0.0] * 100).end(1.0) == 1.0  # blocks with no level (scripts, deaf)


def test_blocks_with_no_level_say_nothing_of_the_floor() -> None:
    """Half-duplex is deaf over a reply (blocks of power 0): they set the floor at digital
    silence, and a tail 7 dB over the room, no speech elsewhere, was taken for the words."""
    floor, words, tail = 1e-7, 1e-3, 5e-7
    finder = speech_end_of([*[floor] * 50, *[0.0] * 150, *[words] * 50, *[tail] * 3,
                            *[floor] * 3])
    assert finder.end(2.56) == pytest.approx(2.5)
    assert speech_end_of([*[floor] * 200, *[words] * 50, *[tail] * 3,
                          *[floor] * 3]).end(2.56) == pytest.approx(2.5)  # as without deafness


def test_the_loudest_is_the_last_seconds() -> None:
    """A loud sound two seconds before the words does not set their range."""
    finder = speech_end_of([1e-1] * 10 + [1e-9] * 190 + [1e-3] * 50 + [1e-6] * 2 + [1e-9] * 6)
    assert finder.end(2.58) == pytest.approx(2.52)  # -30 dB under the words: still speech


def test_the_floor_is_the_quietest_30_ms_of_the_last_3_s() -> None:
    """A 30 ms lull sets the floor (20 ms do not); one that ended 3 s ago is forgotten."""
    noise, tail = 1e-5, 5e-6  # the tail is under the noise: speech only over a lower floor

    def end_after(lull: int, blocks: int = 300) -> float:
        before = [noise] * 5 + [1e-9] * lull
        powers = before + [noise] * (blocks - len(before) - 52) + [1e-2] * 50 + [tail] * 2
        return speech_end_of(powers).end(blocks * 0.01)

    assert end_after(3) == pytest.approx(3.0)  # over the lull's floor the tail is speech
    assert end_after(2) == pytest.approx(2.98)  # 20 ms are no floor: the words end at 2.98 s
    # the lull ended at 0.08 s, 3 s before the last block: out of the window
    assert end_after(3, blocks=308) == pytest.approx(3.06)


def test_words_exactly_at_the_margin_over_the_floor_stand_clear_of_it() -> None:
    floor = 1e-4
    at_margin = floor * 10 ** (END_FLOOR_MARGIN_DB / 10)
    finder = speech_end_of([floor] * 100 + [at_margin] * 20 + [floor] * 6)
    assert finder.end(1.26) == pytest.approx(1.2)
    under = floor * 10 ** ((END_FLOOR_MARGIN_DB - 1) / 10)  # 9 dB over: the level cannot tell
    assert speech_end_of([floor] * 100 + [under] * 20 + [floor] * 6).end(1.26) == 1.26


def test_a_tail_exactly_at_the_range_is_speech() -> None:
    loud = 1e-2
    edge = loud * 10 ** (-END_RANGE_DB / 10)
    finder = speech_end_of([1e-9] * 100 + [loud] * 20 + [edge] * 2 + [1e-9] * 4)
    assert finder.end(1.26) == pytest.approx(1.22)


def test_a_block_well_over_the_pauses_level_is_sound_coming_back() -> None:
    """A sentence going on after a 400 ms pause: its first 10 ms stand ~30 dB over the pause,
    a frame or two before the VAD's probability rises."""
    floor, words = 1e-7, 1e-3
    pause = [words] * 50 + [floor] * 20  # the words end at 0.5 s
    over = floor * 10 ** ((FLOOR_MARGIN_DB + 1) / 10)
    assert speech_end_of([*pause, over]).resuming(0.5)
    under = floor * 10 ** ((FLOOR_MARGIN_DB - 1) / 10)
    assert not speech_end_of([*pause, under]).resuming(0.5)
    assert not speech_end_of(pause).resuming(0.5)  # the pause itself


def test_resuming_compares_with_the_pause_alone_and_needs_three_blocks_of_it() -> None:
    floor, words = 1e-7, 1e-3
    over = floor * 10 ** ((FLOOR_MARGIN_DB + 1) / 10)
    # the words before the pause do not raise its level ...
    assert speech_end_of([*[words] * 50, *[floor] * 3, over]).resuming(0.5)
    # ... and two blocks are no level to compare with
    assert not speech_end_of([*[words] * 50, *[floor] * 2, over]).resuming(0.5)
    # without levels (scripts, a deaf microphone) nothing comes back
    assert not speech_end_of([0.0] * 80).resuming(0.5)


def test_the_pauses_level_is_the_median_of_every_block_before_the_latest() -> None:
    floor, tail, over = 1e-7, 1e-4, 1e-5  # the latest 20 dB over the floor
    # the words' last trailing block opens the pause: it does not set the level ...
    assert speech_end_of([*[1e-3] * 50, tail, *[floor] * 20, over]).resuming(0.5)
    # ... but a pause whose level rose half-way has that level (the median of all its blocks)
    assert not speech_end_of([*[1e-3] * 50, floor, floor, tail, tail, over]).resuming(0.5)
    # exactly at the margin is not over it
    at_margin = floor * 10 ** (FLOOR_MARGIN_DB / 10)
    assert not speech_end_of([*[1e-3] * 50, *[floor] * 10, at_margin]).resuming(0.5)

