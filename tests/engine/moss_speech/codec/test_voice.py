"""Voice conditioning: the three tensors, the resampling chains, the cache, bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning, VoiceFileError, dsp
from app.engine.moss_speech.codec.codec import MossSpeechCodec as CodecClass
from app.engine.moss_speech.codec.config import CodecConfig
from app.engine.moss_speech.codec.onnx_writer import speaker_model_reference
from app.engine.moss_speech.codec.testing import _speaker_weights, speech_like


def test_voice_tensors(codec: MossSpeechCodec, voice: VoiceConditioning, voice_wav: Path) -> None:
    samples, rate = soundfile.read(voice_wav, dtype="float32")
    pcm_24k = dsp.resample(torch.from_numpy(samples), rate, 24000)
    n_codes = len(voice.prompt_codes)  # codes and mel frames agree: min of the two lengths
    assert n_codes == min(len(pcm_24k) // 1920, len(codec.encode(samples, rate)))
    assert voice.prompt_codes.dtype == torch.long
    assert voice.prompt_mel.shape == (4 * n_codes, 80) and voice.prompt_mel.dtype == torch.float32
    assert voice.xvector.shape == (192,)
    # codes: the file resampled straight to 16 kHz
    assert torch.equal(voice.prompt_codes, codec.encode(samples, rate)[:n_codes])
    # mel: the file at 24 kHz
    assert torch.allclose(voice.prompt_mel, dsp.prompt_mel(pcm_24k)[:4 * n_codes])
    # x-vector: 24 kHz -> 16 kHz, Kaldi fbank minus its time mean, through onnxruntime
    fbank = dsp.kaldi_fbank(dsp.resample(pcm_24k, 24000, 16000)).numpy()
    expected = speaker_model_reference(fbank - fbank.mean(axis=0), *_speaker_weights(
        CodecConfig.tiny(), 0))
    assert np.allclose(voice.xvector.numpy(), expected, atol=1e-4)


def test_different_voices_differ(codec: MossSpeechCodec, voice: VoiceConditioning,
                                 tmp_path: Path) -> None:
    other = tmp_path / "other.flac"
    soundfile.write(other, speech_like(1.7, 16000, seed=9, f0_hz=220.0), 16000)
    second = codec.voice(other)
    assert not torch.allclose(second.xvector, voice.xvector)
    assert second.prompt_mel.shape[0] == 4 * len(second.prompt_codes)


def test_voice_cache_in_memory_and_on_disk(codec: MossSpeechCodec, tmp_path: Path) -> None:
    path = tmp_path / "cached.wav"
    soundfile.write(path, speech_like(1.2, 22050, seed=10), 22050)
    cache = codec.voice_cache
    hits, misses = cache.hits, cache.misses
    first = codec.voice(path)
    assert (cache.hits, cache.misses) == (hits, misses + 1)
    again = codec.voice(path)
    assert cache.hits == hits + 1 and again is first
    # a new codec object with the same cache folder reads the entry from disk
    fresh = CodecClass(codec.config, codec.tokenizer.encoder, codec.hift, codec.speaker,
                       flow_loader=codec.flow, fingerprint=cache.fingerprint,
                       voice_cache_dir=cache.folder)
    from_disk = fresh.voice(path)
    assert fresh.voice_cache.hits == 1 and fresh.voice_cache.misses == 0
    assert torch.equal(from_disk.prompt_codes, first.prompt_codes)
    assert torch.equal(from_disk.prompt_mel, first.prompt_mel)
    # same name, different content: a miss
    soundfile.write(path, speech_like(1.2, 22050, seed=11), 22050)
    codec.voice(path)
    assert cache.misses == misses + 2


def _write(path: Path, samples: np.ndarray, rate: int = 16000) -> Path:
    soundfile.write(path, samples, rate, subtype="FLOAT")
    return path


@pytest.mark.parametrize(("case", "message"), [
    ("missing", "does not exist"), ("not_audio", "not an audio file"), ("empty", "empty"),
    ("short", "at least 1 s"), ("long", "limit is 60 s"), ("nan", "NaN")])
def test_bad_voice_files_are_explained(codec: MossSpeechCodec, tmp_path: Path, case: str,
                                       message: str) -> None:
    path = tmp_path / f"{case}.wav"
    if case == "not_audio":
        path.write_text("these are not the samples you are looking for")
    elif case == "empty":
        _write(path, np.zeros(0, dtype=np.float32))
    elif case == "short":
        _write(path, speech_like(0.6, 16000))
    elif case == "long":
        _write(path, np.zeros(8000 * 61, dtype=np.float32), rate=8000)
    elif case == "nan":
        samples = speech_like(2.0, 16000)
        samples[1000] = np.nan
        _write(path, samples)
    with pytest.raises(VoiceFileError, match=message) as caught:
        codec.voice(path)
    assert path.name in str(caught.value)


def test_stereo_voice_uses_channel_0_for_codes(codec: MossSpeechCodec, tmp_path: Path) -> None:
    left = speech_like(1.5, 16000, seed=12)
    right = speech_like(1.5, 16000, seed=13, f0_hz=300.0)
    path = _write(tmp_path / "stereo.wav", np.stack([left, right], axis=1))
    voice = codec.voice(path)
    assert torch.equal(voice.prompt_codes, codec.encode(left, 16000)[:len(voice.prompt_codes)])
