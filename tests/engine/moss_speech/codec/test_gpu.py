"""CUDA paths of the codec (opt-in; skipped without a GPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from app.engine.moss_speech.codec import load_codec
from app.engine.moss_speech.codec.testing import speech_like

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_cuda_codec_matches_cpu(tiny_codec_dir: Path, tmp_path: Path) -> None:
    torch.backends.cudnn.deterministic = True  # default cuDNN drifts ~1e-4 (contract §3.7)
    cpu = load_codec(tiny_codec_dir, voice_cache_dir=tmp_path / "cpu")
    gpu = load_codec(tiny_codec_dir, "cuda", voice_cache_dir=tmp_path / "gpu")
    audio = speech_like(2.0, 16000, seed=3)
    assert torch.equal(gpu.encode(audio, 16000), cpu.encode(audio, 16000))
    voice = cpu.voice_from_samples(speech_like(1.5, 24000, seed=4), 24000)
    codes = torch.randint(0, 16384, (17,), generator=torch.Generator().manual_seed(0))
    mel_cpu = cpu.flow(0).inference(codes, voice.prompt_codes, voice.prompt_mel,
                                    voice.xvector, streaming=False, finalize=True)
    mel_gpu = gpu.flow(0).inference(codes, voice.prompt_codes, voice.prompt_mel,
                                    voice.xvector, streaming=False, finalize=True)
    assert torch.allclose(mel_gpu.cpu(), mel_cpu, atol=1e-3, rtol=1e-3)
    with gpu.stream_decoder(voice, chunk=5) as decoder:
        pcm = np.concatenate([decoder.push(codes), decoder.finish()])
    assert len(pcm) == 17 * 1920 and np.isfinite(pcm).all()
    state = torch.cuda.get_rng_state()
    gpu.decode(codes, voice, seed=3)
    assert torch.equal(torch.cuda.get_rng_state(), state)
