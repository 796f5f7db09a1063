"""``python -m app --screenshot PATH [--demo]``: open the window, optionally play the demo
conversation, save a PNG of the window and exit (for docs, bug reports and CI).

``--demo`` runs the real pipeline with the echo engine on simulated devices, fed from the
bundled sample (app.conversation.demo): everything the window shows is measured.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

from app.settings import Settings
from app.ui.main_window import MainWindow, PortFactory

DEMO_SPEED = 4.0  # the demo conversation plays 4× faster than real time
TIMEOUT_MS = 60_000


def demo_port_factory(settings: Settings) -> object:
    """The bundled conversation through the real pipeline (echo engine, simulated devices)."""
    from app.conversation.demo import demo_conversation

    return demo_conversation(settings, speed=DEMO_SPEED)  # started once the window subscribed


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


def take_screenshot(path: Path, demo: bool, port_factory: PortFactory | None = None) -> int:
    """Show the window, play the demo when asked, save ``path``; returns an exit code."""
    if "QT_QPA_PLATFORM" not in os.environ:
        from app.display import display_status

        if not display_status().available:
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from app.settings_store import load_settings
    from app.ui.application import create_application

    app = create_application()
    settings = load_settings(repair=False).settings  # a picture never rewrites the file
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
    wait_until(lambda: False, 150)  # let queued events and one more frame land
    window.refresh_waveforms()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = window.grab().save(str(path))
    window.close()
    app.processEvents()
    if not saved:
        print(f"Could not write {path}.")
        return 1
    print(f"Saved {path}")
    return 0
