"""Commands leave nothing in the temp folder: 36 soak runs once filled 2 GiB of it, and a full
temp folder failed CI's download tests and bundle build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys
from app.paths import scratch_dir
folder = scratch_dir("moss-voice-test-")
(folder / "weights.bin").write_bytes(bytes(1024))
print(folder)
sys.exit(int(sys.argv[1]))
"""


def run_child(tmp_path: Path, exit_code: int) -> Path:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", CHILD, str(exit_code)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == exit_code, result.stderr
    folder = Path(result.stdout.strip())
    assert folder.parent == tmp_path and folder.name.startswith("moss-voice-test-")
    return folder


def test_a_scratch_folder_is_removed_when_the_process_exits(tmp_path: Path) -> None:
    assert not run_child(tmp_path, 0).exists()


def test_and_when_it_exits_with_an_error(tmp_path: Path) -> None:
    assert not run_child(tmp_path, 3).exists()
    assert list(tmp_path.iterdir()) == []


def test_no_module_makes_a_temp_folder_it_never_removes() -> None:
    """mkdtemp outside paths.scratch_dir is how the leaks came about."""
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "app").rglob("*.py")
                 if path.name != "paths.py" and re.search(r"\bmkdtemp\(", path.read_text())]
    assert offenders == []
