"""Front ends against independent oracles (transformers' feature extractors and filter banks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.engine.moss_speech.codec import dsp
from app.engine.moss_speech.codec.testing import speech_like

transformers = pytest.importorskip("transformers")
audio_utils = pytest.importorskip("transformers.audio_utils")


def _quiet_then_loud(n: int) -> np.ndarray:
    x = speech_like(n / 16000, 16000, seed=4)
    x[: n // 3] *= 1e-4  # near-silence: the max − 8 floor binds there
    return x


@pytest.mark.parametrize("n_samples", [16000, 16000 * 2 + 777, 1280 * 7])
def test_whisper_log_mel_matches_transformers(n_samples: int) -> None:
    x = _quiet_then_loud(n_samples)
    extractor = transformers.WhisperFeatureExtractor(feature_size=128)
    padded = np.pad(x, (0, (-n_samples) % 1280))
    ours = dsp.whisper_log_mel(torch.from_numpy(padded)).numpy()
    for device in (None, "cpu"):  # numpy (float64) and torch paths of the oracle
        kwargs = {"device": device} if device else {}
        oracle = extractor(x, sampling_rate=16000, return_tensors="np", padding="longest",
                           pad_to_multiple_of=1280, **kwargs).input_features[0]
        assert oracle.shape == ours.shape == (128, len(padded) // 160)
        assert np.abs(oracle - ours).max() < 1e-4


def test_growing_and_sliced_frames_equal_the_centred_ones() -> None:
    x = torch.from_numpy(_quiet_then_loud(16000))
    full = dsp.whisper_raw_log_mel(x, 400, 160, 128)
    growing = dsp.whisper_raw_log_mel(x[:9000], 400, 160, 128, mode="growing")
    assert growing.shape[1] == (9000 - 200) // 160 + 1  # only frames whose window is complete
    assert torch.allclose(growing, full[:, :growing.shape[1]], atol=1e-5)
    sliced = dsp.whisper_raw_log_mel(x[160 * 20 - 200:], 400, 160, 128, mode="slice")
    assert torch.allclose(sliced[:, :30], full[:, 20:50], atol=1e-5)


def test_prompt_mel_filters_are_librosa_slaney() -> None:
    oracle = audio_utils.mel_filter_bank(961, 80, 0.0, 8000.0, 24000, norm="slaney",
                                         mel_scale="slaney")
    assert np.abs(oracle - dsp.slaney_mel_filters(24000, 1920, 80, 0.0, 8000.0)).max() < 1e-9


def test_prompt_mel_frames_and_values() -> None:
    rate = 24000
    t = np.arange(rate) / rate
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    mel = dsp.prompt_mel(torch.from_numpy(tone))
    assert mel.shape == (rate // 480, 80)
    # an independent numpy version of the recipe: reflect pad 720, |STFT| + 1e-9, log
    padded = np.pad(tone.astype(np.float64), 720, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, 1920)[::480]
    window = np.hanning(1921)[:-1]  # periodic Hann
    spectrum = np.sqrt(np.abs(np.fft.rfft(frames * window)) ** 2 + 1e-9)
    filters = dsp.slaney_mel_filters(24000, 1920, 80, 0.0, 8000.0)
    expected = np.log(np.maximum(spectrum @ filters, 1e-5))
    assert np.abs(expected - mel.numpy()).max() < 1e-3
    assert int(mel[10].argmax()) == int(np.argmax(filters[1000 * 1920 // 24000]))


def test_kaldi_fbank_matches_transformers_kaldi_port() -> None:
    x = speech_like(1.3, 16000, seed=2)
    filters = audio_utils.mel_filter_bank(257, 80, 20, 8000, 16000, norm=None,
                                          mel_scale="kaldi", triangularize_in_mel_space=True)
    assert np.abs(filters - dsp.kaldi_mel_filters(80)).max() < 1e-9
    window = audio_utils.window_function(400, "povey", periodic=False)
    oracle = audio_utils.spectrogram(
        x.astype(np.float64), window, frame_length=400, hop_length=160, fft_length=512,
        power=2.0, center=False, preemphasis=0.97, mel_filters=filters, log_mel="log",
        mel_floor=1.192092955078125e-07, remove_dc_offset=True).T
    ours = dsp.kaldi_fbank(torch.from_numpy(x)).numpy()
    assert ours.shape == oracle.shape == (1 + (len(x) - 400) // 160, 80)
    assert np.abs(oracle - ours).max() < 1e-4


@pytest.mark.parametrize(("orig", "new"), [(44100, 16000), (48000, 24000), (24000, 16000),
                                           (16000, 24000)])
def test_resample_length_and_band_limited_content(orig: int, new: int) -> None:
    n = orig // 2 + 17
    t = np.arange(n) / orig
    tone = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    out = dsp.resample(torch.from_numpy(tone), orig, new).numpy()
    assert len(out) == int(np.ceil(n * new / orig))
    t_new = np.arange(len(out)) / new
    interior = slice(100, len(out) - 100)
    assert np.abs(out[interior] - np.sin(2 * np.pi * 440 * t_new[interior])).max() < 2e-3
    # content above the new Nyquist frequency is removed
    high = np.sin(2 * np.pi * 0.49 * orig * t).astype(np.float32)
    if new < orig:
        assert np.abs(dsp.resample(torch.from_numpy(high), orig, new).numpy()[interior]).max() \
            < 0.05
