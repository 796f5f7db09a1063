"""Read the packaging files the way their tools do: the PyInstaller spec's constants (Python
literals at the top of the file) and the Inno Setup script's defines, sections and entries."""

from __future__ import annotations

import ast
import re
from pathlib import Path, PureWindowsPath

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "moss-voice.spec"
ISS = ROOT / "packaging" / "windows" / "installer.iss"


def spec_constants(path: Path = SPEC) -> dict[str, object]:
    """Top-level ``NAME = literal`` assignments; ``NAME = OTHER`` keeps the other name (str)."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if not isinstance(target, ast.Name):
                continue
            if isinstance(node.value, ast.Name):
                found[target.id] = node.value.id
                continue
            try:
                found[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return found


def spec_call_keywords(function: str, path: Path = SPEC) -> dict[str, ast.expr]:
    """The keyword arguments of the top-level call ``function(...)`` (e.g. EXE, COLLECT)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == function:
            return {k.arg: k.value for k in node.keywords if k.arg}
    raise KeyError(f"{function}(...) not found in {path.name}")


class InnoScript:
    """``#define`` values, ``[Setup]`` directives and the entries of the other sections."""

    def __init__(self, path: Path = ISS) -> None:
        self.path = path
        self.text = path.read_text()
        self.defines: dict[str, str] = {}
        self.sections: dict[str, list[str]] = {}
        section = None
        for raw in self.text.splitlines():
            line = raw.strip()
            if not line or line.startswith(";"):
                continue
            define = re.match(r'#define\s+(\w+)\s+"([^"]*)"\s*$', line)
            if define:
                self.defines[define.group(1)] = define.group(2)
            elif line.startswith("#"):
                continue
            elif re.fullmatch(r"\[\w+\]", line):
                section = line[1:-1]
                self.sections.setdefault(section, [])
            elif section is not None:
                self.sections[section].append(line)

    def expand(self, value: str) -> str:
        """Replace ``{#Name}`` by the define (values of -D options stay as they are)."""
        return re.sub(r"\{#(\w+)\}", lambda m: self.defines.get(m.group(1), m.group(0)), value)

    @property
    def setup(self) -> dict[str, str]:
        pairs = (line.split("=", 1) for line in self.sections.get("Setup", []))
        return {key.strip(): self.expand(value.strip()) for key, value in pairs}

    def entries(self, section: str) -> list[dict[str, str]]:
        """``Name: "x"; Filename: "y"; Flags: a b`` lines as dicts (values expanded)."""
        rows = []
        for line in self.sections.get(section, []):
            row = {}
            for part in re.findall(r'(\w+):\s*("[^"]*"|[^;]+)', line):
                key, value = part
                row[key] = self.expand(value.strip().strip('"'))
            rows.append(row)
        return rows

    def resolve(self, windows_path: str) -> Path:
        """A path relative to the script's folder, as iscc resolves it, on this OS."""
        return (self.path.parent / Path(*PureWindowsPath(windows_path).parts)).resolve()
