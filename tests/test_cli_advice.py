"""Engine errors on the command line give command-line advice, once (issue 13 item 7)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile

from app.cli import main
from app.engine.moss_speech.codec.testing import write_tiny_codec


@pytest.fixture(scope="module")
def codec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_codec(tmp_path_factory.mktemp("codec") / "codec")


@pytest.fixture
def mic(tmp_path: Path) -> Path:
    path = tmp_path / "mic.wav"
    soundfile.write(path, np.zeros(16000, np.float32), 16000)
    return path


def converse(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["converse", "--engine", "moss_speech", *args]) == 2
    return capsys.readouterr().err


def test_a_missing_voice_file_gets_command_line_advice(capsys: pytest.CaptureFixture[str],
                                                       mic: Path, tmp_path: Path) -> None:
    err = converse(capsys, "--model-dir", str(tmp_path), "--codec-dir", str(tmp_path),
                   "--voice", str(tmp_path / "nope.wav"), "--input", str(mic))
    # refused while the command line is read (app.cli.options), before any folder is opened
    assert "argument --voice:" in err and "nope.wav' does not exist: expected a 3–20 s WAV or " \
           "FLAC recording of a voice" in err
    assert "Settings" not in err and "choose another file" not in err and ".." not in err


def test_no_voice_and_no_folders(capsys: pytest.CaptureFixture[str], mic: Path,
                                 tmp_path: Path) -> None:
    err = converse(capsys, "--model-dir", str(tmp_path), "--codec-dir", str(tmp_path),
                   "--input", str(mic))
    assert "--voice FILE" in err and "Settings" not in err
    err = converse(capsys, "--input", str(mic))
    assert "no model and no codec folder is set. Pass the folders with --model-dir and " \
           "--codec-dir" in err


def test_a_damaged_codec_folder_is_advised_once(capsys: pytest.CaptureFixture[str], mic: Path,
                                                codec_dir: Path, tmp_path: Path) -> None:
    from app.engine.moss_speech.testing import write_tiny_checkpoint, write_tiny_voice
    from tests.engine.test_folders import SMALL

    model = write_tiny_checkpoint(tmp_path / "model", config=SMALL)
    codec = Path(shutil.copytree(codec_dir, tmp_path / "codec"))
    config = json.loads((codec / "config.json").read_text())
    (codec / "config.json").write_text(json.dumps({**config, "d_model": 96}))
    voice = write_tiny_voice(tmp_path / "voice.wav")
    err = converse(capsys, "--model-dir", str(model), "--codec-dir", str(codec), "--voice",
                   str(voice), "--input", str(mic), "--set", "engine.device=\"cpu\"")
    assert "config.json and model.safetensors disagree" in err
    assert err.count("again") == 1
    assert err.rstrip().endswith("Download the codec again, or pass another folder with "
                                 "--codec-dir.")
    assert "model manager" not in err


def test_the_app_keeps_its_own_advice() -> None:
    from app.engine.folders import FolderError
    from app.engine.moss_speech.build import folder_unavailable, voice_unavailable

    voice = voice_unavailable("Voice file x.wav does not exist.")
    assert "Settings → Engine → Voice prompt" in voice.advice("gui")
    assert "--voice FILE" in voice.advice("cli")
    folder = folder_unavailable(FolderError("The codec folder c cannot be used", "Download the "
                                            "codec again, or choose another codec folder.",
                                            "codec"))
    assert folder.advice("gui") == "Download the codec again, or choose another codec folder."
    assert folder.category == "model_invalid"
