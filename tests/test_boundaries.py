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


def import_graph() -> dict[str, set[str]]:
    """Module → the app modules it imports anywhere (top level, in functions, under
    TYPE_CHECKING). A package's ``__init__`` re-exporting its own submodules is a facade, not
    a dependency, and is left out."""
    modules = {}
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    root = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(root + ([base] if base else []))
                submodules = [f"{base}.{alias.name}" for alias in node.names]
                targets = [t for t in submodules if t in modules] or [base]
            deps |= {t for t in targets if t in modules and t != name
                     and not (is_package and t.startswith(name + "."))}
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", ["app.ui", "app.engine.moss_speech"])
def test_no_import_circles(package: str) -> None:
    """Modules that need a little of another (the main window's banners, the device's error)
    take a narrow interface instead of importing the module that imports them."""
    codec = "app.engine.moss_speech.codec"  # a package facade with its submodules, by design
    offending = [group for group in circles(import_graph())
                 if any(m.startswith(package) for m in group)
                 and not all(m.startswith(codec) for m in group)]
    assert offending == [], offending
