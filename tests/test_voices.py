"""The official example voices: fetched at a pinned commit, kept only when their SHA-256 is the
published one (served here by the loopback fake hub)."""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import voices
from tests.fake_hub import FakeHub

DATA = bytes(range(256)) * 1000
VOICE = voices.ExampleVoice("en", "English (test)", "assets/prompt_en.wav", len(DATA),
                            hashlib.sha256(DATA).hexdigest())
PATH = f"/{voices.REPOSITORY}/{voices.COMMIT}/assets/prompt_en.wav"


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub({}, files={PATH: DATA}) as fake:
        yield fake


def test_a_voice_is_fetched_verified_and_kept(hub: FakeHub, tmp_path: Path) -> None:
    progress: list[voices.VoiceDownloadProgress] = []
    path = voices.download_voice(VOICE, progress.append, threading.Event(), tmp_path,
                                 base_url=hub.url)
    assert path == tmp_path / "moss-speech-example-en.wav" and path.read_bytes() == DATA
    assert progress[-1].fraction == 1.0 and len(progress) >= 2
    assert ("GET", PATH) in hub.requests  # raw.githubusercontent.com's layout, pinned commit
    assert not list(tmp_path.glob("*.part"))
    assert voices.is_installed(VOICE, tmp_path)
    hub.log.clear()
    assert voices.download_voice(VOICE, progress.append, threading.Event(), tmp_path,
                                 base_url=hub.url) == path
    assert hub.requests == []  # already here: not fetched twice


def test_a_file_that_is_not_the_published_one_is_not_kept(hub: FakeHub, tmp_path: Path) -> None:
    tampered = voices.ExampleVoice("en", "x", "assets/prompt_en.wav", len(DATA), "0" * 64)
    with pytest.raises(voices.VoiceDownloadError, match="checksum differs"):
        voices.download_voice(tampered, lambda _p: None, threading.Event(), tmp_path,
                              base_url=hub.url)
    assert list(tmp_path.iterdir()) == []


def test_cancel_missing_file_and_no_network_say_what_happened(hub: FakeHub,
                                                              tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(voices.VoiceDownloadCancelledError):
        voices.download_voice(VOICE, lambda _p: None, cancel, tmp_path, base_url=hub.url)
    missing = voices.ExampleVoice("cn", "x", "assets/nothing.wav", 1, "0" * 64)
    with pytest.raises(voices.VoiceDownloadError, match="HTTP 404"):
        voices.download_voice(missing, lambda _p: None, threading.Event(), tmp_path,
                              base_url=hub.url)
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(voices.VoiceDownloadError, match="Cannot reach"):
        voices.download_voice(VOICE, lambda _p: None, threading.Event(), tmp_path,
                              base_url=f"http://127.0.0.1:{port}")
    assert list(tmp_path.iterdir()) == []


def test_the_catalogue_pins_the_published_files() -> None:
    assert len(voices.COMMIT) == 40
    assert {v.repo_path for v in voices.EXAMPLE_VOICES} == {"assets/prompt_en.wav",
                                                            "assets/prompt_cn.wav"}
    for voice in voices.EXAMPLE_VOICES:
        assert len(voice.sha256) == 64 and voice.size_bytes > 1_000_000
        assert voices.voice_url(voice).startswith(
            f"https://raw.githubusercontent.com/OpenMOSS/MOSS-Speech/{voices.COMMIT}/assets/")
