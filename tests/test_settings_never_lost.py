"""Settings are never lost: report-only commands do not write the file, a backup never replaces
an earlier one, and a settings path that cannot be written is reported by doctor."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli import main
from app.settings_store import (
    BACKUPS_KEPT,
    backups_of,
    legacy_backup_path,
    load_settings,
    make_backup,
    settings_write_problem,
)

BROKEN = "[vad\nthreshold = 0.7\n"


def files_in(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def broken_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config" / "settings.toml"
    path.parent.mkdir()
    path.write_text(BROKEN)
    monkeypatch.setenv("MOSS_VOICE_SETTINGS", str(path))
    return path


@pytest.mark.parametrize("argv", [["doctor"], ["doctor", "--json"]])
def test_doctor_reports_a_broken_file_and_leaves_it_alone(
        broken_settings: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    before = files_in(broken_settings.parent)
    assert main(argv) == 0
    assert files_in(broken_settings.parent) == before  # no rewrite, no backup
    out = capsys.readouterr().out
    issues = (json.loads(out)["models"]["settings_issues"] if "--json" in argv
              else [line for line in out.splitlines() if line.startswith("-- settings")])
    assert any("not valid TOML" in issue for issue in issues), out


def test_a_screenshot_leaves_a_broken_file_alone(broken_settings: Path, tmp_path: Path) -> None:
    before = files_in(broken_settings.parent)
    assert main(["--screenshot", str(tmp_path / "shot.png")]) == 0
    assert (tmp_path / "shot.png").is_file()
    assert files_in(broken_settings.parent) == before


def test_converse_with_saved_settings_only_reads_them(
        broken_settings: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from app.audio.simulated import write_wav

    wav = tmp_path / "in.wav"
    write_wav(wav, np.zeros(1600, np.float32), 16000)
    before = files_in(broken_settings.parent)
    assert main(["converse", "--input", str(wav), "--saved-settings", "--quiet"]) == 0
    assert files_in(broken_settings.parent) == before
    assert "not valid TOML" in capsys.readouterr().err


def test_the_app_repairs_with_a_backup_and_a_second_corruption_keeps_the_first(
        broken_settings: Path) -> None:
    first = load_settings(broken_settings)  # the app starting: backup, then a clean rewrite
    assert first.backup_path is not None and first.backup_path.read_text() == BROKEN
    second_text = "vad = 3\n"
    broken_settings.write_text(second_text)
    second = load_settings(broken_settings)
    assert second.backup_path is not None and second.backup_path != first.backup_path
    assert first.backup_path.read_text() == BROKEN  # the original is still there
    assert second.backup_path.read_text() == second_text
    assert backups_of(broken_settings) == [first.backup_path, second.backup_path]


def test_the_same_broken_content_reuses_its_backup(broken_settings: Path) -> None:
    first = load_settings(broken_settings)
    broken_settings.write_text(BROKEN)
    assert load_settings(broken_settings).backup_path == first.backup_path
    assert len(backups_of(broken_settings)) == 1


def test_a_backup_never_replaces_a_file_and_only_the_newest_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    legacy = legacy_backup_path(path)
    legacy.write_text("from an older version")
    made = []
    for index in range(BACKUPS_KEPT + 3):
        path.write_text(f"version {index}")
        made.append(make_backup(path, now_s=1_790_000_000.0))  # the same second every time
    assert len(set(made)) == len(made)  # a name in use got a new one
    kept = backups_of(path)
    assert kept == made[-BACKUPS_KEPT:]
    assert [p.read_text() for p in kept] == [f"version {i}" for i in range(3, BACKUPS_KEPT + 3)]
    assert legacy.read_text() == "from an older version"  # never removed


def test_doctor_reports_a_settings_path_that_is_a_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "settings.toml"
    folder.mkdir()
    monkeypatch.setenv("MOSS_VOICE_SETTINGS", str(folder))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "-- settings: " in out and "is a folder, not a file" in out
    assert folder.is_dir() and not any(folder.iterdir())


def test_doctor_reports_a_settings_path_that_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    monkeypatch.setenv("MOSS_VOICE_SETTINGS", str(a_file / "settings.toml"))
    assert main(["doctor", "--json"]) == 0
    problem = json.loads(capsys.readouterr().out)["models"]["settings_write_problem"]
    assert problem and "is a file where a folder is needed" in problem


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="permissions do not stop root")
def test_a_read_only_settings_folder_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "config"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        problem = settings_write_problem(folder / "settings.toml")
    finally:
        folder.chmod(0o700)
    assert problem and "not writable" in problem


def test_a_writable_path_has_no_problem(tmp_path: Path) -> None:
    assert settings_write_problem(tmp_path / "settings.toml") is None
    assert settings_write_problem(tmp_path / "new" / "deeper" / "settings.toml") is None
    assert list(tmp_path.iterdir()) == []  # checking wrote nothing
