"""``bench bundle`` on a stand-in bundle (the real one is timed by hand; BENCHMARKS.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app import APP_ID
from app.cli import main


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in is a shell script")
def test_bench_bundle_times_each_command_and_sizes_the_folder(tmp_path: Path) -> None:
    bundle = tmp_path / APP_ID
    (bundle / "_internal").mkdir(parents=True)
    (bundle / "_internal" / "payload.bin").write_bytes(b"x" * 5000)
    calls = tmp_path / "calls.txt"
    exe = bundle / APP_ID
    exe.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    exe.chmod(0o755)
    out = tmp_path / "bench.json"
    assert main(["bench", "bundle", "--bundle", str(bundle), "--repeat", "2", "--no-source",
                 "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["bundle_bytes"] == 5000 + exe.stat().st_size
    assert figures["bundle_files"] == 2
    assert set(figures["bundle_s"]) == {"version", "window", "doctor", "self-test"}
    assert figures["source_s"] == {}
    for timing in figures["bundle_s"].values():
        assert timing["runs"] == 2 and 0 < timing["min_s"] <= timing["median_s"] + 1e-9
    lines = calls.read_text().splitlines()
    assert lines.count("--version") == 2 and lines.count("--self-test") == 2
    assert lines.count("doctor --json") == 2
    assert sum(line.startswith("--screenshot ") and line.endswith("shot.png")
               for line in lines) == 2


def test_bench_bundle_says_how_to_build_a_missing_bundle(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    assert main(["bench", "bundle", "--bundle", str(tmp_path / "nothing")]) == 2
    assert "make package" in capsys.readouterr().err
