"""The real thing: build the one-folder bundle with PyInstaller (packaging/build.py, what
``make package`` runs), run its self-test offscreen, and check the Linux tarball.

Minutes, not seconds: marked ``package`` (skip with ``-m "not package"``) and run last
(tests/conftest.py). PyInstaller's cache stays in build/pyinstaller, so a second run is faster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import APP_ID, APP_NAME, __version__
from app.selftest import STEPS
from tests.packaging_helpers import ROOT, InnoScript

BUILD_TIMEOUT_S = 1800
pytestmark = [pytest.mark.package, pytest.mark.slow,
              pytest.mark.timeout(BUILD_TIMEOUT_S + 300),  # the first test builds the bundle
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the Linux bundle and tarball (Windows: see README)")]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Build once for this module; the ~1 GB of output is deleted afterwards."""
    dist = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}  # build.py sets it
    result = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "build.py"), "--dist-dir", str(dist),
         "--work-dir", str(ROOT / "build" / "pyinstaller")],
        env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-8000:]
    summary = json.loads((dist / f"{APP_ID}-build.json").read_text())
    summary["stdout"] = result.stdout
    yield summary
    shutil.rmtree(dist, ignore_errors=True)


def test_bundle_has_the_executable_and_passes_its_self_test(built: dict) -> None:
    bundle = Path(built["bundle"])
    exe = bundle / APP_ID
    assert exe.is_file() and os.access(exe, os.X_OK)
    report = built["self_test"]
    assert f"{APP_NAME} {__version__} self-test (bundle," in report
    for step in STEPS:
        assert f"ok   {step.name}" in report, report
    assert "offline; lifted for the model manager's download threads only" in report  # set at start
    assert "self-test passed" in report


def test_bundle_is_lean(built: dict) -> None:
    internal = Path(built["bundle"]) / "_internal"
    assert (internal / "silero_vad" / "data" / "silero_vad.onnx").is_file()
    assert not (internal / "silero_vad" / "__init__.py").exists()  # the file alone
    for absent in ("tests", "pytest", "_pytest", "mypy", "torch/test", "torch/include",
                   "PySide6/Qt/plugins/platforms/libqvnc.so", "libasound.so.2"):
        assert not (internal / absent).exists(), absent
    assert (internal / "torch" / "bin" / "torch_shm_manager").is_file()
    assert (internal / "libportaudio.so.2").is_file()  # audio without a system PortAudio
    assert built["trimmed_bytes"] > 50 * 2**20
    # installed on Windows under the longest user name, still under MAX_PATH (build.py)
    assert built["longest_windows_path"] < 260


def test_bundle_answers_version_without_a_display(built: dict) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = subprocess.run([str(Path(built["bundle"]) / APP_ID), "--version"], env=env,
                            capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == f"{APP_NAME} {__version__}"


def test_tarball_holds_the_folder_menu_entry_icon_and_install_script(built: dict) -> None:
    tarball = Path(built["tarball"])
    assert tarball.name.startswith(f"{APP_ID}-{__version__}-linux-")
    with tarfile.open(tarball) as archive:
        members = {m.name: m for m in archive.getmembers()}
    for name in (APP_ID, "moss-voice.desktop", "moss-voice.png", "install.sh",
                 "_internal/resources/icons/hicolor/256x256/apps/moss-voice.png",
                 "_internal/resources/samples/demo_conversation_16k.wav"):
        assert f"{APP_ID}/{name}" in members, name
    assert members[f"{APP_ID}/{APP_ID}"].mode & 0o111
    assert members[f"{APP_ID}/install.sh"].mode & 0o111


def test_windows_installer_script_points_at_this_bundle_layout(built: dict) -> None:
    iss = InnoScript()
    bundle = Path(built["bundle"])
    assert Path(iss.defines["BundleDir"].replace("\\", "/")).name == bundle.name
    assert Path(iss.defines["AppExeName"]).stem == APP_ID and (bundle / APP_ID).is_file()
