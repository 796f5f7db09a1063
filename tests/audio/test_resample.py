from __future__ import annotations

import numpy as np
import pytest

from app.audio.resample import StreamResampler, resample

PAIRS = [(48000, 16000), (44100, 16000), (8000, 16000), (22050, 16000), (24000, 48000),
         (24000, 44100), (16000, 16000)]


@pytest.mark.parametrize(("rate_in", "rate_out"), PAIRS)
def test_streaming_in_any_chunks_equals_one_offline_call(rate_in: int, rate_out: int) -> None:
    rng = np.random.default_rng(rate_in)
    signal = rng.normal(0, 0.1, rate_in).astype(np.float32)
    offline = StreamResampler(rate_in, rate_out).process(signal, last=True)
    stream, parts, position = StreamResampler(rate_in, rate_out), [], 0
    while position < len(signal):
        size = int(rng.integers(1, 700))
        parts.append(stream.process(signal[position:position + size]))
        position += size
    parts.append(stream.process(np.zeros(0, np.float32), last=True))
    streamed = np.concatenate(parts)
    assert len(offline) == len(streamed) == round(len(signal) * rate_out / rate_in)
    np.testing.assert_allclose(streamed, offline, atol=1e-6)


@pytest.mark.parametrize(("rate_in", "rate_out"), PAIRS)
def test_a_tone_keeps_its_time_alignment_and_level(rate_in: int, rate_out: int) -> None:
    t_in = np.arange(rate_in) / rate_in
    tone = np.sin(2 * np.pi * 1000 * t_in).astype(np.float32)
    out = StreamResampler(rate_in, rate_out).process(tone, last=True)
    expected = np.sin(2 * np.pi * 1000 * np.arange(len(out)) / rate_out)
    middle = slice(200, -200)
    assert np.max(np.abs(out[middle] - expected[middle])) < 1e-3


@pytest.mark.parametrize(("rate_in", "rate_out"), [(48000, 16000), (44100, 16000)])
def test_content_above_the_new_nyquist_is_removed(rate_in: int, rate_out: int) -> None:
    t_in = np.arange(rate_in) / rate_in
    alias = np.sin(2 * np.pi * (rate_out / 2 + 1500) * t_in).astype(np.float32)
    out = StreamResampler(rate_in, rate_out).process(alias, last=True)
    assert np.max(np.abs(out[200:-200])) < 1e-3  # below -60 dB


def test_output_keeps_up_with_input_within_a_few_milliseconds() -> None:
    stream = StreamResampler(48000, 16000)
    produced = sum(len(stream.process(np.zeros(480, np.float32))) for _ in range(10))
    assert stream.latency_s < 0.003
    assert produced >= 10 * 160 - int(stream.latency_s * 16000) - 1


def test_offline_resample_uses_the_exact_ratio() -> None:
    out = resample(np.ones(16000, np.float32), 16000, 24000)
    assert out.dtype == np.float32 and len(out) == 24000
    assert resample(np.zeros(0, np.float32), 16000, 24000).shape == (0,)
