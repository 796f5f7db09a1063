"""The peak limiter in front of the speaker: exact below its threshold, never at full scale,
a steady gain (little distortion) on a steady loud tone, the same in blocks as in one go."""

from __future__ import annotations

import numpy as np
import pytest

from app.audio.limiter import CEILING_DBFS, THRESHOLD_DBFS, PeakLimiter, dbfs_to_amplitude
from app.audio.resample import resample
from app.audio.simulated import read_wav
from app.conversation.demo import demo_sample

RATE = 48000
BLOCK = 480
CEILING = dbfs_to_amplitude(CEILING_DBFS)


def limited(signal: np.ndarray, block: int = BLOCK) -> tuple[np.ndarray, PeakLimiter]:
    limiter = PeakLimiter(RATE)
    out = signal.astype(np.float32).copy()
    for start in range(0, len(out), block):
        limiter.process(out[start:start + block])
    return out, limiter


def speech_at(peak_dbfs: float) -> np.ndarray:
    pcm, rate = read_wav(demo_sample())
    speech = resample(pcm[:, 0], rate, RATE)
    return (speech / np.max(np.abs(speech)) * dbfs_to_amplitude(peak_dbfs)).astype(np.float32)


def sine(level: float, hz: float = 440.0, seconds: float = 2.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (level * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def thd(signal: np.ndarray, hz: float) -> float:
    """Harmonics 2-9 over the fundamental, on one steady second."""
    steady = signal[RATE // 2:RATE // 2 + RATE] * np.hanning(RATE)
    spectrum = np.abs(np.fft.rfft(steady))
    k = int(hz)
    fundamental = spectrum[k - 3:k + 4].max()
    harmonics = [spectrum[h * k - 3:h * k + 4].max() for h in range(2, 10)]
    return float(np.sqrt(np.sum(np.square(harmonics))) / fundamental)


@pytest.mark.parametrize("peak_dbfs", [-30.0, -6.0, THRESHOLD_DBFS - 0.05])
def test_speech_below_the_threshold_passes_bit_for_bit(peak_dbfs: float) -> None:
    speech = speech_at(peak_dbfs)
    out, limiter = limited(speech)
    assert np.array_equal(out, speech) and limiter.limited_samples == 0


@pytest.mark.parametrize("signal", [
    sine(2.0), sine(4.0, hz=100.0), speech_at(6.0), speech_at(20.0),
    np.random.default_rng(1).normal(0, 3.0, RATE).astype(np.float32),
    np.tile(np.array([0, 50.0, -50.0, 0], np.float32), 2000),  # full-scale clicks and worse
], ids=["sine+6dB", "100Hz+12dB", "speech+6dB", "speech+20dB", "noise", "impulses"])
def test_nothing_reaches_full_scale(signal: np.ndarray) -> None:
    out, limiter = limited(signal)
    assert np.all(np.isfinite(out))
    assert np.max(np.abs(out)) <= CEILING * (1 + 1e-6) < 1.0
    assert limiter.limited_samples > 0


def test_a_steady_loud_tone_is_turned_down_not_clipped() -> None:
    out, _ = limited(sine(2.0))  # +6 dBFS
    assert np.max(np.abs(out[RATE // 2:])) == pytest.approx(CEILING, rel=1e-3)
    assert thd(out, 440.0) < 0.005  # hard clipping to the ceiling would give ~20 %
    clipped = np.clip(sine(2.0), -CEILING, CEILING)
    assert thd(clipped, 440.0) > 0.1


def test_blocks_of_any_size_give_the_same_result() -> None:
    speech = speech_at(9.0)
    whole, _ = limited(speech, block=len(speech))
    for block in (1, 37, 480, 4096):
        assert np.allclose(limited(speech, block)[0], whole, atol=1e-6)


def test_after_a_loud_burst_the_gain_comes_back() -> None:
    signal = np.concatenate([sine(2.0, seconds=0.2), sine(0.3, seconds=1.0)])
    out, _ = limited(signal)
    quiet_tail = slice(int(0.9 * RATE), None)  # 0.7 s after the burst: released
    assert np.array_equal(out[quiet_tail], signal[quiet_tail])


def test_bench_limiter_reports_exact_speech_below_the_threshold(tmp_path) -> None:
    import json

    from app.cli import main

    out = tmp_path / "limiter.json"
    assert main(["bench", "limiter", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    for level in ("-30", "-6", "-1.05"):
        assert rows[f"speech peak {level} dBFS"]["max_difference"] == 0.0
    assert all(row["out_peak_dbfs"] < 0 for row in rows.values())
