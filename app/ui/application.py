"""Start the Qt application and the main window."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from app import APP_ID, APP_NAME, __version__
from app.settings_store import load_settings
from app.ui.main_window import MainWindow, PortFactory, needs_first_run


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


def build_main_window(port_factory: PortFactory | None = None) -> MainWindow:
    """The window for the saved settings; starts the voice loop unless the first run is due."""
    loaded = load_settings()
    window = MainWindow(loaded.settings, port_factory=port_factory)
    if loaded.issues:
        window.show_warning(loaded.warning_text())
    if not needs_first_run(loaded.settings):
        window.start_conversation()
    return window


def run_gui(port_factory: PortFactory | None = None) -> int:
    """Run the app. ``port_factory(settings)`` builds the voice loop (app.events.ConversationPort).

    Wiring the real pipeline is one line in app/cli/default.py: ``run_gui(build_pipeline)``.
    Without a factory the window still opens (first-run screen, settings, model manager) and
    says that nothing is listening.
    """
    app = create_application()
    window = build_main_window(port_factory)
    window.show()
    return app.exec()
