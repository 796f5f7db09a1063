"""``python -m app --self-test``: every step runs, failures are named, the exit code tells."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import selftest
from app.paths import SETTINGS_ENV
from app.selftest import SelfTestContext, Step, StepResult, run_self_test, run_steps


def passing(ctx: SelfTestContext) -> str:
    (ctx.work_dir / "touched").write_text("x")
    return "fine"


def failing(ctx: SelfTestContext) -> str:
    raise FileNotFoundError("no such thing")


def test_every_step_runs_and_a_failure_is_reported_with_its_reason(tmp_path: Path) -> None:
    reported: list[StepResult] = []
    steps = [Step("first", passing), Step("second", failing), Step("third", passing)]
    results = run_steps(steps, SelfTestContext(tmp_path), reported.append)
    assert reported == results
    assert [(r.name, r.ok) for r in results] == [("first", True), ("second", False),
                                                  ("third", True)]
    assert results[1].detail == "FileNotFoundError: no such thing"
    assert results[0].detail == "fine" and (tmp_path / "touched").is_file()


def test_exit_code_and_summary_name_the_failed_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_self_test([Step("fine step", passing), Step("broken step", failing)]) == 1
    out = capsys.readouterr().out
    assert "FAIL broken step" in out and "ok   fine step" in out
    assert out.strip().splitlines()[-1].startswith("self-test FAILED")
    assert out.strip().endswith(": broken step")
    assert run_self_test([Step("fine step", passing)]) == 0
    assert "self-test passed: 1 steps" in capsys.readouterr().out


def test_settings_are_a_throwaway_file_and_restored_afterwards(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []

    def look(ctx: SelfTestContext) -> str:
        seen.append(os.environ.get(SETTINGS_ENV))
        return ""

    monkeypatch.setenv(SETTINGS_ENV, "/somewhere/mine.toml")
    run_self_test([Step("look", look)])
    assert seen[0] is not None and seen[0] != "/somewhere/mine.toml"
    assert os.environ[SETTINGS_ENV] == "/somewhere/mine.toml"


def test_the_step_list_is_ordered_and_named() -> None:
    names = [step.name for step in selftest.STEPS]
    assert names[:5] == ["bundled resources", "offline mode", "voice activity model",
                         "audio library", "echo conversation"]
    assert "tiny language model" in names and len(set(names)) == len(names)


@pytest.mark.slow
def test_self_test_passes_from_source(isolated_home: Path) -> None:
    """The real steps through the real entry point (the bundle runs the same in the package
    test)."""
    env = {**os.environ, "MOSS_VOICE_HOME": str(isolated_home), "QT_QPA_PLATFORM": "offscreen"}
    result = subprocess.run([sys.executable, "-m", "app", "--self-test"], env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for step in selftest.STEPS:
        assert f"ok   {step.name}" in result.stdout
    assert "streamed = uncached" in result.stdout
    assert "self-test passed" in result.stdout
