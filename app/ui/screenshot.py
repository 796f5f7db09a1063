"""``python -m app --screenshot PATH [--state S | --demo]``: open the window in a state, save a
PNG of it once it is laid out, and exit (for docs, bug reports and CI).

States (app.ui.screenshot_states): first-run, demo, settings[:PAGE], model-manager, errors,
no-audio. ``--demo`` (= ``--state demo``) runs the real pipeline with the echo engine on
simulated devices, fed from the bundled sample (app.conversation.demo): everything the window
shows is measured. Without a state the window opens as the saved settings make it.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer
from PySide6.QtWidgets import QApplication, QWidget

from app.settings import Settings
from app.ui.main_window import MainWindow, PortFactory
from app.ui.screenshot_states import DEMO_SPEED, demo_port_factory, show_state

__all__ = ["DEMO_SPEED", "demo_port_factory", "take_screenshot", "wait_until"]

TIMEOUT_MS = 60_000


def wait_until(condition: object, timeout_ms: int) -> bool:
    """Run the event loop until ``condition()`` holds (the GUI keeps painting meanwhile)."""
    loop = QEventLoop()
    timer = QTimer()
    timer.setInterval(20)
    clock = QElapsedTimer()
    clock.start()

    def check() -> None:
        if condition() or clock.elapsed() > timeout_ms:  # type: ignore[operator]
            loop.quit()

    timer.timeout.connect(check)
    timer.start()
    loop.exec()
    timer.stop()
    return bool(condition())  # type: ignore[operator]


def report_demo(port: object) -> None:
    """One line on what the demo measured (or why it did not finish)."""
    error, result = getattr(port, "error", None), getattr(port, "result", None)
    if error is not None:
        print(f"The demo conversation failed: {error}; saving what is shown.")
    elif result is not None:
        summary = result.summary()

        def ms(key: str) -> str:
            value = summary[key]
            return "n/a" if value is None else f"{value:.0f} ms"

        print(f"Demo conversation (measured): {summary['turns']} turns, response latency "
              f"{ms('response_latency_ms_median')} median, barge-in stop "
              f"{ms('barge_in_stop_ms_median')} median.")


def laid_out(widget: QWidget) -> bool:
    """Every visible child has its geometry (posted layout requests have run)."""
    QApplication.sendPostedEvents()
    children = [w for w in widget.findChildren(QWidget) if w.isVisible()]
    return widget.isVisible() and all(not w.geometry().isEmpty() for w in children
                                      if w.sizeHint().isValid() and w.sizeHint().width() > 0)


def take_screenshot(path: Path, demo: bool = False, port_factory: PortFactory | None = None,
                    state: str | None = None) -> int:
    """Show the window (in ``state``), save ``path`` after layout; returns an exit code."""
    if "QT_QPA_PLATFORM" not in os.environ:
        from app.display import display_status

        if not display_status().available:
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from app.settings_store import load_settings
    from app.ui.application import create_application

    app = create_application()
    settings = load_settings(repair=False).settings  # a picture never rewrites the file
    state = state or ("demo" if demo else None)
    if state is None or port_factory is not None:
        return _save_plain(path, settings, state == "demo", port_factory, app)
    try:
        shown = show_state(state, settings)
    except ValueError as exc:
        print(f"--state: {exc}")
        return 2
    if not wait_until(shown.ready, TIMEOUT_MS):
        print(f"The {state} state did not finish setting up in time; saving what is shown.")
    if state == "demo":
        report_demo(shown.window.bridge.port)
    wait_until(lambda: laid_out(shown.widget), 5_000)
    wait_until(lambda: False, 150)  # one more frame
    shown.window.refresh_waveforms()
    saved = _save(shown.widget, path)
    for clean_up in shown.after:
        clean_up()
    shown.window.close()
    app.processEvents()
    return saved


def _save(widget: QWidget, path: Path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not widget.grab().save(str(path)):
        print(f"Could not write {path}.")
        return 1
    print(f"Saved {path}")
    return 0


def _save_plain(path: Path, settings: Settings, demo: bool, port_factory: PortFactory | None,
                app: QApplication) -> int:
    """The window as the saved settings make it (or the demo with a given port factory)."""
    if demo:  # a known set-up, whatever was saved: the picture is reproducible
        from app.conversation.demo import demo_settings

        settings = demo_settings(Settings().with_value("ui.first_run_done", True))
    factory = port_factory or (demo_port_factory if demo else None)
    window = MainWindow(settings, port_factory=factory, persist_settings=False)  # type: ignore[arg-type]
    window.resize(1180, 800)
    window.show()
    if demo:
        window.start_conversation()
        port = window.bridge.port
        finished = getattr(port, "finished", None)
        if finished is not None and not wait_until(finished.is_set, TIMEOUT_MS):
            print("The demo conversation did not finish in time; saving what is shown.")
        report_demo(port)
    wait_until(lambda: laid_out(window), 5_000)
    wait_until(lambda: False, 150)  # let queued events and one more frame land
    window.refresh_waveforms()
    saved = _save(window, path)
    window.close()
    app.processEvents()
    return saved
