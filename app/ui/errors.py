"""Engine status, ErrorReported, DeviceLost and AudioDevicesOpened events as banners with one
action each, worded for the situation they are about.

Categories the pipeline and engine report (ReplyFailed's categories plus the pipeline's own):
``out_of_memory``, ``engine``, ``input``, ``model_invalid``, ``audio`` (devices),
``engine_unavailable`` (the chosen engine could not be built; the echo demo answers),
``voice_prompt`` (no usable voice for spoken replies), ``slow_device`` (the model runs on the
CPU), ``remote`` (the MOSS-Speech server cannot be reached or failed a reply), ``server_busy``
(its queue is full; the reply is asked again), ``internal``. ``device_check`` answers the
settings panel's device checks and is shown there, not here. Unknown categories still get a
banner with the event's own ``action`` text.

Conditions (a missing folder, no microphone) are one banner each, shown while they hold and
removed when they are over; failures that happen again (a reply that failed) count up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QStatusBar

from app.engine.base import EngineInfo
from app.events import (
    ApplySettings,
    AudioDevicesOpened,
    DeviceLost,
    EngineStatusChanged,
    ErrorReported,
)
from app.settings import Settings
from app.ui.banners import BannerArea, Severity
from app.ui.bridge import UiBridge

if TYPE_CHECKING:
    from app.model_store import FolderKind

TITLES = {
    "out_of_memory": "The GPU ran out of memory",
    "engine": "The reply failed",
    "input": "That turn could not be used",
    "model_invalid": "The model folder cannot be used",
    "audio": "Audio device problem",
    "engine_unavailable": "The model could not be loaded",
    "voice_prompt": "The voice cannot be used",
    "slow_device": "Replies will be slow",
    "internal": "Something went wrong in the voice loop",
    "remote": "Problem with the MOSS-Speech server",
    "server_busy": "The MOSS-Speech server is busy",
}
NOT_SET_UP_TITLES = {"model_invalid": "MOSS-Speech is not set up yet",
                     "voice_prompt": "No voice is chosen yet"}
AUDIO_TITLES = {"error-audio-input": "No microphone", "error-audio-output": "No speaker"}
BUTTONS = {
    "out_of_memory": "Choose a smaller precision",
    "engine": "Reload the engine",
    "model_invalid": "Open the model manager",
    "audio": "Audio settings",
    "engine_unavailable": "Open the model manager",
    "voice_prompt": "Choose a voice",
    "remote": "Try again",
}
NOT_SET_UP_BUTTONS = {"model_invalid": "Set up the model"}
# Failures that happen (again): counted. Everything else is a condition: shown while it holds.
OCCURRENCES = frozenset({"out_of_memory", "engine", "input", "internal", "remote"})
# Conditions about the engine that a successful load of the wanted engine ends.
ENGINE_CONDITIONS = ("model_invalid", "engine_unavailable", "voice_prompt")
_TECHNICAL = re.compile(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b:?|"
                        r"\braised [A-Za-z_.]*(Error|Exception)\b")
_NOT_SET = ("folder is set", "no voice prompt is set")


class StatusWindow(Protocol):
    """What the presenter needs of the main window (not the window itself: no import
    circle)."""

    @property
    def banners(self) -> BannerArea: ...

    @property
    def bridge(self) -> UiBridge: ...

    @property
    def settings(self) -> Settings: ...

    def statusBar(self) -> QStatusBar: ...  # Qt's name

    def show_engine(self, info: EngineInfo | None) -> None: ...

    def open_settings(self, group: str | None = None) -> None: ...

    def open_model_manager(self) -> None: ...


def is_not_set_up(event: ErrorReported) -> bool:
    """A folder or voice that was never chosen (not one that is broken)."""
    message = event.message.lower()
    return any(marker in message for marker in _NOT_SET)


def human_message(message: str, category: str = "engine") -> tuple[str, str]:
    """(what a person reads, technical details): an exception's class name and text are
    details, not the message. A known kind of failure (out of memory) keeps its own words
    without the class name."""
    if not _TECHNICAL.search(message.strip()):
        return message, ""
    if category in ("engine", "internal"):
        return ("Something unexpected went wrong inside the engine. Details are in the log "
                "(Help → Open log folder).", message)
    return re.sub(r"^[A-Za-z_.]*(Error|Exception)\b:?\s*", "", message.strip()), message


def describe_error(event: ErrorReported) -> tuple[str, str]:
    """(banner text, button text); says when the conversation so far is kept."""
    not_set_up = is_not_set_up(event)
    title = (NOT_SET_UP_TITLES.get(event.category) if not_set_up else None) or AUDIO_TITLES.get(
        banner_key(event)) or TITLES.get(event.category,
                                         event.category.replace("_", " ").capitalize())
    message, _details = human_message(event.message, event.category)
    text = f"<b>{title}.</b> {message}"
    if event.action:
        text += f" <i>{event.action}</i>"
    if event.category in ("out_of_memory", "engine", "input", "remote"):
        text += " The conversation so far is kept."
    button = (NOT_SET_UP_BUTTONS.get(event.category) if not_set_up else None) or BUTTONS.get(
        event.category, "")
    return text, button


def banner_key(event: ErrorReported) -> str:
    """One banner per cause: per category, and per device for audio problems."""
    if event.category != "audio":
        return f"error-{event.category}"
    if event.message.startswith("No microphone"):
        return "error-audio-input"
    if event.message.startswith("No speaker"):
        return "error-audio-output"
    return "error-audio"


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

    def __init__(self, window: StatusWindow) -> None:
        self.window = window

    def on_engine_status(self, event: EngineStatusChanged) -> None:
        window = self.window
        window.show_engine(event.info)
        if event.loading:
            text = event.message or f"Loading {event.info.name}…"
            banner = window.banners.show_banner("engine-loading", "info", text)
            banner.set_progress(event.progress)
            return
        window.banners.remove("engine-loading")
        if event.message:
            window.statusBar().showMessage(event.message, 10_000)
        wanted = window.settings.engine.kind
        if not event.message and (not event.info.is_demo or wanted == "echo"):
            for category in ENGINE_CONDITIONS:  # the engine that was wanted is running now
                window.banners.remove(f"error-{category}")

    def on_device_lost(self, event: DeviceLost) -> None:
        severity, text = describe_device_lost(event)
        self.window.banners.show_banner(f"device-{event.direction}", severity, text,
                                        "Audio settings",
                                        lambda: self.window.open_settings("audio"))

    def on_devices_opened(self, event: AudioDevicesOpened) -> None:
        """A device that is open again ends the banners that said it was missing."""
        for direction, name in (("input", event.input_device), ("output", event.output_device)):
            if name is not None:
                self.window.banners.remove(f"error-audio-{direction}")
                banner = self.window.banners.banners.get(f"device-{direction}")
                if banner is not None and banner.severity == "error":
                    banner.dismiss()

    def on_error(self, event: ErrorReported) -> None:
        if event.category == "device_check":
            return  # the settings panel asked, and shows the answer where it asked
        text, button = describe_error(event)
        _message, details = human_message(event.message, event.category)
        self.window.banners.show_banner(banner_key(event), "error", text, button,
                                        self.action_for(event.category, is_not_set_up(event)),
                                        counted=event.category in OCCURRENCES,
                                        details=details)

    def action_for(self, category: str, not_set_up: bool = False) -> Callable[[], None] | None:
        return {
            "out_of_memory": lambda: self.window.open_settings("engine"),
            "engine": self.reload_engine,
            "model_invalid": self.window.open_model_manager,
            "engine_unavailable": self.window.open_model_manager,
            "voice_prompt": self.window.open_model_manager if not_set_up
            else lambda: self.window.open_settings("engine"),
            "audio": lambda: self.window.open_settings("audio"),
            "remote": self.reload_engine,  # reconnects: the server's /health is asked again
        }.get(category)

    def check_model_folders(self) -> None:
        """Verify the configured folders off the GUI thread; a bad one becomes a banner."""
        from app import model_store
        from app.ui.folder_words import folder_summary

        engine = self.window.settings.engine
        folders: dict[FolderKind, Path | None] = {"model": engine.model_dir,
                                                  "codec": engine.codec_dir}

        def work() -> list[str]:
            problems = []
            for kind, folder in folders.items():
                if folder is None:
                    problems.append(f"no {kind} folder is set")
                    continue
                check = model_store.verify(kind, folder)
                if not check.ok:
                    problems.append(f"{kind}: {folder_summary(kind, check)}")
            return problems

        def done(problems: list[str]) -> None:
            if problems:
                self.on_error(ErrorReported("model_invalid", "; ".join(problems) + ".",
                                            "Choose or download it again in the model manager."))

        self.window.bridge.run_in_background(work, done, lambda _exc: None, name="verify-model")

    def reload_engine(self) -> None:
        """Build the engine the settings name again (the menu's Reload engine, a banner's)."""
        window = self.window
        if not window.bridge.submit(ApplySettings(window.settings, reload_engine=True)):
            window.statusBar().showMessage("No voice loop is running, so there is no engine to "
                                           "reload.", 10_000)
