"""A hostile settings file is reported and replaced by the defaults, in bounded time and memory
(issue 21 item 4: every header and file we parse, TOML included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from app.settings_store import MAX_SETTINGS_BYTES, load_settings


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("text", "reason"), [
    ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "is not valid TOML"),
    ("# " + "x" * MAX_SETTINGS_BYTES + "\n", "could not be read"),
])
def test_hostile_settings_are_one_issue_and_the_defaults(tmp_path: Path, text: str,
                                                         reason: str) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(text)
    loaded = load_settings(path)
    assert loaded.settings == Settings()
    assert [issue.key for issue in loaded.issues] == ["(file)"]
    assert reason in str(loaded.issues[0])
