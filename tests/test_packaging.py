"""The packaging files agree with each other and with the app: the PyInstaller spec, the Windows
Inno Setup script (which cannot be built here, so it is parsed and checked), the Linux menu
entry and its install script, the icons, and the runtime hook's offline flags."""

from __future__ import annotations

import ast
import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import APP_ID, APP_NAME
from app.vad import silero
from tests.packaging_helpers import ROOT, InnoScript, spec_call_keywords, spec_constants

LINUX = ROOT / "packaging" / "linux"
DESKTOP_ENTRY = ROOT / "resources" / "moss-voice.desktop"


@pytest.fixture(scope="module")
def iss() -> InnoScript:
    return InnoScript()


@pytest.fixture(scope="module")
def spec() -> dict[str, object]:
    return spec_constants()


# ---- the PyInstaller spec -------------------------------------------------------------------


def test_spec_names_the_executable_and_folder_after_the_app_id(spec: dict[str, object]) -> None:
    assert spec["EXE_NAME"] == "APP_ID"  # the name comes from app/__init__.py
    exe, collect = spec_call_keywords("EXE"), spec_call_keywords("COLLECT")
    assert isinstance(exe["name"], ast.Name) and exe["name"].id == "EXE_NAME"
    assert isinstance(collect["name"], ast.Name) and collect["name"].id == "APP_ID"
    # One folder: the libraries go to COLLECT's folder, not into the executable.
    assert isinstance(exe["exclude_binaries"], ast.Constant) and exe["exclude_binaries"].value


def test_spec_paths_exist(spec: dict[str, object]) -> None:
    for key in ("ENTRY_SCRIPT", "RUNTIME_HOOK", "ICON_WINDOWS", "RESOURCES"):
        assert (ROOT / str(spec[key])).exists(), key


def test_spec_bundles_silero_where_the_app_looks_for_it(spec: dict[str, object]) -> None:
    assert tuple(spec["SILERO_MODEL"]) == (*silero.PACKAGE_DATA, silero.MODEL_FILE)  # type: ignore[arg-type]


def test_spec_keeps_the_app_and_its_qt_platforms(spec: dict[str, object]) -> None:
    import fnmatch

    trimmed = list(spec["TRIMMED_PATHS"])  # type: ignore[call-overload]
    kept = list(spec["KEPT_PATHS"])  # type: ignore[call-overload]

    def dropped(path: str) -> bool:
        return (any(fnmatch.fnmatch(path, p) for p in trimmed)
                and not any(fnmatch.fnmatch(path, p) for p in kept))

    needed = ["PySide6/Qt/plugins/platforms/libqxcb.so",
              "PySide6/Qt/plugins/platforms/libqoffscreen.so",
              "PySide6/Qt/plugins/platforms/libqwayland.so",
              "PySide6/Qt/plugins/platforms/qwindows.dll",
              "PySide6/Qt/plugins/imageformats/libqsvg.so",
              "PySide6/Qt/plugins/iconengines/libqsvgicon.so",
              "torch/lib/libtorch_cpu.so", "torch/lib/torch_cpu.dll", "resources/icons/a.png",
              "torch/bin/torch_shm_manager",  # import torch looks for it
              "libportaudio.so.2", "libjack.so.0"]
    for path in needed:
        assert not dropped(path), path
    for path in ("torch/bin/protoc", "torch/test/Dict_test", "torch/lib/libtorchbind_test.so",
                 "PySide6/Qt/plugins/platforms/libqvnc.so", "libasound.so.2"):
        assert dropped(path), path
    excluded = list(spec["EXCLUDED_MODULES"])  # type: ignore[call-overload]
    assert not {"app", "torch", "PySide6", "onnxruntime", "numpy"} & set(excluded)


# ---- the Windows installer script -----------------------------------------------------------


def test_inno_script_agrees_with_the_app_and_the_spec(iss: InnoScript,
                                                      spec: dict[str, object]) -> None:
    assert iss.defines["AppName"] == APP_NAME
    assert iss.defines["AppExeName"] == f"{APP_ID}.exe"  # EXE(name=APP_ID) on Windows
    assert iss.resolve(iss.defines["BundleDir"]) == ROOT / "dist" / APP_ID  # COLLECT(name=APP_ID)
    assert iss.resolve(iss.defines["AppIcon"]) == ROOT / str(spec["ICON_WINDOWS"])
    assert iss.resolve(iss.setup["OutputDir"]) == ROOT / "dist"


def test_inno_script_and_spec_name_the_same_publisher(iss: InnoScript,
                                                       spec: dict[str, object]) -> None:
    assert iss.setup["AppPublisher"] == spec["PUBLISHER"]


def test_inno_script_paths_exist(iss: InnoScript) -> None:
    assert iss.resolve(iss.setup["SetupIconFile"]).is_file()
    sources = [e["Source"] for e in iss.entries("Files")]
    assert sources == [iss.defines["BundleDir"] + "\\*"]
    assert iss.resolve(iss.defines["BundleDir"]).parent == ROOT / "dist"  # built by build.py


def test_inno_script_takes_the_version_from_the_command_line(iss: InnoScript) -> None:
    assert "#ifndef AppVersion" in iss.text and "#error" in iss.text
    assert iss.setup["AppVersion"] == "{#AppVersion}"  # no version written in the script
    assert 'f"/DAppVersion={__version__}"' in (ROOT / "packaging" / "build.py").read_text()


def test_inno_script_has_shortcuts_uninstaller_and_disk_spanning(iss: InnoScript) -> None:
    setup = iss.setup
    assert setup["DiskSpanning"] == "yes"
    assert setup["Uninstallable"] == "yes"
    assert setup["UninstallDisplayIcon"] == "{app}\\moss-voice.exe"
    assert setup["ArchitecturesInstallIn64BitMode"] == "x64compatible"
    icons = {e["Name"]: e for e in iss.entries("Icons")}
    assert set(icons) == {f"{{autoprograms}}\\{APP_NAME}", f"{{autodesktop}}\\{APP_NAME}"}
    assert all(e["Filename"] == "{app}\\moss-voice.exe" for e in icons.values())
    desktop = icons[f"{{autodesktop}}\\{APP_NAME}"]
    assert desktop["Tasks"] == "desktopicon"
    assert [t["Name"] for t in iss.entries("Tasks")] == ["desktopicon"]


# ---- Linux: the menu entry and its install script --------------------------------------------


def read_desktop_entry(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  (keys are case-sensitive)
    parser.read_string(path.read_text())
    return dict(parser["Desktop Entry"])


def test_desktop_entry_names_the_app_its_command_and_icon() -> None:
    entry = read_desktop_entry(DESKTOP_ENTRY)
    assert entry["Type"] == "Application"
    assert entry["Name"] == APP_NAME
    assert entry["Exec"] == entry["TryExec"] == APP_ID
    assert entry["Icon"] == APP_ID
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")


def fake_unpacked_bundle(folder: Path) -> Path:
    """What the tarball unpacks to, with a stand-in executable (the real one is tested by the
    package test)."""
    bundle = folder / "unpacked with space" / APP_ID
    icons = bundle / "_internal" / "resources" / "icons"
    icons.mkdir(parents=True)
    subprocess.run(["cp", "-r", str(ROOT / "resources" / "icons" / "hicolor"), str(icons)],
                   check=True)
    exe = bundle / APP_ID
    exe.write_text("#!/bin/sh\necho moss-voice stand-in \"$@\"\n")
    exe.chmod(0o755)
    for source in (DESKTOP_ENTRY, LINUX / "install.sh"):
        (bundle / source.name).write_bytes(source.read_bytes())
    (bundle / "install.sh").chmod(0o755)
    return bundle


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell script")
def test_install_script_adds_and_removes_the_menu_entry(tmp_path: Path) -> None:
    bundle = fake_unpacked_bundle(tmp_path)
    home, data = tmp_path / "home", tmp_path / "home" / "data"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_DATA_HOME": str(data)}
    run = subprocess.run([str(bundle / "install.sh")], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    entry = read_desktop_entry(data / "applications" / "moss-voice.desktop")
    assert entry["Exec"] == f'"{bundle / APP_ID}"'  # quoted: the folder name has a space
    assert entry["TryExec"] == str(bundle / APP_ID)
    assert entry["Name"] == APP_NAME
    for size in (16, 48, 256, 512):
        assert (data / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "moss-voice.png").is_file()
    command = home / ".local" / "bin" / APP_ID
    assert subprocess.run([str(command), "--version"], capture_output=True, text=True,
                          check=True).stdout.strip() == "moss-voice stand-in --version"

    run = subprocess.run([str(bundle / "install.sh"), "--uninstall"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert not (data / "applications" / "moss-voice.desktop").exists()
    assert not command.exists() and not command.is_symlink()
    assert not list((data / "icons").rglob("moss-voice.png"))
    assert (bundle / APP_ID).is_file()  # the program itself stays


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell script")
def test_install_script_refuses_a_folder_without_the_program(tmp_path: Path) -> None:
    bundle = fake_unpacked_bundle(tmp_path)
    (bundle / APP_ID).unlink()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    run = subprocess.run([str(bundle / "install.sh")], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 1
    assert "run this script from the unpacked folder" in run.stderr
    assert not (tmp_path / "home" / ".local").exists()


# ---- the runtime hook -----------------------------------------------------------------------


def run_hook(env: dict[str, str]) -> dict[str, str | None]:
    """Run the runtime hook as the bundle does (before the app) and report the flags."""
    code = ("import os, runpy, json\n"
            f"runpy.run_path({str(ROOT / 'packaging/hooks/rth_moss_voice.py')!r})\n"
            "import huggingface_hub.constants as c\n"
            "names = ['HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE', 'HF_HUB_DISABLE_TELEMETRY']\n"
            "flags = {n: os.environ.get(n) for n in names}\n"
            "flags['hub_offline'] = str(c.HF_HUB_OFFLINE)\n"
            "print(json.dumps(flags))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    result = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                            capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


def test_runtime_hook_turns_hugging_face_offline() -> None:
    flags = run_hook({})
    assert flags == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                     "HF_HUB_DISABLE_TELEMETRY": "1", "hub_offline": "True"}


def test_runtime_hook_keeps_a_flag_the_person_set() -> None:
    flags = run_hook({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"})
    assert flags["HF_HUB_OFFLINE"] == "0" and flags["hub_offline"] == "False"
    assert flags["HF_HUB_DISABLE_TELEMETRY"] == "1"


def system_portaudio_file() -> Path | None:
    """The file of the system PortAudio this process loads (Linux), if there is one."""
    try:
        import sounddevice  # noqa: F401
    except OSError:
        return None
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libportaudio" in line:
            return Path(line.split()[-1])
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux library lookup")
def test_runtime_hook_points_sounddevice_at_the_bundled_portaudio(tmp_path: Path) -> None:
    """Without the hook, find_library searches only the system, so a machine without
    libportaudio2 would never load the bundle's copy."""
    system = system_portaudio_file()
    if system is None:
        pytest.skip("no system PortAudio to stand in for the bundled copy")
    code = ("import sys, runpy, ctypes.util\n"
            f"sys._MEIPASS = {str(tmp_path)!r}\n"
            f"runpy.run_path({str(ROOT / 'packaging/hooks/rth_moss_voice.py')!r})\n"
            "import sounddevice\n"
            "print(sounddevice._libname, ctypes.util.find_library('c') is not None)")

    def loaded_library() -> list[str]:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=True).stdout.split()

    bundled = tmp_path / "libportaudio.so.2"
    assert loaded_library() == ["libportaudio.so.2", "True"]  # no copy in the bundle: system's
    shutil.copy(system, bundled)
    assert loaded_library() == [str(bundled), "True"]  # other libraries still found as before


# ---- silero's model file in a bundle -----------------------------------------------------------


def test_silero_model_is_found_in_a_bundle_folder(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bundled = tmp_path.joinpath(*silero.PACKAGE_DATA, silero.MODEL_FILE)
    bundled.parent.mkdir(parents=True)
    bundled.write_bytes(silero.silero_model_path().read_bytes())
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    monkeypatch.setattr(silero.importlib.util, "find_spec", lambda name: None)  # not importable
    assert silero.silero_model_path() == bundled
    bundled.unlink()
    with pytest.raises(silero.VadModelMissingError, match="silero-vad"):
        silero.silero_model_path()
