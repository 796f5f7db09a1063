"""The main window's voice loop, from start to release: build it with the window's
``port_factory``, attach it to the bridge, start it off the GUI thread, show its waveforms, ask
it to shut down when the window closes and wait for its release after the event loop ended.

A port with a ``start()`` method (the pipeline) runs nothing until started; it is started on a
background thread because starting may load the VAD model and open devices.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from app.events import ConversationPort, Shutdown
from app.settings import Settings
from app.ui.banners import BannerArea
from app.ui.bridge import UiBridge
from app.ui.waveform import WaveformWidget

log = logging.getLogger(__name__)


class VoiceLoopWindow(Protocol):
    """What the host needs of the main window (not the window itself: no import circle)."""

    @property
    def bridge(self) -> UiBridge: ...

    @property
    def banners(self) -> BannerArea: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def port_factory(self) -> Callable[[Settings], ConversationPort] | None: ...

    @property
    def mic_wave(self) -> WaveformWidget: ...

    @property
    def reply_wave(self) -> WaveformWidget: ...

    def open_settings(self, group: str | None = None) -> None: ...

    def set_loop_status(self, status: str) -> None: ...


class VoiceLoopHost:
    """Owns the window's voice loop; the window only asks for it (start, close, release)."""

    def __init__(self, window: VoiceLoopWindow) -> None:
        self.window = window
        window.bridge.port_attached.connect(self.on_port_attached)

    def attach(self, announce_missing: bool = True) -> bool:
        """Build, attach and start the voice loop unless one is attached; False if none runs.

        The one place that starts it, so the first-run acoustic check and the conversation
        both get a running loop (a port attached but never started hears nothing)."""
        window = self.window
        if window.bridge.port is not None:
            return True
        if window.port_factory is None:
            if announce_missing:
                window.banners.show_banner(
                    "no-pipeline", "warning", "No voice loop is connected in this build, so "
                    "nothing is listening yet. Start the app with `python -m app` from a full "
                    "install.")
            return False
        try:
            port = window.port_factory(window.settings)
            window.bridge.attach(port)
        except Exception as exc:
            self.failed(exc)
            return False
        window.set_loop_status("starting")
        start = getattr(port, "start", None)
        if callable(start):
            window.bridge.run_in_background(start, lambda _none: None, self.failed,
                                            name="voice-loop-start")
        return True

    def failed(self, exc: BaseException) -> None:
        log.error("starting the voice loop failed", exc_info=exc)
        self.window.set_loop_status("none")
        self.window.banners.show_banner(
            "pipeline-start", "error", f"The voice loop could not start: {exc}",
            "Audio settings", lambda: self.window.open_settings("audio"))

    def on_port_attached(self) -> None:
        port = self.window.bridge.port
        assert port is not None
        self.window.mic_wave.set_source(port.mic_waveform)
        self.window.reply_wave.set_source(port.reply_waveform)

    def shutdown(self) -> None:
        """Ask the pipeline to stop; its threads end on their own, the GUI never waits on them."""
        self.window.bridge.submit(Shutdown())

    def release(self, timeout_s: float = 5.0) -> bool:
        """After the event loop has ended: wait until the voice loop has released devices and
        the engine, so the process never exits with an audio stream half closed."""
        port = self.window.bridge.port
        return port is None or port.close(timeout_s)
