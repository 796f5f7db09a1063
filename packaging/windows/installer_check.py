"""``make installer-check``: the real Windows installer, compiled and exercised under wine.

    python packaging/windows/installer_check.py [--install-compiler] [--keep DIR]

1. Inno Setup's compiler (``ISCC.exe`` from the npm package ``innosetup``, the version CI uses)
   compiles ``packaging/windows/installer.iss`` over a small stand-in payload (a few MB of
   random bytes, names with spaces and non-ASCII letters) with 3 MB slices, so that the
   installer spans several ``.bin`` parts like the CUDA build does;
2. in a throwaway wine prefix, the setup runs silently (``/VERYSILENT /SUPPRESSMSGBOXES
   /CURRENTUSER``) into a folder with a space and an umlaut; the files, the Start-menu
   shortcut, the uninstaller and its registry entry are checked;
3. the uninstaller runs silently; the program folder, shortcut and registry entry must be gone
   and the user's data folder (``%LOCALAPPDATA%\\moss-voice``) kept;
4. the parts check: with the last part missing, a middle one missing, one cut short, and the
   setup program renamed, Setup must stop at once with exit code 1 and say what is wrong,
   installing nothing (without the check it would wait for "Disk N" forever).

Exit status 0 when every check passed, 1 when one failed, 3 when a tool is missing (wine with
wine32, xvfb-run, the compiler); the reason is printed. Timings go to
``build/installer-check.json``. Nothing outside the temporary folder is touched: the wine
prefix, HOME and the X display are private, and wine's menu integration is switched off.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from slices import layout_problem, slice_paths  # noqa: E402

from app import APP_ID, APP_NAME, __version__  # noqa: E402

INNO_PACKAGE = "innosetup@6.4.1"
TOOLS_DIR = ROOT / "build" / "innosetup"
ISCC = TOOLS_DIR / "node_modules" / "innosetup" / "bin" / "ISCC.exe"
ISS = HERE / "installer.iss"
REPORT = ROOT / "build" / "installer-check.json"
SLICE_BYTES = 3_000_000  # small slices: the stand-in spans three parts
CLUSTER_BYTES = 512  # installer.iss, DiskClusterSize
APP_GUID = "{2AA39949-8DA5-4BFD-92B0-B13B3D3E5031}"
UNINSTALL_KEY = rf"HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\{APP_GUID}_is1"
SETUP_NAME = f"{APP_ID}-{__version__}-windows-x64-setup"
INSTALL_DIR = r"C:\Temp\MOSS Voice Jürgen"
SETUP_TIMEOUT_S = 180
BROKEN_TIMEOUT_S = 60  # Setup stops in about a second; without the check it never does
DISK_PROMPT_WAIT_S = 20
SKIP = 3


class ToolMissingError(Exception):
    """A tool the check needs is not installed; the message says how to get it."""


class CheckFailedError(Exception):
    pass


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailedError(message)


def find_tools(install_compiler: bool) -> dict[str, str]:
    """wine, xvfb-run and ISCC.exe; npm installs the compiler when asked."""
    tools = {name: shutil.which(name) for name in ("wine", "wineserver", "xvfb-run")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise ToolMissingError(
            f"{', '.join(missing)} not found. On Debian: dpkg --add-architecture i386 && "
            "apt-get update && apt-get install wine wine32:i386 xvfb xauth")
    if not ISCC.is_file() and install_compiler and shutil.which("npm"):
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix",
                        str(TOOLS_DIR), INNO_PACKAGE], check=True, timeout=600)
    if not ISCC.is_file():
        raise ToolMissingError(f"Inno Setup's compiler is not in {ISCC}: run `make "
                               "installer-check` (it runs npm install --prefix build/innosetup "
                               f"{INNO_PACKAGE})")
    return {name: str(path) for name, path in tools.items()} | {"iscc": str(ISCC)}


class Wine:
    """A throwaway wine prefix with a private HOME; GUI programs get a private X display."""

    def __init__(self, scratch: Path, tools: dict[str, str]) -> None:
        self.prefix = scratch / "prefix"
        self.tools = tools
        home = scratch / "home"
        home.mkdir()
        self.env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home),
                    "WINEPREFIX": str(self.prefix), "WINEDEBUG": "-all", "LANG": "C.UTF-8",
                    # no Mono/Gecko prompts, no menu entries in the real desktop
                    "WINEDLLOVERRIDES": "mscoree,mshtml=;winemenubuilder.exe=d",
                    "XDG_DATA_HOME": str(home / ".local" / "share"),
                    "XDG_CONFIG_HOME": str(home / ".config")}

    def run(self, args: list[str], *, display: bool = False,
            timeout: float = SETUP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        command = [self.tools["wine"], *args]
        if display:
            command = [self.tools["xvfb-run"], "-a", "-s", "-screen 0 1024x768x24 -nolisten tcp",
                       *command]
        # A session of its own: on a timeout the whole group goes (xvfb-run's Xvfb too).
        with subprocess.Popen(command, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, errors="replace",
                              start_new_session=True) as process:
            try:
                stdout, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGTERM)
                process.communicate()
                self.kill()
                raise
        self.wait()
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    def wait(self) -> None:
        """Until every program in the prefix has ended (the uninstaller re-starts itself)."""
        subprocess.run([self.tools["wineserver"], "-w"], env=self.env, timeout=SETUP_TIMEOUT_S,
                       check=False)

    def kill(self) -> None:
        subprocess.run([self.tools["wineserver"], "-k"], env=self.env, timeout=60, check=False)

    def windows_path(self, path: Path) -> str:
        return "Z:" + str(path).replace("/", "\\")

    def unix_path(self, windows_path: str) -> Path:
        drive, rest = windows_path.split(":", 1)
        parts = [p for p in rest.split("\\") if p]
        if drive.upper() == "Z":
            return Path("/", *parts)
        return self.prefix / f"drive_{drive.lower()}" / Path(*parts)

    def user_folder(self, *parts: str) -> Path:
        users = [p for p in (self.prefix / "drive_c" / "users").iterdir() if p.name != "Public"]
        require(len(users) == 1, f"expected one wine user folder, found {users}")
        return users[0].joinpath(*parts)

    def registry_value(self, key: str, name: str) -> str | None:
        result = self.run(["reg", "query", key, "/v", name], timeout=60)
        for line in result.stdout.splitlines():
            fields = line.split(None, 2)  # name, type, value
            if result.returncode == 0 and len(fields) == 3 and fields[0] == name:
                return fields[2].strip()
        return None


def make_payload(folder: Path) -> Path:
    """A stand-in for dist/moss-voice: an .exe, a large incompressible library, odd names."""
    bundle = folder / APP_ID
    internal = bundle / "_internal"
    (internal / "torch" / "lib").mkdir(parents=True)
    (internal / "resources").mkdir()
    (bundle / f"{APP_ID}.exe").write_bytes(b"MZ stand-in for the PyInstaller executable\n")
    (internal / "torch" / "lib" / "torch_cuda stand-in.dll").write_bytes(os.urandom(7_000_000))
    (internal / "resources" / "Jürgen ✓ notes.txt").write_text("grüß gott 你好\n",
                                                               encoding="utf-8")
    return bundle


def compile_installer(wine: Wine, payload: Path, out: Path, iss: Path = ISS) -> Path:
    out.mkdir()
    result = wine.run([wine.tools["iscc"], "/Q", f"/DAppVersion={__version__}",
                       f"/DBundleDir={wine.windows_path(payload)}",
                       f"/DOutputDir={wine.windows_path(out)}", f"/DDiskSliceSize={SLICE_BYTES}",
                       wine.windows_path(iss)], timeout=600)
    output = result.stdout + result.stderr
    if "wine32" in output:
        raise ToolMissingError("wine cannot run 32-bit programs (ISCC.exe is one): apt-get install "
                          f"wine32:i386 after dpkg --add-architecture i386 ({output.strip()})")
    require(result.returncode == 0, f"ISCC failed ({result.returncode}): {output[-3000:]}")
    setup = out / f"{SETUP_NAME}.exe"
    problem = layout_problem(setup, SLICE_BYTES, CLUSTER_BYTES)
    require(problem is None, f"slice layout: {problem}")
    require(len(slice_paths(setup)) >= 3, "the stand-in should span at least three slices")
    return setup


def run_setup(wine: Wine, setup: Path, log: Path, target: str,
              timeout: float = SETUP_TIMEOUT_S) -> int:
    result = wine.run([wine.windows_path(setup), "/VERYSILENT", "/SUPPRESSMSGBOXES",
                       "/CURRENTUSER", "/NORESTART", f"/DIR={target}",
                       f"/LOG={wine.windows_path(log)}"], display=True, timeout=timeout)
    return result.returncode


def shortcut(wine: Wine) -> Path:
    return wine.user_folder("AppData", "Roaming", "Microsoft", "Windows", "Start Menu",
                            "Programs", f"{APP_NAME}.lnk")


def check_installed(wine: Wine, payload: Path, app_dir: Path) -> None:
    for source in payload.rglob("*"):
        if source.is_file():
            copy = app_dir / source.relative_to(payload)
            require(copy.is_file() and copy.read_bytes() == source.read_bytes(),
                    f"{copy} is missing or differs from the payload")
    require((app_dir / "unins000.exe").is_file(), "no uninstaller in the program folder")
    link = shortcut(wine)
    require(link.is_file(), f"no Start-menu shortcut at {link}")
    target = f"{APP_ID}.exe"
    data = link.read_bytes()
    require(target.encode() in data or target.encode("utf-16-le") in data,
            f"the shortcut does not point at {target}")
    require(not wine.user_folder("Desktop", f"{APP_NAME}.lnk").exists(),
            "a desktop shortcut although that task is unticked by default")
    require(wine.registry_value(UNINSTALL_KEY, "DisplayName") == APP_NAME,
            f"no uninstall entry {UNINSTALL_KEY}")


def uninstall(wine: Wine, app_dir: Path, log: Path) -> None:
    data_dir = wine.user_folder("AppData", "Local", APP_ID)
    (data_dir / "Logs").mkdir(parents=True)
    (data_dir / "settings.toml").write_text('[engine]\nkind = "echo"\n', encoding="utf-8")
    (data_dir / "Logs" / "moss-voice.log").write_text("kept\n", encoding="utf-8")
    result = wine.run([wine.windows_path(app_dir / "unins000.exe"), "/VERYSILENT",
                       "/SUPPRESSMSGBOXES", "/NORESTART", f"/LOG={wine.windows_path(log)}"],
                      display=True)
    require(result.returncode == 0, f"the uninstaller failed ({result.returncode})")
    require(not app_dir.exists(), f"{app_dir} is still there: {sorted(app_dir.rglob('*'))}")
    require(not shortcut(wine).exists(), "the Start-menu shortcut is still there")
    require(wine.registry_value(UNINSTALL_KEY, "DisplayName") is None,
            "the uninstall entry is still in the registry")
    require((data_dir / "settings.toml").is_file() and (data_dir / "Logs").is_dir(),
            f"the user's data folder {data_dir} was not kept")


BROKEN_PARTS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "last part missing": (lambda s: _unlink(s, -1), "is missing from"),
    "middle part missing": (lambda s: _unlink(s, 1), "is missing from"),
    "a part cut short": (lambda s: _truncate(s, 1), "was only partly downloaded"),
    "setup renamed": (lambda s: s.rename(s.with_name(f"{s.stem} (1).exe")),
                      "The setup program was renamed"),
}


def _unlink(setup: Path, index: int) -> Path:
    slice_paths(setup)[index].unlink()
    return setup


def _truncate(setup: Path, index: int) -> Path:
    path = slice_paths(setup)[index]
    os.truncate(path, path.stat().st_size // 2)
    return setup


def check_broken_parts(wine: Wine, setup: Path, scratch: Path) -> dict[str, float]:
    """Each broken download stops Setup at once, with exit code 1, its reason in the log and
    nothing installed."""
    seconds = {}
    for number, (case, (breaks, expected)) in enumerate(BROKEN_PARTS.items()):
        copy = scratch / f"broken-{number}"
        shutil.copytree(setup.parent, copy)
        broken_setup = breaks(copy / setup.name)
        log = scratch / f"broken-{number}.log"
        target = rf"C:\Temp\broken {number}"
        start = time.perf_counter()
        try:
            code = run_setup(wine, broken_setup, log, target, timeout=BROKEN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CheckFailedError(f"{case}: Setup did not stop (it waits for a disk?)") from None
        seconds[case] = round(time.perf_counter() - start, 1)
        text = log.read_text(encoding="utf-8-sig", errors="replace") if log.is_file() else ""
        require(code == 1, f"{case}: exit code {code}, expected 1")
        require("Setup cannot start" in text and expected in text,
                f"{case}: the log does not say why: {text[-2000:]}")
        require(not wine.unix_path(target).exists(), f"{case}: files were installed")
        print(f"  ok {case}: exit 1 in {seconds[case]} s", flush=True)
    return seconds


def show_the_disk_prompt(wine: Wine, payload: Path, scratch: Path) -> float:
    """The same installer without the parts check, last part missing: Setup asks for "Disk N"
    although the install is silent, and waits (stopped here after DISK_PROMPT_WAIT_S)."""
    text = ISS.read_text(encoding="utf-8")
    unchecked = ISS.with_name("installer-without-parts-check.iss")
    unchecked.write_text(text[:text.index("function InitializeSetup")], encoding="utf-8")
    try:
        setup = compile_installer(wine, payload, scratch / "out-unchecked", unchecked)
    finally:
        unchecked.unlink()
    slice_paths(setup)[-1].unlink()
    log = scratch / "unchecked.log"
    start = time.perf_counter()
    try:
        code = run_setup(wine, setup, log, r"C:\Temp\unchecked", timeout=DISK_PROMPT_WAIT_S)
    except subprocess.TimeoutExpired:
        text = log.read_text(encoding="utf-8-sig", errors="replace")
        require("Asking user for new disk" in text, f"it hung, but why? {text[-1500:]}")
        print(f"  ok without the parts check Setup waited for a disk until stopped after "
              f"{DISK_PROMPT_WAIT_S} s (log: 'Asking user for new disk')", flush=True)
        return round(time.perf_counter() - start, 1)
    raise CheckFailedError(f"without the parts check Setup ended with {code}: Inno Setup no "
                           "longer waits for a disk? Check whether the [Code] check is needed.")


def timed(label: str, action: Callable[[], object], times: dict[str, object]) -> object:
    start = time.perf_counter()
    value = action()
    times[label] = round(time.perf_counter() - start, 1)
    print(f"  ok {label}: {times[label]} s", flush=True)
    return value


def run_checks(scratch: Path, tools: dict[str, str],
               disk_prompt: bool = False) -> dict[str, object]:
    times: dict[str, object] = {}
    wine = Wine(scratch, tools)
    timed("wine prefix", lambda: wine.run(["wineboot", "--init"], timeout=600), times)
    payload = make_payload(scratch / "payload")
    setup = timed("compile", lambda: compile_installer(wine, payload, scratch / "out"), times)
    assert isinstance(setup, Path)
    times["slices"] = [p.stat().st_size for p in slice_paths(setup)]
    app_dir = wine.unix_path(INSTALL_DIR)
    code = timed("install", lambda: run_setup(wine, setup, scratch / "install.log", INSTALL_DIR),
                 times)
    require(code == 0, f"silent install exited {code}: "
            f"{(scratch / 'install.log').read_text(encoding='utf-8-sig', errors='replace')}")
    timed("installed files, shortcut, uninstall entry",
          lambda: check_installed(wine, payload, app_dir), times)
    timed("uninstall", lambda: uninstall(wine, app_dir, scratch / "uninstall.log"), times)
    times["broken parts"] = check_broken_parts(wine, setup, scratch)
    if disk_prompt:
        times["without the parts check"] = show_the_disk_prompt(wine, payload, scratch)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install-compiler", action="store_true",
                        help=f"npm install {INNO_PACKAGE} into build/innosetup when missing")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    parser.add_argument("--show-the-disk-prompt", action="store_true",
                        help="also build the installer without its parts check and show that "
                        f"Setup then waits for a disk (adds {DISK_PROMPT_WAIT_S} s)")
    args = parser.parse_args(argv)
    try:
        tools = find_tools(args.install_compiler)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="moss-voice-installer-check-") as temporary:
            scratch = args.keep or Path(temporary)
            scratch.mkdir(parents=True, exist_ok=True)
            times = run_checks(scratch, tools, args.show_the_disk_prompt)
    except ToolMissingError as missing:
        print(f"installer check skipped: {missing}")
        return SKIP
    except CheckFailedError as failure:
        print(f"installer check FAILED: {failure}")
        return 1
    times["total"] = round(time.perf_counter() - start, 1)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({"inno_setup": INNO_PACKAGE, "seconds": times}, indent=2) + "\n",
                      encoding="utf-8")
    print(f"installer check passed in {times['total']} s ({REPORT.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
