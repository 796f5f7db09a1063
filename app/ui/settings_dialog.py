"""The settings panel: every field of app.settings.Settings on a few pages, validated by
pydantic, with a one-line help under each field and Restore defaults per page.

Apply, OK and Cancel behave as the platform expects (QDialogButtonBox): Apply and OK apply the
edits at once, Cancel closes without applying what was not applied yet. Every change applies
live: one that changes what the engine is built from (folders, voice, device, precision) makes
the voice loop rebuild the engine on its worker while the conversation goes on, with progress
in the main window; the panel says so before the change is applied.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractButton,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.engine.preflight import (
    GpuQuery,
    dims_from_folder,
    flow_cache_bytes_for,
    query_gpu_memory,
)
from app.events import (
    AudioDevicesListed,
    ErrorReported,
    InputLevelMeasured,
    ListAudioDevices,
    ToneTestFinished,
)
from app.settings import Settings, changed_keys, rebuild_keys
from app.ui.acoustic_check import AcousticCheckPanel
from app.ui.bridge import UiBridge
from app.ui.controls import key_from_name
from app.ui.remote_setup import ApiKeyField
from app.ui.settings_form import (
    FieldEditor,
    SettingField,
    TextEditor,
    editor_for,
    settings_fields,
    unwrap_optional,
)
from app.ui.settings_pages import ERROR_STYLE, FieldRow, build_page, group_title, plan_pages
from app.ui.settings_text import KEPT_ON_RESTORE, page_of
from app.ui.settings_widgets import (
    DeviceEditor,
    PrecisionEditor,
    VoicePromptEditor,
    VoiceRecordDialog,
)

__all__ = ["SettingsDialog", "group_title"]
NOTE_STYLE = "color: #7a5200;"


class SettingsDialog(QDialog):
    """Emits ``applied(settings, reload_engine)``; the main window saves and sends them.

    ``engine_running()`` says whether the engine the settings name is the one answering (the
    window knows); while it is not, changes that can let its build succeed reload it."""

    applied = Signal(object, bool)

    def __init__(self, settings: Settings, bridge: UiBridge, parent: QWidget | None = None,
                 gpu_query: typing.Callable[[], GpuQuery] = query_gpu_memory,
                 engine_running: Callable[[], bool] = lambda: True) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.resize(840, 620)
        self.current = settings
        self.bridge = bridge
        self.engine_running = engine_running
        self.editors: dict[str, FieldEditor] = {}
        self.rows: dict[str, FieldRow] = {}
        self.error_labels: dict[str, QLabel] = {}
        self.errors: dict[str, str] = {}
        self.pages = QStackedWidget()
        self.group_list = QListWidget()
        self.group_list.setMaximumWidth(200)
        self.group_list.setSpacing(3)
        self.group_list.currentRowChanged.connect(self.pages.setCurrentIndex)
        fields_by_group = settings_fields()
        self.page_plan = plan_pages(list(fields_by_group))
        self.groups = [page.key for page in self.page_plan]  # page keys, in list order
        self.acoustic_check = AcousticCheckPanel(self.bridge)
        self.acoustic_check.apply_requested.connect(self._use_echo_mode)
        # The server's API key is no setting (it goes to the keyring): its own row under the
        # server address.
        self.api_key_field = ApiKeyField(self._remote_url, self.bridge)
        for page in self.page_plan:
            self.group_list.addItem(page.title)
            widget, rows = build_page(page, fields_by_group, self._editor_for,
                                      {"echo": self.acoustic_check},
                                      {"engine.remote_url": ("API key", self.api_key_field)})
            self.pages.addWidget(widget)
            for row in rows:
                self.rows[row.field.key] = row
                self.editors[row.field.key] = row.editor
                self.error_labels[row.field.key] = row.error
                row.editor.changed.connect(self.validate)
        self.editors["engine.remote_url"].changed.connect(self.api_key_field.address_changed)
        self.status = QLabel()
        self.status.setObjectName("settingsStatus")
        self.status.setWordWrap(True)
        self._build_buttons()
        body = QHBoxLayout()
        body.addWidget(self.group_list)
        body.addWidget(self.pages, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)
        self.load(settings)
        self.group_list.setCurrentRow(0)
        self._connect_port_events()
        bridge.run_in_background(gpu_query, self._on_gpu_query, lambda _exc: None,
                                 name="gpu-query")

    # ---- building ----------------------------------------------------------------------------

    def _remote_url(self) -> str:
        editor = self.editors.get("engine.remote_url")  # None while the pages are being built
        return str(editor.value() or "") if editor is not None else ""

    def _editor_for(self, field: SettingField) -> FieldEditor:
        if field.key == "engine.precision":
            options = list(typing.get_args(unwrap_optional(field.info.annotation)[0]))
            return PrecisionEditor(field, options)
        if field.key == "engine.voice_prompt":
            editor = VoicePromptEditor(field)
            editor.record_requested.connect(self.open_voice_recorder)
            return editor
        if field.key in ("audio.input_device", "audio.output_device"):
            return DeviceEditor(field, self.bridge)
        if field.key == "engine.system_prompt":
            return TextEditor(field, optional=False, multiline=True)
        return editor_for(field)

    def _build_buttons(self) -> None:
        """OK, Cancel, Apply and Restore page defaults, placed as the platform expects."""
        standard = QDialogButtonBox.StandardButton
        self.buttons = QDialogButtonBox(standard.Ok | standard.Cancel | standard.Apply
                                        | standard.RestoreDefaults)
        self.apply_button = self.buttons.button(standard.Apply)
        self.ok_button = self.buttons.button(standard.Ok)
        self.cancel_button = self.buttons.button(standard.Cancel)
        self.restore_button = self.buttons.button(standard.RestoreDefaults)
        self.restore_button.setText("Restore page defaults")
        self.restore_button.setToolTip("Set this page's settings back to their defaults (the "
                                       "model folders and the voice stay). Nothing changes "
                                       "until you press Apply or OK.")
        self.buttons.clicked.connect(self._on_button)

    def _on_button(self, button: QAbstractButton) -> None:
        role = self.buttons.buttonRole(button)
        if button is self.restore_button:
            self.restore_defaults()
        elif button is self.apply_button:
            self.apply()
        elif role == QDialogButtonBox.ButtonRole.AcceptRole:
            self._apply_and_close()
        elif role == QDialogButtonBox.ButtonRole.RejectRole:
            self.reject()

    def _connect_port_events(self) -> None:
        self._handlers: list[tuple[type, Any]] = [(AudioDevicesListed, self._on_devices),
                                                  (InputLevelMeasured, self._on_level),
                                                  (ToneTestFinished, self._on_tone),
                                                  (ErrorReported, self._on_check_problem)]
        for kind, handler in self._handlers:
            self.bridge.on(kind, handler)
        self.bridge.submit(ListAudioDevices())
        for editor in self._device_editors():
            editor.refresh_requested.connect(lambda: self.bridge.submit(ListAudioDevices()))
            editor.start_monitoring(True)

    def _device_editors(self) -> list[DeviceEditor]:
        return [e for e in self.editors.values() if isinstance(e, DeviceEditor)]

    # ---- values and validation ---------------------------------------------------------------

    def load(self, settings: Settings) -> None:
        """Show ``settings`` in every editor."""
        data = settings.model_dump()
        for key, editor in self.editors.items():
            group, name = key.split(".", 1)
            editor.blockSignals(True)
            editor.set_value(data[group][name])
            editor.blockSignals(False)
        self.validate()

    def sync_external(self, settings: Settings) -> None:
        """Settings changed outside the dialog (e.g. the always-listening switch): show the
        new values in every editor the person has not touched, so Apply cannot undo them."""
        old, new = self.current.model_dump(), settings.model_dump()
        for key, editor in self.editors.items():
            group, name = key.split(".", 1)
            if old[group][name] != new[group][name] and editor.value() == old[group][name]:
                editor.blockSignals(True)
                editor.set_value(new[group][name])
                editor.blockSignals(False)
        self.current = settings
        self.validate()

    def show_group(self, group: str) -> None:
        """Show the page of a settings group (``"vad"``) or a page (``"listening"``)."""
        page = page_of(group) or group
        if page in self.groups:
            self.group_list.setCurrentRow(self.groups.index(page))

    def current_page(self) -> str:
        return self.groups[self.group_list.currentRow()]

    def restore_defaults(self, page_key: str | None = None) -> None:
        """Put the defaults of one page (the shown one) into its editors; applied on Apply."""
        page = next(p for p in self.page_plan if p.key == (page_key or self.current_page()))
        defaults = Settings().model_dump()
        for key, editor in self.editors.items():
            group, name = key.split(".", 1)
            if group in page.groups and key not in KEPT_ON_RESTORE:
                editor.set_value(defaults[group][name])
        self.validate()

    def candidate(self) -> tuple[Settings | None, dict[str, str]]:
        """The edited settings validated by pydantic, or None with a message per field key."""
        data = self.current.model_dump()
        for key, editor in self.editors.items():
            group, name = key.split(".", 1)
            data[group][name] = editor.value()
        errors: dict[str, str] = {}
        settings = None
        try:
            settings = Settings.model_validate(data)
        except ValidationError as exc:
            for error in exc.errors():
                key = ".".join(str(p) for p in error["loc"][:2])
                errors.setdefault(key, error["msg"])
        errors.update(self._extra_problems())
        return (settings if not errors else None), errors

    def _extra_problems(self) -> dict[str, str]:
        """Checks pydantic cannot make: the voice file's content, the hold key."""
        problems: dict[str, str] = {}
        voice = self.editors.get("engine.voice_prompt")
        if isinstance(voice, VoicePromptEditor) and (problem := voice.problem()):
            problems["engine.voice_prompt"] = problem
        key_editor = self.editors.get("turn.hold_to_talk_key")
        if key_editor is not None:
            key_name = str(key_editor.value() or "")
            if key_name and key_from_name(key_name) is None:
                problems["turn.hold_to_talk_key"] = (f"'{key_name}' is not a key name (try "
                                                     "Space, F9 or Ctrl+Space).")
        return problems

    def validate(self) -> bool:
        settings, self.errors = self.candidate()
        for key, label in self.error_labels.items():
            label.setText(self.errors.get(key, ""))
            label.setVisible(key in self.errors)
        for index, page in enumerate(self.page_plan):
            bad = any(k.split(".")[0] in page.groups for k in self.errors)
            self.group_list.item(index).setText(page.title + ("  ⚠" if bad else ""))
        self.apply_button.setEnabled(settings is not None)
        self.ok_button.setEnabled(settings is not None)
        self._show_pending(settings)
        precision = self.editors.get("engine.precision")
        rows = self.editors.get("engine.context_max_rows")
        model_dir = self.editors.get("engine.model_dir")
        if isinstance(precision, PrecisionEditor) and rows is not None:
            folder = model_dir.value() if model_dir is not None else None
            flow_bytes = (flow_cache_bytes_for(settings) if settings is not None
                          else precision.flow_cache_bytes)
            precision.set_context(rows.value(), dims_from_folder(folder), flow_bytes)
        return settings is not None

    def _show_pending(self, settings: Settings | None) -> None:
        """Say what Apply will do: fix errors first, or that the engine will reload."""
        if settings is None:
            self.status.setText("Fix the marked settings to apply.")
            self.status.setStyleSheet(ERROR_STYLE)
            return
        reload_keys = self.reload_keys(settings)
        if reload_keys:
            names = ", ".join(self.editors[k].field.label for k in reload_keys
                              if k in self.editors) or "these settings"
            self.status.setText(f"Applying {names} reloads the engine: that takes a moment, "
                                "the conversation so far is kept, and the main window shows "
                                "the progress.")
            self.status.setStyleSheet(NOTE_STYLE)
        elif not self.status.text().startswith("Applied"):
            self.status.setText("")
            self.status.setStyleSheet("")

    def reload_keys(self, settings: Settings) -> list[str]:
        """The changed settings that will rebuild the engine when applied."""
        return rebuild_keys(self.current, settings, self.engine_running())

    # ---- applying ----------------------------------------------------------------------------

    def apply(self) -> bool:
        """Apply the edits now (live; a rebuild where needed). False when invalid."""
        settings, _errors = self.candidate()
        if settings is None:
            self.validate()
            return False
        reloads = bool(self.reload_keys(settings))
        changed = changed_keys(self.current, settings)
        self.current = settings
        self.applied.emit(settings, False)  # the voice loop decides about the rebuild itself
        self.status.setStyleSheet("")
        self.status.setText(("Applied; the engine is reloading (progress in the main window)."
                             if reloads else "Applied.") if changed else "Nothing changed.")
        return True

    def _apply_and_close(self) -> None:
        if self.apply():
            self.accept()

    def _use_echo_mode(self, mode: str) -> None:
        """The acoustic check's recommendation, applied at once."""
        self.editors["echo.mode"].set_value(mode)
        self.apply()

    def done(self, result: int) -> None:
        self.acoustic_check.detach()
        for editor in self._device_editors():
            editor.start_monitoring(False)
        for kind, handler in self._handlers:
            self.bridge.off(kind, handler)
        super().done(result)

    # ---- events from the voice loop and workers --------------------------------------------------

    def _on_gpu_query(self, gpu: GpuQuery) -> None:
        precision = self.editors.get("engine.precision")
        if isinstance(precision, PrecisionEditor):
            precision.set_gpu(gpu)

    def _on_devices(self, event: AudioDevicesListed) -> None:
        for editor in self._device_editors():
            editor.set_devices(event)

    def _on_level(self, event: InputLevelMeasured) -> None:
        for editor in self._device_editors():
            editor.show_level(event)

    def _on_check_problem(self, event: ErrorReported) -> None:
        if event.category == "device_check" and "listed" not in event.message:
            for editor in self._device_editors():
                editor.show_check_problem(event.message)

    def _on_tone(self, event: ToneTestFinished) -> None:
        for editor in self._device_editors():
            editor.show_tone_result(event)

    def open_voice_recorder(self) -> VoiceRecordDialog:
        dialog = VoiceRecordDialog(self.bridge, self)
        dialog.recorded.connect(self._use_recording)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def _use_recording(self, path: Path) -> None:
        editor = self.editors["engine.voice_prompt"]
        editor.set_value(path)

    def value_of(self, key: str) -> Any:
        return self.editors[key].value()
