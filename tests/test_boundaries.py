"""Architecture boundaries, checked both from the source and from what really gets imported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "app"
# (package folder, forbidden top-level modules, why)
RULES = [
    ("engine", ("PySide6", "sounddevice"), "the engine must not import Qt or audio devices"),
    ("ui", ("torch", "sounddevice", "app.engine.moss_speech"),
     "the UI must not import torch, audio devices or engine internals"),
    ("audio", ("PySide6",), "audio must not import Qt"),
    ("vad", ("PySide6",), "VAD must not import Qt"),
    ("conversation", ("PySide6",), "the turn controller must not import Qt"),
]


def imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize(("folder", "banned", "why"), RULES, ids=[r[0] for r in RULES])
def test_source_imports_respect_boundaries(folder: str, banned: tuple[str, ...], why: str) -> None:
    offenders = [
        f"{path.relative_to(APP.parent)} imports {name}"
        for path in sorted((APP / folder).rglob("*.py"))
        for name in imported_names(path)
        if any(name == b or name.startswith(b + ".") for b in banned)
    ]
    assert not offenders, f"{why}:\n" + "\n".join(offenders)


def modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    return set(out.split())


def test_light_packages_do_not_load_torch_or_qt() -> None:
    loaded = modules_after_import("app.engine, app.events, app.settings, app.engine.folders")
    assert "torch" not in loaded and "PySide6" not in loaded


def test_ui_does_not_load_torch_or_audio_devices() -> None:
    loaded = modules_after_import("app.ui.main_window")
    assert "torch" not in loaded
    assert "sounddevice" not in loaded
    assert not any(m.startswith("app.engine.moss_speech") for m in loaded)
