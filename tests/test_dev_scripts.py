"""The developer scripts are safe to run by accident (issue 21, item 8).

- scripts/ensure-portaudio.sh (run by ``make setup``) changes the system only when that is
  clearly wanted: asked for, or root on a CI/non-interactive machine; passwordless sudo is
  never used unasked.
- scripts/check-gui-audio.sh deletes nothing it did not make, writes to a fresh mktemp folder
  by default, and starts its X server with a cookie and without TCP.

The system tools the scripts call are stand-ins on PATH that record their arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging_helpers import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scripts")

ENSURE = ROOT / "scripts" / "ensure-portaudio.sh"
CHECK_GUI = ROOT / "scripts" / "check-gui-audio.sh"
SH = shutil.which("sh") or "/bin/sh"


def stand_ins(folder: Path, uid: int, log: Path, with_sudo: bool = True) -> Path:
    """A bin folder with ldconfig (no PortAudio), id, apt-get and sudo that log their calls."""
    folder.mkdir()
    scripts = {
        "ldconfig": "echo 'libc.so.6 (libc6,x86-64) => /lib/libc.so.6'",
        "id": f"echo {uid}",
        "apt-get": f'echo "apt-get $*" >> "{log}"',
    }
    if with_sudo:
        scripts["sudo"] = f'echo "sudo $*" >> "{log}"; [ "$1" = -n ] && shift; "$@"'
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        path.chmod(0o755)
    return folder


def run_ensure(tmp_path: Path, *, uid: int, env: dict[str, str] | None = None,
               with_sudo: bool = True) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = tmp_path / "calls.log"
    log.touch()
    bin_dir = stand_ins(tmp_path / "bin", uid, log, with_sudo)
    system_path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    environment = {"PATH": f"{bin_dir}{os.pathsep}{system_path}", **(env or {})}
    run = subprocess.run([SH, str(ENSURE)], env=environment, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60, check=False)
    return run, log.read_text(encoding="utf-8").splitlines()


def test_a_user_with_passwordless_sudo_is_not_changed_unasked(tmp_path: Path) -> None:
    """The old script ran ``sudo -n apt-get install`` here without asking."""
    run, calls = run_ensure(tmp_path, uid=1000)
    assert run.returncode == 0
    assert calls == []
    assert "libportaudio2 is missing" in run.stdout and "INSTALL_PORTAUDIO=yes" in run.stdout


def test_root_on_a_ci_machine_installs_it(tmp_path: Path) -> None:
    run, calls = run_ensure(tmp_path, uid=0, env={"CI": "true"})
    assert run.returncode == 0
    assert calls == ["apt-get install -y -q libportaudio2"]


def test_asked_for_it_a_user_installs_it_through_sudo(tmp_path: Path) -> None:
    run, calls = run_ensure(tmp_path, uid=1000, env={"INSTALL_PORTAUDIO": "yes"})
    assert run.returncode == 0
    assert calls == ["sudo apt-get install -y -q libportaudio2",
                     "apt-get install -y -q libportaudio2"]


def test_told_no_even_root_in_ci_installs_nothing(tmp_path: Path) -> None:
    run, calls = run_ensure(tmp_path, uid=0, env={"CI": "true", "INSTALL_PORTAUDIO": "no"})
    assert run.returncode == 0 and calls == []


def test_asked_without_root_or_sudo_it_says_who_can(tmp_path: Path) -> None:
    run, calls = run_ensure(tmp_path, uid=1000, env={"INSTALL_PORTAUDIO": "yes"},
                            with_sudo=False)
    assert run.returncode == 0 and calls == []
    assert "ask an administrator" in run.stdout


# ---- check-gui-audio.sh -----------------------------------------------------------------------


def run_check_gui(args: list[str], tmp_path: Path,
                  path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path or os.environ["PATH"], "HOME": str(tmp_path / "home"),
           "TMPDIR": str(tmp_path / "tmp"), "PY": sys.executable}
    return subprocess.run([SH, str(CHECK_GUI), *args], env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("target", ["full", "link", "file"])
def test_check_gui_audio_refuses_to_delete_what_it_did_not_make(tmp_path: Path,
                                                                target: str) -> None:
    """Only throwaway folders here: a broken script must never be pointed at a real one."""
    folder = tmp_path / "someone's folder"
    folder.mkdir()
    keep = folder / "thesis.tex"
    keep.write_text("years of work", encoding="utf-8")
    (tmp_path / "link").symlink_to(folder)
    argument = {"full": folder, "link": tmp_path / "link", "file": keep}[target]
    run = run_check_gui([str(argument)], tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "choose a new" in run.stderr.lower() or "nothing was deleted" in run.stderr
    assert keep.read_text(encoding="utf-8") == "years of work"
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.tex"]


def test_check_gui_audio_writes_to_a_fresh_private_folder_by_default(tmp_path: Path) -> None:
    """Without OUT_DIR: nothing predictable in /tmp (the old default was /tmp/moss-voice-e2e,
    deleted with rm -rf on every run). With tools missing it stops before making anything."""
    (tmp_path / "tmp").mkdir()
    run = run_check_gui([], tmp_path, path=str(tmp_path / "no-tools"))
    assert run.returncode == 2 and "missing: Xvfb" in run.stdout
    assert list((tmp_path / "tmp").iterdir()) == []
    text = CHECK_GUI.read_text(encoding="utf-8")
    assert "/tmp/moss-voice-e2e" not in text and 'rm -rf "$OUT"' not in text
    assert 'mktemp -d "${TMPDIR:-/tmp}/moss-voice-e2e.XXXXXXXX"' in text
    assert '-auth "$XAUTHORITY" -nolisten tcp' in text


TOOLS = ("Xvfb", "xauth", "pulseaudio", "pactl", "paplay", "import")


@pytest.mark.audio
@pytest.mark.slow
@pytest.mark.skipif(not all(shutil.which(t) for t in TOOLS),
                    reason=f"needs {', '.join(TOOLS)} (Debian: xvfb xauth pulseaudio "
                    "pulseaudio-utils imagemagick)")
def test_check_gui_audio_runs_and_can_run_again_in_its_own_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env_path = os.environ["PATH"]
    for attempt in range(2):  # the second run reuses the folder it made
        run = run_check_gui([str(out)], tmp_path, path=env_path)
        assert run.returncode == 0, run.stdout + run.stderr
        assert (out / ".check-gui-audio").is_file()
        for png in ("1-started.png", "2-replying.png", "3-after-the-turn.png"):
            assert (out / png).stat().st_size > 1000, (attempt, png)
    assert oct(out.stat().st_mode & 0o777) == oct(0o700)
