from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__
from app.cli import main
from app.settings import Settings
from app.settings_store import save_settings


def run_app(*args: str, env_home: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "MOSS_VOICE_HOME": str(env_home)}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_doctor_json_has_the_promised_keys(isolated_home: Path) -> None:
    result = run_app("doctor", "--json", env_home=isolated_home)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in ("python", "torch", "gpus", "audio", "models", "display"):
        assert key in report
    assert report["torch"]["installed"] is True
    decode = report["torch"]["decode_step"]  # no GPU here: eager, the others with reasons
    assert decode["device"] == "cpu" and decode["frozen"] is False
    assert [p["path"] for p in decode["plan"] if p["skipped"] is None] == ["eager"]
    assert isinstance(report["gpus"], list)
    assert report["display"]["available"] is False
    assert report["models"]["model"]["configured"] is False


def test_doctor_reports_a_bad_model_folder_and_still_exits_0(
        isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    save_settings(Settings().with_value("engine.model_dir", bad))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "missing key 'hidden_size'" in out
    assert "codec folder not set" in out
    assert "decode step (cpu): torch.compile" in out and "→ eager" in out


def test_no_display_falls_back_to_the_headless_demo(isolated_home: Path) -> None:
    result = run_app(env_home=isolated_home)
    assert result.returncode == 0, result.stderr
    assert "No display available" in result.stdout
