"""``python -m app --screenshot PATH [--demo]``: open the window, optionally play the simulated
conversation, save a PNG of the window and exit (for docs, bug reports and CI)."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

from app.settings import Settings
from app.ui.main_window import MainWindow, PortFactory

SCRIPT_SPEED = 4.0  # the demo conversation plays 4× faster than real time
TIMEOUT_MS = 30_000


def demo_port_factory(_settings: Settings) -> object:
    """The conversation shown by ``--demo``. Swap in the real echo pipeline (fed from a WAV
    through the simulated audio backend) here once the voice loop is merged."""
    from app.ui.demo_port import DemoConversationPort

    return DemoConversationPort(speed=SCRIPT_SPEED)  # started once the window subscribed


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


def take_screenshot(path: Path, demo: bool, port_factory: PortFactory | None = None) -> int:
    """Show the window, play the demo when asked, save ``path``; returns an exit code."""
    if "QT_QPA_PLATFORM" not in os.environ:
        from app.display import display_status

        if not display_status().available:
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from app.settings_store import load_settings
    from app.ui.application import create_application

    app = create_application()
    settings = load_settings().settings
    factory = port_factory or (demo_port_factory if demo else None)
    window = MainWindow(settings, port_factory=factory, persist_settings=False)  # type: ignore[arg-type]
    window.resize(1180, 800)
    window.show()
    if demo:
        window.start_conversation()
        port = window.bridge.port
        start = getattr(port, "start", None)
        if callable(start):
            start()
        finished = getattr(port, "finished", None)
        if finished is not None and not wait_until(finished.is_set, TIMEOUT_MS):
            print("The demo conversation did not finish in time; saving what is shown.")
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
