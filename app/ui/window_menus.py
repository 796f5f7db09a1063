"""The main window's menus with their standard shortcuts, the help window (F1) and About."""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from importlib import metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import QUrl, qVersion
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QMainWindow,
    QMenu,
    QMessageBox,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app import APP_NAME, __version__
from app.paths import log_dir

LINKS = {
    "MOSS-Speech (code, Apache-2.0)": "https://github.com/OpenMOSS/MOSS-Speech",
    "The model on Hugging Face": "https://huggingface.co/OpenMOSS-Team/MOSS-Speech",
    "The codec on Hugging Face": "https://huggingface.co/OpenMOSS-Team/MOSS-Speech-Codec",
    "Technical report (arXiv:2510.00499)": "https://arxiv.org/abs/2510.00499",
}
SETTINGS_SHORTCUT = "Ctrl+,"
RELOAD_SHORTCUT = "Ctrl+R"


def package_version(name: str) -> str:
    """The installed version, read from package metadata (nothing is imported)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def about_html() -> str:
    versions = [(APP_NAME, __version__), ("Python", platform.python_version()),
                ("Qt", qVersion()), ("PySide6", pyside_version),
                ("PyTorch", package_version("torch")),
                ("huggingface_hub", package_version("huggingface_hub"))]
    rows = "".join(f"<tr><td>{name}</td><td>&nbsp;{version}</td></tr>"
                   for name, version in versions)
    links = "".join(f"<li><a href='{url}'>{text}</a></li>" for text, url in LINKS.items())
    return (
        f"<h3>{APP_NAME} {__version__}</h3>"
        "<p>Talk with MOSS-Speech, a speech-to-speech model, on your own PC: offline, streaming, "
        "and you can interrupt it by talking.</p>"
        f"<table>{rows}</table>"
        "<p><b>Licences.</b> MOSS Voice: Apache-2.0. MOSS-Speech's code (OpenMOSS): "
        "Apache-2.0; the example voices come from that repository. The model and codec "
        "weights on Hugging Face state no licence of their own: read their pages before "
        "using them commercially. Qt and PySide6: LGPL-3.0. PyTorch: BSD-3-Clause.</p>"
        f"<ul>{links}</ul>"
        f"<p style='color: gray'>Running on {platform.system()} {platform.machine()}, "
        f"{sys.implementation.name}.</p>")


HELP_HTML = """
<h3>Talking</h3>
<ul>
<li><b>Always listening</b> (the switch at the top): just talk; the reply starts when you
pause. Talk over a reply to interrupt it.</li>
<li><b>Push-to-talk</b>: hold <b>{key}</b> (or the Hold to talk button) while you speak.</li>
<li><b>Esc</b> stops a reply. <b>Mute microphone</b> stops listening.</li>
</ul>
<h3>Keys</h3>
<table>
<tr><td><b>{key}</b></td><td>&nbsp;hold to talk (push-to-talk); it never presses a button</td></tr>
<tr><td><b>Enter</b></td><td>&nbsp;presses the focused button</td></tr>
<tr><td><b>Esc</b></td><td>&nbsp;stop the reply</td></tr>
<tr><td><b>{settings}</b></td><td>&nbsp;settings</td></tr>
<tr><td><b>{reload}</b></td><td>&nbsp;reload the engine</td></tr>
<tr><td><b>Ctrl+E</b></td><td>&nbsp;export the conversation</td></tr>
<tr><td><b>F1</b></td><td>&nbsp;this help</td></tr>
<tr><td><b>Ctrl+Q</b></td><td>&nbsp;quit</td></tr>
</table>
<h3>Set-up</h3>
<p><b>Settings → Model manager</b> downloads or checks the model and its codec and
lets you record or choose the voice the replies speak in. Every setting applies at once; a
change to the model, voice, device or precision reloads the engine while the conversation goes
on. The echo demo (no AI) tries the microphone and speakers without a model.</p>
<h3>Something wrong?</h3>
<p>Banners at the top say what happened and offer one button to fix it. The log is in
<a href="{log}">{log_path}</a>.</p>
"""


class HelpDialog(QDialog):
    def __init__(self, hold_key: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"{APP_NAME} help")
        self.resize(560, 520)
        self.browser = QTextBrowser()
        self.browser.setOpenExternalLinks(True)
        folder = log_dir()
        self.browser.setHtml(HELP_HTML.format(key=hold_key, settings=SETTINGS_SHORTCUT,
                                              reload=RELOAD_SHORTCUT,
                                              log=QUrl.fromLocalFile(str(folder)).toString(),
                                              log_path=folder))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.browser)
        layout.addWidget(buttons)


def add_action(window: QMainWindow, menu: QMenu, text: str, slot: Callable[[], object],
               shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None) -> QAction:
    act = QAction(text, window)
    if shortcut is not None:
        act.setShortcut(QKeySequence(shortcut))
    act.triggered.connect(lambda _checked=False: slot())
    menu.addAction(act)
    return act


class MenuHost:
    """The slots the menus call (the main window provides them)."""

    def __init__(self, window: QMainWindow, *, export_conversation: Callable[[], object],
                 export_latency: Callable[[str], object], open_settings: Callable[[], object],
                 open_model_manager: Callable[[], object], reload_engine: Callable[[], object],
                 hold_key: Callable[[], str]) -> None:
        self.window = window
        bar = window.menuBar()
        self.file_menu = bar.addMenu("&File")
        self.settings_menu = bar.addMenu("&Settings")
        self.help_menu = bar.addMenu("&Help")
        self.actions: dict[str, QAction] = {}
        f, s, h = self.file_menu, self.settings_menu, self.help_menu
        self.actions["export"] = add_action(window, f, "Export conversation…",
                                            export_conversation, "Ctrl+E")
        add_action(window, f, "Export latency as CSV…", lambda: export_latency(".csv"))
        add_action(window, f, "Export latency as JSON…", lambda: export_latency(".json"))
        f.addSeparator()
        self.actions["quit"] = add_action(window, f, "Quit", window.close,
                                          QKeySequence.StandardKey.Quit)
        if self.actions["quit"].shortcut().isEmpty():  # no platform default: the usual one
            self.actions["quit"].setShortcut(QKeySequence("Ctrl+Q"))
        self.actions["settings"] = add_action(window, s, "Settings…", open_settings,
                                              SETTINGS_SHORTCUT)
        self.actions["model_manager"] = add_action(window, s, "Model manager (model and voice)…",
                                                   open_model_manager, "Ctrl+Shift+M")
        s.addSeparator()
        self.actions["reload"] = add_action(window, s, "Reload engine", reload_engine,
                                            RELOAD_SHORTCUT)
        self.actions["help"] = add_action(
            window, h, "Help", lambda: self.show_help(hold_key()),
            QKeySequence.StandardKey.HelpContents)
        if self.actions["help"].shortcut().isEmpty():
            self.actions["help"].setShortcut(QKeySequence("F1"))
        add_action(window, h, "Open log folder", lambda: QDesktopServices.openUrl(
            QUrl.fromLocalFile(str(log_dir()))))
        h.addSeparator()
        self.actions["about"] = add_action(window, h, f"About {APP_NAME}", self.show_about)
        self.help_dialog: HelpDialog | None = None

    def show_help(self, hold_key: str) -> HelpDialog:
        if self.help_dialog is None:
            self.help_dialog = HelpDialog(hold_key, self.window)
        self.help_dialog.show()
        self.help_dialog.raise_()
        return self.help_dialog

    def show_about(self) -> None:
        QMessageBox.about(self.window, f"About {APP_NAME}", about_html())
