"""The main window's dialogs: settings, the model manager and the remote server's set-up. Each
opens once and is raised when asked for again; what a person chooses in one (a set-up, a
server) the window takes up at once, without a restart.

A mixin of :class:`app.ui.main_window.MainWindow` (other modules and the menus call these on the
window); :class:`DialogHost` is what it needs of the window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from app.engine.preflight import GpuQuery
from app.settings import Settings
from app.ui.bridge import UiBridge


class DialogHost(Protocol):
    settings_dialog: QWidget | None
    model_manager: QWidget | None
    gpu_query: Callable[[], GpuQuery]  # run off the GUI thread by the dialogs that show VRAM

    @property
    def bridge(self) -> UiBridge: ...

    @property
    def settings(self) -> Settings: ...

    def window(self) -> QWidget: ...

    def engine_running(self) -> bool: ...

    def update_settings(self, settings: Settings, reload_engine: bool = False) -> None: ...

    def attach_voice_loop(self, announce_missing: bool = True) -> bool: ...

    def start_conversation(self) -> bool: ...

    def start_echo_demo(self) -> None: ...

    def use_setup(self, values: dict[str, object]) -> None: ...

    def use_remote_server(self, url: str) -> None: ...


class WindowDialogs:
    settings_dialog: QWidget | None  # open, or None (set by the window)
    model_manager: QWidget | None

    def open_settings(self: DialogHost, group: str | None = None) -> None:
        from app.ui.settings_dialog import SettingsDialog

        dialog = self.settings_dialog
        if not isinstance(dialog, SettingsDialog):
            dialog = SettingsDialog(self.settings, self.bridge, self.window(),
                                    gpu_query=self.gpu_query, engine_running=self.engine_running)
            dialog.applied.connect(self.update_settings)
            dialog.finished.connect(lambda _r: setattr(self, "settings_dialog", None))
            self.settings_dialog = dialog
        if group:
            dialog.show_group(group)
        dialog.show()
        dialog.raise_()

    def open_model_manager(self: DialogHost) -> None:
        from app.ui.model_manager import ModelManagerDialog

        dialog = self.model_manager
        if dialog is None:
            dialog = ModelManagerDialog(self.settings, self.bridge, parent=self.window(),
                                        gpu_query=self.gpu_query,
                                        start_voice_loop=lambda: self.attach_voice_loop(False))
            dialog.setup_chosen.connect(self.use_setup)
            dialog.demo_requested.connect(self.start_echo_demo)
            dialog.finished.connect(lambda _r: setattr(self, "model_manager", None))
            self.model_manager = dialog
        dialog.show()
        dialog.raise_()

    def use_setup(self: DialogHost, values: dict[str, object]) -> None:
        """The guided set-up is complete (model, codec, voice): use MOSS-Speech now; the voice
        loop builds it while the echo demo answers, no restart."""
        chosen = {k: v for k, v in values.items() if v not in (None, "")}
        chosen.update({"engine.kind": "moss_speech", "ui.first_run_done": True})
        self.update_settings(self.settings.with_values(chosen), reload_engine=True)
        self.start_conversation()

    def open_remote_setup(self: DialogHost) -> QWidget:
        """"Use a MOSS-Speech server…": address and key, then the remote engine."""
        from app.ui.remote_setup import RemoteSetupDialog

        dialog = RemoteSetupDialog(self.settings, self.bridge, parent=self.window())
        dialog.chosen.connect(self.use_remote_server)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def use_remote_server(self: DialogHost, url: str) -> None:
        values = {"engine.kind": "remote", "engine.remote_url": url, "ui.first_run_done": True}
        self.update_settings(self.settings.with_values(values), reload_engine=True)
        self.start_conversation()
