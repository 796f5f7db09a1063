"""Voice-prompt files are checked from their header before anything is decoded (issue 21 item 4):
a 237 KB FLAC of 8 channels × 600 s once took 2.2 GB before the 60 s limit was checked."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile

from app.engine.moss_speech.codec import MossSpeechCodec, VoiceFileError
from app.engine.moss_speech.codec.testing import speech_like
from app.engine.moss_speech.codec.voice import check_voice_file


def write_silence(path: Path, seconds: float, channels: int, rate_hz: int,
                  fmt: str = "FLAC") -> Path:
    """Written a second at a time, so the test itself never holds the whole file."""
    block = np.zeros((rate_hz, channels), dtype=np.float32)
    with soundfile.SoundFile(str(path), "w", rate_hz, channels, format=fmt) as out:
        for _ in range(int(seconds)):
            out.write(block)
    return path


@pytest.fixture(scope="module")
def long_flac(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_silence(tmp_path_factory.mktemp("hostile") / "long.flac", 600, 8, 8000)


def test_a_small_flac_of_600_s_in_8_channels_is_refused_before_decoding(
        codec: MossSpeechCodec, long_flac: Path) -> None:
    assert long_flac.stat().st_size < 1_000_000  # a small file...
    tracemalloc.start()
    try:
        with pytest.raises(VoiceFileError, match=r"long\.flac is 600 s long; the limit is 60 s"):
            codec.voice(long_flac)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20  # ...that decodes to 154 MB: nothing of it was decoded or hashed


def test_too_many_samples_are_refused_from_the_header(tmp_path: Path) -> None:
    path = write_silence(tmp_path / "wide.wav", 40, 8, 96000, fmt="WAV")  # 30.7 M samples
    with pytest.raises(VoiceFileError, match=r"8 channels of 40 s at 96000 Hz.*export it as mono"):
        check_voice_file(path)


@pytest.mark.parametrize(("channels", "rate_hz", "message"), [
    (1, 1000, "1 channel\\(s\\) at 1000 Hz; a voice prompt needs 1–8 channels"),
])
def test_odd_rates_are_refused(tmp_path: Path, channels: int, rate_hz: int, message: str) -> None:
    path = tmp_path / "odd.wav"
    soundfile.write(path, np.zeros((rate_hz * 2, channels), np.float32), rate_hz)
    with pytest.raises(VoiceFileError, match=message):
        check_voice_file(path)


def test_a_directory_or_missing_file_is_explained_without_gui_advice(tmp_path: Path) -> None:
    with pytest.raises(VoiceFileError, match=r"Voice file nothing\.wav does not exist\.$"):
        check_voice_file(tmp_path / "nothing.wav")


def test_the_cache_key_is_hashed_in_chunks_with_the_same_digest(
        codec: MossSpeechCodec, tmp_path: Path) -> None:
    path = tmp_path / "voice.wav"
    soundfile.write(path, speech_like(3.0, 16000, seed=4), 16000)
    cache = codec.voice_cache
    expected = hashlib.sha256(cache.fingerprint.encode() + path.read_bytes()).hexdigest()
    assert cache.key_of_file(path) == expected == cache.key(path.read_bytes())
