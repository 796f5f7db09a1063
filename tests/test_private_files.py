"""What the app writes is private on a shared machine (issue 21 items 2 and 6): its folders are
0700 and its files 0600 on POSIX whatever the umask, and torch.compile's caches live in the
app's own cache instead of a /tmp folder another user could create first."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app import paths
from app.paths import private_dir, use_private_compile_caches, write_private

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_app_folders_are_created_0700(isolated_home: Path, umask: int) -> None:
    isolated_home.chmod(0o751)
    voices = private_dir(paths.data_dir() / "voices")
    assert mode(voices) == mode(paths.data_dir()) == 0o700
    assert mode(isolated_home) == 0o751  # MOSS_VOICE_HOME is the person's folder: untouched


def test_older_wider_app_folders_are_tightened_but_not_the_persons(
        isolated_home: Path, tmp_path: Path, umask: int) -> None:
    data = paths.data_dir()
    (data / "voices").mkdir(parents=True)
    for folder in (data, data / "voices"):
        folder.chmod(0o755)
    private_dir(data / "voices")
    assert mode(data) == mode(data / "voices") == 0o700
    elsewhere = tmp_path / "exports"
    elsewhere.mkdir()
    elsewhere.chmod(0o755)
    private_dir(elsewhere / "new")
    assert mode(elsewhere) == 0o755 and mode(elsewhere / "new") == 0o700


def test_write_private_is_0600_and_atomic(isolated_home: Path, umask: int) -> None:
    path = write_private(paths.config_dir() / "x.json", b"{}")
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]  # no temporary left behind


def test_the_log_and_its_backups_are_0600(isolated_home: Path, umask: int) -> None:
    from app.logs import LOG_FILE_NAME, PrivateRotatingFileHandler

    folder = private_dir(paths.log_dir())
    old = folder / LOG_FILE_NAME
    old.write_text("from an older version\n")
    old.chmod(0o644)
    handler = PrivateRotatingFileHandler(old, maxBytes=200, backupCount=2, encoding="utf-8")
    try:
        for i in range(20):
            handler.emit(logging.LogRecord("t", logging.INFO, __file__, 1, f"line {i} " * 5, None,
                                           None))
    finally:
        handler.close()
    files = sorted(folder.iterdir())
    assert len(files) == 3 and all(mode(f) == 0o600 for f in files)
    assert mode(folder) == 0o700


def test_voice_recordings_are_private_and_chosen_paths_follow_the_umask(
        isolated_home: Path, tmp_path: Path) -> None:
    from app.conversation.recording import VoiceRecorder

    old = os.umask(0o022)
    try:
        recorder = VoiceRecorder(5.0)
        recorder.add(np.zeros((16000, 1), np.float32), 16000)
        recording = paths.data_dir() / "voices" / "voice-prompt.wav"
        recorder.write_wav(recording)
        assert mode(recording) == 0o600 and mode(recording.parent) == 0o700
        import soundfile

        assert soundfile.info(str(recording)).frames == 16000
        from app.audio.simulated import write_wav

        chosen = tmp_path / "out" / "speaker.wav"  # a --output the person chose
        write_wav(chosen, np.zeros(100, np.float32), 16000)
        assert mode(chosen) == 0o644
    finally:
        os.umask(old)


def test_acoustic_checks_are_0600(isolated_home: Path, umask: int) -> None:
    from app.audio.acoustic_check import AcousticCheckStore, EchoMeasurement

    store = AcousticCheckStore()
    store.put("mic", "speaker", EchoMeasurement(True, 40.0, 12.0, -70.0, -6.0, False, "aec", ""))
    assert mode(store.path) == 0o600 and mode(store.path.parent) == 0o700
    assert json.loads(store.path.read_text())


def test_settings_are_0600_in_a_0700_folder(isolated_home: Path, umask: int) -> None:
    from app.settings import Settings
    from app.settings_store import save_settings

    path = save_settings(Settings())
    assert mode(path) == 0o600 and mode(path.parent) == 0o700


def test_the_voice_cache_is_private(isolated_home: Path, umask: int) -> None:
    import torch

    from app.engine.moss_speech.codec.voice import VoiceCache, VoiceConditioning

    cache = VoiceCache(paths.cache_dir() / "voices", "fingerprint")
    voice = VoiceConditioning(torch.zeros(2, dtype=torch.long), torch.zeros(8, 80),
                              torch.zeros(192))
    cache.put("abc", voice)
    entry = paths.cache_dir() / "voices" / "abc.safetensors"
    assert mode(entry) == 0o600 and mode(entry.parent) == mode(paths.cache_dir()) == 0o700
    assert torch.equal(VoiceCache(entry.parent, "fingerprint").get("abc", "x").prompt_mel,
                       voice.prompt_mel)


def test_compile_caches_point_at_the_apps_private_cache(isolated_home: Path) -> None:
    environ: dict[str, str] = {"TRITON_CACHE_DIR": "/home/me/my-triton"}
    applied = use_private_compile_caches(environ)
    inductor = paths.cache_dir() / "torchinductor"
    assert applied == {"TORCHINDUCTOR_CACHE_DIR": str(inductor)}
    assert environ["TRITON_CACHE_DIR"] == "/home/me/my-triton"  # the person's choice wins
    assert mode(inductor) == 0o700


def test_the_command_line_sets_them_before_torch_is_imported(isolated_home: Path) -> None:
    code = ("import os, sys\nfrom app.cli import main\ntry:\n    main(['--version'])\n"
            "except SystemExit:\n    pass\nprint(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n"
            "print(os.environ['TRITON_CACHE_DIR'])\nprint('torch' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=120).stdout.split()
    assert out[-3:] == [str(paths.cache_dir() / "torchinductor"),
                        str(paths.cache_dir() / "triton"), "False"]
    assert mode(paths.cache_dir() / "triton") == 0o700
