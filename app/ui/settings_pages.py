"""The pages of the settings panel: a title, what the page is for, one section per settings
group, and for every field its label, editor, a one-line help and a place for its error."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.ui.settings_form import FieldEditor, SettingField
from app.ui.settings_text import GROUP_TITLES, HIDDEN_FIELDS, NOT_AVAILABLE, PAGES, Page

ERROR_STYLE = "color: #c0392b;"
HELP_STYLE = "color: palette(placeholder-text); font-size: 11px;"


def group_title(group: str) -> str:
    return GROUP_TITLES.get(group, group.replace("_", " ").capitalize())


def plan_pages(groups: list[str]) -> list[Page]:
    """The pages in order; a settings group no page names gets a page of its own."""
    placed = {g for page in PAGES for g in page.groups}
    pages = [Page(p.key, p.title, p.intro, tuple(g for g in p.groups if g in groups))
             for p in PAGES]
    pages = [p for p in pages if p.groups]
    pages += [Page(g, group_title(g), "", (g,)) for g in groups
              if g not in placed and g != "ui"]
    return pages


class FieldRow:
    """One setting on a page: the editor with its help line and error line under it."""

    def __init__(self, field: SettingField, editor: FieldEditor) -> None:
        self.field = field
        self.editor = editor
        self.label = QLabel(field.label)
        self.label.setToolTip(field.tooltip)
        self.label.setBuddy(editor.widget)
        self.help = QLabel(NOT_AVAILABLE.get(field.key, field.help))
        self.help.setObjectName(f"help_{field.group}_{field.name}")
        self.help.setWordWrap(True)
        self.help.setStyleSheet(HELP_STYLE)
        self.help.setToolTip(field.tooltip)
        self.error = QLabel()
        self.error.setStyleSheet(ERROR_STYLE)
        self.error.setWordWrap(True)
        self.error.hide()
        self.cell = QWidget()
        self.cell.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        column = QVBoxLayout(self.cell)
        column.setContentsMargins(0, 0, 0, 4)
        column.setSpacing(1)
        shown = getattr(editor, "container", editor.widget)
        if isinstance(shown, (QComboBox, QAbstractSpinBox, QCheckBox)):
            line = QHBoxLayout()  # keeps its natural width; the help line spans the cell
            line.addWidget(shown)
            line.addStretch(1)
            column.addLayout(line)
        else:
            column.addWidget(shown)
        column.addWidget(self.help)
        column.addWidget(self.error)
        if field.key in NOT_AVAILABLE:  # honest: a setting that does nothing is not offered
            shown.setEnabled(False)


def build_page(page: Page, fields_by_group: dict[str, list[SettingField]],
               make_editor: Callable[[SettingField], FieldEditor],
               extras: dict[str, QWidget],
               after_field: dict[str, tuple[str, QWidget]] | None = None,
               ) -> tuple[QScrollArea, list[FieldRow]]:
    """A scrollable page; ``extras[group]`` (e.g. the acoustic check) goes under that group's
    fields, ``after_field[key] = (label, widget)`` right under that field (e.g. a secret that
    is no setting)."""
    body = QWidget()
    body.setObjectName(f"settingsPage_{page.key}")
    outer = QVBoxLayout(body)
    title = QLabel(page.title)
    title.setStyleSheet("font-size: 15px; font-weight: 600;")
    outer.addWidget(title)
    if page.intro:
        intro = QLabel(page.intro)
        intro.setWordWrap(True)
        outer.addWidget(intro)
    rows: list[FieldRow] = []
    for group in page.groups:
        box = QGroupBox(group_title(group)) if len(page.groups) > 1 else QWidget()
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        form.setVerticalSpacing(6)
        if len(page.groups) == 1:
            form.setContentsMargins(0, 6, 0, 0)
        for field in fields_by_group.get(group, []):
            if field.key in HIDDEN_FIELDS:
                continue
            row = FieldRow(field, make_editor(field))
            form.addRow(row.label, row.cell)
            rows.append(row)
            if after_field and field.key in after_field:
                label, widget = after_field[field.key]
                form.addRow(label, widget)
        if group in extras:
            form.addRow(extras[group])
        outer.addWidget(box)
    outer.addStretch(1)  # rows keep their natural height; space collects at the bottom
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setWidget(body)
    return scroll, rows
