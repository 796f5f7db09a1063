"""The model manager never says "verified" for a folder that would not load (issue 13 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from tests.fake_hub import tiny_codec_files
from tests.ui.test_model_manager import open_manager


def write_codec(folder: Path) -> Path:
    for name, data in tiny_codec_files().items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def changed_d_model(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "d_model": 96}))


@pytest.mark.parametrize(("damage", "named"), [
    (changed_d_model, "config.json and model.safetensors disagree"),
    (lambda f: (f / "flow" / "config.yaml").write_text("flow: [unclosed\n"),
     "flow/config.yaml: not readable YAML"),
    (lambda f: (f / "flow" / "campplus.onnx").write_bytes(bytes(range(256)) * 8),
     "flow/campplus.onnx: not a usable ONNX model"),
], ids=["d_model", "yaml", "onnx"])
def test_a_broken_codec_is_not_shown_as_verified(qtbot: QtBot, tmp_path: Path, damage,
                                                 named: str) -> None:
    codec = write_codec(tmp_path / "codec")
    damage(codec)
    dialog = open_manager(qtbot)
    dialog.rows["codec"].set_path(codec)
    dialog.verify("codec")
    qtbot.waitUntil(lambda: dialog.row_status("codec")[:1] in ("✓", "✗"), timeout=60_000)
    status = dialog.row_status("codec")
    assert status.startswith("✗ ") and named in status
    assert "every file and shape as expected" not in status
