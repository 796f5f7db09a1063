"""The Windows installer compiled and exercised for real, under wine (``make installer-check``,
packaging/windows/installer_check.py): silent per-user install into a folder with a space and
an umlaut, files, Start-menu shortcut and uninstall entry, silent uninstall that keeps the
user's data, and a clear refusal, not a "Please insert Disk N" prompt, for every broken set of
installer parts. About a minute; skipped with the reason when wine (with wine32), xvfb-run or
Inno Setup's compiler (npm ``innosetup``, installed by ``make installer-check``) is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.packaging_helpers import ROOT

CHECK = ROOT / "packaging" / "windows" / "installer_check.py"
SKIP_STATUS = 3  # installer_check.SKIP


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="runs Inno Setup under wine")
def test_the_installer_installs_checks_and_uninstalls_under_wine() -> None:
    run = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True,
                         timeout=840, check=False)
    if run.returncode == SKIP_STATUS:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0, run.stdout + run.stderr
    for step in ("install", "uninstall", "last part missing", "middle part missing",
                 "a part cut short", "setup renamed"):
        assert f"ok {step}" in run.stdout, run.stdout
