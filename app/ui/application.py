"""Start the Qt application and the main window."""

from __future__ import annotations

import logging
import sys

from PySide6.QtCore import QMessageLogContext, QtMsgType, qInstallMessageHandler
from PySide6.QtWidgets import QApplication

from app import APP_ID, APP_NAME, __version__
from app.settings_store import load_settings
from app.ui.main_window import MainWindow, PortFactory, needs_first_run

# Qt messages known to be harmless: the offscreen platform (tests, --screenshot) repeats this one
# for every window, and it says nothing a person can act on.
HARMLESS_QT_MESSAGES = ("This plugin does not support propagateSizeHints()",
                        "This plugin does not support raise()")
QT_LOG_LEVELS = {QtMsgType.QtDebugMsg: logging.DEBUG, QtMsgType.QtInfoMsg: logging.INFO,
                 QtMsgType.QtWarningMsg: logging.WARNING, QtMsgType.QtCriticalMsg: logging.ERROR,
                 QtMsgType.QtFatalMsg: logging.CRITICAL}
qt_log = logging.getLogger("qt")


def route_qt_message(kind: QtMsgType, context: QMessageLogContext | None, message: str) -> None:
    """Qt's own messages go to our log (not to stderr); known-harmless ones are dropped."""
    if any(harmless in message for harmless in HARMLESS_QT_MESSAGES):
        return
    category = getattr(context, "category", None)
    prefix = f"{category}: " if category and category != "default" else ""
    qt_log.log(QT_LOG_LEVELS.get(kind, logging.WARNING), "%s%s", prefix, message)


def create_application(argv: list[str] | None = None) -> QApplication:
    """The QApplication (reused if one exists, as in tests), with Qt's messages routed to
    logging."""
    qInstallMessageHandler(route_qt_message)
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

    ``python -m app`` passes app.cli.default.live_pipeline (the real devices). Without a
    factory the window still opens (first-run screen, settings, model manager) and
    says that nothing is listening.
    """
    app = create_application()
    window = build_main_window(port_factory)
    window.show()
    code = app.exec()
    if not window.release_port(timeout_s=5.0):
        logging.getLogger(__name__).warning("the voice loop did not stop within 5 s")
    return code
