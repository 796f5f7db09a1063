"""Start the Qt application and the main window."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from app import APP_ID, APP_NAME, __version__
from app.settings_store import load_settings
from app.ui.main_window import MainWindow


def create_application(argv: list[str] | None = None) -> QApplication:
    """The QApplication (reused if one exists, as in tests)."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(argv if argv is not None else sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName(APP_NAME)
    app.setApplicationVersion(__version__)
    app.setOrganizationName(APP_ID)
    app.setDesktopFileName(APP_ID)
    return app


def run_gui() -> int:
    app = create_application()
    loaded = load_settings()
    window = MainWindow(loaded.settings)
    if loaded.issues:
        window.show_warning(loaded.warning_text())
    window.show()
    return app.exec()
