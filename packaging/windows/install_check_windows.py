"""On a Windows machine (the release workflow's runner): the built installer as a person gets it.

    python packaging\\windows\\install_check_windows.py dist\\moss-voice-<v>-windows-x64-setup.exe
        --target "%RUNNER_TEMP%\\MOSS Voice Jürgen" [--logs DIR]

1. a silent per-user install (``/VERYSILENT /SUPPRESSMSGBOXES /CURRENTUSER``) into ``--target``;
2. the program's files, the uninstaller, the Start-menu entry and the uninstall entry in the
   registry; no installed path reaches Windows' 260-character limit;
3. the installed ``moss-voice.exe --self-test``: it has no console, so its exit code says
   whether it passed and its report is read from the log in the user's data folder
   (``%LOCALAPPDATA%\\moss-voice\\Logs\\moss-voice.log``);
4. a silent uninstall: the program folder, the Start-menu entry and the uninstall entry gone,
   the user's data folder (with that log) kept.

Exit status 0 when all passed; otherwise 1 with the reason. The make-installer-check twin of
this script runs the same installer under wine on Linux (installer_check.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

APP_NAME = "MOSS Voice"
APP_ID = "moss-voice"
APP_GUID = "{2AA39949-8DA5-4BFD-92B0-B13B3D3E5031}"
UNINSTALL_KEY = rf"Software\Microsoft\Windows\CurrentVersion\Uninstall\{APP_GUID}_is1"
MAX_PATH = 260
INSTALL_TIMEOUT_S = 1800  # several GB to unpack
SELF_TEST_TIMEOUT_S = 900
UNINSTALL_TIMEOUT_S = 600


class CheckFailedError(Exception):
    pass


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailedError(message)


def say(message: str) -> None:
    print(message, flush=True)


def start_menu_entry() -> Path:
    return (Path(os.environ["APPDATA"]) / "Microsoft" / "Windows" / "Start Menu" / "Programs"
            / f"{APP_NAME}.lnk")


def data_folder() -> Path:
    """Where the app keeps settings, models and logs (platformdirs, README "Where files live")."""
    return Path(os.environ["LOCALAPPDATA"]) / APP_ID


def uninstall_entry() -> dict[str, str] | None:
    import winreg  # Windows only

    try:
        with winreg.OpenKey(winreg.HKEY_CURRENT_USER, UNINSTALL_KEY) as key:
            return {name: str(winreg.QueryValueEx(key, name)[0])
                    for name in ("DisplayName", "DisplayVersion", "UninstallString")}
    except FileNotFoundError:
        return None


def install(setup: Path, target: Path, logs: Path) -> None:
    command = [str(setup), "/VERYSILENT", "/SUPPRESSMSGBOXES", "/CURRENTUSER", "/NORESTART",
               f"/DIR={target}", f"/LOG={logs / 'install.log'}"]
    start = time.perf_counter()
    result = subprocess.run(command, timeout=INSTALL_TIMEOUT_S, check=False)
    say(f"install: exit {result.returncode} in {time.perf_counter() - start:.0f} s")
    require(result.returncode == 0, f"the silent install failed (exit {result.returncode}); "
            f"see {logs / 'install.log'}")


def check_installed(target: Path) -> None:
    exe = target / f"{APP_ID}.exe"
    require(exe.is_file(), f"{exe} is missing")
    require((target / "unins000.exe").is_file(), "no uninstaller in the program folder")
    require((target / "_internal").is_dir(), "the bundle's _internal folder is missing")
    entry = start_menu_entry()
    require(entry.is_file(), f"no Start-menu entry at {entry}")
    registered = uninstall_entry()
    require(registered is not None and registered["DisplayName"] == APP_NAME,
            f"no uninstall entry HKCU\\{UNINSTALL_KEY}: {registered}")
    longest = max((str(p) for p in target.rglob("*")), key=len)
    require(len(longest) < MAX_PATH, f"{len(longest)} characters, over Windows' limit: {longest}")
    say(f"installed: {sum(1 for _ in target.rglob('*'))} files and folders; Start-menu entry; "
        f"uninstall entry {registered}; longest path {len(longest)} characters")


def self_test(target: Path) -> None:
    log = data_folder() / "Logs" / f"{APP_ID}.log"
    before = log.stat().st_size if log.is_file() else 0
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    for name in ("PYTHONPATH", "PYTHONHOME", "MOSS_VOICE_HOME", "MOSS_VOICE_SETTINGS"):
        env.pop(name, None)  # the installed program stands on its own, with the real folders
    start = time.perf_counter()
    # As from the Start menu: no console, nothing to print to (stdio goes nowhere).
    result = subprocess.run([str(target / f"{APP_ID}.exe"), "--self-test"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=SELF_TEST_TIMEOUT_S, check=False)
    seconds = time.perf_counter() - start
    require(log.is_file(), f"the self-test wrote no log at {log}")
    with log.open("rb") as stream:
        stream.seek(before)
        report = stream.read().decode("utf-8", errors="replace")
    say(f"self-test: exit {result.returncode} in {seconds:.0f} s; its log:\n{report[-6000:]}")
    require(result.returncode == 0, f"the installed app's self-test failed "
            f"(exit {result.returncode})")
    require("self-test passed" in report, "the log does not say the self-test passed")


def uninstall(target: Path, logs: Path) -> None:
    """The uninstaller hands over to a copy of itself and returns at once: wait for the
    program folder to go."""
    kept = data_folder()
    require(kept.is_dir(), f"the user's data folder {kept} should exist after the self-test")
    command = [str(target / "unins000.exe"), "/VERYSILENT", "/SUPPRESSMSGBOXES", "/NORESTART",
               f"/LOG={logs / 'uninstall.log'}"]
    result = subprocess.run(command, timeout=UNINSTALL_TIMEOUT_S, check=False)
    require(result.returncode == 0, f"the uninstaller failed (exit {result.returncode})")
    deadline = time.monotonic() + UNINSTALL_TIMEOUT_S
    while target.exists() and time.monotonic() < deadline:
        time.sleep(1)  # the second phase deletes the folder last
    require(not target.exists(), f"{target} is still there: {sorted(target.rglob('*'))[:20]}")
    require(not start_menu_entry().exists(), "the Start-menu entry is still there")
    require(uninstall_entry() is None, "the uninstall entry is still in the registry")
    require((kept / "Logs" / f"{APP_ID}.log").is_file(),
            f"the user's data folder {kept} was not kept")
    say(f"uninstalled; kept {kept}")


def main(argv: list[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8", errors="replace")  # paths with umlauts
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("setup", type=Path, help="the built ...-windows-x64-setup.exe")
    parser.add_argument("--target", type=Path, required=True,
                        help="install folder (a temporary one; a space and an umlaut welcome)")
    parser.add_argument("--logs", type=Path, default=Path("dist") / "install-check",
                        help="where the installer's and uninstaller's logs go")
    args = parser.parse_args(argv)
    if sys.platform != "win32":
        say("install_check_windows.py runs on Windows; under Linux use make installer-check")
        return 1
    args.logs.mkdir(parents=True, exist_ok=True)
    try:
        require(not args.target.exists(), f"{args.target} exists; give a new folder")
        install(args.setup.resolve(), args.target, args.logs.resolve())
        check_installed(args.target)
        self_test(args.target)
        uninstall(args.target, args.logs.resolve())
    except CheckFailedError as failure:
        say(f"install check FAILED: {failure}")
        return 1
    say("install check passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
