from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.paths import settings_path
from app.settings import Settings
from app.settings_store import load_settings, save_settings, settings_to_toml


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_missing_file_gives_defaults_without_issues(tmp_path: Path) -> None:
    loaded = load_settings(tmp_path / "nope.toml")
    assert loaded.settings == Settings()
    assert loaded.issues == []
    assert not (tmp_path / "nope.toml").exists()


def test_round_trip_keeps_every_value(tmp_path: Path) -> None:
    settings = (Settings()
                .with_value("engine.kind", "moss_speech")
                .with_value("engine.model_dir", tmp_path / "model")
                .with_value("engine.precision", "int8")
                .with_value("engine.system_prompt", 'Say "hi"\nthen stop')
                .with_value("sampling.temperature", 0.0)
                .with_value("sampling.seed", 7)
                .with_value("vad.endpoint_silence_ms", 700)
                .with_value("turn.mode", "push_to_talk")
                .with_value("streaming.chunk_codes", 25)
                .with_value("audio.input_device", "USB Mic (WASAPI)"))
    path = save_settings(settings, tmp_path / "s.toml")
    loaded = load_settings(path)
    assert loaded.issues == []
    assert loaded.settings == settings


def test_default_location_and_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           isolated_home: Path) -> None:
    assert settings_path().is_relative_to(isolated_home)
    other = tmp_path / "elsewhere.toml"
    monkeypatch.setenv("MOSS_VOICE_SETTINGS", str(other))
    assert settings_path() == other
    save_settings(Settings().with_value("vad.threshold", 0.7))
    assert load_settings().settings.vad.threshold == 0.7
    assert other.exists()


def test_invalid_toml_falls_back_keeps_backup_and_rewrites(tmp_path: Path) -> None:
    original = "[vad\nthreshold = 0.7\n"
    path = write(tmp_path / "s.toml", original)
    loaded = load_settings(path)
    assert loaded.settings == Settings()
    assert len(loaded.issues) == 1 and "not valid TOML" in str(loaded.issues[0])
    assert loaded.backup_path is not None and loaded.backup_path.read_text() == original
    assert load_settings(path).issues == []  # rewritten clean: warned once


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage\x80", b""])
def test_binary_or_empty_file(tmp_path: Path, content: bytes) -> None:
    path = write(tmp_path / "s.toml", content)
    loaded = load_settings(path)
    assert loaded.settings == Settings()
    if content:
        assert "could not be read" in loaded.warning_text()
        assert loaded.backup_path is not None and loaded.backup_path.read_bytes() == content
    else:
        assert loaded.issues == []


def test_bad_values_fall_back_per_key_and_name_the_key(tmp_path: Path) -> None:
    path = write(tmp_path / "s.toml", """
[vad]
threshold = 2.5
endpoint_silence_ms = 800
[sampling]
top_k = "many"
temperature = 0.3
[engine]
precision = "int3"
model_dir = "/models/moss"
""")
    loaded = load_settings(path)
    s = loaded.settings
    assert s.vad.threshold == Settings().vad.threshold
    assert s.vad.endpoint_silence_ms == 800  # the good neighbours survive
    assert s.sampling.top_k == 20 and s.sampling.temperature == 0.3
    assert s.engine.precision == "bf16" and s.engine.model_dir == Path("/models/moss")
    keys = {issue.key for issue in loaded.issues}
    assert keys == {"vad.threshold", "sampling.top_k", "engine.precision"}
    text = loaded.warning_text()
    assert loaded.backup_path is not None
    assert "2.5" in text and "default 0.5" in text and str(loaded.backup_path) in text
    assert "threshold = 2.5" in loaded.backup_path.read_text()


def test_unknown_keys_and_sections_are_dropped_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path / "s.toml", """
colour = "blue"
[vad]
treshold = 0.6
[plugins]
x = 1
""")
    loaded = load_settings(path)
    assert loaded.settings == Settings()
    assert {i.key for i in loaded.issues} == {"colour", "vad.treshold", "plugins"}
    assert all("unknown" in i.reason for i in loaded.issues)


def test_section_that_is_not_a_table(tmp_path: Path) -> None:
    path = write(tmp_path / "s.toml", 'vad = 3\n[turn]\nmode = "push_to_talk"\n')
    loaded = load_settings(path)
    assert loaded.settings.turn.mode == "push_to_talk"
    assert loaded.settings.vad == Settings().vad
    assert [i.key for i in loaded.issues] == ["vad"]
    assert "table" in loaded.issues[0].reason


def test_settings_file_that_is_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.mkdir()
    loaded = load_settings(path)
    assert loaded.settings == Settings()
    assert "is a folder, not a settings file" in loaded.warning_text()
    assert path.is_dir() and loaded.backup_path is None


def test_toml_has_no_nulls_and_groups_every_setting() -> None:
    text = settings_to_toml(Settings())
    for group in ("engine", "streaming", "sampling", "vad", "turn", "echo", "audio",
                  "transcript", "ui"):
        assert f"[{group}]" in text
    assert "model_dir" not in text  # None values are left out


def test_with_value_validates() -> None:
    with pytest.raises(ValueError):
        Settings().with_value("vad.threshold", 3)
    with pytest.raises(ValueError, match="no such setting"):
        Settings().with_value("vad.nope", 1)
    with pytest.raises(ValueError, match="no such settings group"):
        Settings().with_value("nope.x", 1)


def test_settings_are_immutable() -> None:
    settings = Settings()
    with pytest.raises(ValidationError, match="frozen_instance") as group_error:
        settings.vad.threshold = 0.9  # type: ignore[misc]
    assert group_error.value.errors()[0]["loc"] == ("threshold",)
    with pytest.raises(ValidationError, match="frozen_instance"):
        settings.vad = settings.vad  # type: ignore[misc]
    assert settings.vad.threshold == Settings().vad.threshold
