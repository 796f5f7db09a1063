"""``--screenshot PNG --state S``: every state is made, laid out, and shows what it should."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QImage, QTextDocument
from PySide6.QtWidgets import QAbstractButton, QGroupBox, QLabel, QLineEdit, QWidget
from pytestqt.qtbot import QtBot

from app.settings import Settings
from app.ui.screenshot import laid_out
from app.ui.screenshot_states import STATES, show_state
from tests.ui.conftest import no_gpu


def visible_texts(top: QWidget) -> str:
    """The text of every widget a person can see in ``top`` (not hidden, not scrolled away)."""
    texts = []
    for widget in top.findChildren(QWidget):
        if not widget.isVisible() or widget.visibleRegion().isEmpty():
            continue
        if isinstance(widget, QLabel):
            document = QTextDocument()
            document.setHtml(widget.text())
            texts.append(document.toPlainText())
        elif isinstance(widget, QAbstractButton):
            texts.append(widget.text())
        elif isinstance(widget, QGroupBox):
            texts.append(widget.title())
        elif isinstance(widget, QLineEdit):
            texts.append(widget.text())
    return "\n".join(texts)


@pytest.mark.parametrize("state", STATES)
def test_every_state_shows_what_it_should(qtbot: QtBot, state: str,
                                          screenshot_dir: Path) -> None:
    shown = show_state(state, Settings(), gpu_query=no_gpu)
    try:
        qtbot.waitUntil(shown.ready, timeout=60_000)
        qtbot.waitUntil(lambda: laid_out(shown.widget))
        texts = visible_texts(shown.widget)
        missing = [text for text in shown.expected if text not in texts]
        assert not missing, f"{state}: not visible: {missing}\n---\n{texts}"
        name = state.replace(":", "_")
        assert shown.widget.grab().save(str(screenshot_dir / f"state_{name}.png"))
    finally:
        for clean_up in shown.after:
            clean_up()
        shown.window.close()


def test_the_cli_saves_a_state_and_refuses_unknown_ones(tmp_path: Path) -> None:
    env = {**os.environ, "MOSS_VOICE_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True,
                              text=True, env=env, timeout=120, check=False)

    shot = tmp_path / "errors.png"
    done = run("--screenshot", str(shot), "--state", "errors")
    assert done.returncode == 0, done.stderr
    assert QImage(str(shot)).height() >= 800
    assert "does not support" not in done.stderr  # offscreen's harmless notes stay out
    assert run("--screenshot", str(shot), "--state", "nonsense").returncode == 2
    assert run("--state", "errors").returncode == 2  # a state goes with --screenshot
