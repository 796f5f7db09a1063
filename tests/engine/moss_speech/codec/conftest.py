"""Shared fixtures: one tiny random codec folder and one loaded codec per test session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import soundfile
import torch

from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning, load_codec
from app.engine.moss_speech.codec.testing import speech_like
from app.engine.moss_speech.testing import write_tiny_codec

FAST_STEPS = 2  # Euler steps in fast tests; the 10-step default is tested separately
Codes = Callable[..., torch.Tensor]  # the make_codes fixture: (n, seed=0) -> codes [n]


@pytest.fixture(scope="session")
def tiny_codec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_codec(tmp_path_factory.mktemp("tiny-codec") / "codec", seed=0)


@pytest.fixture(scope="session")
def codec(tiny_codec_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> MossSpeechCodec:
    return load_codec(tiny_codec_dir, voice_cache_dir=tmp_path_factory.mktemp("voice-cache"))


@pytest.fixture(scope="session")
def voice_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2.3 s voice prompt at 44.1 kHz (the rate of the upstream default prompts)."""
    path = tmp_path_factory.mktemp("voices") / "voice.wav"
    soundfile.write(path, speech_like(2.3, 44100, seed=1), 44100, subtype="FLOAT")
    return path


@pytest.fixture(scope="session")
def voice(codec: MossSpeechCodec, voice_wav: Path) -> VoiceConditioning:
    return codec.voice(voice_wav)


@pytest.fixture(scope="session")
def make_codes() -> Callable[[int, int], torch.Tensor]:
    def make(n: int, seed: int = 0) -> torch.Tensor:
        return torch.randint(0, 16384, (n,), generator=torch.Generator().manual_seed(seed))

    return make
