"""Editors generated from the pydantic settings model, so a new field appears by itself.

``settings_fields()`` walks :class:`app.settings.Settings` (group → field) and ``editor_for()``
picks an editor from the field's type: bool → check box, Literal → choice, int/float → spin box
bounded by the field's constraints, Path → path with a Browse button, anything else → text that
pydantic parses. Validation is pydantic's own (the dialog shows its messages); labels come from
field names with their units, tooltips from field descriptions.
"""

from __future__ import annotations

import contextlib
import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.settings import Settings
from app.ui.settings_text import CHOICES, LABELS, help_line

HIDDEN_KEYS = {"schema_version"}  # bookkeeping, not a setting a person changes
UNIT_SUFFIXES = {"ms": "ms", "s": "s", "hz": "Hz", "rows": "rows", "dbfs": "dBFS", "mib": "MiB"}
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class SettingField:
    group: str
    name: str
    info: FieldInfo

    @property
    def key(self) -> str:
        return f"{self.group}.{self.name}"

    @property
    def label(self) -> str:
        return LABELS.get(self.key) or field_label(self.name, self.info)

    @property
    def help(self) -> str:
        """The one line shown under the editor (the tooltip has the whole description)."""
        return help_line(self.key, self.tooltip)

    @property
    def tooltip(self) -> str:
        return self.info.description or ""


def settings_fields(model: type[BaseModel] = Settings) -> dict[str, list[SettingField]]:
    """Group name → its fields, in declaration order (groups are the nested models)."""
    groups: dict[str, list[SettingField]] = {}
    for group, group_info in model.model_fields.items():
        group_model = group_info.annotation
        if group in HIDDEN_KEYS or not (isinstance(group_model, type)
                                        and issubclass(group_model, BaseModel)):
            continue
        groups[group] = [SettingField(group, name, info)
                         for name, info in group_model.model_fields.items()]
    return groups


def field_label(name: str, info: FieldInfo) -> str:
    """'endpoint_silence_ms' → 'Endpoint silence (ms)'; a field's ``title`` wins."""
    if info.title:
        return info.title
    words = name.split("_")
    unit = UNIT_SUFFIXES.get(words[-1]) if len(words) > 1 else None
    if unit:
        words = words[:-1]
    words = ["folder" if w == "dir" else w for w in words]
    text = " ".join(words).capitalize().replace("Vad", "VAD").replace("Top p", "Top-p")
    text = text.replace("Top k", "Top-k")
    return f"{text} ({unit})" if unit else text


def bounds(info: FieldInfo) -> tuple[float | None, float | None]:
    """Inclusive spin-box bounds; strict bounds (gt/lt) are left for pydantic to report."""
    low: Any = None
    high: Any = None
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        elif isinstance(item, annotated_types.Gt):
            low = item.gt
        elif isinstance(item, annotated_types.Le):
            high = item.le
        elif isinstance(item, annotated_types.Lt):
            high = item.lt
    return low, high


def unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """(inner type, whether None is allowed) for ``X | None``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


# ---- editors -----------------------------------------------------------------------------------


class FieldEditor(QObject):
    """One setting's widget; ``value()`` is what pydantic validates."""

    changed = Signal()

    def __init__(self, field: SettingField, widget: QWidget) -> None:
        super().__init__(widget)
        self.field = field
        self.widget = widget
        widget.setToolTip(field.tooltip)
        widget.setObjectName(f"edit_{field.group}_{field.name}")

    def value(self) -> Any:
        raise NotImplementedError

    def set_value(self, value: Any) -> None:
        raise NotImplementedError


class BoolEditor(FieldEditor):
    def __init__(self, field: SettingField) -> None:
        self.box = QCheckBox()
        super().__init__(field, self.box)
        self.box.toggled.connect(self.changed)

    def value(self) -> bool:
        return self.box.isChecked()

    def set_value(self, value: Any) -> None:
        self.box.setChecked(bool(value))


class ChoiceEditor(FieldEditor):
    def __init__(self, field: SettingField, options: list[Any], optional: bool) -> None:
        self.combo = QComboBox()
        super().__init__(field, self.combo)
        self.options = ([None] if optional else []) + list(options)
        names = CHOICES.get(field.key, {})
        for option in self.options:
            self.combo.addItem("(default)" if option is None else names.get(option, str(option)))
        self.combo.currentIndexChanged.connect(self.changed)

    def value(self) -> Any:
        return self.options[self.combo.currentIndex()]

    def set_value(self, value: Any) -> None:
        if value in self.options:
            self.combo.setCurrentIndex(self.options.index(value))

    def set_item_text(self, option: Any, text: str) -> None:
        self.combo.setItemText(self.options.index(option), text)


class IntEditor(FieldEditor):
    def __init__(self, field: SettingField) -> None:
        self.spin = QSpinBox()
        super().__init__(field, self.spin)
        low, high = bounds(field.info)
        self.spin.setRange(int(low) if low is not None else -INT_MAX,
                           int(high) if high is not None else INT_MAX)
        span = self.spin.maximum() - self.spin.minimum()
        self.spin.setSingleStep(10 if field.name.endswith("_ms") and span >= 1000 else 1)
        self.spin.valueChanged.connect(self.changed)

    def value(self) -> int:
        return self.spin.value()

    def set_value(self, value: Any) -> None:
        self.spin.setValue(int(value))


class FloatEditor(FieldEditor):
    def __init__(self, field: SettingField) -> None:
        self.spin = QDoubleSpinBox()
        super().__init__(field, self.spin)
        low, high = bounds(field.info)
        self.spin.setDecimals(3)
        self.spin.setRange(float(low) if low is not None else -1e9,
                           float(high) if high is not None else 1e9)
        self.spin.setSingleStep(0.05 if self.spin.maximum() - self.spin.minimum() <= 10 else 1.0)
        self.spin.valueChanged.connect(self.changed)

    def value(self) -> float:
        return round(self.spin.value(), 6)

    def set_value(self, value: Any) -> None:
        self.spin.setValue(float(value))


class TextEditor(FieldEditor):
    """Free text; empty means None for optional fields. Non-text types are parsed by pydantic."""

    def __init__(self, field: SettingField, optional: bool, multiline: bool = False) -> None:
        self.multiline = multiline
        self.edit: QLineEdit | QPlainTextEdit = QPlainTextEdit() if multiline else QLineEdit()
        super().__init__(field, self.edit)
        self.optional = optional
        if multiline:
            self.edit.setMaximumHeight(80)
        if optional:
            self.edit.setPlaceholderText("(not set)")
        self.edit.textChanged.connect(self.changed)

    def text(self) -> str:
        edit = self.edit
        return edit.toPlainText() if isinstance(edit, QPlainTextEdit) else edit.text()

    def value(self) -> Any:
        text = self.text()
        if self.optional and not text.strip():
            return None
        return text

    def set_value(self, value: Any) -> None:
        text = "" if value is None else (value if isinstance(value, str) else json.dumps(value))
        if isinstance(self.edit, QPlainTextEdit):
            self.edit.setPlainText(text)
        else:
            self.edit.setText(text)


class PathEditor(FieldEditor):
    """A path with Browse…: a folder for ``*_dir`` fields, else a file."""

    def __init__(self, field: SettingField, optional: bool, file_filter: str = "") -> None:
        container = QWidget()
        super().__init__(field, container)
        self.optional = optional
        self.file_filter = file_filter
        self.line = QLineEdit()
        self.line.setPlaceholderText("(not set)" if optional else "")
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self.ask_path)
        self.row = QHBoxLayout(container)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addWidget(self.line, 1)
        self.row.addWidget(self.browse)
        self.line.textChanged.connect(self.changed)

    @property
    def wants_folder(self) -> bool:
        return self.field.name.endswith("_dir")

    def start_folder(self) -> Path:
        """Where the picker opens: the current value's folder, else where such files live."""
        text = self.line.text().strip()
        if text:
            return nearest_existing(Path(text).expanduser())
        return nearest_existing(default_folder(self.field.key))

    def ask_path(self) -> None:
        start = str(self.start_folder())
        if self.wants_folder:
            chosen = QFileDialog.getExistingDirectory(self.widget, self.field.label, start)
        else:
            chosen, _ = QFileDialog.getOpenFileName(self.widget, self.field.label, start,
                                                    self.file_filter)
        if chosen:
            self.line.setText(chosen)

    def value(self) -> Path | None:
        text = self.line.text().strip()
        return Path(text).expanduser() if text else None

    def set_value(self, value: Any) -> None:
        self.line.setText("" if value is None else str(value))


def default_folder(key: str) -> Path:
    """Where a picker for ``key`` starts when nothing is chosen yet (made if missing, so the
    picker opens there and not in the home folder)."""
    from app import paths

    if key in ("engine.model_dir", "engine.codec_dir"):
        folder = paths.models_dir()
    elif key == "engine.voice_prompt":
        folder = paths.voices_dir()
    else:
        folder = paths.data_dir()
    with contextlib.suppress(OSError):  # else the picker opens in the nearest existing parent
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def nearest_existing(path: Path) -> Path:
    """``path`` if it exists, else its nearest existing parent (pickers need a real folder)."""
    probe = path.absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def editor_for(field: SettingField) -> FieldEditor:
    """The generic editor for a field's type."""
    inner, optional = unwrap_optional(field.info.annotation)
    if typing.get_origin(inner) is typing.Literal:
        return ChoiceEditor(field, list(typing.get_args(inner)), optional)
    if inner is bool and not optional:
        return BoolEditor(field)
    if inner is int and not optional:
        return IntEditor(field)
    if inner is float and not optional:
        return FloatEditor(field)
    if isinstance(inner, type) and issubclass(inner, Path):
        return PathEditor(field, optional)
    return TextEditor(field, optional)
