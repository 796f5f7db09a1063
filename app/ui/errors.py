"""Engine status, ErrorReported and DeviceLost events as banners with one action each.

Categories the pipeline and engine report (ReplyFailed's categories plus the pipeline's own):
``out_of_memory``, ``engine``, ``input``, ``model_invalid``, ``audio`` (devices),
``engine_unavailable`` (the chosen engine could not be built; the echo demo answers),
``voice_prompt`` (no usable voice for spoken replies), ``slow_device`` (the model runs on the
CPU), ``remote`` (the MOSS-Speech server cannot be reached or failed a reply), ``server_busy``
(its queue is full; the reply is asked again). Unknown
categories still get a banner with the event's own ``action`` text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.events import ApplySettings, DeviceLost, EngineStatusChanged, ErrorReported
from app.ui.banners import Severity

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

TITLES = {
    "out_of_memory": "The GPU ran out of memory",
    "engine": "The engine failed",
    "input": "That turn could not be used",
    "model_invalid": "The model folder cannot be used",
    "audio": "Audio device problem",
    "engine_unavailable": "The model could not be loaded",
    "voice_prompt": "The voice prompt cannot be used",
    "slow_device": "Replies will be slow",
    "remote": "Problem with the MOSS-Speech server",
    "server_busy": "The MOSS-Speech server is busy",
}
BUTTONS = {
    "out_of_memory": "Choose a smaller precision",
    "engine": "Reload the engine",
    "model_invalid": "Open the model manager",
    "audio": "Audio settings",
    "engine_unavailable": "Open the model manager",
    "voice_prompt": "Engine settings",
    "remote": "Try again",
}


def describe_error(event: ErrorReported) -> tuple[str, str]:
    """(banner text, button text); the conversation so far is always kept."""
    title = TITLES.get(event.category, event.category.replace("_", " ").capitalize())
    text = f"<b>{title}.</b> {event.message}"
    if event.action:
        text += f" <i>{event.action}</i>"
    if event.category in ("out_of_memory", "engine", "input", "remote"):
        text += " The conversation so far is kept."
    return text, BUTTONS.get(event.category, "")


def describe_device_lost(event: DeviceLost) -> tuple[Severity, str]:
    what = "Microphone" if event.direction == "input" else "Speaker"
    if event.fallback_name:
        return "warning", (f"<b>{what} '{event.device_name}' was disconnected.</b> Now using "
                           f"'{event.fallback_name}'.")
    return "error", (f"<b>{what} '{event.device_name}' was disconnected</b> and no other "
                     f"{what.lower()} is available. Plug one in or choose another in the audio "
                     "settings.")


class StatusPresenter:
    """Shows engine loading progress and errors on the main window; nothing here is modal."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window

    def on_engine_status(self, event: EngineStatusChanged) -> None:
        window = self.window
        window.show_engine(event.info)
        if event.loading:
            text = event.message or f"Loading {event.info.name}…"
            banner = window.banners.show_banner("engine-loading", "info", text)
            banner.set_progress(event.progress)
        else:
            window.banners.remove("engine-loading")
            if event.message:
                window.statusBar().showMessage(event.message, 10_000)

    def on_device_lost(self, event: DeviceLost) -> None:
        severity, text = describe_device_lost(event)
        self.window.banners.show_banner(f"device-{event.direction}", severity, text,
                                        "Audio settings",
                                        lambda: self.window.open_settings("audio"))

    def on_error(self, event: ErrorReported) -> None:
        text, button = describe_error(event)
        self.window.banners.show_banner(f"error-{event.category}", "error", text, button,
                                        self.action_for(event.category))

    def action_for(self, category: str) -> Callable[[], None] | None:
        return {
            "out_of_memory": lambda: self.window.open_settings("engine"),
            "engine": self.reload_engine,
            "model_invalid": self.window.open_model_manager,
            "engine_unavailable": self.window.open_model_manager,
            "voice_prompt": lambda: self.window.open_settings("engine"),
            "audio": lambda: self.window.open_settings("audio"),
            "remote": self.reload_engine,  # reconnects: the server's /health is asked again
        }.get(category)

    def check_model_folders(self) -> None:
        """Verify the configured folders off the GUI thread; a bad one becomes a banner."""
        from app import model_store

        engine = self.window.settings.engine
        folders = {"model": engine.model_dir, "codec": engine.codec_dir}

        def work() -> list[str]:
            problems = []
            for kind, folder in folders.items():
                if folder is None:
                    problems.append(f"no {kind} folder is set")
                    continue
                check = model_store.verify(kind, folder)  # type: ignore[arg-type]
                problems += [f"{kind}: {p}" for p in check.problems[:2]]
            return problems

        def done(problems: list[str]) -> None:
            if problems:
                self.on_error(ErrorReported("model_invalid", "; ".join(problems) + ".",
                                            "Choose or download it again in the model manager."))

        self.window.bridge.run_in_background(work, done, lambda _exc: None, name="verify-model")

    def reload_engine(self) -> None:
        self.window.bridge.submit(ApplySettings(self.window.settings, reload_engine=True))
