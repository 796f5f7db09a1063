"""The settings panel: every field of app.settings.Settings, grouped, validated by pydantic.

Changes apply live when possible. Changing what the engine is built from (kind, folders,
device, precision, chunk checkpoint) needs an engine reload: the panel asks first, in a bar
inside the dialog (never a nested modal loop), and the main window shows the reload progress.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QScrollArea,
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
from app.events import AudioDevicesListed, InputLevelMeasured, ListAudioDevices, ToneTestFinished
from app.settings import ENGINE_BUILD_KEYS, Settings, changed_keys
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
from app.ui.settings_widgets import (
    DeviceEditor,
    PrecisionEditor,
    VoicePromptEditor,
    VoiceRecordDialog,
)

GROUP_TITLES = {"engine": "Engine", "streaming": "Streaming", "sampling": "Sampling",
                "vad": "Voice detection", "turn": "Turn-taking", "echo": "Echo handling",
                "audio": "Audio devices", "transcript": "Transcript & recordings",
                "ui": "Interface"}
ERROR_STYLE = "color: #c0392b;"


def group_title(group: str) -> str:
    return GROUP_TITLES.get(group, group.replace("_", " ").capitalize())


class SettingsDialog(QDialog):
    """Emits ``applied(settings, reload_engine)``; the main window saves and sends them."""

    applied = Signal(object, bool)

    def __init__(self, settings: Settings, bridge: UiBridge, parent: QWidget | None = None,
                 gpu_query: typing.Callable[[], GpuQuery] = query_gpu_memory) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.resize(820, 600)
        self.current = settings
        self.bridge = bridge
        self.editors: dict[str, FieldEditor] = {}
        self.error_labels: dict[str, QLabel] = {}
        self.errors: dict[str, str] = {}
        self.pages = QStackedWidget()
        self.group_list = QListWidget()
        self.group_list.setMaximumWidth(190)
        self.group_list.setSpacing(3)
        self.group_list.currentRowChanged.connect(self.pages.setCurrentIndex)
        fields_by_group = settings_fields()
        self.groups = list(fields_by_group)
        for group, fields in fields_by_group.items():
            self.group_list.addItem(group_title(group))
            self.pages.addWidget(self._build_page(group, fields))
        self._build_reload_bar()
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.apply_button = QPushButton("Apply")
        self.apply_button.clicked.connect(self.apply)
        ok = QPushButton("OK")
        ok.clicked.connect(self._apply_and_close)
        cancel = QPushButton("Close")
        cancel.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addWidget(self.status, 1)
        for button in (self.apply_button, ok, cancel):
            buttons.addWidget(button)
        body = QHBoxLayout()
        body.addWidget(self.group_list)
        body.addWidget(self.pages, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addWidget(self.reload_bar)
        layout.addLayout(buttons)
        self.load(settings)
        self.group_list.setCurrentRow(0)
        self._connect_port_events()
        bridge.run_in_background(gpu_query, self._on_gpu_query, lambda _exc: None,
                                 name="gpu-query")

    # ---- building ----------------------------------------------------------------------------

    def _build_page(self, group: str, fields: list[SettingField]) -> QWidget:
        page = QWidget()
        outer = QVBoxLayout(page)
        title = QLabel(group_title(group))
        title.setStyleSheet("font-size: 15px; font-weight: 600;")
        outer.addWidget(title)
        form = QFormLayout()
        outer.addLayout(form)
        outer.addStretch(1)  # rows keep their natural height; space collects at the bottom
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        for field in fields:
            editor = self._editor_for(field)
            self.editors[field.key] = editor
            editor.changed.connect(self.validate)
            label = QLabel(field.label)
            label.setToolTip(field.tooltip)
            error = QLabel()
            error.setStyleSheet(ERROR_STYLE)
            error.setWordWrap(True)
            error.hide()
            self.error_labels[field.key] = error
            cell = QWidget()
            column = QVBoxLayout(cell)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(2)
            column.addWidget(getattr(editor, "container", editor.widget))
            column.addWidget(error)
            form.addRow(label, cell)
            if field.key == "engine.remote_url":  # the key is no setting: it goes to the keyring
                self.api_key_field = ApiKeyField(
                    lambda: str(self.editors["engine.remote_url"].value() or ""), self.bridge)
                editor.changed.connect(self.api_key_field.address_changed)
                form.addRow(QLabel("API key"), self.api_key_field)
        if group == "echo":
            self.acoustic_check = AcousticCheckPanel(self.bridge)
            self.acoustic_check.apply_requested.connect(self._use_echo_mode)
            outer.insertWidget(outer.count() - 1, self.acoustic_check)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(page)
        return scroll

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

    def _build_reload_bar(self) -> None:
        self.reload_bar = QFrame()
        self.reload_bar.setObjectName("reloadBar")
        self.reload_bar.setStyleSheet("QFrame#reloadBar { background: #fff4e5; "
                                      "border: 1px solid #e6c07b; border-radius: 4px; }")
        self.reload_text = QLabel()
        self.reload_text.setWordWrap(True)
        self.reload_now = QPushButton("Reload engine now")
        self.reload_now.clicked.connect(lambda: self._emit_applied(reload_engine=True))
        not_now = QPushButton("Not now")
        not_now.clicked.connect(self.reload_bar.hide)
        row = QHBoxLayout(self.reload_bar)
        row.addWidget(self.reload_text, 1)
        row.addWidget(self.reload_now)
        row.addWidget(not_now)
        self.reload_bar.hide()

    def _connect_port_events(self) -> None:
        self._handlers: list[tuple[type, Any]] = [(AudioDevicesListed, self._on_devices),
                                                  (InputLevelMeasured, self._on_level),
                                                  (ToneTestFinished, self._on_tone)]
        for kind, handler in self._handlers:
            self.bridge.on(kind, handler)
        self.bridge.submit(ListAudioDevices())
        for editor in self._device_editors():
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
        if group in self.groups:
            self.group_list.setCurrentRow(self.groups.index(group))

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
        for index, group in enumerate(self.groups):
            bad = any(k.startswith(group + ".") for k in self.errors)
            self.group_list.item(index).setText(group_title(group) + ("  ⚠" if bad else ""))
        self.apply_button.setEnabled(settings is not None)
        self.status.setText("Fix the marked settings to apply." if self.errors else "")
        self.status.setStyleSheet(ERROR_STYLE if self.errors else "")
        precision = self.editors.get("engine.precision")
        rows = self.editors.get("engine.context_max_rows")
        model_dir = self.editors.get("engine.model_dir")
        if isinstance(precision, PrecisionEditor) and rows is not None:
            folder = model_dir.value() if model_dir is not None else None
            flow_bytes = (flow_cache_bytes_for(settings) if settings is not None
                          else precision.flow_cache_bytes)
            precision.set_context(rows.value(), dims_from_folder(folder), flow_bytes)
        return settings is not None

    # ---- applying ----------------------------------------------------------------------------

    def apply(self) -> bool:
        """Apply live, or ask about a reload first. False when invalid or waiting for consent."""
        settings, _errors = self.candidate()
        if settings is None:
            self.validate()
            return False
        reload_keys = [k for k in changed_keys(self.current, settings) if k in ENGINE_BUILD_KEYS]
        if reload_keys:
            names = ", ".join(self.editors[k].field.label for k in reload_keys)
            self.reload_text.setText(f"Changing {names} reloads the engine. That can take a "
                                     "while; the conversation so far is kept.")
            self.reload_bar.show()
            return False
        self._emit_applied(reload_engine=False, settings=settings)
        return True

    def _emit_applied(self, reload_engine: bool, settings: Settings | None = None) -> None:
        """Send the edited settings (``settings``: already validated by the caller)."""
        if settings is None:
            settings, _errors = self.candidate()
        if settings is None:
            return
        self.reload_bar.hide()
        changed = changed_keys(self.current, settings)
        self.current = settings
        self.applied.emit(settings, reload_engine)
        self.status.setStyleSheet("")
        self.status.setText(("Applied; the engine is reloading." if reload_engine else "Applied.")
                            if changed else "Nothing changed.")

    def _apply_and_close(self) -> None:
        if self.apply():
            self.accept()

    def _use_echo_mode(self, mode: str) -> None:
        """The acoustic check's recommendation, applied at once."""
        self.editors["echo.mode"].set_value(mode)
        self.apply()

    def done(self, result: int) -> None:
        if hasattr(self, "acoustic_check"):
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
