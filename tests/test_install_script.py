"""packaging/linux/install.sh with hostile folder names (issue 21, item 3).

The unpacked folder's path used to go unescaped into a sed script: a folder named
``x|;e touch PWNED;#`` ran a command (GNU sed's ``e``), and ``&``, ``"``, ``$``, backticks,
``%`` and ``\\`` broke the menu entry. Now the path is data: the entry must be valid, name the
real executable once a launcher has undone the Desktop Entry Specification's escapes, and
nothing may run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import APP_ID, APP_NAME
from tests.packaging_helpers import ROOT

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell script")

INSTALL_SCRIPT = ROOT / "packaging" / "linux" / "install.sh"
DESKTOP_ENTRY = ROOT / "resources" / "moss-voice.desktop"

HOSTILE_NAMES = [
    "x|;e touch PWNED;#",  # the sed injection that ran a command
    "a&b",  # sed's "whole match"
    'say "hi"',
    "$(touch PWNED) and ${HOME}",
    "back`touch PWNED`tick",
    "100% sure %f %u",  # desktop-entry field codes
    "back\\slash\\n",
    "with  two  spaces",
    "Jürgen Müller 李 ✓",
    "'single' ; rm -rf ~ ; <>|*?[]#~",
    "-starts-with-dash",
]

RESERVED = "\t\n\"'\\><~|&;$*?#()`"  # need quoting in an Exec argument
STRING_ESCAPES = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def unescape_string(value: str) -> str:
    """A desktop-entry string value as a reader sees it (``\\s \\n \\t \\r \\\\``); any other
    escape is invalid, as in GLib's key-file parser."""
    out, chars = [], iter(value)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, "")
        if following not in STRING_ESCAPES:
            raise ValueError(f"invalid escape \\{following} in {value!r}")
        out.append(STRING_ESCAPES[following])
    return "".join(out)


def exec_arguments(value: str) -> list[str]:
    """The Exec key's arguments: string escapes first, then the quoting rules (inside double
    quotes a backslash escapes ``"`` `` ` `` ``$`` ``\\``), then ``%%`` → ``%``. Unquoted
    reserved characters and lone field codes are errors here (the entry must need none)."""
    text, args, i = unescape_string(value), [], 0
    while i < len(text):
        if text[i] == " ":
            i += 1
            continue
        arg = []
        if text[i] == '"':
            i += 1
            while text[i] != '"':
                if text[i] == "\\":
                    assert text[i + 1] in '"`$\\', f"bad quoted escape in {text!r}"
                    i += 1
                arg.append(text[i])
                i += 1
            i += 1
        else:
            while i < len(text) and text[i] != " ":
                assert text[i] not in RESERVED, f"unquoted reserved char in {text!r}"
                arg.append(text[i])
                i += 1
        word = "".join(arg)
        assert re.fullmatch(r"(%%|[^%])*", word), f"field code left in {word!r}"
        args.append(word.replace("%%", "%"))
    return args


def read_entry(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "[Desktop Entry]"
    return dict(line.split("=", 1) for line in lines[1:] if line and not line.startswith("#"))


def unpacked_bundle(parent: Path, name: str) -> Path:
    """What the tarball unpacks to, in a folder called ``name``, with a stand-in executable."""
    bundle = parent / name / APP_ID
    icons = bundle / "_internal" / "resources" / "icons"
    icons.mkdir(parents=True)
    shutil.copytree(ROOT / "resources" / "icons" / "hicolor", icons / "hicolor")
    exe = bundle / APP_ID
    exe.write_text('#!/bin/sh\necho "moss-voice stand-in $*"\n', encoding="utf-8")
    exe.chmod(0o755)
    shutil.copy(DESKTOP_ENTRY, bundle / DESKTOP_ENTRY.name)
    shutil.copy(INSTALL_SCRIPT, bundle / "install.sh")
    return bundle


def run_install(bundle: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    return subprocess.run(["sh", str(bundle / "install.sh"), *args], env=env, cwd=home,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_exec_parser_reads_the_spec_examples() -> None:
    """The reader the tests below trust, on the specification's own escaping examples."""
    assert exec_arguments(r'"/a b/c" --x') == ["/a b/c", "--x"]
    assert exec_arguments(r'"\\\\"') == ["\\"]  # four backslashes: one literal backslash
    assert exec_arguments(r'"\\$HOME"') == ["$HOME"]
    assert exec_arguments('"100%% \\\\"x\\\\""') == ['100% "x"']
    with pytest.raises(AssertionError):
        exec_arguments("/a/%f")
    with pytest.raises(ValueError):
        exec_arguments(r'"\$HOME"')  # \$ is no valid string escape


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_folder_name_gives_a_valid_entry_and_runs_nothing(tmp_path: Path,
                                                                    name: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    bundle = unpacked_bundle(tmp_path, name)
    run = run_install(bundle, home)
    assert run.returncode == 0, run.stderr
    assert list(tmp_path.rglob("PWNED")) == [] and not Path("PWNED").exists()

    entry_path = home / ".local" / "share" / "applications" / "moss-voice.desktop"
    entry = read_entry(entry_path)
    executable = str(bundle / APP_ID)
    assert exec_arguments(entry["Exec"]) == [executable]
    assert unescape_string(entry["TryExec"]) == executable
    assert entry["Name"] == APP_NAME and entry["Icon"] == APP_ID
    assert oct(entry_path.stat().st_mode & 0o777) == oct(0o644)
    validator = shutil.which("desktop-file-validate")
    if validator:
        check = subprocess.run([validator, str(entry_path)], capture_output=True, text=True,
                               timeout=60, check=False)
        assert check.returncode == 0 and not check.stdout.strip(), check.stdout + check.stderr
    command = home / ".local" / "bin" / APP_ID
    assert command.resolve() == (bundle / APP_ID).resolve()
    assert executable in run.stdout or str(command) in run.stdout

    removed = run_install(bundle, home, "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert not entry_path.exists() and not command.is_symlink()
    assert (bundle / APP_ID).is_file()
    assert list(tmp_path.rglob("PWNED")) == []


def test_the_old_sed_injection_would_have_run(tmp_path: Path) -> None:
    """The regression this file guards: the previous script's sed line, on the first hostile
    name, runs ``touch PWNED`` (GNU sed). Skipped where sed has no ``e`` command."""
    here = tmp_path / "x|;e touch PWNED;#"
    here.mkdir()
    (here / "entry").write_text("Exec=moss-voice\n", encoding="utf-8")
    old_line = f's|^Exec=.*|Exec="{here}/moss-voice"|'
    run = subprocess.run(["sed", "-e", old_line, str(here / "entry")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    if not (tmp_path / "PWNED").exists():
        pytest.skip(f"this sed does not run commands (exit {run.returncode}: {run.stderr})")
    code = [line for line in INSTALL_SCRIPT.read_text(encoding="utf-8").splitlines()
            if not line.lstrip().startswith("#")]
    assert not [line for line in code if re.search(r"\bsed\b", line)]


@pytest.mark.parametrize("bad", ["line\nbreak", "tab\there"])
def test_a_folder_name_a_menu_entry_cannot_hold_is_refused(tmp_path: Path, bad: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    bundle = unpacked_bundle(tmp_path, bad)
    run = run_install(bundle, home)
    assert run.returncode == 1
    assert "line break or a tab" in run.stderr and "move the folder" in run.stderr
    assert not (home / ".local" / "share" / "applications").exists()
