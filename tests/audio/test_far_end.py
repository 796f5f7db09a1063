"""The far-end reference: played blocks with DAC times → 16 kHz samples on the capture clock."""

from __future__ import annotations

import numpy as np

from app.audio.far_end import FarEndReference, SampleTimeline


def test_timeline_places_blocks_by_index_and_reads_zeros_elsewhere() -> None:
    timeline = SampleTimeline(100)
    timeline.write(1000, np.arange(1, 11, dtype=np.float32))
    out = np.empty(20, np.float32)
    timeline.read(995, out)
    assert out[:5].tolist() == [0] * 5 and out[5:15].tolist() == list(range(1, 11))
    assert not out[15:].any()
    timeline.write(1030, np.ones(5, np.float32))  # a gap of 20 samples reads as zeros
    timeline.read(1010, out)
    assert not out[:20].any()
    timeline.read(1025, out)
    assert out[5:10].tolist() == [1] * 5
    timeline.write(1200, np.full(10, 2.0, np.float32))  # the old samples left the ring
    timeline.read(1000, out)
    assert not out.any()
    timeline.read(1195, out)
    assert out[5:15].tolist() == [2] * 10


def click_train(rate: int, seconds: float, clicks_s: list[float]) -> np.ndarray:
    pcm = np.zeros(int(rate * seconds), np.float32)
    for t in clicks_s:
        pcm[round(t * rate)] = 1.0
    return pcm


def play(reference: FarEndReference, pcm: np.ndarray, rate: int, first_dac_s: float,
         block: int, jitter_s: float = 0.0) -> None:
    rng = np.random.default_rng(0)
    for start in range(0, len(pcm), block):
        dac = first_dac_s + start / rate + rng.uniform(-jitter_s, jitter_s)
        reference.push(pcm[start:start + block], dac)
        reference.update()


def test_played_audio_lands_where_its_dac_time_says_with_jitter_absorbed() -> None:
    reference = FarEndReference()
    reference.configure_output(48000)
    pcm = click_train(48000, 1.0, [0.2, 0.5, 0.8])
    pcm += np.random.default_rng(1).normal(0, 1e-4, len(pcm)).astype(np.float32)  # never silent
    play(reference, pcm, 48000, first_dac_s=10.0, block=480, jitter_s=0.002)
    out = np.zeros(16000, np.float32)
    reference.read(160000, out)  # 10.0 s at 16 kHz
    offsets = [int(np.argmax(np.abs(out[t - 400:t + 400]))) - 400 for t in (3200, 8000, 12800)]
    # Blocks are kept contiguous: every click has the same offset, within the first block's
    # timestamp jitter (2 ms = 32 samples) of the truth; without jitter it is exact.
    assert max(offsets) - min(offsets) <= 1 and abs(offsets[0]) <= 33
    exact = FarEndReference()
    exact.configure_output(48000)
    play(exact, pcm, 48000, first_dac_s=10.0, block=480)
    exact.read(160000, out)
    assert [int(np.argmax(np.abs(out[t - 400:t + 400]))) - 400 for t in (3200, 8000, 12800)] \
        == [0, 0, 0]


def test_a_new_stream_far_away_in_time_is_placed_at_its_own_timestamp() -> None:
    reference = FarEndReference()
    reference.configure_output(16000)
    play(reference, click_train(16000, 0.1, [0.05]), 16000, 1.0, 160)
    play(reference, click_train(16000, 0.1, [0.05]), 16000, 3.0, 160)
    out = np.zeros(1600, np.float32)
    reference.read(3 * 16000, out)
    assert abs(int(np.argmax(np.abs(out))) - 800) <= 1  # the click 50 ms into the new stream
    reference.read(2 * 16000, out)
    assert not out.any()


def test_silence_costs_no_resampling_and_reads_as_zeros() -> None:
    reference = FarEndReference()
    reference.configure_output(48000)
    play(reference, np.zeros(48000, np.float32), 48000, 0.0, 480)
    assert reference._resampler is None
    play(reference, click_train(48000, 0.2, [0.1]), 48000, 1.0, 480)
    out = np.zeros(3200, np.float32)
    reference.read(16000, out)
    assert abs(int(np.argmax(np.abs(out))) - 1600) <= 1
