"""The model manager's revision and SHA-256 box against the loopback fake Hub."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import snapshot_download
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app import folder_integrity, model_store
from app.model_store import REPOS
from app.settings import Settings
from app.ui.bridge import UiBridge
from app.ui.model_integrity import IntegrityBox
from app.ui.model_manager import ModelManagerDialog
from tests.fake_hub import OTHER_SHA, FakeHub, tiny_codec_files, tiny_model_files
from tests.test_download_integrity import flip_a_byte, other_model_files
from tests.ui.conftest import no_gpu, save_after_layout

MODEL, CODEC = REPOS["model"].repo_id, REPOS["codec"].repo_id


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub({MODEL: tiny_model_files(), CODEC: tiny_codec_files()}) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        yield fake


def open_manager(qtbot: QtBot, settings: Settings | None = None) -> ModelManagerDialog:
    dialog = ModelManagerDialog(settings or Settings(), UiBridge(), gpu_query=no_gpu)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    return dialog


def row_text(dialog: ModelManagerDialog, kind: str) -> str:
    """The row's line and its tooltip (the whole story)."""
    label = dialog.integrity.rows[kind].label  # type: ignore[index]
    return f"{label.text()}\n{label.toolTip()}"


def download(qtbot: QtBot, dialog: ModelManagerDialog, kind: str) -> None:
    qtbot.mouseClick(dialog.rows[kind].download_button, Qt.MouseButton.LeftButton)  # type: ignore[index]
    qtbot.waitUntil(lambda: dialog.download_kind is None, timeout=60_000)
    qtbot.waitUntil(lambda: "SHA-256 verified" in row_text(dialog, kind))


def test_a_damaged_file_is_found_and_fetched_again(qtbot: QtBot, hub: FakeHub,
                                                   screenshot_dir: Path) -> None:
    dialog = open_manager(qtbot)
    titles = [label.text() for label in dialog.findChildren(QLabel)]
    assert any(f"{CODEC} @ eeec733" in text for text in titles)  # the pinned revision shown
    download(qtbot, dialog, "codec")
    assert "Revision eeec733 (the one this app is validated with)" in row_text(dialog, "codec")
    assert "SHA-256 verified (9 files)" in dialog.integrity.rows["codec"].label.text()
    assert "SHA-256: 9 files verified" in row_text(dialog, "codec")
    flip_a_byte(model_store.default_destination("codec") / "flow" / "hift.pt", keep_mtime=True)
    row = dialog.integrity.rows["codec"]
    qtbot.mouseClick(row.verify_button, Qt.MouseButton.LeftButton)
    assert not dialog.rows["model"].download_button.isEnabled()  # busy while checking
    qtbot.waitUntil(lambda: dialog.integrity.checking is None and "does not match" in
                    row_text(dialog, "codec"))
    assert "SHA-256 of flow/hift.pt does not match revision eeec733" in row.label.text()
    assert "flow/hift.pt" in dialog.integrity.detail.text()
    assert row.fetch_button.isVisible() and row.fetch_button.text() == "Fetch again"
    assert dialog.rows["model"].download_button.isEnabled()
    save_after_layout(qtbot, dialog, screenshot_dir / "model_manager_hash_mismatch.png",
                      (row.fetch_button, dialog.integrity.detail))
    before = len(hub.file_gets())
    qtbot.mouseClick(row.fetch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.download_kind is None and "SHA-256 verified" in
                    row_text(dialog, "codec"), timeout=60_000)
    assert hub.fetched_names()[before:] == ["flow/hift.pt"]
    assert not row.fetch_button.isVisible()


def test_a_folder_of_another_revision_offers_both_ways(qtbot: QtBot, hub: FakeHub,
                                                       tmp_path: Path,
                                                       screenshot_dir: Path) -> None:
    hub.add_revision(MODEL, OTHER_SHA, other_model_files(), main=True)
    old = tmp_path / "old-model"
    snapshot_download(MODEL, local_dir=old, endpoint=hub.url, token=False)
    dialog = open_manager(qtbot, Settings().with_value("engine.model_dir", old))
    row = dialog.integrity.rows["model"]
    qtbot.waitUntil(lambda: "made for revision" in row_text(dialog, "model"))
    assert f"made for revision {OTHER_SHA[:7]}" in row_text(dialog, "model")
    assert "validated with cff025b" in row_text(dialog, "model")
    assert f"made for revision {OTHER_SHA[:7]}, this app is validated with cff025b" in \
        row.label.text()
    assert row.accept_button.isVisible()
    assert row.fetch_button.text() == "Re-download"
    save_after_layout(qtbot, dialog, screenshot_dir / "model_manager_other_revision.png",
                      (row.accept_button,))
    qtbot.mouseClick(row.accept_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "chose to use it anyway" in row_text(dialog, "model"))
    assert not row.accept_button.isVisible()
    qtbot.mouseClick(row.fetch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.download_kind is None and "the one this app is validated "
                    "with" in row_text(dialog, "model"), timeout=60_000)
    assert (old / "model.safetensors").read_bytes() == tiny_model_files()["model.safetensors"]


def test_a_check_can_be_cancelled(qtbot: QtBot, hub: FakeHub, tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()

    def slow_check(*args: object, **kwargs: object):
        started.set()
        release.wait(30)  # until the test has pressed Cancel; then the real check sees it
        return folder_integrity.verify_hashes(*args, **kwargs)  # type: ignore[arg-type]

    folder = tmp_path / "codec"
    assert model_store.download("codec", folder, lambda p: None, threading.Event()).ok
    bridge = UiBridge()
    box = IntegrityBox(bridge, lambda: False, verify_hashes=slow_check)
    qtbot.addWidget(box)
    box.show()
    busy = []
    box.busy.connect(busy.append)
    box.refresh("codec", folder)
    qtbot.waitUntil(lambda: "SHA-256 verified" in box.rows["codec"].label.text())
    qtbot.mouseClick(box.rows["codec"].verify_button, Qt.MouseButton.LeftButton)
    assert started.wait(30)
    assert box.cancel_button.isVisible() and not box.rows["codec"].verify_button.isEnabled()
    qtbot.mouseClick(box.cancel_button, Qt.MouseButton.LeftButton)
    release.set()
    qtbot.waitUntil(lambda: box.checking is None)
    assert "check cancelled" in box.detail.text()
    assert not box.cancel_button.isVisible() and box.rows["codec"].verify_button.isEnabled()
    assert busy == [True, False]
