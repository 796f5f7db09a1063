"""Model manager against a loopback fake of the Hub (HF_ENDPOINT points at 127.0.0.1)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app import model_store, paths, voices
from app.model_store import REPOS
from app.settings import Settings
from app.ui.bridge import UiBridge
from app.ui.model_manager import ModelManagerDialog
from app.ui.voice_step import VoiceStep
from tests.fake_hub import FakeHub, tiny_codec_files, tiny_model_files
from tests.ui.conftest import fake_gpu, no_gpu, save_after_layout, wav_bytes

VOICE_BYTES = wav_bytes(3.0)
TEST_VOICE = voices.ExampleVoice("en", "English example voice (test)", "assets/prompt_en.wav",
                                 len(VOICE_BYTES), hashlib.sha256(VOICE_BYTES).hexdigest())


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    voice_path = f"/{voices.REPOSITORY}/{voices.COMMIT}/{TEST_VOICE.repo_path}"
    with FakeHub({REPOS["model"].repo_id: tiny_model_files(),
                  REPOS["codec"].repo_id: tiny_codec_files()},
                 files={voice_path: VOICE_BYTES}) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv(voices.VOICES_URL_ENV, fake.url)
        yield fake


def open_manager(qtbot: QtBot, gpu=no_gpu, settings: Settings | None = None,
                 **kwargs: object) -> ModelManagerDialog:
    step = functools.partial(VoiceStep, catalogue=(TEST_VOICE,))
    dialog = ModelManagerDialog(settings or Settings(), UiBridge(), gpu_query=gpu,
                                voice_step=step, **kwargs)  # type: ignore[arg-type]
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    return dialog


def test_download_both_folders_then_use_them(qtbot: QtBot, hub: FakeHub,
                                             screenshot_dir: Path) -> None:
    dialog = open_manager(qtbot, gpu=fake_gpu(23.0))
    qtbot.waitUntil(lambda: "Checking" not in dialog.row_status("model"))
    assert dialog.row_status("model").startswith("✗")  # nothing there yet
    assert not dialog.use_button.isEnabled()
    qtbot.mouseClick(dialog.rows["model"].download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.download_kind is None, timeout=60_000)
    assert dialog.row_status("model").startswith("✓ Verified")
    assert dialog.progress.value() == 1000
    assert "of" in dialog.download_detail.text()
    qtbot.mouseClick(dialog.rows["codec"].download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.download_kind is None, timeout=60_000)
    assert dialog.row_status("codec").startswith("✓ Verified")
    assert not dialog.use_button.isEnabled()  # the voice is still missing, and it says so
    assert dialog.missing_label.text() == "Still needed: a voice."
    qtbot.mouseClick(dialog.voice_step.example_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.voice_step.ready, timeout=60_000)
    voice = dialog.voice_step.voice
    assert voice == paths.voices_dir() / TEST_VOICE.file_name and voice.read_bytes() == (
        VOICE_BYTES)
    assert "✓ Replies will speak in this voice" in dialog.voice_step.status.text()
    assert dialog.use_button.isEnabled() and dialog.missing_label.text() == "Everything is ready."
    assert dialog.precision_combo.currentText() == "bf16"  # 23 GiB free: bf16 fits
    assert dialog.rows["model"].path() == model_store.default_destination("model")
    assert "tiny test model" in dialog.preflight.tiny_note.text()  # not "5 GiB for bf16"
    save_after_layout(qtbot, dialog, screenshot_dir / "model_manager.png",
                      (dialog.rows["codec"].status, dialog.use_button))
    with qtbot.waitSignal(dialog.setup_chosen) as chosen:
        qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)
    assert chosen.args == [{"engine.model_dir": model_store.default_destination("model"),
                            "engine.codec_dir": model_store.default_destination("codec"),
                            "engine.precision": "bf16", "engine.voice_prompt": voice}]


def test_cancel_then_retry(qtbot: QtBot, hub: FakeHub) -> None:
    dialog = open_manager(qtbot)
    hub.gate.clear()  # hold the first file so Cancel lands mid-download
    qtbot.mouseClick(dialog.rows["codec"].download_button, Qt.MouseButton.LeftButton)
    assert not dialog.rows["model"].download_button.isEnabled()
    qtbot.waitUntil(hub.get_started.is_set, timeout=60_000)
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    hub.gate.set()
    qtbot.waitUntil(lambda: dialog.download_kind is None, timeout=60_000)
    assert "cancelled" in dialog.download_title.text()
    assert dialog.retry_button.isEnabled()
    qtbot.mouseClick(dialog.retry_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.download_kind is None, timeout=60_000)
    assert dialog.row_status("codec").startswith("✓ Verified")
    assert not dialog.retry_button.isEnabled()


def test_not_enough_disk_space_is_shown_with_retry(qtbot: QtBot, hub: FakeHub) -> None:
    tiny_disk = functools.partial(model_store.download, free_bytes=lambda _p: 1024)
    dialog = open_manager(qtbot, download=tiny_disk)
    qtbot.mouseClick(dialog.rows["model"].download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.download_kind is None, timeout=60_000)
    assert "Not enough disk space" in dialog.download_title.text()
    assert dialog.retry_button.isEnabled()
    assert hub.file_gets() == []


def test_chosen_folders_are_verified(qtbot: QtBot, tmp_path: Path) -> None:
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "config.json").write_text('{"hidden_size": 8}')
    codec = tmp_path / "codec"
    codec.mkdir()
    for name, data in tiny_codec_files().items():
        (codec / name).parent.mkdir(parents=True, exist_ok=True)
        (codec / name).write_bytes(data)
    dialog = open_manager(qtbot)
    for kind, path in (("model", broken), ("codec", codec)):
        dialog.rows[kind].set_path(path)
        dialog.verify(kind)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: "Checking" not in dialog.row_status("model") + dialog.row_status(
        "codec"))
    assert dialog.row_status("model").startswith("✗ This is not a MOSS-Speech model folder")
    assert "missing key 'intermediate_size'" in dialog.row_status("model")
    assert dialog.row_status("codec").startswith("✓ Verified")
    assert not dialog.use_button.isEnabled()
    assert dialog.missing_label.text() == "Still needed: the model, a voice."


def test_wrong_folders_are_said_in_words(qtbot: QtBot, tmp_path: Path) -> None:
    random_json = tmp_path / "downloads"
    random_json.mkdir()
    (random_json / "config.json").write_text('{"a": 1\n"b": 2}')  # the parser error
    empty = tmp_path / "empty"
    empty.mkdir()
    dialog = open_manager(qtbot)
    for kind, path in (("model", random_json), ("codec", empty)):
        dialog.rows[kind].set_path(path)
        dialog.verify(kind)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: "Checking" not in dialog.row_status("model") + dialog.row_status(
        "codec"))
    assert dialog.row_status("model") == ("✗ This is not a MOSS-Speech model folder: "
                                          "config.json is not valid JSON.")
    assert "Expecting ','" in dialog.rows["model"].status.toolTip()  # the details, on hover
    assert dialog.row_status("codec").startswith("✗ This folder is empty — is it the right one?")
    assert dialog.row_status("codec").count("\n") == 0  # one line, not four "missing" lines


def test_long_paths_are_elided_in_the_middle(qtbot: QtBot, tmp_path: Path) -> None:
    deep = tmp_path / ("a-very-long-folder-name-" * 6) / "MOSS-Speech"
    dialog = open_manager(qtbot, settings=Settings().with_value("engine.model_dir", deep))
    edit = dialog.rows["model"].path_edit
    qtbot.waitUntil(lambda: "…" in edit.text())
    shown = edit.text()
    assert shown.startswith(str(deep)[:4]) and shown.endswith("MOSS-Speech")  # both ends
    assert edit.toolTip() == str(deep) and dialog.rows["model"].path() == deep
    edit.setFocus()
    qtbot.waitUntil(edit.hasFocus)
    assert edit.text() == str(deep)  # editing shows the whole path


def test_vram_preflight_recommends_a_precision(qtbot: QtBot) -> None:
    dialog = open_manager(qtbot, gpu=fake_gpu(9.5, 12.0))  # a 12 GB card: int4 only
    qtbot.waitUntil(lambda: dialog.gpu is not None)
    verdicts = {dialog.vram_table.item(r, 0).text(): dialog.vram_table.item(r, 2).text()
                for r in range(dialog.vram_table.rowCount())}
    assert verdicts == {"bf16": "does not fit", "int8": "does not fit", "int4": "fits",
                        "fp32": "does not fit"}
    assert "int4 fits" in dialog.recommendation.text()
    assert dialog.precision_combo.currentText() == "int4"
    assert "9.5 GiB free of 12.0 GiB" in dialog.gpu_label.text()
    cpu_only = open_manager(qtbot, gpu=no_gpu)
    qtbot.waitUntil(lambda: cpu_only.gpu is not None)
    assert "No NVIDIA GPU found" in cpu_only.gpu_label.text()
    assert "try the echo demo" in cpu_only.recommendation.text()  # a recommendation, not none
    assert cpu_only.preflight.demo_button.isVisibleTo(cpu_only)
    with qtbot.waitSignal(cpu_only.demo_requested):
        qtbot.mouseClick(cpu_only.preflight.demo_button, Qt.MouseButton.LeftButton)
